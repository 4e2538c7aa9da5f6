"""``lower-ce``: the copy engine moves the data; the kernel only waits (and signals).

With the ``ce`` backend the host drives the copies on a side stream (peer ``cudaMemcpyAsync``
per chunk, each followed by ``stream_write_value32(flag, epoch)``), so the fused kernel has no
comm programs: this pass only lowers the waits, signals, remaps and peer pointers
(:mod:`passes.lowering`).  A chunk flag is written once per epoch with the epoch itself, so a
chunk is complete when ``CHUNK[c] >= epoch`` (one writer).

``sum`` chunks (GEMM + reduce-scatter): the copy engine cannot add, so nothing is added in
flight. The kernel only signals PRODUCED (insert-signals); the host's side stream waits for it
(``cuStreamWaitValue32``, no SM), copies the chunk into a per-source slot of its owner, and the
owner sums its slots after the kernel (``runtime/fused.py``). The sum is therefore not
overlapped with the GEMM -- only the transfer is -- which is why ``sm`` stays the default for
reduce-scatter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from syncopate.errors import CompileError
from syncopate_mlir.dialects.syncopate import schedule_of

from .lowering import Lowering


@dataclass(frozen=True)
class LowerCe(ModulePass):
    name: ClassVar[str] = "lower-ce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        schedule_of(op)  # a typed error when the module carries no schedule
        if any(o.name == "syncopate.comm" for o in op.walk()):
            raise CompileError("the ce backend has no comm programs: do not run partition-sms "
                               "before lower-ce")
        Lowering(op).lower()
