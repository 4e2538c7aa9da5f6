"""``resolve-chunks``: from regions to chunks.

``syncopate.wait_region`` (a box of tensor T is about to be read) becomes, for each rank ``d``
that receives chunks of T, an ``scf.if rank == d`` holding one ``scf.if`` per chunk delivered
to ``d`` that can intersect the box (a constant-bounds interval test per chunked dim) around a
``syncopate.wait flags[c] >= epoch * writers(c)``.  A tile spanning two chunks passes both
tests and waits for both; chunks of ``sum`` reductions into the same region all have to
arrive.  The tokens of the waits are summed into the token of the region wait (zero at run
time, but a data dependence for whatever it guards).

``syncopate.signal_region`` (a box of T has been written) becomes, for each chunk of T that
leaves this rank, or that reduces into it, a ``syncopate.signal`` adding the number of
elements of the box inside the chunk to ``PRODUCED[c]``, guarded by ``rank`` and a non-empty
intersection.  Comm programs wait for ``PRODUCED[c] >= epoch * |c|``.

With ``lowering="unrolled"`` both unroll over the schedule's chunks, so the code a tile runs
is ``O(chunks to one rank)`` integer compares plus one spin per chunk it really reads.  With
``lowering="table"`` (docs/fused-abi.md "The chunk table") they become loops over this rank's
RECV / SEND list of the chunk table: the same tests and spins at run time, code size O(1) in
the number of chunks; the signals of one store share one :class:`ReleaseFenceOp`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from syncopate import chunk_table as ct
from syncopate.abi import FlagLayout
from syncopate.schedule.model import Schedule
from syncopate_mlir.dialects.syncopate import (
    ReleaseFenceOp,
    SignalOp,
    SignalRegionOp,
    WaitOp,
    WaitRegionOp,
    request_of,
    schedule_of,
)

from .abi_info import abi_args, chunk_writers, comm_programs_of, lowering_of
from .builder import Builder
from .ir_utils import kernel_func
from .table_reader import TableReader


def guarded_wait(b: Builder, cond, flags, index, target, chunk: int | None = None):
    """``cond ? wait(flags[index] >= target) : 0`` as an ``scf.if`` yielding the token
    (``index``: a chunk id, constant or read from the chunk table)."""
    cif = b.if_(cond, [i32])
    cb = Builder(None, cif.true_region.blocks[0])
    idx = cb.const(index) if isinstance(index, int) else index
    w = cb.insert(WaitOp(flags, idx, target, "chunk", chunk))
    cb.insert(scf.YieldOp(w.token))
    eb = Builder(None, cif.false_region.blocks[0])
    eb.insert(scf.YieldOp(eb.const(0)))
    return cif.results[0]


def meets(b: Builder, o, dims, chunk_lo, chunk_hi) -> list:
    """The interval tests ``o.lo[d] < hi(d)`` and ``lo(d) < o.hi[d]`` of the region op ``o``
    against a chunk whose bounds ``chunk_lo(d)``/``chunk_hi(d)`` build (constants in the
    unrolled form, record loads in the table form)."""
    conds = []
    for d in dims:
        conds.append(b.cmp("slt", o.lo[d], chunk_hi(d)))
        conds.append(b.cmp("slt", chunk_lo(d), o.hi[d]))
    return conds


def overlap(b: Builder, o, dims, chunk_lo, chunk_hi) -> SSAValue:
    """The number of elements of ``o``'s box inside the chunk (0 when they miss)."""
    vol = None
    for d in dims:
        hi = b.minsi(o.hi[d], chunk_hi(d))
        lo = b.maxsi(o.lo[d], chunk_lo(d))
        ext = b.maxsi(b.sub(hi, lo), b.const(0))
        vol = ext if vol is None else b.mul(vol, ext)
    return vol


@dataclass
class ResolveWaitRegion(RewritePattern):
    """``wait_region`` -> per destination rank, per chunk that can intersect the box: an
    interval test around a chunk ``wait``; the tokens are summed into the region's token."""

    sched: Schedule
    writers: int

    @op_type_rewrite_pattern
    def match_and_rewrite(self, o: WaitRegionOp, rewriter: PatternRewriter) -> None:
        sched, writers = self.sched, self.writers

        tensor = o.tensor.data
        chunked = sched.chunked_dims(tensor)
        b = Builder(o)
        target = b.mul(o.epoch, b.const(writers))
        total = b.const(0)
        for d in range(sched.world_size):
            chunks = sched.chunks_to(d, tensor)
            if not chunks:
                continue
            is_d = b.cmp("eq", o.rank, b.const(d))
            rank_if = b.if_(is_d, [i32])
            tb = Builder(None, rank_if.true_region.blocks[0])
            tok = tb.const(0)
            for c in chunks:
                conds = meets(tb, o, chunked, lambda d: tb.const(c.lo[d]),
                              lambda d: tb.const(c.hi[d]))
                tok = tb.add(tok, guarded_wait(tb, tb.all_of(conds), o.flags, c.id, target,
                                               c.id))
            tb.insert(scf.YieldOp(tok))
            fb = Builder(None, rank_if.false_region.blocks[0])
            fb.insert(scf.YieldOp(fb.const(0)))
            total = b.add(total, rank_if.results[0])
        rewriter.replace(o, [], [total])


