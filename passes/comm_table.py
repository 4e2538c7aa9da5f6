"""The table form of the comm programs' steps (``lowering="table"``, ``lower-sm`` and
``lower-nvshmem``): code size independent of the chunk count.

``partition-sms`` emits, in table mode, a loop over this rank's EXEC list of the chunk table
with one ``syncopate.transfer_chunk`` of the id it reads.  Here that op becomes: read the
chunk's record (tensor slot, ends, kind bits, volume, box, ``after`` list), then one branch per
:class:`~syncopate.chunk_table.ChunkKind` the schedule has, each holding the same steps the
unrolled ``transfer`` emits for one chunk (docs/fused-abi.md): wait for ENTRY of the other end,
for the ``after`` chunks on the source, for PRODUCED (source, and destination for ``sum``);
copy this comm program's share of the box's tiles; release CHUNK on the destination and, for a
read of a peer's buffer, CONSUMED on the source.  The copy's tile shape is fixed per kind
(``CopyTiling.covering``: the shape the unrolled lowering picks for equal chunks); the number
of tiles follows each chunk's box at run time.  ``enter`` becomes a loop over the ranks and
``drain`` reads this rank's CONSUMED target from the table.
"""

from __future__ import annotations

import math

from xdsl.dialects import scf
from xdsl.ir import SSAValue

from syncopate import chunk_table as ct
from syncopate.abi import KIND_CHUNK, KIND_CONSUMED, KIND_ENTRY, KIND_PRODUCED
from syncopate.backends.sm import CopyTiling

from .builder import Builder
from .table_reader import TableReader, longest


