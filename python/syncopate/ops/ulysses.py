"""Ulysses attention: DeepSpeed-Ulysses sequence parallelism as one fused kernel.

Rank ``r`` holds sequence block ``r`` of Q, K and V with every head; attention needs the whole
sequence, so Ulysses moves them to head-sharded (rank ``r`` gets head block ``r`` of the whole
sequence) with an all-to-all, attends, and moves the output back with a second all-to-all.
Here both all-to-alls run inside the attention kernel: the local kernel
(:func:`syncopate.kernels.attention.attn_fwd_kernel`, unmodified) fused by the compiler with the
``ulysses_all_to_all`` plan.  A tile of head ``h`` waits only for the chunks of head ``h``
(and of its KV head), and each output tile signals the chunks that go back to their owners as
it finishes.  No hand-written fused kernel.

Contract (:func:`ulysses_attention`; docs/ulysses.md has it in full, and what is refused and
why): ``q`` ``[B, Hq, S/W, D]``, ``k`` and ``v`` ``[B, Hkv, S/W, D]``, this rank's sequence
block of every head; returns the same block of attention over the whole sequence. Anything the
kernel cannot take is a :class:`LaunchError` saying what to change. ``fused=False`` (or
``SYNCOPATE=0``): :func:`ulysses_attention_reference` -- NCCL ``all_to_all_single``, the same
local kernel with the same config, ``all_to_all_single`` back; the same tiles, so bitwise the
fused result.

Backward and autograd: ``torch.ops.syncopate.ulysses_attention(q, k, v, group_name, causal,
sm_scale) -> (o, lse)`` is the op with autograd (``syncopate.torch_ops.ulysses_attention``
returns ``o``); ``lse`` is this rank's heads over the whole sequence (``[B, Hq/W, S]``, where
the kernel computes it: kept for the backward, never moved). Its backward, the companion
``torch.ops.syncopate.ulysses_attention_backward`` (:func:`ulysses_attention_backward`), is
**not fused**: one all-to-all of Q, K, V, O, dO to head-sharded, the unmodified local
flash-attention backward kernels, one all-to-all of dQ, dK, dV back (that function says why).

What the fused path keeps per communicator (``comm.cache``): symmetric ``[B, H, S, D]`` buffers
of Q, K, V and O (each rank stages its sequence block into them; the whole sequence is there so
that the plan's chunks are boxes of one global tensor) and one FusedKernel per configuration.
Only the ``sm`` backend fuses it (the comm programs copy the 4-d chunks through a 2-d view).
"""

from __future__ import annotations

import functools
import math

import torch
import triton

from ..dtypes import canonical, element_bytes
from ..errors import LaunchError, ScheduleError, TorchOpError
from ..kernels.attention import LOG2E, AttentionConfig, attention, attn_fwd_kernel, check_operands
from ..kernels.attention_bwd import default_backward_config
from ..runtime import collectives as dist
from ..schedule import ulysses_all_to_all
from ..schedule.ulysses_cost import OP_DEFAULT_PROGRAMS, ulysses_costs
from . import choice, driver
from . import ring_attention_bwd as bwd
from .ring_attention import (SHAPE, attend, attention_check, attention_grads, attention_torch_op,
                             compute_dtype, explain_shape, fit, local_candidates, scores)
from .spec import Cand, OpSpec

_OPERANDS = {"Q": "Q", "K": "K", "V": "V", "O": "O"}
#: the sizes and strides the access analysis needs as constants (a head index is taken modulo
#: the head count; strides split an address into dims)
_CONSTANTS = ("stride_qb", "stride_qh", "stride_qm", "stride_kb", "stride_kh", "stride_kn",
              "stride_vb", "stride_vh", "stride_vn", "stride_ob", "stride_oh", "stride_om",
              "H_Q", "GROUP", "SEQ_Q", "SEQ_KV")
_BACKENDS = ("sm",)


