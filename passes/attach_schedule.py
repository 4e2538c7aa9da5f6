"""``attach-schedule``: put a schedule and its bindings on a module (for syncopate-opt and lit).

The compile hook attaches the request itself; this pass lets a lit test or a user running
``syncopate-opt`` do the same from a JSON file:
``-p 'attach-schedule{file=ag.json operands=a_ptr:A backend=sm comm-programs=4}'``.
The schedule is verified first, so every later pass can trust it.

Options: ``file`` (the schedule JSON), ``operands`` (``param:tensor[;param:tensor]``),
``backend`` (``sm``, ``ce``, ``nvshmem``), ``comm-programs``, ``reduce`` (``comm`` or
``epilogue``), ``withhold`` (``c[,c...]``: chunks never signalled, fault injection) and
``lowering`` (``auto``, ``unrolled`` or ``table``: sets ``syncopate.lowering``, how the
chunk-level code is emitted, like ``syncopate.compile(lowering=...)``; ``auto``, the default,
leaves the attribute absent, which the passes read as ``auto``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i32
from xdsl.passes import ModulePass

from syncopate import backends
from syncopate.chunk_table import LOWERINGS
from syncopate.errors import CompileError
from syncopate.schedule import as_schedule, dumps, verify

from .schedule_attr import (
    ATTR_BACKEND,
    ATTR_COMM_PROGRAMS,
    ATTR_LOWERING,
    ATTR_OPERANDS,
    ATTR_REDUCE,
    ATTR_SCHEDULE,
    ATTR_WITHHOLD,
)


@dataclass(frozen=True)
class AttachSchedule(ModulePass):
    name: ClassVar[str] = "attach-schedule"

    file: str = ""
    operands: str = ""          # "param:tensor[;param:tensor]"
    backend: str = "sm"
    comm_programs: int = 4
    reduce: str = "comm"
    withhold: str = ""          # "c[,c...]": chunks never signalled (fault injection)
    lowering: str = "auto"      # "auto" | "unrolled" | "table": chunk-level code (see above)
    reorder_reductions: bool = False  # tile-remap may renumber loops that accumulate floats
    trace: bool = False         # insert-trace adds timestamped events (docs/tracing.md)

    def apply(self, ctx: Context, op: ModuleOp) -> None:

        if not self.file:
            raise CompileError("attach-schedule needs file=PATH of a schedule JSON")
        path = Path(self.file)
        if not path.exists():
            raise CompileError(f"attach-schedule: no schedule file {self.file!r}")
        schedule = as_schedule(path)
        verify(schedule)
        backends.get(self.backend, context="attach-schedule: ")
        bindings = {}
        for item in filter(None, self.operands.replace(";", ",").split(",")):
            if ":" not in item:
                raise CompileError(f"attach-schedule: operand binding {item!r} is not param:tensor")
            param, tensor = item.split(":", 1)
            if tensor.strip() not in schedule.tensors:
                raise CompileError(f"attach-schedule: operand binding {item!r} names tensor "
                                   f"{tensor.strip()!r}, which the schedule does not have (its "
                                   f"tensors: {', '.join(schedule.tensors)})")
            bindings[param.strip()] = StringAttr(tensor.strip())
        if not bindings:
            raise CompileError("attach-schedule needs operands=param:tensor")
        op.attributes[ATTR_SCHEDULE] = StringAttr(dumps(schedule))
        op.attributes[ATTR_OPERANDS] = DictionaryAttr(bindings)
        op.attributes[ATTR_BACKEND] = StringAttr(self.backend)
        op.attributes[ATTR_COMM_PROGRAMS] = IntegerAttr(self.comm_programs, i32)
        if self.reduce not in ("comm", "epilogue"):
            raise CompileError(f"attach-schedule: reduce={self.reduce!r}; choose comm or epilogue")
        if self.reduce != "comm":  # absent means "comm"
            op.attributes[ATTR_REDUCE] = StringAttr(self.reduce)
        if self.lowering not in LOWERINGS:
            raise CompileError(f"attach-schedule: lowering={self.lowering!r}; choose one of "
                               f"{', '.join(LOWERINGS)}")
        if self.lowering != "auto":  # absent means "auto"
            op.attributes[ATTR_LOWERING] = StringAttr(self.lowering)
        if self.reorder_reductions:  # absent means off (docs/soundness.md, "Loops")
            op.attributes["syncopate.reorder_reductions"] = StringAttr("on")
        if self.trace:  # absent means off
            op.attributes["syncopate.trace"] = StringAttr("on")
        if self.withhold:
            op.attributes[ATTR_WITHHOLD] = StringAttr(
                withhold_text(self.withhold.replace(";", ",").split(","), schedule))


def withhold_text(ids, schedule) -> str:
    """The canonical ``"c,c"`` of chunk ids to withhold, each checked against the schedule."""
    try:
        chunks = sorted({int(str(x).strip()) for x in ids if str(x).strip()})
    except ValueError:
        raise CompileError(f"withhold: {list(ids)!r} are not chunk ids (integers)") from None
    known = {c.id for c in schedule.chunks}
    unknown = [c for c in chunks if c not in known]
    if unknown:
        raise CompileError(f"withhold: chunks {unknown} are not in the schedule (its chunk ids: "
                           f"0..{len(known) - 1})")
    return ",".join(str(c) for c in chunks)
