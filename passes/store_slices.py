"""The pure scalar slice that computes a produced store's box, for the launch-time check that
no element is stored twice (:mod:`syncopate.tiling` says why and evaluates it).

``check-accesses`` calls :func:`store_slice` for every store of a produced tensor: the box's
start per dim (the :class:`~.poly.Poly` of the access analysis) is written as
:class:`~syncopate.tiling.Step`\\ s over program ids, ``num_programs``, kernel scalar arguments
and constants, through integer arithmetic, compares, selects and ``scf.if`` results; every
enclosing ``scf.for`` becomes a ``for`` step (its bounds sliced the same way) and every
enclosing ``scf.if`` a ``where`` step on its condition.  What the slice cannot express -- a
value loaded from memory (a tile from an atomic counter, a routed row), a ``while`` loop, a
value a loop carries other than a counter advanced by a loop-invariant step, a branch whose
condition reads memory (split-K's "the last program of a tile stores it", decided by an atomic
counter) -- leaves the store unchecked, and :func:`store_slice` says why (a remark of the ABI,
docs/soundness.md).  ``tile-remap`` slices its tile coordinates the same way
(:func:`values_slice`), for the launch check that its remap renumbers the launch's tiles.
"""

from __future__ import annotations

import functools

from xdsl.dialects import arith, scf
from xdsl.ir import BlockArgument, Operation, OpResult, SSAValue

from syncopate.tiling import Op, Step, StoreSlice
from syncopate_mlir.dialects.tt import FuncOp, GetNumProgramsOp, GetProgramIdOp, is_tensor

from .access import Access
from .ir_utils import ancestors, const_int, defined_inside, loc_str
from .poly import IterCount, Poly
from .purity import Purity

_OPS = {
    arith.AddiOp: Op.ADD, arith.SubiOp: Op.SUB, arith.MuliOp: Op.MUL,
    arith.DivSIOp: Op.DIVS, arith.DivUIOp: Op.DIVU, arith.RemSIOp: Op.REMS,
    arith.RemUIOp: Op.REMU, arith.CeilDivSIOp: Op.CEILDIVS, arith.CeilDivUIOp: Op.CEILDIVU,
    arith.FloorDivSIOp: Op.FLOORDIVS, arith.MinSIOp: Op.MINS, arith.MaxSIOp: Op.MAXS,
    arith.MinUIOp: Op.MINU, arith.MaxUIOp: Op.MAXU, arith.AndIOp: Op.AND, arith.OrIOp: Op.OR,
    arith.XOrIOp: Op.XOR, arith.ShLIOp: Op.SHL, arith.ShRSIOp: Op.SHRS, arith.ShRUIOp: Op.SHRU,
    arith.ExtSIOp: Op.EXTS, arith.ExtUIOp: Op.EXTU, arith.TruncIOp: Op.TRUNC,
    arith.IndexCastOp: Op.EXTS, arith.CmpiOp: Op.CMP, arith.SelectOp: Op.SELECT,
}


class _Unsliced(Exception):
    """The slice reaches a value it cannot express; ``args[0]`` says what."""


def store_slice(a: Access, shape, names: dict, purity: Purity) -> StoreSlice | str:
    """The :class:`StoreSlice` of store ``a`` into a box of ``shape``, or why there is none."""
    s = _Slicer(names, purity)
    try:
        chain = ancestors(a.op, None)
        for op in reversed(chain[:next(i for i, o in enumerate(chain) if isinstance(o, FuncOp))]):
            s.enter(op, a.op)
        start = tuple(s.poly(d.lo) for d in a.dims)
    except _Unsliced as e:
        return e.args[0]
    return StoreSlice(a.tensor, loc_str(a.op) or "?", tuple(shape), tuple(s.steps), start,
                      tuple(d.extent for d in a.dims))


def values_slice(loops, values, names: dict, purity: Purity) -> tuple[list[Step], list[int]] | str:
    """The steps that compute ``values`` (pure scalars) for every program and every iteration
    of ``loops`` (the ``scf.for`` ops that enclose them, outermost first): ``(steps, the step
    of each value)``, or why there is none (tile-remap's launch check,
    :class:`syncopate.tiling.RemapSlice`)."""
    s = _Slicer(names, purity)
    try:
        for loop in loops:
            s.enter(loop, None)
        at = [s.value(v) for v in values]
    except _Unsliced as e:
        return e.args[0]
    return s.steps, at


def counter_step(arg: BlockArgument) -> SSAValue | None:
    """The loop-invariant step by which its ``scf.for`` advances the carried value ``arg``
    (``tile_id += NUM_SMS``), or None when it is not such a counter."""
    loop = arg.block.parent_op()
    y = arg.block.last_op.operands[arg.index - 1]
    if not (isinstance(y, OpResult) and isinstance(y.op, arith.AddiOp)):
        return None
    return next((o for o, other in ((y.op.lhs, y.op.rhs), (y.op.rhs, y.op.lhs))
                 if other is arg and not defined_inside(o, loop)), None)


def _bits(t) -> int:
    width = getattr(getattr(t, "width", None), "data", None)
    return 64 if width is None else width


