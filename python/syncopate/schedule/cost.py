"""An alpha-beta cost model of chunk schedules, to rank alternatives (not to predict exactly).

Every chunk costs ``alpha + bytes / beta``: ``alpha`` is its fixed cost (flag release and
acquire across NVLink, a copy launch) and ``beta`` the bandwidth its backend reaches (each
backend's spec carries them: ``link_alpha_s``, ``link_beta_bps``).

**The peer-copy constants are assumptions.**  They rest on figures the project's first GPU
session reported (2 x H200 NV18, 2026-11-30; :data:`REPORTED_CE_COPY`,
:data:`REPORTED_SM_COPY`) whose raw measurements were never committed, so nothing in this
repository reproduces them; tests/test_schedule_cost.py checks that the constants fit those
figures within stated errors, not that the figures are right:

* copy engine peer copy: reported 77-87 GB/s at 1 MB, 290-318 at 16 MB, ~390 at 256 MB.
  ``alpha = 10 us`` and ``beta = 400 GB/s`` give 80, 320, 394 GB/s; the least-squares fit of
  the reported figures is 10.9 us and 397 GB/s.
* SM peer copy (Triton loads/stores by the comm programs): reported push 70 GB/s with 4 CTAs,
  190 with 16, 337 with 66.  ``beta`` interpolates these log-log in the number of comm programs
  (linear per program below 4); the flattening to 370 GB/s at 132 programs is an assumption,
  and so is ``alpha = 3 us`` (a system-scope release/acquire round trip plus the programs' start
  on a chunk): no figure is behind either.
* NVSHMEM (``putmem_signal_block`` from the same comm programs): not measured; assumed to move
  data like the SM backend with a slightly larger fixed cost (``alpha = 4 us``).
* NCCL all-gather bus bandwidth 160 GB/s at 64 MB (:data:`NCCL_AG_BUS_BPS`, a reference point
  for serial baselines) and GEMM ~780 TFLOP/s in bf16 (:func:`gemm_time`).

Links: each rank has one egress and one ingress port (NVLink is full duplex; on NVSwitch
systems a GPU's links form one port).  Chunks sharing a port run one after another, chunks on
different ports run concurrently, and a chunk starts only after the chunks it depends on (its
:meth:`~syncopate.schedule.Schedule.dependencies`) have arrived.  The list scheduler takes
chunks in the verifier's execution order (dependencies first, then step).

Overlap: given the compute time of the kernel that consumes or produces the scheduled tensor
on one rank, :func:`estimate` also simulates the fused kernel.

* A *consumer* (AG + GEMM: the tensor has no partial initial placement) computes its final
  region in arrival order: the part it holds initially first, then each chunk's region once it
  has arrived, each piece taking its share of the compute time by volume plus a fixed wait
  cost.  Whatever the first remote chunk cannot hide behind local work is exposed.
* A *producer* (GEMM + RS: the tensor starts as partial sums) computes its partial regions in
  departure order, and a chunk leaves only once its region is computed -- for a ``sum`` chunk,
  computed on its destination as well (the destination adds its own partial); a ``sum`` chunk
  costs :data:`SUM_TRAFFIC` times its bytes on its link.
* With comm programs (``sm``, ``nvshmem``) they take SMs from compute: compute
  slows by ``num_sms / (num_sms - comm_programs)``.

More chunks mean earlier first arrivals and a shorter exposed tail, but more ``alpha``s and
waits: the model prefers a moderate split where communication and compute are comparable, and
the fewest chunks when compute hides communication entirely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .. import backends
from ..backends.sm import SM
from ..errors import ScheduleError
from .model import Region, Schedule, normalize_dtype
from .templates import all_gather, reduce_scatter

__all__ = ["LinkModel", "CostEstimate", "link_model", "chunk_time", "estimate", "overlap_time",
           "best_split", "choose_gemm_plan", "gemm_time", "H200_SMS", "NCCL_AG_BUS_BPS",
           "GEMM_PEAK_FLOPS"]

H200_SMS = 132
#: A ``sum`` chunk costs this many times its bytes on its link: the destination's comm programs
#: read the peer's partial over NVLink, read their own partial and write the sum, so they move
#: more than a copy's bytes. Fitted on 2 x H200 GEMM+RS (bench/results/2026-11-30-h200x2-run3:
#: with 1.0 the model was 9-10% optimistic at 8 comm programs, exact at 16).
SUM_TRAFFIC = 1.5

#: NCCL all-gather bus bandwidth on 2 x H200 at 64 MB (measured 2026-11-30), for serial baselines.
NCCL_AG_BUS_BPS = 160e9

#: Dense GEMM throughput by input dtype (bf16 measured with cuBLAS at 8192^3; fp8 twice that;
#: fp32 inputs run as tf32 at half the bf16 rate).
GEMM_PEAK_FLOPS = {"bf16": 780e12, "fp16": 780e12, "fp8e4m3": 1560e12, "fp8e5m2": 1560e12,
                   "fp32": 390e12}

#: Copy-engine peer copies as reported (not logged): ``(bytes, lowest, highest)`` effective
#: bandwidth of one copy, 2 x H200 NV18, 2026-11-30 ("~390" at 256 MB: both ends 390); the ce
#: spec's ``link_alpha_s`` / ``link_beta_bps`` are assumptions fitted to them (the tests bound
#: the error)
REPORTED_CE_COPY = ((1_000_000, 77e9, 87e9), (16_000_000, 290e9, 318e9),
                    (256_000_000, 390e9, 390e9))
#: SM peer copies (Triton loads/stores, 8 warps, push) as reported (not logged):
#: ``(comm programs, bandwidth)``, 2 x H200 NV18, 2026-11-30.
REPORTED_SM_COPY = ((4, 70e9), (16, 190e9), (66, 337e9))

#: the sm backend's fixed cost per chunk (the attention and Ulysses models use it too): an
#: assumption, no figure behind it (a system-scope release/acquire round trip plus the comm
#: programs' start on a chunk); the nvshmem spec's (SM's plus the call) is one too
_SM_ALPHA_S = SM.link_alpha_s
#: SM peer-copy bandwidth by comm programs (CTAs): the reported figures, and 370 GB/s at 132
#: programs -- an assumption (extrapolated, the copy flattening towards the link's limit).
_SM_POINTS = REPORTED_SM_COPY + ((132, 370e9),)
#: Fixed cost of waiting on one chunk in a consumer, or signalling one in a producer.
_SYNC_S = 1e-6


def _sm_bandwidth(programs: int) -> float:
    if programs < 1:
        raise ScheduleError(f"comm_programs must be >= 1 for a backend with comm programs, got "
                            f"{programs}")
    p0, b0 = _SM_POINTS[0]
    if programs <= p0:
        return b0 * programs / p0
    for (pa, ba), (pb, bb) in zip(_SM_POINTS, _SM_POINTS[1:]):
        if programs == pb:
            return bb
        if programs < pb:
            t = (math.log(programs) - math.log(pa)) / (math.log(pb) - math.log(pa))
            return math.exp(math.log(ba) + t * (math.log(bb) - math.log(ba)))
    return _SM_POINTS[-1][1]


@dataclass(frozen=True)
class LinkModel:
    """``time(bytes) = alpha_s + bytes / beta_bps`` for one backend and comm program count."""

    backend: str
    alpha_s: float
    beta_bps: float

    def time(self, nbytes: int) -> float:
        return self.alpha_s + nbytes / self.beta_bps

    def bandwidth(self, nbytes: int) -> float:
        """Effective bandwidth of one chunk of ``nbytes`` (bytes per second)."""
        return nbytes / self.time(nbytes) if nbytes else 0.0


def link_model(backend="sm", comm_programs: int = 16) -> LinkModel:
    """The alpha-beta model of one link for ``backend`` (its spec's ``link_alpha_s`` and
    ``link_beta_bps``).  ``comm_programs`` matters for a backend whose bandwidth is the comm
    programs' (``link_beta_bps`` None: ``sm``, ``nvshmem``; the copy engine needs no SMs)."""
    be = backends.get(backend, ScheduleError)
    beta = be.link_beta_bps if be.link_beta_bps is not None else _sm_bandwidth(comm_programs)
    return LinkModel(be.name, be.link_alpha_s, beta)


