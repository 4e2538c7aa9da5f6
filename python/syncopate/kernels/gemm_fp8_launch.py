"""Host-side launch of the FP8 GEMM kernels: :func:`scaled_mm` (``torch._scaled_mm``'s
contract) and :func:`make_fp8_launcher`, with the operand checks they run first
(:func:`check_fp8_operands`: host only, testable on CPU tensors).

The checks exist so that a wrong layout or scale fails before anything is launched, with the
fix in the message: a row-major B (``torch._scaled_mm`` and Hopper's FP8 wgmma want B
column-major), a scale of the wrong shape or dtype, an e5m2 or bf16 operand.
"""

from __future__ import annotations

from dataclasses import dataclass

import triton

from ..errors import LaunchError
from .gemm_fp8 import fp8_kernel_fn
from .gemm_fp8_config import Fp8GemmConfig, default_fp8_config, fp8_short
from .gemm_launch import (_empty_launch, _overlaps, _padded, check_devices, check_matrices,
                          check_ptr_offsets, ensure_tma_allocator, num_sms)


@dataclass(frozen=True)
class Fp8Problem:
    """What :func:`check_fp8_operands` found: sizes and which scales are per row / column."""

    M: int
    N: int
    K: int
    sa_rows: bool
    sb_cols: bool


def scale_mode(scale, rows: int, name: str, axis: int) -> bool:
    """True for a row-wise (``axis`` 0: ``[rows, 1]``) / column-wise (``axis`` 1: ``[1, rows]``)
    scale, False for a tensor-wise one (one element); LaunchError otherwise."""
    import torch
    want = (rows, 1) if axis == 0 else (1, rows)
    if not isinstance(scale, torch.Tensor):
        raise LaunchError(f"{name} must be a torch.Tensor (fp32), got {type(scale).__name__}")
    if scale.dtype != torch.float32:
        raise LaunchError(f"{name} must be torch.float32 (as torch._scaled_mm takes it), got "
                          f"{scale.dtype}: pass {name}.float()")
    if scale.numel() == 1:
        return False
    if tuple(scale.shape) != want:
        raise LaunchError(f"{name} has shape {tuple(scale.shape)}: a tensor-wise scale has one "
                          f"element, a row-wise one has shape {want} "
                          f"({'one per row of a' if axis == 0 else 'one per column of b'})")
    if scale.stride(axis) != 1:
        raise LaunchError(f"{name} of shape {want} must be contiguous (stride 1 along its "
                          f"{rows} elements), got strides {tuple(scale.stride())}: pass "
                          f"{name}.contiguous()")
    return True


def check_fp8_operands(a, b, scale_a, scale_b, out=None, kernel: str = "tma") -> Fp8Problem:
    """Validate :func:`scaled_mm`'s operands; LaunchError says what to change. Device last, so
    the checks run on CPU tensors too."""
    import torch
    k = fp8_short(kernel)
    matrices = (("a", a), ("b", b)) + ((("out", out),) if out is not None else ())
    check_matrices(matrices)
    for name, t in (("a", a), ("b", b)):
        if t.dtype != torch.float8_e4m3fn:
            raise LaunchError(f"{name} must be torch.float8_e4m3fn, got {t.dtype}: quantise it "
                              f"(x / scale).to(torch.float8_e4m3fn) with an fp32 scale (e5m2 is "
                              f"not supported)")
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise LaunchError(f"shape mismatch: a is {tuple(a.shape)} ([M, K]) and b is "
                          f"{tuple(b.shape)} ([K, N]); b.shape[0] must be {K} (for a weight "
                          f"stored [N, K] pass w.t())")
    sa_rows = scale_mode(scale_a, M, "scale_a", 0)
    sb_cols = scale_mode(scale_b, N, "scale_b", 1)
    if out is not None:
        if tuple(out.shape) != (M, N) or out.dtype != torch.bfloat16:
            raise LaunchError(f"out must be a [M, N] = {(M, N)} torch.bfloat16 tensor, got "
                              f"{tuple(out.shape)} {out.dtype}")
        if _overlaps(out, a) or _overlaps(out, b):
            raise LaunchError("out overlaps a or b in memory; pass a separate output buffer")
    if M and N and K:
        if k == "tma":
            _check_tma(a, b, out, M, N, K)
        else:
            check_ptr_offsets(matrices)
    check_devices(a, (("b", b), ("scale_a", scale_a), ("scale_b", scale_b)) + matrices[2:],
                 "FP8 GEMM")
    return Fp8Problem(M, N, K, sa_rows, sb_cols)


