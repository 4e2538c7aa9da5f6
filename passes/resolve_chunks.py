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

A region wait inside a loop (the K/V waits of ring and Ulysses attention sit inside the KV
loop) would put that scan loop inside the loop, and Triton does not software-pipeline the loads
of a loop holding another loop.  There the table form reads the chunks by index instead
(:class:`TableCellWait`): the table's cell map of the tensor (``chunk_table.cell_map``) gives,
per rank and cell of a grid over the one or two chunked dims, the chunk covering it; the pass
proves at compile time how many cells the box can touch along each (its extent there is a
constant, its start a known power-of-two multiple) and emits their product of lookups -- one
or two scalar loads and guarded waits, no loop.  Where it cannot prove the bound, or the
schedule has no cell map, the scan loop stays (and the loop around it does not pipeline:
docs/fused-abi.md "Cell maps").
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import ModuleOp, i32
from xdsl.ir import BlockArgument, OpResult, SSAValue
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
    schedule_of,
)

from .abi_info import abi_args, chunk_writers, lowering_of, table_words
from .builder import Builder
from .ir_utils import ancestors, const_int, kernel_func
from .table_reader import TableReader


def guarded_wait(b: Builder, cond, flags, index, target, chunk: int | None = None):
    """``cond ? wait(flags[index] >= target) : 0`` as an ``scf.if`` yielding the token
    (``index``: a chunk id, constant or read from the chunk table)."""
    cif = b.if_(cond, [i32])
    cb = Builder(None, cif.true_region.blocks[0])
    w = cb.insert(WaitOp(flags, cb.value(index), target, "chunk", chunk))
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


#: the most lookups a cell-indexed wait emits (a box touching more cells keeps the scan loop)
MAX_LOOKUPS = 2


def pow2_multiple(v: SSAValue) -> int:
    """A power of two that ``v`` (an i32) is proven a multiple of, from the ``arith`` ops that
    compute it: constants, products, sums and differences, and the induction variable of an
    ``scf.for`` (``lb + i * step``: a multiple of what both are; a KV loop's ``start_n`` steps
    by ``BLOCK_N``).  Only powers of two: they survive i32 wrap-around, so the proof holds for
    the value the kernel really computes."""
    def pow2(n: int) -> int:
        return (1 << 31) if n == 0 else min(n & -n, 1 << 31)

    if isinstance(v, BlockArgument):
        loop = v.block.parent_op()
        if isinstance(loop, scf.ForOp) and v.index == 0:
            return min(pow2_multiple(loop.lb), pow2_multiple(loop.step))
        return 1
    if not isinstance(v, OpResult):
        return 1
    c = const_int(v)
    if c is not None:
        return pow2(abs(c))
    op = v.op
    if isinstance(op, arith.MuliOp):
        return min(pow2_multiple(op.lhs) * pow2_multiple(op.rhs), 1 << 31)
    if isinstance(op, (arith.AddiOp, arith.SubiOp)):
        return min(pow2_multiple(op.lhs), pow2_multiple(op.rhs))
    return 1


def constant_extent(lo: SSAValue, hi: SSAValue) -> int | None:
    """``E`` where ``hi`` is ``lo + E`` for a constant ``E > 0`` (insert-waits builds the
    bounds of a chunked dim so), else None."""
    if isinstance(hi, OpResult) and isinstance(hi.op, arith.AddiOp):
        for a, b in ((hi.op.lhs, hi.op.rhs), (hi.op.rhs, hi.op.lhs)):
            e = const_int(b)
            if a is lo and e is not None and e > 0:
                return e
    return None


def cells_touched(extent: int, align: int, grain: int) -> int:
    """The most cells of ``grain`` an interval of ``extent`` starting at a multiple of
    ``align`` can touch: its start lies at most ``grain - gcd(align, grain)`` into a cell."""
    return (grain - math.gcd(align, grain) + extent - 1) // grain + 1


