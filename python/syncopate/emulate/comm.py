"""The emulated machine: W ranks with their buffers and flag arrays, what the comm steps of
the ``sm``/``nvshmem`` backends do, the ``ce`` backend's host side stream, and each rank's host
(staging fresh inputs, launching, waiting) over several launches.

The semantics are those the lowering passes and the runtime implement (so that the emulator
checks the module the compiler produced against what the hardware will do with it):

* ``syncopate.enter`` (``lower-sm``): comm program 0 sets ``ENTRY[rank] = epoch`` on every peer.
* ``syncopate.transfer`` of chunk ``c`` (``lower-sm``; ``nvshmem`` moves the same data with a
  put-with-signal, which orders data before flag exactly like a copy then a release): on the
  executing rank (the source for ``push`` copies, the destination for ``pull`` and ``sum``)
  every comm program waits for ``ENTRY`` of the other side, for the ``after`` chunks the source
  received, for ``PRODUCED[c]`` on the source (and the destination for ``sum``) when the tensor
  is produced by the kernel, then copies its share of the chunk's tiles (tile ``t`` to comm
  program ``t % count``, the geometry of ``lower_sm.copy_tiles``), accumulating in fp32 for
  ``sum``, then adds 1 to ``CHUNK[c]`` on the destination and, when it read a peer's buffer,
  to ``CONSUMED`` on the source.
* ``syncopate.drain``: comm program 0 waits ``CONSUMED >= epoch * reads(rank)``.
* ``ce`` (``CELauncher.launch``, ``runtime/launchers/ce.py``, with ``schedule/ce_plan.py``'s plan):
  the side stream signals ``ENTRY[me]`` everywhere and waits every ``ENTRY[p] >= e`` before the
  kernel is released; then, in plan order, waits ``PRODUCED`` (or the whole kernel), copies the
  chunk (a ``sum`` chunk into the owner's per-source slot) and sets ``CHUNK[c] = e`` on the
  destination; then adds the pull reads to the sources' ``CONSUMED``; after the kernel the host
  adds the slots into its own partial (own first, then sources in rank order, fp32); before
  staging the next launch it waits ``CONSUMED >= e * reads_of_me``.

:class:`Faults` switches off single pieces of that protocol for the mutation tests (an ENTRY
wait, the ce CONSUMED wait, a chunk's region shifted in the transfers): each must make the
checker report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from syncopate import chunk_table as ct
from syncopate.abi import FlagLayout

from .. import backends
from ..backends.sm import CopyTiling
from ..errors import EmulationError
from ..schedule.copy_view import schedule_copy_view
from ..schedule.execution import side as chunk_side
from ..schedule.verify_extent import valid_rows
from .extents import clip_to_count
from .interpreter import POINT, Machine, WaitCond, WaitFlag, wrap_int
from .memory import to_etype


@dataclass(frozen=True)
class TableChunk:
    """A chunk as a record of the chunk table gives it (the fields ``_transfer`` reads)."""

    id: int
    tensor: str
    src: int
    dst: int
    reduce: str
    after: tuple
    volume: int
    lo: tuple
    hi: tuple
    side: str
    tiling: object


def region_offsets(shape, lo, hi) -> np.ndarray:
    """Flat row-major offsets of the box ``[lo, hi)`` of a tensor of ``shape``."""
    idx = np.ix_(*[np.arange(a, b, dtype=np.int64) for a, b in zip(lo, hi)])
    strides = np.cumprod((list(shape[1:]) + [1])[::-1])[::-1]
    off = np.zeros([b - a for a, b in zip(lo, hi)], dtype=np.int64)
    for d, ix in enumerate(idx):
        off = off + ix * int(strides[d])
    return off.reshape(-1)


@dataclass
class Faults:
    """Pieces of the comm protocol to leave out (mutation tests; never in real use)."""

    skip_entry_wait: bool = False       # transfers / the ce stream do not wait for ENTRY
    skip_consumed_wait: bool = False    # ce: the host stages the next launch without waiting
    skip_after_wait: bool = False       # transfers do not wait for their ``after`` chunks
    shift_chunk: dict = field(default_factory=dict)  # chunk id -> (dim, delta): moved region
    #: the device epoch advance is left out after the first launch: every launch reads the
    #: epoch 1 -- what a CUDA-graph replay of an ABI-2 kernel (scalar epoch baked in at
    #: capture) would do (docs/cuda-graphs.md)
    stale_epoch: bool = False


class World(Machine):
    """Every rank's buffers and flags, the checker, and the comm semantics."""

    def __init__(self, sched, backend: str, comm_programs: int, abi_state, checker,
                 faults: Faults | None = None):
        self.schedule = sched
        self.backend = backend
        self.W = sched.world_size
        self.layout = FlagLayout(sched.num_chunks, sched.world_size)
        self.writers = backends.get(backend, EmulationError).chunk_writers(comm_programs)
        self.state = abi_state
        self.checker = checker
        self.faults = faults or Faults()
        self.bufs: list[dict] = [dict() for _ in range(self.W)]  # rank -> param -> Buffer
        self.flags: list = []
        self.slots: list[dict] = [dict() for _ in range(self.W)]  # ce sum slots
        self.param_of_tensor: dict[str, str] = {}
        self.addr_map = None
        #: chunks the module's request withholds (fault injection)
        self.withheld: frozenset = frozenset()
        #: rank -> CONSUMED increments per epoch its drain waits for, where the kernel reads
        #: them from the chunk table's reads section (``lowering="table"``); None: the ABI
        #: state's ``reads_per_src`` (the unrolled lowering bakes those in as constants)
        self.reads: dict | None = None
        self.stats = {"transfers": 0, "copied_elements": 0, "waits": 0, "signals": 0}
        self._tilings: dict | None = None  # chunk kind -> CopyTiling (table lowering)
        self._copy_views: dict = {}

    # ------------------------------------------------------------------ Machine hooks
    def on_load(self, pc, buf, offs, loc):
        if buf.tracked:
            self.checker.compute_load(pc, buf, offs, loc)

    def on_store(self, pc, buf, offs, loc):
        if buf.tracked:
            self.checker.compute_store(pc, buf, offs, loc)

    def peer(self, buf, rank, loc):
        if buf.is_flags:
            return self.flags[rank]
        try:
            return self.bufs[rank][buf.name]
        except (KeyError, IndexError):
            raise EmulationError(f"syncopate.peer_ptr: no buffer {buf.name} on rank {rank}",
                                 loc) from None

    def resolve_addr(self, addr, loc):
        return self.addr_map.resolve(addr, loc)

    def on_wait_done(self, pc, wait):
        self.stats["waits"] += 1

    def on_signal(self, pc, buf, index, value, op, kind, loc):
        self.stats["signals"] += 1
        old = int(buf.data[index])
        new = old + value if op == "add" else value
        buf.data[index] = wrap_int(new, buf.et.bits)
        if kind == "produced":
            chunk = index - self.layout.produced(0)
            if 0 <= chunk < self.schedule.num_chunks:
                c = self.schedule.chunk(chunk)
                tbuf = self.bufs[buf.rank].get(self.param_of_tensor.get(c.tensor))
                self.checker.produced_signal(pc, chunk, value, int(buf.data[index]),
                                             buf.et.bits, tbuf, loc,
                                             self._valid_hi(c, buf.rank))

    def _valid_hi(self, c, rank):
        """For a chunk with a run-time extent, the end (along dim 0) of its counted rows, by the
        count as ``rank`` (its producer) holds it; else None. The rows past it are padding the
        producer's tiles release without storing (emulate/extents.py)."""
        vr = valid_rows(c)
        if vr is None:
            return None
        cbuf = self.bufs[rank].get(self.param_of_tensor.get(vr[0]))
        if cbuf is None:
            return None
        return clip_to_count(c.lo, c.hi, cbuf.data[vr[1]])[1][0]

    # ------------------------------------------------------------------ flag helpers
    def _set(self, rank, index, value):
        b = self.flags[rank]
        b.data[index] = wrap_int(int(value), b.et.bits)

    def _add(self, rank, index, value):
        self._set(rank, index, int(self.flags[rank].data[index]) + int(value))

    def wait_flag(self, rank, index, target, kind, chunk, loc, pc=None):
        w = WaitFlag(self.flags[rank], index, target, kind, chunk, loc, pc)
        if not w.ready():
            yield w

    # ------------------------------------------------------------------ comm steps
    def comm_step(self, pc, kind, info, loc):
        rank, epoch, pid = info["rank"], info["epoch"], info["pid"]
        if kind == "enter":
            if pid == 0:
                for q in range(self.W):
                    if q != rank:
                        yield POINT
                        self._set(q, self.layout.entry(rank), epoch)
            return
        if kind == "drain":
            reads = self.reads[rank] if self.reads is not None else \
                self.state.reads_per_src.get(rank, 0)
            if pid == 0 and reads:
                yield from self.wait_flag(rank, self.layout.consumed, epoch * reads, "consumed",
                                      None, loc, pc)
            return
        yield from self._transfer(pc, info, loc)

    def copy_view(self, tensor: str):
        """The tensor's 2-d copy view, as the lowering computes it (one per tensor)."""
        if tensor not in self._copy_views:
            self._copy_views[tensor] = schedule_copy_view(self.schedule, tensor)
        return self._copy_views[tensor]

    def chunk_box(self, c):
        shift = self.faults.shift_chunk.get(c.id)
        if not shift:
            return c.lo, c.hi
        dim, delta = shift
        lo, hi = list(c.lo), list(c.hi)
        shape = self.schedule.tensors[c.tensor].shape
        lo[dim] = min(max(lo[dim] + delta, 0), shape[dim])
        hi[dim] = min(max(hi[dim] + delta, 0), shape[dim])
        return tuple(lo), tuple(hi)

    def _kind_tilings(self) -> dict:
        """Chunk kind -> the copy tile shape the table lowering emits for it (computed once per
        world: every transfer of every launch asks)."""
        if self._tilings is None:
            self._tilings = {}
            for kind, chunks in ct.chunk_kinds(self.schedule, self.backend).items():
                view = self.copy_view(kind.tensor)
                boxes = [view.box2(c.lo, c.hi) for c in chunks]
                self._tilings[kind] = CopyTiling.covering(boxes, kind.sum)
        return self._tilings

    def _table_chunk(self, info, loc) -> "TableChunk":
        """The chunk a ``transfer_chunk`` names, as the table's record says it."""
        words = info["table"].buf.data
        cid = info["chunk"]
        if not 0 <= cid < int(words[ct.H_CHUNKS]):
            raise EmulationError(f"syncopate.transfer_chunk: chunk id {cid} read from the chunk "
                                 f"table is out of range", loc)
        rec = ct.record(words, cid)
        names = list(self.schedule.tensors)
        tensor = names[rec.tensor]
        kind = ct.ChunkKind(tensor, rec.on_dst, rec.sum)
        tiling = self._kind_tilings().get(kind)
        if tiling is None:
            raise EmulationError(f"syncopate.transfer_chunk: the table's record of chunk {cid} "
                                 f"has a kind no chunk of the schedule has ({kind})", loc)
        return TableChunk(cid, tensor, rec.src, rec.dst, "sum" if rec.sum else "none",
                          rec.after, rec.volume, rec.lo, rec.hi,
                          "dst" if rec.on_dst else "src", tiling)

    def _transfer(self, pc, info, loc):
        if "table" in info:
            c = self._table_chunk(info, loc)
            side, after = c.side, c.after
        else:
            c = self.schedule.chunk(info["chunk"])
            side = chunk_side(c, self.backend)
            after = [a for a in c.after if self.schedule.chunk(a).dst == c.src]
        if self.faults.skip_after_wait:
            after = []
        rank, epoch, pid, count = info["rank"], info["epoch"], info["pid"], info["count"]
        if rank != (c.src if side == "src" else c.dst):
            return
        lay = self.layout
        # the executing rank waits for the other side's ENTRY; the after chunks and PRODUCED
        # are the source's (and for a sum on the destination, its own PRODUCED too)
        if not self.faults.skip_entry_wait:
            yield from self.wait_flag(rank, lay.entry(c.dst if side == "src" else c.src), epoch,
                                  "entry", c.id, loc, pc)
        for a in after:
            yield from self.wait_flag(c.src, a, epoch * self.writers, "chunk", a, loc, pc)
        if self.schedule.is_produced(c.tensor):
            yield from self.wait_flag(c.src, lay.produced(c.id), epoch * c.volume, "produced",
                                  c.id, loc, pc)
            if side != "src" and c.reduce == "sum":
                yield from self.wait_flag(rank, lay.produced(c.id), epoch * c.volume,
                                      "produced", c.id, loc, pc)
        param = self.param_of_tensor[c.tensor] if "table" in info else info["base"].buf.name
        src_buf, dst_buf = self.bufs[c.src][param], self.bufs[c.dst][param]
        view = self.copy_view(c.tensor)
        lo, hi = self.chunk_box(c)
        vr = valid_rows(self.schedule.chunk(c.id))
        if vr is not None:  # a run-time extent: copy the counted prefix only (extents.py)
            cbuf = self.bufs[c.src][self.param_of_tensor[vr[0]]]  # next to the data
            idx = np.array([vr[1]], dtype=np.int64)
            self.checker.transfer_read(pc.name, rank, cbuf, idx, epoch, c.id, loc)
            lo, vhi = clip_to_count(lo, hi, cbuf.data[vr[1]])
            if vhi[0] < hi[0]:  # the padding is not read: this launch is done with it
                shape = self.schedule.tensors[c.tensor].shape
                self.checker.skipped_read(rank, src_buf,
                                          region_offsets(shape, (vhi[0],) + tuple(lo[1:]), hi),
                                          epoch)
            hi = vhi
        acc = c.reduce == "sum"
        tiles = []
        if all(b > a for a, b in zip(lo, hi)):
            # the tiles ``lower_sm.copy_tiles`` cuts the chunk's box of the tensor's 2-d copy
            # view into: of its kind's tile shape (table lowering), else of its own
            blo, bhi = view.box2(lo, hi)
            tiling = c.tiling.fit(blo, bhi) if "table" in info else CopyTiling.of(blo, bhi, acc)
            tiles = tiling.tiles(blo, bhi)
        for t in range(pid, len(tiles), count):
            (r0, r1), (c0, c1) = tiles[t]
            offs = region_offsets(view.shape2, (r0, c0), (r1, c1))
            yield POINT
            self._move(pc.name, rank, src_buf, dst_buf, offs, epoch, c.id, loc, acc)
        self.stats["transfers"] += 1
        yield POINT
        if c.id not in self.withheld:  # fault injection: moved, never released
            self._add(c.dst, c.id, 1)
        if side != "src":
            yield POINT
            self._add(c.src, lay.consumed, 1)

    def _move(self, who, rank, src_buf, dst_buf, offs, epoch, chunk, loc, accumulate,
              dst_offs=None):
        dst_offs = offs if dst_offs is None else dst_offs
        self.checker.transfer_read(who, rank, src_buf, offs, epoch, chunk, loc)
        vals = src_buf.data[offs]
        if accumulate:
            self.checker.transfer_read(who, rank, dst_buf, dst_offs, epoch, chunk, loc)
            s = vals.astype(np.float32) + dst_buf.data[dst_offs].astype(np.float32) \
                if dst_buf.et.kind == "float" else vals + dst_buf.data[dst_offs]
            vals = to_etype(s, dst_buf.et)
        self.checker.write(who, rank, dst_buf, dst_offs, epoch, loc, chunk)
        dst_buf.data[dst_offs] = vals
        self.stats["copied_elements"] += int(offs.size)

    # ------------------------------------------------------------------ ce side stream
    def ce_stream(self, rank: int, epoch: int, plan, launch) -> object:
        """The side stream of one ``ce`` launch (docs/fused-abi.md "ce host protocol")."""
        lay = self.layout
        who = f"rank {rank} copy-engine stream"
        loc = "<ce side stream>"
        for q in range(self.W):
            yield POINT
            self._set(q, lay.entry(rank), epoch)
        if not self.faults.skip_entry_wait:
            for p in range(self.W):
                yield from self.wait_flag(rank, lay.entry(p), epoch, "entry", None, loc)
        launch.entered = True
        for st in plan.steps:
            c = self.schedule.chunk(st.chunk)
            if st.wait_produced:
                yield from self.wait_flag(rank, lay.produced(st.chunk), epoch * st.wait_produced,
                                      "produced", st.chunk, loc)
            if st.wait_kernel:
                yield WaitCond(lambda: launch.kernel_done(), f"rank {rank} launch {epoch}'s kernel")
            if st.src != st.dst:
                param = self.param_of_tensor[c.tensor]
                shape = self.schedule.tensors[c.tensor].shape
                lo, hi = self.chunk_box(c)
                offs = region_offsets(shape, lo, hi)
                src_buf = self.bufs[st.src][param]
                yield POINT
                if st.reduce:
                    slot = self.slots[st.dst][c.tensor]
                    size = int(np.prod(shape))
                    self._move(who, rank, src_buf, slot, offs, epoch, st.chunk, loc, False,
                               dst_offs=offs + st.src * size)
                else:
                    self._move(who, rank, src_buf, self.bufs[st.dst][param], offs, epoch,
                               st.chunk, loc, False)
                self.stats["transfers"] += 1
            yield POINT
            self._set(st.dst, lay.chunk(st.chunk), epoch)
        for src, n in sorted(plan.consumed_adds.items()):
            yield POINT
            self._add(src, lay.consumed, n)

    def ce_reduce(self, rank: int, epoch: int, plan):
        """After the kernel: add the partials pushed into this rank's slots (own first)."""
        lay = self.layout
        loc = "<ce host reduction>"
        who = f"rank {rank} host"
        for st in plan.reduce_in:
            yield from self.wait_flag(rank, lay.chunk(st.chunk), epoch, "chunk", st.chunk, loc)
        groups: dict = {}
        for st in plan.reduce_in:
            c = self.schedule.chunk(st.chunk)
            groups.setdefault((c.tensor, c.lo, c.hi), []).append((st.src, st.chunk))
        for (tname, lo, hi), srcs in groups.items():
            shape = self.schedule.tensors[tname].shape
            size = int(np.prod(shape))
            offs = region_offsets(shape, lo, hi)
            own = self.bufs[rank][self.param_of_tensor[tname]]
            slot = self.slots[rank][tname]
            yield POINT
            self.checker.transfer_read(who, rank, own, offs, epoch, srcs[0][1], loc)
            acc = own.data[offs].astype(np.float32)
            for s, ch in sorted(srcs):
                self.checker.transfer_read(who, rank, slot, offs + s * size, epoch, ch, loc)
                acc = acc + slot.data[offs + s * size].astype(np.float32)
            self.checker.write(who, rank, own, offs, epoch, loc, srcs[0][1])
            own.data[offs] = to_etype(acc, own.et)


class Launch:
    """One launch of the fused kernel on one rank: its coroutines' progress."""

    def __init__(self, rank: int, epoch: int):
        self.rank, self.epoch = rank, epoch
        self.programs: list = []
        self.stream = None
        self.entered = False

    def kernel_done(self) -> bool:
        return all(c.done for c in self.programs)

    def done(self) -> bool:
        return self.kernel_done() and (self.stream is None or self.stream.done)
