"""MoE second expert GEMM + combine, fused: the way back of :mod:`.moe_dispatch_gemm`.

Built from parts (docs/moe.md section 7): the same grouped GEMM
(:func:`syncopate.kernels.grouped_gemm.grouped_gemm_kernel`), the ``moe_combine`` schedule
(:func:`syncopate.schedule.moe.moe_combine`: the dispatch's groups travel back with the same
device-side counts as run-time extents) and :func:`syncopate.fuse`, with the kernel's ``c_ptr``
bound to the produced expert outputs ``Y`` and ``count_ptr`` to the counts ``CNT``.

On rank ``d`` the kernel runs the ``W * El`` groups the dispatch left there -- group
``g = s * El + e``: source ``s``'s tokens for local expert ``e`` -- reading ``h`` group ``g``
(the activations, local: ``a_base = 0``, ``a_seg = El``) and the count
``CNT[(s*W + d)*E + d*El + e]`` (``cnt_base = d*E + d*El``, ``cnt_seg = W*E``: the dispatch's
indices), and writes group ``g`` of its part of ``Y``. Every tile stores (masked by the count)
and so signals its box, so a chunk's ``PRODUCED`` flag completes even for tiles past the
count; the comm programs send each group ``(d -> s, e)`` home as soon as its tiles are done,
copying only the counted rows.

The combine itself -- for every token, the weighted sum of its ``k`` expert rows -- is a
separate, stream-ordered step after the fused launch (:func:`combine_rows`), not an epilogue
of the kernel: which rows a token needs is data-dependent (the ``slot`` map), so a fused
epilogue could not have its waits placed by the compiler without a run-time-resolved hint, and
waiting for every chunk into the rank is what the end of the launch already does. It reads
``T * k`` rows: small next to the GEMM, and the transfers it depends on overlapped the GEMM.
"""

from __future__ import annotations

import functools

import torch

from ..errors import LaunchError
from ..runtime import collectives as dist
from ..runtime import graphs
from ..schedule.moe import moe_combine
from . import driver, moe_routing
from .moe_dispatch_gemm import MoEDispatch
from .moe_routing import check_sizes, expert_gemm, grouped_config, launch_grouped

#: ``fuse(operand=...)``: the kernel parameters the schedule's tensors are bound to
OPERANDS = {"c_ptr": "Y", "count_ptr": "CNT"}


#: the grouped GEMM's arguments on a rank (:func:`~.moe_routing.kernel_args`): ``h``
#: ``[W*El*C, F]`` (this rank's activations, groups ``s*El + e``), ``w_local`` ``[El, F, H]``,
#: ``Y`` ``[W*E*C, H]`` (the whole schedule tensor: the fused kernel advances it to this rank's
#: part; an unfused launch writes its first ``W*El*C`` rows)
kernel_args = functools.partial(moe_routing.kernel_args, dispatch=False)


def fused_rows(slot, rank: int, world_size: int, num_experts: int, capacity: int):
    """Where each (token, choice) of ``rank``'s tokens lands in its ``Y`` after the fused
    launch: slot ``x*C + j`` (expert ``x``, row ``j`` of the dispatch's group) was computed on
    ``d = x // El`` in its group ``(d, rank, x)`` (:func:`syncopate.schedule.moe.y_group`);
    -1 stays -1 (a dropped choice)."""
    W, E, C = world_size, num_experts, capacity
    El = E // W
    x, j = torch.div(slot, C, rounding_mode="floor"), slot % C
    d = torch.div(x, El, rounding_mode="floor")
    rows = (d * E + rank * El + (x - d * El)) * C + j
    return torch.where(slot >= 0, rows, torch.full_like(rows, -1))


def combine_rows(y, rows, topk_weights, out_dtype):
    """``out[t] = sum_i topk_weights[t, i] * y[rows[t, i]]`` over the choices with
    ``rows >= 0`` (fp32 accumulation in choice order, one rounding to ``out_dtype``). A dropped
    choice contributes nothing: its row is masked out, not multiplied by zero (the row it
    would index may hold padding, NaN included)."""
    T, k = rows.shape
    valid = rows >= 0
    g = y.index_select(0, rows.clamp(min=0).reshape(-1)).view(T, k, y.shape[1]).float()
    g = torch.where(valid[..., None], g, torch.zeros((), dtype=g.dtype, device=g.device))
    out = torch.zeros((T, y.shape[1]), dtype=torch.float32, device=y.device)
    for i in range(k):  # a fixed order: the fused and the unfused paths round alike
        out += topk_weights[:, i, None].float() * g[:, i]
    return out.to(out_dtype)


def refuse_capture(validate) -> None:
    """Under CUDA-graph capture, refuse ``validate`` (a host read of the slot map's range)
    before anything is enqueued, saying what to pass instead."""
    graphs.refuse_host_reads("moe_gemm_combine", [
        (bool(validate), "validate=True (the slot map's range)",
         "Pass validate=False: an out-of-range slot entry then contributes nothing (a slot "
         "map from moe_dispatch_gemm is in range by construction).")])


