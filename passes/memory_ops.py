"""What every op of the IR does with memory: the table the soundness gate reads (default deny).

The access analysis describes the accesses of a communicated tensor; it can only be sound if it
sees *all* of them.  This module classifies every op class of the context the bridge parses TTIR
into (the ``tt`` mirror, arith, scf, cf, math, ub, gpu, llvm, the ``syncopate`` dialect) by what
it may do to memory through a pointer, block pointer or tensor descriptor operand:

* :data:`ACCESSES` -- the ops that read, write or read-modify-write memory through their first
  operand (a pointer, a tensor of pointers, a block pointer or a descriptor), with where their
  mask, their index operands and the values they write are;
* :data:`NO_ACCESS` -- ops that may take a pointer but never dereference it (``tt.print`` prints
  the address), and integer ops xDSL declares without a memory-effect trait;
* :data:`CONTROL` -- ops whose effects are those of the ops in their regions, or that only pass
  values to another block (loops, branches, functions, returns);
* :data:`DENIED` -- ops that may touch memory in ways the analysis does not model (calls, inline
  assembly, LLVM and GPU memory ops), each with what to do instead;
* :data:`COMPILER` -- the ``syncopate`` dialect, whose ops the passes insert after the gate.

Every other op carries xDSL's ``Pure`` / ``NoMemoryEffect`` trait.  ``tests/test_memory_ops.py``
walks every registered op class and fails when one that may touch memory is in no table, so an
op added to the mirror must be classified before a kernel can use it on a communicated tensor;
``check-accesses`` refuses any use of a communicated pointer by an op that is not understood.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from xdsl.dialects import arith, builtin, cf, gpu, llvm, scf, ub
from xdsl.ir import Operation, SSAValue
from xdsl.traits import NoMemoryEffect, Pure

from syncopate_mlir.dialects import syncopate as syn
from syncopate_mlir.dialects.tt import (
    ArithExtSIOp,
    AssertOp,
    AtomicCASOp,
    AtomicRMWOp,
    CallOp,
    DescriptorGatherOp,
    DescriptorLoadOp,
    DescriptorReduceOp,
    DescriptorScatterOp,
    DescriptorStoreOp,
    ElementwiseInlineAsmOp,
    ExternElementwiseOp,
    FuncOp,
    GpuBarrierOp,
    LLVMAssumeOp,
    LoadOp,
    MapElementwiseOp,
    PrintOp,
    ReturnOp,
    StoreOp,
    WhileOp,
)


class Effect(str, Enum):
    """What an access does to the memory it addresses."""

    READ = "read"
    WRITE = "write"
    RMW = "rmw"          # read-modify-write: atomics, TMA reductions


@dataclass(frozen=True)
class MemoryOp:
    """How one op class accesses memory through its first operand."""

    effect: Effect
    #: the first operand is a tensor descriptor (TMA: the unit clips at the descriptor's shape)
    descriptor: bool = False
    #: descriptor ops: the first operand index of the box's start indices (one per dim);
    #: None for a gather/scatter, whose rows come from a tensor of offsets
    index_start: int | None = None
    #: the operand that masks the access, by its accessor name
    mask: str | None = None
    #: the operands whose values are written to memory
    data: tuple[str, ...] = ()
    #: what the user wrote, for messages
    source: str = ""


ACCESSES: dict[type[Operation], MemoryOp] = {
    LoadOp: MemoryOp(Effect.READ, mask="mask", source="tl.load"),
    StoreOp: MemoryOp(Effect.WRITE, mask="mask", data=("value",), source="tl.store"),
    AtomicRMWOp: MemoryOp(Effect.RMW, mask="mask", data=("val",),
                          source="tl.atomic_add/max/min/and/or/xor/xchg"),
    AtomicCASOp: MemoryOp(Effect.RMW, data=("cmp", "val"), source="tl.atomic_cas"),
    DescriptorLoadOp: MemoryOp(Effect.READ, descriptor=True, index_start=1,
                               source="a tensor descriptor's load"),
    DescriptorStoreOp: MemoryOp(Effect.WRITE, descriptor=True, index_start=2, data=("src",),
                                source="a tensor descriptor's store"),
    DescriptorReduceOp: MemoryOp(Effect.RMW, descriptor=True, index_start=2, data=("src",),
                                 source="a tensor descriptor's atomic_add/min/max/and/or/xor"),
    DescriptorGatherOp: MemoryOp(Effect.READ, descriptor=True, source="a tensor descriptor's gather"),
    DescriptorScatterOp: MemoryOp(Effect.WRITE, descriptor=True, data=("src",),
                                  source="a tensor descriptor's scatter"),
}

#: ops that take values (pointers among them) without dereferencing them
NO_ACCESS: dict[type[Operation], str] = {
    PrintOp: "prints its operands (a pointer's address, not what it points to)",
    AssertOp: "checks a condition",
    cf.AssertOp: "checks a condition",
    arith.RemUIOp: "integer arithmetic",
    ArithExtSIOp: "integer arithmetic",
    LLVMAssumeOp: "a compiler assumption",
    GpuBarrierOp: "a barrier",
}

#: ops whose effects are those of their regions, or that pass values on to another block
CONTROL: frozenset[type[Operation]] = frozenset({
    builtin.ModuleOp, FuncOp, ReturnOp, scf.ForOp, scf.IfOp, WhileOp, scf.YieldOp,
    scf.ConditionOp, scf.ExecuteRegionOp, scf.ParallelOp, scf.ReduceOp, scf.IndexSwitchOp,
    cf.BranchOp, cf.ConditionalBranchOp, ub.UnreachableOp,
    gpu.FuncOp, gpu.ModuleOp, gpu.ReturnOp, gpu.TerminatorOp, gpu.YieldOp,
    llvm.BrOp, llvm.CondBrOp, llvm.FuncOp, llvm.UnreachableOp,
})

_NOT_FROM_TRITON = ("Triton's frontend does not emit it in TTIR; the analysis does not model "
                    "it")
_CALL = ("the callee may load or store through the pointer, which the analysis cannot see: let "
         "Triton inline the function (drop noinline=True), or pass the callee only values loaded "
         "before the call")
_ASM = ("inline assembly may load or store through the pointer, which the analysis cannot "
        "see: pass it only loaded values, or do the access with tl.load/tl.store")

#: ops that may touch memory in ways the analysis does not model: refused on a communicated
#: pointer, with what to do
DENIED: dict[type[Operation], str] = {
    CallOp: _CALL,
    ElementwiseInlineAsmOp: _ASM,
    ExternElementwiseOp: ("an extern (libdevice/NVSHMEM) call may access memory through the "
                          "pointer, which the analysis cannot see: pass it only loaded values"),
    MapElementwiseOp: ("tl.map_elementwise's body is not analysed for accesses: pass it only "
                       "loaded values"),
    builtin.UnregisteredOp: "an op the mirror does not know",
    llvm.LoadOp: _NOT_FROM_TRITON, llvm.StoreOp: _NOT_FROM_TRITON,
    llvm.MaskedStoreOp: _NOT_FROM_TRITON, llvm.AllocaOp: _NOT_FROM_TRITON,
    llvm.CallOp: _CALL, llvm.CallIntrinsicOp: _CALL, llvm.InlineAsmOp: _ASM,
    llvm.StackSaveOp: _NOT_FROM_TRITON, llvm.StackRestoreOp: _NOT_FROM_TRITON,
    llvm.GlobalOp: _NOT_FROM_TRITON, llvm.FAbsOp: _NOT_FROM_TRITON,
}
DENIED.update({op: _NOT_FROM_TRITON for op in gpu.GPU.operations
               if op not in CONTROL and op.name != GpuBarrierOp.name})

#: the syncopate dialect's ops: inserted by the passes after the gate (which the analysis then
#: neither follows nor refuses), never written in a kernel
COMPILER: frozenset[type[Operation]] = frozenset(syn.SYNCOPATE.operations)


def memory_op(op: Operation) -> MemoryOp | None:
    """The :class:`MemoryOp` of ``op`` when it accesses memory through its first operand."""
    return ACCESSES.get(type(op)) or next(
        (m for cls, m in ACCESSES.items() if isinstance(op, cls)), None)


def accessed_through(op: Operation) -> SSAValue:
    """The pointer, block pointer or descriptor ``op`` (a :func:`memory_op`) accesses."""
    return op.operands[0]


def mask_operand(op: Operation) -> SSAValue | None:
    """The mask of a pointer access (None: no mask, or a descriptor op, which TMA clips)."""
    m = memory_op(op)
    return getattr(op, m.mask) if m is not None and m.mask else None


def written_values(op: Operation) -> list[SSAValue]:
    """The operands whose values ``op`` stores to memory."""
    m = memory_op(op)
    return [getattr(op, name) for name in m.data] if m is not None else []


def box_indices(op: Operation, nd: int) -> list[SSAValue] | None:
    """A descriptor access's start index per dim; None for a gather/scatter (rows from a
    tensor of offsets, no box the analysis can derive) or a pointer access."""
    m = memory_op(op)
    if m is None or m.index_start is None:
        return None
    return list(op.operands[m.index_start:m.index_start + nd])


def writes_memory(op: Operation) -> bool:
    """Whether ``op`` writes memory through a pointer or descriptor (stores, atomics, TMA
    stores/reductions/scatters)."""
    m = memory_op(op)
    return m is not None and m.effect is not Effect.READ


def may_touch_memory(cls: type[Operation]) -> bool:
    """Whether ops of ``cls`` may touch memory by their traits (no Pure/NoMemoryEffect)."""
    return not any(isinstance(t, (Pure, NoMemoryEffect)) for t in cls.traits)


def classification(cls: type[Operation]) -> str | None:
    """Which table classifies ``cls`` (None: none does)."""
    if cls in ACCESSES:
        return "access"
    if cls in NO_ACCESS:
        return "no-access"
    if cls in CONTROL:
        return "control"
    if cls in DENIED:
        return "denied"
    if cls in COMPILER:
        return "compiler"
    return None


def denial(op: Operation) -> str | None:
    """Why ``op`` may not take a communicated pointer (None: it may)."""
    for cls, why in DENIED.items():
        if isinstance(op, cls):
            return why
    return None
