"""Ulysses attention: DeepSpeed-Ulysses sequence parallelism as one fused kernel.

Rank ``r`` holds sequence block ``r`` of Q, K and V with every head; attention needs the whole
sequence, so Ulysses moves them to head-sharded (rank ``r`` gets head block ``r`` of the whole
sequence) with an all-to-all, attends, and moves the output back with a second all-to-all.
Here both all-to-alls run inside the attention kernel: the local kernel
(:func:`syncopate.kernels.attention.attn_fwd_kernel`, unmodified) fused by the compiler with the
``ulysses_all_to_all`` plan.  A tile of head ``h`` waits only for the chunks of head ``h``
(and of its KV head), and each output tile signals the chunks that go back to their owners as
it finishes.  No hand-written fused kernel.

Contract (:func:`ulysses_attention`)
  * ``q`` ``[B, Hq, S/W, D]``, ``k`` and ``v`` ``[B, Hkv, S/W, D]`` on every rank: sequence
    block ``r`` (positions ``r * S/W ...``) of one sequence of length ``S``, all heads, in the
    local attention's ``[batch, heads, seq, head_dim]`` form (any strides: they are staged by a
    copy).  Returns ``o`` ``[B, Hq, S/W, D]``: the same sequence block of attention over the
    whole sequence (``causal``: SDPA's ``is_causal`` over global positions).
  * ``Hq`` and ``Hkv`` divisible by ``W`` (whole heads per rank), ``Hq`` a multiple of ``Hkv``
    (grouped-query attention: every rank keeps whole groups); bf16 or fp16; ``D`` 64 or 128;
    ``B * Hq * S * D < 2**31`` (the kernel's offsets are 32-bit).  Anything else is a
    :class:`LaunchError` saying what to change.
  * ``fused=False`` (or ``SYNCOPATE=0``): :func:`ulysses_attention_reference` -- NCCL
    ``all_to_all_single``, the same local kernel with the same config, ``all_to_all_single``
    back; the same tiles, so bitwise the fused result.

What the fused path keeps per communicator (``comm.cache``): symmetric ``[B, H, S, D]`` buffers
of Q, K, V and O (each rank stages its sequence block into them; the whole sequence is there so
that the plan's chunks are boxes of one global tensor) and one FusedKernel per configuration.
Only the ``sm`` backend fuses it (the comm programs copy the 4-d chunks through a 2-d view).
"""

from __future__ import annotations

import functools
import math

from ..errors import LaunchError, ScheduleError
from ..runtime import collectives as dist
from ..schedule import ulysses_all_to_all
from ..schedule.ulysses_cost import OP_DEFAULT_PROGRAMS, ulysses_costs
from . import choice, driver
from .ring_attention import SHAPE, explain_shape, fit, local_candidates
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
    import torch

    from ..kernels.attention import check_operands
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
    from ..kernels.attention import attention
    return attention(q, k, v, causal=causal, sm_scale=sm_scale, config=config,
                     fusable=True)[0]


