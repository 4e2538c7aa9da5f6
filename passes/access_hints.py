"""``syncopate.language.hint_region1``/``2``/``3`` in the IR: the calls that assert an access's box.

A hint survives into TTIR as a ``tt.call`` to a no-inline function whose name starts with
:data:`HINT_PREFIX` (Triton mangles constexpr arguments into that name).  The access analysis
(:mod:`.access`) reads the bounds a hint passes (:func:`hint_bounds`) and the lowering erases
hints and their callees (:func:`erase_hints`) so that Triton never sees them.  Split from
:mod:`.access`: what a hint looks like in the IR, in one place.
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation

from syncopate_mlir.dialects.tt import CallOp, FuncOp

from .access_eval import Evaluator
from .ir_utils import _get_attr
from .poly import Poly

__all__ = ["HINT_PREFIX", "is_hint", "callee_name", "hint_bounds", "erase_hints", "symbol_name"]

HINT_PREFIX = "syncopate_hint_region"


def is_hint(op: Operation) -> bool:
    """Whether ``op`` is a hint call."""
    return isinstance(op, CallOp) and HINT_PREFIX in callee_name(op)


def hint_bounds(hint: Operation, ev: Evaluator) -> list[Poly]:
    """The bounds a hint call passes: runtime operands, plus the constexpr ones Triton
    specialised into the callee's mangled name (``(3,)cconstexpr_0_``: argument 3 is 0)."""
    name = callee_name(hint)
    consts = {int(i): int(v) for i, v in re.findall(r"\((\d+),\)cconstexpr_(-?\d+)_", name)}
    n_args = len(hint.operands) + len(consts)
    runtime = iter(hint.operands)
    bounds: list[Poly] = []
    for i in range(n_args):
        if i in consts:
            bounds.append(Poly.const(consts[i]))
        else:
            v = next(runtime)
            if i > 0:
                bounds.append(ev.value(v))
    return bounds


def erase_hints(module: ModuleOp) -> None:
    """Remove every hint call and hint callee (the lowering does this: Triton never sees them)."""
    callees = set()
    for op in list(module.walk()):
        if is_hint(op):
            callees.add(callee_name(op))
            op.detach()
            op.erase()
    for op in list(module.ops):
        if isinstance(op, FuncOp) and symbol_name(op) in callees:
            op.detach()
            op.erase()


def callee_name(call: Operation) -> str:
    """The symbol a ``tt.call`` calls ("" if it has none)."""
    callee = _get_attr(call, "callee")
    if callee is None:
        return ""
    return callee.root_reference.data if hasattr(callee, "root_reference") else str(callee)


def symbol_name(func: Operation) -> str:
    """The ``sym_name`` of a function."""
    attr = _get_attr(func, "sym_name")
    return getattr(attr, "data", str(attr))