class _Slicer:
    def __init__(self, names: dict, purity: Purity):
        self.names = names
        self.purity = purity
        self.steps: list[Step] = []
        self.memo: dict = {}  # SSA value or IterCount -> step

    def emit(self, op: Op, args=(), bits: int = 64, **kw) -> int:
        self.steps.append(Step(op, tuple(args), bits=bits, **kw))
        return len(self.steps) - 1

    def enter(self, op: Operation, store: Operation) -> None:
        """Enter ``op``, an ancestor of the store (outermost first)."""
        if isinstance(op, scf.ForOp):
            lb, ub, step = (self.value(v) for v in (op.lb, op.ub, op.step))
            bits = _bits(op.lb.type)
            k = self.emit(Op.FOR, (lb, ub, step), bits)
            self.memo[IterCount(op)] = k
            self.memo[op.body.block.args[0]] = self.emit(
                Op.ADD, (lb, self.emit(Op.MUL, (k, step), bits)), bits)
        elif isinstance(op, scf.IfOp):
            if not self.purity.is_pure(op.cond):
                raise _Unsliced(f"whether it runs depends on "
                                f"{self.purity.why_impure(op.cond)} (the scf.if at "
                                f"{loc_str(op)})")
            cond = self.value(op.cond)
            if not op.true_region.is_ancestor(store):
                cond = self.emit(Op.XOR, (cond, self.emit(Op.CONST, value=-1, bits=1)), 1)
            self.emit(Op.WHERE, (cond,))
        else:
            raise _Unsliced(f"it sits in the {op.name} at {loc_str(op)}, whose iterations the "
                            f"check does not enumerate")

    def poly(self, p: Poly) -> int:
        terms = []
        for mono, coef in p.terms.items():
            factors = [self._leaf(v) for v in mono]
            if coef != 1 or not factors:
                factors.insert(0, self.emit(Op.CONST, value=coef))
            terms.append(functools.reduce(lambda x, y: self.emit(Op.MUL, (x, y)), factors))
        return functools.reduce(lambda x, y: self.emit(Op.ADD, (x, y)), terms) if terms \
            else self.emit(Op.CONST)

    def _leaf(self, v) -> int:
        if isinstance(v, IterCount):
            if v not in self.memo:
                raise _Unsliced(f"it moves with the loop at {loc_str(v.loop)}, which does not "
                                f"enclose it")
            return self.memo[v]
        return self.value(v)

    def value(self, v: SSAValue) -> int:
        if v not in self.memo:
            self.memo[v] = self._value(v)
        return self.memo[v]

    def _value(self, v: SSAValue) -> int:
        bits = _bits(v.type)
        c = const_int(v)
        if c is not None:
            return self.emit(Op.CONST, value=c, bits=bits)
        if is_tensor(v.type) or not self.purity.is_pure(v):
            raise _Unsliced(f"its box depends on {self.purity.why_impure(v)}"
                            if not is_tensor(v.type) else "its box depends on a tensor value")
        if isinstance(v, BlockArgument):
            owner = v.block.parent_op()
            if isinstance(owner, FuncOp):
                return self.emit(Op.ARG, name=self.names[v], bits=bits)
            if isinstance(owner, scf.ForOp) and v.index > 0:
                return self._counter(owner, v)
            raise _Unsliced(f"its box depends on a value of the {owner.name} at "
                            f"{loc_str(owner)}, which does not enclose it")
        op = v.op
        if isinstance(op, GetProgramIdOp):
            return self.emit(Op.PID, value=op.axis_int, bits=bits)
        if isinstance(op, GetNumProgramsOp):
            return self.emit(Op.NPROGS, value=op.axis_int, bits=bits)
        if isinstance(op, scf.IfOp):
            then, other = (r.blocks[0].last_op.operands[v.index] for r in op.regions)
            return self.emit(Op.SELECT, (self.value(op.cond), self.value(then),
                                         self.value(other)), bits)
        kind = next((k for cls, k in _OPS.items() if isinstance(op, cls)), None)
        if kind is None:
            raise _Unsliced(f"its box depends on the result of the {op.name} at {loc_str(op)}")
        args = tuple(self.value(x) for x in op.operands)
        value = op.predicate.value.data if kind is Op.CMP else 0
        return self.emit(kind, args, bits, value=value)

    def _counter(self, loop: scf.ForOp, arg: BlockArgument) -> int:
        """A value ``loop`` carries that each iteration advances by a loop-invariant step
        (``tile_id += NUM_SMS``): its initial value plus the step times the iteration."""
        if IterCount(loop) not in self.memo:
            raise _Unsliced(f"its box depends on a value the loop at {loc_str(loop)} carries, "
                            f"which does not enclose it")
        step = counter_step(arg)
        if step is not None:
            init = self.value(loop.operands[3 + arg.index - 1])
            k = self.memo[IterCount(loop)]
            bits = _bits(arg.type)
            return self.emit(Op.ADD, (init, self.emit(Op.MUL, (k, self.value(step)), bits)),
                             bits)
        raise _Unsliced(f"its box depends on a value the loop at {loc_str(loop)} carries that "
                        f"is not a counter advanced by a loop-invariant step")
