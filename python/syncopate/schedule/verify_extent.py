"""Run-time extents: the verifier's checks of chunks whose valid rows are counted on the device.

A chunk may carry ``extra["valid_rows"] = {"tensor": CNT, "index": i}``: of its (static)
region only the first ``clamp(CNT[i], 0, rows)`` rows along dim 0 hold data; the count is an
int32 element of a 1-d schedule tensor that the ranks compute or exchange at run time (MoE
dispatch: tokens routed to an expert, docs/moe.md). Everything else about the chunk is static:
its region is the capacity, its flag counts the chunk once, and every check of
:mod:`.verify` (ordering, races, delivery, final placements) reasons about the whole region --
which is sound whether the runtime copies the whole region (the ``sm``/``ce`` lowerings today)
or only the valid prefix (the emulator, which also marks the rows past the count as never
delivered, so a kernel that reads them is reported as reading before arrival).

What this module proves in addition, so that copying only the prefix is well defined:

* the annotation is well formed: the count tensor exists, is 1-d int32, and ``index`` is in it;
  the chunk is a copy (a ``sum`` over a prefix would leave the destination's rows past the
  count half-summed) and does not move the count tensor itself;
* the **source holds the count whenever it holds the data**: the copier reads ``CNT[i]`` on
  the chunk's source rank, next to the rows it copies (a pusher reads its own memory, a puller
  reads the peer's, as it does for the data), so the source must hold it from a non-partial
  initial placement, or from a copy of ``CNT`` into the source that happens before the chunk
  (``after``, which the runtime waits on for chunks into the source) -- otherwise the copier
  would read a count that has not arrived;
* the **destination ends up holding the count** (its final placement of ``CNT`` covers
  ``index``): its kernel must read the count to know which rows are data;
* **no chunk forwards the rows without the count**: a chunk that reads the region from the
  destination after it arrived must move the same region with the same ``valid_rows``,
  otherwise it would pass padding on as data.
"""

from __future__ import annotations

from typing import Callable, Mapping

from .chunk import Chunk


def valid_rows(chunk: Chunk) -> tuple[str, int] | None:
    """``(count tensor, index)`` of a chunk with a run-time extent, else None (malformed
    annotations are reported by :func:`extent_problems`)."""
    v = chunk.extra.get("valid_rows")
    if isinstance(v, Mapping) and isinstance(v.get("tensor"), str) \
            and isinstance(v.get("index"), int) and not isinstance(v.get("index"), bool):
        return v["tensor"], v["index"]
    return None


def _holds_initially(schedule, rank: int, tensor: str, index: int) -> bool:
    return any(p.rank == rank and not p.partial and p.region.offsets[0] <= index < p.region.stops[0]
               for p in schedule.tensors[tensor].initial)


def extent_problems(schedule, chunks: Mapping[int, Chunk],
                    before: Callable[[int, int], bool]) -> list[str]:
    """Every problem with the ``valid_rows`` annotations (see the module docstring)."""
    problems: list[str] = []
    annotated = [c for c in chunks.values() if "valid_rows" in c.extra]
    for c in annotated:
        where = c.describe()
        vr = valid_rows(c)
        if vr is None:
            problems.append(f"{where}: valid_rows must be {{\"tensor\": NAME, \"index\": INT}}, "
                            f"got {c.extra['valid_rows']!r}")
            continue
        cnt, idx = vr
        spec = schedule.tensors.get(cnt)
        if spec is None:
            problems.append(f"{where}: valid_rows names tensor {cnt!r}, which the schedule does "
                            f"not have; add the count tensor (1-d int32)")
            continue
        if len(spec.shape) != 1 or spec.dtype != "int32":
            problems.append(f"{where}: valid_rows' tensor {cnt} must be 1-d int32 (one count "
                            f"per chunk), got {spec.dtype} {list(spec.shape)}")
            continue
        if not 0 <= idx < spec.shape[0]:
            problems.append(f"{where}: valid_rows index {idx} is outside {cnt} (size "
                            f"{spec.shape[0]})")
            continue
        if cnt == c.tensor:
            problems.append(f"{where}: a chunk of the count tensor {cnt} cannot have a run-time "
                            f"extent itself: counts travel whole")
            continue
        if c.reduce != "none":
            problems.append(f"{where}: a sum cannot have a run-time extent (the rows past the "
                            f"count would be left half-reduced); make it a copy or drop "
                            f"valid_rows")
            continue
        src = c.src
        if not _holds_initially(schedule, src, cnt, idx) and not any(
                a.tensor == cnt and a.dst == src and a.reduce == "none"
                and a.region.offsets[0] <= idx < a.region.stops[0] and before(a.id, c.id)
                for a in chunks.values()):
            problems.append(f"{where}: the copier reads {cnt}[{idx}] on the source rank {src} "
                            f"to know how many rows to copy, but rank {src} neither holds it "
                            f"initially nor receives it in a chunk ordered before this one; "
                            f"give rank {src} the count initially, or add the {cnt} chunk that "
                            f"delivers it to this chunk's after")
        if not any(p.rank == c.dst and p.region.offsets[0] <= idx < p.region.stops[0]
                   for p in spec.final):
            problems.append(f"{where}: its destination rank {c.dst} must end with {cnt}[{idx}] "
                            f"(its kernel reads the count to know which rows are data); add it "
                            f"to rank {c.dst}'s final placement of {cnt} and deliver it")
        for b in chunks.values():
            if b.id == c.id or b.tensor != c.tensor or b.src != c.dst or not before(c.id, b.id):
                continue
            if not b.intersects(c.lo, c.hi):
                continue
            if b.region != c.region or valid_rows(b) != vr:
                problems.append(f"{where}: chunk {b.id} forwards its rows from rank {c.dst} "
                                f"without the same region and valid_rows ({cnt}[{idx}]), so "
                                f"it would pass padding on as data; forward the whole chunk "
                                f"with the same valid_rows")
    return problems