class TableTransfers:
    """Mixed into :class:`passes.lower_sm.CommLowering` (which provides ``sched``, ``layout``,
    ``writers``, ``withheld``, ``args``, ``wait_flag``, ``release_flag``, ``peer_address``,
    ``signal_remote``, ``box2``, ``copy_loop`` and the backend's ``move_kind``)."""

    def reader(self, table: SSAValue) -> TableReader:
        return TableReader(table, ct.layout_of(self.sched))

    # ------------------------------------------------------------------------ enter, drain
    def table_enter(self, o) -> list[SSAValue]:
        """Comm program 0 sets ``ENTRY[rank] = epoch`` on every peer: a loop over the ranks."""
        b = Builder(o)
        fb = b.then(b.cmp("eq", o.pid, b.const(0)))
        index = fb.add(fb.const(self.layout.entry(0)), o.rank)
        _, lb, q, _ = fb.for_(fb.const(0), fb.const(self.sched.world_size), fb.const(1))
        qb = lb.then(lb.cmp("ne", o.rank, q))
        self.signal_remote(qb, index, o.epoch, "set", q)
        lb.insert(scf.YieldOp())
        return []

    def table_drain(self, o) -> list[SSAValue]:
        """Comm program 0 waits ``CONSUMED >= epoch * reads(rank)``, the target read from the
        table's reads section."""
        b = Builder(o)
        if any(ct.reads_per_src(self.sched, "sm", self.writers).values()):
            fb = b.then(b.cmp("eq", o.pid, b.const(0)))
            rd = self.reader(self.args["syn_table"])
            n = rd.word(fb, fb.add(fb.const(rd.layout.reads), o.rank))
            self.wait_flag(fb, fb.const(self.layout.consumed), fb.mul(o.epoch, n), KIND_CONSUMED)
        return []

    # ------------------------------------------------------------------------ transfers
    def transfer_chunk(self, o) -> list[SSAValue]:
        rd = self.reader(o.table)
        b = Builder(o)
        cid = o.chunk
        rec = rd.record(b, cid)
        slot = rd.field(b, rec, ct.R_TENSOR)
        bits = b.andi(rd.field(b, rec, ct.R_FLAGS), b.const(ct.FLAG_SUM | ct.FLAG_ON_DST))
        slots = ct.tensor_slots(self.sched)
        for kind, chunks in ct.chunk_kinds(self.sched, "sm").items():
            is_kind = b.andi(b.cmp("eq", slot, b.const(slots[kind.tensor])),
                             b.cmp("eq", bits, b.const(kind.flags())))
            kb = b.then(is_kind)
            self._transfer_kind(kb, o, rd, rec, cid, kind, chunks)
        return []

    def _transfer_kind(self, b: Builder, o, rd: TableReader, rec, cid, kind: ct.ChunkKind,
                       chunks) -> None:
        src = rd.field(b, rec, ct.R_SRC)
        dst = rd.field(b, rec, ct.R_DST)
        produced = self.sched.is_produced(kind.tensor)
        chunk_target = b.mul(o.epoch, b.const(self.writers))
        other = src if kind.on_dst else dst
        self.wait_flag(b, b.add(b.const(self.layout.entry(0)), other), o.epoch, KIND_ENTRY)
        n_after = longest(ct.after_waits(self.sched, c) for c in chunks)
        if n_after:
            start = rd.field(b, rec, ct.R_AFTER_START)
            count = b.minsi(rd.field(b, rec, ct.R_AFTER_COUNT), b.const(n_after))
            _, ab, a, _ = rd.each(b, start, count)
            self.wait_flag(ab, a, chunk_target, KIND_CHUNK, peer=src if kind.on_dst else None)
            ab.insert(scf.YieldOp())
        if produced:
            vol = b.mul(o.epoch, rd.field(b, rec, ct.R_VOLUME))
            index = b.add(b.const(self.layout.produced(0)), cid)
            self.wait_flag(b, index, vol, KIND_PRODUCED, peer=src if kind.on_dst else None)
            if kind.on_dst and kind.sum:
                self.wait_flag(b, index, vol, KIND_PRODUCED)
        signalled = self.move_kind(b, o, rd, rec, kind, chunks, src, dst)
        withheld = sorted(c.id for c in chunks if c.id in self.withheld)

        def keep() -> Builder:
            if not withheld:
                return b
            # fault injection: the data moves, CHUNK[c] never rises for these ids
            kept = b.all_of([b.cmp("ne", cid, b.const(w)) for w in withheld])
            return b.then(kept)

        self.release_chunk(b, keep, lambda _: cid, kind.on_dst, signalled, src, dst)

    def box_of(self, b: Builder, rd: TableReader, rec, tensor: str, chunks):
        """The record's box as 2-d ``(shape, lo, hi, extent)``: ``box2``'s form plus, per dim,
        the extent every chunk of the kind shares (None where they differ).  A bound every
        chunk shares is a constant (row bands of an all-gather all span the whole row), and a
        shared extent makes ``hi = lo + extent`` and the copy's trip count constants; only the
        rest is read from the record.  Constants matter: Triton's alignment analysis then
        proves the copy's columns contiguous and vectorises the loads (a column start read
        from memory made every element a scalar load with its own pointer: 255 registers
        instead of 154 for a fused GEMM), and a loop whose trip count is read from memory is
        software-pipelined with multi-buffered tiles (255 registers instead of 96 for a row
        gather)."""
        shape = self.sched.tensors[tensor].shape
        nd = len(shape)
        lo, hi, ext = [], [], []
        for d in range(nd):
            los = {c.lo[d] for c in chunks}
            exts = {c.hi[d] - c.lo[d] for c in chunks}
            first = los.pop() if len(los) == 1 else rd.field(b, rec, ct.R_LO + d)
            e = exts.pop() if len(exts) == 1 else None
            if e is not None:
                last = first + e if isinstance(first, int) else b.add(first, b.const(e))
            else:
                last = rd.field(b, rec, ct.R_HI + d)
            lo.append(first)
            hi.append(last)
            ext.append(e)
        if nd == 1:
            return (1, shape[0]), (0, lo[0]), (1, hi[0]), (1, ext[0])
        shape2, lo2, hi2 = self.box2(tensor, lo, hi, f"tensor {tensor!r}", b)
        if nd == 2:
            return shape2, lo2, hi2, tuple(ext)
        # an N-d box in the 2-d copy view: a group's extent is shared when every dim's is
        cut = self.copy_view(tensor, f"tensor {tensor!r}").cut
        return shape2, lo2, hi2, tuple(None if None in group else math.prod(group)
                                       for group in (ext[:cut], ext[cut:]))

    def copy_kind(self, b: Builder, o, rd: TableReader, rec, kind: ct.ChunkKind, chunks,
                  src_base, dst_base) -> None:
        """This comm program's tiles of the record's box, in the kind's tile shape."""
        shape2, lo, hi, ext = self.box_of(b, rd, rec, kind.tensor, chunks)
        boxes = [self.box2(kind.tensor, c.lo, c.hi, f"chunk {c.id}")[1:] for c in chunks]
        tiling = CopyTiling.covering(boxes, kind.sum)

        def blocks(d: int, size: int):  # ceil(extent / size), a constant when shared
            if ext[d] is not None:
                return -(-ext[d] // size)
            f, t = b.value(lo[d]), b.value(hi[d])
            return b.divsi(b.add(b.sub(t, f), b.const(size - 1)), b.const(size))

        ntc = blocks(1, tiling.bc)
        nrows = blocks(0, tiling.br)
        if isinstance(ntc, int) and isinstance(nrows, int):
            ntiles = b.const(ntc * nrows)
        else:
            ntiles = b.mul(b.value(nrows), b.value(ntc))
        # a dim whose shared extent is a multiple of the tile needs no mask: every tile is
        # whole (per-element row masks of a dynamic bound cost a register each: 255 in all)
        full = tuple(e is not None and e % t == 0 for e, t in zip(ext, (tiling.br, tiling.bc)))
        self.copy_loop(b, o.pid, o.count, shape2, lo, hi, tiling.br, tiling.bc, ntc, ntiles,
                       src_base, dst_base, kind.sum, from_table=True, full=full)

    def move_kind(self, b: Builder, o, rd: TableReader, rec, kind: ct.ChunkKind, chunks, src,
                  dst) -> bool:
        """P2P tile copies (``sm``) between the kind's operand on the source and on the
        destination (peer-table row ``1 + i`` for operand ``i``); returns whether the move
        signalled CHUNK itself."""
        i = list(self.operands.values()).index(kind.tensor)
        base = o.bases[i]
        src_base = self.peer_address(b, base, src, 1 + i) if kind.on_dst else base
        dst_base = self.peer_address(b, base, dst, 1 + i) if not kind.on_dst else base
        self.copy_kind(b, o, rd, rec, kind, chunks, src_base, dst_base)
        return False
