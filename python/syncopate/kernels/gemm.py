"""Local (single-GPU) Triton GEMM kernels: the kernels Syncopate fuses with communication.

``C[M, N] = A[M, K] @ B[K, N]`` in bf16/fp16 with fp32 accumulation, in two forms:

* :func:`matmul_ptr_kernel` -- one program per output tile, pointer arithmetic with masks.
  Works for any shape and any strides; the form the compiler's access analysis reads most
  directly (every load address is an affine function of ``pid_m``/``pid_n`` and the K-loop
  induction variable, every mask a comparison against ``M``/``N``/``K``).
* :func:`matmul_tma_persistent_kernel` -- persistent (one program per SM) with a tile loop and
  TMA (tensor-descriptor) loads and stores. The fast one on Hopper.

Both are written the way Syncopate's passes expect (docs/soundness.md; passes/tile_remap.py,
passes/insert_waits.py):

* The tile's M coordinate is computed **once** per tile (``pid_m``) and the very same SSA value
  feeds the A loads and the C store, so "which rows of A does this tile read" and "which rows of
  C does it write" are one fact for the access analysis. (Triton's tutorial 09 recomputes the
  epilogue coordinates from a second counter ``tile_id_c`` to dodge a Blackwell pipeliner bug;
  we do not, on purpose: on Hopper it is not needed, and it would hide the producer/consumer
  relation from the compiler.)
* A is ``[M, K]`` indexed by the tile's row coordinate ``pid_m * BLOCK_M``: for
  all-gather + GEMM the communicated operand is A, sharded on M, so each chunk of A rows maps
  to a set of ``pid_m`` values, and the wait is inserted before the first A load of a tile.
* Tiles are visited in *grouped* order (``GROUP_M`` row-tiles share each column sweep): the
  ``GROUP_M`` row panels of A and the current column panel of B stay in L2 while a group is
  computed, which cuts DRAM traffic versus row-major tile order. The tile-remap pass replaces
  the tile id that feeds this mapping (the program id, or the persistent loop's ``tile_id``) by a
  chunk-arrival-ordered one; the grouped mapping after it is unchanged.

Configurations and compile arguments live in :mod:`.gemm_config`, the host-side launch
(:func:`~.gemm_launch.matmul`) in :mod:`.gemm_launch`: this module holds the jit functions.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemm_config import _short


@triton.jit
def _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Map a linear tile id to ``(pid_m, pid_n)`` in grouped order.

    Tiles are numbered column-major inside groups of ``GROUP_M`` tile rows: ids
    ``[g * GROUP_M * num_pid_n, (g + 1) * GROUP_M * num_pid_n)`` cover tile rows
    ``[g * GROUP_M, g * GROUP_M + GROUP_M)`` (fewer in the last group) and every tile column.
    The mapping is a bijection onto the ``num_pid_m x num_pid_n`` tile grid for any sizes.
    """
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    tile_in_group = tile_id % num_pid_in_group
    pid_m = first_pid_m + (tile_in_group % group_size_m)
    pid_n = tile_in_group // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_ptr_kernel(a_ptr, b_ptr, c_ptr,  #
                      M, N, K,  #
                      stride_am, stride_ak,  #
                      stride_bk, stride_bn,  #
                      stride_cm, stride_cn,  #
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  #
                      GROUP_M: tl.constexpr):
    """One program per ``BLOCK_M x BLOCK_N`` tile of C; launch ``cdiv(M, BM) * cdiv(N, BN)``.

    Ragged shapes are handled with masks (no padding, no clamping of indices): rows ``>= M`` and
    columns ``>= N`` are neither read nor written, the K tail is read as zeros. Masks rather
    than the ``tl.where(offs < M, offs, 0)`` clamp of Triton's tutorials, because a masked
    load says exactly which region of A a tile reads (``rows [pid_m*BM, min(M, pid_m*BM+BM))``)
    while a clamp makes out-of-range rows alias row 0. The A address is recomputed from the
    K-loop induction variable each iteration (no loop-carried pointer), so it is an affine
    function of ``(pid_m, k)`` that the access analysis reads without chasing ``scf.for``
    iter_args; Triton hoists the loop-invariant part, so this costs nothing measurable.

    The K loop is software-pipelined by Triton (``num_stages`` cp.async stages) and the dot
    lowers to wgmma on sm_90.
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
        acc = tl.dot(a, b, acc)

    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + (offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn)
    tl.store(c_ptrs, c, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr,  #
                                 M, N, K,  #
                                 stride_am, stride_bk, stride_cm,  #
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_K: tl.constexpr,  #
                                 GROUP_M: tl.constexpr,  #
                                 NUM_SMS: tl.constexpr,  #
                                 EPILOGUE_SUBTILE: tl.constexpr,  #
                                 FLATTEN: tl.constexpr,  #
                                 WARP_SPECIALIZE: tl.constexpr):
    """Persistent TMA GEMM: launch ``min(NUM_SMS, num_tiles)`` programs; each walks the tile ids
    ``start_pid, start_pid + NUM_SMS, ...`` in grouped order.

    Operands are row-major with unit inner stride: A ``[M, K]`` (``stride_am``), B ``[K, N]``
    (``stride_bk``), C ``[M, N]`` (``stride_cm``); leading strides must be multiples of 16 bytes
    and base pointers 16-byte aligned (TMA's rules). TMA zero-fills out-of-bounds reads and
    clips out-of-bounds writes, so ragged M, N, K need no masks.

    Why device-side descriptors (``tl.make_tensor_descriptor`` from raw pointers) instead of
    host-built ``TensorDescriptor`` arguments: the kernel keeps a plain pointer signature, so
    the fused kernel can swap a pointer for a peer's symmetric buffer (or an offset into a
    gathered buffer) without the host rebuilding 128-byte descriptors per launch, and the
    TTIR shows where each descriptor's base comes from. The descriptors live in a small
    global scratch that Triton obtains through ``triton.set_allocator`` (see
    :func:`ensure_tma_allocator`).

    Why persistent: one wave of programs, no tail-wave quantisation per launch, and with
    ``FLATTEN`` Triton fuses the tile loop and the K loop into one software-pipelined loop, so
    the TMA loads of the next tile are in flight while this tile's epilogue runs.
    ``WARP_SPECIALIZE`` asks Triton's automatic warp specialisation (producer warp for TMA,
    consumer warp groups for wgmma); on Hopper it requires ``FLATTEN=False``.
    ``EPILOGUE_SUBTILE`` stores C as two ``BLOCK_M x BLOCK_N/2`` halves, halving the shared
    memory staging buffer so that one more pipeline stage fits.

    ``offs_m = pid_m * BLOCK_M`` is computed once per tile and is the coordinate of both the A
    loads and the C stores (Syncopate's access analysis relies on it).
    """
    dtype: tl.constexpr = c_ptr.dtype.element_ty
    C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
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
            b = b_desc.load([offs_k, offs_n])
            acc = tl.dot(a, b, acc)

        if EPILOGUE_SUBTILE:
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            c_desc.store([offs_m, offs_n], acc0.to(dtype))
            c_desc.store([offs_m, offs_n + BLOCK_N // 2], acc1.to(dtype))
        else:
            c_desc.store([offs_m, offs_n], acc.to(dtype))


def kernel_fn(kernel: str):
    """The ``@triton.jit`` function of ``kernel`` ('ptr', 'tma' or the full name)."""
    return {"ptr": matmul_ptr_kernel, "tma": matmul_tma_persistent_kernel}[_short(kernel)]

