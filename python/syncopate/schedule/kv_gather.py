"""The K/V plan of ring attention: K and V gathered together along the sequence.

Why a template of its own: ring attention's kernel reads a KV block of K and the same block of
V in one loop iteration, so the two tensors must arrive block by block *together*: the chunk of
V's block from owner ``o`` has the same step as K's (they are concurrent), and chunk ids run K's
chunks first, then V's, in the all-gather's (round, rank, piece) order.  Both tensors are
sharded along ``dim`` (the sequence) in the same way, so the inner-loop remap's visiting order
(local blocks first, then in arrival order) fits both.

``order='swizzle'`` fetches every block from its owner (all-gather order); ``order='ring'``
passes blocks around the ring ``r -> r + 1``, one hop per round (the ring-attention pattern:
only neighbour links, each hop forwarding what arrived at the previous round).
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from .model import Placement, Region, Schedule, TensorSpec
from .templates import ORDERS, _Builder, _gather, _meta, _pieces, _validate, shard_regions


def kv_all_gather(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
                  order: str = "swizzle", mode: str = "pull", split: int = 1,
                  tensors: Sequence[str] = ("K", "V"), tensor: str | None = None) -> Schedule:
    """All-gather of two (or more) tensors of one ``shape`` along ``dim``, block by block
    together.  ``tensor`` (the CLI's ``--tensor``) is refused: name them with ``tensors``."""
    if tensor is not None:
        raise ScheduleError("kv_all_gather gathers several tensors: name them with "
                            "tensors=('K', 'V'), not tensor=")
    names = tuple(tensors)
    if len(names) < 1 or len(set(names)) != len(names):
        raise ScheduleError(f"kv_all_gather: tensors={list(names)} must be distinct names")
    for t in names:
        shape, dtype, dims = _validate("kv_all_gather", shape, dtype, world_size, {"dim": dim},
                                       order, ORDERS, mode, split, t)
    dim = dims["dim"]
    W = world_size
    shards = shard_regions(shape, dim, W)
    b = _Builder()
    for t in names:
        _gather(b, t, _pieces(shards, dim, split), W, order, mode, split)
    specs = {t: TensorSpec(t, shape, dtype,
                           [Placement(r, s) for r, s in enumerate(shards) if s is not None],
                           [Placement(r, Region.full(shape)) for r in range(W)])
             for t in names}
    return Schedule(W, specs, b.chunks,
                    _meta("kv_all_gather", shape=shape, dtype=dtype, world_size=W, dim=dim,
                          order=order, mode=mode, split=split, tensors=list(names)))


__all__ = ["kv_all_gather"]
