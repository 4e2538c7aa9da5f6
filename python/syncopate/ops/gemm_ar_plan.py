"""The cost model's choice of a fused GEMM + all-reduce plan: order, split and comm programs.

The fused variants :func:`syncopate.ops.gemm_ar` can run are the ``all_reduce`` template
(reduce-scatter, then all-gather of the reduced pieces, on one tensor) in either order:

* ``swizzle``: every reduced piece goes straight from its owner to each rank (each rank sends
  to and receives from one peer per round; all links busy on an NVSwitch machine);
* ``ring``: partial sums and then the reduced pieces travel ``r -> r + 1`` (neighbour links
  only: what a ring topology or PCIe wants), one hop after another;

cut into ``split`` pieces per owner (more pieces: the first sums start earlier and the tail
after the GEMM is shorter, at ``alpha`` per chunk), moved by ``comm_programs`` programs of the
kernel (taken from the GEMM's SMs). :func:`choose_plan` estimates every candidate with
:func:`syncopate.schedule.cost.estimate` (alpha-beta links, the producer's departure order,
``after`` dependencies of the all-gather on the reduce-scatter) and keeps the fastest; what the
caller fixed is kept. Ties (within 0.5%) go to the first order listed, the fewer programs and
the smaller split: fewer chunks, fewer flags, more SMs for the GEMM.

Why there is no one-shot variant (every rank pulls every peer's partial and sums all of them
itself, one round instead of two): a ``sum`` chunk adds into the destination's own partial, so
rank ``d`` would sum ``own + others in arrival order`` -- a different order, hence different
bf16 roundings, on every rank, and the results would not be bitwise identical across ranks.
A one-shot sum that is the same everywhere needs every rank to add the ``W`` partials in one
fixed rank order (its own at its rank's position), which the schedule model's ``sum`` chunks
cannot say today. Reduce-scatter + all-gather is identical on every rank by construction: each
element is summed once, by its owner, and copied.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ..errors import LaunchError
from ..schedule.cost import estimate, gemm_time
from ..schedule.model import normalize_dtype
from ..schedule.templates import all_reduce

__all__ = ["ORDERS", "ArPlan", "HBM_BPS", "choose_plan", "gemm_seconds"]

ORDERS = ("swizzle", "ring")
#: HBM bandwidth the local GEMM reaches when it is memory-bound (decode: M = 1 ... 512 reads
#: all of B for a few rows). An assumption (H200's 4.8 TB/s peak less ~15%), not measured here:
#: it only decides how long the GEMM hides communication in :func:`choose_plan`.
HBM_BPS = 4.0e12


@dataclass(frozen=True)
class ArPlan:
    """What :func:`choose_plan` picked, and its estimate (seconds)."""

    order: str
    split: int
    comm_programs: int
    fused_s: float
    #: communication then GEMM, no overlap, in the same model (the serial path's estimate)
    serial_s: float


def gemm_seconds(M: int, N: int, K: int, dtype: str = "bf16") -> float:
    """This rank's ``M x N x K`` GEMM: the slower of the compute peak
    (:func:`syncopate.schedule.cost.gemm_time`) and reading A, B and writing C at
    :data:`HBM_BPS`. Decode GEMMs are memory-bound, the peak alone would call them free."""
    dt = normalize_dtype(dtype)
    size = {"fp32": 4, "fp8e4m3": 1, "fp8e5m2": 1}.get(dt, 2)
    return max(gemm_time(M, N, K, dt), size * (M * K + K * N + M * N) / HBM_BPS)


def choose_plan(M: int, N: int, K: int, world_size: int, dtype: str = "bf16",
                backend: str = "sm", order: str | None = None, split: int | None = None,
                comm_programs: int | None = None, splits=(1, 2, 4, 8),
                programs=(8, 16, 32), block_m: int | None = None) -> ArPlan:
    """The fastest estimated plan for ``all_reduce(A[M, K] @ B[K, N])`` (``K``: this rank's
    shard) on ``world_size`` ranks with ``backend`` (``sm`` or ``nvshmem``: both move chunks
    with comm programs). ``order``/``split``/``comm_programs`` given are kept.

    ``block_m``: the GEMM's tile height. Splits whose pieces are shorter than a tile are not
    tried (split 1 always is): one tile computes several such pieces at once, so they cannot
    leave earlier than a tile-high piece would, and the model, which spreads the GEMM over the
    rows evenly, would credit them with an overlap the kernel cannot give."""
    if backend not in ("sm", "nvshmem"):
        raise LaunchError(f"gemm_ar's plan has comm programs (backend 'sm' or 'nvshmem'), got "
                          f"backend={backend!r}")
    if order is not None and order not in ORDERS:
        raise LaunchError(f"order={order!r}; choose one of {', '.join(map(repr, ORDERS))}")
    if split is None and block_m:
        rows = -(-int(M) // int(world_size))  # the largest owner's rows
        splits = tuple(s for s in splits if s == 1 or rows // s >= int(block_m)) or (1,)
    return _choose(int(M), int(N), int(K), int(world_size), str(dtype), backend, order,
                   None if split is None else int(split),
                   None if comm_programs is None else int(comm_programs), tuple(splits),
                   tuple(programs))


@functools.lru_cache(maxsize=256)
def _choose(M, N, K, W, dtype, backend, order, split, comm_programs, splits, programs):
    """Memoised: estimating a schedule costs milliseconds of Python, and the op asks on every
    new layout."""
    dt = normalize_dtype(dtype)
    compute = gemm_seconds(M, N, K, dt)
    best = None
    for o in ((order,) if order else ORDERS):
        for s in ((split,) if split is not None else splits):
            # one schedule per (order, split): its verification is cached on the object and
            # is most of an estimate's cost
            sched = all_reduce((M, N), dt, W, dim=0, order=o, mode="push", split=s)
            for p in ((comm_programs,) if comm_programs is not None else programs):
                est = estimate(sched, backend=backend, comm_programs=max(1, p),
                               compute_time_s=compute)
                if best is None or _better(est.time_s, (o, p, s), best):
                    best = ArPlan(o, s, p, est.time_s, est.serial_s)
    return best


def _better(t: float, key: tuple, best: ArPlan) -> bool:
    """Faster by more than 0.5%, or within it and earlier in (order, fewer programs, smaller
    split): the tie-break the module docstring gives, independent of the loop order."""
    if t < best.fused_s * 0.995:
        return True
    if t > best.fused_s * 1.005:
        return False
    o, p, s = key
    return (ORDERS.index(o), p, s) < (ORDERS.index(best.order), best.comm_programs, best.split)
