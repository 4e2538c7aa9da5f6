"""Split-K variant of the persistent TMA GEMM, for problems with too few output tiles to fill
the GPU (K-heavy shapes such as 1024x1024x32768, small-M decode shapes such as 16x8192x8192).

Why: a 1024x1024 output is 64 tiles of 128x128, so one program per tile leaves 68 of an H200's
132 SMs idle for the whole (long) K loop. Splitting K into ``SPLIT_K`` slabs gives
``tiles * SPLIT_K`` work units of equal size and fills the machine.

How the partial sums are combined, and why it is deterministic: each work unit ``(split, tile)``
writes its fp32 partial tile to its own slot of a workspace ``[SPLIT_K, Mp, Np]`` (no atomics,
no slot written twice), then :func:`splitk_reduce_kernel` -- a second launch on the same stream,
so it starts after every partial is written -- adds the slots of each element in the fixed
order ``0, 1, ..., SPLIT_K - 1`` in fp32 and rounds once to the output dtype. The summation
order depends only on ``SPLIT_K`` and the tile shape, never on which program finished first,
so two runs give bitwise-identical results. (It differs from the unsplit kernel's result in
the last bits: the fp32 sum is associated differently.)

Local matmul only: the fused ops never use this kernel (its second launch and the workspace
have no place in the compiler's chunk/wait model), which :meth:`GemmConfig.check` enforces with
``fusable=True``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemm import _grouped_tile


@triton.jit
def matmul_tma_splitk_kernel(a_ptr, b_ptr, ws_ptr,  #
                             M, N, K,  #
                             stride_am, stride_bk, stride_ws,  #
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                             BLOCK_K: tl.constexpr,  #
                             GROUP_M: tl.constexpr,  #
                             SPLIT_K: tl.constexpr,  #
                             NUM_SMS: tl.constexpr,  #
                             EPILOGUE_SUBTILE: tl.constexpr,  #
                             FLATTEN: tl.constexpr):
    """Persistent split-K partial GEMM: launch ``min(NUM_SMS, tiles * SPLIT_K)`` programs.

    Work unit ``u`` is split ``u // tiles`` of tile ``u % tiles`` (tiles in grouped order):
    programs that run at the same time work on the same K slab of neighbouring tiles, so the
    slab's A and B panels are shared in L2. Split ``s`` covers K tiles
    ``[s * k_per, min((s + 1) * k_per, k_tiles))`` with ``k_per = cdiv(k_tiles, SPLIT_K)``; a
    split past the end has an empty loop and writes zeros, which keeps the reduction uniform.

    The workspace is fp32 ``[SPLIT_K * Mp, stride_ws]`` with ``Mp = cdiv(M, BLOCK_M) * BLOCK_M``:
    padding M to whole tiles keeps a tile's rows inside its own split's slot even where the
    TMA store would otherwise clip only at the workspace's end (rows ``>= M`` of split ``s``
    would land in split ``s + 1``). Columns ``>= N`` are clipped by the descriptor.
    """
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    m_pad = num_pid_m * BLOCK_M
    ws_desc = tl.make_tensor_descriptor(ws_ptr, shape=[SPLIT_K * m_pad, N],
                                        strides=[stride_ws, 1],
                                        block_shape=[BLOCK_M, C_BLOCK_N])

    start_pid = tl.program_id(axis=0)
    k_tiles = tl.cdiv(K, BLOCK_K)
    k_per = tl.cdiv(k_tiles, SPLIT_K)
    num_tiles = num_pid_m * num_pid_n
    num_units = num_tiles * SPLIT_K

    for unit in tl.range(start_pid, num_units, NUM_SMS, flatten=FLATTEN):
        split = unit // num_tiles
        tile_id = unit - split * num_tiles
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N
        k_lo = split * k_per
        k_hi = tl.minimum(k_lo + k_per, k_tiles)

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_lo, k_hi):
            offs_k = ki * BLOCK_K
            a = a_desc.load([offs_m, offs_k])
            b = b_desc.load([offs_k, offs_n])
            acc = tl.dot(a, b, acc)

        row = split * m_pad + offs_m
        if EPILOGUE_SUBTILE:
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            ws_desc.store([row, offs_n], acc0)
            ws_desc.store([row, offs_n + BLOCK_N // 2], acc1)
        else:
            ws_desc.store([row, offs_n], acc)


@triton.jit
def splitk_reduce_kernel(ws_ptr, c_ptr,  #
                         M, N, m_pad,  #
                         stride_ws, stride_cm, stride_cn,  #
                         SPLIT_K: tl.constexpr,  #
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``C = sum_s ws[s]`` for the ``BLOCK_M x BLOCK_N`` block of this program (2-D grid), the
    slots added in the fixed order ``0 .. SPLIT_K - 1`` in fp32, then one rounding to C's dtype.
    Masked pointer stores, so C may have any strides (TMA's alignment rules do not apply)."""
    pid_m = tl.program_id(axis=0)
    pid_n = tl.program_id(axis=1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    ptrs = ws_ptr + offs_m[:, None].to(tl.int64) * stride_ws + offs_n[None, :]
    acc = tl.load(ptrs, mask=mask, other=0.0)
    slot = m_pad.to(tl.int64) * stride_ws
    for s in tl.static_range(1, SPLIT_K):
        acc += tl.load(ptrs + s * slot, mask=mask, other=0.0)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