@dataclass
class TableCellWait(RewritePattern):
    """``wait_region`` inside a loop -> ``n`` lookups of the tensor's cell map (no loop, so
    the loop around it still pipelines).  The map is a grid over the tensor's chunked dims (one
    for ring attention's K/V, heads and sequence for the Ulysses all-to-all's); along each, the
    box's extent must be a constant and its start a known power-of-two multiple, which bounds
    the cells it touches there (:func:`cells_touched`); ``n`` is their product, at most
    :data:`MAX_LOOKUPS`.  Lookup ``(j_0, ...)`` reads cell ``(first_i + j_i)`` of this rank's
    row under ``scf.if`` when that cell is inside the box along every dim, and waits for the
    chunk under ``scf.if id >= 0``.  The cells read are exactly those the box touches (its
    bounds clamped to the tensor), so it waits for the same chunks as the scan.  Leaves the op
    to :class:`TableWaitRegion` where it proves nothing."""

    sched: Schedule
    writers: int
    reader: TableReader
    table: tuple[int, ...]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, o: WaitRegionOp, rewriter: PatternRewriter) -> None:
        tensor = o.tensor.data
        if not any(isinstance(a, (scf.ForOp, scf.WhileOp)) for a in ancestors(o, None)):
            return
        cells = ct.cells_of(self.table, ct.tensor_slots(self.sched)[tensor])
        if cells is None:
            return
        start, grid = cells
        shape = self.sched.tensors[tensor].shape
        spans = []
        for dim, grain in zip(grid.dims, grid.grains):
            extent = constant_extent(o.lo[dim], o.hi[dim])
            if extent is None or shape[dim] + grain - 1 > ct.INT32_MAX:  # (end cell's i32 sum)
                return
            spans.append(cells_touched(extent, pow2_multiple(o.lo[dim]), grain))
        if math.prod(spans) > MAX_LOOKUPS:
            return
        b = Builder(o)
        target = b.mul(o.epoch, b.const(self.writers))

        def clamp(v, size: int):
            return b.minsi(b.maxsi(v, b.const(0)), b.const(size))

        bounds = []  # per cell dim: (first cell, end cell) of the clamped box
        for dim, grain in zip(grid.dims, grid.grains):
            lo, hi = clamp(o.lo[dim], shape[dim]), clamp(o.hi[dim], shape[dim])
            bounds.append((b.divsi(lo, b.const(grain)),
                           b.divsi(b.add(hi, b.const(grain - 1)), b.const(grain))))
        row = b.add(b.const(start), b.mul(o.rank, b.const(grid.cells)))
        tok = None
        for js in itertools.product(*(range(n) for n in spans)):
            ks = [b.add(first, b.const(j)) if j else first for j, (first, _) in zip(js, bounds)]
            cell = b.if_(b.all_of([b.cmp("slt", k, end) for k, (_, end) in zip(ks, bounds)]),
                         [i32])
            cb = Builder(None, cell.true_region.blocks[0])
            at = row
            for k, count, stride in zip(ks, grid.counts, grid.strides):
                kin = cb.minsi(k, cb.const(count - 1))
                at = cb.add(at, cb.mul(kin, cb.const(stride)) if stride != 1 else kin)
            cid = self.reader.word(cb, at)
            cb.insert(scf.YieldOp(guarded_wait(cb, cb.cmp("sge", cid, cb.const(0)), o.flags,
                                               cid, target)))
            eb = Builder(None, cell.false_region.blocks[0])
            eb.insert(scf.YieldOp(eb.const(0)))
            tok = cell.results[0] if tok is None else b.add(tok, cell.results[0])
        rewriter.replace(o, [], [tok])


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
        writers = chunk_writers(op)
        layout = FlagLayout(sched.num_chunks, sched.world_size)
        if lowering_of(op) == "table":
            reader = TableReader(abi_args(kernel_func(op))["syn_table"], ct.layout_of(sched))
            patterns = [TableCellWait(sched, writers, reader, table_words(op)),
                        TableWaitRegion(sched, writers, reader),
                        TableSignalRegion(sched, layout, reader)]
        else:
            patterns = [ResolveWaitRegion(sched, writers), ResolveSignalRegion(sched, layout)]
        PatternRewriteWalker(GreedyRewritePatternApplier(patterns),
                             apply_recursively=False).rewrite_module(op)
