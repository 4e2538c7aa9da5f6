"""The backward of ring attention: context-parallel dQ, dK, dV, fused by the compiler
(docs/attention.md, "The backward": both paths, the config, the kernels' loops).

The pieces of :func:`syncopate.ops.ring_attention_backward` (which lives with the forward, in
:mod:`.ring_attention`, and chooses among them). Fused path (W > 1), built from parts as the
forward is:

1. ``delta = rowsum(dO * O)`` (local; minus the gradient of ``lse`` when one flows in);
2. :func:`~syncopate.kernels.attention_bwd.attn_bwd_dkdv_kernel` fused with
   :func:`~syncopate.schedule.kv_gather.kv_backward`: K and V all-gathered into the rank's
   symmetric ``[B*Hkv, S, D]`` buffers inside the kernel, and every rank's fp32 partial dK/dV
   of the *whole* sequence reduce-scattered to the blocks' owners by the comm programs, after
   the gathers;
3. :func:`~syncopate.kernels.attention_bwd.attn_bwd_dq_kernel`, **local**, on the gathered
   buffers the fused kernel left behind.

Why K/V are gathered again, not kept from the forward: keeping them would hold W times a
shard's activation memory per layer, the memory context parallelism exists to avoid. Why dQ is
not fused with a second gather: step 2 already brought every K/V block into this rank's
buffers, and a fused dQ would move the same bytes over the links a second time.

Unfused path (``fused=False``, ``SYNCOPATE=0`` or the op's choice): NCCL all-gather of K and V,
the same two kernels with the same config, NCCL reduce-scatter of the fp32 partials. Its dQ is
bitwise the fused path's; its dK/dV agree to the fp32 sum's rounding (the reduction order
differs for W > 2). World size 1: :func:`syncopate.kernels.attention_backward`.

The layout is the forward's (:mod:`.ring_attention`): contiguous or zigzag shards; the gathered
buffers are in rank order, which the kernels read as a zigzag-stored sequence (``SEGMENTS =
2W``, ``Q_OFFSET = r * S/W``). :func:`bwd_args` is the kernels' argument list in parameter
order, the one the op launches and the CPU emulator test
(tests/test_emulate_attention_backward.py) emulates.
"""

from __future__ import annotations

import math

import torch

from ..dtypes import canonical
from ..errors import LaunchError
from ..kernels.attention import LOG2E, AttentionConfig, check_operands
from ..kernels.attention_bwd import (attention_backward, attn_bwd_dkdv_kernel, attn_bwd_dq_kernel,
                                     default_backward_config, tiles)
from ..schedule.kv_gather import kv_backward
from . import driver

#: compiled in (``fuse(constant_args=...)``): the K/V and dK/dV boxes need the strides, the
#: programs' KV block the sequence length, the zigzag position map its segment length
CONSTANT_ARGS = ("stride_kb", "stride_kh", "stride_kn", "stride_vb", "stride_vh", "stride_vn",
                 "stride_dkb", "stride_dkh", "stride_dkn", "stride_dvb", "stride_dvh",
                 "stride_dvn", "SEQ_KV", "SEG_LEN")
#: the dK/dV kernel's parameters the schedule's tensors are bound to
OPERANDS = {"K": "K", "V": "V", "DK": "DK", "DV": "DV"}


def bwd_args(which: str, q, kbuf, vbuf, do, lse, delta, outs, sm_scale, causal: bool, rank: int,
             W: int, Hkv: int, D: int, cfg):
    """``(args, grid)`` of ``which`` (``"dkdv"``: outs ``(dk, dv)`` ``[B*Hkv, S, D]``;
    ``"dq"``: outs ``(dq,)`` ``[B, Hq, Sl, D]``): the backward kernel's arguments in parameter
    order (constexprs in position, so repeated fused calls take the fast path; the tiles of
    ``which`` under ``cfg``: :func:`~syncopate.kernels.attention_bwd.tiles`), K/V the
    ``[B*Hkv, S, D]`` gathered buffers in rank order seen as ``[B, Hkv, S, D]``."""
    B, Hq, Sl, _ = q.shape
    S = Sl * W
    # causal over several ranks: the zigzag layout; one rank holds the sequence in order (a
    # length that need not split into two whole-block segments)
    zigzag = causal and W > 1
    k4, v4 = kbuf.view(B, Hkv, S, D), vbuf.view(B, Hkv, S, D)
    if which == "dkdv":
        out_strides = []
        for t in outs:
            t4 = t.view(B, Hkv, S, D)
            out_strides += [t4.stride(0), t4.stride(1), t4.stride(2)]
        grid = (math.ceil(S / cfg.BLOCK_N), B * Hkv)
    elif which == "dq":
        (dq,) = outs
        out_strides = [dq.stride(0), dq.stride(1), dq.stride(2)]
        grid = (math.ceil(Sl / tiles("dq", cfg)[0]), B * Hq)
    else:
        raise LaunchError(f"bwd_args: which={which!r}; 'dkdv' or 'dq'")
    args = [q, kbuf, vbuf, do, lse, delta, *outs, float(sm_scale) * LOG2E, float(sm_scale),
            q.stride(0), q.stride(1), q.stride(2), k4.stride(0), k4.stride(1), k4.stride(2),
            v4.stride(0), v4.stride(1), v4.stride(2), do.stride(0), do.stride(1), do.stride(2),
            *out_strides, Hq, Hq // Hkv, Sl, S, rank * Sl if zigzag else 0,
            S // (2 * W) if zigzag else 1, D, *tiles(which, cfg), bool(causal),
            2 * W if zigzag else 0]
    return args, grid


