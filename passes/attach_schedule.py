"""``attach-schedule``: put a schedule and its bindings on a module (for syncopate-opt and lit).

The compile hook attaches the request itself; this pass lets a lit test or a user running
``syncopate-opt`` do the same from a JSON file:
``-p 'attach-schedule{file=ag.json operands=a_ptr:A backend=sm comm-programs=4}'``.
The schedule is verified first, so every later pass can trust it; it goes on the module as
``syncopate.schedule``, the options as ``syncopate.request`` (the typed attributes of
``syncopate_mlir/dialects/syncopate.py``).

Options: ``file`` (the schedule JSON), ``operands`` (``param:tensor[;param:tensor]``),
``backend`` (``sm``, ``ce``, ``nvshmem``), ``comm-programs``, ``reduce`` (``comm`` or
``epilogue``), ``withhold`` (``c[,c...]``: chunks never signalled, fault injection),
``lowering`` (``auto``, ``unrolled`` or ``table``: how the chunk-level code is emitted, like
``syncopate.compile(lowering=...)``), ``reorder-reductions`` and ``trace``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from syncopate import backends
from syncopate.errors import CompileError
from syncopate.schedule import as_schedule, verify
from syncopate_mlir.dialects.syncopate import (
    ATTR_REQUEST,
    ATTR_SCHEDULE,
    Request,
    RequestAttr,
    ScheduleAttr,
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
            bindings[param.strip()] = tensor.strip()
        if not bindings:
            raise CompileError("attach-schedule needs operands=param:tensor")
        try:
            request = Request(operands=bindings, backend=self.backend,
                              comm_programs=self.comm_programs, reduce=self.reduce,
                              lowering=self.lowering, reorder_reductions=self.reorder_reductions,
                              trace=self.trace, withhold=withhold_chunks(
                                  self.withhold.replace(";", ",").split(","), schedule))
        except ValueError as e:
            raise CompileError(f"attach-schedule: {e}") from None
        op.attributes[ATTR_SCHEDULE] = ScheduleAttr(schedule)
        op.attributes[ATTR_REQUEST] = RequestAttr(request)


def withhold_chunks(ids, schedule) -> tuple[int, ...]:
    """The sorted chunk ids to withhold, each checked against the schedule."""
    try:
        chunks = sorted({int(str(x).strip()) for x in ids if str(x).strip()})
    except ValueError:
        raise CompileError(f"withhold: {list(ids)!r} are not chunk ids (integers)") from None
    known = {c.id for c in schedule.chunks}
    unknown = [c for c in chunks if c not in known]
    if unknown:
        raise CompileError(f"withhold: chunks {unknown} are not in the schedule (its chunk ids: "
                           f"0..{len(known) - 1})")
    return tuple(chunks)
