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

:class:`Schedule` is defined here; :class:`Chunk` in :mod:`.chunk`, :class:`Region` and the box
algebra in :mod:`.geometry`, :class:`Placement`, :class:`TensorSpec` and the dtype names in
:mod:`.tensor_spec`.  Every one of those names is re-exported here, so ``from
syncopate.schedule.model import X`` works for all of them.  The schedule's methods run the
verifier (:mod:`.verify`) and the JSON writer (:mod:`.json_write`), which read the parts below.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Mapping

from ..errors import ScheduleError
from .chunk import MODES, REDUCES, Chunk  # noqa: F401
from .geometry import (Box, Region, _as_int, _as_items, _settle, box_difference,  # noqa: F401
                       box_intersection, box_subtract, boxes_overlap, coalesce_boxes, even_split,
                       format_ranks)
from .json_write import canonical_json, dumps
from .tensor_spec import (DTYPE_SIZES, VIEWS, Placement, TensorSpec, _as_dtype,  # noqa: F401
                          dtype_size, normalize_dtype)
from .verify import Analysis, analyze

#: the most ranks a schedule may have: far above any NVLink domain (72 GPUs), and low enough
#: that the verifier's per-rank tables stay small (a typo like 10**12 ranks must be refused,
#: not run out of memory)
MAX_WORLD_SIZE = 4096

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
        if ws > MAX_WORLD_SIZE:
            problems.append(f"world_size {ws} is more than {MAX_WORLD_SIZE} ranks: give the "
                            f"number of ranks the schedule runs on")
            ws = 1
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
        chunks = _as_items(self.chunks, Chunk, "chunks", problems)
        meta = self.meta if self.meta is not None else {}
        if not isinstance(meta, Mapping):
            problems.append(f"meta must be a dict, got {meta!r}")
            meta = {}
        for key in meta:
            if not isinstance(key, str):
                problems.append(f"meta key {key!r} must be a string")
            elif key in RESERVED_KEYS:
                problems.append(f"meta key {key!r} is reserved by the JSON format; rename it")
        _settle(self, problems, "schedule", world_size=ws, tensors=tensors, chunks=chunks,
                meta=dict(meta))

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

    # -- what the compiler passes ask ----------------------------------------------------------

    def chunked_dims(self, tensor: str) -> list[int]:
        """Dims along which some chunk of ``tensor`` does not span the whole tensor."""
        shape = self.tensor(tensor).shape
        return sorted({d for c in self.chunks if c.tensor == tensor
                       for d, (a, b) in enumerate(zip(c.lo, c.hi)) if a != 0 or b != shape[d]})

    def is_received(self, tensor: str) -> bool:
        """Whether any chunk moves ``tensor``."""
        return any(c.tensor == tensor for c in self.chunks)

    def is_produced(self, tensor: str) -> bool:
        """Whether ranks compute ``tensor`` and then send (partial) chunks of it: ``sum``
        chunks, partial initial placements, or a copy schedule marked ``produced``."""
        spec = self.tensor(tensor)
        return spec.produced or any(c.tensor == tensor and c.reduce == "sum"
                                    for c in self.chunks) or any(p.partial for p in spec.initial)

    def rank_part(self, tensor: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(sizes, step)`` of rank ``r``'s part ``[r * step, r * step + sizes)`` of a
        ``view="rank"`` tensor (:meth:`TensorSpec.rank_part`)."""
        return self.tensor(tensor).rank_part(self.world_size, self.is_produced(tensor))

    def arrival_key(self, rank: int, tensor: str, dim: int, lo: int, hi: int) -> int:
        """When the band ``[lo, hi)`` along ``dim`` is complete on ``rank``: 0 if held initially
        (non-partial), else 1 + the position of the last chunk that delivers part of it."""
        return max((i + 1 for i, c in enumerate(self.chunks_to(rank, tensor))
                    if c.lo[dim] < hi and lo < c.hi[dim]), default=0)

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
        return min((c.step for c in self._departing(rank, tensor, sends_only)
                    if c.lo[dim] < hi and lo < c.hi[dim]), default=1 << 30)

    def _departing(self, rank: int, tensor: str, sends_only: bool = False) -> list[Chunk]:
        """The chunks of ``tensor`` that read it on ``rank`` and, unless ``sends_only``, the
        ``sum`` chunks into ``rank`` (it adds its own partial): what ``rank`` computes early."""
        return [c for c in self.chunks if c.tensor == tensor and (
            c.src == rank or (c.reduce == "sum" and c.dst == rank and not sends_only))]

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
    def _analysis(self) -> Analysis:
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
        return self._verified().deps[chunk_id]

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
                # what is held in [lo, hi) (gaps hold nothing), and everything else held
                pieces = [i + (m,) for blo, bhi, m in held
                          if (i := box_intersection(blo, bhi, lo, hi)) is not None]
                pieces += [g + (0,) for g in box_difference((lo, hi), [p[:2] for p in pieces])]
                held = [(plo, phi, m) for blo, bhi, m in held
                        for plo, phi in box_subtract(blo, bhi, lo, hi)]
                for plo, phi, m in pieces:
                    new = full if c.reduce == "none" else m | mask
                    if new == full and m != full:
                        done.append((plo, phi))
                    held.append((plo, phi, new))
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
        for c in sorted(self._departing(rank, tensor), key=lambda c: (c.step, c.id)):
            if c.region not in seen:
                seen.append(c.region)
        return seen

    def content_hash(self) -> str:
        """A stable hex digest of the schedule's content (SHA-256 of its canonical JSON, chunks
        in id order, keys sorted): equal for equal schedules however they were built or
        formatted, so it can key compile caches.  ``meta`` is included: templates derive it from
        the same arguments that determine the chunks, and a user's meta may matter to them."""
        return hashlib.sha256(canonical_json(self).encode()).hexdigest()

    def to_json(self, compact: bool = False) -> str:
        return dumps(self, compact=compact)


def verify(schedule: Schedule) -> None:
    """Raise :class:`ScheduleError` listing every problem unless ``schedule`` verifies (see
    :mod:`syncopate.schedule.verify` for the exact semantics)."""
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"verify() takes a Schedule, got {type(schedule).__name__}; "
                            f"load JSON with syncopate.schedule.as_schedule first")
    schedule._verified()
