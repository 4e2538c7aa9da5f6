"""Host-side launch of the local GEMM kernels: :func:`matmul` and :func:`make_launcher`, the
operand checks they run first (:func:`check_operands`, host only, testable without a GPU),
the TMA scratch allocator and the device's SM count.

Split from :mod:`.gemm` (the ``@triton.jit`` kernels) and :mod:`.gemm_config` (configurations,
compile arguments): this is the only part of the local GEMMs that needs torch.
"""

from __future__ import annotations

import triton

from .. import dtypes
from ..errors import LaunchError
from .gemm import matmul_ptr_kernel, matmul_tma_persistent_kernel
from .gemm_config import _SUPPORTED_DTYPES, GemmConfig, _short, default_config


def _torch_dtype_name(t) -> str | None:
    """``'bf16'``/``'fp16'`` for a tensor the local GEMMs take, None for any other dtype."""
    name = dtypes.canonical(t.dtype) if dtypes.is_known(t.dtype) else None
    return name if name in _SUPPORTED_DTYPES else None


def _tma_alloc(size: int, alignment: int, stream):
    import torch
    return torch.empty(size, device="cuda", dtype=torch.int8)


def ensure_tma_allocator() -> None:
    """Install a torch-backed ``triton.set_allocator`` unless one is already set.

    Device-side tensor descriptors (``tl.make_tensor_descriptor``) are written by the kernel
    into a global scratch buffer (128 bytes per descriptor per program) that Triton requests
    from this allocator at every launch. Triton keeps the allocator in a ``ContextVar``, so
    this checks the current context each time (cheap) rather than a process-wide flag: a new
    thread starts without one. An allocator the user installed is left alone. The torch
    caching allocator makes the per-launch request free and stream-ordered.
    """
    try:
        from triton.runtime._allocation import NullAllocator, _allocator
        installed = not isinstance(_allocator.get(), NullAllocator)
    except ImportError:  # private API moved: install unconditionally
        installed = False
    if not installed:
        triton.set_allocator(_tma_alloc)


_NUM_SMS_CACHE: dict[int, int] = {}


