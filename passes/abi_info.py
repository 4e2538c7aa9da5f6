"""Where the passes find the fused kernel's ABI parameters and record what the runtime needs.

``append-abi-params`` appends the ``syn_*`` parameters (docs/fused-abi.md); later passes find
them here by name.  Passes accumulate launch facts (writers per chunk, producer volumes,
launch-time requirements on parameters) in the ``syncopate.abi`` module attribute; the pipeline
turns it into a :class:`syncopate.abi.FusedABI` and strips every ``syncopate.*`` attribute before
Triton sees the module.
"""

from __future__ import annotations

import json

from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.ir import BlockArgument, Operation

from syncopate import backends, chunk_table
from syncopate.abi import EXTRA_PARAM_NAMES, FusedABI
from syncopate.errors import CompileError
from syncopate.schedule.model import Schedule

from .ir_utils import func_body
from .schedule_attr import (
    ATTR_BACKEND,
    ATTR_COMM_PROGRAMS,
    ATTR_LOWERING,
    ATTR_OPERANDS,
    ATTR_REDUCE,
    ATTR_WITHHOLD,
    schedule_of,
)

ATTR_ABI = "syncopate.abi"


def abi_args(func: Operation) -> dict[str, BlockArgument]:
    """The appended ``syn_*`` block arguments of the kernel, by name."""
    args = func_body(func).args
    n = len(EXTRA_PARAM_NAMES)
    if len(args) < n:
        raise CompileError("the kernel has no syncopate ABI parameters: run append-abi-params first")
    tail = args[-n:]
    names = [a.name_hint for a in tail]
    if names != list(EXTRA_PARAM_NAMES):
        raise CompileError("the kernel's last parameters are not the syncopate ABI parameters "
                           f"({', '.join(EXTRA_PARAM_NAMES)}): run append-abi-params first")
    return dict(zip(EXTRA_PARAM_NAMES, tail))


def has_abi_args(func: Operation) -> bool:
    args = func_body(func).args
    n = len(EXTRA_PARAM_NAMES)
    return len(args) >= n and [a.name_hint for a in args[-n:]] == list(EXTRA_PARAM_NAMES)


def backend_of(module: ModuleOp) -> str:
    attr = module.attributes.get(ATTR_BACKEND)
    return attr.data if isinstance(attr, StringAttr) else "sm"


def reduce_of(module: ModuleOp) -> str:
    """Where ``sum`` chunks are added: ``"comm"`` (comm programs, or the host after a ``ce``
    kernel) or ``"epilogue"`` (the owner's producer tiles add the other ranks' partials from
    per-source slots before their store)."""
    attr = module.attributes.get(ATTR_REDUCE)
    return attr.data if isinstance(attr, StringAttr) else "comm"


def withheld_of(module: ModuleOp) -> frozenset[int]:
    """Chunks whose ``CHUNK`` signal the comm programs leave out (fault injection, see
    :data:`passes.schedule_attr.ATTR_WITHHOLD`); empty without the attribute."""
    attr = module.attributes.get(ATTR_WITHHOLD)
    if not isinstance(attr, StringAttr) or not attr.data:
        return frozenset()
    return frozenset(int(x) for x in attr.data.split(","))


def comm_programs_of(module: ModuleOp) -> int:
    attr = module.attributes.get(ATTR_COMM_PROGRAMS)
    if attr is None:
        return backends.get(backend_of(module)).default_comm_programs
    return attr.value.data


def lowering_of(module: ModuleOp) -> str:
    """``"unrolled"`` or ``"table"``: the request's choice, ``auto`` resolved by the schedule's
    chunk count (:func:`syncopate.chunk_table.choose_lowering`)."""
    attr = module.attributes.get(ATTR_LOWERING)
    requested = attr.data if isinstance(attr, StringAttr) else "auto"
    try:
        return chunk_table.choose_lowering(requested, schedule_of(module).num_chunks)
    except CompileError as e:
        raise CompileError(f"module attribute {ATTR_LOWERING}: {e}") from None


def _launch_comm_programs(module: ModuleOp) -> int:
    backend = backend_of(module)
    return comm_programs_of(module) if backends.get(backend).has_comm_programs else 0


