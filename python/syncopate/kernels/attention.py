"""Local (single-GPU) flash-attention forward: the kernel Syncopate fuses for sequence parallelism.

Why a kernel of our own: ring attention and Ulysses (issue 11) are built by the compiler from a
plain single-GPU attention kernel and a schedule, exactly as the fused GEMMs are built from
:mod:`.gemm`.  The kernel therefore knows nothing about communication, and it is written so the
passes can find what they need: the KV loop is one plain ``for start_n in range(lo, hi,
BLOCK_N)`` over KV blocks whose K and V addresses are pointer arithmetic with row offset
``start_n`` (``start_n + arange(BLOCK_N)`` times the sequence stride) -- the place where chunk
waits go and the loop the inner-loop remap would reorder.

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

On CPU tensors :func:`attention` runs the same kernel under Triton's interpreter when the
process was started with ``TRITON_INTERPRET=1`` (read when ``@triton.jit`` decorates, so before
triton is first imported; ``tests/test_attention_local.py`` runs it in a subprocess): slow, for
the CPU tests only.  Without it a CPU launch raises :class:`LaunchError`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace

import triton
import triton.language as tl

from .. import dtypes
from ..errors import LaunchError

#: log2(e): multiplies the softmax scale so the kernel exponentiates with exp2.
LOG2E = 1.4426950408889634
#: ln(2): turns the kernel's base-2 log-sum-exp back into the natural one.
LN2 = 0.6931471805599453

_SUPPORTED_DTYPES = ("bf16", "fp16")
_SUPPORTED_HEAD_DIMS = (64, 128)


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
# Configurations
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttentionConfig:
    """Tile sizes (constexprs) and compile options of one attention launch."""

    BLOCK_M: int = 128
    BLOCK_N: int = 64
    num_warps: int = 8
    num_stages: int = 3

    @classmethod
    def of(cls, config, head_dim: int = 128) -> "AttentionConfig":
        """A config from an :class:`AttentionConfig`, a dict of its fields, or None (the default
        for ``head_dim``)."""
        if config is None:
            return default_config(head_dim)
        if isinstance(config, AttentionConfig):
            return config
        if isinstance(config, dict):
            unknown = set(config) - set(cls.__dataclass_fields__)
            if unknown:
                raise LaunchError(f"unknown attention config keys {sorted(unknown)}; valid keys "
                                  f"are {sorted(cls.__dataclass_fields__)}")
            return replace(default_config(head_dim), **config)
        raise LaunchError(f"config must be an AttentionConfig, a dict or None, not "
                          f"{type(config).__name__}")

    def as_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "AttentionConfig":
        return replace(self, **changes)

    def options(self) -> dict:
        """Triton compile options (``triton.compile(..., options=...)`` or launch kwargs)."""
        return dict(num_warps=self.num_warps, num_stages=self.num_stages)

    def smem_bytes(self, head_dim: int, elem_bytes: int = 2) -> int:
        """Rough shared memory: Q once, K and V per stage."""
        return (self.BLOCK_M + 2 * self.num_stages * self.BLOCK_N) * head_dim * elem_bytes

    def check(self, head_dim: int) -> "AttentionConfig":
        """Raise :class:`LaunchError` saying what to change if the kernel cannot run this."""
        problems = []
        for f in ("BLOCK_M", "BLOCK_N", "num_warps"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                problems.append(f"{f}={v!r} must be a positive power of two")
        if min(self.BLOCK_M, self.BLOCK_N) < 16:
            problems.append("BLOCK_M and BLOCK_N must be >= 16 (tl.dot's minimum)")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            problems.append(f"num_stages={self.num_stages!r} must be a positive integer")
        if problems:
            raise LaunchError(f"attention config {self} is not valid: " + "; ".join(problems))
        return self


def default_config(head_dim: int) -> AttentionConfig:
    """The H200 starting point per head dim (Triton's fused-attention tutorial's Hopper choices
    and FlashAttention-2's Triton settings): 128 query rows per program over two wgmma warp
    groups (8 warps), KV blocks of 128 for ``D = 64`` and 64 for ``D = 128`` (the S and P tiles
    plus the accumulator stay in registers), 3 stages of K/V in shared memory (~128 KiB for
    ``D = 128``).  ``scripts/bench_attention.py`` sweeps the alternatives on a GPU."""
    if head_dim not in _SUPPORTED_HEAD_DIMS:
        raise LaunchError(f"head dim {head_dim} is not supported; the attention kernel takes "
                          f"D in {_SUPPORTED_HEAD_DIMS}")
    if head_dim == 64:
        return AttentionConfig(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)
    return AttentionConfig(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


_PARAMS = ("Q", "K", "V", "O", "LSE", "qk_scale",
           "stride_qb", "stride_qh", "stride_qm", "stride_kb", "stride_kh", "stride_kn",
           "stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_om",
           "H_Q", "GROUP", "SEQ_Q", "SEQ_KV")


def compile_args(dtype="bf16", head_dim: int = 128, causal: bool = False,
                 config=None) -> tuple[dict, dict]:
    """``(signature, constexprs)`` for ``triton.compile(ASTSource(attn_fwd_kernel, ...))``,
    every parameter listed as the JIT builds it (constexprs typed ``"constexpr"``)."""
    dt = dtypes.canonical(dtype)
    if dt not in _SUPPORTED_DTYPES:
        raise LaunchError(f"unsupported attention dtype {dtype!r}; use bf16 or fp16")
    cfg = AttentionConfig.of(config, head_dim).check(head_dim)
    signature = {}
    for p in _PARAMS:
        if p == "LSE":
            signature[p] = "*fp32"
        elif len(p) == 1:
            signature[p] = f"*{dt}"
        elif p == "qk_scale":
            signature[p] = "fp32"
        else:
            signature[p] = "i32"
    constexprs = dict(HEAD_DIM=head_dim, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N,
                      CAUSAL=bool(causal))
    for k in constexprs:
        signature[k] = "constexpr"
    return signature, constexprs


def compile_attrs(aligned: bool = True) -> dict:
    """``attrs`` for ``ASTSource``: ``tt.divisibility = 16`` on the five pointers and the strides
    (as the JIT adds them for 16-byte aligned tensors with strides that are multiples of 16)."""
    if not aligned:
        return {}
    div = [["tt.divisibility", 16]]
    return {(i,): div for i, p in enumerate(_PARAMS)
            if p in ("Q", "K", "V", "O", "LSE") or p.startswith("stride_")}


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
    if name not in _SUPPORTED_DTYPES:
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
    if D not in _SUPPORTED_HEAD_DIMS:
        raise LaunchError(f"head_dim {D} is not supported; the attention kernel takes D in "
                          f"{_SUPPORTED_HEAD_DIMS}")
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
    if out is not None:
        return _check_out(out, q, shape)
    return (torch.empty(shape, dtype=q.dtype, device=q.device),
            torch.empty(shape[:3], dtype=torch.float32, device=q.device))


def check_device(q) -> None:
    """CPU tensors need Triton's interpreter (:class:`LaunchError` otherwise)."""
    if q.device.type == "cpu" and not triton.knobs.runtime.interpret:
        raise LaunchError("q, k and v are CPU tensors: the kernel needs a GPU, or Triton's "
                          "interpreter (set TRITON_INTERPRET=1 before triton is first imported)")


def _check_out(out, q, shape):
    import torch
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


def attention(q, k, v, causal: bool = False, sm_scale: float | None = None, config=None, *,
              out=None):
    """Flash-attention forward; returns ``(o, lse)`` (see the module docstring for the contract:
    shapes, GQA, the top-left causal mask, and ``lse`` in natural log of the scaled scores).

    ``config``: an :class:`AttentionConfig`, a dict of some of its fields (the rest from
    :func:`default_config`), or None.  ``out``: optional preallocated ``(o, lse)``, contiguous.
    """
    B, Hq, Hkv, Sq, Skv, D = check_operands(q, k, v)
    cfg = AttentionConfig.of(config, D).check(D)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(D)
    o, lse = outputs(q, out, (B, Hq, Sq, D))
    if o.numel() == 0:
        return o, lse
    q, k, v = _unit_last(q), _unit_last(k), _unit_last(v)
    grid = (triton.cdiv(Sq, cfg.BLOCK_M), B * Hq)
    args = (q, k, v, o, lse, float(sm_scale) * LOG2E,
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
            v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
            Hq, Hq // Hkv, Sq, Skv)
    consts = dict(HEAD_DIM=D, BLOCK_M=cfg.BLOCK_M, BLOCK_N=cfg.BLOCK_N, CAUSAL=bool(causal))
    check_device(q)
    attn_fwd_kernel[grid](*args, **consts, **cfg.options())
    return o, lse


__all__ = ["AttentionConfig", "LN2", "LOG2E", "attention", "attn_fwd_kernel", "check_operands",
           "compile_args", "compile_attrs", "default_config"]
