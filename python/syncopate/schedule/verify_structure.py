"""The verifier's first phase: structural problems of a schedule, found without executing it.

Unknown tensors or ranks, regions out of bounds or with the wrong number of dims, ``src ==
dst``, duplicate or non-dense chunk ids, ``after`` entries naming no chunk, overlapping or
partial final placements.  :func:`~.verify.analyze` runs this first and skips the symbolic
execution when it finds anything (that execution could not be trusted).  Split from
:mod:`.verify` so that the verifier's module holds the ordering semantics and the symbolic
execution only.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import combinations

from .chunk import Chunk
from .geometry import Region

__all__ = ["region_problems", "structure_problems"]


def region_problems(region: Region, shape: tuple[int, ...], tensor: str) -> list[str]:
    """Why ``region`` does not fit a tensor ``tensor`` of ``shape`` (empty: it fits)."""
    if region.ndim != len(shape):
        return [f"region {region} has {region.ndim} dims but tensor {tensor} has {len(shape)} "
                f"(shape {list(shape)}); give one offset and one size per dim"]
    out = []
    for d, (o, s, n) in enumerate(zip(region.offsets, region.sizes, shape)):
        if o + s > n:
            out.append(f"region {region} is out of bounds of tensor {tensor} (shape "
                       f"{list(shape)}): dim {d} ends at {o + s} > {n}; make offsets[{d}] + "
                       f"sizes[{d}] <= {n}")
    return out


def structure_problems(schedule) -> list[str]:
    """Every structural problem of ``schedule``: placements, chunk ids, chunk fields."""
    W = schedule.world_size
    problems: list[str] = []
    for name, t in schedule.tensors.items():
        for kind in ("initial", "final"):
            placements = getattr(t, kind)
            good: list[tuple[int, object]] = []
            for i, p in enumerate(placements):
                where = f"tensor {name}: {kind}[{i}] (rank {p.rank}, {p.region})"
                ok = True
                if p.rank >= W:
                    problems.append(f"{where}: rank {p.rank} does not exist in a world of {W} "
                                    f"ranks; use a rank in 0..{W - 1}")
                    ok = False
                for msg in region_problems(p.region, t.shape, name):
                    problems.append(f"{where}: {msg}")
                    ok = False
                if kind == "final" and p.partial:
                    problems.append(f"{where}: a final placement cannot be partial (the schedule "
                                    f"must leave complete values); drop \"partial\" or add the "
                                    f"chunks that reduce it and keep the result")
                    ok = False
                if ok:
                    good.append((i, p))
            for (i, p), (j, q) in combinations(good, 2):
                if p.rank == q.rank and (inter := p.region.intersection(q.region)) is not None:
                    problems.append(f"tensor {name}: {kind}[{i}] and {kind}[{j}] of rank {p.rank} "
                                    f"overlap in {inter}; a rank holds each element once: make "
                                    f"the placements disjoint")
    ids: dict[int, list[Chunk]] = defaultdict(list)
    for c in schedule.chunks:
        ids[c.id].append(c)
    for cid, cs in sorted(ids.items()):
        if len(cs) > 1:
            problems.append(f"chunk id {cid} is used by {len(cs)} chunks ("
                            + "; ".join(c.describe() for c in cs)
                            + "): give every chunk its own id (ids are 0..C-1)")
    n = len(schedule.chunks)
    if all(len(cs) == 1 for cs in ids.values()) and set(ids) != set(range(n)):
        missing = sorted(set(range(n)) - set(ids))
        extra = sorted(set(ids) - set(range(n)))
        problems.append(f"chunk ids must be exactly 0..{n - 1} (they index the flag array): "
                        f"missing {missing[:8]}, out of range {extra[:8]}; renumber the chunks "
                        f"and their after lists")
    for c in schedule.chunks:
        where = c.describe()
        t = schedule.tensors.get(c.tensor)
        if t is None:
            problems.append(f"{where}: unknown tensor {c.tensor!r}; the schedule has "
                            f"{', '.join(sorted(schedule.tensors)) or 'no tensors'}")
        else:
            for msg in region_problems(c.region, t.shape, c.tensor):
                problems.append(f"{where}: {msg}")
        for role, r in (("src", c.src), ("dst", c.dst)):
            if r >= W:
                problems.append(f"{where}: {role} rank {r} does not exist in a world of {W} "
                                f"ranks; use a rank in 0..{W - 1}")
        if c.src == c.dst:
            problems.append(f"{where}: src == dst == {c.src}; a chunk moves data between two "
                            f"different ranks (drop it: the rank already has its own data)")
        for a in c.after:
            if a == c.id:
                problems.append(f"{where}: dependency cycle: the chunk lists itself in after; "
                                f"remove {a} from its after")
            elif a not in ids:
                problems.append(f"{where}: after lists unknown chunk id {a}; use ids of "
                                f"chunks of this schedule")
    return problems