@dataclass
class ResolveSignalRegion(RewritePattern):
    """``signal_region`` -> per chunk of the tensor leaving (or reducing into) this rank: the
    number of the box's elements inside the chunk, added to ``PRODUCED[c]``."""

    sched: Schedule
    layout: FlagLayout

    @op_type_rewrite_pattern
    def match_and_rewrite(self, o: SignalRegionOp, rewriter: PatternRewriter) -> None:
        """Predicated, not branched: Triton's fusion of nested loops (``tl.range(flatten=True)``)
        cannot yet carry ``scf.if`` ops in the epilogue of a fused loop, and a masked atomic
        costs the same.  Volumes first, then the signals back to back (one barrier for all)."""
        sched, layout = self.sched, self.layout
        tensor = o.tensor.data
        b = Builder(o)
        pending = []
        for c in sched.chunks:
            if c.tensor != tensor:
                continue
            ranks = [c.src] + ([c.dst] if c.reduce == "sum" else [])
            conds = [b.cmp("eq", o.rank, b.const(r)) for r in ranks]
            on_rank = conds[0] if len(conds) == 1 else b.ori(conds[0], conds[1])
            vol = overlap(b, o, range(len(c.lo)), lambda d: b.const(c.lo[d]),
                          lambda d: b.const(c.hi[d]))
            pending.append((c, b.select(on_rank, vol, b.const(0))))
        for c, vol in pending:
            b.insert(SignalOp(o.flags, b.const(layout.produced(c.id)), vol, "add", "produced"))
        rewriter.erase(o)


@dataclass
class TableWaitRegion(RewritePattern):
    """``wait_region`` -> a loop over this rank's RECV list of the tensor: for each chunk whose
    box meets the region along the chunked dims, a chunk ``wait``; the tokens are summed."""

    sched: Schedule
    writers: int
    reader: TableReader

    @op_type_rewrite_pattern
    def match_and_rewrite(self, o: WaitRegionOp, rewriter: PatternRewriter) -> None:
        sched, rd = self.sched, self.reader
        tensor = o.tensor.data
        b = Builder(o)
        target = b.mul(o.epoch, b.const(self.writers))
        loop, lb, cid, (tok,), rec = rd.over_tensor_list(b, sched, o.rank, tensor, "recv",
                                                         carry_zero=True)
        conds = meets(lb, o, sched.chunked_dims(tensor),
                      lambda d: rd.field(lb, rec, ct.R_LO + d),
                      lambda d: rd.field(lb, rec, ct.R_HI + d))
        lb.insert(scf.YieldOp(lb.add(tok, guarded_wait(lb, lb.all_of(conds), o.flags, cid,
                                                       target))))
        rewriter.replace(o, [], [loop.results[0]])


@dataclass
class TableSignalRegion(RewritePattern):
    """``signal_region`` -> one release fence, then a loop over this rank's SEND list of the
    tensor adding the box's elements inside each chunk to ``PRODUCED[c]`` (masked: a chunk the
    box misses adds nothing)."""

    sched: Schedule
    layout: FlagLayout
    reader: TableReader

    @op_type_rewrite_pattern
    def match_and_rewrite(self, o: SignalRegionOp, rewriter: PatternRewriter) -> None:
        b = Builder(o)
        b.insert(ReleaseFenceOp())
        rd = self.reader
        _, lb, cid, _, rec = rd.over_tensor_list(b, self.sched, o.rank, o.tensor.data, "send")
        vol = overlap(lb, o, range(len(o.lo)), lambda d: rd.field(lb, rec, ct.R_LO + d),
                      lambda d: rd.field(lb, rec, ct.R_HI + d))
        index = lb.add(lb.const(self.layout.produced(0)), cid)
        lb.insert(SignalOp(o.flags, index, vol, "add", "produced", fenced=True))
        lb.insert(scf.YieldOp())
        rewriter.erase(o)


@dataclass(frozen=True)
class ResolveChunks(ModulePass):
    name: ClassVar[str] = "resolve-chunks"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sched = schedule_of(op)
        writers = chunk_writers(request_of(op).backend, comm_programs_of(op))
        layout = FlagLayout(sched.num_chunks, sched.world_size)
        if lowering_of(op) == "table":
            reader = TableReader(abi_args(kernel_func(op))["syn_table"], ct.layout_of(sched))
            patterns = [TableWaitRegion(sched, writers, reader),
                        TableSignalRegion(sched, layout, reader)]
        else:
            patterns = [ResolveWaitRegion(sched, writers), ResolveSignalRegion(sched, layout)]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns),
                             apply_recursively=False).rewrite_module(op)
