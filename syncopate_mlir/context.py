"""The xDSL context that reads and writes Triton's TTIR.

:func:`make_context` loads every dialect that appears in TTIR (builtin, arith, scf, math, cf,
ub, gpu, llvm, tt) and the ``syncopate`` dialect.  Unregistered ops
are *not* allowed: an op the mirror does not know must fail loudly (the bridge turns the parse
error into :class:`syncopate.errors.UnknownOpError`).

``arith.select`` is replaced by the override in :mod:`syncopate_mlir.dialects.tt`, whose syntax
matches what MLIR prints and accepts (a tensor condition).
"""

from __future__ import annotations

import functools

from xdsl.context import Context
from xdsl.dialects import arith, builtin, cf, gpu, llvm, math, scf, ub
from xdsl.ir import Dialect

from .dialects.syncopate import SYNCOPATE
from .dialects.tt import OVERRIDE_OPS, TT


def _patched(dialect: Dialect, overrides) -> Dialect:
    """``dialect`` with the ops of ``overrides`` of its namespace replacing (or added to) its
    own."""
    mine = {op.name: op for op in overrides if op.name.split(".", 1)[0] == dialect.name}
    ops = [mine.pop(op.name, op) for op in dialect.operations]
    return Dialect(dialect.name, ops + list(mine.values()), list(dialect.attributes))


@functools.lru_cache(maxsize=1)
def _dialects() -> tuple[Dialect, ...]:
    return (
        builtin.Builtin,
        _patched(arith.Arith, OVERRIDE_OPS),
        _patched(scf.Scf, OVERRIDE_OPS),
        math.Math,
        cf.Cf,
        ub.UB,
        _patched(gpu.GPU, OVERRIDE_OPS),
        _patched(llvm.LLVM, OVERRIDE_OPS),
        TT,
        SYNCOPATE,
    )


def make_context() -> Context:
    """A fresh xDSL context with the TTIR dialects loaded (no unregistered ops)."""
    ctx = Context(allow_unregistered=False)
    for d in _dialects():
        ctx.load_dialect(d)
    return ctx
