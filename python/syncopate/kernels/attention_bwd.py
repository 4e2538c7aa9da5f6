"""Local (single-GPU) flash-attention backward: dQ, dK, dV from the forward's ``o`` and ``lse``.

Why a kernel of our own: a sequence-parallel model trains only if its attention has a backward,
and the context-parallel backward is built the way the forward is -- the compiler fuses an
unmodified local kernel with a schedule (K/V all-gathered inside the KV loop again, dK/dV
partials reduce-scattered to their owners).  The kernels therefore know nothing about
communication and are written so the passes find what they need:

* :func:`attn_bwd_dkdv_kernel` -- one program per KV block (the tile coordinate the remap
  orders by chunk arrival): K and V loaded at its start (where the fused kernel's chunk wait
  goes), a loop over the *local* query rows of every query head of its group, and one store of
  the KV block's dK and dV at the end (the tiles a reduce-scatter's signals follow).  GQA
  partials are summed inside the program over the group's heads, so the kernel is
  deterministic (no atomics: issue 28 refuses them on communicated tensors anyway);
* :func:`attn_bwd_dq_kernel` -- one program per block of local query rows, loops over the
  (gathered) K/V blocks; the context-parallel backward runs it locally, after the fused
  dK/dV kernel has filled the K/V buffers;
* :func:`attn_bwd_preprocess` -- ``delta = rowsum(dO * O)`` per query row (fp32).

**No branch in a loop.**  Triton does not software-pipeline loads under an ``if``, so the
loops visit exactly the blocks that matter, with bounds computed before the loop.  A shard's
local query rows -- contiguous, or a rank's zigzag shard (segments ``r`` and ``2W-1-r``, in
that order) -- are monotone in original position, so the rows that see a KV block are a
suffix of them (:func:`_rows_before`): the dK/dV loops run the query blocks that hold the
block's diagonal (masked) and then those that see all of it (no mask), each flattened over
(GQA head, query block) so the pipeline runs across heads.  The dQ loops walk the KV blocks in
original order, reading each at its stored row: the blocks every row sees whole (no mask),
then the diagonal ones and a ragged last block (masked).  Rows past the sequence, and in
dK/dV keys past it (never stored), need no mask: their operands load as zeros and add
nothing; dQ masks a ragged last KV block because ``exp(-lse)`` of a zero key overflows for a
row whose scores all lie below about -88.  Loads are pointer loads, which Triton turns into pipelined
asynchronous copies (``cp.async``) in these loops: the fused kernel's K/V and dK/dV must be
addressed from the buffer parameters for the compiler's access analysis, and pointer loads
keep every backward free of TMA's alignment and Hopper preconditions.

Those are the *fusable* kernels, and what :func:`attention_backward` runs by default, with
one config for both (:func:`tiles`, :func:`default_backward_config`).  ``fusable=False`` runs
the *fast* variants on one GPU (issue 31; experimental until ``tests/gpu`` passes on them on a
GPU): :func:`attn_bwd_dq_fast_kernel` and :func:`attn_bwd_dkdv_fast_kernel` read through TMA
descriptors, take a config each from the per-GPU table, and take a contiguous sequence only.

Contract (:func:`attention_backward`): the forward's (:mod:`.attention`: ``q [B, Hq, Sq, D]``,
``k, v [B, Hkv, Skv, D]``, GQA, bf16/fp16, D in 64/128, SDPA's top-left causal mask, ``lse`` the
natural log-sum-exp of the scaled scores), plus ``do`` like ``o``.  Returns ``(dq, dk, dv)`` in
the input dtype, accumulated in fp32.  With ``segments = 2W`` (and ``q_offset``) the sequence is
stored in the zigzag order of :mod:`.attention_zigzag` and the causal mask is on *original*
positions: rank ``r``'s shard of queries (``q_offset = r * Skv / W``) against the whole gathered
K/V gives that rank's dQ and its partial dK/dV for every KV row.

The recurrences (FlashAttention-2): ``P = exp(scale * Q K^T - lse)``, ``dV = P^T dO``,
``dP = dO V^T``, ``dS = P * (dP - delta)``, ``dQ = scale * dS K``, ``dK = scale * dS^T Q``; the
exponentials are ``exp2`` with ``log2(e)`` folded into the scale, as in the forward.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from ..errors import LaunchError
from .attention import (LOG2E, AttentionConfig, _rows_desc, _unit_last, _zigzag_original,
                        _zigzag_stored, check_device, check_operands, fast_config,
                        fast_path_reason, strides3, tma_strides)
from .gemm_launch import ensure_tma_allocator


@triton.jit
def attn_bwd_preprocess(O, DO, DELTA, stride_ob, stride_oh, stride_om,
                        stride_dob, stride_doh, stride_dom, H_Q, SEQ_Q,
                        HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr):
    """``DELTA[b, h, i] = sum_d O[b, h, i, d] * dO[b, h, i, d]`` (fp32). Grid
    ``(cdiv(SEQ_Q, BLOCK_M), B * H_Q)``; ``DELTA`` contiguous ``[B, H_Q, SEQ_Q]``."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    ok = rows < SEQ_Q
    o = tl.load(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_om + offs_d[None, :],
                mask=ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom
                 + offs_d[None, :], mask=ok[:, None], other=0.0)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    tl.store(DELTA + pid_bh * SEQ_Q + rows, delta, mask=ok)


