"""``append-abi-params``: give the kernel the fused ABI's parameters.

Appends ``syn_flags, syn_peers, syn_diag, syn_rank, syn_epoch, syn_timeout_ns`` (docs/fused-abi.md)
to the public ``tt.func``, pointers marked ``tt.divisibility = 16`` like Triton marks aligned
pointer arguments.  The source object of a fused compile declares the same extended signature,
so Triton's launcher passes them (``syn_epoch`` is an i32 value here; ``load-epoch``, the last
pass, makes it the ``*i32`` of the launch signature); doing it in the IR (not in the Python source) keeps the user's
kernel untouched and its unfused compile unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import (
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    i32,
    i64,
)
from xdsl.passes import ModulePass

from syncopate.abi import pipeline_params
from syncopate_mlir.dialects.tt import PointerType

from .abi_info import backend_of, has_abi_args
from .ir_utils import func_body, kernel_func


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
        block = func_body(func)
        params = pipeline_params(backend_of(op))
        new_types = []
        for name, sig in params:
            ty = _type_of(sig)
            arg = block.insert_arg(ty, len(block.args))
            arg.name_hint = name
            new_types.append(ty)
        fty = func.properties["function_type"]
        func.properties["function_type"] = FunctionType.from_lists(
            list(fty.inputs.data) + new_types, list(fty.outputs.data))
        arg_attrs = func.properties.get("arg_attrs")
        if arg_attrs is not None:
            extra = [DictionaryAttr({"tt.divisibility": IntegerAttr(16, i32)})
                     if sig.startswith("*") else DictionaryAttr({}) for _, sig in params]
            func.properties["arg_attrs"] = ArrayAttr(list(arg_attrs.data) + extra)
        elif any(True for _ in params):
            n_old = len(fty.inputs.data)
            func.properties["arg_attrs"] = ArrayAttr(
                [DictionaryAttr({})] * n_old +
                [DictionaryAttr({"tt.divisibility": IntegerAttr(16, i32)})
                 if sig.startswith("*") else DictionaryAttr({}) for _, sig in params])
