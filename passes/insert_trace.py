"""``insert-trace``: timestamped events of a fused kernel into a device buffer (``trace=True``).

Why: a fused kernel is one launch; profilers see it as one bar.  What a user debugging overlap
needs is *when* each program started and ended, when it began and ended each wait (and on
which flag), and when each chunk was signalled -- per rank and program, on one time axis.
This pass, after the lowering, adds those events to the lowered kernel when the module's
request asks for them (``trace``, the compile option ``trace=True``); without it the pass
changes nothing, so an untraced kernel's code is the one it always was (docs/tracing.md).

Events (4 x i64 each, appended to the rank's trace buffer):

* word 0: ``kind | epoch << 8`` -- kind 1/2 program begin/end, 3/4 wait begin/end, 5 signal;
* word 1: the program's linear id ``pid_x + n_x * (pid_y + n_y * pid_z)`` (comm programs
  first along x, as the fused grid has them);
* word 2: the flag index (``abi.FlagLayout``: chunk, ENTRY, CONSUMED, PRODUCED) and, for a
  wait, the watchdog kind code in bits 32..39; -1 for program events;
* word 3: ``%globaltimer`` in nanoseconds (one clock for every SM of a GPU).

The buffer: word 0 counts events (each claims a slot with ``atomic_rmw add``), word 1 is the
capacity in events (written by the runtime), the records follow from word 2; an event past
the capacity is counted but not written (the host reports the overflow).  Its address is the last row of the peers table (``syn_peers``, one row after the
operands and epilogue slots, every column this rank's buffer), so tracing adds no kernel
parameter: the ABI is the same with tracing on or off.

What is traced: waits (every spin goes through the ``syncopate_wait_b*`` functions),
releases of flags this rank or a peer holds (``tt.atomic_rmw`` with release semantics on an
address derived from ``syn_flags``), program begin/end.  Not traced: NVSHMEM's
put-with-signal (a library call).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, i32, i64
from xdsl.ir import BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass

from syncopate.errors import CompileError

from syncopate_mlir.dialects.syncopate import request_of, schedule_of, state_of
from syncopate_mlir.dialects.tt import (
    AddPtrOp,
    AtomicRMWOp,
    CallOp,
    ElementwiseInlineAsmOp,
    GetNumProgramsOp,
    GetProgramIdOp,
    IntToPtrOp,
    LoadOp,
    MemSemantic,
    PointerType,
    PtrToIntOp,
    ReturnOp,
    StoreOp,
)
from syncopate_mlir.ttir_printer import xdsl_to_text

from .abi_info import abi_args, operands_of, read_abi
from .builder import Builder
from .ir_utils import const_int, func_body, kernel_func
from .lowering import _asm, addptr, scalar_load

#: event kinds (word 0's low byte)
PROGRAM_BEGIN, PROGRAM_END, WAIT_BEGIN, WAIT_END, SIGNAL = 1, 2, 3, 4, 5
#: i64 words per event
WORDS = 4
#: the clock read of every event
TIMER_ASM = "mov.u64 $0, %globaltimer;"


def trace_row(module: ModuleOp) -> int:
    """The peers-table row holding the trace buffer's address: after the flags row, one row
    per operand, one per epilogue-slot tensor (``FusedKernel._peers_table``'s order)."""
    return 1 + len(operands_of(module)) + len(state_of(module).epilogue_slots)


@dataclass(frozen=True)
class InsertTrace(ModulePass):
    name: ClassVar[str] = "insert-trace"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        if not request_of(op).trace:
            return
        untraced = op.clone()
        self._insert(op)
        check_transparent(untraced, op)

    def _insert(self, op: ModuleOp) -> None:
        func = kernel_func(op)
        args = abi_args(func)
        body = func_body(func)
        W = schedule_of(op).world_size
        flags = args["syn_flags"]
        waits = [o for o in func.walk() if isinstance(o, CallOp)
                 and o.callee.string_value().startswith("syncopate_wait_b")]
        signals = [(o, idx) for o in func.walk() if isinstance(o, AtomicRMWOp)
                   and o.mem_semantic == MemSemantic.RELEASE
                   and (idx := _flag_index(o.ptr, flags)) is not None]
        rets = [o for o in body.ops if isinstance(o, ReturnOp)]

        # the buffer and the program id, once at the top of the kernel
        b = Builder.at_start(body)
        row = b.const(trace_row(op) * W)
        base_i = scalar_load(b, addptr(b, args["syn_peers"], b.add(row, args["syn_rank"])))
        base = b.insert(IntToPtrOp(base_i, PointerType(i64))).results[0]
        pid = b.const(0, i64)
        stride = b.const(1, i64)
        for axis in (0, 1, 2):
            p = b.i64(b.insert(GetProgramIdOp(axis)).result)
            pid = b.add(pid, b.mul(p, stride))
            stride = b.mul(stride, b.i64(b.insert(GetNumProgramsOp(axis)).result))
        epoch = b.i64(args["syn_epoch"])
        cap = scalar_load(b, addptr(b, base, b.const(1, i32)))  # word 1: the capacity
        ctx_ = _Ctx(base, pid, epoch, cap)
        _event(b, ctx_, PROGRAM_BEGIN, b.const(-1, i64))

        for call in waits:
            index, kind = call.args[1], call.args[3]
            wb = Builder(call)
            ident = wb.add(wb.i64(index), wb.mul(wb.i64(kind), wb.const(1 << 32, i64)))
            _event(wb, ctx_, WAIT_BEGIN, ident)
            after = Builder(call.next_op)
            _event(after, ctx_, WAIT_END, ident)
        for atom, index in signals:
            sb = Builder(atom.next_op)
            _event(sb, ctx_, SIGNAL, sb.i64(index))
        for ret in rets:
            _event(Builder(ret), ctx_, PROGRAM_END, Builder(ret).const(-1, i64))


@dataclass
class _Ctx:
    base: SSAValue
    pid: SSAValue
    epoch: SSAValue
    cap: SSAValue


def _event(b: Builder, c: _Ctx, kind: int, ident: SSAValue) -> None:
    """Claim a slot (``atomic_rmw add`` on word 0) and write the event's four words there,
    unless the buffer is full (``c.cap``: word 1, read once at kernel entry)."""
    now = _asm(b, TIMER_ASM, "=l", [], [i64])[0]
    one = b.const(1, i64)
    slot = b.insert(AtomicRMWOp("add", c.base, one, sem="relaxed", scope="gpu")).results[0]
    ok = b.cmp("slt", slot, c.cap)
    at = b.add(b.const(2, i64), b.mul(slot, b.const(WORDS, i64)))
    words = (b.add(b.const(kind, i64), b.mul(c.epoch, b.const(256, i64))), c.pid, ident, now)
    for k, w in enumerate(words):
        ptr = addptr(b, c.base, b.add(at, b.const(k, i64)))
        b.insert(StoreOp(ptr, w, ok))


def _flag_index(ptr: SSAValue, flags: SSAValue) -> SSAValue | None:
    """The flag index of a pointer into this rank's flags (``addptr(syn_flags, i)``) or a
    peer's (``inttoptr(ptrtoint(addptr(syn_flags, i)) - mine + theirs)``, ``peer_address``),
    else None (an atomic of the user's kernel)."""
    v = ptr
    for _ in range(8):
        owner = v.op if not isinstance(v, BlockArgument) else None
        if isinstance(owner, AddPtrOp) and owner.ptr is flags:
            return owner.offset
        if isinstance(owner, (AddPtrOp, IntToPtrOp, PtrToIntOp, arith.AddiOp, arith.SubiOp)):
            v = owner.operands[0]  # the pointer, the integer, the lhs
        else:
            return None
    return None


# ------------------------------------------------------------------------------------------------
# Transparency: the traced kernel is the untraced one plus writes into the trace buffer
# ------------------------------------------------------------------------------------------------
#
# Why: the trace is a debugging aid; a trace that changed what it observes (an event inside a
# branch that alters control flow, a loop-carried value or an ``scf.if`` result rewired, a
# counter that aliases a flag or an operand) would send a user chasing a bug that tracing itself
# made. Every traced compile therefore checks, before the kernel leaves the pass, that removing
# the events (every store and atomic into the trace buffer, then the arithmetic only they used)
# gives back exactly the module it was given. The buffer is recognised the way the runtime
# provides it -- the address in the peers table's trace row -- so an event written anywhere
# else (a flag, an operand, the CNT counts of the MoE dispatch) is not removed and the check
# fails. The CPU emulator, which runs the module before the lowering, relies on it: with the
# check, what it emulates is what a traced launch does, minus the trace buffer
# (docs/tracing.md, "What tracing may change").


def check_transparent(untraced: ModuleOp, traced: ModuleOp) -> None:
    """Raise :class:`CompileError` unless ``traced`` with its events removed
    (:func:`strip_events`) is structurally ``untraced`` (both after the same dead-code
    removal). ``untraced`` is consumed (dead code is removed from it in place)."""
    stripped = strip_events(traced)
    _remove_dead(untraced)
    # the functions, not the module's attributes (the compiler's bookkeeping, which the
    # ABI read-back below adds to)
    mine, theirs = list(untraced.ops), list(stripped.ops)
    same = {untraced.body.block: stripped.body.block}  # the ops' parents correspond
    if len(mine) == len(theirs) and all(a.is_structurally_equivalent(b, same)
                                        for a, b in zip(mine, theirs)):
        return
    a = [ln for o in mine for ln in xdsl_to_text(o, locations=False).splitlines()]
    b = [ln for o in theirs for ln in xdsl_to_text(o, locations=False).splitlines()]
    diff = [ln for ln in difflib.unified_diff(a, b, "untraced", "traced, events removed",
                                              lineterm="", n=1)][:24]
    raise CompileError("internal: insert-trace changed the kernel beyond its trace events (the "
                       "traced kernel would not behave as the untraced one); compile without "
                       "trace=True / SYNCOPATE_TRACE and report this:\n" + "\n".join(diff))


def strip_events(module: ModuleOp) -> ModuleOp:
    """A copy of traced ``module`` without its events: the stores and atomics whose address
    derives from the trace buffer (the peers table's trace row, :func:`trace_row`), then every
    side-effect-free op left unused (:func:`_remove_dead`)."""
    out = module.clone()
    func = kernel_func(out)
    args = abi_args(func)
    W = schedule_of(out).world_size
    row = _runtime_trace_row(out) * W
    bases = [o.results[0] for o in func.walk() if isinstance(o, IntToPtrOp)
             and _is_trace_address(o.operands[0], args, row)]
    derived: set[Operation] = set()
    work = list(bases)
    while work:
        v = work.pop()
        for use in list(v.uses):
            user = use.operation
            if user not in derived:
                derived.add(user)
                work.extend(user.results)
    _remove_dead(out, lambda o: o in derived and isinstance(o, (StoreOp, AtomicRMWOp)))
    return out


def _runtime_trace_row(module: ModuleOp) -> int:
    """The peers-table row the runtime fills with the trace buffer's address, from the ABI it
    launches with (``FusedKernel._peers_table``: flags, the operands, the epilogue slots, then
    the buffer) -- computed apart from :func:`trace_row`, the pass's own choice, so that the
    two disagreeing (events written through an operand's row) fails the check."""
    abi = read_abi(module)
    return 1 + len(abi.operands) + len(abi.epilogue_slots)


def _is_trace_address(v: SSAValue, args: dict, row: int) -> bool:
    """``v`` is ``load(addptr(syn_peers, row + syn_rank))``: this rank's trace buffer."""
    load = v.owner if not isinstance(v, BlockArgument) else None
    if not isinstance(load, LoadOp):
        return False
    at = load.operands[0].owner
    if not isinstance(at, AddPtrOp) or at.ptr is not args["syn_peers"]:
        return False
    off = at.offset.owner
    if not isinstance(off, arith.AddiOp):
        return False
    pair = (off.lhs, off.rhs)
    return any(a is args["syn_rank"] and const_int(c) == row for a, c in (pair, pair[::-1]))


def _removable(op: Operation) -> bool:
    """Side-effect free, so it may go when unused: arithmetic, address arithmetic, program
    ids, loads, the clock read."""
    if op.regions or not op.results:
        return False
    if op.name.startswith("arith."):
        return True
    if isinstance(op, ElementwiseInlineAsmOp):
        return op.asm_string.data == TIMER_ASM
    return isinstance(op, (AddPtrOp, IntToPtrOp, PtrToIntOp, GetProgramIdOp, GetNumProgramsOp,
                           LoadOp))


def _remove_dead(module: ModuleOp, also=lambda o: False) -> None:
    """Erase unused :func:`_removable` ops (and unused ops ``also`` accepts) until none is left;
    users go before the ops they use (a reversed walk)."""
    changed = True
    while changed:
        changed = False
        for o in reversed(list(module.walk())):
            if (_removable(o) or also(o)) and not any(r.uses for r in o.results):
                o.detach()
                o.erase()
                changed = True


__all__ = ["InsertTrace", "PROGRAM_BEGIN", "PROGRAM_END", "SIGNAL", "TIMER_ASM",
           "WAIT_BEGIN", "WAIT_END", "WORDS", "check_transparent", "strip_events",
           "trace_row"]
