"""``append-abi-params``: give the kernel the fused ABI's parameters.

Appends ``syn_flags, syn_peers, syn_diag, syn_rank, syn_epoch, syn_timeout_ns`` (docs/fused-abi.md)
to the public ``tt.func``, pointers marked ``tt.divisibility = 16`` like Triton marks aligned
pointer arguments.  The source object of a fused compile declares the same extended signature,
so Triton's launcher passes them (``syn_epoch`` is an i32 value here; ``load-epoch``, the last
pass, makes it the ``*i32`` of the launch signature); doing it in the IR (not in the Python source) keeps the user's
kernel untouched and its unfused compile unchanged.

An operand bound to a ``view="rank"`` tensor (the kernel addresses only the part its rank holds,
e.g. Ulysses attention over "its" heads) is then advanced by ``syn_rank * offset`` elements at
the top of the kernel, every use of the parameter replaced: the runtime passes the whole
symmetric buffer as for any operand (``syn_peers`` and the comm programs keep using the
parameter itself, the buffer's base), and the access analysis recognises the term and moves the
part-local boxes to global coordinates (``passes/access.py``).  Both happen in this pass so that
no module exists in which ``syn_rank`` is there but the operand is not yet offset.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, UnknownLoc, i32, i64
from xdsl.passes import ModulePass

from syncopate.abi import pipeline_params
from syncopate_mlir.dialects.syncopate import ATTR_SCHEDULE, request_of, schedule_of
from syncopate_mlir.dialects.tt import AddPtrOp, PointerType

from .abi_info import has_abi_args, operands_of
from .access import rank_parts
from .builder import Builder
from .ir_utils import func_body, kernel_func, param_names


def _type_of(sig: str):
    if sig.startswith("*"):
        return PointerType(i64 if sig == "*i64" else i32)
    return i64 if sig == "i64" else i32


@dataclass(frozen=True)
class AppendAbiParams(ModulePass):
    name: ClassVar[str] = "append-abi-params"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        func = kernel_func(op)
        if has_abi_args(func):
            return
        div16 = {"tt.divisibility": IntegerAttr(16, i32)}
        for name, sig in pipeline_params(request_of(op).backend):
            # an unknown location (FuncOp.append_arg's default is the function's)
            arg = func.append_arg(_type_of(sig), attrs=div16 if sig.startswith("*") else None,
                                  location=UnknownLoc())
            arg.name_hint = name
        _offset_rank_parts(op, func, func_body(func))


def _offset_rank_parts(module: ModuleOp, func, block) -> None:
    """``P -> tt.addptr(P, syn_rank * offset)`` for every ``view="rank"`` operand ``P``."""
    if ATTR_SCHEDULE not in module.attributes:
        return
    parts = rank_parts(schedule_of(module), operands_of(module))
    if not parts:
        return
    names = param_names(module, func)
    by_name = {names[i]: a for i, a in enumerate(block.args) if i < len(names)}
    rank = next(a for a in block.args if a.name_hint == "syn_rank")
    b = Builder.at_start(block)
    for param, part in sorted(parts.items()):
        arg = by_name[param]
        uses = list(arg.uses)
        if not part.offset or not uses:
            continue
        off = b.mul(rank, b.const(part.offset))
        moved = b.insert(AddPtrOp(arg, off)).result
        for u in uses:
            u.operation.operands[u.index] = moved
