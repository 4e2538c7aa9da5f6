"""Schedule JSON, the interchange format (version 1).

The format is normative; an example with every required key::

    {"format": "syncopate.schedule", "version": 1, "world_size": 2,
     "tensors": {"A": {"shape": [8192, 4096], "dtype": "bf16",
       "initial": [{"rank": 0, "offsets": [0, 0], "sizes": [4096, 4096]},
                   {"rank": 1, "offsets": [4096, 0], "sizes": [4096, 4096]}],
       "final":   [{"rank": 0, "offsets": [0, 0], "sizes": [8192, 4096]},
                   {"rank": 1, "offsets": [0, 0], "sizes": [8192, 4096]}]}},
     "chunks": [{"id": 0, "tensor": "A", "offsets": [4096, 0], "sizes": [4096, 4096],
                 "src": 1, "dst": 0, "mode": "pull", "step": 0, "reduce": "none",
                 "after": []}]}

* Every key shown is required.  Placements may add ``"partial": true`` (the rank holds only its
  own contribution to a sum, as before a reduce-scatter).  Tensors may add ``"produced": true``
  (the kernel computes the initial placements during the launch) and ``"view": "rank"`` (each
  rank's kernel addresses only its part); see :class:`~syncopate.schedule.model.TensorSpec`.
* Unknown keys are allowed and preserved: top-level ones in ``Schedule.meta``, the others in the
  ``extra`` dict of their tensor, placement or chunk; :func:`dumps` writes them back.
* ``dtype`` is a canonical name (``bf16``, ``fp16``, ``fp32``, ``fp8e4m3``, ``fp8e5m2``,
  ``int32``, ...); torch/Triton spellings are accepted on input and written canonically.

Loading checks the document's *shape* (keys, types, non-negative integers, known enums) and
reports every problem with its key path (``chunks[3].sizes[1]``) and what to write instead.
Whether the schedule is *correct* is :func:`~syncopate.schedule.verify`'s job.  The writing half
(:func:`to_dict`, :func:`dumps`, :func:`dump`, :func:`canonical_json`) is in :mod:`.json_write`,
below the model; this module reads, and re-exports it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import ScheduleError
from .json_write import FORMAT, VERSION, canonical_json, dump, dumps, to_dict
from .model import (DTYPE_SIZES, MODES, REDUCES, RESERVED_KEYS, VIEWS, Chunk, Placement,
                    Region, Schedule, TensorSpec, normalize_dtype)

__all__ = ["FORMAT", "VERSION", "loads", "load", "dumps", "dump", "as_schedule", "from_dict",
           "to_dict", "canonical_json"]


_PLACEMENT_KEYS = ("rank", "offsets", "sizes")
_TENSOR_KEYS = ("shape", "dtype", "initial", "final")
_CHUNK_KEYS = ("id", "tensor", "offsets", "sizes", "src", "dst", "mode", "step", "reduce",
               "after")


class _Reader:
    """Collects problems with key paths while reading a decoded document."""

    def __init__(self):
        self.problems: list[str] = []

    def bad(self, path: str, msg: str) -> None:
        self.problems.append(f"{path}: {msg}")

    def obj(self, value: Any, path: str, required: tuple[str, ...]) -> dict | None:
        if not isinstance(value, dict):
            self.bad(path, f"expected an object, got {_jtype(value)}")
            return None
        missing = [k for k in required if k not in value]
        if missing:
            self.bad(path, "missing required key" + ("s " if len(missing) > 1 else " ")
                     + ", ".join(repr(k) for k in missing) + "; add "
                     + ", ".join(f'"{k}"' for k in missing))
            return None
        return value

    def int(self, value: Any, path: str, minimum: int = 0) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(path, f"expected an integer, got {_jval(value)}")
            return None
        if value < minimum:
            self.bad(path, f"must be >= {minimum}, got {value}")
            return None
        return value

    def ints(self, value: Any, path: str, minimum: int = 0):
        if not isinstance(value, list):
            self.bad(path, f"expected a list of integers, got {_jval(value)}")
            return None
        out = [self.int(v, f"{path}[{i}]", minimum) for i, v in enumerate(value)]
        return None if any(v is None for v in out) else out

    def choice(self, value: Any, path: str, choices: tuple[str, ...]) -> str | None:
        if value not in choices or not isinstance(value, str):
            self.bad(path, f"expected one of {', '.join(repr(c) for c in choices)}, got "
                           f"{_jval(value)}")
            return None
        return value

    def region(self, d: dict, path: str) -> Region | None:
        offsets = self.ints(d["offsets"], f"{path}.offsets")
        sizes = self.ints(d["sizes"], f"{path}.sizes", minimum=1)
        if offsets is None or sizes is None:
            return None
        if len(offsets) != len(sizes):
            self.bad(path, f"offsets has {len(offsets)} entries but sizes has {len(sizes)}; "
                           f"give one offset and one size per tensor dim")
            return None
        if not offsets:
            self.bad(f"{path}.sizes", "is empty; give one size per tensor dim")
            return None
        return Region(offsets, sizes)


def _jtype(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            int: "an integer", float: "a number", type(None): "null"}.get(type(value),
                                                                          type(value).__name__)


def _jval(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (dict, list, str, int, float, bool,
                                                   type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _extra(d: dict, known: tuple[str, ...]) -> dict:
    return {k: v for k, v in d.items() if k not in known}


def from_dict(doc: Any) -> Schedule:
    """A :class:`Schedule` from a decoded JSON document (``json.loads`` output)."""
    rd = _Reader()
    if not isinstance(doc, dict):
        raise ScheduleError(f"(top level): a schedule is a JSON object, got {_jtype(doc)}")
    if "format" not in doc:
        rd.bad("format", f'missing; add "format": "{FORMAT}"')
    elif doc["format"] != FORMAT:
        rd.bad("format", f'is {_jval(doc["format"])}, not a Syncopate schedule; '
                         f'a schedule has "format": "{FORMAT}"')
    if "version" not in doc:
        rd.bad("version", f'missing; add "version": {VERSION}')
    elif isinstance(doc["version"], bool) or doc["version"] != VERSION:
        rd.bad("version", f"{_jval(doc['version'])} is not supported; this Syncopate reads "
                          f'version {VERSION} (write "version": {VERSION})')
    if rd.problems:  # another format or version: the rest may mean something else
        raise ScheduleError(rd.problems)
    top = rd.obj(doc, "(top level)", ("world_size", "tensors", "chunks"))
    if top is None:
        raise ScheduleError(rd.problems)
    world_size = rd.int(doc["world_size"], "world_size", minimum=1)

    tensors: dict[str, TensorSpec] = {}
    if not isinstance(doc["tensors"], dict):
        rd.bad("tensors", f"expected an object name -> tensor, got {_jtype(doc['tensors'])}")
    else:
        for name, td in doc["tensors"].items():
            path = f"tensors.{name}"
            td = rd.obj(td, path, _TENSOR_KEYS)
            if td is None:
                continue
            n0 = len(rd.problems)
            shape = rd.ints(td["shape"], f"{path}.shape", minimum=1)
            if shape is not None and not shape:
                rd.bad(f"{path}.shape", "is empty; give the tensor's global shape")
            dtype = td["dtype"]
            if not isinstance(dtype, str):
                rd.bad(f"{path}.dtype", f"expected a dtype name, got {_jval(dtype)}")
            else:
                try:
                    dtype = normalize_dtype(dtype)
                except ScheduleError:
                    rd.bad(f"{path}.dtype", f"unknown dtype {_jval(dtype)}; use one of "
                                            f"{', '.join(DTYPE_SIZES)}")
            lists = {}
            for kind in ("initial", "final"):
                items = td[kind]
                if not isinstance(items, list):
                    rd.bad(f"{path}.{kind}", f"expected a list of placements, got "
                                             f"{_jtype(items)}")
                    continue
                out = []
                for i, pd in enumerate(items):
                    ppath = f"{path}.{kind}[{i}]"
                    pd = rd.obj(pd, ppath, _PLACEMENT_KEYS)
                    if pd is None:
                        continue
                    rank = rd.int(pd["rank"], f"{ppath}.rank")
                    region = rd.region(pd, ppath)
                    partial = pd.get("partial", False)
                    if not isinstance(partial, bool):
                        rd.bad(f"{ppath}.partial", f"expected true or false, got "
                                                   f"{_jval(partial)}")
                        continue
                    if rank is not None and region is not None:
                        out.append(Placement(rank, region, partial,
                                             _extra(pd, _PLACEMENT_KEYS + ("partial",))))
                lists[kind] = out
            produced = td.get("produced", False)
            if not isinstance(produced, bool):
                rd.bad(f"{path}.produced", f"expected true or false, got {_jval(produced)}")
            view = rd.choice(td.get("view", "global"), f"{path}.view", VIEWS)
            if len(rd.problems) == n0:
                tensors[name] = TensorSpec(name, shape, dtype, lists["initial"], lists["final"],
                                           _extra(td, _TENSOR_KEYS + ("produced", "view")),
                                           produced, view)

    chunks: list[Chunk] = []
    if not isinstance(doc["chunks"], list):
        rd.bad("chunks", f"expected a list of chunks, got {_jtype(doc['chunks'])}")
    else:
        for i, cd in enumerate(doc["chunks"]):
            path = f"chunks[{i}]"
            cd = rd.obj(cd, path, _CHUNK_KEYS)
            if cd is None:
                continue
            n0 = len(rd.problems)
            cid = rd.int(cd["id"], f"{path}.id")
            tensor = cd["tensor"]
            if not isinstance(tensor, str) or not tensor:
                rd.bad(f"{path}.tensor", f"expected a tensor name, got {_jval(tensor)}")
            region = rd.region(cd, path)
            src = rd.int(cd["src"], f"{path}.src")
            dst = rd.int(cd["dst"], f"{path}.dst")
            mode = rd.choice(cd["mode"], f"{path}.mode", MODES)
            step = rd.int(cd["step"], f"{path}.step")
            reduce = rd.choice(cd["reduce"], f"{path}.reduce", REDUCES)
            after = rd.ints(cd["after"], f"{path}.after")
            if len(rd.problems) == n0:
                chunks.append(Chunk(cid, tensor, region, src, dst, mode, step, reduce,
                                    tuple(after), _extra(cd, _CHUNK_KEYS)))

    meta = _extra(doc, RESERVED_KEYS)
    if rd.problems:
        raise ScheduleError(rd.problems)
    return Schedule(world_size, tensors, chunks, meta)


def loads(text: str | bytes) -> Schedule:
    """A :class:`Schedule` from JSON text (not verified: call :func:`verify`)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"not valid JSON: {e.msg} at line {e.lineno} column {e.colno}; "
                            f"fix the syntax there") from None
    return from_dict(doc)