def _check(h, w_local, routing, comm, cfg, validate: bool):
    """Typed errors, host-side: ``(W, E, El, C, F, H)``."""
    refuse_capture(validate)
    if not isinstance(routing, MoEDispatch):
        raise LaunchError(f"routing must be the MoEDispatch that moe_dispatch_gemm returned for "
                          f"these tokens, got {type(routing).__name__}")
    if not isinstance(w_local, torch.Tensor) or w_local.dim() != 3:
        raise LaunchError(f"w_local must be [E_local, F, hidden] (this rank's experts' second "
                          f"weights), got {getattr(w_local, 'shape', type(w_local).__name__)}")
    W = comm.world_size
    El, F, H = w_local.shape
    E = El * W
    if not isinstance(h, torch.Tensor) or h.dim() != 3 or h.shape[0] != W * El \
            or h.shape[2] != F:
        raise LaunchError(f"h must be [W * E_local, capacity, F] = [{W * El}, C, {F}] (the "
                          f"dispatch's out after the activation, same groups), got "
                          f"{getattr(h, 'shape', type(h).__name__)}")
    C = h.shape[1]
    if h.dtype != w_local.dtype or h.dtype not in (torch.bfloat16, torch.float16):
        raise LaunchError(f"h and w_local must both be bfloat16 or both float16, got {h.dtype} "
                          f"and {w_local.dtype}")
    counts, slot, wts, cnt = routing.counts, routing.slot, routing.topk_weights, routing.cnt
    if not isinstance(counts, torch.Tensor) or counts.dtype != torch.int32 \
            or tuple(counts.shape) != (W, El):
        raise LaunchError(f"routing.counts must be int32 [W, E_local] = [{W}, {El}] (the rows "
                          f"each source sent to this rank's experts), got "
                          f"{getattr(counts, 'dtype', None)} "
                          f"{tuple(getattr(counts, 'shape', ()))}: was the dispatch run with "
                          f"{E} experts over {W} ranks?")
    if not isinstance(cnt, torch.Tensor) or cnt.dtype != torch.int32 \
            or tuple(cnt.shape) != (W * W * E,):
        raise LaunchError(f"routing.cnt must be int32 [W * W * E] = [{W * W * E}] (every rank's "
                          f"counts, as the dispatch exchanged them), got "
                          f"{getattr(cnt, 'dtype', None)} {tuple(getattr(cnt, 'shape', ()))}")
    if not isinstance(slot, torch.Tensor) or slot.dim() != 2 or slot.dtype != torch.int64:
        raise LaunchError(f"routing.slot must be int64 [tokens, k] (each choice's row in the "
                          f"send block, -1 when dropped), got {getattr(slot, 'dtype', None)} "
                          f"{tuple(getattr(slot, 'shape', ()))}")
    if not isinstance(wts, torch.Tensor) or tuple(wts.shape) != tuple(slot.shape) \
            or not wts.is_floating_point():
        raise LaunchError(f"routing.topk_weights must be a float tensor of the slot map's shape "
                          f"{tuple(slot.shape)}, got {getattr(wts, 'dtype', None)} "
                          f"{tuple(getattr(wts, 'shape', ()))}")
    check_sizes(W, E, C, cfg)
    driver.check_comm_device(comm, ("h", h), ("w_local", w_local), ("routing.slot", slot),
                            ("routing.topk_weights", wts), ("routing.counts", counts),
                            ("routing.cnt", cnt))
    if validate and slot.numel():
        bad = (slot < -1) | (slot >= E * C)
        if bool(bad.any()):  # one host read: the price of a typed error
            raise LaunchError(f"routing.slot holds {int(slot[bad][0])}, outside [-1, {E * C}) "
                              f"(E * capacity rows): the slot map does not belong to a dispatch "
                              f"of {E} experts with capacity {C}")
    return W, E, El, C, F, H


def _valid_slot(slot, E: int, C: int):
    """The slot map with entries outside ``[0, E*C)`` turned into -1 (``validate=False``: a
    bad entry contributes nothing and never indexes out of bounds)."""
    return torch.where((slot >= 0) & (slot < E * C), slot, torch.full_like(slot, -1))


def moe_gemm_combine_fused_kernel(comm, E: int, C: int, H: int, dtype, *, cfg,
                                  comm_programs: int = 2, backend: str = "sm",
                                  mode: str = "push"):
    """The (cached) FusedKernel the op launches; exposed for tests and the benchmark."""
    return moe_routing.moe_fused_kernel(comm, "moe_gemm_combine.fk", moe_combine, E, C, H,
                                        dtype, cfg=cfg, comm_programs=comm_programs,
                                        backend=backend, mode=mode, operand=OPERANDS)


