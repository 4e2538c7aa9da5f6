"""FP8 all-gather + GEMM: ``C = (all_gather(A) @ B) * scale_a * scale_b`` in bf16, fused.

Per rank: ``a_shard`` ``[M/W, K]`` float8 e4m3 (row-major), ``b`` ``[K, N]`` float8 e4m3
**column-major** (``torch._scaled_mm``'s layout: pass ``w.t()`` of a row-major ``[N, K]``
weight), ``scale_a`` the shard's fp32 scale -- tensor-wise (one element) or row-wise
(``[M/W, 1]``) -- and ``scale_b`` tensor-wise or ``[1, N]``. Returns ``[M, N]`` bf16 with
``C[rows of rank r] = (A_r @ B) * scale_a_r * scale_b``: ``torch._scaled_mm`` on the collected
inputs (the gathered A and the gathered per-row scales).

What travels with what: A's rows and their scales. Built from parts (no hand-written fused
kernel): the local FP8 kernel, the :func:`~syncopate.schedule.scaled_gather.scaled_all_gather`
schedule of A (``[M, K]`` fp8) **and** its per-row scale SA (``[M, 1]`` fp32), the same rows in
the same chunks at the same steps, and :func:`syncopate.fuse` with
``operand={"a_ptr": "A", "scale_a_ptr": "SA"}``: the compiler makes each tile wait for the
chunks of A it loads and the chunk of SA its epilogue loads.

Why a tensor-wise ``scale_a`` is gathered as rows too: every rank quantised its own shard, with
its own amax, so a single scale for the gathered A would be wrong for the other ranks' rows.
Each rank repeats its scale over its ``M/W`` rows (``4 M/W`` bytes next to ``K M/W`` of A) and
the kernel reads per-row scales. When every rank has the same scale the result is
``torch._scaled_mm(A, B, scale, scale_b)`` up to the order of the two fp32 multiplies.

``fused=False`` (or ``SYNCOPATE=0``): NCCL all-gather of A and of the per-row scales, then the
same local kernel with the same config -- bitwise the fused result.
"""

from __future__ import annotations

import torch

from ..kernels.gemm_fp8 import fp8_kernel_fn
from ..kernels.gemm_fp8_config import fp8_short
from ..kernels.gemm_fp8_launch import Fp8Problem, check_fp8_operands, resolve_fp8_config
from ..runtime import collectives as dist
from ..schedule.scaled_gather import scaled_all_gather
from . import _fp8, choice, driver
from .ag_gemm import SHAPES
from .ag_gemm import SPEC as AG_GEMM
from .spec import Bench, OpSpec


def ag_gemm_fp8_buffers(comm, m_shard: int, K: int):
    """The symmetric A ``[M, K]`` (fp8) and SA ``[M, 1]`` (fp32) buffers of this shape."""
    M = int(m_shard) * comm.world_size
    A = driver.symmetric_buffer(comm, "ag_gemm_fp8.A", (M, K), torch.float8_e4m3fn)
    SA = driver.symmetric_buffer(comm, "ag_gemm_fp8.SA", (M, 1), torch.float32)
    return A, SA


def ag_gemm_fp8_schedule(M: int, K: int, W: int, *, split: int = 1, order: str = "swizzle",
                         mode: str = "pull"):
    """The schedule the op fuses: A and its per-row scales gathered together."""
    return scaled_all_gather((M, K), _fp8.FP8, W, dim=0, order=order, mode=mode, split=split,
                             tensors=("A", "SA"))


#: the kernel parameters bound to the schedule's tensors
OPERAND = {"a_ptr": "A", "scale_a_ptr": "SA"}


def ag_gemm_fp8_fused_kernel(comm, M: int, K: int, *, backend="sm", split=1, order="swizzle",
                             mode=None, comm_programs=0, kernel="tma", config=None):
    """The (cached) FusedKernel the op launches; exposed for tests and the benchmark."""
    k = fp8_short(kernel)
    mode = driver.template_mode("ag", backend, mode)
    key = ("ag_gemm_fp8.fk", M, K, backend, split, order, mode, comm_programs, k, repr(config))
    return driver.cached_fused(
        comm, key, fp8_kernel_fn(k), lambda: ag_gemm_fp8_schedule(M, K, comm.world_size,
                                                                  split=split, order=order,
                                                                  mode=mode),
        config=config, operand=OPERAND, backend=backend,
        comm_programs=driver.kernel_comm_programs(backend, comm_programs),
        defer_consumed_wait=True)


def ag_gemm_fp8_reference(a_shard, b, scale_a, scale_b, comm, *, kernel: str = "tma",
                          config=None, out=None):
    """The unfused path: NCCL all-gather of A (as bytes) and of its per-row scales, then the
    local FP8 kernel with row-wise A scales."""
    prob = _fp8.check_local(a_shard, b, scale_a, scale_b, comm, kernel)
    W = comm.world_size
    Ms, K, N = prob.M, prob.K, prob.N
    M = Ms * W
    cfg = resolve_fp8_config(kernel, M, N, K, config)
    if W == 1:  # one rank: its rows are all of A, no collective
        A, SA = a_shard.contiguous(), _fp8.row_scales(scale_a, Ms).contiguous()
    else:
        A = torch.empty((M, K), device=a_shard.device, dtype=torch.float8_e4m3fn)
        dist.all_gather_into_tensor(A.view(torch.uint8), a_shard.contiguous().view(torch.uint8),
                                    group=comm.group)
        SA = driver.all_gather_rows(_fp8.row_scales(scale_a, Ms), comm.group, W)
    return _launch(kernel, A, b, SA, scale_b, prob, M, cfg, out)