def _check_tma(a, b, out, M, N, K):
    """TMA's rules on the FP8 layout: A row-major, B column-major (B^T row-major), C row-major;
    16-byte multiple leading strides and 16-byte aligned bases."""
    if a.stride(1) != 1 and K > 1:
        raise LaunchError(f"kernel='tma' needs a row-major (strides (lda, 1)), got strides "
                          f"{tuple(a.stride())}: pass a.contiguous()")
    if b.stride(0) != 1 and K > 1:
        raise LaunchError(f"b must be column-major (strides (1, ldb)): torch._scaled_mm and "
                          f"Hopper's FP8 wgmma read B K-major; got strides {tuple(b.stride())}. "
                          f"Store the weight as [N, K] row-major and pass w.t(), or convert "
                          f"with b.t().contiguous().t()")
    if out is not None and out.stride(1) != 1 and N > 1:
        raise LaunchError(f"kernel='tma' needs out row-major, got strides {tuple(out.stride())}")
    for name, t, lead in (("a", a, a.stride(0) if M > 1 else K),
                          ("b", b, b.stride(1) if N > 1 else K),
                          ("out", out, (out.stride(0) if M > 1 else N) * 2 if out is not None
                           else 16)):
        if t is None:
            continue
        if lead % 16:
            raise LaunchError(f"kernel='tma' needs {name}'s leading stride to be a multiple of "
                              f"16 bytes (TMA), got {lead} bytes: pad K (a, b) or N (out) to a "
                              f"multiple of 16, or use kernel='ptr'")
        if t.data_ptr() % 16:
            raise LaunchError(f"kernel='tma' needs {name} 16-byte aligned (TMA): pass a fresh "
                              f"tensor or use kernel='ptr'")


def fp8_args(kernel: str, a, b, c, scale_a, scale_b, prob: Fp8Problem, cfg: Fp8GemmConfig,
             programs: int | None = None) -> tuple[list, tuple]:
    """The kernel's positional arguments (constexprs in position) and grid. ``programs``: the
    persistent kernel's ``NUM_SMS`` (default: the device's SM count)."""
    k = fp8_short(kernel)
    fn = fp8_kernel_fn(k)
    M, N, K = prob.M, prob.N, prob.K
    tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
    vals = dict(a_ptr=a, b_ptr=b, c_ptr=c, scale_a_ptr=scale_a, scale_b_ptr=scale_b, M=M, N=N,
                K=K)
    if k == "ptr":
        vals.update(stride_am=a.stride(0), stride_ak=a.stride(1), stride_bk=b.stride(0),
                    stride_bn=b.stride(1), stride_cm=c.stride(0), stride_cn=c.stride(1),
                    **cfg.constexprs(k, sa_rows=prob.sa_rows, sb_cols=prob.sb_cols))
        grid = (max(1, tiles),)
    else:
        sms = int(programs) if programs else num_sms(a.device)
        # a single row/column's stride is arbitrary in torch; TMA wants the padded length
        vals.update(stride_am=a.stride(0) if M > 1 else _padded(K, 1),
                    stride_bn=b.stride(1) if N > 1 else _padded(K, 1),
                    stride_cm=c.stride(0) if M > 1 else _padded(N, 2),
                    **cfg.constexprs(k, sms, sa_rows=prob.sa_rows, sb_cols=prob.sb_cols))
        grid = (max(1, min(sms, tiles)),)
    return [vals[n] for n in fn.arg_names], grid


def resolve_fp8_config(kernel: str, M: int, N: int, K: int, config=None) -> Fp8GemmConfig:
    k = fp8_short(kernel)
    cfg = default_fp8_config(M, N, K, k) if config is None else Fp8GemmConfig.of(config)
    return cfg.check(k)


def make_fp8_launcher(a, b, scale_a, scale_b, out=None, *, kernel: str = "tma", config=None):
    """Validate once; ``(launch, out)`` where ``launch()`` enqueues the GEMM with no host checks
    (what the benchmark times). Same arguments and errors as :func:`scaled_mm`."""
    import torch
    prob = check_fp8_operands(a, b, scale_a, scale_b, out, kernel)
    M, N, K = prob.M, prob.N, prob.K
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    if not (M and N and K):
        return _empty_launch(M, N, K, out), out
    k = fp8_short(kernel)
    cfg = resolve_fp8_config(k, M, N, K, config)
    args, grid = fp8_args(k, a, b, out, scale_a, scale_b, prob, cfg)
    fn, opts, device = fp8_kernel_fn(k), cfg.options(), a.device

    def launch():
        if k == "tma":
            ensure_tma_allocator()
        with torch.cuda.device(device):
            fn[grid](*args, **opts)
    return launch, out


def scaled_mm(a, b, scale_a, scale_b, out=None, *, kernel: str = "tma", config=None):
    """``out = (a @ b) * scale_a * scale_b`` in bf16, ``torch._scaled_mm(a, b, scale_a, scale_b,
    out_dtype=torch.bfloat16)``'s contract: ``a`` ``[M, K]`` and ``b`` ``[K, N]`` float8 e4m3,
    ``b`` column-major; fp32 scales, each tensor-wise (one element) or row-wise (``scale_a``
    ``[M, 1]``, ``scale_b`` ``[1, N]``) -- unlike torch, one of each is accepted too.
    ``config``: an :class:`~.gemm_fp8_config.Fp8GemmConfig` (``FAST_ACCUM`` for
    ``use_fast_accum=True``), a dict of its fields, or None for the default."""
    launch, out = make_fp8_launcher(a, b, scale_a, scale_b, out, kernel=kernel, config=config)
    launch()
    return out


__all__ = ["Fp8Problem", "check_fp8_operands", "fp8_args", "make_fp8_launcher",
           "resolve_fp8_config", "scale_mode", "scaled_mm"]
