"""The chunk generators the schedule templates are built from: a chunk builder, the argument
checks every template shares, even sharding, the placements of a sharded or whole tensor, and
the gather and reduce-scatter chunk patterns (the orders are described in :mod:`.templates`).
Below :mod:`.templates`, :mod:`.kv_gather`, :mod:`.scaled_gather` and :mod:`.moe`, which all
build on them.
"""

from __future__ import annotations

from typing import Callable, Sequence

from ..errors import ScheduleError
from .model import (MAX_WORLD_SIZE, MODES, Chunk, Placement, Region, Schedule, TensorSpec,
                    _as_dtype, even_split)

ORDERS = ("swizzle", "ring")


class _Builder:
    def __init__(self):
        self.chunks: list[Chunk] = []

    def add(self, tensor: str, region: Region, src: int, dst: int, mode: str, step: int,
            reduce: str = "none", after: Sequence[int] = ()) -> int:
        cid = len(self.chunks)
        self.chunks.append(Chunk(cid, tensor, region, src, dst, mode, step, reduce,
                                 tuple(sorted(set(after)))))
        return cid


def _validate(template: str, shape, dtype, world_size, dims: dict[str, int], order: str,
              orders: Sequence[str], mode: str, split: int, tensor: str):
    problems: list[str] = []
    try:
        shape = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        problems.append(f"shape must be a list of positive integers, got {shape!r}")
        shape = ()
    if shape and any(s < 1 for s in shape):
        problems.append(f"shape {list(shape)} must have positive sizes")
    if not shape and not problems:
        problems.append("shape needs at least one dim")
    dtype = _as_dtype(dtype, problems)
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        problems.append(f"world_size must be an integer >= 1, got {world_size!r}")
    elif world_size > MAX_WORLD_SIZE:  # before building W * (W - 1) chunks
        problems.append(f"world_size {world_size} is more than {MAX_WORLD_SIZE} ranks")
    out_dims = {}
    for name, d in dims.items():
        if isinstance(d, bool) or not isinstance(d, int) or not shape \
                or not -len(shape) <= d < len(shape):
            problems.append(f"{name} must be a dim of shape {list(shape)} (0..{len(shape) - 1} "
                            f"or negative from the end), got {d!r}")
        else:
            out_dims[name] = d % len(shape)
    if order not in orders:
        problems.append(f"order must be one of {', '.join(map(repr, orders))}, got {order!r}")
    if mode not in MODES:
        problems.append(f"mode must be 'push' or 'pull', got {mode!r}")
    if isinstance(split, bool) or not isinstance(split, int) or split < 1:
        problems.append(f"split must be an integer >= 1, got {split!r}")
    if not isinstance(tensor, str) or not tensor:
        problems.append(f"tensor must be a non-empty name, got {tensor!r}")
    if problems:
        raise ScheduleError([f"{template}: {p}" for p in problems])
    return shape, dtype, out_dims


def _positive(**values) -> list[str]:
    """A problem for each of ``values`` that is not a positive integer."""
    return [f"{k} must be a positive integer, got {v!r}" for k, v in values.items()
            if isinstance(v, bool) or not isinstance(v, int) or v < 1]


def shard_regions(shape: Sequence[int], dim: int, world_size: int) -> list[Region | None]:
    """Block ``r`` of ``shape`` along ``dim`` for each rank ``r`` (None when it is empty)."""
    full = Region.full(shape)
    return [full._band(dim, off, size) if size else None
            for off, size in even_split(shape[dim], world_size)]


def _pieces(shards: list[Region | None], dim: int, split: int) -> list[list[Region]]:
    return [s.split(dim, split) if s is not None else [] for s in shards]


def owned(shards: list[Region | None]) -> list[Placement]:
    """Rank ``r`` holds shard ``r`` (a rank whose shard is empty holds nothing)."""
    return [Placement(r, s) for r, s in enumerate(shards) if s is not None]


def everywhere(shape: Sequence[int], W: int, partial: bool = False) -> list[Placement]:
    """Every rank holds the whole tensor (``partial``: its own contribution to the sum)."""
    full = Region.full(shape)
    return [Placement(r, full, partial=partial) for r in range(W)]


def gathered(t: str, shape, dtype: str, shards, W: int) -> TensorSpec:
    """An all-gathered tensor: shard ``r`` on rank ``r`` before, the whole on every rank after."""
    return TensorSpec(t, shape, dtype, owned(shards), everywhere(shape, W))


