"""Ring attention: sequence-parallel attention with K/V gathered inside the attention kernel.

``o, lse = ring_attention(q, k, v, comm, causal=...)``: the sequence is sharded across the W
ranks; each rank holds its shard of Q, K and V (``[B, H, S/W, D]``) and gets attention of its
queries over the **whole** sequence's keys.  Built from parts, no hand-written fused kernel:

* the local kernel -- :func:`syncopate.kernels.attention.attn_fwd_kernel` (non-causal) or the
  zigzag-layout causal kernel :func:`syncopate.kernels.attention_zigzag.attn_zigzag_fwd_kernel`;
* the schedule -- :func:`syncopate.schedule.kv_gather.kv_all_gather` of K and V along the
  sequence (``order='swizzle'``: every block from its owner; ``'ring'``: neighbour hops);
* :func:`syncopate.fuse` with ``reorder_reductions=True``: a wait on each block's chunk inside
  the KV loop.  Non-causal: the inner-loop remap makes every program's KV loop visit its rank's
  own blocks first and the others in arrival order; the softmax's reductions then run in
  another order than the unfused kernel's (results agree to rounding, not bitwise).  Causal:
  the zigzag kernel pairs mirrored query blocks and visits its own shard first and the others
  in arrival order by itself (``DESCENDING`` for ``order='ring'``, :func:`descending`); the
  remap does not apply to its loops, so fused and unfused agree bit for bit.

Layout (the op's contract)
  * K/V live in symmetric buffers ``[B * Hkv, S, D]`` (one per configuration and shape); each
    call copies this rank's ``k``/``v`` shards into its rows (after the peers finished reading
    the previous call's: ``before_staging``).
  * ``causal=False``: contiguous shards, rank ``r`` holds tokens ``[r S/W, (r+1) S/W)``.
  * ``causal=True``: the **zigzag** layout (ring-flash-attention / Megatron context
    parallelism): the sequence is cut into ``2W`` segments and rank ``r`` holds segments ``r``
    and ``2W-1-r``, concatenated, for Q, K and V alike, so every rank has the same causal work.
    :func:`syncopate.kernels.attention_zigzag.zigzag_shard` cuts a full tensor that way and
    :func:`~syncopate.kernels.attention_zigzag.zigzag_unorder` undoes a gather of the outputs.
    The segment length ``S / (2W)`` must be a multiple of the kernel's blocks.
  * Returns ``(o, lse)`` for this rank's queries: ``o`` ``[B, Hq, S/W, D]``, ``lse``
    ``[B, Hq, S/W]`` fp32, natural log (as the local kernel).

``fused=False`` (or ``SYNCOPATE=0``) takes the unfused path: NCCL all-gather of K and V, then the
same local kernel (:func:`ring_attention_reference`).

Backward: :func:`ring_attention_backward` (K/V gathered again, dK/dV partials reduce-scattered
to their owners; :mod:`.ring_attention_bwd`). ``torch.ops.syncopate.ring_attention(q, k, v,
group_name, causal, sm_scale) -> (o, lse)`` is the op with autograd, its backward the companion
``torch.ops.syncopate.ring_attention_backward``; ``syncopate.torch_ops.ring_attention(q, k, v,
group, causal=...)`` returns ``o``.
"""

from __future__ import annotations

import math

import torch

from .. import backends
from ..dtypes import canonical, element_bytes
from ..errors import LaunchError, TorchOpError
from ..kernels.attention import (LOG2E, AttentionConfig, attention, attn_fwd_kernel, check_operands,
                                 outputs)
from ..kernels.attention_zigzag import (attention_zigzag, attn_zigzag_fwd_kernel, check_zigzag,
                                        default_config)
from ..runtime import collectives
from ..schedule.attention_cost import attention_time, choose_ring_plan
from ..schedule.kv_gather import kv_all_gather
from . import choice, driver
from . import ring_attention_bwd as bwd
from .spec import Cand, OpSpec, TorchOp

