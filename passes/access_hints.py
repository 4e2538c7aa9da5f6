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
from .poly import Poly

__all__ = ["HINT_PREFIX", "is_hint", "hint_bounds", "erase_hints"]

HINT_PREFIX = "syncopate_hint_region"


def is_hint(op: Operation) -> bool:
    """Whether ``op`` is a hint call."""
    return isinstance(op, CallOp) and HINT_PREFIX in op.callee.root_reference.data


def hint_bounds(hint: Operation, ev: Evaluator) -> list[Poly]:
    """The bounds a hint call passes: runtime operands, plus the constexpr ones Triton
    specialised into the callee's mangled name (``(3,)cconstexpr_0_``: argument 3 is 0)."""
    name = hint.callee.root_reference.data
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
            callees.add(op.callee.root_reference.data)
            op.detach()
            op.erase()
    for op in list(module.ops):
        if isinstance(op, FuncOp) and op.sym_name.data in callees:
            op.detach()
            op.erase()
