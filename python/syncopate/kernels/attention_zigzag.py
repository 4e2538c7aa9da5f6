"""Causal flash-attention over a sequence stored in *zigzag* order (single GPU).

Why: causal ring attention (issue 11) shards the sequence across W ranks.  Contiguous shards
give rank 0 a triangle's thin end and rank W-1 its thick end (W-fold imbalance); ring-attention
users therefore cut the sequence into ``2W`` equal segments and give rank ``r`` segments ``r``
and ``2W - 1 - r`` (the "zigzag" layout of ring-flash-attention / Megatron-CP): every rank then
has the same causal work.  Gathered across ranks in rank order, the sequence is stored as
segments ``0, 2W-1, 1, 2W-2, ..., W-1, W`` -- this kernel's K/V layout.  The two segments of a
rank, stored side by side at slots ``2r`` and ``2r + 1``, are its *shard*.

The kernel itself knows nothing about communication: it is causal attention of query rows
``[Q_OFFSET, Q_OFFSET + SEQ_Q)`` (whole shards) of a zigzag-stored sequence against all
``SEQ_KV`` keys of it, with the mask on *original* positions.  ``Q_OFFSET = 0`` and
``SEQ_Q = SEQ_KV``: the whole sequence; ``Q_OFFSET = r * SEQ_KV / W``: rank ``r``'s shard (what
the fused ring attention runs).

**Mirrored pairs (issue 31).**  A program takes two query blocks of one shard ``s``: block
``x`` of segment ``s`` (A) and block ``nbm - 1 - x`` of segment ``2W - 1 - s`` (B, the mirror;
``nbm`` query blocks per segment).  Causally A sees ``s`` whole segments and ``x + 1`` blocks'
worth of its own, B ``2W - 1 - s`` whole segments and ``nbm - x`` blocks' worth of its own, so
the pair sees ``(2W - 1) nb`` whole blocks (``nb`` KV blocks per segment) plus ``(nbm + 1)
BLOCK_M / BLOCK_N`` on the diagonal whatever ``s`` and ``x`` when ``BLOCK_N`` divides
``BLOCK_M`` (``2W nb + 1`` when they are equal; otherwise within a block of that): every
program does the same work, exactly the blocks its rows see -- the prefix-causal kernel's
work, with no block skipped or wasted.

**No branch in the loops, so they pipeline.**  The previous kernel walked *all* KV blocks in a
loop of constant trip count and skipped later segments with an ``if``; Triton 3.6 does not
software-pipeline loads under a branch, and it cost 1.28-1.50x the prefix-causal kernel
(H100, H200).  Here each query block runs one loop (B's, then A's) whose trip count is the
number of blocks it sees, and iteration ``i`` computes the stored block it reads
(:func:`_visited_block`: integer arithmetic and selects) and the causal mask from original
positions (a ``tl.where`` on every block, as the prefix-causal kernel's).  No iteration
branches, so K and V are copied asynchronously into ``num_stages`` buffers
(``tests/test_attention_local.py`` checks the sm_90 TTGIR).  The two query blocks' states are
live one after the other, not together, so registers are those of one block.  (One loop over
both blocks, of constant trip count, would keep both accumulators live and select between them
in every iteration, or store A's output from inside the loop: twice the registers or extra
softmax-path work per block, for no gain -- the remap could not use it either, see below.)

**Visiting order.**  A block of shard ``s`` visits its own shard's blocks first, then the
other shards in the order a fused kernel receives them: ascending ``s+1, ..., W-1, 0, ...,
s-1`` (an all-gather), or with ``DESCENDING`` ``s-1, ..., 0, W-1, ..., s+1`` (blocks passed
``r -> r+1`` round a ring).  B sees every shard (the lower ones' first segment, the upper ones
whole), so its loop waits for every chunk in arrival order after one to two segments of local
work (its own shard's blocks); A sees only blocks B already read, so its loop never waits.

**Why the kernel orders its visits itself (not the compiler's inner-loop remap).**  The remap
(``passes/loop_remap.py``) renumbers a loop whose iteration ``t`` reads KV block ``t`` of all
``SEQ_KV / BLOCK_N`` blocks by a per-rank permutation of the blocks.  No loop of this kernel
is of that form: a pair reads the lower shards' first segments twice (A and B) and their
second segments never, so its visits are not a permutation of the blocks, and its loops' trip
counts differ from the block count.  ``tile-remap`` therefore leaves the loops as written (a
remark, not an error); the waits ``insert-waits`` puts in each loop, one per K and V block,
keep the fused kernel correct in any order, and because nothing is reordered the fused kernel
sums in the unfused kernel's order: fused and unfused results are equal bit for bit.  The K/V
loads carry a mask ``rows < SEQ_KV`` that is always true: ``check-accesses`` cannot bound a
row computed through a select, and the mask bounds it (``SEQ_KV`` is compiled in when fused).

:func:`attention_zigzag` with ``fusable=False`` runs the fast kernel
(:func:`~syncopate.kernels.attention.attn_fwd_fast_kernel` with ``SEGMENTS``: TMA, warp
specialisation), experimental until ``tests/gpu`` passes on it on a GPU (as
:func:`~syncopate.kernels.attention.attention`'s fast path); the default is this kernel.

Contract (:func:`attention_zigzag`): as :func:`syncopate.kernels.attention.attention` (shapes,
GQA, dtypes, ``(o, lse)`` with the natural log-sum-exp), causal only, plus
``SEQ_KV % segments == 0`` and the segment length a multiple of ``BLOCK_M`` and ``BLOCK_N`` (a
block lies in one segment), ``Q_OFFSET`` and ``SEQ_Q`` multiples of two segments (whole
shards: a query block's mirror is in the same launch).
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from ..errors import LaunchError
from .attention import _PARAMS as PLAIN_PARAMS
from .attention import (LOG2E, AttentionConfig, _unit_last, check_device, check_operands,
                        choose_kernel, launch_fast, outputs, strides3)
from .attention import compile_args as plain_compile_args
from .attention_config import default_config as plain_default_config


@triton.jit
def _visited_block(i, s, n_own, up_runs, NB, W: tl.constexpr, DESCENDING: tl.constexpr):
    """``(slot, y)``: the stored segment slot and the block inside it that iteration ``i`` of a
    query block in shard ``s`` reads (module docstring, "visiting order").  First its own
    shard's ``n_own`` visible blocks (slot ``2s``, then ``2s + 1``), then the other shards'
    segments, ``NB`` blocks each: the *upper* shards' (``s < j < W``, both segments:
    ``up_runs`` segments, 0 or ``2 (W - 1 - s)``) and the *lower* shards' (``j < s``: the first
    segment of each), in ascending shard order from ``s`` (``s+1, ..., W-1, 0, ..., s-1``), or
    descending (``s-1, ..., 0, W-1, ..., s+1``) with ``DESCENDING``.  Integer arithmetic and
    selects only, no branch; one division by the run-time ``NB`` per iteration (the others are
    by 2)."""
    e = i - n_own  # the index among the other shards' blocks (negative in the own shard)
    g = e // NB    # which of their segments (meaningful when e >= 0)
    y = e - g * NB
    if DESCENDING:
        h = g - s  # past the lower shards: the upper ones from W-1 down, two segments each
        slot = tl.where(g < s, 2 * (s - 1 - g), 2 * (W - 1 - h // 2) + h % 2)
    else:
        slot = tl.where(g < up_runs, 2 * (s + 1) + g, 2 * (g - up_runs))
    second = (i >= NB).to(tl.int32)  # in the own shard: past segment s, into 2W-1-s
    slot = tl.where(e < 0, 2 * s + second, slot)
    y = tl.where(e < 0, i - second * NB, y)
    return slot, y


@triton.jit
def _visit(acc, l_i, m_i, q, q_pos, s, n_own, up_runs, k_base, v_base, stride_kn, stride_vn,
           offs_n, offs_d, qk_scale, NB, SEG_LEN, SEQ_KV, SEGMENTS: tl.constexpr,
           BLOCK_N: tl.constexpr, DESCENDING: tl.constexpr):
    """The online softmax of one query block (original positions ``q_pos``, in shard ``s``)
    over exactly the KV blocks it sees: ``n_own + (up_runs + s) NB`` iterations of one loop
    with no branch, each block's stored row and causal mask computed from the iteration
    number."""
    for i in tl.range(0, n_own + (up_runs + s) * NB):
        slot, y = _visited_block(i, s, n_own, up_runs, NB, SEGMENTS // 2, DESCENDING)
        rows = slot * SEG_LEN + y * BLOCK_N + offs_n
        seg = tl.where(slot % 2 == 0, slot // 2, SEGMENTS - 1 - slot // 2)
        k_pos = seg * SEG_LEN + y * BLOCK_N + offs_n  # original positions
        # always true; it bounds the rows for the compiler's access check, which cannot bound
        # a select (SEQ_KV is compiled in when fused)
        row_ok = rows < SEQ_KV
        kt = tl.load(k_base + rows[None, :] * stride_kn + offs_d[:, None], mask=row_ok[None, :],
                     other=0.0)
        qk = tl.dot(q, kt)
        qk = tl.where(k_pos[None, :] <= q_pos[:, None], qk, float("-inf"))
        # scale and subtract in one explicit fma: whether LLVM contracts `qk * scale - m` by
        # itself depends on which masks fold away (a constant SEQ_KV removes them), and a
        # fused kernel compiled with constant sizes must round as the local one does
        m_new = tl.maximum(m_i, tl.max(qk * qk_scale, 1))
        p = tl.math.exp2(tl.fma(qk, qk_scale, -m_new[:, None]))
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + rows[:, None] * stride_vn + offs_d[None, :], mask=row_ok[:, None],
                    other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _finish(acc, l_i, m_i, O, LSE, o_base, stride_om, lse_base, rows, offs_d):
    """Normalise and store one query block's output and natural log-sum-exp."""
    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    tl.store(o_base + rows[:, None] * stride_om + offs_d[None, :], acc.to(O.dtype.element_ty))
    tl.store(lse_base + rows, lse)