def table_words(module: ModuleOp) -> list[int]:
    """The chunk table the kernel reads through ``syn_table`` (:mod:`syncopate.chunk_table`):
    built from the schedule on first use, then kept (with the sections the lowering appends)
    in the ABI state."""
    state = get_state(module)
    if "table" in state:
        return list(state["table"])
    sched = schedule_of(module)
    backend = backend_of(module)
    words = chunk_table.build(sched, backend,
                              chunk_writers(sched, backend, _launch_comm_programs(module)))
    update_state(module, table=words)
    return words


def append_table_section(module: ModuleOp, words: list[int], what: tuple[int, int]) -> int:
    """Append a remap section (``what`` = ``(rows, tiles)``) to the module's chunk table;
    returns its first word's index."""
    table, start = chunk_table.append_remap(table_words(module), words)
    remaps = list(get_state(module).get("table_remaps", []))
    remaps.append([start, what[1]])
    update_state(module, table=table, table_remaps=remaps)
    return start


def operands_of(module: ModuleOp) -> dict[str, str]:
    attr = module.attributes.get(ATTR_OPERANDS)
    if attr is None:
        raise CompileError(f"the module has no '{ATTR_OPERANDS}' attribute mapping kernel "
                           f"parameters to schedule tensors")
    return {k: v.data for k, v in attr.data.items()}


def chunk_writers(sched: Schedule, backend: str, comm_programs: int) -> int:
    """How many writers each add 1 to a chunk's flag in one epoch (docs/fused-abi.md)."""
    return backends.get(backend).chunk_writers(comm_programs)


def get_state(module: ModuleOp) -> dict:
    attr = module.attributes.get(ATTR_ABI)
    return json.loads(attr.data) if isinstance(attr, StringAttr) else {}


def set_state(module: ModuleOp, state: dict) -> None:
    module.attributes[ATTR_ABI] = StringAttr(json.dumps(state, sort_keys=True))


def update_state(module: ModuleOp, **kv) -> dict:
    state = get_state(module)
    for k, v in kv.items():
        if isinstance(v, dict) and isinstance(state.get(k), dict):
            state[k].update(v)
        else:
            state[k] = v
    set_state(module, state)
    return state


def read_abi(module: ModuleOp) -> FusedABI:
    sched = schedule_of(module)
    backend = backend_of(module)
    comm = _launch_comm_programs(module)
    table = table_words(module)
    state = get_state(module)
    writers = chunk_writers(sched, backend, comm)
    operands = list(operands_of(module))
    abi = FusedABI(
        backend=backend, world_size=sched.world_size, num_chunks=sched.num_chunks,
        comm_programs=comm,
        mode=state.get("mode", "pull" if backends.get(backend).has_comm_programs else "none"),
        operands=operands,
        chunk_count={c.id: writers for c in sched.chunks},
        produced_count={int(k): v for k, v in state.get("produced", {}).items()},
        reads_per_src={int(k): v for k, v in state.get("reads_per_src", {}).items()},
        requirements=dict(state.get("requirements", {})),
        tensors=operands_of(module),
        # sm/nvshmem: comm program 0 publishes ENTRY itself (partition-sms's syncopate.enter)
        signals_entry=backends.get(backend).signals_entry,
        epilogue_slots=list(state.get("epilogue_slots", [])),
        upper_bounds=dict(state.get("upper_bounds", {})),
        grid_axes=list(state["grid_axes"]) if "grid_axes" in state else None,
        table=table, table_remaps=[tuple(x) for x in state.get("table_remaps", [])],
        lowering=lowering_of(module),
        trace=_trace_on(module),
        self_advance=getattr(module.attributes.get("syncopate.self_advance"), "data", None)
        in ("on", "applied"),
    )
    return abi


def _trace_on(module: ModuleOp) -> bool:
    attr = module.attributes.get("syncopate.trace")
    return getattr(attr, "data", None) == "on"


def strip_syncopate_attrs(module: ModuleOp) -> None:
    for key in [k for k in module.attributes if k.startswith("syncopate.")]:
        del module.attributes[key]