def kernel(which: str):
    """The fusable backward kernel of ``which`` (``"dkdv"`` or ``"dq"``)."""
    return attn_bwd_dkdv_kernel if which == "dkdv" else attn_bwd_dq_kernel


def check(q, k, v, o, lse, do, comm, causal: bool, config):
    """The forward's checks (:func:`syncopate.ops.ring_attention`'s layout) and the backward's
    own: ``o``/``do`` like ``q``, ``lse`` fp32 ``[B, Hq, S/W]``; the zigzag segments (causal) or
    the shard (not) whole blocks of the backward config. ``(B, Hq, Hkv, Sl, D, cfg)``."""
    B, Hq, Hkv, Sl, Skl, D = check_operands(q, k, v)
    if Skl != Sl:
        raise LaunchError(f"q has {Sl} tokens per rank but k/v {Skl}: ring attention shards "
                          f"one sequence; every rank holds the same number of tokens of each")
    for name, t in (("o", o), ("do", do)):
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(q.shape) \
                or t.dtype != q.dtype:
            raise LaunchError(f"{name} must be a {q.dtype} tensor of q's shape {tuple(q.shape)}, "
                              f"got {getattr(t, 'dtype', None)} {tuple(getattr(t, 'shape', ()))}")
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != (B, Hq, Sl) \
            or lse.dtype != torch.float32:
        raise LaunchError(f"lse must be the forward's fp32 [B, Hq, S/W] = {(B, Hq, Sl)} tensor")
    driver.check_comm_device(comm, ("q", q), ("k", k), ("v", v), ("do", do))
    cfg = AttentionConfig.of(config if config is not None else default_backward_config(D),
                             D).check(D, fusable=True)
    W = comm.world_size
    if W > 1:
        if causal:
            seg = Sl // 2
            if Sl % 2 or seg % cfg.BLOCK_M or seg % cfg.BLOCK_N:
                raise LaunchError(f"the causal ring attention backward takes zigzag shards of two "
                                  f"segments that are whole blocks of its kernels "
                                  f"(BLOCK_M={cfg.BLOCK_M}, BLOCK_N={cfg.BLOCK_N}); {Sl} tokens "
                                  f"per rank are not: pad the sequence to a multiple of "
                                  f"{2 * W * max(cfg.BLOCK_M, cfg.BLOCK_N)}")
        elif Sl % cfg.BLOCK_N:
            raise LaunchError(f"{Sl} tokens per rank is not a multiple of the backward's KV block "
                              f"(BLOCK_N={cfg.BLOCK_N}): a block would straddle two ranks' "
                              f"chunks; pad the sequence to a multiple of {cfg.BLOCK_N * W}")
    return B, Hq, Hkv, Sl, D, cfg


def _delta(o, do, dlse):
    """``rowsum(dO * O)`` (fp32 ``[B, Hq, Sl]``), minus ``dlse`` when a gradient flows into the
    forward's lse: ``d lse / d s = P``, so it adds ``P * dlse`` to ``dS = P * (dP - delta)``.

    torch's kernels rather than :func:`~syncopate.kernels.attention_bwd.attn_bwd_preprocess`:
    they are loaded with the CUDA context, while a Triton kernel's module loads at its first
    launch -- which in loopback may wait for a peer's spinning fused kernel (docs/loopback.md,
    "Module loading"); the backward runs right after the forward's fused launches."""
    delta = (o.float() * do.float()).sum(-1)
    if dlse is not None:
        delta -= dlse.float()
    return delta


