"""``insert-waits``: a tile waits for exactly the chunks it reads, as late as possible and
no deeper than needed.

For every read of a tensor that chunks deliver, the wait goes at the outermost loop level at
which the box read is invariant along the *chunked* dims: before the K loop of a GEMM (the rows
of A a tile reads do not change with k, so one wait per tile), but inside the KV loop of
attention (each iteration reads a new chunk of the sequence).  Concretely the pass starts at
the access and moves the insertion point above each enclosing ``scf.for``/``scf.while`` whose
body defines nothing the chunked-dim bounds depend on; it stops at the first loop that does
and at any ``scf.if`` (a branch not taken must not wait).

Dims that no chunk cuts are passed as the whole tensor, so their (loop-variant) bounds need not
be available at the wait.  Reads of one tensor at one point with the same bounds share a
wait.  The wait's token feeds what it guards: the lower bound of the loop it sits in front of
(``lb + token``), the first index of a descriptor load, or the mask of a pointer load, so no
guarded load can be scheduled above it (each a :class:`Guard` rewrite pattern; in an
``scf.while`` the guarded loads themselves).  A tile spanning two chunks waits for both: the
lowering tests every chunk that reaches this rank against the box.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import DenseArrayBase, ModuleOp, TensorType, i1, i32
from xdsl.ir import Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import GreedyRewritePatternApplier, PatternRewriter, RewritePattern

from syncopate.errors import CompileError
from syncopate_mlir.dialects.syncopate import WaitRegionOp, record, state_of
from syncopate_mlir.dialects.tt import SplatOp, shape_of

from .abi_info import abi_args
from .access import Access, analyze_module
from .builder import Builder
from .ir_utils import ancestors, defined_inside, loc_str
from .memory_ops import Effect, memory_op
from .poly import IterCount

def wait_anchor(access: Access, chunked: list[int], func: Operation) -> Operation:
    """The op before which the wait for ``access`` goes."""
    needed = set().union(*(access.dims[d].lo.vars() for d in chunked))
    anchor = access.op
    for cur in ancestors(access.op, func):
        if not isinstance(cur, (scf.ForOp, scf.WhileOp)) or any(
                (isinstance(v, IterCount) and cur.is_ancestor(v.loop))
                or (isinstance(v, SSAValue) and defined_inside(v, cur)) for v in needed):
            break
        anchor = cur
    return anchor


def _refuse_warp_specialized(anchor: Operation) -> None:
    """A wait ends in a CTA barrier (thread 0 polls, all threads meet it); inside a loop that
    Triton splits into warp-specialised partitions only some warps would reach it."""
    for cur in (anchor, *ancestors(anchor, None)):
        if isinstance(cur, scf.ForOp) and "tt.warp_specialize" in cur.attributes:
            raise CompileError(
                "a chunk wait would sit inside a warp-specialised loop (tl.range(..., "
                "warp_specialize=True)); the wait synchronises the whole program, which the "
                "partitions cannot. Compile the kernel with warp_specialize=False (the GEMMs' "
                "WARP_SPECIALIZE=False) for fusion.", loc_str(cur))


@dataclass(frozen=True)
class InsertWaits(ModulePass):
    name: ClassVar[str] = "insert-waits"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sched, analysis, accesses = analyze_module(op)
        args = abi_args(analysis.func)
        requirements: dict[str, int] = {}
        # reads of one tensor before one anchor with the same chunked bounds share a wait
        groups: dict[tuple, tuple[Operation, list[Access]]] = {}
        for a in accesses:
            requirements.update(a.requirements)
            if a.kind != "read" or not sched.is_received(a.tensor):
                continue
            chunked = sched.chunked_dims(a.tensor)
            anchor = wait_anchor(a, chunked, analysis.func)
            key = (id(anchor), a.tensor, tuple((d, a.dims[d].lo, a.dims[d].extent) for d in chunked))
            groups.setdefault(key, (anchor, []))[1].append(a)
        for anchor, group in groups.values():
            a = group[0]
            chunked = sched.chunked_dims(a.tensor)
            _refuse_warp_specialized(anchor)
            b = Builder(anchor)
            lo, hi = b.box(a.dims, sched.tensors[a.tensor].shape, chunked)
            wait = b.insert(WaitRegionOp(args["syn_flags"], args["syn_epoch"], args["syn_rank"],
                                         lo, hi, a.tensor))
            # an scf.while has no lower bound to carry the token: each guarded load takes it
            for guarded in [a.op for a in group] if isinstance(anchor, scf.WhileOp) else [anchor]:
                guard(guarded, wait.token)
        # check-accesses may have required exact values already (a produced tensor's store
        # mask that must reach the end of its dim): keep them
        record(op, requirements={**state_of(op).requirements, **requirements}, waits=len(groups))


@dataclass
class Guard(RewritePattern):
    """Make an op depend on a wait's ``token`` (an i32 zero at run time), so that it cannot be
    scheduled above the wait: one pattern per kind of op a wait guards."""

    token: SSAValue


class GuardLoopBound(Guard):
    """An ``scf.for`` (the loop the wait sits in front of) starts at ``lb + token``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, scf.ForOp):
            b, lb = Builder(op), op.operands[0]
            op.operands[0] = b.add(lb, b.cast(self.token, lb.type))
            rewriter.notify_op_modified(op)


class GuardDescriptorIndex(Guard):
    """A descriptor load's first start index, a gather's column offset (its row offsets are a
    tensor), plus the token: the TMA request cannot be issued before the token exists."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        mem = memory_op(op)
        if mem is not None and mem.descriptor:
            at = mem.index_start if mem.index_start is not None else 2
            b, idx = Builder(op), op.operands[at]
            op.operands[at] = b.add(idx, b.cast(self.token, idx.type))
            rewriter.notify_op_modified(op)


class GuardLoadMask(Guard):
    """A masked pointer load reads only where ``mask & token == 0``."""

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        mem = memory_op(op)
        if mem is not None and not mem.descriptor and mem.mask is not None and \
                mem.effect is Effect.READ:
            b, shape = Builder(op), shape_of(op.operands[0].type)
            ok = b.cmp("eq", self.token, b.const(0))
            if shape:
                ok = b.insert(SplatOp(ok, TensorType(i1, shape))).result
            _and_mask(op, ok, b)
            rewriter.notify_op_modified(op)


def guard(op: Operation, token: SSAValue) -> None:
    """Apply the first :class:`Guard` that matches ``op``; none is an internal error."""
    rewriter = PatternRewriter(op)
    GreedyRewritePatternApplier([GuardLoopBound(token), GuardDescriptorIndex(token),
                                 GuardLoadMask(token)], dce_enabled=False).match_and_rewrite(
        op, rewriter)
    if not rewriter.has_done_action:
        raise CompileError(f"internal: cannot make this {op.name} depend on its chunk wait",
                           loc_str(op))


def _and_mask(load: Operation, ok: SSAValue, b: Builder) -> None:
    """``mask = mask & ok`` on a ``tt.load`` (adding the mask operand if it had none)."""
    segs = load.properties.get("operandSegmentSizes")
    sizes = list(segs.get_values()) if segs is not None else None
    if sizes is not None and len(sizes) >= 2 and sizes[1] == 1:
        mask = load.operands[1]
        load.operands[1] = b.andi(mask, ok)
        return
    if sizes is not None and len(sizes) >= 2 and sizes[1] == 0:
        new_operands = [load.operands[0], ok] + list(load.operands[1:])
        sizes[1] = 1
        load.operands = new_operands
        load.properties["operandSegmentSizes"] = DenseArrayBase.from_list(i32, sizes)
