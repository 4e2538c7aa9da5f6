"""The chunk-schedule data model: regions, placements, tensors, chunks and schedules.

A *schedule* says how tensors move between the ranks of one launch, cut into *chunks*.  It is
plain data: the compiler reads it (which region arrives when, which region leaves when), the
runtime executes it (who copies what to whom, which flags to wait on), the verifier
(:mod:`.verify`) proves it delivers what it promises, and the cost model (:mod:`.cost`) ranks
alternatives.  Everything here is pure Python (no torch, no Triton) so that every layer can
import it cheaply.

All classes are frozen dataclasses.  Construction checks what each object can check on its own
(types, non-negative integers, known dtype and enum values, non-empty regions) and raises
:class:`~syncopate.errors.ScheduleError` saying what to change.  Whether the objects fit
*together* (regions inside their tensor, ranks below the world size, known tensor names, unique
chunk ids, dependencies that can be ordered, data that is where it is read) is the verifier's
job: that way a broken schedule can still be built, shown and reported on in full, and
:func:`~syncopate.schedule.verify` lists every problem at once instead of the first.
"""

from __future__ import annotations

import hashlib
import operator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Iterable, Mapping, Sequence

from .. import dtypes as _dtypes
from ..errors import ScheduleError

# --------------------------------------------------------------------------------------------
# dtypes
# --------------------------------------------------------------------------------------------

# The table lives in :mod:`syncopate.dtypes` (one table for the schedule, the compiler and the
# runtime); these names stay because schedule code and users import them from here.

#: Canonical dtype names (as written in schedule JSON) and their element sizes in bytes.
DTYPE_SIZES: dict[str, int] = _dtypes.SIZES


def normalize_dtype(name: Any) -> str:
    """The canonical name of a dtype given as a canonical name, a torch/Triton spelling
    (``"bfloat16"``, ``"torch.bfloat16"``, ``"*bf16"``, ``"fp8e4nv"``) or a torch dtype.
    An unknown name raises :class:`~syncopate.errors.DtypeError` (a :class:`ScheduleError`)."""
    return _dtypes.canonical(name)


def dtype_size(name: Any) -> int:
    """Element size in bytes of a dtype (any spelling :func:`normalize_dtype` accepts)."""
    return _dtypes.element_bytes(name)


# --------------------------------------------------------------------------------------------
# small validation helpers
# --------------------------------------------------------------------------------------------

def _as_int(value: Any, what: str, problems: list[str], minimum: int | None = 0) -> int:
    if isinstance(value, bool):
        problems.append(f"{what} must be an integer, got {value!r}")
        return 0
    try:
        v = operator.index(value)
    except TypeError:
        problems.append(f"{what} must be an integer, got {value!r}")
        return 0
    if minimum is not None and v < minimum:
        problems.append(f"{what} must be >= {minimum}, got {v}")
    return v


def _as_int_tuple(value: Any, what: str, problems: list[str], minimum: int = 0) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        problems.append(f"{what} must be a list of integers, got {value!r}")
        return ()
    return tuple(_as_int(v, f"{what}[{i}]", problems, minimum) for i, v in enumerate(value))


def _raise(problems: list[str], prefix: str) -> None:
    if problems:
        raise ScheduleError([f"{prefix}: {p}" for p in problems])


