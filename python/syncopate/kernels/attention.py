"""Local (single-GPU) flash-attention forward: the fusable kernel Syncopate builds sequence
parallelism from, and the fast kernel :func:`attention` runs on one GPU.

Why a kernel of our own: ring attention and Ulysses (issue 11) are built by the compiler from a
plain single-GPU attention kernel and a schedule, exactly as the fused GEMMs are built from
:mod:`.gemm`.  That kernel (:func:`attn_fwd_kernel`, the *fusable* one) therefore knows nothing
about communication, and it is written so the passes can find what they need: the KV loop is
one plain ``for start_n in range(lo, hi, BLOCK_N)`` over KV blocks whose K and V addresses are
pointer arithmetic with row offset ``start_n`` (``start_n + arange(BLOCK_N)`` times the
sequence stride) -- the place where chunk waits go and the loop the inner-loop remap would
reorder.

Why a second kernel (issue 31): that shape is not the fastest one on Hopper.
:func:`attn_fwd_fast_kernel` reads through TMA descriptors, visits only the blocks a causal
query block sees (no mask in the blocks it sees whole), and is warp-specialised into a TMA
producer and two consumer warp groups -- none of which the compiler can fuse (a chunk wait
cannot sit inside a warp-specialised loop).

Which one runs: :func:`attention` runs the fusable kernel by default (``fusable=True``), the
kernel proven on a GPU; the fast one only when asked (``fusable=False``) and is
*experimental* until ``tests/gpu`` passes on it on a GPU -- written without a GPU, its first
GPU run (one H100, 2026-12-07) left the log-sum-exp of the second consumer's rows unwritten
and gave NaN with 3 pipeline stages (docs/attention.md, measured results).  The ops' unfused
paths pass ``fusable=True`` explicitly, so they equal their fused paths bit for bit whatever
the default is.  ``docs/attention.md`` (the local kernels) has the details and the
measurements.

Contract (:func:`attention`)
  * ``q`` is ``[B, Hq, Sq, D]``, ``k`` and ``v`` are ``[B, Hkv, Skv, D]``; ``Hq`` is a multiple
    of ``Hkv`` (grouped-query attention: query head ``h`` reads KV head ``h // (Hq // Hkv)``,
    like SDPA's ``enable_gqa=True`` / ``repeat_interleave``).  Any strides with a unit last
    dimension (a ``[B, S, H, D]`` or ``[S, B, H, D]`` tensor permuted to ``[B, H, S, D]`` is
    taken as is, without a copy).  bf16 or fp16, the same for all three; ``D`` in (64, 128).
  * Softmax in fp32 with the online (flash) recurrence in base 2: ``log2(e)`` is folded into
    the scale (``qk_scale = sm_scale * log2(e)``) so the exponentials are ``exp2``.
    ``sm_scale`` defaults to ``1/sqrt(D)``.
  * ``causal=True`` matches SDPA's ``is_causal``: the mask is *top-left* aligned, query ``i``
    sees keys ``j <= i`` also when ``Sq != Skv`` (for ``Sq > Skv`` the rows past ``Skv`` see
    every key; for ``Sq < Skv`` the last keys are seen by nobody).  A bottom-right aligned mask
    (decoding, chunked prefill) is a different contract and is not offered.
  * Returns ``(o, lse)``: ``o`` ``[B, Hq, Sq, D]`` in the input dtype (contiguous) and ``lse``
    ``[B, Hq, Sq]`` fp32, the **natural** log-sum-exp of the *scaled* scores of each row:
    ``lse = log(sum_j exp(sm_scale * q_i . k_j))`` over the keys the row sees.  Two partial
    results over disjoint key sets merge exactly as
    ``lse = logaddexp(lse1, lse2); o = o1 * exp(lse1 - lse) + o2 * exp(lse2 - lse)``
    (what ring attention does with the blocks of other ranks).

On CPU tensors :func:`attention` runs the same kernels under Triton's interpreter when the
process was started with ``TRITON_INTERPRET=1`` (read when ``@triton.jit`` decorates, so before
triton is first imported; ``tests/test_attention_local.py`` runs it in a subprocess): slow, for
the CPU tests only.  Without it a CPU launch raises :class:`LaunchError`.
"""

