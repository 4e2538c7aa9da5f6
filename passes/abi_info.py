"""Where the passes find the fused kernel's ABI parameters, and the FusedABI the runtime gets.

``append-abi-params`` appends the ``syn_*`` parameters (docs/fused-abi.md); later passes find
them here by name.  Passes record launch facts (writers per chunk, producer volumes, launch-time
requirements on parameters) in the module's typed state (``syncopate.state``,
:class:`~syncopate_mlir.dialects.syncopate.KernelState`); the pipeline turns it into a
:class:`syncopate.abi.FusedABI` (:func:`read_abi`) and strips the ``syncopate.*`` attributes
before Triton sees the module.  The helpers below derive what the request leaves to the
backend or to the schedule (the comm program count, the lowering form).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, Operation

from syncopate import backends, chunk_table
from syncopate.abi import EXTRA_PARAM_NAMES, FusedABI
from syncopate.errors import CompileError
from syncopate_mlir.dialects.syncopate import (
    ATTR_REQUEST,
    record,
    request_of,
    schedule_of,
    state_of,
)

from .ir_utils import func_body


def abi_args(func: Operation) -> dict[str, BlockArgument]:
    """The appended ``syn_*`` block arguments of the kernel, by name."""
    if not has_abi_args(func):
        raise CompileError("the kernel's last parameters are not the syncopate ABI parameters "
                           f"({', '.join(EXTRA_PARAM_NAMES)}): run append-abi-params first")
    return dict(zip(EXTRA_PARAM_NAMES, func_body(func).args[-len(EXTRA_PARAM_NAMES):]))


def has_abi_args(func: Operation) -> bool:
    args = func_body(func).args
    n = len(EXTRA_PARAM_NAMES)
    return len(args) >= n and [a.name_hint for a in args[-n:]] == list(EXTRA_PARAM_NAMES)


def comm_programs_of(module: ModuleOp) -> int:
    """The request's comm program count, the backend's default when it names none."""
    request = request_of(module)
    if request.comm_programs is None:
        return backends.get(request.backend).default_comm_programs
    return request.comm_programs


def launch_comm_programs(module: ModuleOp) -> int:
    """Comm programs the launch runs: none for a backend without comm programs."""
    backend = request_of(module).backend
    return comm_programs_of(module) if backends.get(backend).has_comm_programs else 0


def lowering_of(module: ModuleOp) -> str:
    """``"unrolled"`` or ``"table"``: the request's choice, ``auto`` resolved by the schedule's
    chunk count (:func:`syncopate.chunk_table.choose_lowering`)."""
    return str(chunk_table.choose_lowering(request_of(module).lowering,
                                           schedule_of(module).num_chunks))


def table_words(module: ModuleOp) -> tuple[int, ...]:
    """The chunk table the kernel reads through ``syn_table`` (:mod:`syncopate.chunk_table`):
    built from the schedule on first use, then kept (with the sections the lowering appends)
    in the module's state."""
    state = state_of(module)
    if state.table is not None:
        return state.table
    words = chunk_table.build(schedule_of(module), request_of(module).backend,
                              chunk_writers(module))
    return record(module, table=words).table


def append_table_section(module: ModuleOp, words: list[int], what: tuple[int, int]) -> int:
    """Append a remap section (``what`` = ``(rows, tiles)``) to the module's chunk table;
    returns its first word's index."""
    table, start = chunk_table.append_remap(list(table_words(module)), words)
    record(module, table=table, table_remaps=state_of(module).table_remaps + ((start, what[1]),))
    return start


def operands_of(module: ModuleOp) -> dict[str, str]:
    """Kernel parameter -> schedule tensor, as the request binds them."""
    operands = request_of(module).operands
    if not operands:
        raise CompileError(f"the module's '{ATTR_REQUEST}' attribute binds no kernel parameter "
                           f"to a schedule tensor: attach a schedule (attach-schedule "
                           f"operands=param:tensor; syncopate.compile does)")
    return dict(operands)


def chunk_writers(module: ModuleOp) -> int:
    """How many writers each add 1 to a chunk's flag in one epoch (docs/fused-abi.md)."""
    return backends.get(request_of(module).backend).chunk_writers(launch_comm_programs(module))


def _by_key(facts) -> dict:
    """``facts`` in the order of their keys' text (the ABI's, and the order its checks report
    contradictions in, whatever order the passes found them in)."""
    return dict(sorted(facts.items(), key=lambda kv: str(kv[0])))


def read_abi(module: ModuleOp) -> FusedABI:
    sched = schedule_of(module)
    request = request_of(module)
    state = state_of(module)
    comm = launch_comm_programs(module)
    writers = chunk_writers(module)
    spec = backends.get(request.backend)
    mode = state.mode or ("pull" if spec.has_comm_programs else "none")
    return FusedABI(
        backend=request.backend, world_size=sched.world_size, num_chunks=sched.num_chunks,
        comm_programs=comm, mode=str(mode),
        operands=list(operands_of(module)),
        chunk_count={c.id: writers for c in sched.chunks},
        produced_count=_by_key(state.produced),
        reads_per_src=_by_key(state.reads_per_src),
        requirements=_by_key(state.requirements),
        tensors=operands_of(module),
        # sm/nvshmem: comm program 0 publishes ENTRY itself (partition-sms's syncopate.enter)
        signals_entry=spec.signals_entry,
        epilogue_slots=list(state.epilogue_slots),
        upper_bounds=_by_key(state.upper_bounds),
        stores=list(state.stores),
        remap_checks=list(state.remap_checks),
        grid_axes=list(state.grid_axes) if state.grid_axes is not None else None,
        table=list(table_words(module)), table_remaps=list(state.table_remaps),
        lowering=lowering_of(module),
        trace=request.trace,
        self_advance=state.self_advanced,
    )