@triton.jit
def attn_zigzag_fwd_kernel(Q, K, V, O, LSE, qk_scale,
                           stride_qb, stride_qh, stride_qm,
                           stride_kb, stride_kh, stride_kn,
                           stride_vb, stride_vh, stride_vn,
                           stride_ob, stride_oh, stride_om,
                           H_Q, GROUP, SEQ_Q, SEQ_KV, Q_OFFSET,
                           SEGMENTS: tl.constexpr, HEAD_DIM: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           DESCENDING: tl.constexpr):
    """One program: a *mirrored pair* of query blocks of one (batch, query head), causal over
    the zigzag sequence (the module docstring says why and how).  Grid
    ``(SEQ_Q // (2 * BLOCK_M), B * H_Q)``; the host checks the divisibilities."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    h_kv = h // GROUP
    W: tl.constexpr = SEGMENTS // 2
    seg_len = SEQ_KV // SEGMENTS
    nb = seg_len // BLOCK_N          # KV blocks per segment
    nbm = seg_len // BLOCK_M         # query blocks per segment
    j = pid_m // nbm                 # the shard (pair of segments) among the query rows
    x = pid_m % nbm
    s = Q_OFFSET // (2 * seg_len) + j  # its segments: s (query block A) and 2W-1-s (B)
    a_in = x * BLOCK_M                 # A's first row inside segment s
    b_in = (nbm - 1 - x) * BLOCK_M     # B's, inside segment 2W-1-s: the mirrored block

    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_bm = tl.arange(0, BLOCK_M)
    q_base = Q + b * stride_qb + h * stride_qh
    o_base = O + b * stride_ob + h * stride_oh
    lse_base = LSE + pid_bh * SEQ_Q
    k_base = K + b * stride_kb + h_kv * stride_kh
    v_base = V + b * stride_vb + h_kv * stride_vh

    # B (segment 2W-1-s) sees segment s whole and its own segment up to its rows (its shard),
    # the upper shards whole and the first segment of each lower shard
    rows_b = j * 2 * seg_len + seg_len + b_in + offs_bm
    q = tl.load(q_base + rows_b[:, None] * stride_qm + offs_d[None, :])
    q_pos = (SEGMENTS - 1 - s) * seg_len + b_in + offs_bm
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = _visit(acc, l_i, m_i, q, q_pos, s,
                           nb + (b_in + BLOCK_M + BLOCK_N - 1) // BLOCK_N,
                           2 * (W - 1 - s), k_base, v_base, stride_kn, stride_vn, offs_n,
                           offs_d, qk_scale, nb, seg_len, SEQ_KV, SEGMENTS, BLOCK_N, DESCENDING)
    _finish(acc, l_i, m_i, O, LSE, o_base, stride_om, lse_base, rows_b, offs_d)

    # A (segment s) sees its own segment up to its rows and the first segment of each lower
    # shard: the KV rows B read first, so in the fused kernel they have all arrived by now
    rows_a = j * 2 * seg_len + a_in + offs_bm
    q = tl.load(q_base + rows_a[:, None] * stride_qm + offs_d[None, :])
    q_pos = s * seg_len + a_in + offs_bm
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    acc, l_i, m_i = _visit(acc, l_i, m_i, q, q_pos, s, (a_in + BLOCK_M + BLOCK_N - 1) // BLOCK_N,
                           0, k_base, v_base, stride_kn, stride_vn, offs_n, offs_d, qk_scale, nb,
                           seg_len, SEQ_KV, SEGMENTS, BLOCK_N, DESCENDING)
    _finish(acc, l_i, m_i, O, LSE, o_base, stride_om, lse_base, rows_a, offs_d)


def default_config(head_dim: int) -> AttentionConfig:
    """The paired zigzag kernel's default: the fusable prefix-causal kernel's
    (:func:`~syncopate.kernels.attention_config.default_config`).  Its loops are that kernel's
    loop with a computed row, so the same tiles and pipeline depth fit; not yet measured on a
    GPU (docs/attention.md lists the command).  The previous zigzag kernel's ``BLOCK_N = 128``
    x 2 stages was chosen to soften its unpipelined in-loop skip, which this kernel does not
    have."""
    return plain_default_config(head_dim)


_PARAMS = PLAIN_PARAMS + ("Q_OFFSET",)


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
    if q_offset % (2 * seg) or q_offset < 0 or q_offset + Sq > Skv or Sq % (2 * seg):
        raise LaunchError(f"the query rows [{q_offset}, {q_offset + Sq}) must be whole zigzag "
                          f"shards (pairs of segments of length {seg}, the rows one rank holds) "
                          f"of the {Skv}-long sequence: the kernel pairs each query block with "
                          f"its mirror in the shard's other segment")
    return seg


def compile_args(dtype="bf16", head_dim: int = 128, segments: int = 2,
                 config=None, descending: bool = False) -> tuple[dict, dict]:
    """``(signature, constexprs)`` of :func:`attn_zigzag_fwd_kernel` (as the JIT builds them)."""
    sig, cx = plain_compile_args(dtype, head_dim, False, config)
    del cx["CAUSAL"]
    signature = {p: sig.get(p, "i32") for p in _PARAMS}
    constexprs = dict(SEGMENTS=int(segments), **cx, DESCENDING=bool(descending))
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    return signature, constexprs


def attention_zigzag(q, k, v, segments: int, q_offset: int = 0, sm_scale: float | None = None,
                     config=None, *, out=None, fusable: bool = True, descending: bool = False):
    """Causal attention of ``q`` (rows ``[q_offset, q_offset + Sq)`` of a zigzag-stored
    sequence) against ``k``/``v`` (the whole zigzag-stored sequence of ``segments`` segments);
    returns ``(o, lse)`` as :func:`syncopate.kernels.attention.attention`.

    ``fusable=True`` (the default): :func:`attn_zigzag_fwd_kernel`, the paired kernel ring
    attention fuses (what its unfused path must run to equal the fused one bit for bit), each
    query block's visible KV blocks in one branch-free loop; ``descending`` picks the order in
    which it visits the other shards (module docstring; the result differs by rounding only).
    It replaced an in-loop-skip kernel on 2026-12-07 and has **not yet run on a GPU**
    (interpreter, emulator and sm_90 compile checks only).  ``fusable=False`` (experimental
    until ``tests/gpu`` passes on it on a GPU): the fast kernel
    (:func:`~syncopate.kernels.attention.attn_fwd_fast_kernel` with ``SEGMENTS``), which visits
    only the blocks a query block sees -- in original order, each block's stored row computed
    from its original position -- through TMA and warp specialisation, which the compiler
    cannot fuse."""
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
    grid = (Sq // (2 * cfg.BLOCK_M), B * Hq)
    attn_zigzag_fwd_kernel[grid](q, k, v, o, lse, float(sm_scale) * LOG2E,
                                 *strides3(q, k, v, o), Hq, Hq // Hkv, Sq, Skv, int(q_offset),
                                 SEGMENTS=segments, HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M,
                                 BLOCK_N=cfg.BLOCK_N, DESCENDING=bool(descending),
                                 **cfg.options())
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
           "default_config", "zigzag_order", "zigzag_segments", "zigzag_shard", "zigzag_unorder"]