from __future__ import annotations

import math

import triton
import triton.language as tl

from .. import dtypes
from ..errors import LaunchError
from .attention_config import (SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS, AttentionConfig,
                               default_config, fast_default_config, lookup)
from .gemm_launch import device_info, ensure_tma_allocator

#: log2(e): multiplies the softmax scale so the kernel exponentiates with exp2.
LOG2E = 1.4426950408889634


@triton.jit
def attn_fwd_kernel(Q, K, V, O, LSE, qk_scale,
                    stride_qb, stride_qh, stride_qm,
                    stride_kb, stride_kh, stride_kn,
                    stride_vb, stride_vh, stride_vn,
                    stride_ob, stride_oh, stride_om,
                    H_Q, GROUP, SEQ_Q, SEQ_KV,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr):
    """One program: BLOCK_M query rows of one (batch, query head), over all its KV blocks.

    Grid ``(cdiv(SEQ_Q, BLOCK_M), B * H_Q)``.  ``qk_scale`` is ``sm_scale * log2(e)``;
    ``GROUP = H_Q // H_KV``.  ``LSE`` is contiguous ``[B, H_Q, SEQ_Q]`` (natural log).
    """
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    h_kv = h // GROUP

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < SEQ_Q

    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)
    k_base = K + b * stride_kb + h_kv * stride_kh
    v_base = V + b * stride_vb + h_kv * stride_vh

    # running max (base-2 scaled scores), running sum, unnormalised output. A finite "minus
    # infinity" keeps exp2(m_old - m_new) defined when a whole block of a row is masked.
    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    hi = SEQ_KV
    if CAUSAL:  # top-left aligned: the rows of this block see keys < (pid_m + 1) * BLOCK_M
        if (pid_m + 1) * BLOCK_M < SEQ_KV:
            hi = (pid_m + 1) * BLOCK_M
    for start_n in tl.range(0, hi, BLOCK_N):
        cols = start_n + offs_n
        col_ok = cols < SEQ_KV
        kt = tl.load(k_base + cols[None, :] * stride_kn + offs_d[:, None],
                     mask=col_ok[None, :], other=0.0)
        qk = tl.dot(q, kt)
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None])
        qk = tl.where(keep, qk, float("-inf"))
        # scale and subtract in one explicit fma: whether LLVM contracts `qk * scale - m` by
        # itself depends on which masks fold away (a constant SEQ_KV removes them), and a
        # fused kernel compiled with constant sizes must round as the local one does
        m_new = tl.maximum(m_i, tl.max(qk * qk_scale, 1))
        p = tl.math.exp2(tl.fma(qk, qk_scale, -m_new[:, None]))
        alpha = tl.math.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :],
                    mask=col_ok[:, None], other=0.0)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + pid_bh * SEQ_Q + offs_m, lse, mask=row_ok)


# ----------------------------------------------------------------------------------------------
# The fast forward (not fusable): TMA descriptors, split causal loop, warp specialisation
# ----------------------------------------------------------------------------------------------


@triton.jit
def _zigzag_original(pos, SEG_LEN, SEGMENTS: tl.constexpr):
    """The original position of stored position ``pos`` (itself when ``SEGMENTS == 0``): in a
    zigzag sequence of ``SEGMENTS`` segments slot ``2j`` holds segment ``j`` and slot
    ``2j + 1`` segment ``SEGMENTS - 1 - j``."""
    if SEGMENTS == 0:
        return pos
    slot = pos // SEG_LEN
    j = slot // 2
    seg = tl.where(slot % 2 == 0, j, SEGMENTS - 1 - j)
    return seg * SEG_LEN + pos % SEG_LEN


