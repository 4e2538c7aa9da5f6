"""Local (single-GPU) FP8 GEMM kernels: ``C = (A @ B) * scale_a * scale_b`` in bf16.

``torch._scaled_mm`` semantics: ``A`` ``[M, K]`` float8 e4m3 row-major, ``B`` ``[K, N]`` float8
e4m3 **column-major** (``B^T`` ``[N, K]`` contiguous, what ``torch._scaled_mm`` requires and
what ``w.t()`` of a row-major ``[N, K]`` weight is), fp32 accumulation, fp32 scales, bf16 out:

* tensor-wise: ``scale_a`` and ``scale_b`` are one fp32 each, ``C = acc * (scale_a * scale_b)``;
* row-wise: ``scale_a`` ``[M, 1]`` (one per row of A), ``scale_b`` ``[1, N]`` (one per column of
  B), ``C[m, n] = acc[m, n] * scale_a[m] * scale_b[n]``.

The two scales are independent constexpr switches (``SA_ROWS``, ``SB_COLS``): ``torch._scaled_mm``
takes both tensor-wise or both row-wise, and the fused all-gather + GEMM needs A row-wise with
B tensor-wise (a tensor-wise scale of each rank's shard travels with the shard's rows,
docs/fp8.md), which these kernels do the same way.

Why B column-major: Hopper's FP8 wgmma reads both operands K-major from shared memory (it has
no transpose for 8-bit types), so a ``[BLOCK_K, BLOCK_N]`` tile of a row-major B would need a
transpose through registers on every K step. The TMA kernel loads ``B^T`` tiles
``[BLOCK_N, BLOCK_K]`` and hands ``b.T`` to ``tl.dot`` (a view: no data moves), as Triton's
FP8 persistent-matmul tutorial does. The pointer kernel takes any strides (correct for any
layout, fast for column-major B).

Why the scales are applied in the epilogue, after the K loop and before the one rounding to
bf16: the scales are per row / per column (or global), so they factor out of the K sum; one
fp32 multiply per output element, as cuBLAS and CUTLASS do for ``torch._scaled_mm``.

``FAST_ACCUM``: Hopper's FP8 wgmma accumulates with reduced precision inside one instruction
chain. ``FAST_ACCUM=False`` (default, ``torch._scaled_mm``'s ``use_fast_accum=False``) makes
Triton promote the partial sum into the fp32 accumulator after every ``BLOCK_K`` step
(``max_num_imprecise_acc=BLOCK_K``: each K step's wgmma chain starts from zero and is added
in fp32); True keeps the whole K loop in the wgmma accumulator (``use_fast_accum=True``),
faster and less accurate.

The structure is the bf16 kernels' (:mod:`.gemm`): ``offs_m`` computed once per tile feeds the A
loads, the ``scale_a`` load and the C store, which is what Syncopate's access analysis reads to
know which rows of A **and** of ``scale_a`` a tile needs (the fused all-gather gathers both).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemm import _grouped_tile
from .gemm_config import short_name


@triton.jit
def _scale_acc(acc, scale_a_ptr, scale_b_ptr, offs_m, offs_n, M, N,
               SA_ROWS: tl.constexpr, SB_COLS: tl.constexpr):
    """``acc * scale_a * scale_b`` in fp32: ``scale_a[offs_m]`` per row when ``SA_ROWS`` (masked
    to ``< M``), else the scalar ``scale_a[0]``; likewise ``scale_b[offs_n]`` when ``SB_COLS``."""
    if SA_ROWS:
        sa = tl.load(scale_a_ptr + offs_m, mask=offs_m < M, other=0.0)
        acc = acc * sa[:, None]
    else:
        sa0 = tl.load(scale_a_ptr)
        if not SB_COLS:
            # both tensor-wise: one alpha, as cuBLAS applies it
            return acc * (sa0 * tl.load(scale_b_ptr))
        acc = acc * sa0
    if SB_COLS:
        sb = tl.load(scale_b_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc = acc * sb[None, :]
    else:
        acc = acc * tl.load(scale_b_ptr)
    return acc


@triton.jit
def matmul_fp8_ptr_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,  #
                          M, N, K,  #
                          stride_am, stride_ak,  #
                          stride_bk, stride_bn,  #
                          stride_cm, stride_cn,  #
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  #
                          GROUP_M: tl.constexpr,  #
                          SA_ROWS: tl.constexpr, SB_COLS: tl.constexpr,  #
                          IMPRECISE_ACC: tl.constexpr):
    """One program per ``BLOCK_M x BLOCK_N`` tile; launch ``cdiv(M, BM) * cdiv(N, BN)``.

    Masked as :func:`.gemm.matmul_ptr_kernel` (ragged M, N, K; the K tail read as zeros).
    ``IMPRECISE_ACC``: ``tl.dot``'s ``max_num_imprecise_acc`` (``BLOCK_K``: promote every K
    step; None: never, see the module docstring's ``FAST_ACCUM``).
    """
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        offs_kk = k * BLOCK_K + offs_k
        mask_k = offs_kk < K
        a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_kk[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_kk[:, None] * stride_bk + offs_n[None, :] * stride_bn)
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=IMPRECISE_ACC)

    acc = _scale_acc(acc, scale_a_ptr, scale_b_ptr, offs_m, offs_n, M, N, SA_ROWS, SB_COLS)
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + (offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn)
    tl.store(c_ptrs, c, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def matmul_fp8_tma_persistent_kernel(a_ptr, b_ptr, c_ptr, scale_a_ptr, scale_b_ptr,  #
                                     M, N, K,  #
                                     stride_am, stride_bn, stride_cm,  #
                                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                     BLOCK_K: tl.constexpr,  #
                                     GROUP_M: tl.constexpr,  #
                                     NUM_SMS: tl.constexpr,  #
                                     EPILOGUE_SUBTILE: tl.constexpr,  #
                                     FLATTEN: tl.constexpr,  #
                                     WARP_SPECIALIZE: tl.constexpr,  #
                                     SA_ROWS: tl.constexpr, SB_COLS: tl.constexpr,  #
                                     IMPRECISE_ACC: tl.constexpr):
    """Persistent TMA FP8 GEMM (launch ``min(NUM_SMS, tiles)`` programs), the bf16 kernel's
    tile loop (:func:`.gemm.matmul_tma_persistent_kernel`) with B read as ``B^T`` ``[N, K]``
    (row stride ``stride_bn``, unit K stride) and the scales applied before the C store.

    A ``[M, K]`` (``stride_am``), ``B^T`` ``[N, K]`` (``stride_bn``) and C ``[M, N]``
    (``stride_cm``) have unit inner strides, 16-byte multiple leading strides and 16-byte
    aligned bases (TMA's rules); the scales are plain pointer loads.
    """
    dtype: tl.constexpr = c_ptr.dtype.element_ty
    C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[N, K], strides=[stride_bn, 1],
                                       block_shape=[BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, C_BLOCK_N])

    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN,
                            warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_K
            a = a_desc.load([offs_m, offs_k])
            b = b_desc.load([offs_n, offs_k])
            acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=IMPRECISE_ACC)

        rows = offs_m + tl.arange(0, BLOCK_M)
        cols = offs_n + tl.arange(0, BLOCK_N)
        acc = _scale_acc(acc, scale_a_ptr, scale_b_ptr, rows, cols, M, N, SA_ROWS, SB_COLS)
        if EPILOGUE_SUBTILE:
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            c_desc.store([offs_m, offs_n], acc0.to(dtype))
            c_desc.store([offs_m, offs_n + BLOCK_N // 2], acc1.to(dtype))
        else:
            c_desc.store([offs_m, offs_n], acc.to(dtype))


FP8_KERNELS = {"ptr": "matmul_fp8_ptr_kernel", "tma": "matmul_fp8_tma_persistent_kernel"}


def fp8_kernel_fn(kernel: str):
    """The ``@triton.jit`` function of ``kernel`` ('ptr', 'tma' or the full name)."""
    return {"ptr": matmul_fp8_ptr_kernel,
            "tma": matmul_fp8_tma_persistent_kernel}[short_name(kernel, FP8_KERNELS, "FP8 GEMM")]


__all__ = ["FP8_KERNELS", "fp8_kernel_fn", "matmul_fp8_ptr_kernel",
           "matmul_fp8_tma_persistent_kernel"]