def load(path: str | os.PathLike) -> Schedule:
    """A :class:`Schedule` from a JSON file (not verified: call :func:`verify`)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise ScheduleError(f"cannot read schedule file {str(path)!r}: {e.strerror or e}") from None
    try:
        return loads(text)
    except ScheduleError as e:
        raise ScheduleError([f"{path}: {p}" for p in e.problems]) from None


def as_schedule(value: Any, verify: bool = False) -> Schedule:
    """Accept what the compiler API accepts: a :class:`Schedule`, JSON text, a path to a JSON
    file (``str`` or ``os.PathLike``), or a decoded JSON document (``dict``).  A string is JSON
    text when it starts with ``{`` (after whitespace), a path otherwise.  With ``verify=True``
    the schedule is also verified (raising :class:`ScheduleError` listing every problem)."""
    if isinstance(value, Schedule):
        sched = value
    elif isinstance(value, (bytes, bytearray)):
        sched = loads(bytes(value))
    elif isinstance(value, str):
        sched = loads(value) if value.lstrip().startswith("{") else load(value)
    elif isinstance(value, os.PathLike):
        sched = load(value)
    elif isinstance(value, dict):
        sched = from_dict(value)
    else:
        raise ScheduleError(f"expected a Schedule, JSON text or a path to a schedule JSON file, "
                            f"got {type(value).__name__}")
    if verify:
        sched.verify()
    return sched
