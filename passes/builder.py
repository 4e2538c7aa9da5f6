"""A small insertion-point builder for the ops the passes create.

Passes build integer arithmetic (to re-materialise tile bounds), ``tt`` ops (loads, atomics,
inline asm, pointer casts) and structured control flow.  ``arith`` ops are xDSL's own classes
(``arith.cmpi`` the mirror's override), ``tt`` ops the mirror's, inserted with :meth:`Builder.insert`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, IntegerType, ModuleOp, i1, i32, i64
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue

from syncopate.errors import CompileError
from syncopate_mlir.dialects.tt import CmpiOp, FuncOp

from .ir_utils import const_int, kernel_func
from .poly import Axis, IterCount, Poly


def _enclosing_function_location(block: Block):
    """A located op to attribute new code to: the ``tt.func`` around ``block`` when it has a
    location, else the module's kernel (a private helper function the lowering created has
    none). None outside a function."""
    op = block.parent_op() if block is not None else None
    func = None
    while op is not None:
        if isinstance(op, FuncOp) and func is None:
            func = op
        if isinstance(op, ModuleOp):
            break
        op = op.parent_op()
    loc = getattr(func, "location", None)
    if loc is not None and type(loc).__name__ != "UnknownLoc":
        return loc
    if isinstance(op, ModuleOp):
        try:
            return kernel_func(op).location
        except CompileError:  # not exactly one public function (dialect-only lit tests)
            return None
    return None


def _program_order(var) -> tuple:
    """A key ordering a monomial's factors the same way in every run: axes, then iteration
    counts and SSA values by where they are defined (the path of block / op indices from the
    outermost op). ``poly._var_key`` orders them by ``id``, which varies between runs."""
    if isinstance(var, Axis):
        return (0, (var.index,))
    if isinstance(var, IterCount):
        return (1, _position(var.loop))
    if isinstance(var, SSAValue):
        owner = var.owner
        if isinstance(owner, Block):  # a block argument: the block's position, then its index
            return (2, _position(owner.parent_op()) + (_block_index(owner), -1, var.index))
        return (2, _position(owner) + (var.index,))
    return (3, ())


def _block_index(block: Block) -> int:
    region = block.parent
    return 0 if region is None else list(region.blocks).index(block)


def _position(op: Operation | None) -> tuple:
    """``op``'s path from the outermost op: (block index, op index) at every nesting level."""
    path: list[int] = []
    while op is not None and op.parent is not None:
        block = op.parent
        path[:0] = [_block_index(block), block.get_operation_index(op)]
        op = block.parent_op()
    return tuple(path)