def chunk_time(nbytes: int, backend="sm", comm_programs: int = 16) -> float:
    """Seconds to move one chunk of ``nbytes`` over an idle link."""
    return link_model(backend, comm_programs).time(nbytes)


def gemm_time(m: int, n: int, k: int, dtype: str = "bf16") -> float:
    """Seconds for an ``m x n x k`` GEMM at the measured peak (a lower bound: small GEMMs reach
    less of it)."""
    return 2.0 * m * n * k / GEMM_PEAK_FLOPS.get(normalize_dtype(dtype), GEMM_PEAK_FLOPS["bf16"])


def overlap_time(pieces: Iterable[tuple[float, float]], compute_time_s: float,
                 sync_overhead_s: float = _SYNC_S) -> float:
    """End time of a consumer that computes ``pieces`` in the given order.

    ``pieces`` are ``(ready_s, fraction)``: the piece can start at ``ready_s`` and takes
    ``fraction * compute_time_s``, plus ``sync_overhead_s`` when it had to be waited for
    (``ready_s > 0``).  The first piece that is not ready yet is exposed.
    """
    t = 0.0
    for ready, frac in pieces:
        if ready > 0:
            t = max(t, ready) + sync_overhead_s
        t += frac * compute_time_s
    return t


@dataclass(frozen=True)
class CostEstimate:
    """What :func:`estimate` predicts for one schedule (seconds)."""

    backend: str
    comm_programs: int
    num_chunks: int
    total_bytes: int
    chunk_start: dict = field(repr=False)
    chunk_finish: dict = field(repr=False)
    #: per rank: when the last chunk it sends or receives has arrived (communication alone)
    rank_comm_s: tuple
    #: when the last chunk has arrived anywhere (communication alone)
    comm_s: float
    #: compute time per rank as given (None: communication only)
    compute_s: float | None = None
    #: per rank: when the fused kernel (compute + its chunks) finishes
    rank_fused_s: tuple | None = None
    fused_s: float | None = None

    @property
    def serial_s(self) -> float | None:
        """Communication, then compute (no overlap), with compute at full speed."""
        return None if self.compute_s is None else self.comm_s + self.compute_s

    @property
    def time_s(self) -> float:
        """The figure to rank by: fused time when compute was given, else comm time."""
        return self.fused_s if self.fused_s is not None else self.comm_s

    @property
    def speedup(self) -> float | None:
        if self.fused_s is None or self.fused_s <= 0:
            return None
        return self.serial_s / self.fused_s

    def summary(self) -> str:
        gbps = self.total_bytes / self.comm_s / 1e9 if self.comm_s > 0 else 0.0
        text = (f"backend {self.backend}"
                + (f", {self.comm_programs} comm programs"
                   if backends.get(self.backend).has_comm_programs else "")
                + f": {self.num_chunks} chunks, {_fmt_bytes(self.total_bytes)}, comm "
                  f"{self.comm_s * 1e3:.3f} ms ({gbps:.0f} GB/s aggregate)")
        if self.fused_s is not None:
            text += (f"; compute {self.compute_s * 1e3:.3f} ms: serial {self.serial_s * 1e3:.3f}"
                     f" ms, fused {self.fused_s * 1e3:.3f} ms ({self.speedup:.2f}x)")
        return text


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _pick_tensor(schedule: Schedule, tensor: str | None) -> str:
    if tensor is not None:
        schedule.tensor(tensor)
        return tensor
    if len(schedule.tensors) != 1:
        raise ScheduleError(f"the schedule moves {len(schedule.tensors)} tensors "
                            f"({', '.join(schedule.tensors)}); pass tensor= to say which one the "
                            f"compute reads or writes")
    return next(iter(schedule.tensors))


