"""Shared plumbing of the FP8 GEMM ops (:mod:`.ag_gemm_fp8`, :mod:`.gemm_rs_fp8`).

Both ops launch the local FP8 kernel (:mod:`syncopate.kernels.gemm_fp8`) fused with a schedule
by :func:`syncopate.fuse`; the unfused path launches the same kernel with the same config and
scale modes after (AG) or before (RS) an NCCL collective, so the two paths compute the same
tiles (bitwise for AG; RS as the bf16 op: bitwise at two ranks, to rounding beyond).

Their candidates (:func:`candidates`): each fused variant is the bf16 op's plan estimated in
FP8 with the calibrated GEMM; while no FP8 measurement exists, it takes the bf16 op's
``measured / model`` ratio at the shape (taken against the bf16 model, the dtype it was
measured in) times its own FP8 model: the variant's overheads the model misses are assumed the
same, the GEMM twice as fast.
"""

from __future__ import annotations

from ..kernels import ensure_tma_allocator
from ..kernels.gemm_fp8 import fp8_kernel_fn
from ..kernels.gemm_fp8_config import fp8_short
from ..kernels.gemm_fp8_launch import check_fp8_operands, fp8_args
from . import choice, driver
from .spec import Cand

#: the schedule dtype of the operands (``torch.float8_e4m3fn``)
FP8 = "fp8e4m3"


def check_local(a, b, scale_a, scale_b, comm, kernel: str):
    """The local GEMM's checks on this rank's operands (``a`` is the op's A shard or A, ``b`` its
    B or B shard): e4m3 dtypes, B column-major, scale shapes and dtypes, TMA's rules, the
    communicator's device; the ``Fp8Problem``."""
    prob = check_fp8_operands(a, b, scale_a, scale_b, None, kernel)
    driver.check_comm_device(comm, ("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b))
    return prob


def row_scales(scale_a, rows: int):
    """``scale_a`` as ``[rows, 1]`` fp32 per-row scales: a row-wise scale as it is, a tensor-wise
    one repeated (a view; the op copies it into the gathered buffer)."""
    return scale_a.reshape(1, 1).expand(rows, 1) if scale_a.numel() == 1 else scale_a


def launch_local(kernel, a, b, c, scale_a, scale_b, prob, cfg, programs=None, fk=None):
    """The local FP8 kernel on ``c = (a @ b) * scales`` -- through ``fk`` (the fused kernel) when
    given, else alone."""
    args, grid = fp8_args(kernel, a, b, c, scale_a, scale_b, prob, cfg, programs=programs)
    if fk is not None:
        fk[grid](*args)
        return
    if fp8_short(kernel) == "tma":
        ensure_tma_allocator()
    fp8_kernel_fn(kernel)[grid](*args, **cfg.options())


def programs(comm, kernel: str, backend: str, comm_programs: int):
    """The persistent kernel's ``NUM_SMS`` next to ``comm_programs`` (None for 'ptr')."""
    if fp8_short(kernel) != "tma":
        return None
    return driver.compute_programs(comm, driver.kernel_comm_programs(backend, comm_programs))


def candidates(spec, base, unfused, cal, s, W, dtype, cublas, blocked) -> list:
    """The FP8 op ``spec``'s candidates at W > 1: its fused variants, the bf16 op ``base``'s plan
    in FP8 (module docstring), its unfused path (``unfused(cal, s, W)``: the collectives of the
    op's reference path), and cuBLAS's ``torch._scaled_mm``, which the op cannot run."""
    out = []
    for variant in spec.variants:
        backend, _, red = variant.partition("+")
        reduce = red or "comm"
        plan = base.gemm.plan(backend, reduce, s, W, FP8, None, None, None, None)[1:]
        ratio = None
        if variant not in blocked and cal.fused(base.name, W)[1].get(variant):
            ratio = _bf16_ratio(cal, base, variant, s, W)
        out.append(Cand(f"fused {variant}", variant, "fused",
                        lambda s, W, variant=variant: _model(cal, base, variant, s, W),
                        ((f"{spec.name}:{variant}", f"{base.name}:{variant}"),),
                        backend=backend, reduce=reduce,
                        plan=None if variant in blocked else plan,
                        available=variant not in blocked, why=blocked.get(variant, ""),
                        base_ratio=ratio))
    out.append(Cand("unfused (NCCL + triton)", "unfused:triton", "unfused",
                    lambda s, W: choice.add(unfused(cal, s, W), choice.local_gemm_s(
                        cal, "triton", s["m"], s["n"], s["k"], FP8)),
                    (("nccl",), ("local:triton",)), local="triton"))
    out.append(Cand("unfused (NCCL + _scaled_mm)", "unfused:cublas", "unfused", None,
                    local="cublas", available=False,
                    why="the op's unfused path runs our FP8 kernel (torch._scaled_mm is the "
                        "benchmark's 'serial cuBLAS' column, not an op path)"))
    return out


def _model(cal, base, variant, s, W):
    t = choice.variant_s(base, cal, variant, s, W, FP8, choice.local_gemm_s)
    return t, f"cost model of the {base.name} plan, calibrated GEMM (FP8 by peak FLOPs)"


def _bf16_ratio(cal, base, variant, s, W) -> float:
    """``measured / model`` of the bf16 op's variant at this shape (interpolated as the bf16
    op's decision does): the measurements are bf16, so the ratio is taken against the bf16
    model, and then applies to the FP8 model (whose GEMM is twice as fast)."""
    wc = cal.fused(base.name, W)[0]
    return (choice.section_model(base, cal, variant, wc, "bf16", s, W)[0]
            / choice.variant_s(base, cal, variant, s, W, "bf16"))