#: K/V strides and the sequence length are compiled in (``fuse(constant_args=...)``): the access
#: analysis needs them to place the K/V boxes, and the remap needs the KV loop's trip count
CONSTANT_ARGS = ("stride_kb", "stride_kh", "stride_kn", "stride_vb", "stride_vh", "stride_vn",
                 "SEQ_KV")


def _check(q, k, v, comm, causal: bool, cfg):
    """Shapes, dtypes, device and the layout's divisibilities; ``(B, Hq, Hkv, Sl, D, cfg)``."""
    B, Hq, Hkv, Sl, Skl, D = check_operands(q, k, v)
    if Skl != Sl:
        raise LaunchError(f"q has {Sl} tokens per rank but k/v {Skl}: ring attention shards "
                          f"one sequence; every rank holds the same number of tokens of each")
    driver.check_comm_device(comm, ("q", q), ("k", k), ("v", v))
    if cfg is None and causal:
        cfg = default_config(D)
    cfg = AttentionConfig.of(cfg, D).check(D)
    W = comm.world_size
    if causal:
        if Sl % 2:
            raise LaunchError(f"causal ring attention takes zigzag shards of two equal segments; "
                              f"{Sl} tokens per rank is odd: pad the sequence to a multiple of "
                              f"{2 * W}")
        check_zigzag(Sl, Sl * W, 2 * W, comm.rank * Sl, cfg)
    elif Sl % cfg.BLOCK_N:
        raise LaunchError(f"{Sl} tokens per rank is not a multiple of the kernel's KV block "
                          f"(BLOCK_N={cfg.BLOCK_N}): a block would straddle two ranks' chunks; "
                          f"pad the sequence to a multiple of {cfg.BLOCK_N * W} or pick a "
                          f"smaller BLOCK_N")
    return B, Hq, Hkv, Sl, D, cfg


def _kernel(causal: bool):
    return attn_zigzag_fwd_kernel if causal else attn_fwd_kernel


def descending(order: str) -> bool:
    """The zigzag kernel's ``DESCENDING``: visit the other ranks' shards in the order they
    arrive -- ``r+1, r+2, ...`` from an all-gather (``'swizzle'``), ``r-1, r-2, ...`` when
    blocks hop ``r -> r+1`` round the ring.  Both paths pass it, so they sum in one order."""
    return order == "ring"


