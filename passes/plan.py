"""The schedule as the passes see it: read from the ``syncopate.schedule`` module attribute.

The attribute holds the schedule in the JSON interchange format (version 1), already verified
by :func:`syncopate.schedule.verify` when the compile API attached it.  The passes only need a
few questions answered (which chunks reach or leave a rank, in which order bands of a tensor
become available, along which dims chunks cut a tensor), so they read the JSON into this small
model rather than depending on the schedule package's classes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp, StringAttr

from syncopate.errors import CompileError

ATTR_SCHEDULE = "syncopate.schedule"
ATTR_OPERANDS = "syncopate.operands"
ATTR_BACKEND = "syncopate.backend"
ATTR_COMM_PROGRAMS = "syncopate.comm_programs"
ATTR_REDUCE = "syncopate.reduce"  # "comm" (default) | "epilogue"
#: fault injection (tests, debugging a hang): "1,5" -- chunks whose executing rank moves the
#: data but never signals CHUNK[c]; their readers' watchdog must fire and name them
ATTR_WITHHOLD = "syncopate.test_withhold"


@dataclass(frozen=True)
class PChunk:
    id: int
    tensor: str
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    src: int
    dst: int
    mode: str
    step: int
    reduce: str
    after: tuple[int, ...]

    def intersects(self, lo, hi) -> bool:
        return all(a < d and c < b for a, b, c, d in zip(lo, hi, self.lo, self.hi))

    @property
    def volume(self) -> int:
        v = 1
        for a, b in zip(self.lo, self.hi):
            v *= b - a
        return v


@dataclass(frozen=True)
class PTensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    initial: tuple[tuple[int, tuple, tuple, bool], ...]   # (rank, lo, hi, partial)
    final: tuple[tuple[int, tuple, tuple], ...]


_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "f16": 2, "fp32": 4, "f32": 4, "fp8e4m3": 1, "fp8e5m2": 1,
                "int8": 1, "int16": 2, "int32": 4, "int64": 8, "fp64": 8, "f64": 8}


class Plan:
    """A parsed schedule (JSON v1)."""

    def __init__(self, data: dict):
        self.data = data
        self.world_size = int(data["world_size"])
        self.tensors: dict[str, PTensor] = {}
        for name, t in data["tensors"].items():
            init = tuple((int(p["rank"]), tuple(p["offsets"]),
                          tuple(o + s for o, s in zip(p["offsets"], p["sizes"])),
                          bool(p.get("partial", False))) for p in t["initial"])
            final = tuple((int(p["rank"]), tuple(p["offsets"]),
                           tuple(o + s for o, s in zip(p["offsets"], p["sizes"])))
                          for p in t["final"])
            self.tensors[name] = PTensor(name, tuple(t["shape"]), t["dtype"], init, final)
        self.chunks = [PChunk(int(c["id"]), c["tensor"], tuple(c["offsets"]),
                              tuple(o + s for o, s in zip(c["offsets"], c["sizes"])),
                              int(c["src"]), int(c["dst"]), c.get("mode", "pull"),
                              int(c.get("step", 0)), c.get("reduce", "none"),
                              tuple(c.get("after", ()))) for c in data["chunks"]]
        self.chunks.sort(key=lambda c: c.id)
        ids = [c.id for c in self.chunks]
        if ids != list(range(len(ids))):
            raise CompileError("chunk ids must be dense 0..C-1 for the flag layout; renumber the "
                               "schedule's chunks")

    @classmethod
    def from_module(cls, module: ModuleOp) -> "Plan":
        attr = module.attributes.get(ATTR_SCHEDULE)
        if not isinstance(attr, StringAttr):
            raise CompileError(f"the module has no '{ATTR_SCHEDULE}' attribute: attach a schedule "
                               f"(syncopate.compile does; lit tests set it by hand)")
        try:
            return cls(json.loads(attr.data))
        except (KeyError, TypeError, ValueError) as e:
            raise CompileError(f"the '{ATTR_SCHEDULE}' attribute is not a schedule: {e}") from e

    # questions the passes ask ------------------------------------------------------------------
    @property
    def num_chunks(self) -> int:
        return len(self.chunks)

    def modes(self) -> set[str]:
        return {c.mode for c in self.chunks}

    def chunks_to(self, rank: int, tensor: str | None = None) -> list[PChunk]:
        return sorted((c for c in self.chunks if c.dst == rank and
                       (tensor is None or c.tensor == tensor)), key=lambda c: (c.step, c.id))

    def chunks_from(self, rank: int, tensor: str | None = None) -> list[PChunk]:
        return sorted((c for c in self.chunks if c.src == rank and
                       (tensor is None or c.tensor == tensor)), key=lambda c: (c.step, c.id))

    def chunked_dims(self, tensor: str) -> list[int]:
        """Dims along which some chunk of ``tensor`` does not span the whole tensor."""
        shape = self.tensors[tensor].shape
        dims = set()
        for c in self.chunks:
            if c.tensor != tensor:
                continue
            for d, (a, b) in enumerate(zip(c.lo, c.hi)):
                if a != 0 or b != shape[d]:
                    dims.add(d)
        return sorted(dims)

    def is_received(self, tensor: str) -> bool:
        return any(c.tensor == tensor for c in self.chunks)

    def is_produced(self, tensor: str) -> bool:
        """Whether ranks compute ``tensor`` and then send (partial) chunks of it."""
        return any(c.tensor == tensor and c.reduce == "sum" for c in self.chunks) or any(
            p[3] for p in self.tensors[tensor].initial)

    def element_bytes(self, tensor: str) -> int:
        return _DTYPE_BYTES.get(self.tensors[tensor].dtype, 2)

    def arrival_key(self, rank: int, tensor: str, dim: int, lo: int, hi: int) -> int:
        """When the band ``[lo, hi)`` along ``dim`` is complete on ``rank``: 0 if held initially
        (non-partial), else 1 + the position of the last chunk that delivers part of it."""
        order = self.chunks_to(rank, tensor)
        key = 0
        for i, c in enumerate(order):
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
