"""Symbolic evaluation of the index and pointer SSA values of a kernel, for the access
analysis (:mod:`.access`).

:class:`Evaluator` turns an integer SSA value into a :class:`~.poly.Poly` over scalar leaves
(program ids, loop counters, kernel arguments) and tile axes, and a pointer into ``base + off``
(:class:`PtrVal`), following ``splat``/``broadcast``/``expand_dims``/``trans``/``make_range``,
integer ``+ - *``, casts and ``scf.for``-carried inductions; what it cannot follow raises
:class:`AnalysisFailure` naming the op.  Split from :mod:`.access` (which turns these values
into boxes of the communicated tensors); ``tile-remap`` and ``check-accesses`` use the
evaluator on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, scf
from xdsl.ir import BlockArgument, Operation, SSAValue

from syncopate_mlir.dialects.tt import (
    AddPtrOp,
    BitcastOp,
    BroadcastOp,
    ExpandDimsOp,
    FuncOp,
    MakeRangeOp,
    SplatOp,
    TransOp,
    element_type,
    is_ptr_like,
    is_tensor,
)

from .ir_utils import const_int, defined_inside, is_int_type, result_axis
from .poly import Axis, IterCount, Poly

__all__ = ["AnalysisFailure", "PtrVal", "Evaluator"]

#: integer casts the index analysis looks through (a widened or narrowed index is the same index)
_PASS_THROUGH = (arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp, arith.IndexCastOp)


def _pointee_bits(t) -> int | None:
    """The width in bits of the scalar a pointer (or tensor of pointers) ``t`` points to."""
    pointee = getattr(element_type(t), "pointee_type", None)
    width = getattr(pointee, "width", None)  # integers
    if width is not None:
        return width.data
    return getattr(pointee, "bitwidth", None)  # floats


class AnalysisFailure(Exception):
    def __init__(self, op: Operation | None, reason: str):
        self.op = op
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class PtrVal:
    """``base + off`` (elements): ``base`` is a kernel parameter (or a marker)."""

    base: object
    off: Poly


_SELF = object()  # marker for the loop-carried value itself in an induction


class Evaluator:
    """Symbolic values of integer and pointer SSA values (memoised)."""

    def __init__(self, overrides: dict | None = None):
        self.overrides = overrides or {}
        self.memo: dict[int, object] = {}

    # integers -----------------------------------------------------------------------------
    def _memo(self, v: SSAValue, evaluate):
        if v in self.overrides:
            return self.overrides[v]
        key = id(v)
        if key not in self.memo:
            self.memo[key] = evaluate(v)
        return self.memo[key]

    def value(self, v: SSAValue) -> Poly:
        return self._memo(v, self._value)

    def _value(self, v: SSAValue) -> Poly:
        c = const_int(v)
        if c is not None:
            return Poly.const(c)
        t = v.type
        if isinstance(v, BlockArgument):
            if not is_tensor(t):
                return Poly.var(v)
            return self._loop_carried(v, tensor=True)
        op = v.op
        name = op.name
        if isinstance(op, MakeRangeOp):
            return Poly.const(op.start.value.data) + Poly.var(Axis(0))
        if isinstance(op, (SplatOp, BroadcastOp)):
            return self.value(op.operands[0])
        if isinstance(op, (ExpandDimsOp, TransOp)):
            return self.value(op.operands[0]).map_axes(result_axis(op))
        if isinstance(op, arith.AddiOp):
            return self.value(op.lhs) + self.value(op.rhs)
        if isinstance(op, arith.SubiOp):
            return self.value(op.lhs) - self.value(op.rhs)
        if isinstance(op, arith.MuliOp):
            return self.value(op.lhs) * self.value(op.rhs)
        if isinstance(op, arith.ExtUIOp) and getattr(
                getattr(element_type(op.operands[0].type), "width", None), "data", 0) == 1:
            # a zero-extended i1 is 0 or 1, but the i1 itself, a leaf, reads as 0 or -1 (its
            # value sign-extended wherever a leaf is rebuilt: a wait's chunk test waited for
            # the chunk before the tile's); the extended value is the leaf
            if not is_tensor(t):
                return Poly.var(v)
            raise AnalysisFailure(op, "cannot follow index arithmetic through a boolean "
                                      "converted to an integer ('arith.extui' of i1)")
        if isinstance(op, _PASS_THROUGH):
            return self.value(op.operands[0])
        if isinstance(op, (arith.RemSIOp, arith.RemUIOp)) and is_tensor(t):
            # (offs % M): the wrapped lanes only feed masked-out outputs (module docstring)
            return self.value(op.operands[0])
        if not is_tensor(t) and is_int_type(t):
            return Poly.var(v)  # an opaque scalar: a leaf
        raise AnalysisFailure(op, f"cannot follow index arithmetic through '{name}'")

    # pointers -----------------------------------------------------------------------------
    def pointer(self, v: SSAValue) -> PtrVal:
        return self._memo(v, self._pointer)

    def _pointer(self, v: SSAValue) -> PtrVal:
        if isinstance(v, BlockArgument):
            owner = v.block.parent_op()
            if isinstance(owner, FuncOp):
                return PtrVal(v, Poly.const(0))
            return self._loop_carried(v, tensor=False)
        op = v.op
        name = op.name
        if isinstance(op, (SplatOp, BroadcastOp)):
            return self.pointer(op.operands[0])
        if isinstance(op, (ExpandDimsOp, TransOp)):
            p = self.pointer(op.operands[0])
            return PtrVal(p.base, p.off.map_axes(result_axis(op)))
        if isinstance(op, AddPtrOp):
            p = self.pointer(op.operands[0])
            return PtrVal(p.base, p.off + self.value(op.operands[1]))
        if isinstance(op, BitcastOp) and is_ptr_like(op.operands[0].type):
            # x_ptr.to(tl.pointer_type(tl.int32)) over f32: a typed view of the same elements,
            # so the same offsets; a view with elements of another size counts other units
            src, dst = (_pointee_bits(t) for t in (op.operands[0].type, op.results[0].type))
            if src is not None and src == dst:
                return self.pointer(op.operands[0])
            raise AnalysisFailure(op, f"a pointer cast from {src}-bit to {dst}-bit elements "
                                      f"(its offsets count elements of another size)")
        raise AnalysisFailure(op, f"cannot follow pointer arithmetic through '{name}'")

    # loop-carried values ------------------------------------------------------------------
    def _loop_carried(self, arg: BlockArgument, tensor: bool) -> object:
        loop = arg.block.parent_op()
        if not isinstance(loop, scf.ForOp) or arg.index == 0:
            if tensor or is_ptr_like(arg.type):
                raise AnalysisFailure(loop, "a loop-carried pointer or index tensor that is not "
                                            "carried by an scf.for")
            return Poly.var(arg)
        init = loop.operands[3 + arg.index - 1]
        yielded = arg.block.last_op.operands[arg.index - 1]
        is_ptr = is_ptr_like(arg.type)
        marker = PtrVal(_SELF, Poly.const(0)) if is_ptr else Poly.var(arg)
        sub = Evaluator({**self.overrides, arg: marker})
        if is_ptr:
            start = self.pointer(init)
            y = sub.pointer(yielded)
            if y.base is not _SELF:
                raise AnalysisFailure(loop, "a loop-carried pointer is not advanced from itself")
            inc = y.off
        else:
            start = self.value(init)
            inc = sub.value(yielded) - Poly.var(arg)
        if any(isinstance(x, SSAValue) and defined_inside(x, loop) for x in inc.vars()) or \
                arg in inc.vars():
            raise AnalysisFailure(loop, "a loop-carried pointer advances by a step that changes "
                                        "from one iteration to the next")
        step = inc * Poly.var(IterCount(loop))
        if is_ptr:
            return PtrVal(start.base, start.off + step)
        return start + step
