"""``load-epoch``: the launch's epoch comes from device memory (ABI version 3).

Up to ABI version 2 the fused kernel took its epoch as the scalar ``syn_epoch: i32``. A CUDA
graph keeps the scalar arguments of a captured launch, so every replay would run with the
epoch of the capture and its waits would be satisfied by the previous replay's flags
(docs/cuda-graphs.md). From version 3 ``syn_epoch`` is a pointer to the configuration's epoch
word, which the runtime advances on the device, in stream order, before each launch.

The passes before this one treat the epoch as an i32 value named ``syn_epoch`` (the block
argument ``append-abi-params`` appends, or the one a lit test declares); this pass, after the
lowering and before self-advance-epoch, turns that argument into ``!tt.ptr<i32>`` (16-byte aligned, like every ABI
pointer) and replaces every use with one load at kernel entry, before any other op, so the
whole program uses a single value read once. Keeping the change here leaves every other pass
-- and its tests -- on the scalar it reasons about.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FunctionType, IntegerAttr, ModuleOp, i32
from xdsl.passes import ModulePass

from syncopate.errors import CompileError
from syncopate_mlir.dialects.tt import PointerType
from syncopate_mlir.dialects.tt.memory import LoadOp

from .abi_info import abi_args
from .builder import Builder
from .ir_utils import func_body, kernel_func

#: name hint of the loaded value (what the printed IR calls the epoch after this pass)
EPOCH_VALUE = "epoch"


@dataclass(frozen=True)
class LoadEpoch(ModulePass):
    name: ClassVar[str] = "load-epoch"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        func = kernel_func(op)
        old = abi_args(func)["syn_epoch"]
        if isinstance(old.type, PointerType):
            return  # already applied
        if old.type != i32:
            raise CompileError(f"syn_epoch is {old.type}, expected i32 before load-epoch")
        block = func_body(func)
        index = old.index
        ptr = block.insert_arg(PointerType(i32), index)
        load = LoadOp(ptr, result_type=i32)
        Builder.at_start(block).insert(load)
        load.results[0].name_hint = EPOCH_VALUE
        old.replace_all_uses_with(load.results[0])
        block.erase_arg(old)
        ptr.name_hint = "syn_epoch"
        fty = func.properties["function_type"]
        inputs = list(fty.inputs.data)
        inputs[index] = PointerType(i32)
        func.properties["function_type"] = FunctionType.from_lists(inputs, list(fty.outputs.data))
        attrs = func.properties.get("arg_attrs")
        if attrs is not None:
            entries = list(attrs.data)
            entries[index] = DictionaryAttr({"tt.divisibility": IntegerAttr(16, i32)})
            func.properties["arg_attrs"] = ArrayAttr(entries)
