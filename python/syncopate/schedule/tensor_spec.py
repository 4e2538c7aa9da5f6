"""Where a schedule's tensors live: :class:`Placement` (a rank holds a region, complete or
partial) and :class:`TensorSpec` (a tensor's shape, dtype and initial/final placements), with
the dtype names they use.

Part of the schedule data model (:mod:`.model` re-exports every name here, so ``from
syncopate.schedule.model import TensorSpec`` keeps working); split from it so that
:mod:`.model` holds the chunks and the schedule.  Pure Python, like the rest of the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from .. import dtypes as _dtypes
from ..errors import ScheduleError
from .geometry import Region, _as_int, _as_int_tuple, _as_items, _as_region, _settle

__all__ = ["DTYPE_SIZES", "normalize_dtype", "dtype_size", "Placement", "TensorSpec", "VIEWS"]

#: how kernels address a schedule tensor (:class:`TensorSpec`'s ``view``)
VIEWS = ("global", "rank")

# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

# The table lives in :mod:`syncopate.dtypes` (one table for the schedule, the compiler and the
# runtime); these names stay because schedule code and users import them from here (and from
# :mod:`.model`).

#: Canonical dtype names (as written in schedule JSON) and their element sizes in bytes.
DTYPE_SIZES: dict[str, int] = _dtypes.SIZES
#: The canonical name of a dtype in any spelling (``"bfloat16"``, ``"torch.bfloat16"``,
#: ``"*bf16"``, ``"fp8e4nv"``, a torch dtype); an unknown name raises
#: :class:`~syncopate.errors.DtypeError` (a :class:`ScheduleError`).
normalize_dtype = _dtypes.canonical
#: Element size in bytes of a dtype (any spelling :func:`normalize_dtype` accepts).
dtype_size = _dtypes.element_bytes


def _as_dtype(name: Any, problems: list[str]) -> Any:
    """:func:`normalize_dtype`, collecting an unknown name's problem (``name`` is kept)."""
    try:
        return normalize_dtype(name)
    except ScheduleError as e:
        problems.extend(e.problems)
        return name


# --------------------------------------------------------------------------------------------
# placements and tensors
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Placement:
    """Rank ``rank`` holds ``region`` of a tensor.

    ``partial=False``: the rank holds the complete value there.  ``partial=True``: it holds only
    its own contribution to a sum over all ranks (each rank's partial result, as before a
    reduce-scatter); the complete value is the sum of every rank's contribution.  ``extra``
    keeps unknown JSON keys so that they survive a round trip.
    """

    rank: int
    region: Region
    partial: bool = False
    extra: dict = field(default_factory=dict, hash=False)

    def __post_init__(self):
        problems: list[str] = []
        rank = _as_int(self.rank, "rank", problems)
        region = _as_region(self.region, problems)
        if region is not None and region.is_empty:
            problems.append(f"region {region} is empty; leave the placement out")
        if not isinstance(self.partial, bool):
            problems.append(f"partial must be true or false, got {self.partial!r}")
        if not isinstance(self.extra, Mapping):
            problems.append(f"extra must be a dict, got {self.extra!r}")
        _settle(self, problems, "placement", rank=rank, region=region, extra=dict(self.extra))


