"""Grouped GEMM for mixture-of-experts: every group of tokens times its expert's weight.

Layout (the capacity layout MoE implementations use when the routing is data-dependent but the
buffers must be static):

* ``A`` ``[G, C, K]`` viewed as ``[G * C, K]``: group ``g`` owns rows ``[g * C, (g + 1) * C)``
  (``C`` = capacity); only its first ``count[g]`` rows are valid, the rest are padding whose
  contents are never read.
* ``count`` ``[G]`` int32 **on the device**: the valid rows per group, written by whatever
  routed the tokens (a packing kernel, or an all-to-all). No host ever reads it, so the GEMM
  launches without a device-to-host synchronisation; its grid covers the whole capacity.
* ``B`` ``[E, K, N]``: the experts' weights (local to this GPU); group ``g`` uses expert
  ``g % E``: groups are numbered ``segment * E + expert``. One segment (``G = E``) is the plain
  ``[E, C, K]`` capacity layout; the dispatch schedule (docs/moe.md) receives one segment per
  source rank (``G = W * E``), each holding every local expert's capacity rows.
* ``Out`` ``[G * C, N]``: rows past a group's count are **not written** (undefined).

One program per ``BLOCK_M x BLOCK_N`` tile of the capacity grid (non-persistent). A tile whose
first row is at or past its group's count does no work: it loads the count and stores nothing
(its store is masked off by the count), so on a skewed routing (one hot expert, empty experts)
the cost follows the tokens, not the capacity. The store stays outside the count branch so that,
when the output is a tensor the schedule sends back (the MoE combine), every tile signals its
box, empty or not.
That branch is also what makes the fused dispatch sound and cheap (docs/moe.md): the compiler
places a tile's wait for its rows of ``A`` inside the branch (``insert-waits`` never hoists a wait
above an ``scf.if``), so a tile past the count waits for nothing but the count.

Where a group's rows and count live is affine in (segment, expert) with per-launch offsets:
group ``g = seg * E + e`` reads ``A`` group ``a_base + seg * a_seg + e`` and count
``cnt_base + seg * cnt_seg + e``, and writes ``Out`` group ``g``. The plain layout passes
``(0, E, 0, E)``; the fused dispatch (docs/moe.md) reads rank ``d``'s experts out of the
gathered buffer of every source's groups (``a_base = d * E_local``, ``a_seg = E_total``, and the
per-destination counts likewise), while writing a local output.

Written the way the access analysis reads (docs/soundness.md, like
:func:`~.gemm.matmul_ptr_kernel`): the row coordinate ``(a_base + seg * a_seg + e) * C + pid_m * BLOCK_M``
is computed once and feeds the ``A`` loads; addresses are recomputed from the K-loop induction
variable (no loop-carried pointer); ragged K and N are masked; the rows are masked with the
count clamped to the capacity, so even a corrupt count cannot make a tile read another group's
rows. ``tl.dot`` lowers to wgmma on sm_90 (fp32 accumulation, bf16/fp16 operands).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .gemm import _grouped_tile


@triton.jit
def grouped_gemm_kernel(a_ptr, b_ptr, c_ptr, count_ptr,  #
                        C, N, K, E, M_out,  #
                        a_base, a_seg, cnt_base, cnt_seg,  #
                        stride_am, stride_ak,  #
                        stride_be, stride_bk, stride_bn,  #
                        stride_cm, stride_cn,  #
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr):
    """Launch ``G * cdiv(C, BLOCK_M) * cdiv(N, BLOCK_N)`` programs (see the module docstring).

    Program ``pid`` computes tile ``(pid_m, pid_n)`` of group ``g``: groups are outermost, so
    the programs of one group are launched together and share its expert's ``B`` in L2; inside
    a group the tiles run in the GEMM's grouped order (``GROUP_M`` tile rows swept column by
    column, :func:`~.gemm._grouped_tile`). A row-major sweep inside the group streamed the
    whole expert weight from HBM once per tile row (117 MB per Mixtral expert, 9 times for a
    1152-row capacity: 1.5x cuBLAS's time on an H200); in grouped order the ``GROUP_M`` rows
    of ``A`` and one column block of ``B`` are what the running tiles share.
    """
    # Index scalars, not strides: the access analysis takes an integer kernel argument that
    # multiplies an address for a stride (and checks it against the tensor's shape at launch).
    # The capacity and the group offsets are indices, so they go through max(., 0), which makes
    # them opaque index values to it (and keeps a negative argument from addressing before the
    # buffer); the address stays exact: the wait's box is computed from these very values.
    C = tl.maximum(C, 0)
    a_base = tl.maximum(a_base, 0)
    a_seg = tl.maximum(a_seg, 0)
    cnt_base = tl.maximum(cnt_base, 0)
    cnt_seg = tl.maximum(cnt_seg, 0)
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(C, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = num_pid_m * num_pid_n
    g = pid // tiles_per_group
    t = pid % tiles_per_group
    pid_m, pid_n = _grouped_tile(t, num_pid_m, num_pid_n, GROUP_M)
    seg = g // E
    expert = g % E
    count = tl.minimum(tl.load(count_ptr + (cnt_base + seg * cnt_seg + expert)), C)
    offs_r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)   # row inside the group
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_r < count
    mask_n = offs_n < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if pid_m * BLOCK_M < count:
        row0 = (a_base + seg * a_seg + expert) * C + pid_m * BLOCK_M
        offs_am = row0 + tl.arange(0, BLOCK_M)
        offs_k = tl.arange(0, BLOCK_K)
        b_base = b_ptr + expert * stride_be
        for k in range(0, tl.cdiv(K, BLOCK_K)):
            offs_kk = k * BLOCK_K + offs_k
            mask_k = offs_kk < K
            a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_kk[None, :] * stride_ak)
            b_ptrs = b_base + (offs_kk[:, None] * stride_bk + offs_n[None, :] * stride_bn)
            a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = tl.dot(a, b, acc)
    # Outside the branch, masked by the count: a tile past the count stores nothing, but
    # when the output is a produced tensor (the MoE combine) the compiler's signal after this
    # store still releases the tile's box, so the chunk's PRODUCED flag reaches its static
    # target (docs/moe.md section 7). Unfused, the all-false store is a no-op.
    # ``offs_cm < M_out`` (the output's rows) never masks anything on a correct launch; it is
    # the bound the access analysis proves the store by when the output is a per-rank part
    # (view='rank'): a launch-time requirement M_out <= the part's rows.
    offs_cm = g * C + offs_r
    mask_c = mask_m & (offs_cm < M_out)
    c_ptrs = c_ptr + (offs_cm[:, None] * stride_cm + offs_n[None, :] * stride_cn)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_c[:, None] & mask_n[None, :])
