"""Shared plumbing of the FP8 GEMM ops (:mod:`.ag_gemm_fp8`, :mod:`.gemm_rs_fp8`).

Both ops launch the local FP8 kernel (:mod:`syncopate.kernels.gemm_fp8`) fused with a schedule
by :func:`syncopate.fuse`; the unfused path launches the same kernel with the same config and
scale modes after (AG) or before (RS) an NCCL collective, so the two paths compute the same
tiles (bitwise for AG; RS as the bf16 op: bitwise at two ranks, to rounding beyond).
"""

from __future__ import annotations

from ..errors import LaunchError
from . import _gemm

#: the schedule dtype of the operands (``torch.float8_e4m3fn``)
FP8 = "fp8e4m3"


def check_local(a, b, scale_a, scale_b, comm, kernel: str):
    """The local GEMM's checks on this rank's operands (``a`` is the op's A shard or A, ``b`` its
    B or B shard): e4m3 dtypes, B column-major, scale shapes and dtypes, TMA's rules, the
    communicator's device; the ``Fp8Problem``."""
    from ..kernels.gemm_fp8_launch import check_fp8_operands
    prob = check_fp8_operands(a, b, scale_a, scale_b, None, kernel)
    _gemm.check_comm_device(comm, ("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b))
    return prob


def row_scales(scale_a, rows: int):
    """``scale_a`` as ``[rows, 1]`` fp32 per-row scales: a row-wise scale as it is, a tensor-wise
    one repeated (a view; the op copies it into the gathered buffer)."""
    if scale_a.numel() == 1:
        return scale_a.reshape(1, 1).expand(rows, 1)
    return scale_a


def fused_kernel(comm, key: tuple, fn, make_schedule, operand, *, backend: str,
                 comm_programs: int, config, reduce: str = "comm", **options):
    """The cached FusedKernel of ``fn`` fused with ``make_schedule()`` (built only on a miss;
    rebuilt after a timeout poisoned it, as :func:`syncopate.ops._gemm.fused_kernel`)."""
    from .. import backends
    from ..runtime.fused import fuse
    fk = comm.cache.get(key)
    if fk is not None and getattr(fk, "_poisoned", None):
        fk = None
    if fk is None:
        be = backends.get(backend, LaunchError)
        opts = dict(config.options())
        if reduce != "comm":
            opts["reduce"] = reduce
        fk = fuse(fn, make_schedule(), operand=operand, backend=backend,
                  comm_programs=comm_programs if be.has_comm_programs else 0, comm=comm,
                  **options, **opts)
        comm.cache[key] = fk
    return fk


def programs(comm, kernel: str, backend: str, comm_programs: int):
    """The persistent kernel's ``NUM_SMS`` next to ``comm_programs`` (None for 'ptr')."""
    from ..kernels.gemm_fp8_config import fp8_short
    if fp8_short(kernel) != "tma":
        return None
    return _gemm.compute_programs(comm, _gemm.kernel_comm_programs(backend, comm_programs))


