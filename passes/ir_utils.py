"""Small helpers over xDSL IR that every pass uses: op properties, constants, types, the
kernel function and its parameters, locations.  Ops are recognised by their typed classes
(xDSL's ``arith``, the ``tt`` mirror's), types by their classes (the mirror's type helpers,
``tt.shape_of`` ..., are the ones passes use), locations by :mod:`syncopate_mlir.locations`.
Imports nothing from the other passes (the bottom of the passes' import graph)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    ModuleOp,
)
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue

from syncopate.errors import CompileError
from syncopate_mlir.dialects.syncopate import request_of
from syncopate_mlir.dialects.tt import ExpandDimsOp, FuncOp, TensorDescType, TransOp
from syncopate_mlir.locations import source_location


def loc_str(op: Operation | None) -> str | None:
    """``file:line:col`` of an op's location (of an inlined call, the call's: the kernel line
    the user wrote), if any."""
    return source_location(getattr(op, "location", None), caller_first=True)


def at_loc(x) -> str:
    """`` at file:line:col`` of an op, or of the op defining a value, for a message; empty
    without a location (a block argument, an op Triton gave none)."""
    loc = loc_str(x.op if isinstance(x, OpResult) else x if isinstance(x, Operation) else None)
    return f" at {loc}" if loc else ""


def _get_attr(op: Operation, name: str):
    """A property, else an attribute, of ``op`` (None if absent).  Explicit ``is None`` tests:
    some attributes (``IntegerAttr(0)``) are falsy."""
    attr = op.properties.get(name)
    return attr if attr is not None else op.attributes.get(name)


def result_axis(op: ExpandDimsOp | TransOp) -> Callable[[int], int]:
    """Where an axis of a ``tt.expand_dims``'s or ``tt.trans``'s operand lands in its result
    (the index and mask analyses follow values through both)."""
    if isinstance(op, ExpandDimsOp):
        k = op.axis.value.data
        return lambda i: i + 1 if i >= k else i
    return {src: dst for dst, src in enumerate(op.order.get_values())}.__getitem__


def const_int(v: SSAValue) -> int | None:
    """The integer value of an ``arith.constant`` (scalar or splat tensor), else None."""
    if not isinstance(v, OpResult) or not isinstance(v.op, arith.ConstantOp):
        return None
    attr = _get_attr(v.op, "value")
    if isinstance(attr, IntegerAttr):
        return attr.value.data
    if isinstance(attr, DenseIntOrFPElementsAttr):
        try:
            vals = attr.get_values()
        except Exception:  # pragma: no cover - defensive for float splats
            return None
        vals = list(vals)
        if vals and all(isinstance(x, int) for x in vals) and len(set(vals)) == 1:
            return vals[0]
    return None


def is_int_type(t) -> bool:
    return isinstance(t, (IntegerType, IndexType))


def is_desc_type(t) -> bool:
    return isinstance(t, TensorDescType)


def kernel_func(module: ModuleOp) -> Operation:
    """The public ``tt.func`` of the module (the kernel)."""
    funcs = [op for op in module.ops if isinstance(op, FuncOp)]
    public = [f for f in funcs
              if getattr(_get_attr(f, "sym_visibility"), "data", None) in (None, "public")]
    if len(public) != 1:
        raise CompileError(f"expected exactly one public tt.func in the module, found "
                           f"{len(public)}")
    return public[0]


def func_body(func: Operation) -> Block:
    return func.regions[0].blocks[0]


def param_names(module: ModuleOp, func: Operation) -> list[str]:
    """Names of the kernel's (non-constexpr) parameters, in order.

    From the request's ``params`` when the compile hook set them, else from the SSA names of
    the entry block arguments (Triton prints parameters under their Python names)."""
    names = request_of(module).params
    args = func_body(func).args
    if names and len(names) >= len(args):
        return list(names[:len(args)])
    return [a.name_hint or f"arg{i}" for i, a in enumerate(args)]


def ancestors(op: Operation, stop: Operation) -> list[Operation]:
    """Ops enclosing ``op`` (innermost first) up to, excluding, ``stop``."""
    out = []
    cur = op.parent_op()
    while cur is not None and cur is not stop:
        out.append(cur)
        cur = cur.parent_op()
    return out


def defined_inside(v: SSAValue, op: Operation) -> bool:
    """Whether ``v`` is defined inside ``op`` (a result of a nested op or a block argument of
    one of its regions)."""
    owner = v.block.parent_op() if isinstance(v, BlockArgument) else v.op
    return owner is not None and op.is_ancestor(owner) and not (
        isinstance(v, OpResult) and v.op is op)
