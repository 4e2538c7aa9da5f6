"""``insert-signals``: producer tiles announce the chunks they complete (GEMM + reduce-scatter).

After every store to a tensor that ranks compute and then send (a tensor with ``sum`` chunks or
``partial`` initial placements), the pass inserts ``syncopate.signal_region`` with the exact box
the store wrote.  Lowering turns it into, for each chunk of that tensor that leaves or reaches
this rank and intersects the box, ``PRODUCED[c] += |box & chunk|`` (elements, a release at
system scope after the program's stores are complete).  A chunk is complete in epoch ``e``
when ``PRODUCED[c] >= e * |chunk|``: counting elements rather than tiles makes the target
independent of how the kernel tiles, orders or masks its stores (ragged edges, persistent
loops, epilogue sub-tiles) as long as every element is written once, which is what a GEMM's
stores do.  Flags compare in serial-number arithmetic, so the growing counts never overflow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from syncopate_mlir.dialects.syncopate import SignalRegionOp, record, state_of

from .abi_info import abi_args
from .access import analyze_module
from .builder import Builder
from .ir_utils import ancestors


@dataclass(frozen=True)
class InsertSignals(ModulePass):
    name: ClassVar[str] = "insert-signals"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sched, analysis, accesses = analyze_module(op)
        args = abi_args(analysis.func)
        produced: dict[int, int] = {}
        signals = 0
        unflattened = 0
        for a in accesses:
            if a.kind != "write" or not sched.is_produced(a.tensor):
                continue
            b = Builder(a.op.next_op, a.op.parent_block())
            lo, hi = b.box(a.dims, sched.tensors[a.tensor].shape)
            b.insert(SignalRegionOp(args["syn_flags"], args["syn_epoch"], args["syn_rank"],
                                    lo, hi, a.tensor))
            signals += 1
            unflattened += _unflatten_enclosing_loops(a.op)
            for c in sched.chunks:
                if c.tensor == a.tensor:
                    produced[c.id] = c.volume
        record(op, produced=produced, signals=signals)
        if unflattened:
            record(op, remarks=state_of(op).remarks + (
                "insert-signals: dropped tt.flatten from the loop around the signalled stores "
                "(Triton does not software-pipeline a fused loop whose body has a CTA barrier; "
                "the inner K loop stays pipelined)",))


def _unflatten_enclosing_loops(store) -> int:
    """Drop ``tt.flatten`` from the loops around a signalled store.

    A signal ends in a CTA barrier (every thread's stores before one thread's release).  Triton
    3.6 fuses a ``tl.range(..., flatten=True)`` tile loop with its K loop and pipelines the fused
    loop, but gives up on pipelining when the fused body contains a barrier: measured on the
    persistent TMA GEMM, the fused kernel lost its 3-stage TMA pipeline (2 TMA loads in TTGIR
    instead of 6, 131 KB of shared memory instead of 213 KB) and ran ~4x slower.  Without
    ``tt.flatten`` the K loop is pipelined on its own and the epilogue keeps its barrier."""
    loops = [o for o in ancestors(store, None)
             if isinstance(o, scf.ForOp) and "tt.flatten" in o.attributes]
    for loop in loops:
        del loop.attributes["tt.flatten"]
    return len(loops)