def _binary(op_cls: type[Operation]):
    """A :class:`Builder` method inserting the binary ``op_cls`` of ``a`` and ``b``."""
    def build(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(op_cls(a, b)).result
    return build


class Builder:
    """Inserts new ops before ``anchor`` (or at the end of ``block`` when no anchor).

    New ops take the anchor's source location, or the kernel's when the anchor has none:
    Triton's debug-info pass rejects calls without a file location, and profilers then still
    attribute the inserted code to the kernel. (Derived from the insertion point, not kept in
    shared state: passes do not have to set anything up first.)"""

    def __init__(self, anchor: Operation | None = None, block: Block | None = None,
                 location=None):
        if anchor is None and block is None:
            raise ValueError("Builder needs an anchor op or a block")
        self.anchor = anchor
        self.block = block if block is not None else anchor.parent_block()
        self.location = location if location is not None else (
            anchor.location if anchor is not None else None)

    def effective_location(self):
        """The location new ops get: the anchor's, else the enclosing function's. A builder for
        a block not yet inside a function (a loop body being built) takes it from the builder
        that will insert the loop: ``Builder(None, body, location=b.effective_location())``."""
        loc = self.location
        if loc is None or type(loc).__name__ == "UnknownLoc":
            loc = _enclosing_function_location(self.block)
        return loc

    @classmethod
    def at_start(cls, block: Block) -> "Builder":
        return cls(block.first_op, block)

    def insert(self, op: Operation) -> Operation:
        loc = self.effective_location()
        if loc is not None:
            op.location = loc
        if self.anchor is not None:
            self.block.insert_op_before(op, self.anchor)
        else:
            self.block.add_op(op)
        return op

    # arith ----------------------------------------------------------------------------------
    def const(self, value: int, ty: Attribute = i32) -> SSAValue:
        return self.insert(arith.ConstantOp(IntegerAttr(value, ty))).result

    def value(self, x: int | SSAValue) -> SSAValue:
        """An int as an i32 constant, an SSA value as it is (a bound the unrolled lowering
        knows, or one the table lowering reads at run time)."""
        return self.const(x) if isinstance(x, int) else x

    add, sub, mul = _binary(arith.AddiOp), _binary(arith.SubiOp), _binary(arith.MuliOp)
    divsi, minsi, maxsi = _binary(arith.DivSIOp), _binary(arith.MinSIOp), _binary(arith.MaxSIOp)
    andi, ori = _binary(arith.AndIOp), _binary(arith.OrIOp)

    def cmp(self, pred: str, a: SSAValue, b: SSAValue) -> SSAValue:
        # the mirror's arith.cmpi (the one the context loads): xDSL's own class only allows an
        # i1 result, so a tensor compare built with it fails verification (syncopate-opt
        # verifies after each pass) although it prints the same text
        return self.insert(CmpiOp(a, b, pred)).result

    def select(self, c: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.insert(arith.SelectOp(c, a, b)).result

    def cast(self, v: SSAValue, ty: IntegerType) -> SSAValue:
        """Integer width change (sign-extending), or the value itself."""
        src = v.type
        if src == ty:
            return v
        if isinstance(src, IndexType):
            return self.insert(arith.IndexCastOp(v, ty)).result
        if not isinstance(src, IntegerType):
            raise CompileError(f"cannot use a value of type {src} as an integer bound")
        if src.width.data < ty.width.data:
            return self.insert(arith.ExtSIOp(v, ty)).result
        return self.insert(arith.TruncIOp(v, ty)).result

    def i32(self, v: SSAValue) -> SSAValue:
        return self.cast(v, i32)

    def i64(self, v: SSAValue) -> SSAValue:
        return self.cast(v, i64)

    def all_of(self, conds: Sequence[SSAValue]) -> SSAValue:
        if not conds:
            return self.const(1, i1)
        out = conds[0]
        for c in conds[1:]:
            out = self.andi(out, c)
        return out

    # polynomials ----------------------------------------------------------------------------
    def poly(self, p: Poly, cache: dict | None = None) -> SSAValue:
        """Materialise a scalar polynomial as i32 arithmetic at the insertion point."""
        if p.axes():
            raise CompileError(f"internal: cannot materialise a tensor polynomial {p} as a scalar")
        cache = {} if cache is None else cache
        total = None
        const = 0
        for mono, coef in p.terms.items():
            if mono == ():
                const += coef
                continue
            term = None
            # a monomial's factors are sorted by object identity (``poly._mono``: canonical
            # within a run); emit them in program order so the same kernel compiles to the
            # same TTIR every time (a traced and an untraced compile are compared op for op)
            for var in sorted(mono, key=_program_order):
                v = self._var(var, cache)
                term = v if term is None else self.mul(term, v)
            if coef != 1:
                term = self.mul(term, self.const(coef))
            total = term if total is None else self.add(total, term)
        if total is None:
            return self.const(const)
        if const:
            total = self.add(total, self.const(const))
        return total

    def box(self, dims, shape: Sequence[int], only=None) -> tuple[list[SSAValue], list[SSAValue]]:
        """``lo`` and ``hi = lo + extent`` of the box an access touches (``dims``: its
        :class:`.access.DimRange` per dim), the operands of a wait or signal region; a dim not
        in ``only`` (a dim no chunk cuts) spans the whole tensor of ``shape``."""
        cache: dict = {}
        lo, hi = [], []
        for d, size in enumerate(shape):
            if only is None or d in only:
                lo.append(self.poly(dims[d].lo, cache))
                hi.append(self.add(lo[-1], self.const(dims[d].extent)))
            else:
                lo.append(self.const(0))
                hi.append(self.const(size))
        return lo, hi

    def _var(self, var, cache: dict) -> SSAValue:
        key = var if isinstance(var, (Axis, IterCount)) else id(var)
        if key in cache:
            return cache[key]
        if isinstance(var, IterCount):
            loop = var.loop
            iv = loop.regions[0].blocks[0].args[0]
            lb, step = loop.operands[0], loop.operands[2]
            n = self.sub(self.i32(iv), self.i32(lb))
            if const_int(step) != 1:
                n = self.divsi(n, self.i32(step))
            value = n
        elif isinstance(var, Axis):
            raise CompileError("internal: axis variable in a scalar polynomial")
        else:
            value = self.i32(var)
        cache[key] = value
        return value

    # scf ------------------------------------------------------------------------------------
    def for_(self, lb: SSAValue, ub: SSAValue, step: SSAValue,
             inits: Sequence[SSAValue] = ()) -> tuple[scf.ForOp, "Builder", SSAValue, list]:
        """An ``scf.for`` over ``[lb, ub)`` by ``step`` carrying ``inits``; returns the loop, a
        builder at the end of its (empty) body, the induction variable and the carried values.
        The caller ends the body with ``scf.yield`` of the next carried values."""
        body = Block(arg_types=[lb.type] + [v.type for v in inits])
        loop = self.insert(scf.ForOp(lb, ub, step, list(inits), Region(body)))
        inner = Builder(None, body, location=self.effective_location())
        return loop, inner, body.args[0], list(body.args[1:])

    def if_(self, cond: SSAValue, result_types: Sequence[Attribute] = ()) -> scf.IfOp:
        """An ``scf.if`` with empty then (and else) blocks, each ending in ``scf.yield``
        when it has results (the caller fills them with :meth:`at_start`)."""
        then_block = Block()
        else_block = Block()
        if not result_types:
            # always an else block: Triton's loop fusion (tl.range(flatten=True)) adds results
            # to ifs it meets and needs both branches to yield them
            then_block.add_op(scf.YieldOp())
            else_block.add_op(scf.YieldOp())
        op = scf.IfOp(cond, list(result_types), Region(then_block), Region(else_block))
        return self.insert(op)

    def then(self, cond: SSAValue) -> Builder:
        """A builder into the then block of a new result-less ``scf.if cond`` (before its
        yield): the guarded steps of the lowerings (``if pid == 0``, ``if rank == r``)."""
        return Builder(self.if_(cond).true_region.blocks[0].last_op)