def _args(q, kbuf, vbuf, o, lse, sm_scale, causal, rank, W, Hkv, D, cfg, order="swizzle"):
    """The local kernel's arguments in parameter order (constexprs included, so repeated calls
    take the FusedKernel's fast path), K/V the ``[B*Hkv, S, D]`` buffers seen as
    ``[B, Hkv, S, D]``; and the grid."""
    B, Hq, Sl, _ = q.shape
    S = Sl * W
    k4 = kbuf.view(B, Hkv, S, D)
    v4 = vbuf.view(B, Hkv, S, D)
    args = [q, kbuf, vbuf, o, lse, float(sm_scale) * LOG2E,
            q.stride(0), q.stride(1), q.stride(2), k4.stride(0), k4.stride(1), k4.stride(2),
            v4.stride(0), v4.stride(1), v4.stride(2), o.stride(0), o.stride(1), o.stride(2),
            Hq, Hq // Hkv, Sl, S]
    if causal:  # Q_OFFSET, SEGMENTS, HEAD_DIM, BLOCK_M, BLOCK_N, DESCENDING; a program per
        # mirrored pair of query blocks
        args += [rank * Sl, 2 * W, D, cfg.BLOCK_M, cfg.BLOCK_N, descending(order)]
        return args, (Sl // (2 * cfg.BLOCK_M), B * Hq)
    # HEAD_DIM, BLOCK_M, BLOCK_N, CAUSAL
    args += [D, cfg.BLOCK_M, cfg.BLOCK_N, False]
    return args, (math.ceil(Sl / cfg.BLOCK_M), B * Hq)


def kv_buffers(comm, B: int, Hkv: int, S: int, D: int, dtype):
    """The symmetric ``[B*Hkv, S, D]`` K and V buffers of this shape (allocated on first use, a
    collective)."""
    return tuple(driver.symmetric_buffer(comm, f"ring_attention.{name}", (B * Hkv, S, D), dtype)
                 for name in ("K", "V"))


def ring_attention_fused_kernel(comm, B: int, Hkv: int, S: int, D: int, dtype, *, causal=False,
                                order="swizzle", split=1, comm_programs=4, backend="sm",
                                cfg=None):
    """The (cached) FusedKernel the op launches; exposed for tests and the benchmark."""
    return driver.cached_fused(
        comm, ("ring_attention.fk", B, Hkv, S, D, str(dtype), bool(causal), order, split,
               comm_programs, backend, repr(cfg)), _kernel(causal),
        lambda: kv_all_gather((B * Hkv, S, D), canonical(dtype), comm.world_size,
                              dim=1, order=order, split=split),
        config=cfg, operand={"K": "K", "V": "V"}, backend=backend, comm_programs=comm_programs,
        defer_consumed_wait=True, reorder_reductions=True, constant_args=CONSTANT_ARGS)


def ring_attention_reference(q, k, v, comm, *, causal: bool = False, sm_scale=None,
                             config=None, order: str = "swizzle"):
    """The unfused path: NCCL all-gather of K and V, then the same local kernel (causal: visiting
    the shards in the fused kernel's ``order``, so both sum in one order)."""
    B, Hq, Hkv, Sl, D, cfg = _check(q, k, v, comm, causal, config)
    W = comm.world_size
    kg, vg = (bwd.gather_seq(t, comm.group, W) for t in (k, v))
    if causal:
        return attention_zigzag(q, kg, vg, 2 * W, comm.rank * Sl, sm_scale, cfg, fusable=True,
                                descending=descending(order))
    return attention(q, kg, vg, False, sm_scale, cfg, fusable=True)


def _fused_path(comm, q, dims, causal, fused, backend, comm_programs, explicit: bool,
                what: str, why: str):
    """``(backend, ring plan, comm programs)`` of a ring attention call (``what``) on checked
    ``(B, Hq, Hkv, Sl, D)`` that takes the fused path (``fused``, a fused-only option, else the
    decision, the same on every rank), else None; a backend without comm programs is refused
    (``why``: where the waits are)."""
    B, Hq, Hkv, Sl, D = dims
    W = comm.world_size
    explicit = explicit or backend is not None or comm_programs is not None
    if not (driver.use_fused(fused) and driver.choose(
            SPEC, comm, (B, Hq, Hkv, Sl * W, D, int(bool(causal))), q.dtype, fused=fused,
            explicit=explicit, named=True)[0]):
        return None
    backend = backend or "sm"
    if not backends.get(backend, LaunchError).has_comm_programs:
        raise LaunchError(f"{what} needs comm programs in the kernel (not backend {backend!r}): "
                          f"{why}")
    plan = choose_ring_plan(B, Hq, Hkv, Sl * W, D, W, causal, q.element_size(), comm_programs)
    return backend, plan, driver.loopback_comm_programs(comm, plan["comm_programs"],
                                                        comm_programs)


def ring_attention(q, k, v, comm, *, causal: bool = False, sm_scale=None, order: str = "swizzle",
                   split=None, comm_programs=None, backend: str | None = None, config=None,
                   out=None, fused=None):
    """Attention of this rank's queries over the whole sharded sequence; ``(o, lse)``.

    See the module docstring for the layout (contiguous shards, or zigzag shards when
    ``causal``).  ``order``: ``'swizzle'`` (all-gather order) or ``'ring'`` (neighbour hops).
    ``split`` and ``comm_programs`` come from
    :func:`syncopate.schedule.attention_cost.choose_ring_plan` unless given.  ``backend``:
    ``'sm'`` (comm programs in the kernel) or ``'nvshmem'``.  ``out``: optional preallocated
    contiguous ``(o, lse)``.  ``fused`` None: the op chooses the fused kernel or the unfused
    path (NCCL all-gather of K and V + the local kernel), the same on every rank
    (:func:`syncopate.ops.choice.decide_shape`); ``fused=True`` or any of ``backend``/
    ``split``/``comm_programs``: fused; ``fused=False`` (or ``SYNCOPATE=0``): unfused.
    """
    B, Hq, Hkv, Sl, D, cfg = _check(q, k, v, comm, causal, config)
    if comm.world_size == 1:
        # one rank holds the whole sequence (its zigzag shard is segments 0 and 1, in order):
        # the local kernel alone, no schedule, flags or buffers
        return attention(q, k, v, causal, sm_scale, config, out=out)
    path = _fused_path(comm, q, (B, Hq, Hkv, Sl, D), causal, fused, backend, comm_programs,
                       split is not None, "ring attention", "its waits are inside the KV loop "
                       "of every program, and the copy engine's side stream cannot be ordered "
                       "with them")
    if path is None:
        o, lse = ring_attention_reference(q, k, v, comm, causal=causal, sm_scale=sm_scale,
                                          config=config, order=order)
        if out is None:
            return o, lse
        out[0].copy_(o)
        out[1].copy_(lse)
        return out
    backend, plan, cp = path
    W, me = comm.world_size, comm.rank
    S = Sl * W
    sm_scale = 1.0 / math.sqrt(D) if sm_scale is None else sm_scale
    split = plan["split"] if split is None else int(split)
    o, lse = outputs(q, out, (B, Hq, Sl, D))
    kbuf, vbuf = kv_buffers(comm, B, Hkv, S, D, q.dtype)
    fk = ring_attention_fused_kernel(comm, B, Hkv, S, D, q.dtype, causal=causal, order=order,
                                     split=split, comm_programs=cp, backend=backend, cfg=cfg)
    fk.before_staging()
    for buf, t in ((kbuf, k), (vbuf, v)):
        buf.view(B, Hkv, S, D)[:, :, me * Sl:(me + 1) * Sl].copy_(t)
    if q.stride(-1) != 1:
        q = q.contiguous()
    args, grid = _args(q, kbuf, vbuf, o, lse, sm_scale, causal, me, W, Hkv, D, cfg, order)
    fk[grid](*args)
    return o, lse


def ring_attention_backward(q, k, v, o, lse, do, comm, *, causal: bool = False, sm_scale=None,
                            dlse=None, order: str = "swizzle", comm_programs=None,
                            backend: str | None = None, config=None, fused=None):
    """``(dq, dk, dv)`` of this rank's shards, from the forward's inputs, ``o`` and ``lse`` and
    the upstream gradient ``do`` (``dlse``: a gradient of ``lse``, if any); the layout is the
    forward's. K and V are gathered again, not kept from the forward (the memory of the whole
    sequence's K/V per layer); the fused path fuses the dK/dV kernel with that gather and the
    reduce-scatter of the fp32 partials to their owners, then runs the dQ kernel locally on the
    gathered buffers (:mod:`.ring_attention_bwd` says why). ``fused`` None: the path the
    forward's decision takes on this shape (the same on every rank); True or any of
    ``backend``/``comm_programs``: fused; False (or ``SYNCOPATE=0``): NCCL all-gather + the
    same kernels + NCCL reduce-scatter. ``config``: the backward kernels' (default
    :func:`~syncopate.kernels.attention_bwd.default_backward_config`)."""
    W = comm.world_size
    B, Hq, Hkv, Sl, D, cfg = bwd.check(q, k, v, o, lse, do, comm, causal, config)
    if W == 1:
        return bwd.world_size_one(q, k, v, o, lse, do, causal, sm_scale, dlse, config)
    path = _fused_path(comm, q, (B, Hq, Hkv, Sl, D), causal, fused, backend, comm_programs,
                       False, "the ring attention backward", "its waits are inside the "
                       "programs of the dK/dV kernel, which the copy engine's side stream "
                       "cannot order")
    if path is None:
        return bwd.ring_attention_backward_reference(q, k, v, o, lse, do, comm, causal=causal,
                                                     sm_scale=sm_scale, dlse=dlse,
                                                     config=config)
    backend, _, cp = path
    return bwd.fused_backward(q, k, v, o, lse, do, comm, causal=causal, sm_scale=sm_scale,
                              dlse=dlse, cfg=cfg, order=order, comm_programs=cp,
                              backend=backend)


# ------------------------------------------------------------------------------------------
# torch.ops.syncopate.ring_attention (and its backward)
# ------------------------------------------------------------------------------------------

def shard_positions(Sl: int, W: int, rank: int, causal: bool, device=None):
    """The original sequence positions of ``rank``'s ``Sl`` rows (``torch.long`` on
    ``device``): contiguous shards, or with ``causal`` the zigzag segments ``rank`` and
    ``2W-1-rank`` -- what RoPE and the causal mask of this layout see. Built on the device
    (no host-to-device copy: a model's forward stays capturable in a CUDA graph)."""
    if not causal:
        return torch.arange(rank * Sl, (rank + 1) * Sl, device=device)
    if Sl % 2:
        raise LaunchError(f"a zigzag shard is two equal segments; {Sl} rows per rank is odd")
    seg = Sl // 2
    a, b = rank, 2 * W - 1 - rank
    return torch.cat([torch.arange(a * seg, (a + 1) * seg, device=device),
                      torch.arange(b * seg, (b + 1) * seg, device=device)])


def attention_check(op: str, q, k, v, rows: str = "shard length"):
    """The checks of the attention torch ops' ``q, k, v`` (at trace time too): 4-D, one floating
    dtype, one device, ``k``/``v`` ``[B, Hkv, S/W, D]`` with q's batch, ``rows`` and head_dim,
    GQA heads (:class:`TorchOpError` saying what to change)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise TorchOpError(f"{op}: {name} must be 4-D [batch, heads, seq/W, "
                               f"head_dim], got shape {tuple(t.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or not q.dtype.is_floating_point:
        raise TorchOpError(f"{op}: q, k, v must share one floating dtype, got "
                           f"{q.dtype}, {k.dtype}, {v.dtype}: cast them (e.g. k.to(q.dtype))")
    if not (q.device == k.device == v.device):
        raise TorchOpError(f"{op}: q, k, v are on {q.device}, {k.device}, {v.device}: "
                           f"move them to one device")
    B, Hq, Sl, D = q.shape
    if tuple(k.shape) != tuple(v.shape) or k.shape[0] != B or k.shape[3] != D \
            or k.shape[2] != Sl:
        raise TorchOpError(f"{op}: k and v must be [B, Hkv, S/W, D] with q's batch, "
                           f"{rows} and head_dim {(B, Sl, D)}, got {tuple(k.shape)} and "
                           f"{tuple(v.shape)}")
    if k.shape[1] == 0 or Hq % k.shape[1]:
        raise TorchOpError(f"{op}: query heads ({Hq}) must be a multiple of KV heads "
                           f"({k.shape[1]})")


def _torch_check(q, k, v, W, causal=False, sm_scale=None):
    attention_check("ring_attention", q, k, v)
    if causal and q.shape[2] % 2:
        raise TorchOpError(f"ring_attention: causal shards are zigzag (two segments of S/(2W)); "
                           f"{q.shape[2]} rows per rank is odd: pad the sequence to a multiple of "
                           f"{2 * W}")


def compute_dtype(t):
    return torch.promote_types(t.dtype, torch.float32)


def scores(q, k, sm_scale, ct, future=None):
    """``(s, G, scale)``: the scaled scores of ``q`` against ``k`` (GQA: ``G`` query heads per
    KV head) in ``ct``, ``-inf`` where the mask ``future`` is set (the CPU compositions)."""
    G = q.shape[1] // k.shape[1]
    scale = 1.0 / math.sqrt(q.shape[3]) if sm_scale is None else float(sm_scale)
    s = (q.to(ct) @ k.to(ct).repeat_interleave(G, 1).transpose(-1, -2)) * scale
    return (s if future is None else s.masked_fill(future, float("-inf"))), G, scale


def _scores(q, kg, group, W, causal, sm_scale, ct):
    """:func:`scores` of this rank's queries against the gathered keys, masked in the zigzag
    layout's original positions when ``causal``."""
    future = None
    if causal:
        Sl = q.shape[2]
        qpos = shard_positions(Sl, W, collectives.get_rank(group), True, q.device)
        kpos = torch.cat([shard_positions(Sl, W, r, True, q.device) for r in range(W)])
        future = kpos[None, :] > qpos[:, None]
    return scores(q, kg, sm_scale, ct, future)


def attend(s, v, G: int, ct):
    """``(o, lse)`` of the scaled scores ``s`` over ``v`` (GQA: ``G`` query heads per KV head)
    in the compute dtype ``ct``: the attention torch ops' CPU compositions."""
    lse = torch.logsumexp(s, -1)
    return torch.exp(s - lse[..., None]) @ v.to(ct).repeat_interleave(G, 1), lse


def attention_grads(s, G: int, scale, lse, q, k, v, o, do, dlse, ct):
    """``(dq, dk, dv)`` per query head: the FlashAttention-2 recurrences in ``ct`` with P from
    the forward's ``lse`` (the attention torch ops' CPU backward; the caller sums dk, dv over
    each KV head's group and hands them to their owners)."""
    p = torch.exp(s - lse.to(ct)[..., None])
    dof = do.to(ct)
    delta = (o.to(ct) * dof).sum(-1)
    if dlse is not None:
        delta = delta - dlse.to(ct)
    ds = p * (dof @ v.to(ct).repeat_interleave(G, 1).transpose(-1, -2) - delta[..., None])
    dq = scale * (ds @ k.to(ct).repeat_interleave(G, 1))
    return dq, scale * (ds.transpose(-1, -2) @ q.to(ct)), p.transpose(-1, -2) @ dof


def _torch_impl(q, k, v, group, W, causal=False, sm_scale=None):
    """Any device but CUDA: the unfused composition -- K/V all-gathered through the group's
    collectives, attention in fp32 (fp64 for fp64 inputs)."""
    ct = compute_dtype(q)
    kg, vg = (bwd.gather_seq(t, group, W).to(ct) for t in (k, v))
    s, G, _ = _scores(q, kg, group, W, causal, sm_scale, ct)
    o, lse = attend(s, vg, G, ct)
    return o.to(q.dtype), lse.to(torch.float32)


def _torch_cuda(q, k, v, comm, causal=False, sm_scale=None):
    return ring_attention(q, k, v, comm, causal=causal, sm_scale=sm_scale)


def _torch_fake(q, k, v, W, causal=False, sm_scale=None):
    return q.new_empty(q.shape), q.new_empty(q.shape[:3], dtype=torch.float32)


def attention_setup(ctx, inputs, output):
    q, k, v, group_name = inputs[:4]
    ctx.group_name = group_name
    ctx.causal = bool(inputs[4]) if len(inputs) > 4 else False
    ctx.sm_scale = inputs[5] if len(inputs) > 5 else None
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.set_materialize_grads(False)  # no gradient into lse (the usual case): none passed on


def attention_torch_op(name: str, *, check, impl, cuda, fake, model, bwd_check, bwd_impl,
                       bwd_cuda) -> TorchOp:
    """``torch.ops.syncopate.<name>`` of an attention op, ``(o, lse)`` of ``q, k, v``, with
    its backward as the companion op ``<name>_backward`` -- one node of a traced backward
    graph, which the autograd formula calls."""

    def backward(ctx, do, dlse):
        q, k, v, o, lse = ctx.saved_tensors
        if do is None and dlse is None:
            return None, None, None, None, None, None
        if do is None:
            do = torch.zeros_like(o)
        dq, dk, dv = getattr(torch.ops.syncopate, f"{name}_backward")(
            q, k, v, ctx.group_name, o, lse, do, ctx.causal, ctx.sm_scale, dlse)
        return dq, dk, dv, None, None, None

    def bwd_fake(q, k, v, W, o, lse, do, causal=False, sm_scale=None, dlse=None):
        return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)

    return TorchOp(
        schema="(Tensor q, Tensor k, Tensor v, str group_name, bool causal=False, "
               "float? sm_scale=None) -> (Tensor, Tensor)",
        check=check, impl=impl, cuda=cuda, fake=fake, model=model, setup=attention_setup,
        backward=backward, tensors=3,
        companions=(("backward", TorchOp(
            schema="(Tensor q, Tensor k, Tensor v, str group_name, Tensor o, Tensor lse, "
                   "Tensor do, bool causal=False, float? sm_scale=None, Tensor? dlse=None) "
                   "-> (Tensor, Tensor, Tensor)",
            check=bwd_check, impl=bwd_impl, cuda=bwd_cuda, fake=bwd_fake, tensors=3)),))


def _torch_model(q, k, v, group_name, causal=False, sm_scale=None):
    """Ring attention of this rank's sequence shard (``[B, H, S/W, D]``; causal: the zigzag
    layout, :func:`shard_positions`) over the whole sequence; returns ``o``. ``group``: a
    group name, a torch process group, a Communicator or None (the default group)."""
    return torch.ops.syncopate.ring_attention(q, k, v, group_name, causal, sm_scale)[0]


def _bwd_check(q, k, v, W, o, lse, do, causal=False, sm_scale=None, dlse=None):
    _torch_check(q, k, v, W, causal, sm_scale)
    for name, t in (("o", o), ("do", do)):
        if tuple(t.shape) != tuple(q.shape) or t.dtype != q.dtype:
            raise TorchOpError(f"ring_attention_backward: {name} must be like q "
                               f"({q.dtype} {tuple(q.shape)}), got {t.dtype} {tuple(t.shape)}")
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is not None and (tuple(t.shape) != tuple(q.shape[:3]) or t.dtype != torch.float32):
            raise TorchOpError(f"ring_attention_backward: {name} must be fp32 "
                               f"{tuple(q.shape[:3])}, got {t.dtype} {tuple(t.shape)}")


def _bwd_impl(q, k, v, group, W, o, lse, do, causal=False, sm_scale=None, dlse=None):
    """Any device but CUDA: K/V gathered again, the FlashAttention-2 recurrences in fp32 (P from
    the forward's lse), dK/dV partials of the whole sequence reduce-scattered to their owners."""
    ct = compute_dtype(q)
    B, Hq, Sl, D = q.shape
    Hkv = k.shape[1]
    kg, vg = (bwd.gather_seq(t, group, W).to(ct) for t in (k, v))
    s, G, scale = _scores(q, kg, group, W, causal, sm_scale, ct)
    dq, dk, dv = attention_grads(s, G, scale, lse, q, kg, vg, o, do, dlse, ct)
    S = Sl * W

    def owners(full):  # [B, Hq, S, D] partials -> this rank's [B, Hkv, Sl, D] sums
        return bwd.scatter_seq(full.view(B, Hkv, G, S, D).sum(2), group, W, B, Hkv, Sl, D)
    return dq.to(q.dtype), owners(dk).to(k.dtype), owners(dv).to(v.dtype)


def _bwd_cuda(q, k, v, comm, o, lse, do, causal=False, sm_scale=None, dlse=None):
    return ring_attention_backward(q, k, v, o, lse, do, comm, causal=causal, sm_scale=sm_scale,
                                   dlse=dlse)


TORCH = attention_torch_op("ring_attention", check=_torch_check, impl=_torch_impl,
                           cuda=_torch_cuda, fake=_torch_fake, model=_torch_model,
                           bwd_check=_bwd_check, bwd_impl=_bwd_impl, bwd_cuda=_bwd_cuda)


def _shape(dims, W: int) -> tuple:
    B, Hq, Hkv, S, D, causal = (dims[x] for x in ("batch", "q_heads", "kv_heads", "seq",
                                                  "head_dim", "causal"))
    return B, Hq, Hkv, S, D, bool(causal)


def _candidates(spec, cal, s, W, dtype, cublas, blocked):
    """The fused kernel by the ring cost model (:func:`~syncopate.schedule.attention_cost.
    choose_ring_plan`), against the unfused path: NCCL all-gathers of K and V, then the
    attention at the measured TF/s."""
    eb = element_bytes(dtype)

    def fused_sm(s, W):
        p = choose_ring_plan(*_shape(s, W)[:5], W, _shape(s, W)[5], eb)
        return p["fused_s"], "ring cost model (attention_cost.choose_ring_plan)"

    def unfused(s, W):
        B, Hq, Hkv, S, D, causal = _shape(s, W)
        kv = choice.collective_s(cal, "all_gather", B * Hkv * S * D * eb, W)
        return choice.add(kv, kv, (attention_time(B, Hq, S // W, S, D, causal),
                                   "attention at the measured TF/s"))
    p = choose_ring_plan(*_shape(s, W)[:5], W, _shape(s, W)[5], eb)
    return [Cand("fused sm", "sm", "fused", fused_sm, choice.host_keys(spec, "sm"),
                 backend="sm", plan=(p["split"], p["comm_programs"])),
            Cand("unfused (NCCL + triton)", "unfused:triton", "unfused", unfused,
                 (("nccl",), ("nccl",), ("local:triton",)), local="triton")]


def local_candidates(spec, cal, s, dtype, cublas):
    """World size 1: the attention kernel alone, at the measured TF/s."""
    def attn(s, W):
        B, Hq, Hkv, S, D, causal = _shape(s, W)
        return attention_time(B, Hq, S, S, D, causal), "attention at the measured TF/s"
    return [Cand("local triton", "local:triton", "local", attn, (("local:triton",),),
                 local="triton")]


def explain_shape(op, dims, W, batch=1, causal=False, whole_heads=False):
    """The decision shape of the global ``S, Hq, Hkv, D`` (``S`` the whole sequence);
    ``whole_heads``: every rank attends with whole KV heads (Ulysses)."""
    S, Hq, Hkv, D = dims
    if not Hkv or S % W or Hq % Hkv or (whole_heads and Hkv % W):
        raise LaunchError(f"{op} needs S ({S}) divisible by the world size ({W}), Hq ({Hq}) "
                          f"a multiple of Hkv ({Hkv})"
                          + (f" and Hkv divisible by {W}" if whole_heads else ""))
    return (batch, Hq, Hkv, S, D, int(bool(causal)))


def fit(r, w):
    """A ``ring_attn`` / ``ulysses`` bench row: ``fused`` measures the op's fused kernel,
    ``serial`` its unfused path."""
    s = {"batch": int(r.get("B", 1)), "q_heads": int(r["Hq"]), "kv_heads": int(r["Hkv"]),
         "seq": int(r["S"]), "head_dim": int(r["D"]), "causal": int(bool(r["causal"]))}
    return (s, f" S={r['S']} Hq={r['Hq']} Hkv={r['Hkv']} D={r['D']} causal={r['causal']} W={w}",
            (("sm", "fused"), ("unfused:triton", "serial")))


#: the decision shape of the attention ops
SHAPE = ("batch", "q_heads", "kv_heads", "seq", "head_dim", "causal")

SPEC = OpSpec(
    name="ring_attention", fn=ring_attention, shape=SHAPE, variants=("sm",),
    candidates=_candidates, local_candidates=local_candidates,
    explain_shape="S,Hq,Hkv,D (e.g. 32768,32,8,128)", explain=explain_shape,
    flags=("causal",), bench_rows=("ring_attn",), fit=fit, torch=TORCH)

__all__ = ["CONSTANT_ARGS", "SPEC", "kv_buffers", "ring_attention", "ring_attention_backward",
           "ring_attention_fused_kernel", "ring_attention_reference", "shard_positions"]
