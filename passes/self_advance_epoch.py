"""``self-advance-epoch``: the fused kernel advances its own epoch word (``self_advance=True``).

Why: with ABI 3 the runtime enqueues a one-thread advance kernel before every fused launch
(``docs/cuda-graphs.md``): one more launch per eager call (~15 us of host time on an H200
host, as much as the runtime's whole Python) and one more node per graph replay. A kernel
that leaves the next epoch behind itself needs neither.

With ``self_advance`` in the module's request (the compile option ``self_advance=True``),
after ``load-epoch``:

* the word holds the epoch of the last launch that *finished*; this launch's epoch is
  ``word[0] + 1`` (every use of the loaded value becomes the incremented one);
* before every ``tt.return`` each program meets at a CTA barrier and adds 1 to ``word[1]``
  (``atomic_rmw add``, acq_rel, gpu scope). The program that reads ``num_programs - 1``
  there is the last of the launch: it stores 0 into ``word[1]``, the epoch into ``word[0]``
  and into the host mirror whose address the runtime keeps in ``word[2]`` (low half) and
  ``word[3]`` (high half), as the advance kernel's mirror store did.

Why it is sound: every thread of every program loads ``word[0]`` at its entry, before the
barrier that precedes its program's increment (program order, ``bar.sync``, release); the
last program's increment acquires all others, so every program of the launch read the old
value before the new one is stored. The next launch on the stream starts after this one
ends, and reads the new value, as it read the advance kernel's store. A program that never
returns (a trap after a watchdog timeout) leaves the word where it was; the runtime refuses
further launches of that kernel anyway.

Without the option the pass changes nothing, so a kernel compiled without it is exactly the
ABI 3 kernel. Every ``tt.return`` must be in the kernel's entry block (Triton's structured
control flow). With ``on`` (``self_advance=True``) a kernel returning from a branch is refused
with a typed error; with ``auto`` (the runtime's default) it is compiled without the counter
(the module's state says it was not applied, so does the ABI, and the runtime enqueues the
advance kernel before it as for any kernel compiled without the option). The pass records
``self_advanced`` in the module's state when it applies, and runs once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, gpu
from xdsl.dialects.builtin import ModuleOp, i32, i64
from xdsl.passes import ModulePass

from syncopate.errors import CompileError
from syncopate_mlir.dialects.syncopate import SelfAdvance, record, request_of, state_of
from syncopate_mlir.dialects.tt import (
    AtomicRMWOp,
    GetNumProgramsOp,
    IntToPtrOp,
    LoadOp,
    PointerType,
    ReturnOp,
    StoreOp,
)

from .abi_info import abi_args
from .builder import Builder
from .ir_utils import func_body, kernel_func
from .lowering import addptr, scalar_load

#: the epoch word's layout with self-advance (4 x i32, ``runtime.epochs.new_epoch_word``)
WORD_EPOCH, WORD_DONE, WORD_MIRROR_LO, WORD_MIRROR_HI = 0, 1, 2, 3


@dataclass(frozen=True)
class SelfAdvanceEpoch(ModulePass):
    name: ClassVar[str] = "self-advance-epoch"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        mode = request_of(op).self_advance
        if mode == SelfAdvance.OFF or state_of(op).self_advanced:
            return  # off, or applied already
        required = mode == SelfAdvance.ON
        func = kernel_func(op)
        word = abi_args(func)["syn_epoch"]
        if not isinstance(word.type, PointerType):
            raise CompileError("internal: self-advance-epoch runs after load-epoch (syn_epoch "
                               "must be the epoch word's pointer)")
        body = func_body(func)
        loads = [u.operation for u in word.uses if isinstance(u.operation, LoadOp)]
        if len(loads) != 1 or loads[0].parent_block() is not body:
            raise CompileError("internal: self-advance-epoch expects the one epoch load of "
                               "load-epoch at kernel entry")
        load = loads[0]
        rets = [o for o in func.walk() if isinstance(o, ReturnOp)]
        nested = [r for r in rets if r.parent_block() is not body]
        if nested and not required:
            return  # auto: the advance kernel's ABI
        if nested:
            raise CompileError("self_advance=True: the kernel returns from inside a branch "
                               "(tt.return outside its entry block); the epoch's done-counter "
                               "needs every program to end at the kernel's last op: compile "
                               "without self_advance")

        # this launch's epoch: the last finished launch's + 1, used everywhere the load was
        b = Builder(load.next_op)
        old = load.results[0]
        epoch = b.add(old, b.const(1))
        inc = epoch.owner
        old.replace_uses_with_if(epoch, lambda use: use.operation is not inc)
        epoch.name_hint = "epoch"
        old.name_hint = "last_epoch"

        for ret in rets:
            _count_done(Builder(ret), word, epoch)
        record(op, self_advanced=True)  # run once


def _count_done(b: Builder, word, epoch) -> None:
    """Before a return: count this program done; the last one stores the next epoch."""
    n = b.const(1)
    for axis in (0, 1, 2):
        n = b.mul(n, b.insert(GetNumProgramsOp(axis)).result)
    done = addptr(b, word, b.const(WORD_DONE))
    # every warp of this program has loaded word[0] before its count is released: the count
    # is one thread's atomic, and a warp without a barrier since its entry load (a copy loop
    # of loads and stores) could otherwise still be before that load when the last program
    # stores the next epoch
    b.insert(gpu.BarrierOp())
    before = b.insert(AtomicRMWOp("add", done, b.const(1), sem="acq_rel",
                                  scope="gpu")).results[0]
    last = b.cmp("eq", before, b.sub(n, b.const(1)))
    b.insert(StoreOp(done, b.const(0), last))
    b.insert(StoreOp(word, epoch, last))
    lo = scalar_load(b, addptr(b, word, b.const(WORD_MIRROR_LO)))
    hi = scalar_load(b, addptr(b, word, b.const(WORD_MIRROR_HI)))
    lo64 = b.insert(arith.ExtUIOp(lo, i64)).result
    hi64 = b.insert(arith.ExtUIOp(hi, i64)).result
    addr = b.ori(b.insert(arith.ShLIOp(hi64, b.const(32, i64))).result, lo64)
    mirror = b.insert(IntToPtrOp(addr, PointerType(i32))).results[0]
    b.insert(StoreOp(mirror, epoch, last))


__all__ = ["SelfAdvanceEpoch", "WORD_DONE", "WORD_EPOCH", "WORD_MIRROR_HI", "WORD_MIRROR_LO"]
