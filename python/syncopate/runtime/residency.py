"""Co-residency of W virtual ranks' kernels on one GPU (loopback, docs/loopback.md).

Why it matters: a fused kernel's programs spin until a peer's programs deliver. With one
process per GPU every rank has its own SMs. In loopback all W ranks share one GPU's SMs: if
rank 0's kernel fills every resident slot with programs spinning on a chunk that only rank 1's
kernel produces, rank 1's kernel never gets an SM, and the watchdog ends the launch as a
timeout. The rule the runtime enforces: **all W ranks' fused kernels fit on the device at
once**, i.e. ``W x programs_per_rank <= blocks_per_SM x (SMs - reserve)``, where
``blocks_per_SM`` is what the compiled kernel's resources allow (registers, shared memory,
threads; the driver's occupancy calculator when available, else the arithmetic below) and
``reserve`` = W SMs kept free for the runtime's one-warp sync kernels (ENTRY/CONSUMED waits of
the ce side streams, which spin too) and for whatever else the ranks enqueue meanwhile.

The ops choose persistent grids that satisfy it (:func:`sm_share`: ``(SMs - W) // W``
programs per rank, comm programs included); a user kernel whose grid does not fit is refused
with :class:`CoResidencyError` before launch (never a hang). Sufficient, not necessary: a
kernel could also make progress partly resident, but proving that needs the schedule's
dependency order per program, and a refusal that names the numbers is better than a deadlock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import settings
from ..errors import CoResidencyError
from . import _cuda

@dataclass(frozen=True)
class DeviceLimits:
    """Per-SM resources of a device (what occupancy depends on); the defaults are Hopper's
    (sm_90, H100/H200), used where torch does not report a value."""

    sms: int
    max_threads_per_sm: int = 2048
    max_blocks_per_sm: int = 32
    regs_per_sm: int = 65536
    smem_per_sm: int = 233472
    reserved_smem_per_block: int = 1024
    reg_alloc_unit: int = 256

    @classmethod
    def of(cls, device) -> "DeviceLimits":
        """From ``torch.cuda.get_device_properties`` (attributes it lacks: the defaults)."""
        import torch
        p = torch.cuda.get_device_properties(device)
        g = lambda name, default: int(getattr(p, name, default) or default)  # noqa: E731
        return cls(sms=int(p.multi_processor_count),
                   max_threads_per_sm=g("max_threads_per_multi_processor", cls.max_threads_per_sm),
                   regs_per_sm=g("regs_per_multiprocessor", cls.regs_per_sm),
                   smem_per_sm=g("shared_memory_per_multiprocessor", cls.smem_per_sm))


def blocks_per_sm(limits: DeviceLimits, *, num_warps: int, n_regs: int, shared: int) -> int:
    """How many programs (CTAs) of a kernel with these resources one SM holds at once:
    the minimum over threads, registers (allocated per warp in ``reg_alloc_unit`` chunks),
    shared memory (plus the driver's per-block reservation) and the block limit."""
    threads = max(1, int(num_warps)) * 32
    by_threads = limits.max_threads_per_sm // threads
    regs_per_warp = -(-max(1, int(n_regs)) * 32 // limits.reg_alloc_unit) * limits.reg_alloc_unit
    by_regs = limits.regs_per_sm // (regs_per_warp * max(1, int(num_warps)))
    smem = int(shared) + limits.reserved_smem_per_block
    by_smem = limits.smem_per_sm // smem if smem else limits.max_blocks_per_sm
    return max(0, min(by_threads, by_regs, by_smem, limits.max_blocks_per_sm))


def reserve_sms(ranks: int) -> int:
    """SMs kept free in loopback for the runtime's sync kernels and the ranks' other work:
    ``ranks``, or ``SYNCOPATE_LOOPBACK_RESERVE_SMS`` when that is larger -- a diagnosis knob
    (smaller fused grids, more room for anything else that needs an SM while the ranks' kernels
    spin: it tells whether a loopback hang came from SM starvation; docs/loopback.md)."""
    return max(1, int(ranks), settings.LOOPBACK_RESERVE_SMS.get())


def sm_share(sms: int, ranks: int) -> int:
    """Programs a persistent kernel may launch per rank (comm programs included) so that
    ``ranks`` of them, one program per SM, are co-resident with :func:`reserve_sms` SMs left
    over: ``sms`` with one rank, ``(sms - reserve) // ranks`` in loopback."""
    ranks = max(1, int(ranks))
    if ranks == 1:
        return int(sms)
    return max(1, (int(sms) - reserve_sms(ranks)) // ranks)


def check(programs: int, ranks: int, limits: DeviceLimits, per_sm: int, *,
          what: str = "the fused kernel") -> None:
    """Raise :class:`CoResidencyError` unless ``ranks`` kernels of ``programs`` programs each
    fit at once (see the module doc)."""
    if ranks <= 1:
        return
    kept = reserve_sms(ranks)
    usable = max(0, limits.sms - kept)
    capacity = per_sm * usable
    need = ranks * int(programs)
    if per_sm < 1:
        raise CoResidencyError(
            f"loopback: {what} needs more resources than one SM has (0 programs per SM): it "
            f"cannot run at all on this device")
    if need > capacity:
        fit = capacity // ranks
        raise CoResidencyError(
            f"loopback with {ranks} ranks on one GPU: {ranks} x {programs} programs of {what} "
            f"must be resident at once, but the device holds {per_sm} per SM x {usable} SMs "
            f"({limits.sms} minus {kept} kept for the runtime's sync kernels) = {capacity}. "
            f"Launch at most {fit} programs per rank (comm programs included): a persistent "
            f"grid, fewer comm_programs, or fewer virtual ranks (docs/loopback.md)")


def kernel_blocks_per_sm(ck, limits: DeviceLimits) -> int:
    """Programs per SM of a compiled Triton kernel: the driver's occupancy calculator
    (``cuOccupancyMaxActiveBlocksPerMultiprocessor``) when it answers, else
    :func:`blocks_per_sm` from ``ck.n_regs``, ``ck.metadata.num_warps`` and
    ``ck.metadata.shared``."""
    md = ck.metadata
    num_warps = int(getattr(md, "num_warps", 4))
    shared = int(getattr(md, "shared", 0))
    try:
        ck._init_handles()
    except Exception:  # noqa: BLE001 - fall back to the arithmetic
        pass
    fn = getattr(ck, "function", None)
    if fn:
        n = _cuda.occupancy_blocks_per_sm(int(fn), num_warps * 32, shared)
        if n is not None:
            return n
    return blocks_per_sm(limits, num_warps=num_warps, n_regs=int(getattr(ck, "n_regs", 0) or 255),
                         shared=shared)


def check_config(fk, cfg, g) -> None:
    """Loopback: refuse (:class:`CoResidencyError`) a launch grid ``g`` of FusedKernel ``fk``'s
    configuration ``cfg`` whose W copies, one per virtual rank, would not all be resident on
    the shared GPU at once (the module docstring says why that could deadlock). Remembered in
    ``cfg.resident`` once it passed."""
    ranks = fk.comm.colocated
    programs = math.prod(int(d) for d in g)
    # on a grid of more than one dimension the comm programs' column (p, y, z) with y or z
    # > 0 exits at once (partition_sms: only (p, 0, 0) runs the plan): those programs never
    # spin, so they need no slot of their own -- a 2-d attention grid would otherwise count
    # comm_programs x rows
    rows = int(g[1]) * int(g[2])
    if rows > 1 and fk._backend.has_comm_programs:
        programs -= int(cfg.abi.comm_programs or 0) * (rows - 1)
    ck = cfg.compiled.kernel
    limits = DeviceLimits.of(fk.comm.device)
    per_sm = kernel_blocks_per_sm(ck, limits)
    check(programs, ranks, limits, per_sm,
          what=f"{getattr(fk.kernel, '__name__', 'the kernel')} "
               f"(backend {fk.backend}, {getattr(ck.metadata, 'num_warps', '?')} warps, "
               f"{getattr(ck.metadata, 'shared', '?')} B shared memory)")
    cfg.resident.add(tuple(g))