def _launch(kernel, A, b, SA, scale_b, prob, M, cfg, out, fk=None, programs=None):
    """The local FP8 kernel on the gathered ``A`` and row scales ``SA`` (``fk``: fused) into
    ``out`` (allocated when None, else checked: shape, dtype, overlap, TMA's layout)."""
    if out is None:
        out = torch.empty((M, prob.N), device=A.device, dtype=torch.bfloat16)
    else:
        check_fp8_operands(A, b, SA, scale_b, out, kernel)
    _fp8.launch_local(kernel, A, b, out, SA, scale_b, Fp8Problem(M, prob.N, prob.K, True,
                                                                 prob.sb_cols), cfg,
                      programs=programs, fk=fk)
    return out


def ag_gemm_fp8(a_shard, b, scale_a, scale_b, comm, *, backend: str | None = None, split=None,
                order: str = "swizzle", mode=None, comm_programs=None, kernel: str = "tma",
                config=None, out=None, fused=None):
    """``(all_gather(a_shard) @ b) * scale_a * scale_b`` -> ``[M, N]`` bf16 (module docstring).

    ``backend``/``split``/``order``/``mode``/``comm_programs`` as :func:`syncopate.ops.ag_gemm`
    (the cost model's choice unless given); ``kernel`` ('tma' or 'ptr') and ``config`` (an
    :class:`~syncopate.kernels.Fp8GemmConfig`, e.g. ``FAST_ACCUM=True``) select the local FP8
    GEMM. ``out``: an optional ``[M, N]`` bf16 tensor. ``fused`` None: the op chooses between
    its fused variants (``sm``, ``ce``) and the unfused path, the same on every rank
    (:func:`syncopate.ops.choice.decide_shape`); ``fused=True`` or any of ``backend``/
    ``split``/``mode``/``comm_programs``: fused; ``fused=False`` (or ``SYNCOPATE=0``): unfused.
    World size 1: the local FP8 kernel alone.
    """
    explicit = any(x is not None for x in (backend, split, mode, comm_programs))
    if not driver.use_fused(fused) or comm.world_size == 1:  # one rank: nothing to gather
        return ag_gemm_fp8_reference(a_shard, b, scale_a, scale_b, comm, kernel=kernel,
                                     config=config, out=out)
    prob = _fp8.check_local(a_shard, b, scale_a, scale_b, comm, kernel)
    W, me = comm.world_size, comm.rank
    Ms, K, N = prob.M, prob.K, prob.N
    M = Ms * W
    use, c = driver.choose(SPEC, comm, (M, N, K), _fp8.FP8, fused=fused, explicit=explicit,
                           named=backend is not None)
    if not use:
        return ag_gemm_fp8_reference(a_shard, b, scale_a, scale_b, comm, kernel=kernel,
                                     config=config, out=out)
    backend = backend or c.backend
    cfg = resolve_fp8_config(kernel, M, N, K, config)
    split, cp = driver.gemm_plan("ag", backend, M, N, K, W, _fp8.FP8, split, comm_programs)
    cp = driver.loopback_comm_programs(comm, cp, comm_programs)
    fk = ag_gemm_fp8_fused_kernel(comm, M, K, backend=backend, split=split, order=order,
                                  mode=mode, comm_programs=cp, kernel=kernel, config=cfg)
    A, SA = ag_gemm_fp8_buffers(comm, Ms, K)
    # stage this rank's rows of A and of SA once the peers finished reading the last launch's
    fk.before_staging()
    rows = slice(me * Ms, (me + 1) * Ms)
    if not (a_shard.data_ptr() == A[rows].data_ptr() and a_shard.stride() == A[rows].stride()):
        A[rows].copy_(a_shard)
    SA[rows].copy_(_fp8.row_scales(scale_a, Ms))
    return _launch(kernel, A, b, SA, scale_b, prob, M, cfg, out, fk,
                   _fp8.programs(comm, kernel, backend, cp))


def _unfused(cal, s, W):
    """A's bytes and its per-row fp32 scales: two all-gathers."""
    m, k = s["m"], s["k"]
    return choice.add(choice.collective_s(cal, "all_gather", m * k, W),
                      choice.collective_s(cal, "all_gather", m * 4, W))


SPEC = OpSpec(
    name="ag_gemm_fp8", fn=ag_gemm_fp8, shape=("m", "n", "k"), variants=("sm", "ce"),
    dtype=_fp8.FP8,
    candidates=lambda spec, *args: _fp8.candidates(spec, AG_GEMM, _unfused, *args),
    explain=AG_GEMM.explain, bench_rows=("ag_gemm_fp8",),
    bench=Bench(("ag_fp8",), SHAPES, "rows:bench_ag_fp8"))

__all__ = ["OPERAND", "SPEC", "ag_gemm_fp8", "ag_gemm_fp8_buffers", "ag_gemm_fp8_fused_kernel",
           "ag_gemm_fp8_reference", "ag_gemm_fp8_schedule"]