def _inputs(q, o, do, lse, dlse, sm_scale):
    """``(scale, q, o, do, lse, delta)`` as the kernels take them (unit inner strides)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if sm_scale is None else float(sm_scale)
    q, o, do = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, o, do))
    return scale, q, o, do, lse.contiguous(), _delta(o, do, dlse)


def _local_kernels(q, kbuf, vbuf, do, lse, delta, dk, dv, scale, causal, rank, W, Hkv, D, cfg):
    """``dq`` (new), ``dk`` and ``dv`` by both kernels alone: the unfused path, world size 1."""
    dq = torch.empty_like(q)
    for which, outs in (("dkdv", (dk, dv)), ("dq", (dq,))):
        args, grid = bwd_args(which, q, kbuf, vbuf, do, lse, delta, outs, scale, causal, rank,
                              W, Hkv, D, cfg)
        _launch_local(which, args, grid, cfg)
    return dq


def backward_schedule(B: int, Hkv: int, S: int, D: int, dtype, W: int, order: str = "swizzle"):
    """The fused dK/dV kernel's schedule: :func:`~syncopate.schedule.kv_gather.kv_backward` of
    the ``[B*Hkv, S, D]`` K/V (``dtype``) and the fp32 dK/dV partials, along the sequence."""
    return kv_backward((B * Hkv, S, D), canonical(dtype), "fp32", W, dim=1,
                       order=order)


def dkdv_fused_kernel(comm, B: int, Hkv: int, S: int, D: int, dtype, *, causal: bool,
                      order: str = "swizzle", comm_programs: int = 4, backend: str = "sm",
                      cfg=None):
    """The (cached) FusedKernel of step 2: the dK/dV kernel with ``kv_backward``."""
    return driver.cached_fused(
        comm, ("ring_attention_bwd.fk", B, Hkv, S, D, str(dtype), bool(causal), order,
               comm_programs, backend, repr(cfg)), kernel("dkdv"),
        lambda: backward_schedule(B, Hkv, S, D, dtype, comm.world_size, order), config=cfg,
        operand=OPERANDS, backend=backend, comm_programs=comm_programs,
        defer_consumed_wait=True, constant_args=CONSTANT_ARGS)


def _launch_local(which, args, grid, cfg):
    kernel(which)[grid](*args, **cfg.options())


def _preload(comm, which, args, grid, cfg) -> None:
    """Compile and load the local ``which`` kernel of this call's layout (once per
    communicator and layout) before the fused kernel that precedes it is launched: loading a
    module after it, while the fused kernel spins for a peer, may wait for that spin in
    loopback (docs/loopback.md, "Module loading")."""
    key = ("ring_attention_bwd.loaded", which, tuple(a.shape if hasattr(a, "shape") else a
                                                      for a in args), repr(cfg))
    if key in comm.cache:
        return
    k = kernel(which).warmup(*args, grid=grid, **cfg.options())
    k = k.result() if hasattr(k, "result") else k
    k._init_handles()
    comm.cache[key] = True


def gather_seq(t, group, W):
    """``[B, H, Sl, D]`` shards -> the whole ``[B, H, W*Sl, D]`` sequence in rank order."""
    B, H, Sl, D = t.shape
    g = driver.all_gather_rows(t[None], group, W)  # [W, B, H, Sl, D]
    return g.permute(1, 2, 0, 3, 4).reshape(B, H, W * Sl, D)


def scatter_seq(t, group, W, B, H, Sl, D):
    """The sum over ranks of ``[B*H, W*Sl, D]`` partials, this rank's ``[B, H, Sl, D]`` rows."""
    parts = t.view(B, H, W, Sl, D).permute(2, 0, 1, 3, 4).contiguous()
    return driver.reduce_scatter_rows(parts, group, W)[0]


