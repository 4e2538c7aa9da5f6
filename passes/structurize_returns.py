"""``structurize-returns``: a kernel with early returns as one block of nested ``scf.if``.

Triton lowers a ``return`` inside an ``if`` (``if pid * BM >= M: return``, the guard of many
kernels, persistent ones included) to a control-flow graph: the entry block ends in
``cf.cond_br`` to a block that holds only ``tt.return`` and to the block with the rest of the
kernel. Every pass after this one works on one block that ends in the kernel's return: waits go
before loads and signals after stores wherever they sit, but ``partition-sms`` wraps *the body*
in the compute branch beside the comm programs, and ``self-advance-epoch`` puts the
done-counter every program must reach before *the* return. A CFG kernel was refused there
("the kernel must end with a plain tt.return").

This pass rewrites a CFG that is a tree into structured control flow: every block but the entry
has exactly one predecessor edge, every terminator is ``cf.br``, ``cf.cond_br`` or an
operand-less ``tt.return``. A ``cf.cond_br`` becomes an ``scf.if`` whose branches are its two
successors' subtrees, a ``cf.br`` is inlined, and a successor's block arguments are replaced by
the operands its one edge passes. Why this is exact:

* in a tree every block dominates exactly its subtree, so each value is used only inside the
  subtree of its definition, which the rewrite keeps inside the same branch;
* each path from the entry to a ``tt.return`` runs the same ops in the same order as before;
  where it returned, the program now reaches the end of its branch and then the kernel's one
  return with nothing in between.

A CFG that is not a tree (a join of two branches, a loop written with branches) is left as it
is: ``partition-sms`` then refuses it with the reason. The CPU emulator runs the unfused kernel
as Triton wrote it (``emulate/interpreter.py`` follows ``cf.br``/``cf.cond_br``), so the
comparison with the fused kernel checks this rewrite too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import cf, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, Region
from xdsl.passes import ModulePass

from syncopate_mlir.dialects.tt import ReturnOp

from .ir_utils import kernel_func

__all__ = ["StructurizeReturns", "tree_refusal"]


def tree_refusal(region: Region) -> str | None:
    """Why the blocks of ``region`` are not a tree this pass can structure, or None."""
    blocks = list(region.blocks)
    preds = {id(b): 0 for b in blocks}
    for b in blocks:
        term = b.last_op
        if isinstance(term, ReturnOp):
            if term.operands:
                return "a block returns values"
            continue
        if not isinstance(term, (cf.BranchOp, cf.ConditionalBranchOp)):
            return f"a block ends in {term.name if term is not None else 'nothing'}"
        for s in term.successors:
            preds[id(s)] = preds.get(id(s), 0) + 1
    if preds[id(blocks[0])]:
        return "a branch goes back to the entry block (a loop)"
    for b in blocks[1:]:
        if preds[id(b)] == 0:
            return "a block no branch reaches"
        if preds[id(b)] > 1:
            return (f"a block has {preds[id(b)]} incoming branches (a join or a loop, not a "
                    f"tree)")
    return None


def _inline(block: Block) -> list[Operation]:
    """``block``'s ops, detached, with its terminator's successors structured in place of the
    terminator, which is erased (the block is left empty)."""
    term = block.last_op
    ops = [o for o in block.ops if o is not term]
    for o in ops:
        o.detach()
    if isinstance(term, ReturnOp):
        block.erase_op(term)
        return ops
    if isinstance(term, cf.BranchOp):
        _bind(term.successor, term.arguments)
        succ = term.successor
        block.erase_op(term)
        return ops + _inline(succ)
    then_ops = _branch(term.then_block, term.then_arguments)
    else_ops = _branch(term.else_block, term.else_arguments)
    cond = term.cond
    block.erase_op(term)
    return ops + [scf.IfOp(cond, [], Region(then_ops), Region(else_ops))]


def _branch(block: Block, values) -> Block:
    _bind(block, values)
    return Block([*_inline(block), scf.YieldOp()])


def _bind(block: Block, values) -> None:
    """Replace ``block``'s arguments by the values its one incoming edge passes."""
    for arg, value in zip(block.args, values, strict=True):
        arg.replace_all_uses_with(value)


@dataclass(frozen=True)
class StructurizeReturns(ModulePass):
    name: ClassVar[str] = "structurize-returns"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        func = kernel_func(op)
        region = func.regions[0]
        blocks = list(region.blocks)
        if len(blocks) == 1 or tree_refusal(region) is not None:
            return
        entry = blocks[0]
        loc = entry.last_op.location
        body = _inline(entry)
        for b in blocks[1:]:
            for a in list(b.args):
                b.erase_arg(a)
            region.detach_block(b)
            b.erase()
        entry.add_ops(body)
        ret = ReturnOp()
        ret.location = loc
        entry.add_op(ret)