def check_plan(batch: int, q_heads: int, kv_heads: int, seq: int, head_dim: int,
               world_size: int) -> None:
    """Raise :class:`LaunchError` unless Ulysses over ``world_size`` ranks can run this
    attention: every problem at once, each with what to change."""
    W = world_size
    problems = []
    if seq % W:
        problems.append(f"the sequence ({seq}) must be divisible by the world size ({W}): every "
                        f"rank holds an equal block; pad it to a multiple of {W}")
    if q_heads % W:
        problems.append(f"query heads ({q_heads}) must be divisible by the world size ({W}): "
                        f"each rank attends with whole heads")
    if kv_heads % W:
        problems.append(f"KV heads ({kv_heads}) must be divisible by the world size ({W}): each "
                        f"rank keeps whole KV heads (replicate KV heads to a multiple of {W} "
                        f"first)")
    if kv_heads == 0 or q_heads % kv_heads:
        problems.append(f"query heads ({q_heads}) must be a multiple of KV heads ({kv_heads}) "
                        f"(grouped-query attention)")
    if head_dim not in (64, 128):
        problems.append(f"head_dim {head_dim} is not supported; the attention kernel takes 64 "
                        f"or 128")
    if batch * q_heads * seq * head_dim >= 2 ** 31:
        problems.append(f"B * Hq * S * D = {batch * q_heads * seq * head_dim} elements do not "
                        f"fit the kernel's 32-bit offsets; split the batch")
    if problems:
        raise LaunchError("ulysses_attention: " + "; ".join(problems))


