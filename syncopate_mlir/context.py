"""The xDSL context that reads and writes Triton's TTIR.

:func:`make_context` loads every dialect that appears in TTIR (builtin, arith, scf, math, cf,
ub, gpu, llvm, tt) and, when the module exists, the ``syncopate`` dialect.  Unregistered ops
are *not* allowed: an op the mirror does not know must fail loudly (the bridge turns the parse
error into :class:`syncopate.errors.UnknownOpError`).

``arith.select`` is replaced by the override in :mod:`syncopate_mlir.dialects.tt`, whose syntax
matches what MLIR prints and accepts (a tensor condition).
"""

from __future__ import annotations

import functools

from xdsl.context import Context
from xdsl.ir import Dialect


def _patched(dialect: Dialect, overrides) -> Dialect:
    """``dialect`` with the ops of ``overrides`` of its namespace replacing (or added to) its
    own."""
    mine = {op.name: op for op in overrides if op.name.split(".", 1)[0] == dialect.name}
    ops = [mine.pop(op.name, op) for op in dialect.operations]
    return Dialect(dialect.name, ops + list(mine.values()), list(dialect.attributes))


@functools.lru_cache(maxsize=1)
def _dialects() -> tuple[Dialect, ...]:
    from xdsl.dialects import arith, builtin, cf, gpu, llvm, math, scf, ub

    from .dialects.tt import OVERRIDE_OPS, TT

    out = [
        builtin.Builtin,
        _patched(arith.Arith, OVERRIDE_OPS),
        _patched(scf.Scf, OVERRIDE_OPS),
        math.Math,
        cf.Cf,
        ub.UB,
        _patched(gpu.GPU, OVERRIDE_OPS),
        _patched(llvm.LLVM, OVERRIDE_OPS),
        TT,
    ]
    syncopate = _syncopate_dialect()
    if syncopate is not None:
        out.append(syncopate)
    return tuple(out)


def _syncopate_dialect() -> Dialect | None:
    """The ``syncopate`` dialect (``syncopate_mlir/dialects/syncopate.py``), if it exists."""
    try:
        from .dialects import syncopate as mod
    except ImportError as e:
        if getattr(e, "name", None) and e.name.endswith("dialects.syncopate"):
            return None
        raise
    return getattr(mod, "SYNCOPATE", None)


def make_context() -> Context:
    """A fresh xDSL context with the TTIR dialects loaded (no unregistered ops)."""
    ctx = Context(allow_unregistered=False)
    for d in _dialects():
        ctx.load_dialect(d)
    return ctx