def estimate(schedule: Schedule, backend="sm", comm_programs: int = 16,
             compute_time_s: float | None = None, tensor: str | None = None,
             num_sms: int = H200_SMS, sync_overhead_s: float = _SYNC_S) -> CostEstimate:
    """Estimate a (verified) schedule's communication time per rank, and with
    ``compute_time_s`` (the kernel's time on one rank without communication) its fused time.

    ``tensor`` names the tensor the compute consumes or produces (default: the only one).
    Raises :class:`ScheduleError` when the schedule does not verify.
    """
    link = link_model(backend, comm_programs)
    analysis = schedule._verified()
    W = schedule.world_size
    chunks = {c.id: c for c in schedule.chunks}
    slow = 1.0
    if compute_time_s is not None:
        if compute_time_s < 0:
            raise ScheduleError(f"compute_time_s must be >= 0, got {compute_time_s}")
        if backends.get(backend, ScheduleError).has_comm_programs:
            if comm_programs >= num_sms:
                raise ScheduleError(f"{comm_programs} comm programs leave no SM for compute "
                                    f"({num_sms} SMs); use fewer")
            slow = num_sms / (num_sms - comm_programs)
    name = _pick_tensor(schedule, tensor) if compute_time_s is not None else None
    spec = schedule.tensors[name] if name is not None else None
    producer = spec is not None and any(p.partial for p in spec.initial)

    # Producer: when each rank has computed each region it sends or reduces into (departure
    # order). A chunk is ready when its source has computed it and, for a ``sum`` chunk, when
    # its destination has computed its own partial of the same rows too (the destination adds
    # them): without the second condition a reduce-scatter looks hidden whatever the split,
    # while on the GPU the last band's reduction is an exposed tail (split 1 measured 1.4x
    # slower than split 4, bench/results/2026-11-30-h200x2-run3).
    ready: dict[int, float] = {}
    produce_end = [0.0] * W
    if producer:
        done_at: dict[tuple[int, int], float] = {}
        for r in range(W):
            partial = [p.region for p in spec.initial if p.rank == r and p.partial]
            total = sum(p.volume for p in partial)
            done: list[Region] = []
            t = 0.0
            mine = schedule._departing(r, name)
            for region in schedule.departure_order(r, name) + partial:
                todo = [i for p in partial if (i := p.intersection(region)) is not None]
                vol = sum(sum(x.volume for x in piece.difference(done)) for piece in todo)
                if vol:
                    t += slow * compute_time_s * vol / total
                    done.extend(todo)
                for c in mine:
                    if c.region == region and (r, c.id) not in done_at:
                        done_at[(r, c.id)] = t
            produce_end[r] = t
        for c in schedule.chunks:
            if c.tensor != name:
                continue
            t = done_at.get((c.src, c.id), produce_end[c.src])
            if c.reduce == "sum":
                t = max(t, done_at.get((c.dst, c.id), produce_end[c.dst]))
            ready[c.id] = t + sync_overhead_s

    def simulate(ready: dict[int, float]):
        egress = [0.0] * W
        ingress = [0.0] * W
        start: dict[int, float] = {}
        finish: dict[int, float] = {}
        for cid in analysis.order:
            c = chunks[cid]
            t0 = max(egress[c.src], ingress[c.dst], ready.get(cid, 0.0),
                     max((finish[d] for d in analysis.deps[cid]), default=0.0))
            t1 = t0 + link.time(schedule.chunk_bytes(c) * (SUM_TRAFFIC if c.reduce == "sum" else 1))
            start[cid], finish[cid] = t0, t1
            egress[c.src] = ingress[c.dst] = t1
        # a port's time only grows, so it ends at the rank's last chunk out (or in)
        return start, finish, [max(e, i) for e, i in zip(egress, ingress)]

    # Communication alone (what a serial baseline pays), then with the producer's readiness.
    start, finish, rank_comm = simulate({})
    comm = max(rank_comm, default=0.0)
    fused_finish, fused_rank_comm = finish, rank_comm
    if ready:
        _, fused_finish, fused_rank_comm = simulate(ready)

    rank_fused = fused = None
    if compute_time_s is not None:
        ends = produce_end if producer else [
            overlap_time(_consumer_pieces(schedule, analysis, r, name, fused_finish),
                         slow * compute_time_s, sync_overhead_s) for r in range(W)]
        rank_fused = tuple(max(e, c) for e, c in zip(ends, fused_rank_comm))
        fused = max(rank_fused, default=0.0)
    return CostEstimate(link.backend, comm_programs, len(chunks), schedule.total_bytes, start,
                        finish, tuple(rank_comm), comm, compute_time_s, rank_fused, fused)