def ring_attention_backward_reference(q, k, v, o, lse, do, comm, *, causal: bool = False,
                                      sm_scale=None, dlse=None, config=None):
    """The unfused path: NCCL all-gather of K and V, the fusable backward kernels on the
    gathered sequence (fp32 dK/dV partials), NCCL reduce-scatter of the partials."""
    B, Hq, Hkv, Sl, D, cfg = check(q, k, v, o, lse, do, comm, causal, config)
    W, me = comm.world_size, comm.rank
    S = Sl * W
    scale, q, o, do, lse, delta = _inputs(q, o, do, lse, dlse, sm_scale)
    kbuf, vbuf = (gather_seq(t, comm.group, W).view(B * Hkv, S, D) for t in (k, v))
    dk = torch.empty((B * Hkv, S, D), dtype=torch.float32, device=q.device)
    dv = torch.empty_like(dk)
    dq = _local_kernels(q, kbuf, vbuf, do, lse, delta, dk, dv, scale, causal, me, W, Hkv, D, cfg)
    return (dq, *(scatter_seq(t, comm.group, W, B, Hkv, Sl, D).to(k.dtype) for t in (dk, dv)))


def world_size_one(q, k, v, o, lse, do, causal, sm_scale, dlse, config):
    """One rank holds the whole sequence: the local backward (the fast kernels), or with a
    gradient into lse the fusable kernels with ``delta - dlse``."""
    if dlse is None:
        return attention_backward(q, k, v, o, lse, do, causal, sm_scale, config,
                                  fusable=config is not None)
    B, Hq, Sl, D = q.shape
    Hkv = k.shape[1]
    cfg = AttentionConfig.of(config if config is not None else default_backward_config(D),
                             D).check(D, fusable=True)
    scale, q, o, do, lse, delta = _inputs(q, o, do, lse, dlse, sm_scale)
    kbuf, vbuf = (t.reshape(B * Hkv, Sl, D).contiguous() for t in (k, v))
    dk, dv = torch.empty_like(kbuf), torch.empty_like(vbuf)
    dq = _local_kernels(q, kbuf, vbuf, do, lse, delta, dk, dv, scale, causal, 0, 1, Hkv, D, cfg)
    return dq, dk.view(k.shape), dv.view(v.shape)


def fused_backward(q, k, v, o, lse, do, comm, *, causal: bool, sm_scale, dlse, cfg,
                   order: str, comm_programs: int, backend: str):
    """The fused path (module docstring, steps 1-3) of checked operands; ``(dq, dk, dv)``."""
    B, Hq, Sl, D = q.shape
    Hkv = k.shape[1]
    W, me = comm.world_size, comm.rank
    S = Sl * W
    scale, q, o, do, lse, delta = _inputs(q, o, do, lse, dlse, sm_scale)
    # the gathered K, V (the inputs' dtype) and the fp32 partial dK, dV: separate from the
    # forward's buffers, as each fused kernel's handshake protects its own
    kbuf, vbuf, dkbuf, dvbuf = (
        driver.symmetric_buffer(comm, f"ring_attention_bwd.{n}", (B * Hkv, S, D), dt)
        for n, dt in (("K", q.dtype), ("V", q.dtype), ("DK", torch.float32),
                      ("DV", torch.float32)))
    fk = dkdv_fused_kernel(comm, B, Hkv, S, D, q.dtype, causal=causal, order=order,
                           comm_programs=comm_programs, backend=backend, cfg=cfg)
    dq = torch.empty_like(q)
    dq_args, dq_grid = bwd_args("dq", q, kbuf, vbuf, do, lse, delta, (dq,), scale, causal, me, W,
                                Hkv, D, cfg)
    _preload(comm, "dq", dq_args, dq_grid, cfg)
    fk.before_staging()
    for buf, t in ((kbuf, k), (vbuf, v)):
        buf.view(B, Hkv, S, D)[:, :, me * Sl:(me + 1) * Sl].copy_(t)
    args, grid = bwd_args("dkdv", q, kbuf, vbuf, do, lse, delta, (dkbuf, dvbuf), scale, causal,
                          me, W, Hkv, D, cfg)
    fk[grid](*args)
    # the rank pulled every block into kbuf/vbuf: dQ reads them locally, after the fused kernel
    _launch_local("dq", dq_args, dq_grid, cfg)
    # this rank's rows of the reduced partials, copied out before the next launch lets peers
    # push into the buffer again (its ENTRY follows this copy in stream order)
    mine = slice(me * Sl, (me + 1) * Sl)
    dk, dv = (buf.view(B, Hkv, S, D)[:, :, mine].to(k.dtype) for buf in (dkbuf, dvbuf))
    return dq, dk, dv


__all__ = ["CONSTANT_ARGS", "OPERANDS", "backward_schedule", "bwd_args", "check",
           "dkdv_fused_kernel", "gather_seq", "scatter_seq", "fused_backward", "ring_attention_backward_reference",
           "world_size_one"]
