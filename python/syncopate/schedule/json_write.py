"""Schedule JSON, the writing half: a schedule as a document, as text, as the canonical text
its content hash reads.  The format and the reading half are in :mod:`.json_io`, which
re-exports these; this half sits below :mod:`.model`, whose ``to_json`` and ``content_hash``
call it (it reads the schedule's fields and imports nothing of the model).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .chunk import Chunk
from .tensor_spec import Placement

FORMAT = "syncopate.schedule"
VERSION = 1


def _placement_dict(p: Placement) -> dict:
    d = {"rank": p.rank, "offsets": list(p.region.offsets), "sizes": list(p.region.sizes)}
    if p.partial:
        d["partial"] = True
    d.update(p.extra)
    return d


def _chunk_dict(c: Chunk) -> dict:
    d = {"id": c.id, "tensor": c.tensor, "offsets": list(c.region.offsets),
         "sizes": list(c.region.sizes), "src": c.src, "dst": c.dst, "mode": c.mode,
         "step": c.step, "reduce": c.reduce, "after": list(c.after)}
    d.update(c.extra)
    return d


def to_dict(schedule) -> dict:
    """The JSON document of a schedule as Python objects."""
    doc: dict[str, Any] = {"format": FORMAT, "version": VERSION,
                           "world_size": schedule.world_size}
    doc.update(schedule.meta)
    tensors = {}
    for name, t in schedule.tensors.items():
        td = {"shape": list(t.shape), "dtype": t.dtype,
              "initial": [_placement_dict(p) for p in t.initial],
              "final": [_placement_dict(p) for p in t.final]}
        if t.produced:
            td["produced"] = True
        if t.view != "global":
            td["view"] = t.view
        td.update(t.extra)
        tensors[name] = td
    doc["tensors"] = tensors
    doc["chunks"] = [_chunk_dict(c) for c in schedule.chunks]
    return doc


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "))


def dumps(schedule, compact: bool = False) -> str:
    """JSON text of a schedule.  The default layout puts one placement or chunk per line (easy
    to read and to diff); ``compact=True`` gives a single line (module attributes)."""
    doc = to_dict(schedule)
    if compact:
        return json.dumps(doc, separators=(",", ":"))

    def rows(items, indent: str) -> str:  # "[\n" one compact item per line "]", or "[]"
        if not items:
            return "[]"
        return "[\n" + ",\n".join(f"{indent}  {_compact(x)}" for x in items) + f"\n{indent}]"

    def tensor(td: dict) -> str:
        fields = [f"      {json.dumps(k)}: " + (rows(v, "      ") if k in ("initial", "final")
                                                else _compact(v)) for k, v in td.items()]
        return "{\n" + ",\n".join(fields) + "\n    }"

    top = [f"  {json.dumps(k)}: {_compact(v)}," for k, v in doc.items()
           if k not in ("tensors", "chunks")]
    tensors = [f"    {json.dumps(name)}: {tensor(td)}" for name, td in doc["tensors"].items()]
    return "\n".join(["{", *top, '  "tensors": {', *([",\n".join(tensors)] if tensors else []),
                      "  },", f'  "chunks": {rows(doc["chunks"], "  ")}', "}"]) + "\n"


def dump(schedule, path: str | os.PathLike) -> None:
    """Write a schedule as JSON to ``path``."""
    Path(path).write_text(dumps(schedule), encoding="utf-8")


def canonical_json(schedule) -> str:
    """Key-sorted, whitespace-free JSON with chunks in id order: the content hash's input."""
    doc = to_dict(schedule)
    doc["chunks"] = sorted(doc["chunks"], key=lambda c: c["id"])
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))