@dataclass(frozen=True)
class TensorSpec:
    """A tensor that the schedule moves: its global shape and dtype, where its data is before
    (``initial``) and where it must be after (``final``) the schedule runs.

    ``final`` placements are never partial: the schedule's promise is that rank ``p`` holds the
    complete value of every final region of ``p``.

    ``produced``: the fused kernel *computes* the initial placements during the launch and the
    chunks carry them away as tiles finish (an all-to-all of attention outputs).  A tensor with
    partial placements or ``sum`` chunks is produced whatever this says (a reduce-scatter's
    partials are computed); this flag is how a copy schedule says so, since the same chunks
    could also deliver a tensor that was staged before the launch.

    ``view``: how a kernel addresses the tensor.  ``"global"``: at global coordinates (the
    kernel's boxes are the same on every rank).  ``"rank"``: each rank's kernel addresses only
    the part it holds -- its one final placement when it reads the tensor, its one initial
    placement when it produces it -- at coordinates relative to that part, and the compiler
    offsets the operand by the part's position (Ulysses: every rank runs the same attention
    kernel over "its" heads).  The parts must be equal boxes at offsets ``rank * step``
    (:meth:`rank_part`).
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    initial: tuple[Placement, ...] = ()
    final: tuple[Placement, ...] = ()
    extra: dict = field(default_factory=dict, hash=False)
    produced: bool = False
    view: str = "global"

    def __post_init__(self):
        problems: list[str] = []
        if not isinstance(self.name, str) or not self.name:
            problems.append(f"name must be a non-empty string, got {self.name!r}")
        shape = _as_int_tuple(self.shape, "shape", problems, minimum=1)
        if not problems and not shape:
            problems.append("shape needs at least one dim")
        dtype = _as_dtype(self.dtype, problems)
        initial = _as_items(self.initial, Placement, "initial", problems)
        final = _as_items(self.final, Placement, "final", problems)
        if not isinstance(self.extra, Mapping):
            problems.append(f"extra must be a dict, got {self.extra!r}")
        if not isinstance(self.produced, bool):
            problems.append(f"produced must be true or false, got {self.produced!r}")
        if self.view not in VIEWS:
            problems.append(f"view must be one of {', '.join(map(repr, VIEWS))}, got "
                            f"{self.view!r}")
        _settle(self, problems, f"tensor {self.name!r}" if isinstance(self.name, str) else "tensor",
                shape=shape, dtype=dtype, initial=initial, final=final, extra=dict(self.extra))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def elem_size(self) -> int:
        return DTYPE_SIZES[self.dtype]

    @property
    def nbytes(self) -> int:
        return Region.full(self.shape).volume * self.elem_size

    @property
    def full_region(self) -> Region:
        return Region.full(self.shape)

    def initial_of(self, rank: int) -> tuple[Placement, ...]:
        return tuple(p for p in self.initial if p.rank == rank)

    def final_of(self, rank: int) -> tuple[Placement, ...]:
        return tuple(p for p in self.final if p.rank == rank)

    def rank_part(self, world_size: int, produced: bool) -> tuple[tuple[int, ...],
                                                                  tuple[int, ...]]:
        """``(sizes, step)`` of the parts a ``view="rank"`` tensor's kernels address: rank
        ``r``'s part is the box at ``r * step`` of ``sizes`` -- its one initial placement when
        the kernel produces the tensor, its one final placement when it reads it.

        Why so rigid: one compiled kernel serves every rank, so the offset of the part must be
        a function of the rank the kernel can compute (``syn_rank * step``) and the part must
        have the same shape everywhere (the kernel's boxes are checked against it once).
        Raises :class:`ScheduleError` saying what does not fit."""
        which = "initial" if produced else "final"
        places = getattr(self, which)
        parts = []
        problems = []
        for r in range(world_size):
            mine = [p for p in places if p.rank == r]
            if len(mine) != 1 or mine[0].partial:
                problems.append(f"rank {r} has {len(mine)} {which} placement(s) of {self.name!r}"
                                f"{' (partial)' if mine and mine[0].partial else ''}; a "
                                f"view='rank' tensor needs exactly one complete one per rank")
            else:
                parts.append(mine[0].region)
        if problems:
            raise ScheduleError(problems)
        sizes = parts[0].sizes
        step = tuple(b - a for a, b in zip(parts[0].offsets, parts[1].offsets)) \
            if world_size > 1 else tuple(0 for _ in sizes)
        for r, reg in enumerate(parts):
            want = tuple(o + r * s for o, s in zip(parts[0].offsets, step))
            if reg.sizes != sizes or reg.offsets != want or any(parts[0].offsets):
                raise ScheduleError(
                    f"the {which} placements of {self.name!r} are not equal boxes at offsets "
                    f"rank * step from the origin (rank {r}: {reg}); a view='rank' tensor needs "
                    f"them so, since the kernel offsets its operand by syn_rank * step")
        return tuple(sizes), step
