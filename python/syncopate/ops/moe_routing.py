"""Routing for the MoE dispatch: pack a rank's tokens into the capacity layout, device-side.

:func:`pack_dispatch` turns ``x`` ``[T, H]`` and ``topk_ids`` ``[T, k]`` into the send block
of the ``moe_dispatch`` schedule (docs/moe.md) -- ``[E, C, H]``, expert ``x``'s tokens in its
``C`` rows in token order -- and the rank's block of the count tensor -- ``[W, E]`` int32, row
``d`` holding expert ``x``'s count where ``d`` owns ``x`` and 0 elsewhere. Everything is torch
ops on the tensors' device (a stable sort, a cumulative count, a scatter): nothing is read back
to the host, so packing, the fused kernel and the counts' exchange never synchronise, and a
CUDA graph can capture them (with ``validate=False``; docs/cuda-graphs.md).

Overflow is never silent: a token whose rank in its expert's queue is ``>= C`` is **dropped**
(the usual capacity-factor semantics), it is counted per expert in ``dropped`` and its slot in
``slot`` is -1, so the caller can raise (:class:`~syncopate.errors.LaunchError`, one host read
of a scalar) or report the drops; the counts sent never exceed ``C``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..dtypes import canonical, element_bytes
from ..errors import LaunchError
from ..kernels.grouped_gemm import grouped_gemm_kernel
from ..kernels.grouped_gemm_launch import (PARAMS, default_config, grouped_gemm,
                                           grouped_gemm_reference)
from ..schedule.cost import _SM_ALPHA_S, H200_SMS, _sm_bandwidth
from . import choice, driver
from .spec import Cand, OpSpec


@dataclass
class Packed:
    """The result of :func:`pack_dispatch` (all on the input's device)."""

    send: object      #: ``[E, C, H]``: expert ``x``'s tokens in rows ``0 .. count[x]-1``
    counts: object    #: ``[W, E]`` int32: rows of group ``x`` that rank ``d`` receives
    dropped: object   #: ``[E]`` int32: tokens routed to ``x`` past the capacity
    slot: object      #: ``[T, k]`` int64: the row ``x * C + j`` each (token, choice) went to, or -1
    invalid: object   #: ``[]`` int32: choices with an id outside ``[0, E)`` (``validate=False``)


def check_routing(x, topk_ids, num_experts: int, world_size: int, capacity: int):
    """Typed errors for bad routing inputs (host-side checks of shapes and dtypes only; the id
    range is checked on the device, see :func:`pack_dispatch`)."""
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise LaunchError(f"x must be a 2-D tensor [tokens, hidden], got "
                          f"{getattr(x, 'shape', type(x).__name__)}")
    if not isinstance(topk_ids, torch.Tensor) or topk_ids.dim() != 2 \
            or topk_ids.shape[0] != x.shape[0]:
        raise LaunchError(f"topk_ids must be [tokens, k] with tokens = {x.shape[0]}, got "
                          f"{getattr(topk_ids, 'shape', type(topk_ids).__name__)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise LaunchError(f"topk_ids must be int32 or int64 expert ids, got {topk_ids.dtype}")
    for name, v in (("num_experts", num_experts), ("world_size", world_size),
                    ("capacity", capacity)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise LaunchError(f"{name} must be a positive integer, got {v!r}")
    if num_experts % world_size:
        raise LaunchError(f"{num_experts} experts do not divide over {world_size} ranks: every "
                          f"rank owns num_experts / world_size experts; use a world size that "
                          f"divides {num_experts}")


def pack_dispatch(x, topk_ids, num_experts: int, world_size: int, capacity: int,
                  validate: bool = True) -> Packed:
    """Pack (see the module docstring).

    Ids outside ``[0, num_experts)``: with ``validate`` (the default) they raise
    :class:`LaunchError`, which reads one boolean back to the host -- the only synchronisation
    here, and the price of a typed error; with ``validate=False`` they are dropped on the
    device and counted in ``Packed.invalid``. Either way a bad id is never routed to another
    expert or used as an index.
    """
    check_routing(x, topk_ids, num_experts, world_size, capacity)
    T, H = x.shape
    E, C, W = num_experts, capacity, world_size
    ids = topk_ids.reshape(-1).long()
    bad = (ids < 0) | (ids >= E)
    if validate and ids.numel() and bool(bad.any()):
        raise LaunchError(f"topk_ids holds expert id {int(ids[bad][0])}, outside [0, {E}): the "
                          f"router and num_experts disagree")
    ids = torch.where(bad, torch.full_like(ids, E), ids)              # E: a discard bucket
    order = torch.sort(ids, stable=True).indices                      # by expert, then token
    # a count by scatter-add, not torch.bincount: on CUDA bincount reads the largest id back
    # to size its result (a synchronisation, which CUDA-graph capture refuses)
    per_expert = torch.zeros(E + 1, dtype=torch.int64, device=ids.device)
    per_expert.scatter_add_(0, ids, torch.ones_like(ids))             # [E + 1]
    first = torch.cumsum(per_expert, 0) - per_expert                  # start of each expert
    rank_in_expert = torch.empty_like(ids)
    rank_in_expert[order] = torch.arange(ids.numel(), device=ids.device) - first[ids[order]]
    keep = (rank_in_expert < C) & ~bad
    slot = torch.where(keep, ids * C + rank_in_expert, torch.full_like(ids, -1))
    # every choice is scattered, a dropped one into a discard row past the block: a boolean
    # mask (``send[slot[keep]]``) would size its result on the host (a synchronisation);
    # kept slots are distinct, so the kept rows are exact whatever lands in the discard row
    send = torch.zeros((E * C + 1, H), dtype=x.dtype, device=x.device)
    tok = torch.arange(T, device=x.device)[:, None].expand(T, topk_ids.shape[1]).reshape(-1)
    send[torch.where(keep, slot, torch.full_like(slot, E * C))] = x[tok]
    send = send[:E * C]
    kept = torch.clamp(per_expert[:E], max=C).to(torch.int32)
    owner = torch.arange(E, device=x.device) // (E // W)
    mine = owner[None, :] == torch.arange(W, device=x.device)[:, None]
    counts = torch.where(mine, kept[None, :], torch.zeros_like(kept)[None, :]).to(torch.int32)
    dropped = (per_expert[:E] - kept).to(torch.int32)
    return Packed(send.reshape(E, C, H), counts, dropped, slot.reshape(topk_ids.shape),
                  per_expert[E].to(torch.int32))


def check_sizes(world_size: int, num_experts: int, capacity: int, cfg):
    """Typed errors for sizes the MoE ops' fused kernel cannot take."""
    if num_experts % world_size:
        raise LaunchError(f"{num_experts} experts do not divide over {world_size} ranks: every "
                          f"rank owns num_experts / world_size experts; use a world size that "
                          f"divides {num_experts}")
    if capacity % cfg.BLOCK_M:
        raise LaunchError(f"capacity {capacity} is not a multiple of the grouped GEMM's "
                          f"BLOCK_M={cfg.BLOCK_M}: a tile would span two groups' chunks and wait "
                          f"for both; round the capacity up to a multiple of {cfg.BLOCK_M}")


def kernel_args(a, CNT, w_local, c, rank: int, world_size: int, num_experts: int,
                capacity: int, cfg, *, dispatch: bool):
    """``(values, grid)``: the MoE grouped GEMM's non-constexpr arguments on ``rank`` in
    parameter order (a dict, name -> value), and its grid: ``c = a @ w_local`` over the ``W *
    El`` groups ``s*El + e`` of ``C`` rows, ``CNT`` ``[W*W*E]`` int32 (every rank's counts, read
    at ``CNT[(s*W + rank)*E + rank*El + e]``). The dispatch reads ``a`` group ``s*E + rank*El +
    e`` (the gathered send blocks), the combine group ``s*El + e`` (its own activations)."""
    W, E, C = world_size, num_experts, capacity
    check_sizes(W, E, C, cfg)
    El = E // W
    K, N = a.shape[1], w_local.shape[2]
    values = dict(a_ptr=a, b_ptr=w_local, c_ptr=c, count_ptr=CNT, C=C, N=N, K=K, E=El,
                  M_out=W * El * C, a_base=rank * El if dispatch else 0,
                  a_seg=E if dispatch else El, cnt_base=rank * E + rank * El, cnt_seg=W * E,
                  stride_am=a.stride(0), stride_be=w_local.stride(0),
                  stride_bk=w_local.stride(1), stride_cm=c.stride(0))
    tiles = (C // cfg.BLOCK_M) * -(-N // cfg.BLOCK_N)
    return values, (W * El * tiles,)


def grouped_config(config, capacity, w, a):
    """``config``, or :func:`~syncopate.kernels.grouped_gemm_launch.default_config` for
    ``capacity`` rows per group times ``w`` ``[.., K, N]`` (``N = w.shape[-1]``, ``K =
    a.shape[-1]``). The MoE ops call it before validating their operands, so a malformed
    operand only yields some valid default here (the validation then says what is wrong)."""
    if config is not None:
        return config
    n = w.shape[-1] if getattr(w, "ndim", 0) else 0
    k = a.shape[-1] if getattr(a, "ndim", 0) else 0
    c = capacity if isinstance(capacity, int) and not isinstance(capacity, bool) else 0
    return default_config(c, n, k)


def expert_gemm(a, w, count, out, *, segments: int, config=None):
    """``out[g, :count[g]] = a[g, :count[g]] @ w[g % E]``: the grouped GEMM of the unfused MoE
    paths. On a GPU the Triton kernel the fused paths run (same tiles, so fused and unfused
    agree bitwise; no host read of the counts); on a CPU -- the loopback tests' threads --
    one ``torch.mm`` per group (reads the counts on the host, which a CPU pays nothing for)."""
    if a.device.type == "cuda":
        return grouped_gemm(a, w, count, out, segments=segments, config=config)
    return grouped_gemm_reference(a, w, count, out, segments=segments)


def moe_buffers(comm, tag: str, E: int, C: int, H: int, dtype):
    """The symmetric ``[W*E*C, H]`` rows and ``[W*W*E]`` int32 counts of one MoE op (``tag``)
    at this shape, allocated on first use (a collective: every rank calls it with the same
    shape) and cached on the communicator."""
    W = comm.world_size
    return (driver.symmetric_buffer(comm, f"{tag}.rows", (W * E * C, H), dtype),
            driver.symmetric_buffer(comm, f"{tag}.counts", (W * W * E,), torch.int32))


def moe_fused_kernel(comm, tag: str, schedule, E: int, C: int, H: int, dtype, *, cfg,
                     comm_programs: int, backend: str, mode: str, operand):
    """The cached FusedKernel of the grouped GEMM fused with ``schedule(W, E, C, H, dtype,
    mode=mode)`` (the dispatch's or the combine's)."""
    return driver.cached_fused(
        comm, (tag, comm.world_size, E, C, H, str(dtype), repr(cfg), comm_programs, backend,
               mode), grouped_gemm_kernel,
        lambda: schedule(comm.world_size, E, C, H, canonical(dtype), mode=mode),
        config=cfg, operand=operand, backend=backend, comm_programs=comm_programs,
        defer_consumed_wait=True)


def moe_path(spec, comm, shape, dtype, *, fused, backend, comm_programs):
    """``(fused path?, comm programs or None)`` of a MoE op called with ``fused`` not False on
    more than one rank (:func:`syncopate.ops.driver.choose`): the decision's comm-program
    count when the caller fixed neither it nor the backend, else the caller's."""
    named = backend is not None or comm_programs is not None
    use, c = driver.choose(spec, comm, shape, dtype, fused=fused, explicit=named, named=named)
    if use and comm_programs is None and c is not None:
        comm_programs = c.comm_programs
    return use, comm_programs


# ------------------------------------------------------------------------------------------
# the MoE ops' candidates (OpSpec.candidates), explain shape and calibration rows
# ------------------------------------------------------------------------------------------

#: Comm-program counts the MoE ops' fused candidates are modelled with (each a candidate: more
#: programs copy faster and take more SMs from the grouped GEMM)
MOE_COMM_PROGRAMS = (2, 4, 8)


def _gemm_dims(dispatch: bool, s: dict):
    """``(n, k, width)`` of a MoE op's grouped GEMM and of the rows it moves."""
    return (s["n"], s["hidden"], s["hidden"]) if dispatch else (s["hidden"], s["ffn"],
                                                                s["hidden"])


def candidates(spec, dispatch: bool, cal, s, W, dtype, cublas, blocked) -> list:
    """The fused kernel with each of :data:`MOE_COMM_PROGRAMS` -- the grouped GEMM on the SMs
    the comm programs leave, overlapped with their copies (dispatch: each block's GEMM once it
    arrived; combine: each block leaves when its rows are computed) -- against the unfused path
    (dispatch: NCCL all-gathers of every block and the counts; combine: an all-to-all) and the
    grouped GEMM."""
    eb = element_bytes(dtype)

    def parts(s, W):
        E, C = s["experts"], s["capacity"]
        El = max(1, E // W)
        n, k, width = _gemm_dims(dispatch, s)
        g, note = choice.local_gemm_s(cal, "triton", W * C, n, k, dtype)
        return E, C, El, width, El * g, f"{El} experts x GEMM {W * C}x{n}x{k} ({note})"

    def fused_sm(s, W, cp):
        E, C, El, width, gemm, _ = parts(s, W)
        bw = _sm_bandwidth(cp)
        moved = (W - 1) * El * C * width * eb  # what this rank receives (dispatch) / sends
        comm = _SM_ALPHA_S * (W - 1) + moved / bw
        block = _SM_ALPHA_S + moved / max(1, W - 1) / bw
        g = gemm * H200_SMS / (H200_SMS - cp)  # the comm programs' SMs are not the GEMM's
        if dispatch:  # own block first; the last block arrives, then its GEMM
            t = max(g + max(0.0, block - g / W), comm + g / W)
        else:  # a block leaves when its rows are computed; the last one after the GEMM
            t = max(g, comm) + block
        return t, f"MoE model: grouped GEMM on {H200_SMS - cp} SMs overlapped with " \
                  f"{cp} comm programs' copies"

    def unfused(s, W):
        E, C, El, width, gemm, note = parts(s, W)
        if dispatch:  # the reference all-gathers every block and the counts
            comm = choice.add(choice.collective_s(cal, "all_gather", W * E * C * width * eb, W),
                              choice.collective_s(cal, "all_gather", W * W * E * 4, W))
        else:
            comm = choice.collective_s(cal, "all_to_all", W * El * C * width * eb, W)
        return choice.add(comm, (gemm, note))
    return [Cand(f"fused sm ({cp} comm programs)", "sm", "fused",
                 functools.partial(fused_sm, cp=cp), choice.host_keys(spec, "sm"),
                 backend="sm", plan=(1, cp)) for cp in MOE_COMM_PROGRAMS] + [
            Cand("unfused (NCCL + triton)", "unfused:triton", "unfused", unfused,
                 (("nccl",),) * (2 if dispatch else 1) + (("local:triton",),), local="triton")]


def local_candidates(dispatch: bool, cal, s, dtype) -> list:
    """World size 1: the grouped GEMM alone (every expert's ``capacity`` rows)."""
    def grouped(s, W):
        n, k, _ = _gemm_dims(dispatch, s)
        g, note = choice.local_gemm_s(cal, "triton", s["capacity"], n, k, dtype)
        return s["experts"] * g, f"{s['experts']} experts x ({note})"
    return [Cand("local triton", "local:triton", "local", grouped, (("local:triton",),),
                 local="triton")]


def explain_shape(op, dims, W, batch=1, causal=False):
    """The decision shape is the global one (experts in all, capacity per source rank and
    expert, the GEMM's widths)."""
    if dims[0] % W:
        raise LaunchError(f"{op} places E / W experts on each rank: E = {dims[0]} must be a "
                          f"multiple of {W}")
    return tuple(dims)


def fit(dispatch: bool, r, w):
    """A ``moe`` bench row, uniform routing only (the cost model assumes every expert's
    capacity is used, which the "hot" routing's rows do not): ``<part> fused`` measures the
    fused kernel, ``<part> serial`` the unfused path."""
    if r.get("routing") != "uniform":
        return None
    E, C, H, F = int(r["E"]), int(r["C"]), int(r["H"]), int(r["F"])
    part = "dispatch" if dispatch else "combine"
    s = ({"experts": E, "capacity": C, "hidden": H, "n": F} if dispatch else
         {"experts": E, "capacity": C, "ffn": F, "hidden": H})
    return (s, f" {r.get('shape')} E={E} C={C} H={H} F={F} W={w} uniform",
            (("sm", f"{part} fused"), ("unfused:triton", f"{part} serial")))


def launch_grouped(fk, values: dict, grid, cfg) -> None:
    """Launch the MoE ops' fused grouped GEMM: ``values`` (:func:`kernel_args` of the op) in
    the kernel's parameter order, row-major inner strides, then every constexpr of ``cfg``."""
    values.update(stride_ak=1, stride_bn=1, stride_cn=1)
    fk[grid](*([values[p] for p in PARAMS] + list(cfg.constexprs().values())))


def moe_spec(name: str, fn, shape: tuple, example: str, *, dispatch: bool) -> OpSpec:
    """The :class:`OpSpec` of a MoE op (the dispatch's or the combine's): its fused sm variant
    against the unfused path (:func:`candidates`), calibrated from the ``moe`` bench rows."""
    return OpSpec(
        name=name, fn=fn, shape=shape, variants=("sm",),
        candidates=lambda spec, *args: candidates(spec, dispatch, *args),
        local_candidates=lambda spec, cal, s, dtype, cublas: local_candidates(dispatch, cal, s,
                                                                             dtype),
        explain_shape=example, explain=explain_shape, bench_rows=("moe",),
        fit=lambda r, w: fit(dispatch, r, w))