@triton.jit
def _rows_before(x, Q_OFFSET, SEQ_Q, SEG_LEN, SEGMENTS: tl.constexpr):
    """How many of the program's local query rows have an original position below ``x``.
    The local rows are monotone in original position -- a contiguous shard, or a rank's
    zigzag shard (slots ``2r`` and ``2r + 1``: segments ``r`` and ``SEGMENTS - 1 - r``) -- so
    the rows at or past ``x`` are the suffix from this count on."""
    if SEGMENTS == 0:
        n = x - Q_OFFSET
    else:
        r = Q_OFFSET // (2 * SEG_LEN)
        n = tl.minimum(tl.maximum(x - r * SEG_LEN, 0), SEG_LEN) \
            + tl.minimum(tl.maximum(x - (SEGMENTS - 1 - r) * SEG_LEN, 0), SEG_LEN)
    return tl.minimum(tl.maximum(n, 0), SEQ_Q)


@triton.jit
def _dkdv_block(dk, dv, k, v, q_base, do_base, LSE, DELTA, stat, start_m, col_orig, offs_m,
                offs_d, stride_qm, stride_dom, qk_scale, SEQ_Q, Q_OFFSET, SEG_LEN,
                SEGMENTS: tl.constexpr, MASKED: tl.constexpr):
    """One block of query rows of one head against the program's KV block.  Rows past
    ``SEQ_Q`` need no mask: their Q and dO load as zeros, so they add nothing to dK and dV;
    ``MASKED`` applies the causal mask (original positions; a query block lies in one
    segment)."""
    rows = start_m + offs_m
    row_ok = rows < SEQ_Q
    q = tl.load(q_base + rows[:, None] * stride_qm + offs_d[None, :], mask=row_ok[:, None],
                other=0.0)
    do = tl.load(do_base + rows[:, None] * stride_dom + offs_d[None, :], mask=row_ok[:, None],
                 other=0.0)
    lse2 = tl.load(LSE + stat + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + stat + rows, mask=row_ok, other=0.0)
    qkT = tl.dot(k, tl.trans(q))
    pT = tl.math.exp2(tl.fma(qkT, qk_scale, -lse2[None, :]))
    if MASKED:
        row_orig = _zigzag_original(Q_OFFSET + start_m, SEG_LEN, SEGMENTS) + offs_m
        pT = tl.where(row_orig[None, :] >= col_orig[:, None], pT, 0.0)
    dv = tl.dot(pT.to(do.dtype), do, dv)
    dpT = tl.dot(v, tl.trans(do))
    dsT = pT * (dpT - delta[None, :])
    dk = tl.dot(dsT.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale,
                         stride_qb, stride_qh, stride_qm,
                         stride_kb, stride_kh, stride_kn,
                         stride_vb, stride_vh, stride_vn,
                         stride_dob, stride_doh, stride_dom,
                         stride_dkb, stride_dkh, stride_dkn,
                         stride_dvb, stride_dvh, stride_dvn,
                         H_Q, GROUP, SEQ_Q, SEQ_KV, Q_OFFSET, SEG_LEN,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, SEGMENTS: tl.constexpr):
    """One program: dK and dV of BLOCK_N key rows of one (batch, KV head), summed over the
    local query rows of every query head of its group.  Grid ``(cdiv(SEQ_KV, BLOCK_N),
    B * H_KV)``.

    K and V are loaded once at the start (where the fused kernel waits for their chunk) and
    dK, dV stored once at the end.  The loops visit only the query blocks that see the KV
    block, computed from its original position (:func:`_rows_before`): causal, first the
    blocks holding its diagonal (masked), then the blocks that see all of it (no mask); each
    loop is flattened over (head of the GQA group, query block), so it has no branch and
    Triton pipelines its loads across heads."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    H_KV = H_Q // GROUP
    b = pid_bh // H_KV
    h_kv = pid_bh % H_KV

    n0 = pid_n * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_m = tl.arange(0, BLOCK_M)
    col_ok = cols < SEQ_KV
    k = tl.load(K + b * stride_kb + h_kv * stride_kh + cols[:, None] * stride_kn
                + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    v = tl.load(V + b * stride_vb + h_kv * stride_vh + cols[:, None] * stride_vn
                + offs_d[None, :], mask=col_ok[:, None], other=0.0)
    h0 = h_kv * GROUP
    q_base = Q + b * stride_qb + h0 * stride_qh
    do_base = DO + b * stride_dob + h0 * stride_doh
    stat0 = (b * H_Q + h0) * SEQ_Q
    n_q = tl.cdiv(SEQ_Q, BLOCK_M)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    full = 0  # causal: query blocks [first, full) hold the diagonal, [full, n_q) see it whole
    col_orig = cols
    if CAUSAL:
        kv_pos = _zigzag_original(n0, SEG_LEN, SEGMENTS)  # a KV block lies in one segment
        col_orig = kv_pos + tl.arange(0, BLOCK_N)
        first = _rows_before(kv_pos, Q_OFFSET, SEQ_Q, SEG_LEN, SEGMENTS) // BLOCK_M
        full = tl.cdiv(_rows_before(kv_pos + BLOCK_N - 1, Q_OFFSET, SEQ_Q, SEG_LEN, SEGMENTS),
                       BLOCK_M)
        n_diag = full - first
        div = tl.maximum(n_diag, 1)  # a pipeline prologue may evaluate an empty loop's index
        for t in tl.range(0, GROUP * n_diag):
            g = t // div
            start_m = (first + t % div) * BLOCK_M
            dk, dv = _dkdv_block(dk, dv, k, v, q_base + g * stride_qh, do_base + g * stride_doh,
                                 LSE, DELTA, stat0 + g * SEQ_Q, start_m, col_orig, offs_m,
                                 offs_d, stride_qm, stride_dom, qk_scale, SEQ_Q, Q_OFFSET,
                                 SEG_LEN, SEGMENTS, True)
    n_rest = n_q - full
    div_rest = tl.maximum(n_rest, 1)
    for t in tl.range(0, GROUP * n_rest):
        g = t // div_rest
        start_m = (full + t % div_rest) * BLOCK_M
        dk, dv = _dkdv_block(dk, dv, k, v, q_base + g * stride_qh, do_base + g * stride_doh,
                             LSE, DELTA, stat0 + g * SEQ_Q, start_m, col_orig, offs_m, offs_d,
                             stride_qm, stride_dom, qk_scale, SEQ_Q, Q_OFFSET, SEG_LEN,
                             SEGMENTS, False)
    dk = dk * sm_scale
    tl.store(DK + b * stride_dkb + h_kv * stride_dkh + cols[:, None] * stride_dkn
             + offs_d[None, :], dk.to(DK.dtype.element_ty), mask=col_ok[:, None])
    tl.store(DV + b * stride_dvb + h_kv * stride_dvh + cols[:, None] * stride_dvn
             + offs_d[None, :], dv.to(DV.dtype.element_ty), mask=col_ok[:, None])


@triton.jit
def _dq_block(dq, q, do, lse2, delta, k_base, v_base, start_n, row_orig, offs_n, offs_d,
              stride_kn, stride_vn, qk_scale, SEQ_KV, SEG_LEN, SEGMENTS: tl.constexpr,
              CAUSAL: tl.constexpr, MASKED: tl.constexpr):
    """One KV block of dQ.  ``start_n`` is the block's *original* position (its stored row
    from :func:`_zigzag_stored`; a block lies in one segment).  ``MASKED``: the causal mask
    (when ``CAUSAL``) and the keys past ``SEQ_KV`` -- those load as zeros, but their
    ``P = exp(-lse)`` overflows for a row whose scores all lie below about -88, and
    ``inf * 0`` would reach dQ as NaN."""
    cols = _zigzag_stored(start_n, SEG_LEN, SEGMENTS) + offs_n
    col_ok = cols < SEQ_KV
    k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=col_ok[:, None],
                other=0.0)
    v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=col_ok[:, None],
                other=0.0)
    qk = tl.dot(q, tl.trans(k))
    p = tl.math.exp2(tl.fma(qk, qk_scale, -lse2[:, None]))
    if MASKED:
        col_orig = start_n + offs_n
        keep = col_orig[None, :] < SEQ_KV
        if CAUSAL:
            keep = keep & (row_orig[:, None] >= col_orig[None, :])
        p = tl.where(keep, p, 0.0)
    dp = tl.dot(do, tl.trans(v))
    ds = p * (dp - delta[:, None])
    return tl.dot(ds.to(k.dtype), k, dq)


@triton.jit
def attn_bwd_dq_kernel(Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale,
                       stride_qb, stride_qh, stride_qm,
                       stride_kb, stride_kh, stride_kn,
                       stride_vb, stride_vh, stride_vn,
                       stride_dob, stride_doh, stride_dom,
                       stride_dqb, stride_dqh, stride_dqm,
                       H_Q, GROUP, SEQ_Q, SEQ_KV, Q_OFFSET, SEG_LEN,
                       HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr, SEGMENTS: tl.constexpr):
    """One program: dQ of BLOCK_M local query rows of one (batch, query head).  Grid
    ``(cdiv(SEQ_Q, BLOCK_M), B * H_Q)``, the last query blocks first when causal (the longest
    rows, also in a zigzag shard).

    The KV blocks are visited in *original* order, each read at its stored row: causal, first
    the blocks every row sees whole (no mask), then the diagonal ones (masked), and none past
    the rows' last position -- two loops without a branch, so both pipeline their loads."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    h_kv = h // GROUP

    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    row_ok = rows < SEQ_Q
    q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qm + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    do = tl.load(DO + b * stride_dob + h * stride_doh + rows[:, None] * stride_dom
                 + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    stat = pid_bh * SEQ_Q
    lse2 = tl.load(LSE + stat + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + stat + rows, mask=row_ok, other=0.0)
    q_pos = _zigzag_original(Q_OFFSET + m0, SEG_LEN, SEGMENTS)  # a block lies in one segment
    row_orig = q_pos + tl.arange(0, BLOCK_M)
    k_base = K + b * stride_kb + h_kv * stride_kh
    v_base = V + b * stride_vb + h_kv * stride_vh

    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # [0, mid): whole KV blocks every row sees, no mask; [mid, hi): the diagonal blocks and a
    # ragged last block, masked (original positions)
    hi = SEQ_KV
    mid = (SEQ_KV // BLOCK_N) * BLOCK_N
    if CAUSAL:  # top-left: these rows see keys < q_pos + BLOCK_M
        hi = tl.minimum(q_pos + BLOCK_M, SEQ_KV)
        mid = tl.minimum((q_pos // BLOCK_N) * BLOCK_N, tl.minimum(hi, mid))
    for start_n in tl.range(0, mid, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        dq = _dq_block(dq, q, do, lse2, delta, k_base, v_base, start_n, row_orig, offs_n,
                       offs_d, stride_kn, stride_vn, qk_scale, SEQ_KV, SEG_LEN, SEGMENTS,
                       CAUSAL, False)
    for start_n in tl.range(mid, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        dq = _dq_block(dq, q, do, lse2, delta, k_base, v_base, start_n, row_orig, offs_n,
                       offs_d, stride_kn, stride_vn, qk_scale, SEQ_KV, SEG_LEN, SEGMENTS,
                       CAUSAL, True)
    dq = dq * sm_scale
    tl.store(DQ + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqm + offs_d[None, :],
             dq.to(DQ.dtype.element_ty), mask=row_ok[:, None])


# ----------------------------------------------------------------------------------------------
# The fast backward (not fusable): TMA descriptors, causal loops split, GQA heads flattened
# ----------------------------------------------------------------------------------------------


@triton.jit
def _dq_step(dq, q, do, lse2, delta, desc_k, desc_v, start_n, rows, offs_n, qk_scale, SEQ_KV,
             MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """One KV block of dQ; ``MASKED`` (the diagonal and the ragged last block): the causal
    mask and the keys past ``SEQ_KV``.  Those keys must be masked, not left to TMA's zero
    fill: a zero key scores 0, so ``P = exp(-lse)``, which is inf for a row whose scores all
    lie below about -88, and inf times the zero key is NaN in dQ."""
    k = desc_k.load([start_n, 0])
    v = desc_v.load([start_n, 0])
    qk = tl.dot(q, k.T)
    p = tl.math.exp2(tl.fma(qk, qk_scale, -lse2[:, None]))
    if MASKED:
        cols = start_n + offs_n
        keep = (cols < SEQ_KV)[None, :]
        if CAUSAL:
            keep = keep & (rows[:, None] >= cols[None, :])
        p = tl.where(keep, p, 0.0)
    dp = tl.dot(do, v.T)
    ds = p * (dp - delta[:, None])
    return tl.dot(ds.to(k.dtype), k, dq)


@triton.jit
def attn_bwd_dq_fast_kernel(Q, K, V, DO, LSE, DELTA, DQ, qk_scale, sm_scale,
                            stride_qb, stride_qh, stride_qm,
                            stride_kb, stride_kh, stride_kn,
                            stride_vb, stride_vh, stride_vn,
                            stride_dob, stride_doh, stride_dom,
                            stride_dqb, stride_dqh, stride_dqm,
                            H_Q, GROUP, SEQ_Q, SEQ_KV,
                            HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                            BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The fast dQ: :func:`attn_bwd_dq_kernel`'s contract for a contiguous sequence, through
    per-(batch, head) TMA descriptors, and two loops -- the KV blocks the rows see in full (no
    mask), then the causal diagonal and the ragged last block (masked: :func:`_dq_step` says
    why) -- instead of a skip inside one loop.
    Rows past ``SEQ_Q`` read zeros (TMA) and are clipped at the store.  Grid
    ``(cdiv(SEQ_Q, BLOCK_M), B * H_Q)``, longest rows first when causal."""
    pid_m = tl.program_id(0)
    if CAUSAL:
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    h_kv = h // GROUP
    desc_q = _rows_desc(Q + b * stride_qb + h * stride_qh, SEQ_Q, stride_qm, BLOCK_M, HEAD_DIM)
    desc_do = _rows_desc(DO + b * stride_dob + h * stride_doh, SEQ_Q, stride_dom, BLOCK_M, HEAD_DIM)
    desc_dq = _rows_desc(DQ + b * stride_dqb + h * stride_dqh, SEQ_Q, stride_dqm, BLOCK_M, HEAD_DIM)
    desc_k = _rows_desc(K + b * stride_kb + h_kv * stride_kh, SEQ_KV, stride_kn, BLOCK_N, HEAD_DIM)
    desc_v = _rows_desc(V + b * stride_vb + h_kv * stride_vh, SEQ_KV, stride_vn, BLOCK_N, HEAD_DIM)
    m0 = pid_m * BLOCK_M
    rows = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    row_ok = rows < SEQ_Q
    q = desc_q.load([m0, 0])
    do = desc_do.load([m0, 0])
    lse2 = tl.load(LSE + pid_bh * SEQ_Q + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + pid_bh * SEQ_Q + rows, mask=row_ok, other=0.0)
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    # the blocks every row sees whole, with no mask; then the diagonal (causal) and the ragged
    # last block, masked
    if CAUSAL:  # top-left: rows < m0 + BLOCK_M see keys < m0 + BLOCK_M
        hi = tl.minimum(m0 + BLOCK_M, SEQ_KV)
        mid = tl.minimum((m0 // BLOCK_N) * BLOCK_N, (hi // BLOCK_N) * BLOCK_N)
    else:
        hi = SEQ_KV
        mid = (SEQ_KV // BLOCK_N) * BLOCK_N
    for start_n in tl.range(0, mid, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        dq = _dq_step(dq, q, do, lse2, delta, desc_k, desc_v, start_n, rows, offs_n, qk_scale,
                      SEQ_KV, False, CAUSAL)
    for start_n in tl.range(mid, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        dq = _dq_step(dq, q, do, lse2, delta, desc_k, desc_v, start_n, rows, offs_n, qk_scale,
                      SEQ_KV, True, CAUSAL)
    desc_dq.store([m0, 0], (dq * sm_scale).to(DQ.dtype.element_ty))


@triton.jit
def _dkdv_step(dk, dv, k, v, desc_q, desc_do, LSE, DELTA, stat, h, start_m, cols, qk_scale,
               SEQ_Q, HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr):
    """One block of query rows of head ``h`` against the program's KV block.  Rows past the
    sequence need no mask: TMA zero-fills their Q and dO, so they add nothing to dK and dV."""
    rows = start_m + tl.arange(0, BLOCK_M)
    row_ok = rows < SEQ_Q
    q = desc_q.load([h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    do = desc_do.load([h, start_m, 0]).reshape(BLOCK_M, HEAD_DIM)
    lse2 = tl.load(LSE + stat + rows, mask=row_ok, other=0.0) * 1.4426950408889634
    delta = tl.load(DELTA + stat + rows, mask=row_ok, other=0.0)
    qkT = tl.dot(k, q.T)
    pT = tl.math.exp2(tl.fma(qkT, qk_scale, -lse2[None, :]))
    if MASKED:
        pT = tl.where(rows[None, :] >= cols[:, None], pT, 0.0)
    dv = tl.dot(pT.to(do.dtype), do, dv)
    dpT = tl.dot(v, do.T)
    dsT = pT * (dpT - delta[None, :])
    dk = tl.dot(dsT.to(q.dtype), q, dk)
    return dk, dv


@triton.jit
def attn_bwd_dkdv_fast_kernel(Q, K, V, DO, LSE, DELTA, DK, DV, qk_scale, sm_scale,
                              stride_qb, stride_qh, stride_qm,
                              stride_kb, stride_kh, stride_kn,
                              stride_vb, stride_vh, stride_vn,
                              stride_dob, stride_doh, stride_dom,
                              stride_dkb, stride_dkh, stride_dkn,
                              stride_dvb, stride_dvh, stride_dvn,
                              H_Q, GROUP, SEQ_Q, SEQ_KV,
                              HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr,
                              BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """The fast dK/dV: :func:`attn_bwd_dkdv_kernel`'s contract for a contiguous sequence.  The
    query blocks of every head of the GQA group are one flattened loop (``t -> (head, block)``,
    so the pipeline runs across heads instead of draining per head), through TMA descriptors
    over the batch's ``[H_Q, SEQ_Q, D]``; causal, the blocks holding the diagonal come first
    with the mask, then the rest without -- only the blocks whose rows see the KV block.
    Grid ``(cdiv(SEQ_KV, BLOCK_N), B * H_KV)``."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    H_KV = H_Q // GROUP
    b = pid_bh // H_KV
    h_kv = pid_bh % H_KV
    desc_q = tl.make_tensor_descriptor(Q + b * stride_qb, shape=[H_Q, SEQ_Q, HEAD_DIM],
                                       strides=[stride_qh, stride_qm, 1],
                                       block_shape=[1, BLOCK_M, HEAD_DIM])
    desc_do = tl.make_tensor_descriptor(DO + b * stride_dob, shape=[H_Q, SEQ_Q, HEAD_DIM],
                                        strides=[stride_doh, stride_dom, 1],
                                        block_shape=[1, BLOCK_M, HEAD_DIM])
    desc_k = _rows_desc(K + b * stride_kb + h_kv * stride_kh, SEQ_KV, stride_kn, BLOCK_N, HEAD_DIM)
    desc_v = _rows_desc(V + b * stride_vb + h_kv * stride_vh, SEQ_KV, stride_vn, BLOCK_N, HEAD_DIM)
    desc_dk = _rows_desc(DK + b * stride_dkb + h_kv * stride_dkh, SEQ_KV, stride_dkn, BLOCK_N,
                         HEAD_DIM)
    desc_dv = _rows_desc(DV + b * stride_dvb + h_kv * stride_dvh, SEQ_KV, stride_dvn, BLOCK_N,
                         HEAD_DIM)
    n0 = pid_n * BLOCK_N
    cols = n0 + tl.arange(0, BLOCK_N)
    k = desc_k.load([n0, 0])
    v = desc_v.load([n0, 0])
    h0 = h_kv * GROUP
    stat0 = (b * H_Q + h0) * SEQ_Q
    n_q = tl.cdiv(SEQ_Q, BLOCK_M)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    diag = 0  # causal: query blocks [first, diag) hold the diagonal, [diag, n_q) see it whole
    if CAUSAL:
        first = tl.minimum(n0 // BLOCK_M, n_q)
        diag = tl.minimum(tl.cdiv(n0 + BLOCK_N, BLOCK_M), n_q)
        n_diag = diag - first
        for t in tl.range(0, GROUP * n_diag):
            g = t // n_diag
            start_m = (first + t % n_diag) * BLOCK_M
            dk, dv = _dkdv_step(dk, dv, k, v, desc_q, desc_do, LSE, DELTA, stat0 + g * SEQ_Q,
                                h0 + g, start_m, cols, qk_scale, SEQ_Q, HEAD_DIM, BLOCK_M, True)
    n_rest = n_q - diag
    for t in tl.range(0, GROUP * n_rest):
        g = t // n_rest
        start_m = (diag + t % n_rest) * BLOCK_M
        dk, dv = _dkdv_step(dk, dv, k, v, desc_q, desc_do, LSE, DELTA, stat0 + g * SEQ_Q,
                            h0 + g, start_m, cols, qk_scale, SEQ_Q, HEAD_DIM, BLOCK_M, False)
    desc_dk.store([n0, 0], (dk * sm_scale).to(DK.dtype.element_ty))
    desc_dv.store([n0, 0], dv.to(DV.dtype.element_ty))


def tiles(which: str, cfg: AttentionConfig) -> tuple[int, int]:
    """``(BLOCK_M, BLOCK_N)`` of the fusable ``which`` kernel (``"dkdv"`` or ``"dq"``) under
    the backward config ``cfg``.  The config names the dK/dV kernel's tiles: ``BLOCK_N`` key
    rows held by a program, ``BLOCK_M`` query rows per loop step.  The dQ kernel runs the
    same tiles transposed -- ``BLOCK_N`` query rows held, ``BLOCK_M`` keys per step -- so that
    one config gives both kernels a large held tile and a small streamed one (Triton's
    fused-attention tutorial and FlashAttention-3 do the same), and one segment condition
    (a multiple of both sizes) serves both."""
    if which == "dkdv":
        return cfg.BLOCK_M, cfg.BLOCK_N
    if which == "dq":
        return cfg.BLOCK_N, cfg.BLOCK_M
    raise LaunchError(f"tiles: which={which!r}; 'dkdv' or 'dq'")


def default_backward_config(head_dim: int) -> AttentionConfig:
    """The fusable backward's config (:func:`tiles`): dK/dV of 128 keys per program over
    steps of 64 query rows (FlashAttention-3's Hopper backward tile at D = 128), dQ of 128
    query rows over steps of 64 keys; 8 warps, 3 stages of the streamed tiles (~160 KiB of
    shared memory at D = 128).  Both kernels compile for sm_90 with pipelined loads and no
    register spills at D = 64 and 128 (tests/test_attention_backward.py); 64 x 128 at 2
    stages spills at D = 128.  The fast kernels' configs come from the per-GPU table
    (:mod:`.attention_config`)."""
    return AttentionConfig(BLOCK_M=64, BLOCK_N=128, num_warps=8, num_stages=3)


def _check_like(name, t, ref):
    import torch
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(ref.shape) \
            or t.dtype != ref.dtype or t.device != ref.device:
        raise LaunchError(f"{name} must be a {ref.dtype} tensor of shape {tuple(ref.shape)} on "
                          f"{ref.device} (like the forward's output), got "
                          f"{getattr(t, 'dtype', type(t).__name__)} "
                          f"{tuple(getattr(t, 'shape', ()))}")


def attention_backward(q, k, v, o, lse, do, causal: bool = False, sm_scale: float | None = None,
                       config=None, *, segments: int = 0, q_offset: int = 0,
                       fusable: bool = True, dq_config=None):
    """Flash-attention backward: ``(dq, dk, dv)`` of the forward ``(o, lse) = attention(q, k, v,
    causal, sm_scale)`` for the upstream gradient ``do`` (see the module docstring).

    ``segments``/``q_offset``: a zigzag-stored sequence (causal only; ``segments`` = 2W, every
    segment a multiple of both block sizes, ``q`` one rank's shard: the rows at ``q_offset``
    = ``r * Skv / W`` of the stored sequence, as ring attention holds them -- the kernels
    count on its rows being monotone in original position).

    ``fusable=True`` (the default): the fusable kernels, ``config`` for both (default
    :func:`default_backward_config`) -- the kernels proven on a GPU.  ``fusable=False``
    (experimental until ``tests/gpu`` passes on them on a GPU): the fast kernels
    (:func:`attn_bwd_dkdv_fast_kernel`, :func:`attn_bwd_dq_fast_kernel`) for a contiguous
    sequence where they can run (:func:`~.attention.fast_path_reason`), ``config`` the dK/dV
    kernel's and ``dq_config`` the dQ kernel's (default: ``config`` when given, else the
    per-GPU table's); a zigzag sequence or tensors the fast kernels cannot read take the
    fusable kernels.
    """
    import torch
    B, Hq, Hkv, Sq, Skv, D = check_operands(q, k, v)
    _check_like("o", o, q)
    _check_like("do", do, q)
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != (B, Hq, Sq) \
            or lse.dtype != torch.float32:
        raise LaunchError(f"lse must be the forward's fp32 [B, Hq, Sq] = {(B, Hq, Sq)} tensor")
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    q, k, v, o, do = (_unit_last(t) for t in (q, k, v, o, do))
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    fast = not fusable and not segments and fast_path_reason(q, k, v, do, sm_scale) is None
    if fast:
        S = max(Sq, Skv)
        cfg = fast_config(config, q, D, causal, S, "bwd_dkdv")
        dq_cfg = fast_config(dq_config if dq_config is not None else config, q, D, causal, S,
                             "bwd_dq")
        for c in (cfg, dq_cfg):
            if c.WARP_SPECIALIZE:
                raise LaunchError(f"backward config {c.short()}: the backward kernels are not "
                                  f"warp specialised; drop WARP_SPECIALIZE")
    else:
        if dq_config is not None:
            raise LaunchError("dq_config is for the fast kernels; the fusable backward runs "
                              "both of its kernels with config")
        cfg = AttentionConfig.of(config if config is not None else default_backward_config(D),
                                 D).check(D, fusable=True)
    seg_len = 1
    if segments:
        seg_len = Skv // segments if segments > 0 else 0
        if not causal or segments < 2 or segments % 2 or Skv % segments \
                or seg_len % cfg.BLOCK_M or seg_len % cfg.BLOCK_N \
                or q_offset % (2 * seg_len) or Sq > 2 * seg_len or q_offset + Sq > Skv:
            raise LaunchError(
                f"a zigzag backward needs causal=True, an even segments >= 2 dividing Skv "
                f"({Skv}) into segments that are multiples of BLOCK_M ({cfg.BLOCK_M}) and "
                f"BLOCK_N ({cfg.BLOCK_N}), and the queries one rank's shard: q_offset "
                f"({q_offset}) a multiple of two segments and at most two segments of queries "
                f"(Sq={Sq}); got segments={segments}")
    elif q_offset:
        raise LaunchError("q_offset is for a zigzag-stored sequence (segments > 0)")
    if q.numel() == 0:
        return dq, dk.zero_(), dv.zero_()
    check_device(q)
    lse = lse.contiguous()
    delta = torch.empty_like(lse)
    attn_bwd_preprocess[(triton.cdiv(Sq, cfg.BLOCK_M), B * Hq)](
        o, do, delta, *strides3(o, do), Hq, Sq, HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M)
    qk_scale = float(sm_scale) * LOG2E
    if fast:
        if q.device.type == "cuda":
            ensure_tma_allocator()
        strides = tma_strides(q, k, v, do)
        sizes = (Hq, Hq // Hkv, Sq, Skv)
        attn_bwd_dkdv_fast_kernel[(triton.cdiv(Skv, cfg.BLOCK_N), B * Hkv)](
            q, k, v, do, lse, delta, dk, dv, qk_scale, float(sm_scale), *strides,
            *tma_strides(dk, dv), *sizes, HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M,
            BLOCK_N=cfg.BLOCK_N, CAUSAL=bool(causal), **cfg.options())
        attn_bwd_dq_fast_kernel[(triton.cdiv(Sq, dq_cfg.BLOCK_M), B * Hq)](
            q, k, v, do, lse, delta, dq, qk_scale, float(sm_scale), *strides, *tma_strides(dq),
            *sizes, HEAD_DIM=D, BLOCK_M=dq_cfg.BLOCK_M, BLOCK_N=dq_cfg.BLOCK_N,
            CAUSAL=bool(causal), **dq_cfg.options())
        return dq, dk, dv
    strides = strides3(q, k, v, do)
    consts = dict(HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=bool(causal),
                  SEGMENTS=int(segments))
    sizes = (Hq, Hq // Hkv, Sq, Skv, int(q_offset), seg_len)
    attn_bwd_dkdv_kernel[(triton.cdiv(Skv, cfg.BLOCK_N), B * Hkv)](
        q, k, v, do, lse, delta, dk, dv, qk_scale, float(sm_scale), *strides, *strides3(dk, dv),
        *sizes, **consts, **cfg.options())
    dq_m, dq_n = tiles("dq", cfg)
    attn_bwd_dq_kernel[(triton.cdiv(Sq, dq_m), B * Hq)](
        q, k, v, do, lse, delta, dq, qk_scale, float(sm_scale), *strides, *strides3(dq), *sizes,
        **dict(consts, BLOCK_M=dq_m, BLOCK_N=dq_n), **cfg.options())
    return dq, dk, dv


__all__ = ["attention_backward", "attn_bwd_dkdv_fast_kernel", "attn_bwd_dkdv_kernel",
           "attn_bwd_dq_fast_kernel", "attn_bwd_dq_kernel", "attn_bwd_preprocess",
           "default_backward_config", "tiles"]