def _fmt_list(values: Iterable[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def format_ranks(mask: int) -> str:
    """A contribution set (bit ``r`` = rank ``r``'s contribution) as ``{0, 2}``."""
    ranks = [r for r in range(mask.bit_length()) if mask >> r & 1]
    return "{" + ", ".join(map(str, ranks)) + "}"


# --------------------------------------------------------------------------------------------
# box algebra on raw (lo, hi) tuples: shared by Region and the verifier's hot loops
# --------------------------------------------------------------------------------------------

Box = tuple[tuple[int, ...], tuple[int, ...]]  # (lo, hi), hi exclusive


def box_intersection(alo, ahi, blo, bhi) -> Box | None:
    """The intersection of two boxes, or None when it is empty."""
    lo = []
    hi = []
    for a0, a1, b0, b1 in zip(alo, ahi, blo, bhi):
        l = a0 if a0 > b0 else b0
        h = a1 if a1 < b1 else b1
        if l >= h:
            return None
        lo.append(l)
        hi.append(h)
    return tuple(lo), tuple(hi)


def boxes_overlap(alo, ahi, blo, bhi) -> bool:
    """Whether two boxes share an element (cheaper than :func:`box_intersection`)."""
    for a0, a1, b0, b1 in zip(alo, ahi, blo, bhi):
        if a0 >= b1 or b0 >= a1:
            return False
    return True


def box_subtract(alo, ahi, blo, bhi) -> list[Box]:
    """``a`` minus ``b`` as at most ``2 * ndim`` disjoint boxes (slab decomposition: peel off
    the parts of ``a`` below and above ``b`` one dim at a time)."""
    inter = box_intersection(alo, ahi, blo, bhi)
    if inter is None:
        return [(tuple(alo), tuple(ahi))]
    ilo, ihi = inter
    out: list[Box] = []
    lo, hi = list(alo), list(ahi)
    for d in range(len(lo)):
        if lo[d] < ilo[d]:
            h = list(hi)
            h[d] = ilo[d]
            out.append((tuple(lo), tuple(h)))
            lo[d] = ilo[d]
        if ihi[d] < hi[d]:
            l2 = list(lo)
            l2[d] = ihi[d]
            out.append((tuple(l2), tuple(hi)))
            hi[d] = ihi[d]
    return out


def box_difference(target: Box, covers: Iterable[Box]) -> list[Box]:
    """The parts of ``target`` that no box of ``covers`` covers (disjoint boxes)."""
    remaining = [target]
    for clo, chi in covers:
        if not remaining:
            break
        nxt: list[Box] = []
        for rlo, rhi in remaining:
            nxt.extend(box_subtract(rlo, rhi, clo, chi))
        remaining = nxt
    return remaining


def box_volume(lo, hi) -> int:
    v = 1
    for a, b in zip(lo, hi):
        v *= b - a
    return v


def coalesce_boxes(items: list, key=lambda item: None) -> list:
    """Merge boxes that share a ``key`` and are adjacent along one dim with equal extents in
    all others.  ``items`` are tuples ``(lo, hi, *rest)``; ``key(item)`` must be equal for two
    items to merge.  Keeps region maps small when a tensor arrives in many chunks, and makes
    error messages name one region instead of its fragments."""
    items = list(items)
    merged = True
    while merged and len(items) > 1:
        merged = False
        for i in range(len(items)):
            a = items[i]
            for j in range(i + 1, len(items)):
                b = items[j]
                if key(a) != key(b):
                    continue
                alo, ahi, blo, bhi = a[0], a[1], b[0], b[1]
                diff = [d for d in range(len(alo)) if (alo[d], ahi[d]) != (blo[d], bhi[d])]
                if len(diff) != 1:
                    continue
                d = diff[0]
                if ahi[d] == blo[d] or bhi[d] == alo[d]:
                    lo = list(alo)
                    hi = list(ahi)
                    lo[d] = min(alo[d], blo[d])
                    hi[d] = max(ahi[d], bhi[d])
                    items[i] = (tuple(lo), tuple(hi)) + tuple(a[2:])
                    del items[j]
                    merged = True
                    break
            if merged:
                break
    return items


# --------------------------------------------------------------------------------------------
# Region
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Region:
    """A box of a tensor: ``offsets[d] <= index[d] < offsets[d] + sizes[d]`` in every dim.

    Offsets and sizes are in elements of the global (unsharded) tensor, so the same region means
    the same data on every rank.  A region may be empty (a size of 0) as an intermediate value;
    chunks and placements refuse empty regions.
    """

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]

    def __post_init__(self):
        problems: list[str] = []
        offsets = _as_int_tuple(self.offsets, "offsets", problems)
        sizes = _as_int_tuple(self.sizes, "sizes", problems)
        if not problems and len(offsets) != len(sizes):
            problems.append(f"offsets {_fmt_list(offsets)} has {len(offsets)} entries but sizes "
                            f"{_fmt_list(sizes)} has {len(sizes)}; give one offset and one size "
                            f"per tensor dim")
        if not problems and not offsets:
            problems.append("a region needs at least one dim")
        _raise(problems, "region")
        object.__setattr__(self, "offsets", offsets)
        object.__setattr__(self, "sizes", sizes)

    @classmethod
    def _raw(cls, lo: tuple[int, ...], hi: tuple[int, ...]) -> "Region":
        """Build from a (lo, hi) box without validation (internal hot paths)."""
        r = object.__new__(cls)
        object.__setattr__(r, "offsets", tuple(lo))
        object.__setattr__(r, "sizes", tuple(b - a for a, b in zip(lo, hi)))
        return r

    @classmethod
    def from_bounds(cls, lo: Sequence[int], hi: Sequence[int]) -> "Region":
        """The region ``[lo, hi)`` (hi exclusive)."""
        return cls(tuple(lo), tuple(b - a for a, b in zip(lo, hi)))

    @classmethod
    def full(cls, shape: Sequence[int]) -> "Region":
        """The whole tensor of ``shape``."""
        return cls((0,) * len(shape), tuple(shape))

    # -- geometry ------------------------------------------------------------------------------

    @property
    def ndim(self) -> int:
        return len(self.sizes)

    @property
    def stops(self) -> tuple[int, ...]:
        """Exclusive upper bounds, ``offsets + sizes``."""
        return tuple(o + s for o, s in zip(self.offsets, self.sizes))

    @property
    def box(self) -> Box:
        return self.offsets, self.stops

    @property
    def volume(self) -> int:
        """Number of elements."""
        v = 1
        for s in self.sizes:
            v *= s
        return v

    @property
    def is_empty(self) -> bool:
        return any(s == 0 for s in self.sizes)

    def _check_ndim(self, other: "Region") -> None:
        if other.ndim != self.ndim:
            raise ScheduleError(f"regions {self} and {other} have different numbers of dims")

    def intersection(self, other: "Region") -> "Region | None":
        """The common part of two regions, or None when they do not overlap."""
        self._check_ndim(other)
        box = box_intersection(self.offsets, self.stops, other.offsets, other.stops)
        return None if box is None else Region._raw(*box)

    def overlaps(self, other: "Region") -> bool:
        self._check_ndim(other)
        return box_intersection(self.offsets, self.stops, other.offsets, other.stops) is not None

    def disjoint(self, other: "Region") -> bool:
        return not self.overlaps(other)

    def contains(self, other: "Region") -> bool:
        """Whether every element of ``other`` is in this region (an empty ``other`` is)."""
        self._check_ndim(other)
        if other.is_empty:
            return True
        return all(a <= b and bs <= as_ for a, b, as_, bs in
                   zip(self.offsets, other.offsets, self.stops, other.stops))

    def subtract(self, other: "Region") -> list["Region"]:
        """This region minus ``other``, as disjoint regions (at most ``2 * ndim``)."""
        self._check_ndim(other)
        return [Region._raw(lo, hi) for lo, hi in
                box_subtract(self.offsets, self.stops, other.offsets, other.stops)]

    def difference(self, others: Iterable["Region"]) -> list["Region"]:
        """The parts of this region that none of ``others`` covers, as disjoint regions."""
        boxes = box_difference(self.box, [o.box for o in others])
        return [Region._raw(lo, hi) for lo, hi in coalesce_boxes(boxes)]

    def covered_by(self, others: Iterable["Region"]) -> bool:
        """Whether the union of ``others`` covers this region."""
        return not box_difference(self.box, [o.box for o in others])

    def within(self, shape: Sequence[int]) -> bool:
        """Whether the region lies inside a tensor of ``shape`` (and has its number of dims)."""
        return len(shape) == self.ndim and all(
            o >= 0 and o + s <= n for o, s, n in zip(self.offsets, self.sizes, shape))

    def split(self, dim: int, parts: int) -> list["Region"]:
        """Cut along ``dim`` into ``parts`` pieces as even as possible (the first
        ``size % parts`` pieces get one more index); empty pieces are left out."""
        pieces = []
        for off, size in even_split(self.sizes[dim], parts):
            if size == 0:
                continue
            offsets = list(self.offsets)
            sizes = list(self.sizes)
            offsets[dim] += off
            sizes[dim] = size
            pieces.append(Region(tuple(offsets), tuple(sizes)))
        return pieces

    def slices(self) -> tuple[slice, ...]:
        """Index with these to get the region's data: ``tensor[region.slices()]``."""
        return tuple(slice(o, o + s) for o, s in zip(self.offsets, self.sizes))

    # -- text ----------------------------------------------------------------------------------

    def __str__(self) -> str:
        # Spelled with the JSON keys, so an error says exactly which values to edit.
        return f"offsets {_fmt_list(self.offsets)} sizes {_fmt_list(self.sizes)}"

    def brief(self) -> str:
        """Slice notation, ``[4096:8192, 0:4096]`` (tables)."""
        return "[" + ", ".join(f"{o}:{o + s}" for o, s in zip(self.offsets, self.sizes)) + "]"


def even_split(n: int, parts: int) -> list[tuple[int, int]]:
    """``(offset, size)`` of ``parts`` pieces of ``range(n)``, as even as possible: the first
    ``n % parts`` pieces get ``n // parts + 1`` indices, the others ``n // parts`` (some may be
    empty when ``parts > n``)."""
    if parts < 1:
        raise ScheduleError(f"cannot split into {parts} parts; use at least 1")
    base, extra = divmod(n, parts)
    out = []
    off = 0
    for i in range(parts):
        size = base + (1 if i < extra else 0)
        out.append((off, size))
        off += size
    return out


# --------------------------------------------------------------------------------------------
# Placement, TensorSpec
# --------------------------------------------------------------------------------------------

def _as_region(value: Any, what: str) -> Region:
    if isinstance(value, Region):
        return value
    if isinstance(value, Mapping) and "offsets" in value and "sizes" in value:
        return Region(value["offsets"], value["sizes"])
    if isinstance(value, (tuple, list)) and len(value) == 2:
        return Region(value[0], value[1])
    raise ScheduleError(f"{what} must be a Region (offsets, sizes), got {value!r}")


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
        try:
            region = _as_region(self.region, "region")
        except ScheduleError as e:
            problems.extend(e.problems)
            region = None
        if region is not None and region.is_empty:
            problems.append(f"region {region} is empty; leave the placement out")
        if not isinstance(self.partial, bool):
            problems.append(f"partial must be true or false, got {self.partial!r}")
        if not isinstance(self.extra, Mapping):
            problems.append(f"extra must be a dict, got {self.extra!r}")
        _raise(problems, "placement")
        object.__setattr__(self, "rank", rank)
        object.__setattr__(self, "region", region)
        object.__setattr__(self, "extra", dict(self.extra))


def _as_placements(value: Any, what: str, problems: list[str]) -> tuple[Placement, ...]:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        problems.append(f"{what} must be a list of Placement, got {value!r}")
        return ()
    out = []
    for i, p in enumerate(value):
        if not isinstance(p, Placement):
            problems.append(f"{what}[{i}] must be a Placement, got {p!r}")
        else:
            out.append(p)
    return tuple(out)


@dataclass(frozen=True)
class TensorSpec:
    """A tensor that the schedule moves: its global shape and dtype, where its data is before
    (``initial``) and where it must be after (``final``) the schedule runs.

    ``final`` placements are never partial: the schedule's promise is that rank ``p`` holds the
    complete value of every final region of ``p``.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    initial: tuple[Placement, ...] = ()
    final: tuple[Placement, ...] = ()
    extra: dict = field(default_factory=dict, hash=False)

    def __post_init__(self):
        problems: list[str] = []
        if not isinstance(self.name, str) or not self.name:
            problems.append(f"name must be a non-empty string, got {self.name!r}")
        shape = _as_int_tuple(self.shape, "shape", problems, minimum=1)
        if not problems and not shape:
            problems.append("shape needs at least one dim")
        dtype = self.dtype
        try:
            dtype = normalize_dtype(self.dtype)
        except ScheduleError as e:
            problems.extend(e.problems)
        initial = _as_placements(self.initial, "initial", problems)
        final = _as_placements(self.final, "final", problems)
        if not isinstance(self.extra, Mapping):
            problems.append(f"extra must be a dict, got {self.extra!r}")
        _raise(problems, f"tensor {self.name!r}" if isinstance(self.name, str) else "tensor")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", dtype)
        object.__setattr__(self, "initial", initial)
        object.__setattr__(self, "final", final)
        object.__setattr__(self, "extra", dict(self.extra))

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


# --------------------------------------------------------------------------------------------
# Chunk
# --------------------------------------------------------------------------------------------

MODES = ("push", "pull")
REDUCES = ("none", "sum")


@dataclass(frozen=True)
class Chunk:
    """One transfer: ``region`` of ``tensor`` goes from rank ``src`` to rank ``dst``.

    * ``mode``: who executes it -- ``push``: the source writes into the destination's buffer;
      ``pull``: the destination reads from the source's buffer.  The executing rank runs its
      chunks in ``step`` order (see :mod:`.verify` for the exact ordering rules).
    * ``step``: the chunk's position in the plans of both its ranks; chunks of the same step are
      concurrent.
    * ``reduce``: ``none`` copies (the source must hold the complete value); ``sum`` adds the
      source's (partial) value into the destination's.
    * ``after``: ids of chunks that must have arrived before this one starts (dependencies that
      the step rule does not give, typically across ranks: "forward what you received").
    * ``id``: dense ``0..C-1`` over the schedule; it indexes the flag arrays (docs/fused-abi.md).
    """

    id: int
    tensor: str
    region: Region
    src: int
    dst: int
    mode: str = "push"
    step: int = 0
    reduce: str = "none"
    after: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict, hash=False)

    def __post_init__(self):
        problems: list[str] = []
        cid = _as_int(self.id, "id", problems)
        if not isinstance(self.tensor, str) or not self.tensor:
            problems.append(f"tensor must be a tensor name, got {self.tensor!r}")
        region = None
        try:
            region = _as_region(self.region, "region")
        except ScheduleError as e:
            problems.extend(e.problems)
        if region is not None and region.is_empty:
            problems.append(f"region {region} is empty; a chunk must move at least one element "
                            f"(drop the chunk)")
        src = _as_int(self.src, "src", problems)
        dst = _as_int(self.dst, "dst", problems)
        if self.mode not in MODES:
            problems.append(f"mode must be 'push' or 'pull', got {self.mode!r}")
        step = _as_int(self.step, "step", problems)
        if self.reduce not in REDUCES:
            problems.append(f"reduce must be 'none' or 'sum', got {self.reduce!r}")
        after = _as_int_tuple(self.after, "after", problems)
        if not isinstance(self.extra, Mapping):
            problems.append(f"extra must be a dict, got {self.extra!r}")
        _raise(problems, f"chunk {self.id!r}")
        object.__setattr__(self, "id", cid)
        object.__setattr__(self, "region", region)
        object.__setattr__(self, "src", src)
        object.__setattr__(self, "dst", dst)
        object.__setattr__(self, "step", step)
        object.__setattr__(self, "after", after)
        object.__setattr__(self, "extra", dict(self.extra))

    @property
    def executor(self) -> int:
        """The rank that starts this chunk's copy by its ``mode`` (push: the source, pull: the
        destination). Which rank *runs* it depends on the backend as well -- on ``sm`` a
        ``sum`` chunk runs on its destination whatever its mode: ask
        :func:`syncopate.schedule.execution.executor`, the one definition the verifier, the
        passes and the runtime share."""
        return self.src if self.mode == "push" else self.dst

    # box accessors the compiler passes use: [lo, hi) per dim
    @property
    def lo(self) -> tuple[int, ...]:
        return self.region.offsets

    @property
    def hi(self) -> tuple[int, ...]:
        return self.region.stops

    @property
    def volume(self) -> int:
        return self.region.volume

    def intersects(self, lo: Sequence[int], hi: Sequence[int]) -> bool:
        """Whether the box ``[lo, hi)`` overlaps this chunk's region."""
        return all(a < d and c < b for a, b, c, d in zip(lo, hi, self.lo, self.hi))

    def peer(self, rank: int) -> int:
        """The other end of the chunk seen from ``rank`` (which must be ``src`` or ``dst``)."""
        if rank == self.src:
            return self.dst
        if rank == self.dst:
            return self.src
        raise ValueError(f"rank {rank} is neither source nor destination of chunk {self.id}")

    def describe(self) -> str:
        """``chunk 3 (A rank 1 -> 0, pull, step 0, offsets [..] sizes [..])`` for messages."""
        red = ", sum" if self.reduce == "sum" else ""
        return (f"chunk {self.id} ({self.tensor} rank {self.src} -> {self.dst}, {self.mode}"
                f"{red}, step {self.step}, {self.region})")