def _consumer_pieces(schedule: Schedule, analysis, rank: int, name: str, finish: dict):
    """(ready time, fraction of the rank's final volume) in arrival order."""
    spec = schedule.tensors[name]
    final = [p.region for p in spec.final if p.rank == rank]
    total = sum(f.volume for f in final)
    if not total:
        return []
    events: list[tuple[float, Region]] = [(0.0, p.region) for p in spec.initial
                                          if p.rank == rank and not p.partial]
    for cid in analysis.order:
        c = schedule.chunk(cid)
        if c.dst == rank and c.tensor == name:
            events.extend((finish[cid], reg) for reg in analysis.completed[cid])
    out = []
    for t, reg in events:
        vol = sum(i.volume for f in final if (i := reg.intersection(f)) is not None)
        if vol:
            out.append((t, vol / total))
    return out


def best_split(make: Callable[[int], Schedule], splits: Iterable[int] = (1, 2, 4, 8, 16, 32, 64),
               **estimate_kwargs) -> tuple[int, dict[int, CostEstimate]]:
    """The split with the lowest estimated time, and every estimate.

    ``make(split)`` builds the schedule (e.g. ``lambda n: all_gather(shape, "bf16", 2,
    split=n)``); ``estimate_kwargs`` go to :func:`estimate` (give ``compute_time_s`` to rank
    by fused time).  Ties (within 0.5%) go to the smaller split: fewer chunks, fewer flags.
    """
    results = {n: estimate(make(n), **estimate_kwargs) for n in splits}
    if not results:
        raise ScheduleError("best_split needs at least one split to try")
    best_time = min(e.time_s for e in results.values())
    best = min(n for n, e in results.items() if e.time_s <= best_time * 1.005)
    return best, results


