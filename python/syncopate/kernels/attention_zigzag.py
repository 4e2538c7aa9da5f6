"""Causal flash-attention over a sequence stored in *zigzag* order (single GPU).

Why: causal ring attention (issue 11) shards the sequence across W ranks.  Contiguous shards
give rank 0 a triangle's thin end and rank W-1 its thick end (W-fold imbalance); ring-attention
users therefore cut the sequence into ``2W`` equal segments and give rank ``r`` segments ``r``
and ``2W - 1 - r`` (the "zigzag" layout of ring-flash-attention / Megatron-CP): every rank then
has the same causal work.  Gathered across ranks in rank order, the sequence is stored as
segments ``0, 2W-1, 1, 2W-2, ..., W-1, W`` -- this kernel's K/V layout.

The kernel itself knows nothing about ranks or communication: it is causal attention of query
rows ``[Q_OFFSET, Q_OFFSET + SEQ_Q)`` of a zigzag-stored sequence against all ``SEQ_KV`` keys of
it, with the mask on *original* positions.  ``Q_OFFSET = 0`` and ``SEQ_Q = SEQ_KV``: the whole
sequence; ``Q_OFFSET = r * SEQ_KV / W``: rank ``r``'s shard (what the fused ring attention runs).

Its KV loop runs over **all** KV blocks with a constant trip count (the inner-loop remap, which
visits blocks in chunk-arrival order, permutes a loop's whole iteration space), and skips a
block whose original segment lies after the query block's: a skipped block loads nothing, so
in the fused kernel it waits for nothing either.  A block on the diagonal segment gets the
element mask; a block of an earlier segment none.

That constant-trip-count loop with its in-loop skip is what the fused ring attention needs (the
remap permutes one whole iteration space), and it costs 1.28-1.33x the prefix-causal kernel
because Triton does not pipeline loads under the skip.  :func:`attention_zigzag` with
``fusable=False`` therefore runs the fast kernel
(:func:`~syncopate.kernels.attention.attn_fwd_fast_kernel` with ``SEGMENTS``): it visits only
the visible blocks, in original order, each block's stored row computed from its original
position -- the prefix-causal kernel's work.  That path is experimental until ``tests/gpu``
passes on it on a GPU (as :func:`~syncopate.kernels.attention.attention`'s fast path); the
default is the fusable kernel.

Contract (:func:`attention_zigzag`): as :func:`syncopate.kernels.attention.attention` (shapes,
GQA, dtypes, ``(o, lse)`` with the natural log-sum-exp), causal only, plus
``SEQ_KV % segments == 0`` and the segment length a multiple of ``BLOCK_M`` and ``BLOCK_N`` (a
block lies in one segment), ``Q_OFFSET`` a multiple of the segment length.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from ..errors import LaunchError
from .attention import (LOG2E, AttentionConfig, _unit_last, check_device, check_operands,
                        choose_kernel, launch_fast, outputs)
from .attention import compile_args as plain_compile_args
from .attention_config import default_config as plain_default_config


@triton.jit
def _original_segment(s, SEGMENTS: tl.constexpr):
    """The original segment stored at segment slot ``s`` of a zigzag sequence: slots ``2j`` and
    ``2j + 1`` hold segments ``j`` and ``SEGMENTS - 1 - j``."""
    j = s // 2
    return tl.where(s % 2 == 0, j, SEGMENTS - 1 - j)


@triton.jit
def attn_zigzag_fwd_kernel(Q, K, V, O, LSE, qk_scale,
                           stride_qb, stride_qh, stride_qm,
                           stride_kb, stride_kh, stride_kn,
                           stride_vb, stride_vh, stride_vn,
                           stride_ob, stride_oh, stride_om,
                           H_Q, GROUP, SEQ_Q, SEQ_KV, Q_OFFSET,
                           SEGMENTS: tl.constexpr, HEAD_DIM: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, query head), causal over the zigzag
    sequence.  Grid ``(SEQ_Q // BLOCK_M, B * H_Q)``; the host checks the divisibilities."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    h_kv = h // GROUP
    seg_len = SEQ_KV // SEGMENTS

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_first = Q_OFFSET + pid_m * BLOCK_M
    q_seg = _original_segment(q_first // seg_len, SEGMENTS)
    q_in = q_first % seg_len + tl.arange(0, BLOCK_M)  # positions inside the segment

    q = tl.load(Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm
                + offs_d[None, :])
    k_base = K + b * stride_kb + h_kv * stride_kh
    v_base = V + b * stride_vb + h_kv * stride_vh

    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in tl.range(0, SEQ_KV, BLOCK_N):
        k_seg = _original_segment(start_n // seg_len, SEGMENTS)
        if k_seg <= q_seg:  # a later segment is all masked: nothing to load or wait for
            cols = start_n + offs_n
            kt = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None])
            qk = tl.dot(q, kt)
            k_in = start_n % seg_len + offs_n
            keep = (k_seg < q_seg) | (k_in[None, :] <= q_in[:, None])
            qk = tl.where(keep, qk, float("-inf"))
            # scale and subtract in one explicit fma: whether LLVM contracts `qk * scale - m` by
            # itself depends on which masks fold away (a constant SEQ_KV removes them), and a
            # fused kernel compiled with constant sizes must round as the local one does
            m_new = tl.maximum(m_i, tl.max(qk * qk_scale, 1))
            p = tl.math.exp2(tl.fma(qk, qk_scale, -m_new[:, None]))
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :])
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty))
    tl.store(LSE + pid_bh * SEQ_Q + offs_m, lse)


def default_config(head_dim: int) -> AttentionConfig:
    """The fusable zigzag kernel's H200 default: KV blocks of 128 in 2 stages for both head dims.

    Measured (one H200, bf16, 32/8 heads, D = 128, whole sequence in 8 segments, against the
    prefix-loop causal kernel of :mod:`.attention` at 1.72 / 6.08 ms for 8k / 16k tokens):
    BLOCK_N 64 x 3 stages 2.68 / 9.67 ms, BLOCK_N 128 x 2 stages 2.21 / 8.08 ms (1.28x / 1.33x
    of the prefix loop).  Where the 30% goes: the skip of later segments is an ``if`` inside
    the loop, and Triton does not software-pipeline loads under a branch; loading outside the
    branch with a mask (2.33 / 8.33 ms) or not skipping at all (3.08 / 11.5 ms) is slower."""
    cfg = plain_default_config(head_dim)
    return cfg.replace(BLOCK_N=128, num_stages=2) if head_dim == 128 else cfg


_PARAMS = ("Q", "K", "V", "O", "LSE", "qk_scale",
           "stride_qb", "stride_qh", "stride_qm", "stride_kb", "stride_kh", "stride_kn",
           "stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_om",
           "H_Q", "GROUP", "SEQ_Q", "SEQ_KV", "Q_OFFSET")


def check_zigzag(Sq: int, Skv: int, segments: int, q_offset: int, cfg: AttentionConfig) -> int:
    """The segment length, after checking the layout's divisibilities (:class:`LaunchError`
    saying what to change)."""
    if not isinstance(segments, int) or segments < 2 or segments % 2:
        raise LaunchError(f"segments={segments!r}: a zigzag sequence has an even number of "
                          f"segments (2 x world size)")
    if Skv % segments:
        raise LaunchError(f"the KV sequence ({Skv}) is not divisible into {segments} zigzag "
                          f"segments: pad it to a multiple of {segments}")
    seg = Skv // segments
    block = max(cfg.BLOCK_M, cfg.BLOCK_N)
    if seg % cfg.BLOCK_M or seg % cfg.BLOCK_N:
        raise LaunchError(f"the zigzag segment length {seg} (= {Skv} / {segments}) is not a "
                          f"multiple of BLOCK_M={cfg.BLOCK_M} and BLOCK_N={cfg.BLOCK_N}: pad the "
                          f"sequence to a multiple of {segments * block}, or pick smaller blocks")
    if q_offset % seg or q_offset < 0 or q_offset + Sq > Skv or Sq % seg:
        raise LaunchError(f"the query rows [{q_offset}, {q_offset + Sq}) must be whole zigzag "
                          f"segments (length {seg}) of the {Skv}-long sequence")
    return seg


def compile_args(dtype="bf16", head_dim: int = 128, segments: int = 2,
                 config=None) -> tuple[dict, dict]:
    """``(signature, constexprs)`` of :func:`attn_zigzag_fwd_kernel` (as the JIT builds them)."""
    sig, cx = plain_compile_args(dtype, head_dim, False, config)
    sig.pop("CAUSAL")
    cx.pop("CAUSAL")
    signature = {p: sig[p] if p in sig else "i32" for p in _PARAMS}
    constexprs = dict(SEGMENTS=int(segments), **cx)
    for k in constexprs:
        signature[k] = "constexpr"
    return signature, constexprs


def kernel_args(q, k, v, o, lse, sm_scale: float, q_offset: int) -> tuple:
    """The runtime arguments of :func:`attn_zigzag_fwd_kernel` in parameter order."""
    B, Hq, Sq, _ = q.shape
    Hkv, Skv = k.shape[1], k.shape[2]
    return (q, k, v, o, lse, float(sm_scale) * LOG2E,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
            Hq, Hq // Hkv, Sq, Skv, int(q_offset))


def attention_zigzag(q, k, v, segments: int, q_offset: int = 0, sm_scale: float | None = None,
                     config=None, *, out=None, fusable: bool = True):
    """Causal attention of ``q`` (rows ``[q_offset, q_offset + Sq)`` of a zigzag-stored
    sequence) against ``k``/``v`` (the whole zigzag-stored sequence of ``segments`` segments);
    returns ``(o, lse)`` as :func:`syncopate.kernels.attention.attention`.

    ``fusable=True`` (the default): :func:`attn_zigzag_fwd_kernel`, the constant-trip-count
    loop ring attention fuses (what its unfused path must run to equal the fused one bit for
    bit), and the kernel proven on a GPU.  ``fusable=False`` (experimental until
    ``tests/gpu`` passes on it on a GPU): the fast kernel
    (:func:`~syncopate.kernels.attention.attn_fwd_fast_kernel` with ``SEGMENTS``), which visits
    only the blocks a query block sees -- in original order, each block's stored row computed
    from its original position -- so it does the prefix-causal kernel's work with no skipped
    block and no branch in its loop."""
    B, Hq, Hkv, Sq, Skv, D = check_operands(q, k, v)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    o, lse = outputs(q, out, (B, Hq, Sq, D))
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    cfg, fast = choose_kernel(config, q, k, v, o, D, True, sm_scale, fusable,
                              fusable_base=default_config(D))
    seg_len = check_zigzag(Sq, Skv, segments, q_offset, cfg)
    if o.numel() == 0:
        return o, lse
    check_device(q)
    if fast:
        launch_fast(q, k, v, o, lse, True, sm_scale, cfg, segments=segments, q_offset=q_offset,
                    seg_len=seg_len)
        return o, lse
    grid = (Sq // cfg.BLOCK_M, B * Hq)
    attn_zigzag_fwd_kernel[grid](*kernel_args(q, k, v, o, lse, sm_scale, q_offset),
                                 SEGMENTS=segments, HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M,
                                 BLOCK_N=cfg.BLOCK_N, **cfg.options())
    return o, lse


# ----------------------------------------------------------------------------------------------
# The layout (host side, torch)
# ----------------------------------------------------------------------------------------------


def zigzag_segments(world_size: int, rank: int) -> tuple[int, int]:
    """The two original segments rank ``rank`` holds: ``(rank, 2W - 1 - rank)``."""
    return rank, 2 * world_size - 1 - rank


def zigzag_shard(x, world_size: int, rank: int, dim: int = 2):
    """Rank ``rank``'s shard of ``x`` (original order along ``dim``): segments ``rank`` and
    ``2W - 1 - rank`` concatenated (a copy)."""
    import torch
    S = x.shape[dim]
    if S % (2 * world_size):
        raise LaunchError(f"the sequence ({S}) is not divisible into {2 * world_size} zigzag "
                          f"segments (2 x world size): pad it")
    seg = S // (2 * world_size)
    a, b = zigzag_segments(world_size, rank)
    return torch.cat([x.narrow(dim, a * seg, seg), x.narrow(dim, b * seg, seg)], dim)


def zigzag_order(x, world_size: int, dim: int = 2):
    """``x`` (original order along ``dim``) stored in zigzag order: the ranks' shards
    concatenated in rank order (what an all-gather of the shards gives)."""
    import torch
    return torch.cat([zigzag_shard(x, world_size, r, dim) for r in range(world_size)], dim)


def zigzag_unorder(x, world_size: int, dim: int = 2):
    """The inverse of :func:`zigzag_order`: a zigzag-stored ``x`` back in original order."""
    import torch
    S = x.shape[dim]
    seg = S // (2 * world_size)
    parts = [None] * (2 * world_size)
    for r in range(world_size):
        a, b = zigzag_segments(world_size, r)
        parts[a] = x.narrow(dim, (2 * r) * seg, seg)
        parts[b] = x.narrow(dim, (2 * r + 1) * seg, seg)
    return torch.cat(parts, dim)


__all__ = ["attention_zigzag", "attn_zigzag_fwd_kernel", "check_zigzag", "compile_args",
           "default_config",
           "kernel_args", "zigzag_order", "zigzag_segments", "zigzag_shard", "zigzag_unorder"]