# --------------------------------------------------------------------------------------------
# Schedule
# --------------------------------------------------------------------------------------------

#: Top-level JSON keys that ``meta`` cannot use (they would collide when written).
RESERVED_KEYS = ("format", "version", "world_size", "tensors", "chunks")


@dataclass(frozen=True)
class Schedule:
    """A chunk schedule: ``world_size`` ranks, the tensors it moves, the chunks that move them.

    ``meta`` holds free-form information (templates record their name and arguments under
    ``"template"``); it is written at the top level of the JSON document.  Build one, then call
    :meth:`verify` (or :func:`syncopate.schedule.verify`) before trusting it: the compiler and
    runtime helpers below assume a schedule that verifies and raise the verifier's
    :class:`~syncopate.errors.ScheduleError` when it does not.
    """

    world_size: int
    tensors: dict
    chunks: tuple
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        problems: list[str] = []
        ws = _as_int(self.world_size, "world_size", problems, minimum=1)
        tensors: dict[str, TensorSpec] = {}
        if isinstance(self.tensors, Mapping):
            items = list(self.tensors.items())
        elif isinstance(self.tensors, Iterable) and not isinstance(self.tensors, (str, bytes)):
            items = [(getattr(t, "name", None), t) for t in self.tensors]
        else:
            problems.append(f"tensors must be a dict name -> TensorSpec, got {self.tensors!r}")
            items = []
        for key, spec in items:
            if not isinstance(spec, TensorSpec):
                problems.append(f"tensors[{key!r}] must be a TensorSpec, got {spec!r}")
            elif key != spec.name:
                problems.append(f"tensors[{key!r}] is named {spec.name!r}; use the same name "
                                f"as key and TensorSpec.name")
            elif key in tensors:
                problems.append(f"tensor {key!r} is given twice")
            else:
                tensors[key] = spec
        chunks: list[Chunk] = []
        if isinstance(self.chunks, Iterable) and not isinstance(self.chunks, (str, bytes, Mapping)):
            for i, c in enumerate(self.chunks):
                if not isinstance(c, Chunk):
                    problems.append(f"chunks[{i}] must be a Chunk, got {c!r}")
                else:
                    chunks.append(c)
        else:
            problems.append(f"chunks must be a list of Chunk, got {self.chunks!r}")
        meta = self.meta if self.meta is not None else {}
        if not isinstance(meta, Mapping):
            problems.append(f"meta must be a dict, got {meta!r}")
            meta = {}
        for key in meta:
            if not isinstance(key, str):
                problems.append(f"meta key {key!r} must be a string")
            elif key in RESERVED_KEYS:
                problems.append(f"meta key {key!r} is reserved by the JSON format; rename it")
        _raise(problems, "schedule")
        object.__setattr__(self, "world_size", ws)
        object.__setattr__(self, "tensors", tensors)
        object.__setattr__(self, "chunks", tuple(chunks))
        object.__setattr__(self, "meta", dict(meta))

    # Dataclass hashing would hash the dicts; hash the canonical content instead.
    def __hash__(self) -> int:
        return hash(self.content_hash())

    def __getstate__(self):
        # Drop cached analyses (cached_property entries) when pickling: they are derived data.
        return {k: self.__dict__[k] for k in ("world_size", "tensors", "chunks", "meta")}

    def __setstate__(self, state):
        for k, v in state.items():
            object.__setattr__(self, k, v)

    # -- lookups -------------------------------------------------------------------------------

    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    @property
    def ranks(self) -> range:
        return range(self.world_size)

    @cached_property
    def _by_id(self) -> dict[int, Chunk]:
        return {c.id: c for c in self.chunks}

    def chunk(self, chunk_id: int) -> Chunk:
        """The chunk with id ``chunk_id``."""
        try:
            return self._by_id[chunk_id]
        except KeyError:
            raise ScheduleError(f"no chunk with id {chunk_id}; ids are "
                                f"{sorted(self._by_id)[:8]}...") from None

    def tensor(self, name: str) -> TensorSpec:
        try:
            return self.tensors[name]
        except KeyError:
            raise ScheduleError(f"no tensor {name!r}; the schedule has "
                                f"{', '.join(self.tensors) or 'no tensors'}") from None

    def ordered_chunks(self, tensor: str | None = None) -> list[Chunk]:
        """All chunks (of ``tensor`` if given) sorted by ``(step, id)``."""
        return sorted((c for c in self.chunks if tensor is None or c.tensor == tensor),
                      key=lambda c: (c.step, c.id))

    def chunks_to(self, rank: int, tensor: str | None = None) -> list[Chunk]:
        """Chunks whose destination is ``rank``, sorted by ``(step, id)``."""
        return [c for c in self.ordered_chunks(tensor) if c.dst == rank]

    def chunks_from(self, rank: int, tensor: str | None = None) -> list[Chunk]:
        """Chunks whose source is ``rank``, sorted by ``(step, id)``."""
        return [c for c in self.ordered_chunks(tensor) if c.src == rank]

    def chunks_executed_by(self, rank: int) -> list[Chunk]:
        """Chunks that ``rank`` runs (push: it is the source; pull: the destination), in the
        order it runs them, ``(step, id)``."""
        return [c for c in self.ordered_chunks() if c.executor == rank]

    # -- what the compiler passes ask ----------------------------------------------------------

    def chunked_dims(self, tensor: str) -> list[int]:
        """Dims along which some chunk of ``tensor`` does not span the whole tensor."""
        shape = self.tensor(tensor).shape
        dims = set()
        for c in self.chunks:
            if c.tensor == tensor:
                for d, (a, b) in enumerate(zip(c.lo, c.hi)):
                    if a != 0 or b != shape[d]:
                        dims.add(d)
        return sorted(dims)

    def is_received(self, tensor: str) -> bool:
        """Whether any chunk moves ``tensor``."""
        return any(c.tensor == tensor for c in self.chunks)

    def is_produced(self, tensor: str) -> bool:
        """Whether ranks compute ``tensor`` and then send (partial) chunks of it."""
        return any(c.tensor == tensor and c.reduce == "sum" for c in self.chunks) or any(
            p.partial for p in self.tensor(tensor).initial)

    def arrival_key(self, rank: int, tensor: str, dim: int, lo: int, hi: int) -> int:
        """When the band ``[lo, hi)`` along ``dim`` is complete on ``rank``: 0 if held initially
        (non-partial), else 1 + the position of the last chunk that delivers part of it."""
        key = 0
        for i, c in enumerate(self.chunks_to(rank, tensor)):
            if c.lo[dim] < hi and lo < c.hi[dim]:
                key = max(key, i + 1)
        return key

    def departure_key(self, rank: int, tensor: str, dim: int, lo: int, hi: int,
                      sends_only: bool = False) -> int:
        """How early the band ``[lo, hi)`` is needed (smaller is earlier) on a rank that
        computes ``tensor`` and sends it: the step of the first chunk that reads the band from
        this rank, or, for ``sum`` chunks, that reduces into this rank (the destination adds
        its own partial, so it must compute those rows as early as the source does: every rank
        then computes the bands of step 0 first, and the reductions of step 0 overlap the rest
        of the GEMM).  Bands no chunk touches come last.

        ``sends_only`` (the ``epilogue`` reduction): only chunks leaving this rank count, so a
        rank computes every band it sends before the bands it owns -- its own tiles then wait
        for the other ranks' partials, which those ranks computed first, and since no rank waits
        before it has produced everything it sends, the waits cannot form a cycle."""
        key = None
        for c in self.chunks:
            into_me = c.reduce == "sum" and c.dst == rank and not sends_only
            if c.tensor != tensor or not (c.src == rank or into_me):
                continue
            if c.lo[dim] < hi and lo < c.hi[dim]:
                key = c.step if key is None else min(key, c.step)
        return key if key is not None else 1 << 30

    def element_bytes(self, tensor: str) -> int:
        return self.tensor(tensor).elem_size

    def chunk_bytes(self, chunk: Chunk | int) -> int:
        """Bytes a chunk moves."""
        c = chunk if isinstance(chunk, Chunk) else self.chunk(chunk)
        return c.region.volume * self.tensor(c.tensor).elem_size

    @property
    def total_bytes(self) -> int:
        return sum(self.chunk_bytes(c) for c in self.chunks)

    # -- what the compiler and runtime ask (need a schedule that verifies) ----------------------

    @cached_property
    def _analysis(self):
        from .verify import analyze
        return analyze(self)

    def _verified(self):
        a = self._analysis
        if a.problems:
            raise ScheduleError(a.problems)
        return a

    def verify(self) -> "Schedule":
        """Raise :class:`ScheduleError` listing every problem unless the schedule verifies;
        return ``self`` so that ``schedule.verify()`` chains."""
        self._verified()
        return self

    def dependencies(self, chunk_id: int) -> tuple[int, ...]:
        """Ids of the chunks that must have arrived before ``chunk_id`` starts: its ``after``
        list plus the step rule's (earlier-step chunks delivering an overlapping region to its
        source).  The runtime waits on exactly these flags."""
        a = self._verified()
        return a.deps[chunk_id]

    def arrival_order(self, rank: int, tensor: str) -> list[Region]:
        """Regions of ``tensor`` in the order they become complete on ``rank``: the non-partial
        initial placements of ``rank`` first (in placement order), then, for each chunk into
        ``rank`` by ``(step, id)``, the part of its region that this chunk completes.  A copy
        completes its whole region; a ``sum`` counts when it completes its region (the last
        of the sums into it), so an intermediate hop of a ring reduce-scatter, which leaves
        a partial, adds nothing.  Tile-remap runs the consumer's tiles in this order."""
        a = self._verified()
        spec = self.tensor(tensor)
        full = (1 << self.world_size) - 1
        out = [p.region for p in spec.initial if p.rank == rank and not p.partial]
        held = [(p.region.offsets, p.region.stops, full if not p.partial else 1 << rank)
                for p in spec.initial if p.rank == rank]
        for c in self.chunks_to(rank, tensor):
            done: list[Box] = []
            for region, mask in a.delivered[c.id]:
                lo, hi = region.box
                nxt = []
                pieces = []
                for blo, bhi, m in held:
                    inter = box_intersection(blo, bhi, lo, hi)
                    if inter is None:
                        nxt.append((blo, bhi, m))
                        continue
                    nxt.extend((plo, phi, m) for plo, phi in box_subtract(blo, bhi, lo, hi))
                    pieces.append(inter + (m,))
                gaps = box_difference((lo, hi), [(q[0], q[1]) for q in pieces])
                pieces.extend(g + (0,) for g in gaps)
                for plo, phi, m in pieces:
                    new = full if c.reduce == "none" else m | mask
                    if new == full and m != full:
                        done.append((plo, phi))
                    nxt.append((plo, phi, new))
                held = nxt
            out.extend(Region._raw(lo, hi) for lo, hi in coalesce_boxes(done))
        return out

    def departure_order(self, rank: int, tensor: str) -> list[Region]:
        """Distinct regions of ``tensor`` that ``rank`` must compute early, in ``(step, id)``
        order: regions of chunks leaving ``rank``, and regions of ``sum`` chunks reducing into
        it (the destination adds its own partial, so it needs those rows as early as the source
        does).  A producer kernel (GEMM + reduce-scatter) computes its tiles in this order --
        the compiler's ``tile-remap`` uses the same rule (``Schedule.arrival_key``,
        ``departure_key``) -- so the first chunks can leave, and be reduced, early."""
        self.tensor(tensor)
        seen: list[Region] = []
        mine = [c for c in self.chunks if c.tensor == tensor and
                (c.src == rank or (c.reduce == "sum" and c.dst == rank))]
        for c in sorted(mine, key=lambda c: (c.step, c.id)):
            if c.region not in seen:
                seen.append(c.region)
        return seen

    def content_hash(self) -> str:
        """A stable hex digest of the schedule's content (SHA-256 of its canonical JSON, chunks
        in id order, keys sorted): equal for equal schedules however they were built or
        formatted, so it can key compile caches.  ``meta`` is included: templates derive it from
        the same arguments that determine the chunks, and a user's meta may matter to them."""
        from .json_io import canonical_json
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()

    def to_json(self, compact: bool = False) -> str:
        from .json_io import dumps
        return dumps(self, compact=compact)

