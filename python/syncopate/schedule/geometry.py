"""Regions and box algebra of the schedule model: a :class:`Region` is a box of a tensor in
global coordinates; the ``box_*`` functions work on raw ``(lo, hi)`` tuples in the verifier's
hot loops. Also the small validation helpers every model class uses (they collect problems and
raise one :class:`~syncopate.errors.ScheduleError` listing them all)."""

from __future__ import annotations

import itertools
import math
import operator
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..errors import ScheduleError

# --------------------------------------------------------------------------------------------
# small validation helpers
# --------------------------------------------------------------------------------------------

def _as_int(value: Any, what: str, problems: list[str], minimum: int = 0) -> int:
    if isinstance(value, bool):
        problems.append(f"{what} must be an integer, got {value!r}")
        return 0
    try:
        v = operator.index(value)
    except TypeError:
        problems.append(f"{what} must be an integer, got {value!r}")
        return 0
    if v < minimum:
        problems.append(f"{what} must be >= {minimum}, got {v}")
    return v


def _as_int_tuple(value: Any, what: str, problems: list[str], minimum: int = 0) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        problems.append(f"{what} must be a list of integers, got {value!r}")
        return ()
    return tuple(_as_int(v, f"{what}[{i}]", problems, minimum) for i, v in enumerate(value))


def _as_items(value: Any, cls: type, what: str, problems: list[str]) -> tuple:
    """``value``'s items that are ``cls`` instances; a problem for each other one, or for a
    ``value`` that is not a list."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        problems.append(f"{what} must be a list of {cls.__name__}, got {value!r}")
        return ()
    out = []
    for i, x in enumerate(value):
        if isinstance(x, cls):
            out.append(x)
        else:
            problems.append(f"{what}[{i}] must be a {cls.__name__}, got {x!r}")
    return tuple(out)


def _settle(obj, problems: list[str], prefix: str, **fields) -> None:
    """End a frozen dataclass's ``__post_init__``: raise every problem found (each prefixed
    with what ``obj`` is), else store its checked and normalized ``fields``."""
    if problems:
        raise ScheduleError([f"{prefix}: {p}" for p in problems])
    for name, value in fields.items():
        object.__setattr__(obj, name, value)


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


def coalesce_boxes(boxes: Iterable[Box]) -> list[Box]:
    """Merge boxes that are adjacent along one dim with equal extents in all others, first
    pair first, until no pair merges.  Keeps region maps small when a tensor arrives in many
    chunks, and makes error messages name one region instead of its fragments."""
    items = list(boxes)
    merged = True
    while merged:
        merged = False
        for i, j in itertools.combinations(range(len(items)), 2):
            (alo, ahi), (blo, bhi) = items[i], items[j]
            diff = [d for d in range(len(alo)) if (alo[d], ahi[d]) != (blo[d], bhi[d])]
            if len(diff) == 1 and (ahi[diff[0]] == blo[diff[0]] or bhi[diff[0]] == alo[diff[0]]):
                d = diff[0]
                lo, hi = list(alo), list(ahi)
                lo[d], hi[d] = min(alo[d], blo[d]), max(ahi[d], bhi[d])
                items[i] = (tuple(lo), tuple(hi))
                del items[j]
                merged = True
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
        _settle(self, problems, "region", offsets=offsets, sizes=sizes)

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
        return math.prod(self.sizes)

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
        return self.intersection(other) is not None

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
        return [self._band(dim, off, size) for off, size in even_split(self.sizes[dim], parts)
                if size]

    def _band(self, dim: int, off: int, size: int) -> "Region":
        """The ``size`` indices along ``dim`` from ``off`` (relative to this region's offset)."""
        offsets, sizes = list(self.offsets), list(self.sizes)
        offsets[dim] += off
        sizes[dim] = size
        return Region(tuple(offsets), tuple(sizes))

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
    return [(i * base + min(i, extra), base + (1 if i < extra else 0)) for i in range(parts)]


# --------------------------------------------------------------------------------------------
# Placement, TensorSpec
# --------------------------------------------------------------------------------------------

def _as_region(value: Any, problems: list[str]) -> Region | None:
    """``value`` (a Region, ``{"offsets", "sizes"}`` or ``(offsets, sizes)``) as a Region, or
    None with what is wrong added to ``problems``."""
    try:
        if isinstance(value, Region):
            return value
        if isinstance(value, Mapping) and "offsets" in value and "sizes" in value:
            return Region(value["offsets"], value["sizes"])
        if isinstance(value, (tuple, list)) and len(value) == 2:
            return Region(value[0], value[1])
    except ScheduleError as e:
        problems.extend(e.problems)
        return None
    problems.append(f"region must be a Region (offsets, sizes), got {value!r}")
    return None
