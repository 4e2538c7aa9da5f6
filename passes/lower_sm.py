"""``lower-sm``: comm programs move chunks with peer-to-peer loads and stores (NVLink).

On top of the shared lowering (:mod:`passes.lowering`), the comm-program steps become:

* ``syncopate.enter``: comm program 0 stores ``ENTRY[rank] = epoch`` into every peer's flag
  array (release, system scope).
* ``syncopate.transfer`` of chunk ``c``: on the executing rank (the source for ``push``, the
  destination for ``pull`` and ``sum``) every comm program first waits until the data may be
  touched (push: the destination entered the epoch; pull: the source did, so its input is
  staged; chunks the source itself received first, the ``after`` list: their flags on the
  source; produced tensors: ``PRODUCED[c]`` on the source, and on the destination for ``sum``),
  then copies its share of the chunk's tiles (tile ``t`` goes to comm program ``t % count``),
  accumulating in fp32 for ``sum``, then releases ``CHUNK[c]`` on the destination (+1 per
  comm program) and, when it read a peer's buffer, ``CONSUMED`` on the source. A chunk named
  in the request's ``withhold`` (fault injection) moves but is never released.
* ``syncopate.drain``: comm program 0 waits ``CONSUMED >= epoch * reads(rank)``.

Copies are masked 2-D tiles of 32K elements (64 KB of bf16; 16K for sums, which hold two tiles
and an fp32 accumulator): at ~2 us per NVLink round trip a program needs that much in flight to
move ~30 GB/s, so 16 comm programs approach the measured 190-340 GB/s of SM peer copies.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import IntegerAttr, IntegerType, ModuleOp, TensorType, f32, i32, i64
from xdsl.ir import Block, Region, SSAValue
from xdsl.passes import ModulePass

from syncopate.abi import KIND_CHUNK, KIND_CONSUMED, KIND_ENTRY, KIND_PRODUCED, FlagLayout
from syncopate.backends.sm import CopyTiling
from syncopate.errors import CompileError, ScheduleError
from syncopate.schedule.copy_view import schedule_copy_view
from syncopate_mlir.dialects import tt
from syncopate_mlir.dialects.syncopate import (
    CommOp,
    DrainOp,
    EnterOp,
    TransferChunkOp,
    TransferOp,
    request_of,
    schedule_of,
    state_of,
)

from .abi_info import chunk_writers, operands_of
from .builder import Builder
from .comm_table import TableTransfers
from .lowering import Lowering, OpLowering, addptr, broadcast_to, expand_dims, rewrite, splat, vec
from .partition_sms import executor


class CommLowering(TableTransfers, Lowering):
    """Comm-program lowering shared by the P2P (``sm``) and NVSHMEM backends; the table forms
    of its steps are in :mod:`passes.comm_table`."""

    def __init__(self, module: ModuleOp):
        super().__init__(module)
        self.sched = schedule_of(module)
        self.layout = FlagLayout(self.sched.num_chunks, self.sched.world_size)
        self.writers = chunk_writers(module)
        self.state = state_of(module)
        #: chunks whose CHUNK signal is left out (fault injection, the request's ``withhold``)
        self.withheld = frozenset(request_of(module).withhold)
        self.operands = operands_of(module)

    def lower(self) -> None:
        self.lower_comm()
        super().lower()

    def lower_comm(self) -> None:
        """The comm programs' steps, then the comm body in place of its region op."""
        table = self.table_mode
        rewrite(self.module, [OpLowering(EnterOp, self.table_enter if table else self.enter),
                              OpLowering(TransferOp, self.transfer),
                              OpLowering(DrainOp, self.table_drain if table else self.drain),
                              OpLowering(TransferChunkOp, self.transfer_chunk),
                              OpLowering(CommOp, self.inline)], regions_first=True)

    @staticmethod
    def inline(comm: CommOp) -> list[SSAValue]:
        for o in list(comm.body.blocks[0].ops):
            o.detach()
            comm.parent_block().insert_op_before(o, comm)
        return []

    # ------------------------------------------------------------------------------ flags
    def flag_ptr(self, b: Builder, index: SSAValue, peer: SSAValue | None = None) -> SSAValue:
        flags = self.args["syn_flags"]
        p = addptr(b, flags, index)
        if peer is not None:
            p = self.peer_address(b, p, peer, 0)
        return p

    def release_flag(self, b: Builder, index: SSAValue, value: SSAValue, op: str = "add",
                     peer: SSAValue | None = None) -> None:
        self.release(b, self.flag_ptr(b, index, peer), value, op)

    def wait_flag(self, b: Builder, index: SSAValue, target: SSAValue, kind: int,
                  peer: SSAValue | None = None) -> None:
        self.spin(b, self.flag_ptr(b, index, peer), index, target, kind)

    # ------------------------------------------------------------------------------ steps
    def enter(self, o) -> list[SSAValue]:
        b = Builder(o)
        fb = b.then(b.cmp("eq", o.pid, b.const(0)))
        index = fb.add(fb.const(self.layout.entry(0)), o.rank)
        for q in range(self.sched.world_size):
            qb = fb.then(fb.cmp("ne", o.rank, fb.const(q)))
            self.signal_remote(qb, index, o.epoch, "set", qb.const(q))
        return []

    def signal_remote(self, b: Builder, index, value, op, peer) -> None:
        self.release_flag(b, index, value, op, peer)

    def drain(self, o) -> list[SSAValue]:
        reads = self.state.reads_per_src
        b = Builder(o)
        if any(reads.values()):
            fb = b.then(b.cmp("eq", o.pid, b.const(0)))
            n = fb.const(0)
            for r, count in sorted(reads.items()):
                if count:
                    n = fb.select(fb.cmp("eq", o.rank, fb.const(r)), fb.const(count), n)
            target = fb.mul(o.epoch, n)
            self.wait_flag(fb, fb.const(self.layout.consumed), target, KIND_CONSUMED)
        return []

    def transfer(self, o) -> list[SSAValue]:
        c = self.sched.chunk(o.chunk.value.data)
        side = executor(c)
        b = Builder(o)
        tb = b.then(b.cmp("eq", o.rank, b.const(c.dst if side == "dst" else c.src)))
        src, dst = tb.const(c.src), tb.const(c.dst)
        # the source's flags: its own on the source, read across from the destination
        at_src = None if side == "src" else src
        by_id = {x.id: x for x in self.sched.chunks}
        self.wait_flag(tb, tb.const(self.layout.entry(c.dst if side == "src" else c.src)),
                       o.epoch, KIND_ENTRY)
        for a in c.after:
            if by_id[a].dst == c.src:
                self.wait_flag(tb, tb.const(a), tb.mul(o.epoch, tb.const(self.writers)),
                               KIND_CHUNK, peer=at_src)
        if self.sched.is_produced(c.tensor):
            produced = self.layout.produced(c.id)
            if side == "src":
                self.wait_flag(tb, tb.const(produced), tb.mul(o.epoch, tb.const(c.volume)),
                               KIND_PRODUCED)
            else:
                vol = tb.mul(o.epoch, tb.const(c.volume))
                self.wait_flag(tb, tb.const(produced), vol, KIND_PRODUCED, peer=src)
                if c.reduce == "sum":
                    self.wait_flag(tb, tb.const(produced), vol, KIND_PRODUCED)
        signalled = self.move(tb, o, c, side, src, dst)
        withheld = c.id in self.withheld  # fault injection: the data moves, CHUNK[c] never rises
        self.release_chunk(tb, lambda: None if withheld else tb, lambda rb: rb.const(c.id),
                           side == "dst", signalled, src, dst)
        return []

    def release_chunk(self, b: Builder, keep, index, on_dst: bool, signalled: bool,
                      src: SSAValue, dst: SSAValue) -> None:
        """After a transfer's move: ``CHUNK[c] += 1`` on the destination, unless the move
        already signalled it (a put-with-signal) or ``keep()`` gives None (a withheld chunk:
        fault injection; else the builder the release goes in), then, for a read of the
        source's buffer, ``CONSUMED += 1`` on the source.  ``index(builder)`` builds the chunk's
        flag index (a constant when unrolled, the table's chunk id otherwise)."""
        one = b.const(1)
        keep = keep()
        if not on_dst:
            if not signalled and keep is not None:
                self.release_flag(keep, index(keep), one, "add", peer=dst)
            return
        if keep is not None:
            self.release_flag(keep, index(keep), one, "add")
        self.release_flag(b, b.const(self.layout.consumed), one, "add", peer=src)

    # ------------------------------------------------------------------------------ copies
    def move(self, b: Builder, o, c, side: str, src: SSAValue, dst: SSAValue) -> bool:
        """This comm program's share of the chunk's data (P2P loads/stores).  Returns whether
        the move itself already signalled the destination's ``CHUNK[c]`` (a put-with-signal)."""
        base = o.base
        src_base = self.peer_address(b, base, src, o.operand.value.data) if side == "dst" else base
        dst_base = self.peer_address(b, base, dst, o.operand.value.data) if side == "src" else base
        self.copy_tiles(b, o, c, src_base, dst_base, accumulate=(c.reduce == "sum"))
        return False

    def copy_tiles(self, b: Builder, o, c, src_base, dst_base, accumulate: bool) -> None:
        shape2, lo, hi = self.box2(c.tensor, c.lo, c.hi, f"chunk {c.id}")
        tiling = CopyTiling.of(lo, hi, accumulate)
        self.copy_loop(b, o.pid, o.count, shape2, lo, hi, tiling.br, tiling.bc, tiling.ntc,
                       b.const(tiling.ntiles), src_base, dst_base, accumulate)

    def box2(self, tensor: str, lo, hi, what: str, b: Builder | None = None):
        """``(shape, lo, hi)`` of a chunk's box in the 2-d view the copies use
        (:mod:`syncopate.schedule.copy_view`: a 1-d tensor is one row, an N-d one is cut into
        leading dims as rows and trailing dims as columns).  Bounds that are IR values (the
        table lowering's) are combined with ``b``."""
        view = self.copy_view(tensor, what)
        if b is None or len(view.shape) <= 2:
            return (view.shape2, *view.box2(lo, hi))

        def mixed(fold, emit):  # two ints fold here; else the op, ints as constants
            return lambda x, y: (fold(x, y) if isinstance(x, int) and isinstance(y, int)
                                 else emit(b.value(x), b.value(y)))
        return (view.shape2, *view.box2(lo, hi, add=mixed(operator.add, b.add),
                                        mul=mixed(operator.mul, b.mul),
                                        sub=mixed(operator.sub, b.sub)))

    def copy_view(self, tensor: str, what: str):
        """The tensor's :class:`~syncopate.schedule.copy_view.CopyView` (one per tensor)."""
        cache = self.__dict__.setdefault("_copy_views", {})
        if tensor not in cache:
            try:
                cache[tensor] = schedule_copy_view(self.sched, tensor)
            except ScheduleError as e:
                raise CompileError(f"{what}: {e}") from None
        return cache[tensor]

    def copy_loop(self, b: Builder, pid, count, shape2, lo, hi, br: int, bc: int, ntc, ntiles,
                  src_base, dst_base, accumulate: bool, from_table: bool = False,
                  full: tuple[bool, bool] = (False, False)) -> None:
        """Comm program ``pid`` of ``count`` copies tiles ``pid, pid + count, ...`` of the box
        ``[lo, hi)`` (``br x bc`` elements each, ``ntc`` per row band, ``ntiles`` in all).
        Bounds are ints (the unrolled lowering: constants in the loop body) or i32 values
        defined before the loop (the table lowering: read from the chunk's record).
        ``from_table``: the table lowering's copy (not software-pipelined, addressed from the
        tile's corner; ``full`` dims unmasked), see :mod:`passes.comm_table`."""
        wide = shape2[0] * shape2[1] >= 2 ** 31
        ity = i64 if wide else i32

        body = Block(arg_types=[i32])
        t = body.args[0]
        lb = Builder(None, body, location=b.effective_location())

        tr = lb.divsi(t, lb.value(ntc))
        tcol = lb.sub(t, lb.mul(tr, lb.value(ntc)))
        r0 = lb.add(lb.value(lo[0]), lb.mul(tr, lb.const(br)))
        c0 = lb.add(lb.value(lo[1]), lb.mul(tcol, lb.const(bc)))
        rvec = vec(lb, r0, br)
        cvec = vec(lb, c0, bc)
        # a dim every tile fills (``full``) needs no bound test
        rmask = None if full[0] else lb.cmp("slt", rvec, splat(lb, lb.value(hi[0]), [br]))
        cmask = None if full[1] else lb.cmp("slt", cvec, splat(lb, lb.value(hi[1]), [bc]))
        shape_t = [br, bc]

        def tile(x: SSAValue, axis: int) -> SSAValue:  # a row or column vector over the tile
            return broadcast_to(lb, expand_dims(lb, x, axis), shape_t)

        rows2 = tile(rvec, 1)
        cols2 = tile(cvec, 0)
        parts = [tile(m, axis) for m, axis, whole in ((rmask, 1, full[0]), (cmask, 0, full[1]))
                 if not whole]
        mask = parts[0] if len(parts) == 1 else (lb.andi(*parts) if parts else None)
        if wide:
            rows2 = lb.insert(arith.ExtSIOp(rows2, TensorType(i64, shape_t))).result
            cols2 = lb.insert(arith.ExtSIOp(cols2, TensorType(i64, shape_t))).result
        if not from_table or br * shape2[1] >= 2 ** 31:  # (in-tile offsets must fit an i32)
            offs = lb.add(lb.mul(rows2, splat(lb, lb.const(shape2[1], ity), shape_t)), cols2)
            sp = addptr(lb, splat(lb, src_base, shape_t), offs)
            dp = addptr(lb, splat(lb, dst_base, shape_t), offs)
        else:
            # the tile's corner as a scalar pointer, then offsets within the tile: a splat of
            # the chunk's (loop-invariant) base pointer would be hoisted out of the loop as a
            # [br, bc] tensor of pointers held in registers across it (255 registers)
            corner = lb.add(lb.mul(lb.cast(r0, ity), lb.const(shape2[1], ity)), lb.cast(c0, ity))
            local = lb.add(lb.mul(tile(vec(lb, lb.const(0), br), 1),
                                  splat(lb, lb.const(shape2[1]), shape_t)),
                           tile(vec(lb, lb.const(0), bc), 0))
            sp = addptr(lb, splat(lb, addptr(lb, src_base, corner), shape_t), local)
            dp = addptr(lb, splat(lb, addptr(lb, dst_base, corner), shape_t), local)
        value = lb.insert(tt.LoadOp(sp, mask)).results[0]
        if accumulate:
            mine = lb.insert(tt.LoadOp(dp, mask)).results[0]
            value = self._add(lb, value, mine)
        lb.insert(tt.StoreOp(dp, value, mask))
        lb.insert(scf.YieldOp())
        loop = b.insert(scf.ForOp(pid, ntiles, count, [], Region(body)))
        if from_table:
            self.no_pipelining(loop)

    @staticmethod
    def no_pipelining(loop) -> None:
        """Keep Triton from software-pipelining a copy loop (``tl.range(num_stages=1)``).

        A loop whose trip count is read from the chunk table looks like any other loop to
        Triton's pipeliner, which multi-buffers its tile loads: measured on the row-gather
        kernel of the unseen corpus, 255 registers (from 96) for the whole fused kernel, and
        too few co-resident programs in loopback.  The unrolled lowering's copy loops have
        constant trip counts of a few tiles, which the pipeliner leaves as they are."""
        loop.attributes["tt.num_stages"] = IntegerAttr(1, i32)

    def _add(self, b: Builder, x: SSAValue, y: SSAValue) -> SSAValue:
        ety = x.type.element_type
        if isinstance(ety, IntegerType):
            return b.add(x, y)
        if ety == f32:
            return b.insert(arith.AddfOp(x, y)).result
        f32t = TensorType(f32, x.type.get_shape())
        xf = b.insert(arith.ExtFOp(x, f32t)).result
        yf = b.insert(arith.ExtFOp(y, f32t)).result
        s = b.insert(arith.AddfOp(xf, yf)).result
        return b.insert(arith.TruncFOp(s, x.type)).result


@dataclass(frozen=True)
class LowerSm(ModulePass):
    name: ClassVar[str] = "lower-sm"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        CommLowering(op).lower()
