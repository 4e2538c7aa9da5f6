"""The schedule verifier: symbolic execution of a chunk schedule over regions.

:func:`verify` proves that a schedule delivers what its ``final`` placements promise, without
races, and raises :class:`~syncopate.errors.ScheduleError` listing *every* problem it finds,
each naming the chunk and the region and saying what to change.

What a rank holds
-----------------
For every rank and tensor the verifier keeps a map from disjoint boxes to a *contribution set*:
the ranks whose contribution to the value that rank holds there.  The complete value of a
tensor is the sum of the contributions of all ``W`` ranks, so:

* a non-partial initial placement holds the complete value: the full set ``{0..W-1}``;
* a partial initial placement of rank ``r`` holds only its own contribution: ``{r}``;
* anywhere else a rank holds nothing: the empty set.

Ordering
--------
Each chunk has a ``step`` and lives in the plans of two ranks, its source and its destination.

* **Step rule.**  On every rank, chunks *arriving* at a lower step come before chunks *leaving*
  at a higher step when their regions overlap: if ``dst(a) == src(c)``, ``a`` and ``c`` move the
  same tensor, their regions overlap and ``step(a) < step(c)``, then ``a`` happens before
  ``c``.  That is "a rank forwards at step ``s`` what it received before step ``s``".  Chunks of
  the same step are concurrent.  Steps are local to the two ranks of a chunk: the steps of
  chunks that share no rank are never compared.
* **after.**  ``a in c.after`` means ``a`` happens before ``c`` (``c`` starts only once ``a``
  has arrived).  It states cross-rank or same-step dependencies explicitly, and lets the
  runtime wait on exactly those chunks.
* **Happens-before** is the transitive closure of both.  :meth:`Schedule.dependencies` gives
  the direct edges of a chunk; the runtime waits on their flags.
* **Program order.**  A rank runs the chunks it executes in step order; which rank executes a
  chunk is :func:`.execution.executor` (push: the source, pull: the destination, except that
  the ``sm``/``nvshmem`` comm programs run ``sum`` chunks on the destination), and the order
  is checked for each backend's execution model.  Program order only orders when chunks
  *start*, so it gives no happens-before, but a dependency that points against it can
  deadlock a sequential executor; a cycle through dependencies and program order is reported
  like any dependency cycle.

Reading and writing
-------------------
A chunk reads its region on its source rank.  It may only read what the source holds from its
initial placement or from chunks that happen before it, and any chunk writing an overlapping
region of the source rank must be ordered with it (before or after), otherwise the read races.
Two chunks writing overlapping regions of the same rank must be ordered too, except two
``sum`` chunks, which commute (the backend accumulates them atomically or in slots).

* ``reduce='none'`` copies: the source must hold the complete value over the whole region, and
  the destination must not hold the complete value anywhere in it yet (double delivery); a
  partial the destination held there is overwritten (superseded by the complete value).
* ``reduce='sum'`` adds: the source must hold something over the whole region; the destination
  must hold something too, from its initial placements or chunks that happen before this one
  (else the sum would add to uninitialized memory: use a copy); the two contribution sets must
  be disjoint (else some rank's partial is counted twice); the destination's set becomes their
  union.

At the end every final region must be complete (full set) on its rank, and every chunk's
region must be kept (inside its destination's final placement) or forwarded (read from the
destination by a chunk that happens after it): anything else is dead data.  Structural problems
(unknown tensors or ranks, out-of-bounds regions, dims that do not match, ``src == dst``,
duplicate or non-dense ids, overlapping placements) are reported first; when there are any,
the symbolic execution is skipped since it could not be trusted, and likewise after a
dependency cycle (there is no order to execute in).  Otherwise every race, execution, final
placement and dead-data problem is listed, one per chunk and kind; a copy whose source lacked
the data is assumed to deliver it anyway, so one missing chunk is reported once rather than at
every later hop.

The analysis is linear in the number of chunks times the number of boxes a rank holds, plus a
pass over pairs of chunks that meet on a rank: 8 ranks x 64 chunks each take milliseconds.
The structural checks live in :mod:`.verify_structure`, the ordering and cycle reports of the
dependency graph in :mod:`.verify_graph`; this module runs them and does the rest.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations, groupby
from dataclasses import dataclass, field

from .. import backends
from .execution import program_order
from .verify_extent import extent_problems
from .chunk import Chunk
from .geometry import (Region, box_difference, box_intersection, box_subtract, boxes_overlap,
                       coalesce_boxes, format_ranks)
from .verify_graph import cycle_problems, topological
from .verify_structure import structure_problems

__all__ = ["analyze", "Analysis"]


def _order_models() -> list:
    """One backend per execution model whose program order the verifier checks -- the first
    registered of each ``sum_on_destination`` (who executes a ``sum`` chunk): nvshmem runs as
    sm does."""
    first: dict = {}
    for b in backends.specs():
        first.setdefault(b.sum_on_destination, b)
    return list(first.values())


@dataclass
class Analysis:
    """What :func:`analyze` finds.  When ``problems`` is not empty the other fields may be
    incomplete (no execution order for a cyclic schedule, for instance)."""

    problems: list[str]
    #: chunk ids in the verifier's execution order: topological in happens-before and program
    #: order, ties broken by (step, id)
    order: list[int] = field(default_factory=list)
    #: direct happens-before predecessors of each chunk: its after list + the step rule's
    deps: dict[int, tuple[int, ...]] = field(default_factory=dict)
    #: all happens-before predecessors of each chunk, as a bit set over chunk ids
    hb: dict[int, int] = field(default_factory=dict)
    #: (region, contribution set as a rank bit mask) that each chunk delivered
    delivered: dict[int, list[tuple[Region, int]]] = field(default_factory=dict)
    #: the regions each chunk made complete on its destination
    completed: dict[int, list[Region]] = field(default_factory=dict)

    def happens_before(self, a: int, b: int) -> bool:
        """Whether chunk ``a`` happens before chunk ``b``."""
        return bool(self.hb.get(b, 0) >> a & 1)


def _regions(boxes) -> list[Region]:
    return [Region._raw(lo, hi) for lo, hi in coalesce_boxes((b[0], b[1]) for b in boxes)]


def _fmt_regions(regions: list[Region], limit: int = 4) -> str:
    text = "; ".join(str(r) for r in regions[:limit])
    if len(regions) > limit:
        text += f"; and {len(regions) - limit} more"
    return text


# --------------------------------------------------------------------------------------------
# box maps: list of (lo, hi, mask, writer); writer = chunk id, or -1 for an initial placement

def _query(boxes, lo, hi):
    """The pieces of ``[lo, hi)`` with what they hold; gaps hold mask 0, writer None."""
    hits = [i + (m, w) for blo, bhi, m, w in boxes
            if (i := box_intersection(blo, bhi, lo, hi)) is not None]
    return hits + [g + (0, None) for g in box_difference((lo, hi), [h[:2] for h in hits])]


def _update(boxes, lo, hi, fn):
    """Apply ``fn(mask, writer) -> (mask, writer)`` to every piece of ``[lo, hi)``."""
    out = []
    hits = []
    for b in boxes:
        blo, bhi, m, w = b
        i = box_intersection(blo, bhi, lo, hi)
        if i is None:
            out.append(b)
            continue
        out.extend((plo, phi, m, w) for plo, phi in box_subtract(blo, bhi, lo, hi))
        out.append(i + fn(m, w))
        hits.append(i)
    out.extend(g + fn(0, None) for g in box_difference((lo, hi), hits))
    return out


def _holding(mask: int, full: int) -> str:
    if mask == 0:
        return "nothing"
    if mask == full:
        return "the complete value"
    return f"only the partial contributions {format_ranks(mask)}"


def _origin(writer) -> str:
    return "initially" if writer == -1 else f"from chunk {writer}"


# --------------------------------------------------------------------------------------------

def analyze(schedule) -> Analysis:
    """Run every check and return what was found (``verify`` raises on ``problems``; the
    compiler and the cost model read ``order``, ``deps``, ``hb`` and ``completed``)."""
    problems = structure_problems(schedule)
    if problems:
        return Analysis(problems)

    W = schedule.world_size
    FULL = (1 << W) - 1
    chunks = {c.id: c for c in schedule.chunks}
    tensors = schedule.tensors
    incoming: dict[tuple[int, str], list[int]] = defaultdict(list)
    outgoing: dict[tuple[int, str], list[int]] = defaultdict(list)
    for c in schedule.chunks:
        incoming[(c.dst, c.tensor)].append(c.id)
        outgoing[(c.src, c.tensor)].append(c.id)
    boxes = {cid: c.region.box for cid, c in chunks.items()}

    # For each chunk, the chunks that write an overlapping region of its source rank: both the
    # step rule and the race check look only at these pairs.
    overlapping_writers: dict[int, list[int]] = {
        cid: [w for w in incoming[(c.src, c.tensor)] if boxes_overlap(*boxes[w], *boxes[cid])]
        for cid, c in chunks.items()}

    # ---- dependency graph ---------------------------------------------------------------------
    deps: dict[int, tuple[int, ...]] = {}
    edge_reason: dict[tuple[int, int], str] = {}
    succ: dict[int, set[int]] = defaultdict(set)
    for cid, c in chunks.items():
        d = set()
        for a in c.after:
            d.add(a)
            edge_reason[(a, cid)] = f"chunk {cid} lists {a} in after"
        for a in overlapping_writers[cid]:
            if chunks[a].step < c.step:
                d.add(a)
                edge_reason.setdefault(
                    (a, cid), f"chunk {a} arrives at rank {c.src} at step {chunks[a].step}, "
                              f"before chunk {cid} leaves it at step {c.step}")
        deps[cid] = tuple(sorted(d))
        for a in d:
            succ[a].add(cid)
    # Program order of each executing rank: every chunk of one step before those of the next.
    # Who executes a chunk depends on the backend (execution.py: sm runs sum chunks on their
    # destination, ce on the side their mode names), so the order is checked for each
    # execution model: a schedule must be deadlock-free on every backend it may run on.
    order: list[int] = []
    for backend in _order_models():
        succ_b: dict[int, set[int]] = defaultdict(set, {a: set(ss) for a, ss in succ.items()})
        reasons = dict(edge_reason)
        for rank, run in program_order(schedule, backend).items():
            steps = [(s, [c.id for c in g]) for s, g in groupby(run, key=lambda c: c.step)]
            for (s0, first), (s1, then) in zip(steps, steps[1:]):
                for a in first:
                    for b in then:
                        if b not in succ_b[a]:
                            succ_b[a].add(b)
                            reasons[(a, b)] = (f"on the {backend.name} backend rank {rank} runs "
                                               f"chunk {a} (step {s0}) before chunk {b} "
                                               f"(step {s1})")
        order_b = topological(chunks, succ_b)
        if len(order_b) < len(chunks):
            return Analysis(cycle_problems(chunks, succ_b, set(chunks) - set(order_b), reasons),
                            deps=deps)
        order = order or order_b

    hb: dict[int, int] = {}
    for cid in order:
        m = 0
        for a in deps[cid]:
            m |= hb[a] | (1 << a)
        hb[cid] = m

    def before(a: int, b: int) -> bool:
        return bool(hb[b] >> a & 1)

    # ---- races --------------------------------------------------------------------------------
    racy_readers: set[int] = set()
    racy_writers: set[int] = set()
    fix = ("order them: give chunk {r} a step greater than chunk {w}'s ({sw}) or add {w} to "
           "chunk {r}'s after to read what chunk {w} delivers; or add {r} to chunk {w}'s after "
           "to read before chunk {w} overwrites it")
    for (rank, tname), writers in sorted(incoming.items()):
        readers = outgoing.get((rank, tname), [])
        for r in readers:
            for w in overlapping_writers[r]:
                if not before(w, r) and not before(r, w):
                    inter = Region._raw(*box_intersection(*boxes[r], *boxes[w]))
                    racy_readers.add(r)
                    problems.append(
                        f"{chunks[r].describe()}: reads {inter} of {tname} on rank {rank} while "
                        f"{chunks[w].describe()} writes it there, and neither is ordered before "
                        f"the other (the data read is undefined): "
                        + fix.format(r=r, w=w, sw=chunks[w].step))
        for w1, w2 in combinations(writers, 2):
            if not boxes_overlap(*boxes[w1], *boxes[w2]) or before(w1, w2) or before(w2, w1):
                continue
            c1, c2 = chunks[w1], chunks[w2]
            if c1.reduce == "sum" and c2.reduce == "sum":
                continue  # sums commute
            inter = Region._raw(*box_intersection(*boxes[w1], *boxes[w2]))
            racy_writers.update((w1, w2))
            if c1.reduce == "none" and c2.reduce == "none":
                problems.append(
                    f"{c2.describe()}: double delivery: it and {c1.describe()} both deliver "
                    f"{inter} of {tname} to rank {rank}; drop one of them or shrink its "
                    f"region to what the other does not deliver")
            else:
                problems.append(
                    f"{c2.describe()}: writes {inter} of {tname} on rank {rank} concurrently "
                    f"with {c1.describe()} (a copy and a sum do not commute): order them with "
                    f"steps or after")

    # ---- symbolic execution -------------------------------------------------------------------
    state: dict[tuple[int, str], list] = defaultdict(list)
    for name, t in tensors.items():
        for p in t.initial:
            lo, hi = p.region.box
            state[(p.rank, name)].append((lo, hi, (1 << p.rank) if p.partial else FULL, -1))
    delivered: dict[int, list[tuple[Region, int]]] = {}
    completed: dict[int, list[Region]] = {}

    for cid in order:
        c = chunks[cid]
        lo, hi = boxes[cid]
        src_key, dst_key = (c.src, c.tensor), (c.dst, c.tensor)
        src_pieces = _query(state[src_key], lo, hi)
        need_full = c.reduce == "none"
        bad = [p for p in src_pieces if (p[2] != FULL if need_full else p[2] == 0)]
        if bad and cid not in racy_readers:
            problems.extend(_read_problems(c, bad, FULL, chunks, incoming[src_key], before))
        dst_pieces = _query(state[dst_key], lo, hi)
        if c.reduce == "none":
            # Assume the copy delivers the complete value even when its source lacked it, so
            # that one missing chunk is reported once rather than at every later hop.
            dup = [p for p in dst_pieces if p[2] == FULL]
            if dup and cid not in racy_writers:
                for writer, group in _group(dup, key=lambda p: p[3]):
                    problems.append(
                        f"{c.describe()}: double delivery: rank {c.dst} already holds "
                        f"{_fmt_regions(_regions(group))} of {c.tensor} complete "
                        f"({_origin(writer)}); drop the chunk or shrink its region to what "
                        f"rank {c.dst} lacks")
            completed[cid] = _regions([p for p in dst_pieces if p[2] != FULL])
            delivered[cid] = [(c.region, FULL)]
            state[dst_key] = _update(state[dst_key], lo, hi, lambda m, w, _c=cid: (FULL, _c))
            continue
        # sum
        covers = [p.region.box for p in tensors[c.tensor].initial if p.rank == c.dst]
        covers += [boxes[w] for w in incoming[dst_key] if before(w, cid)]
        empty = box_difference((lo, hi), covers)
        if empty:
            problems.append(
                f"{c.describe()}: adds into {_fmt_regions(_regions(empty))} of {c.tensor} on rank "
                f"{c.dst}, which holds nothing there when the chunk runs (no initial placement "
                f"and no delivery ordered before it): the sum would add to uninitialized memory; "
                f"use reduce 'none' to copy, or give rank {c.dst} a partial initial placement "
                f"there")
        doubles = []
        new_state = state[dst_key]
        got = []
        for slo, shi, smask, _ in src_pieces:
            if smask == 0:
                continue
            got.append((Region._raw(slo, shi), smask))
            for dlo, dhi, dmask, dw in _query(new_state, slo, shi):
                if dmask & smask:
                    doubles.append((dlo, dhi, dmask, smask))
            new_state = _update(new_state, slo, shi, lambda m, w, _s=smask, _c=cid: (m | _s, _c))
        if doubles and cid not in racy_writers:
            for (dmask, smask), group in _group(doubles, key=lambda p: (p[2], p[3])):
                problems.append(
                    f"{c.describe()}: double counting: it adds contributions {format_ranks(smask)} "
                    f"into {_fmt_regions(_regions(group))} of {c.tensor} on rank {c.dst}, which "
                    f"already holds contributions {format_ranks(dmask)}: the partials of ranks "
                    f"{format_ranks(smask & dmask)} would be added twice; drop the chunk or send "
                    f"a region whose contributions rank {c.dst} does not hold yet")
        before_full = [p for p in dst_pieces if p[2] != FULL]
        completed[cid] = _regions([i for p in _query(new_state, lo, hi) if p[2] == FULL
                                   for q in before_full
                                   if (i := box_intersection(p[0], p[1], q[0], q[1]))])
        delivered[cid] = got
        state[dst_key] = new_state

    # ---- final placements ---------------------------------------------------------------------
    for name, t in tensors.items():
        for i, p in enumerate(t.final):
            lo, hi = p.region.box
            bad = [q for q in _query(state[(p.rank, name)], lo, hi) if q[2] != FULL]
            if not bad:
                continue
            parts = [f"{_fmt_regions(_regions(group))} (it holds {_holding(mask, FULL)} there)"
                     for mask, group in _group(bad, key=lambda q: q[2])]
            problems.append(
                f"tensor {name}: final placement not met: rank {p.rank} must end with "
                f"{p.region} complete (final[{i}]) but lacks " + "; ".join(parts)
                + f"; add chunks that deliver the complete value to rank {p.rank}, or remove "
                  f"the region from its final placement")

    # ---- dead deliveries ----------------------------------------------------------------------
    for cid in order:
        c = chunks[cid]
        covers = [p.region.box for p in tensors[c.tensor].final if p.rank == c.dst]
        covers += [boxes[r] for r in outgoing[(c.dst, c.tensor)] if before(cid, r)]
        dead = box_difference(boxes[cid], covers)
        if dead:
            problems.append(
                f"{c.describe()}: delivers {_fmt_regions(_regions(dead))} to rank {c.dst}, which "
                f"neither keeps it (not in rank {c.dst}'s final placement of {c.tensor}) nor "
                f"forwards it (no chunk ordered after this one reads it from rank {c.dst}); "
                f"drop the chunk, shrink its region, or add the region to rank {c.dst}'s final "
                f"placement")

    # ---- run-time extents (verify_extent.py: chunks whose valid rows are counted on device) -
    problems.extend(extent_problems(schedule, chunks, before))

    return Analysis(problems, order=order, deps=deps, hb=hb, delivered=delivered,
                    completed=completed)


def _group(items, key):
    groups: dict = {}
    for it in items:
        groups.setdefault(key(it), []).append(it)
    return list(groups.items())


def _read_problems(c: Chunk, bad, FULL, chunks, writers, before) -> list[str]:
    out = []
    for mask, group in _group(bad, key=lambda p: p[2]):
        regions = _regions(group)
        what = f"{_fmt_regions(regions)} of {c.tensor}"
        if c.reduce == "none" and mask:
            msg = (f"{c.describe()}: rank {c.src} holds {_holding(mask, FULL)} in {what} when "
                   f"the chunk reads it, but a copy (reduce 'none') needs the complete value: "
                   f"use reduce 'sum' to add the partial into the destination's, or order the "
                   f"chunks that complete it before this one")
        else:
            msg = (f"{c.describe()}: rank {c.src} does not hold {what} when the chunk reads it "
                   f"(it forwards data its source does not hold yet)")
        later = [w for w in writers if w != c.id and not before(w, c.id) and any(
            box_intersection(*chunks[w].region.box, *r.box) for r in regions)]
        if later:
            w = later[0]
            msg += (f"; chunk {w} delivers it to rank {c.src} only after this chunk runs "
                    f"(step {chunks[w].step}): give chunk {c.id} a step greater than "
                    f"{chunks[w].step} and add {w} to its after, and make sure nothing orders "
                    f"chunk {c.id} before chunk {w}")
        elif not mask:
            msg += (f"; no chunk delivers it to rank {c.src} and rank {c.src} does not hold it "
                    f"initially: read it from a rank that holds it, or deliver it to rank "
                    f"{c.src} first")
        out.append(msg)
    return out

