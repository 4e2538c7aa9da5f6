"""Which integer values are *pure tile indices*: functions of the program id, the tile loops'
induction variables, kernel scalar arguments and constants only.

The soundness policy (docs/soundness.md) lets ``tile-remap`` rewrite only such values.  A value
that depends on a load (a gather's row index), an atomic, or anything else the analysis does not
model differs between ranks or launches in ways a compile-time permutation table cannot follow;
remapping it would make a rank read or write rows nobody asked for.  This module answers the
question by walking the backward slice of a value; loop-carried values are pure when their
initial value and every yielded value are (a greatest fixed point: a cycle through pure ops is
pure).
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from syncopate_mlir.dialects.tt import (
    CallOp,
    ElementwiseInlineAsmOp,
    GetNumProgramsOp,
    GetProgramIdOp,
    is_tensor,
)

from .ir_utils import is_int_type
from .memory_ops import Effect, memory_op

#: ops whose result is a pure function of pure operands (scalar integer arithmetic); the
#: mirror's overrides of ``arith.cmpi``/``select``/``extsi``/``extui``/``trunci`` subclass
#: these classes
PURE_OPS = (
    arith.ConstantOp, arith.AddiOp, arith.SubiOp, arith.MuliOp, arith.DivSIOp, arith.DivUIOp,
    arith.RemSIOp, arith.RemUIOp, arith.CeilDivSIOp, arith.CeilDivUIOp, arith.FloorDivSIOp,
    arith.MinSIOp, arith.MaxSIOp, arith.MinUIOp, arith.MaxUIOp, arith.ExtSIOp, arith.ExtUIOp,
    arith.TruncIOp, arith.IndexCastOp, arith.CmpiOp, arith.SelectOp,
    arith.AndIOp, arith.OrIOp, arith.XOrIOp, arith.ShLIOp, arith.ShRSIOp, arith.ShRUIOp,
    GetProgramIdOp, GetNumProgramsOp,
)
#: pure ops that have no class in xDSL 0.75 or the mirror, kept by name: the context refuses
#: unregistered ops, so this matches only once one of them defines the op
_PURE_BY_NAME = frozenset({"arith.index_castui"})

#: ops whose result may differ between launches or ranks for the same program id (besides
#: memory accesses, which memory_ops classifies)
_WHY = (
    (CallOp, "the result of a function call"),
    (ElementwiseInlineAsmOp, "the result of inline assembly"),
)


def is_pure_op(op: Operation) -> bool:
    """Whether ``op`` is one of :data:`PURE_OPS` (its results are pure when its operands are)."""
    return isinstance(op, PURE_OPS) or op.name in _PURE_BY_NAME


def _why(op: Operation) -> str:
    mem = memory_op(op)
    if mem is not None:
        return "a value loaded from memory" if mem.effect is Effect.READ else \
            "the result of an atomic"
    for classes, why in _WHY:
        if isinstance(op, classes):
            return why
    return f"the result of '{op.name}'"


class Purity:
    """Memoised purity of SSA values inside one kernel function ``func``."""

    def __init__(self, func: Operation):
        self.func = func
        self.memo: dict[int, bool] = {}
        self.reason: dict[int, str] = {}

    def is_pure(self, v: SSAValue) -> bool:
        key = id(v)
        if key in self.memo:
            return self.memo[key]
        self.memo[key] = True  # optimistic on cycles (loop-carried values)
        pure, why = self._pure(v)
        self.memo[key] = pure
        if not pure:
            self.reason[key] = why
        return pure

    def why_impure(self, v: SSAValue) -> str:
        """A short phrase saying what the value depends on (after :meth:`is_pure` was False)."""
        return self.reason.get(id(v), "a value the analysis does not model")

    def _pure(self, v: SSAValue) -> tuple[bool, str]:
        if isinstance(v, BlockArgument):
            owner = v.block.parent_op()
            if owner is self.func:
                return True, ""  # a kernel scalar argument: the same for every program
            if owner is None:
                return False, "an argument of an unknown block"
            if isinstance(owner, scf.ForOp):
                if v.index == 0:  # the induction variable
                    ok = all(self.is_pure(owner.operands[i]) for i in range(3))
                    return ok, "" if ok else "a loop whose bounds are not pure"
                init = owner.operands[3 + v.index - 1]
                yielded = v.block.last_op.operands[v.index - 1]
                ok = self.is_pure(init) and self.is_pure(yielded)
                return ok, "" if ok else "a loop-carried value that is not pure"
            if isinstance(owner, scf.WhileOp):
                region_index = 0 if v.block is owner.regions[0].blocks[0] else 1
                if region_index == 0:
                    init = owner.operands[v.index]
                    after = owner.regions[1].blocks[0].last_op
                    ok = self.is_pure(init) and self.is_pure(after.operands[v.index])
                else:
                    cond = owner.regions[0].blocks[0].last_op  # scf.condition(%c, args...)
                    ok = self.is_pure(cond.operands[1 + v.index])
                return ok, "" if ok else "a while-loop value that is not pure"
            return False, f"an argument of a '{owner.name}' region"
        assert isinstance(v, OpResult)
        op = v.op
        if is_pure_op(op):
            for operand in op.operands:
                if not self.is_pure(operand):
                    return False, self.why_impure(operand)
            return True, ""
        if isinstance(op, scf.IfOp):
            idx = v.index
            ok = self.is_pure(op.operands[0]) and all(
                self.is_pure(region.blocks[0].last_op.operands[idx]) for region in op.regions
                if region.blocks and region.blocks[0].last_op is not None
                and region.blocks[0].last_op.operands)
            return ok, "" if ok else "a branch whose condition or results are not pure"
        if isinstance(op, scf.ForOp):
            arg = op.regions[0].blocks[0].args[1 + v.index]
            ok = self.is_pure(arg)
            return ok, "" if ok else "a loop result that is not pure"
        return False, _why(op)


def forward_scalar_slice(v: SSAValue) -> list[OpResult]:
    """Scalar integer values computed from ``v`` through :data:`PURE_OPS` (excluding ``v``),
    in discovery order.  Tile coordinates derived from ``v`` (``j = pid - i * n``) are here."""
    out: list[OpResult] = []
    seen: set[int] = {id(v)}
    work = [v]
    while work:
        cur = work.pop()
        for use in list(cur.uses):
            user = use.operation
            if not is_pure_op(user):
                continue
            for res in user.results:
                if id(res) in seen or is_tensor(res.type) or not is_int_type(res.type):
                    continue
                seen.add(id(res))
                out.append(res)
                work.append(res)
    return out