def choose_gemm_plan(op: str, M: int, N: int, K: int, world_size: int, dtype: str = "bf16",
                     backend: str = "sm", comm_programs: int | None = None,
                     splits: Iterable[int] = (1, 2, 4, 8, 16),
                     programs: Iterable[int] = (8, 16, 32)) -> dict:
    """Split (and comm program count) for a fused GEMM with a collective, by the cost model.

    ``op='ag'``: ``C[M, N] = all_gather(A[M, K] along M) @ B[K, N]`` -- the schedule is
    :func:`~.templates.all_gather` of ``(M, K)``; ``N`` and ``K`` are this rank's GEMM sizes.
    ``op='rs'``: ``reduce_scatter(A[M, K] @ B[K, N] along M)`` -- :func:`~.templates.reduce_scatter`
    of ``(M, N)``; ``K`` is this rank's (sharded) K.  ``comm_programs`` fixed by the caller is
    kept; otherwise ``programs`` are tried (``sm``/``nvshmem``; ``ce`` uses none).  Returns
    ``{"split", "comm_programs", "estimate"}``.
    """
    if op not in ("ag", "rs"):
        raise ScheduleError(f"op must be 'ag' (all-gather + GEMM) or 'rs' (GEMM + "
                            f"reduce-scatter), got {op!r}")
    compute = gemm_time(M, N, K, dtype)

    def make(n: int) -> Schedule:
        if op == "ag":
            return all_gather((M, K), dtype, world_size, dim=0, split=n)
        return reduce_scatter((M, N), dtype, world_size, dim=0, split=n)

    if not backends.get(backend, ScheduleError).has_comm_programs:
        candidates = [0]
    elif comm_programs is not None:
        candidates = [comm_programs]
    else:
        candidates = list(programs)
    best = None
    for p in candidates:
        split, results = best_split(make, splits, backend=backend, comm_programs=max(p, 1),
                                    compute_time_s=compute)
        est = results[split]
        if best is None or est.time_s < best["estimate"].time_s * 0.995:
            best = {"split": split, "comm_programs": p, "estimate": est}
    return best
