"""A chunk: one transfer of a schedule (:class:`Chunk`) and the values its fields take.

Below :mod:`.model`: the verifier, the execution model and the JSON writer read chunks, and
the :class:`~.model.Schedule` reads them (its methods run the verifier).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from .geometry import Region, _as_int, _as_int_tuple, _as_region, _settle

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
        region = _as_region(self.region, problems)
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
        _settle(self, problems, f"chunk {self.id!r}", id=cid, region=region, src=src, dst=dst,
                step=step, after=after, extra=dict(self.extra))

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