def _check(q, k, v, comm) -> tuple[int, int, int, int, int]:
    """``(B, Hq, Hkv, S_local, D)`` of valid operands (LaunchError otherwise)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise LaunchError(f"{name} must be a 4-D torch.Tensor [batch, heads, seq/W, "
                              f"head_dim] (this rank's sequence block), got "
                              f"{tuple(getattr(t, 'shape', ())) or type(t).__name__}")
    B, Hq, Hkv, Sl, Skv, D = check_operands(q, k, v)
    if Skv != Sl:
        raise LaunchError(f"q holds {Sl} positions of the sequence and k, v hold {Skv}: Ulysses "
                          f"shards one sequence, so every rank passes the same block of all "
                          f"three")
    check_plan(B, Hq, Hkv, Sl * comm.world_size, D, comm.world_size)
    driver.check_comm_device(comm, ("q", q), ("k", k), ("v", v))
    return B, Hq, Hkv, Sl, D


def _local_attention(q, k, v, causal, sm_scale, config):
    """The local kernel (a module-level name so CPU tests can stand in for it): the fusable one,
    which the fused op runs, so the unfused path gives its bits -- also at world size 1 (the
    fast kernel stays opt-in until it passes the GPU tests; docs/attention.md)."""
    return _local_attention_lse(q, k, v, causal, sm_scale, config)[0]


def _local_attention_lse(q, k, v, causal, sm_scale, config):
    """:func:`_local_attention` with its ``lse`` (what the backward needs): ``(o, lse)``."""
    return attention(q, k, v, causal=causal, sm_scale=sm_scale, config=config, fusable=True)


def _exchange(sends, group):
    """One ``all_to_all_single`` of several tensors of one dtype, each ``[W(dst), ...]``
    (block ``s`` for rank ``s``): packed into one ``[W, total]`` buffer so that several
    tensors cost one collective; each comes back ``[W(src), ...]``."""
    W = sends[0].shape[0]
    flat = (sends[0].contiguous().view(W, -1) if len(sends) == 1 else
            torch.cat([t.reshape(W, -1) for t in sends], 1))
    recv = torch.empty_like(flat)
    dist.all_to_all_single(recv, flat, group=group)
    parts = recv.split([t[0].numel() for t in sends], 1)
    return [r.reshape(t.shape) for r, t in zip(parts, sends)]


def to_heads(tensors, group, W: int):
    """All-to-all (one collective for all of ``tensors``, one dtype): this rank's sequence block
    of every head -> every sequence block of this rank's heads (``[B, H, S/W, D]`` ->
    ``[B, H/W, S, D]``; rank ``r`` gets heads ``r H/W ...``)."""
    if W == 1:
        return list(tensors)
    sends = [x.reshape(x.shape[0], W, x.shape[1] // W, *x.shape[2:]).transpose(0, 1)
             for x in tensors]                                    # [W(dst), B, h, Sl, D]
    outs = []
    for r in _exchange(sends, group):                             # [W(src), B, h, Sl, D]
        _, B, h, Sl, D = r.shape
        out = r.new_empty((B, h, W * Sl, D))  # its own storage: outputs never alias
        out.view(B, h, W, Sl, D).copy_(r.permute(1, 2, 0, 3, 4))
        outs.append(out)
    return outs


def to_sequence(tensors, group, W: int):
    """The inverse all-to-all (one collective for all of ``tensors``, one dtype):
    ``[B, H/W, S, D]`` of this rank's heads -> this rank's sequence block ``[B, H, S/W, D]``."""
    if W == 1:
        return list(tensors)
    sends = [o.reshape(o.shape[0], o.shape[1], W, o.shape[2] // W, o.shape[3])
             .permute(2, 0, 1, 3, 4) for o in tensors]            # [W(dst), B, h, Sl, D]
    outs = []
    for r in _exchange(sends, group):                             # [W(src), B, h, Sl, D]
        _, B, h, Sl, D = r.shape
        out = r.new_empty((B, W * h, Sl, D))
        out.view(B, W, h, Sl, D).copy_(r.transpose(0, 1))
        outs.append(out)
    return outs


def ulysses_attention_reference(q, k, v, comm, *, causal: bool = False, sm_scale=None,
                                config=None, return_lse: bool = False):
    """The unfused path: ``all_to_all_single`` of Q, K and V to head-sharded, the local
    attention kernel, ``all_to_all_single`` of the output back. ``return_lse``: ``(o, lse)``,
    ``lse`` of this rank's heads over the whole sequence (``[B, Hq/W, S]`` fp32, what the
    fused kernel leaves; the backward's input)."""
    B, Hq, Hkv, Sl, D = _check(q, k, v, comm)
    cfg = AttentionConfig.of(config, D).check(D)
    W, g = comm.world_size, comm.group
    heads = [to_heads([t], g, W)[0] for t in (q, k, v)]  # three collectives, as NCCL code has
    if not return_lse:
        return to_sequence([_local_attention(*heads, causal, sm_scale, cfg)], g, W)[0]
    o, lse = _local_attention_lse(*heads, causal, sm_scale, cfg)
    return to_sequence([o], g, W)[0], lse


def ulysses_buffers(comm, B: int, Hq: int, Hkv: int, S: int, D: int, dtype) -> dict:
    """The symmetric global ``Q, K, V, O`` buffers of this shape (allocated on first use: a
    collective, so every rank calls it with the same shape)."""
    return {name: driver.symmetric_buffer(comm, f"ulysses.{name}", (B, h, S, D), dtype)
            for name, h in (("Q", Hq), ("K", Hkv), ("V", Hkv), ("O", Hq))}


def ulysses_fused_kernel(comm, B: int, Hq: int, Hkv: int, S: int, D: int, dtype, *,
                         backend: str = "sm", mode: str = "push", comm_programs: int = 4,
                         config=None):
    """The (cached) FusedKernel: the local attention kernel fused with ``ulysses_all_to_all``.
    A kernel that timed out is rebuilt (its flags disagree across ranks)."""
    if backend not in _BACKENDS:
        raise LaunchError(f"ulysses_attention fuses with the {' or '.join(_BACKENDS)} backend, "
                          f"not {backend!r}: the comm programs copy its 4-d chunks through a 2-d "
                          f"view, which the ce and nvshmem lowerings do not; pass backend='sm' "
                          f"or fused=False")
    cfg = AttentionConfig.of(config, D).check(D)
    return driver.cached_fused(
        comm, ("ulysses.fk", B, Hq, Hkv, S, D, str(dtype), backend, mode, comm_programs,
               repr(cfg)), attn_fwd_kernel,
        lambda: ulysses_all_to_all(B, Hq, Hkv, S, D, canonical(dtype),
                                   comm.world_size, mode=mode),
        config=cfg, operand=dict(_OPERANDS), backend=backend, comm_programs=comm_programs,
        constant_args=_CONSTANTS)