@triton.jit
def _zigzag_stored(pos, SEG_LEN, SEGMENTS: tl.constexpr):
    """The stored position of original position ``pos``: the inverse of
    :func:`_zigzag_original` (segment ``j < SEGMENTS/2`` sits at slot ``2j``, a later one at
    slot ``2 (SEGMENTS - 1 - j) + 1``)."""
    if SEGMENTS == 0:
        return pos
    seg = pos // SEG_LEN
    slot = tl.where(seg < SEGMENTS // 2, 2 * seg, 2 * (SEGMENTS - 1 - seg) + 1)
    return slot * SEG_LEN + pos % SEG_LEN


@triton.jit
def _rows_desc(base, rows, stride, BLOCK: tl.constexpr, HEAD_DIM: tl.constexpr):
    """A TMA descriptor over the ``[rows, HEAD_DIM]`` matrix at ``base`` (row stride
    ``stride``, unit inner stride), ``BLOCK`` rows per box."""
    return tl.make_tensor_descriptor(base, shape=[rows, HEAD_DIM], strides=[stride, 1],
                                     block_shape=[BLOCK, HEAD_DIM])


@triton.jit
def _fast_kv_step(acc, l_i, m_i, q, desc_k, desc_v, start_n, offs_m, offs_n, qk_scale,
                  SEQ_KV, SEG_LEN, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr,
                  MASK_CAUSAL: tl.constexpr, MASK_KV: tl.constexpr, SEGMENTS: tl.constexpr):
    """One KV block of the online softmax.  ``start_n`` and ``offs_m`` are *original*
    positions (the zigzag remap turns the block's start into its stored row; a block lies in
    one segment).  The mask is compiled in only where the caller's block range needs it."""
    row = _zigzag_stored(start_n, SEG_LEN, SEGMENTS)
    k = desc_k.load([row, 0])
    qk = tl.dot(q, k.T)
    if MASK_CAUSAL or MASK_KV:
        cols = start_n + offs_n
        if MASK_CAUSAL and MASK_KV:
            keep = (cols[None, :] <= offs_m[:, None]) & (cols[None, :] < SEQ_KV)
        elif MASK_CAUSAL:
            keep = cols[None, :] <= offs_m[:, None]
        else:
            keep = cols[None, :] < SEQ_KV
        qk = tl.where(keep, qk, float("-inf"))
    # the row max of the raw scores times the (positive) scale: one multiply per row, and the
    # scale folded into the exponent's fma
    m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    p = tl.math.exp2(tl.fma(qk, qk_scale, -m_new[:, None]))
    alpha = tl.math.exp2(m_i - m_new)
    l_ij = tl.sum(p, 1)
    acc = acc * alpha[:, None]
    v = desc_v.load([row, 0])
    acc = tl.dot(p.to(v.dtype), v, acc)
    l_i = l_i * alpha + l_ij
    return acc, l_i, m_new


@triton.jit
def attn_fwd_fast_kernel(Q, K, V, O, LSE, qk_scale,
                         stride_qb, stride_qh, stride_qm,
                         stride_kb, stride_kh, stride_kn,
                         stride_vb, stride_vh, stride_vn,
                         stride_ob, stride_oh, stride_om,
                         H_Q, GROUP, SEQ_Q, SEQ_KV, Q_OFFSET, SEG_LEN,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                         CAUSAL: tl.constexpr, SEGMENTS: tl.constexpr,
                         WARP_SPECIALIZE: tl.constexpr, EVEN_KV: tl.constexpr):
    """The fast forward: one program per BLOCK_M query rows of one (batch, query head), the
    contract of :func:`attn_fwd_kernel` (plus the zigzag layout when ``SEGMENTS > 0``: rows
    ``[Q_OFFSET, Q_OFFSET + SEQ_Q)`` of a zigzag-stored sequence, the mask on original
    positions, as :func:`~.attention_zigzag.attn_zigzag_fwd_kernel`).

    Q, K, V and O are read and written through TMA descriptors over the ``[S, D]`` slice of
    the program's (batch, head) with the tensors' own strides: TMA zero-fills rows past the
    sequence and clips the output's, so a ragged length needs no load mask (only the scores
    of keys past ``SEQ_KV`` are masked, and only when ``EVEN_KV`` is false).  A causal
    program visits only the KV blocks its rows see, longest rows first (programs in reverse
    order), in *original* positions -- the zigzag layout costs an address remap, not a
    skipped block.

    ``WARP_SPECIALIZE``: one ``tl.range(..., warp_specialize=True)`` loop over the visible
    blocks with the mask compiled in when the shape needs one (Triton 3.6's Hopper warp
    specialisation takes one loop per kernel: a second loop, or a branch in it, makes it
    fail or give up).  Otherwise two loops: the blocks every row sees in full without any
    mask, then the diagonal (or ragged last) blocks with it -- no branch in either loop, so
    both software-pipeline.  Grid ``(cdiv(SEQ_Q, BLOCK_M), B * H_Q)``; ``qk_scale > 0``.
    """
    pid_m = tl.program_id(0)
    if CAUSAL:  # the longest rows first: the last wave is made of short programs
        pid_m = tl.num_programs(0) - 1 - pid_m
    pid_bh = tl.program_id(1)
    b = pid_bh // H_Q
    h = pid_bh % H_Q
    h_kv = h // GROUP
    # per-(batch, head) 2-d descriptors: a descriptor is built per program anyway, and a 2-d
    # block is what Triton's warp specialisation can split between its consumer warp groups
    # (a 4-d block needs a reshape it refuses)
    desc_q = _rows_desc(Q + b * stride_qb + h * stride_qh, SEQ_Q, stride_qm, BLOCK_M, HEAD_DIM)
    desc_k = _rows_desc(K + b * stride_kb + h_kv * stride_kh, SEQ_KV, stride_kn, BLOCK_N,
                        HEAD_DIM)
    desc_v = _rows_desc(V + b * stride_vb + h_kv * stride_vh, SEQ_KV, stride_vn, BLOCK_N,
                        HEAD_DIM)
    desc_o = _rows_desc(O + b * stride_ob + h * stride_oh, SEQ_Q, stride_om, BLOCK_M, HEAD_DIM)
    m0 = pid_m * BLOCK_M
    q = desc_q.load([m0, 0])
    q_pos = _zigzag_original(Q_OFFSET + m0, SEG_LEN, SEGMENTS)  # a block lies in one segment
    offs_m = q_pos + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)

    m_i = tl.full([BLOCK_M], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    hi = SEQ_KV
    if CAUSAL:  # top-left aligned: these rows see keys < q_pos + BLOCK_M
        hi = tl.minimum(q_pos + BLOCK_M, SEQ_KV)
    if WARP_SPECIALIZE:
        for start_n in tl.range(0, hi, BLOCK_N, warp_specialize=True):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _fast_kv_step(acc, l_i, m_i, q, desc_k, desc_v, start_n,
                                          offs_m, offs_n, qk_scale, SEQ_KV, SEG_LEN, HEAD_DIM,
                                          BLOCK_N, CAUSAL, not EVEN_KV, SEGMENTS)
    else:
        mid = (SEQ_KV // BLOCK_N) * BLOCK_N  # the blocks no row needs masked: [0, mid)
        if CAUSAL:
            mid = tl.minimum((q_pos // BLOCK_N) * BLOCK_N, mid)
        for start_n in tl.range(0, mid, BLOCK_N):
            start_n = tl.multiple_of(start_n, BLOCK_N)
            acc, l_i, m_i = _fast_kv_step(acc, l_i, m_i, q, desc_k, desc_v, start_n,
                                          offs_m, offs_n, qk_scale, SEQ_KV, SEG_LEN, HEAD_DIM,
                                          BLOCK_N, False, False, SEGMENTS)
        if CAUSAL or not EVEN_KV:
            for start_n in tl.range(mid, hi, BLOCK_N):
                start_n = tl.multiple_of(start_n, BLOCK_N)
                acc, l_i, m_i = _fast_kv_step(acc, l_i, m_i, q, desc_k, desc_v, start_n,
                                              offs_m, offs_n, qk_scale, SEQ_KV,
                                              SEG_LEN, HEAD_DIM, BLOCK_N, CAUSAL, not EVEN_KV,
                                              SEGMENTS)

    acc = acc / l_i[:, None]
    lse = (m_i + tl.math.log2(l_i)) * 0.6931471805599453
    desc_o.store([m0, 0], acc.to(O.dtype.element_ty))
    # The LSE's addresses must not be built from a tensor splat of ``m0``: when warp
    # specialised, Triton 3.6's data partitioning gives the second consumer the O store at
    # coordinate ``m0 + BLOCK_M/2`` by mapping the *value* ``m0`` to ``m0 + BLOCK_M/2`` for
    # every op it clones into that consumer -- and it also shifts ``arange`` to start at
    # ``BLOCK_M/2``, so ``m0 + arange`` became ``m0 + BLOCK_M + i``: the second half's LSE
    # went one block too far (unwritten here, racing the next block's first half; the first
    # H100 run).  A scalar row pointer and a scalar row count are not cloned that way.
    lse_row0 = LSE + pid_bh * SEQ_Q + m0
    offs_lse = tl.arange(0, BLOCK_M)
    tl.store(lse_row0 + offs_lse, lse, mask=offs_lse < SEQ_Q - m0)


_PARAMS = ("Q", "K", "V", "O", "LSE", "qk_scale",
           "stride_qb", "stride_qh", "stride_qm", "stride_kb", "stride_kh", "stride_kn",
           "stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_om",
           "H_Q", "GROUP", "SEQ_Q", "SEQ_KV")


def compile_args(dtype="bf16", head_dim: int = 128, causal: bool = False,
                 config=None) -> tuple[dict, dict]:
    """``(signature, constexprs)`` for ``triton.compile(ASTSource(attn_fwd_kernel, ...))``,
    every parameter listed as the JIT builds it (constexprs typed ``"constexpr"``)."""
    dt = dtypes.canonical(dtype)
    if dt not in SUPPORTED_DTYPES:
        raise LaunchError(f"unsupported attention dtype {dtype!r}; use bf16 or fp16")
    cfg = AttentionConfig.of(config, head_dim).check(head_dim, fusable=True)
    # the one-letter parameters are the tensors, LSE fp32; every other one a size or stride
    signature = {p: {"LSE": "*fp32", "qk_scale": "fp32"}.get(p, f"*{dt}" if len(p) == 1 else "i32")
                 for p in _PARAMS}
    constexprs = dict(HEAD_DIM=head_dim, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
                      CAUSAL=bool(causal))
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    return signature, constexprs


def compile_attrs(aligned: bool = True, params=_PARAMS) -> dict:
    """``attrs`` for ``ASTSource``: ``tt.divisibility = 16`` on the five pointers and the strides
    (as the JIT adds them for 16-byte aligned tensors with strides that are multiples of 16)."""
    if not aligned:
        return {}
    div = [["tt.divisibility", 16]]
    return {(i,): div for i, p in enumerate(params)
            if p in ("Q", "K", "V", "O", "LSE") or p.startswith("stride_")}


FAST_PARAMS = _PARAMS + ("Q_OFFSET", "SEG_LEN")


def fast_compile_args(dtype="bf16", head_dim: int = 128, causal: bool = False, config=None,
                      segments: int = 0, even_kv: bool = True) -> tuple[dict, dict]:
    """``(signature, constexprs)`` of :func:`attn_fwd_fast_kernel` (as the JIT builds them);
    ``config`` None: the heuristic fast config."""
    from_fast = fast_default_config(head_dim, causal) if config is None else None
    cfg = AttentionConfig.of(config, head_dim, base=from_fast).check(head_dim)
    sig, cx = compile_args(dtype, head_dim, causal, cfg.replace(WARP_SPECIALIZE=False))
    signature = {p: sig.get(p, "i32") for p in FAST_PARAMS}
    constexprs = dict(cx, SEGMENTS=int(segments), WARP_SPECIALIZE=cfg.WARP_SPECIALIZE,
                      EVEN_KV=bool(even_kv))
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    return signature, constexprs


# ----------------------------------------------------------------------------------------------
# Launch
# ----------------------------------------------------------------------------------------------


def check_operands(q, k, v) -> tuple[int, int, int, int, int, int]:
    """Validate :func:`attention`'s operands; return ``(B, Hq, Hkv, Sq, Skv, D)``.

    Host only (works on CPU tensors); raises :class:`LaunchError` saying what to change.
    """
    import torch
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise LaunchError(f"{name} must be 4-D [batch, heads, seq, head_dim], got shape "
                              f"{tuple(t.shape)} (a [B, S, H, D] tensor: pass x.transpose(1, 2))")
    if not (q.dtype == k.dtype == v.dtype):
        raise LaunchError(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    name = dtypes.canonical(q.dtype) if dtypes.is_known(q.dtype) else None
    if name not in SUPPORTED_DTYPES:
        raise LaunchError(f"q, k and v must be torch.bfloat16 or torch.float16, got {q.dtype}; "
                          f"cast them (e.g. q.to(torch.bfloat16))")
    B, Hq, Sq, D = q.shape
    Bk, Hkv, Skv, Dk = k.shape
    if tuple(v.shape) != tuple(k.shape):
        raise LaunchError(f"k and v must have the same shape, got {tuple(k.shape)} and "
                          f"{tuple(v.shape)}")
    if Bk != B or Dk != D:
        raise LaunchError(f"q is {tuple(q.shape)} and k is {tuple(k.shape)}: batch and head_dim "
                          f"must agree")
    if D not in SUPPORTED_HEAD_DIMS:
        raise LaunchError(f"head_dim {D} is not supported; the attention kernel takes D in "
                          f"{SUPPORTED_HEAD_DIMS}")
    if Hkv == 0 or Hq % Hkv:
        raise LaunchError(f"query heads ({Hq}) must be a multiple of KV heads ({Hkv}) for "
                          f"grouped-query attention")
    if Skv == 0 and Sq > 0:
        raise LaunchError("k and v have an empty sequence: every query row would attend to no "
                          "key (softmax undefined)")
    if q.device != k.device or q.device != v.device:
        raise LaunchError(f"q, k and v must be on one device, got {q.device}, {k.device}, "
                          f"{v.device}")
    return B, Hq, Hkv, Sq, Skv, D


def _unit_last(t):
    return t if t.stride(-1) == 1 or t.shape[-1] == 1 else t.contiguous()


def outputs(q, out, shape):
    """``(o, lse)``: the caller's ``out`` checked against ``shape`` (``[B, Hq, Sq, D]``), or new
    tensors (``o`` in q's dtype, ``lse`` fp32) -- shared by every attention launcher."""
    import torch
    if out is None:
        return (torch.empty(shape, dtype=q.dtype, device=q.device),
                torch.empty(shape[:3], dtype=torch.float32, device=q.device))
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise LaunchError("out must be a pair (o, lse) of preallocated tensors")
    o, lse = out
    want = ((o, "o", shape, q.dtype), (lse, "lse", shape[:3], torch.float32))
    for t, name, shp, dt in want:
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != shp or t.dtype != dt:
            raise LaunchError(f"out {name} must be a {dt} tensor of shape {shp}, got "
                              f"{getattr(t, 'dtype', type(t).__name__)} "
                              f"{tuple(getattr(t, 'shape', ()))}")
        if not t.is_contiguous() or t.device != q.device:
            raise LaunchError(f"out {name} must be contiguous and on {q.device}")
    return o, lse


def check_device(q) -> None:
    """CPU tensors need Triton's interpreter (:class:`LaunchError` otherwise)."""
    if q.device.type == "cpu" and not triton.knobs.runtime.interpret:
        raise LaunchError("q, k and v are CPU tensors: the kernel needs a GPU, or Triton's "
                          "interpreter (set TRITON_INTERPRET=1 before triton is first imported)")


def fast_path_reason(q, k, v, o, sm_scale: float) -> str | None:
    """Why the fast kernel cannot run these tensors (None: it can).

    The fast kernel reads through TMA descriptors (Hopper or later; a 16-byte aligned base and
    strides that are multiples of 16 bytes, unit last stride) and folds the scale into the
    exponent's fma after the row max (``sm_scale > 0``).  The fusable kernel has none of these
    limits, so :func:`attention` runs it instead -- the same contract, slower."""
    if not sm_scale > 0:
        return f"sm_scale {sm_scale} is not positive"
    if q.device.type == "cuda":
        cap = device_info(q.device.index if q.device.index is not None else 0)[1]
        if cap[0] < 9:
            return f"compute capability {cap} has no TMA (the fast kernel needs 9.0+)"
    for name, t in (("q", q), ("k", k), ("v", v), ("o", o)):
        if t.data_ptr() % 16:
            return f"{name} is not 16-byte aligned"
        if t.stride(-1) != 1:
            return f"{name}'s last dimension is not contiguous"
        for d in range(3):
            if t.shape[d] > 1 and (t.stride(d) * t.element_size()) % 16:
                return f"{name}'s stride {t.stride(d)} (dim {d}) is not a multiple of 16 bytes"
    return None


def strides3(*ts) -> tuple:
    """The first three strides of each tensor, in order (the kernels' ``stride_*b, *h, *m``)."""
    return tuple(t.stride(d) for t in ts for d in range(3))


def tma_strides(*ts) -> tuple:
    """:func:`strides3` for TMA descriptors: a size-1 dimension's stride is arbitrary in torch
    (it may be 1), and TMA wants multiples of 16 bytes; any such value addresses the same
    elements."""
    return tuple(t.stride(d) if t.shape[d] > 1 else t.shape[-1] for t in ts for d in range(3))


def launch_fast(q, k, v, o, lse, causal: bool, sm_scale: float, cfg: AttentionConfig, *,
                segments: int = 0, q_offset: int = 0, seg_len: int = 1) -> None:
    """Launch :func:`attn_fwd_fast_kernel` (operands checked, ``fast_path_reason`` None)."""
    Hq, Sq = q.shape[1], q.shape[2]
    Hkv, Skv = k.shape[1], k.shape[2]
    if q.device.type == "cuda":
        ensure_tma_allocator()
    grid = (triton.cdiv(Sq, cfg.BLOCK_M), q.shape[0] * Hq)
    attn_fwd_fast_kernel[grid](
        q, k, v, o, lse, float(sm_scale) * LOG2E, *tma_strides(q, k, v, o), Hq, Hq // Hkv, Sq,
        Skv, int(q_offset), int(seg_len),
        HEAD_DIM=q.shape[3], BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=bool(causal),
        SEGMENTS=int(segments), WARP_SPECIALIZE=cfg.WARP_SPECIALIZE,
        EVEN_KV=Skv % cfg.BLOCK_N == 0, **cfg.options())


def fast_config(config, q, D: int, causal: bool, S: int, kernel: str = "fwd") -> AttentionConfig:
    """The fast ``kernel``'s config: ``config`` (an :class:`AttentionConfig`, or a dict of some
    fields over the table's choice), or the per-GPU table's entry for this shape class."""
    if isinstance(config, AttentionConfig):
        return config.check(D, kernel=kernel)
    gpu = device_info(q.device.index)[2] if q.device.type == "cuda" else None  # None: no table
    table = lookup(kernel, dtypes.canonical(q.dtype), D, causal, S, gpu)
    return AttentionConfig.of(config, D, base=table).check(D, kernel=kernel)


def choose_kernel(config, q, k, v, o, D: int, causal: bool, sm_scale: float, fusable: bool,
                  kernel: str = "fwd", fusable_base: AttentionConfig | None = None
                  ) -> tuple[AttentionConfig, bool]:
    """``(config, fast)``: the fast kernel's config when ``fusable`` is false and the fast kernel
    can run these tensors, else the fusable kernel's (``fusable_base``: its default, else
    :func:`default_config`).  A warp-specialised config for a launch that must take the
    fusable kernel is refused (:class:`LaunchError` with the reason)."""
    reason = "fusable=True" if fusable else fast_path_reason(q, k, v, o, sm_scale)
    if reason is None:
        return fast_config(config, q, D, causal, max(q.shape[2], k.shape[2]), kernel), True
    cfg = AttentionConfig.of(config, D, base=fusable_base)
    if cfg.WARP_SPECIALIZE and not fusable:
        raise LaunchError(f"config {cfg.short()} is warp specialised, but the fast kernel cannot "
                          f"run here ({reason}) and the fusable one is never warp specialised: "
                          f"drop WARP_SPECIALIZE")
    return cfg.check(D, fusable=True), False


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None, config=None, *,
              out=None, fusable: bool = True):
    """Flash-attention forward; returns ``(o, lse)`` (see the module docstring for the contract:
    shapes, GQA, the top-left causal mask, and ``lse`` in natural log of the scaled scores).

    ``fusable=True`` (the default): the kernel the compiler fuses (:func:`attn_fwd_kernel`),
    with :func:`default_config` -- the kernel proven on a GPU, and what the ops' unfused paths
    run, so that they equal their fused paths bit for bit.
    ``fusable=False`` (experimental until ``tests/gpu`` passes on it on a GPU): the fast kernel
    (:func:`attn_fwd_fast_kernel`) with the per-GPU table's config, or the fusable kernel where
    the fast one cannot run (:func:`fast_path_reason`: before Hopper, unaligned strides,
    ``sm_scale <= 0``).

    ``config``: an :class:`AttentionConfig`, a dict of some of its fields (the rest from the
    kernel's default), or None.  ``out``: optional preallocated ``(o, lse)``, contiguous.
    """
    B, Hq, Hkv, Sq, Skv, D = check_operands(q, k, v)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    o, lse = outputs(q, out, (B, Hq, Sq, D))
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    cfg, fast = choose_kernel(config, q, k, v, o, D, causal, sm_scale, fusable)
    if o.numel() == 0:
        return o, lse
    check_device(q)
    if fast:
        launch_fast(q, k, v, o, lse, causal, sm_scale, cfg)
        return o, lse
    attn_fwd_kernel[(triton.cdiv(Sq, cfg.BLOCK_M), B * Hq)](
        q, k, v, o, lse, float(sm_scale) * LOG2E, *strides3(q, k, v, o), Hq, Hq // Hkv, Sq, Skv,
        HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=bool(causal),
        **cfg.options())
    return o, lse


__all__ = ["AttentionConfig", "FAST_PARAMS", "LOG2E", "attention", "attn_fwd_fast_kernel",
           "attn_fwd_kernel", "check_operands", "compile_args", "compile_attrs",
           "default_config", "fast_compile_args", "fast_config",
           "choose_kernel", "fast_path_reason", "launch_fast"]