def num_sms(device=None) -> int:
    """Multiprocessor count of a CUDA device (cached)."""
    import torch
    idx = torch.device(device if device is not None else "cuda").index
    if idx is None:
        idx = torch.cuda.current_device()
    if idx not in _NUM_SMS_CACHE:
        _NUM_SMS_CACHE[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _NUM_SMS_CACHE[idx]


def _max_offset(t) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def _overlaps(x, y) -> bool:
    if x.numel() == 0 or y.numel() == 0:
        return False
    xs, ys = x.element_size(), y.element_size()
    x0, y0 = x.data_ptr(), y.data_ptr()
    x1 = x0 + (_max_offset(x) + 1) * xs
    y1 = y0 + (_max_offset(y) + 1) * ys
    return x0 < y1 and y0 < x1


def check_operands(a, b, out=None, kernel: str = "tma") -> tuple[int, int, int]:
    """Validate ``matmul``'s operands; return ``(M, N, K)``. Raises :class:`LaunchError`.

    Runs entirely on the host (works on CPU tensors), device last, so the checks are testable
    without a GPU.
    """
    import torch
    k = _short(kernel)
    for name, t in (("a", a), ("b", b)) + ((("out", out),) if out is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise LaunchError(f"{name} must be 2-D, got shape {tuple(t.shape)}: reshape it to a "
                              f"matrix (e.g. x.flatten(0, -2) for a batch of rows)")
    if a.dtype != b.dtype:
        raise LaunchError(f"a and b must have the same dtype, got a: {a.dtype}, b: {b.dtype}; "
                          f"cast one of them (e.g. b.to({a.dtype}))")
    if _torch_dtype_name(a) is None:
        raise LaunchError(f"a and b must be torch.bfloat16 or torch.float16, got {a.dtype}; "
                          f"cast them (e.g. a.to(torch.bfloat16))")
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise LaunchError(f"shape mismatch: a is {tuple(a.shape)} ([M, K]) and b is "
                          f"{tuple(b.shape)} ([K, N]); b.shape[0] must equal a.shape[1] = {K} "
                          f"(pass b, not b.T, if b is stored [N, K])")
    if out is not None:
        if tuple(out.shape) != (M, N):
            raise LaunchError(f"out must have shape (M, N) = {(M, N)}, got {tuple(out.shape)}")
        if out.dtype != a.dtype:
            raise LaunchError(f"out must have the operands' dtype {a.dtype}, got {out.dtype}")
        if out.numel() > 1 and any(st == 0 for s, st in zip(out.shape, out.stride()) if s > 1):
            raise LaunchError("out has a zero stride (an expanded view): tiles would race on the "
                              "same elements; pass a dense tensor")
        if _overlaps(out, a) or _overlaps(out, b):
            raise LaunchError("out overlaps a or b in memory; pass a separate output buffer")
    tensors = (("a", a), ("b", b)) + ((("out", out),) if out is not None else ())
    if M == 0 or N == 0 or K == 0:
        pass  # nothing is launched (empty result, or zeros for K == 0): layouts do not matter
    elif k == "tma":
        for name, t in tensors:
            rows, cols = t.shape
            if t.stride(1) != 1 and cols > 1:
                raise LaunchError(
                    f"kernel='tma' needs {name} row-major with unit inner stride, got strides "
                    f"{tuple(t.stride())} (non-contiguous): pass {name}.contiguous(), or use "
                    f"kernel='ptr' which takes any strides")
            if rows > 1 and (t.stride(0) * t.element_size()) % 16:
                raise LaunchError(
                    f"kernel='tma' needs {name}'s row stride to be a multiple of 16 bytes (TMA), "
                    f"got {t.stride(0)} elements of {t.element_size()} bytes: pad the row length "
                    f"to a multiple of {16 // t.element_size()}, or use kernel='ptr'")
            if t.data_ptr() % 16:
                raise LaunchError(f"kernel='tma' needs {name} 16-byte aligned (TMA), got address "
                                  f"{t.data_ptr():#x}: pass a fresh tensor or {name}.clone(), or "
                                  f"use kernel='ptr'")
    else:
        for name, t in tensors:
            if _max_offset(t) >= 2**31 or any(st < 0 for st in t.stride()):
                raise LaunchError(f"kernel='ptr' uses 32-bit element offsets and non-negative "
                                  f"strides; {name} (shape {tuple(t.shape)}, strides "
                                  f"{tuple(t.stride())}) exceeds that: use kernel='tma'")
    for name, t in tensors[1:]:
        if t.device != a.device:
            raise LaunchError(f"{name} is on {t.device} but a is on {a.device}; put all operands "
                              f"on the same CUDA device")
    if a.device.type != "cuda":
        raise LaunchError(f"the GEMM kernels run on a CUDA device; operands are on {a.device}: "
                          f"move them with .cuda()")
    return M, N, K


def _tma_row_stride(t) -> int:
    """The row stride to put in a TMA descriptor: a single-row tensor's stride is arbitrary in
    torch but must still be a multiple of 16 bytes for TMA, so use the padded row length."""
    if t.shape[0] > 1:
        return t.stride(0)
    per16 = 16 // t.element_size()
    return triton.cdiv(max(t.shape[1], 1), per16) * per16


def make_launcher(a, b, out=None, *, kernel: str = "tma", config=None):
    """Validate once and return ``(launch, out)``: ``launch()`` enqueues ``out = a @ b`` on the
    current stream with no host-side checks (what the benchmark times). Same arguments and
    errors as :func:`matmul`."""
    import torch
    k = _short(kernel)
    M, N, K = check_operands(a, b, out, k)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return (lambda: None), out
    if K == 0:
        return out.zero_, out
    cfg = GemmConfig.of(config) if config is not None else default_config(M, N, K, a.dtype, k)
    cfg.check(k)
    device = a.device
    if k == "ptr":
        grid = (triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N),)
        args = (a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                out.stride(0), out.stride(1))
        kwargs = dict(**cfg.constexprs(k), **cfg.options())

        def launch():
            with torch.cuda.device(device):
                matmul_ptr_kernel[grid](*args, **kwargs)
    else:
        sms = num_sms(device)
        tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
        grid = (min(sms, tiles),)
        args = (a, b, out, M, N, K, _tma_row_stride(a), _tma_row_stride(b), _tma_row_stride(out))
        kwargs = dict(**cfg.constexprs(k, sms), **cfg.options())

        def launch():
            ensure_tma_allocator()
            with torch.cuda.device(device):
                matmul_tma_persistent_kernel[grid](*args, **kwargs)
    return launch, out


def matmul(a, b, out=None, *, kernel: str = "tma", config=None):
    """``out = a @ b`` with a local Triton GEMM: ``a`` ``[M, K]``, ``b`` ``[K, N]``, bf16 or fp16,
    fp32 accumulation, result in the operands' dtype (written into ``out`` when given).

    ``kernel='tma'`` (persistent, TMA; needs row-major operands with 16-byte aligned rows) or
    ``'ptr'`` (one program per tile; any strides). ``config``: a :class:`GemmConfig`, a dict of
    its fields or None for :func:`default_config`. Bad input raises :class:`LaunchError`
    before anything is launched.
    """
    launch, out = make_launcher(a, b, out, kernel=kernel, config=config)
    launch()
    return out
