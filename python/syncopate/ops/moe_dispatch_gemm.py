"""MoE dispatch + first expert GEMM, fused: the pieces the op and the emulator tests share.

Built from parts (docs/moe.md): the grouped GEMM
(:func:`syncopate.kernels.grouped_gemm.grouped_gemm_kernel`), the ``moe_dispatch`` schedule
(:func:`syncopate.schedule.moe.moe_dispatch`: per-source capacity groups, device-side counts,
run-time extents) and :func:`syncopate.fuse`, with the kernel's ``a_ptr`` bound to the tokens
``X`` and ``count_ptr`` to the counts ``CNT``.

On rank ``d`` the kernel runs ``W * El`` groups -- group ``g = s * El + e`` is source ``s``'s
tokens for local expert ``e`` (global ``x = d*El + e``) -- reading ``X`` group ``s*E + x``
(``a_base = d*El``, ``a_seg = E``) and count ``CNT[(s*W + d)*E + x]`` (``cnt_base = d*E +
d*El``, ``cnt_seg = W*E``), and writes ``out`` ``[W * El * C, N]`` group ``g`` (rows past the
count are not written). A tile of group ``g`` loads its count (waiting for the count chunk
from ``s``), and only if it has rows waits for the one data chunk ``(s -> d, x)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..errors import LaunchError
from ..runtime import collectives as dist
from ..runtime import graphs
from ..schedule.moe import moe_dispatch
from . import driver, moe_routing
from .moe_routing import (check_routing, check_sizes, expert_gemm, grouped_config, launch_grouped,
                          pack_dispatch)

#: ``fuse(operand=...)``: the kernel parameters the schedule's tensors are bound to
OPERANDS = {"a_ptr": "X", "count_ptr": "CNT"}


#: the grouped GEMM's arguments on a rank (:func:`~.moe_routing.kernel_args`): ``X``
#: ``[W*E*C, H]`` (group ``s*E + x`` read as local group ``s*El + e``), ``w_local`` ``[El, H,
#: N]``, ``out`` ``[W*El*C, N]``
kernel_args = functools.partial(moe_routing.kernel_args, dispatch=True)


# ------------------------------------------------------------------------------------------------
# The op
# ------------------------------------------------------------------------------------------------


@dataclass
class MoEDispatch:
    """What :func:`moe_dispatch_gemm` returns (all on the device; nothing read back unless
    ``on_overflow='error'`` or ``validate``).

    ``out`` ``[W * El, C, N]``: group ``s * El + e`` holds source rank ``s``'s tokens for this
    rank's local expert ``e`` times its weight, valid in its first ``counts[s, e]`` rows (the
    rest is not written). ``counts`` ``[W, El]`` int32. ``slot`` ``[T, k]`` and ``dropped``
    ``[E]`` describe this rank's own tokens (where each choice went in its send block, -1 when
    dropped; the combine needs them), ``topk_weights`` is passed through for the combine.
    ``cnt`` ``[W * W * E]`` int32: every rank's counts as the dispatch exchanged them
    (``CNT[(s*W + d)*E + x]``, docs/moe.md): the fused combine's copiers read them.
    ``invalid`` ``[]`` int32: this rank's choices with an expert id outside ``[0, E)``, dropped
    (always 0 with ``validate``, which raises instead) -- with ``dropped``, what a captured
    dispatch reports on the device instead of raising (docs/cuda-graphs.md)."""

    out: object
    counts: object
    slot: object
    dropped: object
    topk_weights: object
    cnt: object = None
    invalid: object = None


def _check(x, topk_ids, topk_weights, w_local, comm, capacity, cfg):
    """Typed errors, host-side (shapes, dtypes, divisibility): ``(W, E, El, H, N)``."""
    if not isinstance(w_local, torch.Tensor) or w_local.dim() != 3:
        raise LaunchError(f"w_local must be [E_local, hidden, N] (this rank's experts), got "
                          f"{getattr(w_local, 'shape', type(w_local).__name__)}")
    W = comm.world_size
    El, H, N = w_local.shape
    E = El * W
    check_routing(x, topk_ids, E, W, capacity)
    if x.shape[1] != H:
        raise LaunchError(f"x has hidden size {x.shape[1]} but w_local is [E_local, {H}, N]")
    if x.dtype != w_local.dtype or x.dtype not in (torch.bfloat16, torch.float16):
        raise LaunchError(f"x and w_local must both be bfloat16 or both float16, got {x.dtype} "
                          f"and {w_local.dtype}")
    if not isinstance(topk_weights, torch.Tensor) or tuple(topk_weights.shape) != \
            tuple(topk_ids.shape) or not topk_weights.is_floating_point():
        raise LaunchError(f"topk_weights must be a float tensor of topk_ids' shape "
                          f"{tuple(topk_ids.shape)}, got "
                          f"{getattr(topk_weights, 'dtype', None)} "
                          f"{tuple(getattr(topk_weights, 'shape', ()))}")
    check_sizes(W, E, capacity, cfg)
    driver.check_comm_device(comm, ("x", x), ("topk_ids", topk_ids), ("w_local", w_local))
    return W, E, El, H, N


def refuse_capture(on_overflow, validate) -> None:
    """Under CUDA-graph capture, refuse (before anything is enqueued) the options that read a
    device value back to the host; say what to pass instead and where the device reports."""
    graphs.refuse_host_reads("moe_dispatch_gemm", [
        (on_overflow == "error", "on_overflow='error' (the drop count)",
         "Pass on_overflow='drop': the drops are counted per expert in MoEDispatch.dropped "
         "(a device tensor each replay rewrites; check it after the replay)."),
        (bool(validate), "validate=True (the expert ids' range)",
         "Pass validate=False: a choice with an id outside [0, E) is dropped and counted in "
         "MoEDispatch.invalid.")])


def _pack(x, topk_ids, E, W, capacity, on_overflow, validate=True):
    if on_overflow not in ("error", "drop"):
        raise LaunchError(f"on_overflow must be 'error' or 'drop', got {on_overflow!r}")
    packed = pack_dispatch(x, topk_ids, E, W, capacity, validate=validate)
    if on_overflow == "error":
        over = packed.dropped > 0
        if bool(over.any()):  # one host read: the price of a typed error
            e = int(over.nonzero()[0, 0])
            raise LaunchError(f"expert {e} was routed {int(packed.dropped[e]) + capacity} "
                              f"tokens, more than the capacity {capacity}: raise capacity= or "
                              f"pass on_overflow='drop' to drop (and count) the excess")
    return packed


def moe_dispatch_gemm_fused_kernel(comm, E: int, C: int, H: int, dtype, *, cfg,
                                   comm_programs: int = 2, backend: str = "sm",
                                   mode: str = "pull"):
    """The (cached) FusedKernel the op launches; exposed for tests and the benchmark."""
    return moe_routing.moe_fused_kernel(comm, "moe_dispatch_gemm.fk", moe_dispatch, E, C, H,
                                        dtype, cfg=cfg, comm_programs=comm_programs,
                                        backend=backend, mode=mode, operand=OPERANDS)


def moe_dispatch_gemm_reference(x, topk_ids, topk_weights, w_local, comm, *, capacity: int,
                                config=None, on_overflow: str = "error",
                                validate: bool = True) -> MoEDispatch:
    """The unfused path: pack, all-gather the send blocks and the counts (NCCL or loopback;
    ``W`` times an all-to-all's bytes -- a correctness reference, not a speed baseline), pick
    this rank's groups, run the grouped GEMM (on a CPU -- loopback threads in the tests -- one
    ``torch.mm`` per group, :func:`~.moe_routing.expert_gemm`)."""
    refuse_capture(on_overflow, validate)
    cfg = grouped_config(config, capacity, w_local, x)
    W, E, El, H, N = _check(x, topk_ids, topk_weights, w_local, comm, capacity, cfg)
    C, me = capacity, comm.rank
    packed = _pack(x, topk_ids, E, W, C, on_overflow, validate)
    if W == 1:  # one rank: its block is everything
        X, CNT = packed.send[None], packed.counts[None]
    else:
        X = torch.empty((W, E, C, H), dtype=x.dtype, device=x.device)
        CNT = torch.empty((W, W, E), dtype=torch.int32, device=x.device)
        dist.all_gather_into_tensor(X, packed.send.contiguous(), group=comm.group)
        dist.all_gather_into_tensor(CNT, packed.counts.contiguous(), group=comm.group)
    mine = slice(me * El, (me + 1) * El)
    a = X[:, mine].reshape(W * El, C, H).contiguous()
    counts = CNT[:, me, mine].contiguous()
    out = torch.empty((W * El, C, w_local.shape[2]), dtype=x.dtype, device=x.device)
    expert_gemm(a, w_local.contiguous(), counts.reshape(-1), out, segments=W, config=cfg)
    return MoEDispatch(out, counts, packed.slot, packed.dropped, topk_weights, CNT.reshape(-1),
                       packed.invalid)


def moe_dispatch_gemm(x, topk_ids, topk_weights, w_local, comm, *, capacity: int, config=None,
                      comm_programs: int | None = None, backend: str | None = None,
                      mode: str = "pull", on_overflow: str = "error", validate: bool = True,
                      fused=None) -> MoEDispatch:
    """Route this rank's tokens to the ranks that own their experts and run the first expert
    GEMM there, fused (docs/moe.md); returns :class:`MoEDispatch`.

    ``x`` ``[T, H]``, ``topk_ids`` ``[T, k]`` (int32/int64 global expert ids, experts owned in
    blocks of ``E_local`` by rank), ``topk_weights`` ``[T, k]`` (for the combine),
    ``w_local`` ``[E_local, H, N]``; ``capacity`` rows per (source rank, expert), a multiple of
    the grouped GEMM's ``BLOCK_M``. ``on_overflow``: ``'error'`` raises :class:`LaunchError`
    when an expert gets more than ``capacity`` of this rank's tokens (one host read),
    ``'drop'`` drops the excess and counts it in ``dropped``. ``validate`` checks the expert
    ids' range (one host read, :class:`LaunchError`); without it a choice with a bad id is
    dropped and counted in ``invalid``. Under CUDA-graph capture both host reads are refused:
    pass ``on_overflow='drop', validate=False`` (docs/cuda-graphs.md). ``fused=False`` (or
    ``SYNCOPATE=0``), or a world of one rank, takes :func:`moe_dispatch_gemm_reference`;
    ``fused`` None lets the op choose (:func:`syncopate.ops.choice.decide_shape`, the same on
    every rank), ``fused=True``, ``backend`` or ``comm_programs`` the fused kernel; without
    ``comm_programs`` the decision's count (2, 4 or 8 by the cost model; 2 without a
    calibration file for the GPU type).

    Checked on an H200 in one-GPU loopback (W = 2 and 4) against the unfused path (bitwise)
    and fp32 per-expert matmuls; the kernel and schedule are emulated in
    tests/test_emulate_moe.py.
    """
    cfg = grouped_config(config, capacity, w_local, x)
    use_fused = driver.use_fused(fused) and comm.world_size > 1  # one rank: nothing to send
    if use_fused:
        W, E, El, H, N = _check(x, topk_ids, topk_weights, w_local, comm, capacity, cfg)
        use_fused, comm_programs = moe_routing.moe_path(
            SPEC, comm, (E, capacity, H, N), x.dtype, fused=fused, backend=backend,
            comm_programs=comm_programs)
    backend = backend or "sm"
    comm_programs = 2 if comm_programs is None else int(comm_programs)
    if not use_fused:
        return moe_dispatch_gemm_reference(x, topk_ids, topk_weights, w_local, comm,
                                           capacity=capacity, config=cfg,
                                           on_overflow=on_overflow, validate=validate)
    refuse_capture(on_overflow, validate)
    if backend not in ("sm", "nvshmem"):
        raise LaunchError(f"moe_dispatch_gemm needs comm programs in the kernel (backend 'sm' "
                          f"or 'nvshmem'), got {backend!r}: the count branch's waits are inside "
                          f"the tiles")
    C, me = capacity, comm.rank
    cfg.check()
    packed = _pack(x, topk_ids, E, W, C, on_overflow, validate)
    fk = moe_dispatch_gemm_fused_kernel(comm, E, C, H, x.dtype, cfg=cfg, backend=backend,
                                        comm_programs=comm_programs, mode=mode)
    # the symmetric X [W*E*C, H] and CNT [W*W*E] int32 of this shape
    X, CNT = moe_routing.moe_buffers(comm, "moe_dispatch.XC", E, C, H, x.dtype)
    fk.before_staging()  # peers finished reading the previous call's blocks
    X[me * E * C:(me + 1) * E * C].copy_(packed.send.reshape(E * C, H))
    CNT[me * W * E:(me + 1) * W * E].copy_(packed.counts.reshape(-1))
    out = torch.empty((W * El * C, N), dtype=x.dtype, device=x.device)
    launch_grouped(fk, *kernel_args(X, CNT, w_local.contiguous(), out, me, W, E, C, cfg), cfg)
    counts = CNT.view(W, W, E)[:, me, me * El:(me + 1) * El].clone()
    return MoEDispatch(out.view(W * El, C, N), counts, packed.slot, packed.dropped,
                       topk_weights, CNT.clone(), packed.invalid)


SPEC = moe_routing.moe_spec("moe_dispatch_gemm", moe_dispatch_gemm,
                            ("experts", "capacity", "hidden", "n"),
                            "E,C,H,N (e.g. 8,640,4096,14336)", dispatch=True)