def scattered(t: str, shape, dtype: str, shards, W: int) -> TensorSpec:
    """A reduce-scattered tensor: every rank's partial of the whole before, shard ``r`` summed on
    rank ``r`` after."""
    return TensorSpec(t, shape, dtype, everywhere(shape, W, partial=True), owned(shards))


def _meta(name: str, **args) -> dict:
    args = {k: (list(v) if isinstance(v, tuple) else v) for k, v in args.items()}
    return {"template": {"name": name, **args}}


# --------------------------------------------------------------------------------------------
# chunk generators shared by the templates

def _gather(b: _Builder, tensor: str, pieces: list[list[Region]], W: int, order: str,
            mode: str, split: int, step0: int = 0,
            first_after: Callable[[int, Region], Sequence[int]] = lambda o, p: ()) -> None:
    """All-gather chunks: every rank ends with every owner's pieces.  ``first_after(owner,
    piece)`` gives dependencies of the chunks that read a piece from its owner (all-reduce
    uses it to wait for the reduce-scatter that completes the piece)."""
    if order == "swizzle":
        for s in range(W - 1):
            for r in range(W):
                o = (r + s + 1) % W
                for k, piece in enumerate(pieces[o]):
                    b.add(tensor, piece, o, r, mode, step0 + s * split + k,
                          after=first_after(o, piece))
        return
    last: dict[tuple[int, int, int], int] = {}  # (holder, owner, piece) -> delivering chunk
    for s in range(W - 1):
        for r in range(W):
            o = (r - s - 1) % W
            src = (r - 1) % W
            for k, piece in enumerate(pieces[o]):
                after = first_after(o, piece) if s == 0 else (last[(src, o, k)],)
                last[(r, o, k)] = b.add(tensor, piece, src, r, mode, step0 + s * split + k,
                                        after=after)


def _reduce_scatter(b: _Builder, tensor: str, pieces: list[list[Region]], W: int, order: str,
                    mode: str, split: int, step0: int = 0) -> None:
    """Reduce-scatter chunks: rank d ends with the complete sum of its own pieces; steps from
    ``step0`` on (after a gather the same kernel's tiles wait for)."""
    if order == "swizzle":
        for s in range(W - 1):
            for r in range(W):
                d = (r + s + 1) % W
                for k, piece in enumerate(pieces[d]):
                    b.add(tensor, piece, r, d, mode, step0 + s * split + k, reduce="sum")
        return
    # Ring: the partial of block x starts at rank x + 1 and travels x + 1 -> x + 2 -> ... -> x,
    # each rank adding its own partial before forwarding; the last hop lands on the owner.
    last: dict[tuple[int, int, int], int] = {}
    for s in range(W - 1):
        for r in range(W):
            x = (r - s - 1) % W
            dst = (r + 1) % W
            for k, piece in enumerate(pieces[x]):
                after = () if s == 0 else (last[(r, x, k)],)
                last[(dst, x, k)] = b.add(tensor, piece, r, dst, mode, step0 + s * split + k,
                                          reduce="sum", after=after)


def sharded_schedule(template: str, shape, dtype: str, world_size: int, dim: int, order: str,
                     mode: str, split: int, names: Sequence[str], meta: dict,
                     chunks: Callable = _gather, spec: Callable = gathered) -> Schedule:
    """The tensors ``names`` (one ``shape`` and ``dtype``) sharded evenly along ``dim``, every
    shard cut into ``split`` pieces: ``chunks`` (:func:`_gather`: an all-gather, block by block
    together) adds each tensor's chunks and ``spec(name, shape, dtype, shards, W)`` gives its
    placements; ``meta``: the template's arguments after ``dim``, for its ``meta``."""
    for t in names:
        shape, dtype, dims = _validate(template, shape, dtype, world_size, {"dim": dim}, order,
                                       ORDERS, mode, split, t)
    dim, W = dims["dim"], world_size
    shards = shard_regions(shape, dim, W)
    b = _Builder()
    for t in names:
        chunks(b, t, _pieces(shards, dim, split), W, order, mode, split)
    return Schedule(W, {t: spec(t, shape, dtype, shards, W) for t in names}, b.chunks,
                    _meta(template, shape=shape, dtype=dtype, world_size=W, dim=dim, **meta))
