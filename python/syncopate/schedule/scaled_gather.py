"""The FP8 all-gather plan: an operand and its row-wise scales gathered together along its rows.

Why a template of its own: an FP8 GEMM tile reads rows of ``A`` (``[M, K]``, e4m3) and the same
rows of its scale (``[M, 1]``, fp32; one per row of A, ``torch._scaled_mm``'s row-wise layout),
so a row block of the scale must arrive with the row block of A it belongs to. The two tensors
have different shapes, so :func:`~.kv_gather.kv_all_gather` (tensors of one shape) does not
apply; here both are cut along ``dim`` into the same shards and the same ``split`` pieces (the
scale's pieces are A's pieces with every other dimension collapsed to 1), and each piece of
the scale is a chunk with the same step as A's (concurrent). Chunk ids run A's chunks first,
then the scale's, each in the all-gather's (round, rank, piece) order.
"""

from __future__ import annotations

from typing import Sequence

from ..errors import ScheduleError
from .generators import (ORDERS, _Builder, _gather, _meta, _pieces, _validate, gathered,
                         shard_regions)
from .model import Schedule


def scale_shape(shape: Sequence[int], dim: int = 0) -> tuple[int, ...]:
    """The row-wise scale's shape of a tensor of ``shape`` scaled along ``dim``: ``[M, 1]`` for
    ``[M, K]`` and ``dim=0``."""
    return tuple(int(s) if i == dim else 1 for i, s in enumerate(shape))


def scaled_all_gather(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
                      order: str = "swizzle", mode: str = "pull", split: int = 1,
                      tensors: Sequence[str] = ("A", "SA"), scale_dtype: str = "fp32",
                      tensor: str | None = None) -> Schedule:
    """All-gather of ``tensors[0]`` (``shape``, ``dtype``) and its scale ``tensors[1]``
    (:func:`scale_shape`, ``scale_dtype``) along ``dim``, piece by piece together.
    ``tensor`` (the CLI's ``--tensor``) is refused: name them with ``tensors``."""
    if tensor is not None:
        raise ScheduleError("scaled_all_gather gathers a tensor and its scale: name them with "
                            "tensors=('A', 'SA'), not tensor=")
    names = tuple(tensors)
    if len(names) != 2 or names[0] == names[1]:
        raise ScheduleError(f"scaled_all_gather: tensors={list(names)} must be two distinct "
                            f"names (the operand, then its scale)")
    shape, dtype, dims = _validate("scaled_all_gather", shape, dtype, world_size, {"dim": dim},
                                   order, ORDERS, mode, split, names[0])
    dim = dims["dim"]
    sshape, sdtype, _ = _validate("scaled_all_gather", scale_shape(shape, dim), scale_dtype,
                                  world_size, {"dim": dim}, order, ORDERS, mode, split, names[1])
    W = world_size
    b = _Builder()
    specs = {}
    for t, shp, dt in ((names[0], shape, dtype), (names[1], sshape, sdtype)):
        shards = shard_regions(shp, dim, W)
        _gather(b, t, _pieces(shards, dim, split), W, order, mode, split)
        specs[t] = gathered(t, shp, dt, shards, W)
    return Schedule(W, specs, b.chunks,
                    _meta("scaled_all_gather", shape=shape, dtype=dtype, world_size=W, dim=dim,
                          order=order, mode=mode, split=split, tensors=list(names),
                          scale_dtype=sdtype))


__all__ = ["scale_shape", "scaled_all_gather"]