def ulysses_attention(q, k, v, comm, *, causal: bool = False, sm_scale=None,
                      backend: str | None = None, config=None, fused=None, mode: str = "push",
                      comm_programs=None, out=None, return_lse: bool = False):
    """Attention over the whole sequence for this rank's sequence block (module docstring:
    layouts and what is refused).  ``config``: an :class:`AttentionConfig` (or dict) of the
    local kernel; ``mode``: ``push`` or ``pull`` chunks; ``comm_programs``: programs of the
    kernel that move the chunks (default 4, at most half of a loopback rank's SMs).
    ``out``: an optional ``[B, Hq, S/W, D]`` tensor of ``q``'s dtype the result is copied
    into (and returned); without it the result is a new tensor -- under CUDA-graph capture
    one of the graph's pool, rewritten by every replay (docs/cuda-graphs.md).  ``fused`` None:
    the op chooses the fused kernel or the unfused path (NCCL all-to-alls + the local kernel),
    the same on every rank (:func:`syncopate.ops.choice.decide_shape`: the model predicts the
    serial path faster at most shapes, docs/ulysses.md); ``fused=True``, ``backend`` or
    ``comm_programs``: fused; ``fused=False`` (or ``SYNCOPATE=0``): unfused.  World size 1:
    the local kernel alone.  ``return_lse``: ``(o, lse)``, ``lse`` the natural log-sum-exp of
    this rank's heads over the whole sequence, ``[B, Hq/W, S]`` fp32 -- the head-sharded form
    the kernel computes it in, which is the form :func:`ulysses_attention_backward` takes (no
    all-to-all of it either way)."""
    B, Hq, Hkv, Sl, D = _check(q, k, v, comm)
    cfg = AttentionConfig.of(config, D).check(D)
    if out is not None and (not isinstance(out, torch.Tensor) or out.shape != q.shape
                            or out.dtype != q.dtype or out.device != q.device):
        raise LaunchError(f"out must be this rank's [B, Hq, S/W, D] = {list(q.shape)} result in "
                          f"{q.dtype} on {q.device}, got "
                          f"{getattr(out, 'dtype', type(out).__name__)} "
                          f"{list(getattr(out, 'shape', ()))}")
    W, me = comm.world_size, comm.rank
    if W == 1 or not (driver.use_fused(fused) and driver.choose(
            SPEC, comm, (B, Hq, Hkv, Sl * W, D, int(bool(causal))), q.dtype, fused=fused,
            explicit=backend is not None or comm_programs is not None, named=True)[0]):
        if W > 1:
            r = ulysses_attention_reference(q, k, v, comm, causal=causal, sm_scale=sm_scale,
                                            config=cfg, return_lse=return_lse)
        else:  # one rank holds every head of the whole sequence
            r = (_local_attention_lse if return_lse else _local_attention)(q, k, v, causal,
                                                                           sm_scale, cfg)
        o, lse = r if return_lse else (r, None)
        o = o if out is None else out.copy_(o)
        return (o, lse) if return_lse else o
    backend = backend or "sm"
    S = Sl * W
    cp = driver.loopback_comm_programs(
        comm, OP_DEFAULT_PROGRAMS if comm_programs is None else int(comm_programs), comm_programs)
    fk = ulysses_fused_kernel(comm, B, Hq, Hkv, S, D, q.dtype, backend=backend, mode=mode,
                              comm_programs=cp, config=cfg)
    bufs = ulysses_buffers(comm, B, Hq, Hkv, S, D, q.dtype)
    rows = slice(me * Sl, (me + 1) * Sl)
    for name, t in (("Q", q), ("K", k), ("V", v)):
        bufs[name][:, :, rows].copy_(t)
    Q, K, V, O = bufs["Q"], bufs["K"], bufs["V"], bufs["O"]
    lse = torch.empty((B, Hq // W, S), dtype=torch.float32, device=q.device)
    scale = 1.0 / math.sqrt(D) if sm_scale is None else float(sm_scale)
    args = (Q, K, V, O, lse, scale * LOG2E,
            Q.stride(0), Q.stride(1), Q.stride(2), K.stride(0), K.stride(1), K.stride(2),
            V.stride(0), V.stride(1), V.stride(2), O.stride(0), O.stride(1), O.stride(2),
            Hq // W, Hq // Hkv, S, S, D, cfg.BLOCK_M, cfg.BLOCK_N, bool(causal))
    grid = (triton.cdiv(S, cfg.BLOCK_M), B * Hq // W)
    fk[grid](*args)
    # the kernel completes once every chunk into this rank arrived; the buffer is reused by
    # the next launch, so the result is a copy (stream-ordered before it)
    o = O[:, :, rows].clone() if out is None else out.copy_(O[:, :, rows])
    return (o, lse) if return_lse else o


def _check_backward(q, o, lse, do, dlse, W: int) -> None:
    """``o``/``do`` like ``q``; ``lse`` (and ``dlse``) the forward's head-sharded fp32
    ``[B, Hq/W, S]`` (LaunchError otherwise)."""
    B, Hq, Sl, _ = q.shape
    for name, t in (("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(q.shape) \
                or t.dtype != q.dtype or t.device != q.device:
            raise LaunchError(f"ulysses_attention_backward: {name} must be a {q.dtype} tensor of "
                              f"q's shape {tuple(q.shape)} on {q.device}, got "
                              f"{getattr(t, 'dtype', None)} {tuple(getattr(t, 'shape', ()))}")
    want = (B, Hq // W, Sl * W)
    for name, t in (("lse", lse), ("dlse", dlse)):
        if name == "dlse" and t is None:
            continue
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != want \
                or t.dtype != torch.float32:
            raise LaunchError(f"ulysses_attention_backward: {name} must be the forward's fp32 "
                              f"lse of this rank's heads over the whole sequence, [B, Hq/W, S] = "
                              f"{want}, got {getattr(t, 'dtype', None)} "
                              f"{tuple(getattr(t, 'shape', ()))}")


def ulysses_attention_backward(q, k, v, o, lse, do, comm, *, causal: bool = False,
                               sm_scale=None, dlse=None, config=None):
    """``(dq, dk, dv)`` of this rank's sequence blocks, from the forward's inputs, its ``o``
    (this rank's block), its ``lse`` (``return_lse=True``: this rank's heads over the whole
    sequence, ``[B, Hq/W, S]``) and the upstream gradient ``do`` (``dlse``: a gradient of that
    ``lse``, if any).

    **Not fused** (the forward is): one all-to-all of Q, K, V, O and dO to head-sharded (the
    five packed into one collective), the local flash-attention backward on this rank's heads
    over the whole sequence (:func:`syncopate.kernels.attention_bwd.attention_backward`, the
    fusable kernels with :func:`~syncopate.kernels.attention_bwd.default_backward_config` --
    the ones proven on a GPU; with ``dlse`` the same kernels with ``delta - dlse``), and one
    all-to-all of dQ, dK, dV back to sequence blocks. Why not fused: no schedule template
    describes the backward's exchange (five inputs to head-sharded ahead of two kernels -- the
    dK/dV kernel's programs each read every query row of their heads -- and three produced
    gradients back), and the compiler fuses only what a template describes; until one exists
    the two collectives around the unmodified kernels are the sound path (DeepSpeed-Ulysses'
    own backward is the same).

    Why Q, K, V are moved again rather than kept from the forward: the memory is the same
    either way (head-sharded, they are a shard's size, and kept they would replace the saved
    shards), but keeping them would need the op to return them (five outputs) and, on the
    fused path, copy them out of the symmetric buffers that the next layer's call rewrites;
    moving them again costs this all-to-all Q, K, V and O besides dO. The simpler op (ring
    attention's schema) was chosen; keeping them is an optimisation to measure. O rides along
    (rather than ``delta = rowsum(dO * O)``) so that the five tensors share one dtype and one
    collective and the local backward computes ``delta`` itself.
    ``config``: the backward kernels' (default above)."""
    B, Hq, Hkv, Sl, D = _check(q, k, v, comm)
    W, g = comm.world_size, comm.group
    _check_backward(q, o, lse, do, dlse, W)
    driver.check_comm_device(comm, ("o", o), ("do", do))
    cfg = config if config is not None else default_backward_config(D)
    heads = to_heads([q, k, v, o, do], g, W)
    grads = bwd.world_size_one(*heads[:3], heads[3], lse, heads[4], causal, sm_scale, dlse, cfg)
    return tuple(to_sequence(list(grads), g, W))


# ------------------------------------------------------------------------------------------
# torch.ops.syncopate.ulysses_attention (and its backward)
# ------------------------------------------------------------------------------------------

def _torch_check(q, k, v, W, causal=False, sm_scale=None):
    attention_check("ulysses_attention", q, k, v, rows="block length")
    Hq, Hkv = q.shape[1], k.shape[1]
    if Hq % W or Hkv % W:
        raise TorchOpError(f"ulysses_attention: query heads ({Hq}) and KV heads ({Hkv}) must "
                           f"divide by the world size ({W}): each rank attends with whole "
                           f"heads; for fewer heads use ring_attention")


def _scores(qh, kh, causal, sm_scale, ct):
    """This rank's heads' :func:`~.ring_attention.scores` over the whole sequence (causal: the
    top-left mask -- the sequence is contiguous here)."""
    S = qh.shape[2]
    future = torch.ones(S, S, dtype=torch.bool, device=qh.device).triu(1) if causal else None
    return scores(qh, kh, sm_scale, ct, future)


def _torch_impl(q, k, v, group, W, causal=False, sm_scale=None):
    """Any device but CUDA: the unfused composition -- all-to-all to head-sharded (one
    collective), attention in fp32 (fp64 for fp64 inputs), all-to-all back; ``lse`` stays
    head-sharded, as the fused kernel leaves it."""
    ct = compute_dtype(q)
    qh, kh, vh = to_heads([q, k, v], group, W)
    s, G, _ = _scores(qh, kh, causal, sm_scale, ct)
    o, lse = attend(s, vh, G, ct)
    return to_sequence([o.to(q.dtype)], group, W)[0], lse.to(torch.float32)


def _torch_cuda(q, k, v, comm, causal=False, sm_scale=None):
    return ulysses_attention(q, k, v, comm, causal=causal, sm_scale=sm_scale, return_lse=True)


def _torch_fake(q, k, v, W, causal=False, sm_scale=None):
    B, Hq, Sl, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((B, Hq // W, Sl * W), dtype=torch.float32)


def _torch_model(q, k, v, group_name, causal=False, sm_scale=None):
    """Ulysses attention of this rank's sequence block (``[B, H, S/W, D]``, contiguous blocks
    in rank order; heads divisible by W) over the whole sequence; returns ``o``. ``group``: a
    group name, a torch process group, a Communicator or None (the default group)."""
    return torch.ops.syncopate.ulysses_attention(q, k, v, group_name, causal, sm_scale)[0]


def _bwd_check(q, k, v, W, o, lse, do, causal=False, sm_scale=None, dlse=None):
    _torch_check(q, k, v, W, causal, sm_scale)
    try:
        _check_backward(q, o, lse, do, dlse, W)
    except LaunchError as e:
        raise TorchOpError(str(e)) from None


def _bwd_impl(q, k, v, group, W, o, lse, do, causal=False, sm_scale=None, dlse=None):
    """Any device but CUDA: Q, K, V, O, dO all-to-all'd to head-sharded (one collective), the
    FlashAttention-2 recurrences in fp32 (P from the forward's lse), dQ, dK, dV all-to-all'd
    back (one collective)."""
    ct = compute_dtype(q)
    qh, kh, vh, oh, doh = to_heads([q, k, v, o, do], group, W)
    s, G, scale = _scores(qh, kh, causal, sm_scale, ct)
    dq, dk, dv = attention_grads(s, G, scale, lse, qh, kh, vh, oh, doh, dlse, ct)
    B, h, S, D = qh.shape

    def per_kv_head(t):  # [B, h, S, D] per query head -> summed over each KV head's group
        return t.view(B, h // G, G, S, D).sum(2)
    return tuple(to_sequence([t.to(q.dtype) for t in (dq, per_kv_head(dk), per_kv_head(dv))],
                             group, W))


def _bwd_cuda(q, k, v, comm, o, lse, do, causal=False, sm_scale=None, dlse=None):
    return ulysses_attention_backward(q, k, v, o, lse, do, comm, causal=causal,
                                      sm_scale=sm_scale, dlse=dlse)


TORCH = attention_torch_op("ulysses_attention", check=_torch_check, impl=_torch_impl,
                           cuda=_torch_cuda, fake=_torch_fake, model=_torch_model,
                           bwd_check=_bwd_check, bwd_impl=_bwd_impl, bwd_cuda=_bwd_cuda)


def _candidates(spec, cal, s, W, dtype, cublas, blocked):
    """The fused kernel (its comm programs holding their SMs for the whole kernel) against the
    unfused path (NCCL all-to-alls + the attention), both by the Ulysses cost model of
    :mod:`syncopate.schedule.ulysses_cost` less the layer's projections."""
    eb = element_bytes(dtype)

    def costs(s, W):
        try:
            return ulysses_costs(s["batch"], s["q_heads"], s["kv_heads"], s["seq"],
                                 s["head_dim"], W, bool(s["causal"]), elem_bytes=eb,
                                 gpu=cal.gpu)
        except ScheduleError as e:
            raise LaunchError(str(e)) from None

    def fused_sm(s, W):
        c = costs(s, W)
        return (c.fused_default_s - c.qkv_proj_s - c.out_proj_s,
                f"ulysses cost model, {OP_DEFAULT_PROGRAMS} comm programs holding their SMs")

    def unfused(s, W):
        c = costs(s, W)
        return (c.serial_s - c.qkv_proj_s - c.out_proj_s,
                "NCCL all-to-alls + attention (ulysses cost model)")
    return [Cand("fused sm", "sm", "fused", fused_sm, choice.host_keys(spec, "sm"),
                 backend="sm", plan=(1, OP_DEFAULT_PROGRAMS)),
            Cand("unfused (NCCL + triton)", "unfused:triton", "unfused", unfused,
                 (("nccl",),) * 4 + (("local:triton",),), local="triton")]


SPEC = OpSpec(
    name="ulysses_attention", fn=ulysses_attention, shape=SHAPE, variants=("sm",),
    candidates=_candidates, local_candidates=local_candidates,
    explain_shape="S,Hq,Hkv,D (e.g. 32768,32,8,128)",
    explain=functools.partial(explain_shape, whole_heads=True), flags=("causal",),
    bench_rows=("ulysses",), fit=fit, torch=TORCH)

__all__ = ["SPEC", "check_plan", "to_heads", "to_sequence", "ulysses_attention",
           "ulysses_attention_backward", "ulysses_attention_reference", "ulysses_buffers",
           "ulysses_fused_kernel"]
