"""The module attributes the pipeline carries, and the schedule read from them.

The compile API attaches the request to the module as attributes (``syncopate.schedule``: the
verified schedule in the JSON interchange format; ``syncopate.operands``, ``syncopate.backend``,
...) so that every pass reads one source of truth and lit tests can set the same attributes by
hand.  The passes ask the *same* schedule model as the verifier and the runtime
(:class:`syncopate.schedule.Schedule`; issue 9: the schedule was modelled three times): it is
parsed once per schedule text and shared by every pass of a pipeline run.
"""

from __future__ import annotations

from functools import lru_cache

from xdsl.dialects.builtin import ModuleOp, StringAttr

from syncopate.errors import CompileError, ScheduleError
from syncopate.schedule.json_io import loads
from syncopate.schedule.model import Schedule

ATTR_SCHEDULE = "syncopate.schedule"
ATTR_OPERANDS = "syncopate.operands"
ATTR_BACKEND = "syncopate.backend"
ATTR_COMM_PROGRAMS = "syncopate.comm_programs"
ATTR_REDUCE = "syncopate.reduce"  # "comm" (default) | "epilogue"
#: "unrolled" | "table" | "auto" (default, absent): how chunk-level code is lowered
ATTR_LOWERING = "syncopate.lowering"
#: fault injection (tests, debugging a hang): "1,5" -- chunks whose executing rank moves the
#: data but never signals CHUNK[c]; their readers' watchdog must fire and name them
ATTR_WITHHOLD = "syncopate.test_withhold"


def schedule_of(module: ModuleOp) -> Schedule:
    """The schedule attached to ``module`` (parsed once per distinct schedule text)."""
    attr = module.attributes.get(ATTR_SCHEDULE)
    if not isinstance(attr, StringAttr):
        raise CompileError(f"the module has no '{ATTR_SCHEDULE}' attribute: attach a schedule "
                           f"(syncopate.compile does; lit tests set it by hand)")
    return _parse(attr.data)


@lru_cache(maxsize=32)
def _parse(text: str) -> Schedule:
    try:
        sched = loads(text)
    except ScheduleError as e:
        raise CompileError(f"the '{ATTR_SCHEDULE}' attribute is not a schedule: {e}") from None
    ids = [c.id for c in sched.chunks]
    if sorted(ids) != list(range(len(ids))):
        raise CompileError("chunk ids must be dense 0..C-1 for the flag layout; renumber the "
                           "schedule's chunks")
    return sched