def _to_heads(x, comm):
    """All-to-all: this rank's sequence block of every head -> every sequence block of this
    rank's heads (``[B, H, S/W, D]`` -> ``[B, H/W, S, D]``)."""
    import torch
    W = comm.world_size
    B, H, Sl, D = x.shape
    send = x.reshape(B, W, H // W, Sl, D).transpose(0, 1).contiguous()   # [W(dst), B, h, Sl, D]
    recv = torch.empty_like(send)                                         # [W(src), B, h, Sl, D]
    dist.all_to_all_single(recv, send, group=comm.group)
    return recv.permute(1, 2, 0, 3, 4).reshape(B, H // W, W * Sl, D)


def _to_sequence(o, comm):
    """The inverse all-to-all: ``[B, H/W, S, D]`` -> this rank's block ``[B, H, S/W, D]``."""
    import torch
    W = comm.world_size
    B, h, S, D = o.shape
    send = o.reshape(B, h, W, S // W, D).permute(2, 0, 1, 3, 4).contiguous()  # [W(dst), ...]
    recv = torch.empty_like(send)                                             # [W(src), ...]
    dist.all_to_all_single(recv, send, group=comm.group)
    return recv.transpose(0, 1).reshape(B, W * h, S // W, D)


def ulysses_attention_reference(q, k, v, comm, *, causal: bool = False, sm_scale=None,
                                config=None):
    """The unfused path: ``all_to_all_single`` of Q, K and V to head-sharded, the local
    attention kernel, ``all_to_all_single`` of the output back."""
    from ..kernels.attention import AttentionConfig
    B, Hq, Hkv, Sl, D = _check(q, k, v, comm)
    cfg = AttentionConfig.of(config, D).check(D)
    o = _local_attention(_to_heads(q, comm), _to_heads(k, comm), _to_heads(v, comm), causal,
                         sm_scale, cfg)
    return _to_sequence(o, comm)


def _check_out(out, q, shape) -> None:
    import torch
    if out is None:
        return
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(shape) \
            or out.dtype != q.dtype or out.device != q.device:
        raise LaunchError(f"out must be this rank's [B, Hq, S/W, D] = {list(shape)} result in "
                          f"{q.dtype} on {q.device}, got "
                          f"{getattr(out, 'dtype', type(out).__name__)} "
                          f"{list(getattr(out, 'shape', ()))}")


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
    from ..kernels.attention import AttentionConfig, attn_fwd_kernel
    from ..runtime.fused import fuse
    if backend not in _BACKENDS:
        raise LaunchError(f"ulysses_attention fuses with the {' or '.join(_BACKENDS)} backend, "
                          f"not {backend!r}: the comm programs copy its 4-d chunks through a 2-d "
                          f"view, which the ce and nvshmem lowerings do not; pass backend='sm' "
                          f"or fused=False")
    cfg = AttentionConfig.of(config, D).check(D)

    def build():
        sched = ulysses_all_to_all(B, Hq, Hkv, S, D, driver.schedule_dtype(dtype),
                                   comm.world_size, mode=mode)
        return fuse(attn_fwd_kernel, sched, operand=dict(_OPERANDS), backend=backend,
                    comm_programs=comm_programs, comm=comm, constant_args=_CONSTANTS,
                    **cfg.options())
    return driver.cached_fused(comm, ("ulysses.fk", B, Hq, Hkv, S, D, str(dtype), backend, mode,
                                      comm_programs, repr(cfg)), build)


def ulysses_attention(q, k, v, comm, *, causal: bool = False, sm_scale=None,
                      backend: str | None = None, config=None, fused=None, mode: str = "push",
                      comm_programs=None, out=None):
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
    the local kernel alone."""
    import torch
    import triton

    from ..kernels.attention import LOG2E, AttentionConfig
    B, Hq, Hkv, Sl, D = _check(q, k, v, comm)
    cfg = AttentionConfig.of(config, D).check(D)
    _check_out(out, q, (B, Hq, Sl, D))
    if comm.world_size == 1:  # one rank holds every head of the whole sequence
        o = _local_attention(q, k, v, causal, sm_scale, cfg)
        return o if out is None else out.copy_(o)
    use_fused = driver.use_fused(fused)
    if use_fused:
        use_fused = driver.choose(SPEC, comm, (B, Hq, Hkv, Sl * comm.world_size, D,
                                               int(bool(causal))), q.dtype, fused=fused,
                                  explicit=backend is not None or comm_programs is not None,
                                  named=True)[0]
    backend = backend or "sm"
    if not use_fused:
        o = ulysses_attention_reference(q, k, v, comm, causal=causal, sm_scale=sm_scale,
                                        config=cfg)
        return o if out is None else out.copy_(o)
    W, me = comm.world_size, comm.rank
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
    return O[:, :, rows].clone() if out is None else out.copy_(O[:, :, rows])


def _candidates(spec, cal, s, W, dtype, cublas, blocked):
    """The fused kernel (its comm programs holding their SMs for the whole kernel) against the
    unfused path (NCCL all-to-alls + the attention), both by the Ulysses cost model of
    :mod:`syncopate.schedule.ulysses_cost` less the layer's projections."""
    from ..dtypes import element_bytes
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
    bench_rows=("ulysses",), fit=fit)

__all__ = ["SPEC", "check_plan", "ulysses_attention", "ulysses_attention_reference",
           "ulysses_buffers", "ulysses_fused_kernel"]