def moe_gemm_combine_reference(h, w_local, routing, comm, *, config=None,
                               validate: bool = True):
    """The unfused path: the grouped GEMM over the groups the dispatch left here, an
    all-to-all of the ``[W, El, C, H]`` results (block ``s`` back to source ``s``: it receives
    ``[E, C, H]``, expert ``x``'s rows at slot ``x*C + j``, the dispatch's send layout), then
    the weighted sum (:func:`combine_rows`). Returns ``[tokens, H]``."""
    cfg = grouped_config(config, h.shape[1] if getattr(h, "ndim", 0) == 3 else 0, w_local, h)
    W, E, El, C, F, H = _check(h, w_local, routing, comm, cfg, validate)
    y = torch.zeros((W * El, C, H), dtype=h.dtype, device=h.device)
    expert_gemm(h.contiguous(), w_local.contiguous(), routing.counts.reshape(-1), y,
                segments=W, config=cfg)
    back = y.reshape(W * El * C, H)
    if W > 1:  # one rank: its rows are already home
        back = torch.empty((W * El * C, H), dtype=h.dtype, device=h.device)
        dist.all_to_all_single(back, y.reshape(W * El * C, H), group=comm.group)
    return combine_rows(back, _valid_slot(routing.slot, E, C), routing.topk_weights, h.dtype)


def moe_gemm_combine(h, w_local, routing, comm, *, config=None, comm_programs: int | None = None,
                     backend: str | None = None, mode: str = "push", validate: bool = True,
                     fused=None):
    """The second expert GEMM on the tokens the dispatch brought here, its results sent back
    to the ranks the tokens came from, and there combined with the routing weights (docs/moe.md
    section 7). Returns this rank's ``[tokens, H]``.

    ``h`` ``[W * E_local, C, F]``: the dispatch's ``out`` after the activation (the same
    groups: rows past each group's count are never read). ``w_local`` ``[E_local, F, H]``.
    ``routing``: the :class:`~syncopate.ops.MoEDispatch` of these tokens (counts, every rank's
    counts ``cnt``, the ``slot`` map, ``topk_weights``). A choice the dispatch dropped (slot
    -1, counted in ``routing.dropped``) contributes nothing. ``validate`` checks the slot map's
    range (one host read); without it an out-of-range entry contributes nothing. Under
    CUDA-graph capture the host read is refused: pass ``validate=False``
    (docs/cuda-graphs.md).
    ``fused=False`` (or ``SYNCOPATE=0``), or a world of one rank, takes
    :func:`moe_gemm_combine_reference`; ``fused`` None lets the op choose
    (:func:`syncopate.ops.choice.decide_shape`, the same on every rank), ``fused=True``,
    ``backend`` or ``comm_programs`` the fused kernel (without ``comm_programs``: the
    decision's count, 2, 4 or 8 by the cost model; 2 without a calibration for the GPU).
    """
    cfg = grouped_config(config, h.shape[1] if getattr(h, "ndim", 0) == 3 else 0, w_local, h)
    # one rank: nothing to send, no fused machinery
    use_fused = driver.use_fused(fused) and comm.world_size > 1
    if use_fused:
        W, E, El, C, F, H = _check(h, w_local, routing, comm, cfg, validate)
        use_fused, comm_programs = moe_routing.moe_path(
            SPEC, comm, (E, C, F, H), h.dtype, fused=fused, backend=backend,
            comm_programs=comm_programs)
    backend = backend or "sm"
    comm_programs = 2 if comm_programs is None else int(comm_programs)
    if not use_fused:
        return moe_gemm_combine_reference(h, w_local, routing, comm, config=cfg,
                                          validate=validate)
    if backend != "sm":
        raise LaunchError(f"moe_gemm_combine fuses with backend 'sm' only, got {backend!r}: "
                          f"its expert outputs are a per-rank (view='rank') tensor, which the "
                          f"ce and nvshmem lowerings do not take")
    if mode not in ("push", "pull"):
        raise LaunchError(f"mode must be 'push' or 'pull', got {mode!r}")
    me = comm.rank
    cfg.check()
    fk = moe_gemm_combine_fused_kernel(comm, E, C, H, h.dtype, cfg=cfg, backend=backend,
                                       comm_programs=comm_programs, mode=mode)
    # the symmetric Y [W*E*C, H] and CNT [W*W*E] int32 of this shape
    Y, CNT = moe_routing.moe_buffers(comm, "moe_combine.YC", E, C, H, h.dtype)
    fk.before_staging()  # peers finished reading the previous call's rows and counts
    CNT.copy_(routing.cnt)
    a = h.reshape(W * El * C, F).contiguous()
    launch_grouped(fk, *kernel_args(a, CNT, w_local.contiguous(), Y, me, W, E, C, cfg), cfg)
    slot = routing.slot if validate else _valid_slot(routing.slot, E, C)
    rows = fused_rows(slot, me, W, E, C)
    return combine_rows(Y, rows, routing.topk_weights, h.dtype)


SPEC = moe_routing.moe_spec("moe_gemm_combine", moe_gemm_combine,
                            ("experts", "capacity", "ffn", "hidden"),
                            "E,C,F,H (e.g. 8,640,14336,4096)", dispatch=False)
