"""The race checker: shadow state per rank and tensor element, and what it reports.

Why shadow state and not only a comparison with the reference: a read of stale data can give
the right numbers by luck (the previous launch's data, or a chunk that happened to arrive
first in this interleaving), and a comparison cannot say *which* wait or signal is wrong.  The
shadow records, for every element of every communicated tensor on every rank, which launch's
data it holds (``epoch_of``) and the last launch for which a peer finished reading it
(``remote_read``); every access checks them:

* **read-before-arrival** -- a compute program loads an element whose ``epoch_of`` is older
  than its launch (the chunk has not arrived, the host has not staged it), or a transfer reads
  a source element that is not this launch's data yet;
* **early-signal** -- a ``PRODUCED`` signal counts more elements of a chunk than the signalling
  program has stored into it in this launch, or the flag reaches ``epoch * |c|`` while some
  element of the chunk's region still holds an older launch's data (a transfer reading a
  produced element that was not stored yet is reported the same way); for a chunk with a
  run-time extent the rows past its count are padding, released unstored by design;
* **write-after-read** -- a write in launch ``E`` (host staging, a kernel store, a transfer)
  into an element that a peer reads remotely and has not finished reading for launch ``E-1``;
  a push into a rank whose launch ``E-1`` is still running; a compute load that sees data of a
  *later* launch than its own (overwritten under it);
* **deadlock** -- every live coroutine is blocked (reported by the scheduler through
  :meth:`Checker.deadlock`), each blocked wait named.

Every report names the rank, the program, the op location (MLIR ``loc``), the chunk and the
epoch.  Reports are deduplicated per (kind, rank, location, chunk, epoch) so that one missing
wait gives one line per launch, not one per element.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from ..errors import EmulationError
from .interpreter import serial_ge


@dataclass(frozen=True)
class Race:
    kind: str
    rank: int
    program: str
    loc: str
    chunk: int | None
    epoch: int
    detail: str
    policy: str = ""

    def __str__(self) -> str:
        ch = f" chunk {self.chunk}" if self.chunk is not None else ""
        pol = f" [{self.policy}]" if self.policy else ""
        return (f"{self.kind}: rank {self.rank}, {self.program}, epoch {self.epoch},{ch} at "
                f"{self.loc}: {self.detail}{pol}")


class Checker:
    """Shadow-state checks over one emulated world (see the module docstring)."""

    def __init__(self, sched, world_size: int, remote_readers: dict):
        self.schedule = sched
        self.W = world_size
        self.races: list[Race] = []
        self._seen: set = set()
        self.policy = ""
        #: (rank, tensor) -> boolean mask of elements a peer reads remotely each launch
        self.remote_readers = remote_readers
        #: (rank, tensor) -> chunks whose PRODUCED count this rank's stores feed
        self.produced_chunks: dict[tuple[int, str], list] = {}
        for c in sched.chunks:
            if sched.is_produced(c.tensor):
                ranks = {c.src} | ({c.dst} if c.reduce == "sum" else set())
                for r in ranks:
                    self.produced_chunks.setdefault((r, c.tensor), []).append(c)
        self.rank_done: dict[int, int] = {r: 0 for r in range(world_size)}

    # ----------------------------------------------------------------------------- reports
    def report(self, kind, rank, program, loc, chunk, epoch, detail) -> None:
        key = (kind, rank, loc, chunk, epoch)
        if key in self._seen:
            return
        self._seen.add(key)
        self.races.append(Race(kind, rank, program, loc, chunk, epoch, detail, self.policy))

    def _coords(self, buf, offs):
        """Coordinates of flat ``offs`` in the schedule tensor ``buf`` holds (it holds one)."""
        return np.unravel_index(np.asarray(offs, dtype=np.int64),
                                self.schedule.tensors[buf.tensor].shape)

    def chunk_of(self, buf, off: int, to_rank: int | None = None):
        """The chunk delivering element ``off`` of ``buf`` to ``to_rank`` (or any chunk)."""
        if buf.tensor not in self.schedule.tensors:
            return None
        idx = [int(i[0]) for i in self._coords(buf, [off])]
        for c in self.schedule.chunks:
            if c.tensor != buf.tensor or (to_rank is not None and c.dst != to_rank):
                continue
            if all(lo <= i < hi for i, lo, hi in zip(idx, c.lo, c.hi)):
                return c.id
        return None

    def _extent(self, buf, offs, loc) -> None:
        """Accesses beyond the schedule tensor's extent mean the schedule does not describe
        the buffer the kernel indexes (a shape the compiler should have refused)."""
        spec = self.schedule.tensors.get(buf.tensor)
        size = int(np.prod(spec.shape)) if spec is not None else buf.data.size
        if offs.size and int(offs.max()) >= size:
            raise EmulationError(
                f"rank {buf.rank} accesses element {int(offs.max())} of {buf.name}, beyond the "
                f"{size} elements of the schedule's tensor {buf.tensor} "
                f"{spec.shape if spec is not None else ''}"
                f": the schedule's shape does not match what the kernel indexes", loc)

    # ----------------------------------------------------------------------------- loads
    def compute_load(self, pc, buf, offs, loc) -> None:
        """A compute program read ``offs`` of a tracked buffer in its launch ``pc.epoch``."""
        if offs.size == 0:
            return
        self._extent(buf, offs, loc)
        ep = buf.epoch_of[offs]
        if (ep == pc.epoch).all():
            return
        old = ep < pc.epoch
        if old.any():
            first = int(offs[np.argmax(old)])
            c = self.chunk_of(buf, first, buf.rank)
            what = (f"loads {int(old.sum())} element(s) of {buf.tensor} not yet arrived in "
                    f"this launch (first: element {first}, holding launch "
                    f"{int(buf.epoch_of[first])}'s data)")
            if c is None:
                what += "; no chunk of the schedule delivers it to this rank"
            self.report("read-before-arrival", buf.rank, pc.name, loc, c, pc.epoch, what)
        new = ep > pc.epoch
        if new.any():
            first = int(offs[np.argmax(new)])
            self.report("write-after-read", buf.rank, pc.name, loc,
                        self.chunk_of(buf, first, buf.rank), pc.epoch,
                        f"loads {int(new.sum())} element(s) of {buf.tensor} already overwritten "
                        f"with launch {int(buf.epoch_of[first])}'s data")

    def transfer_read(self, who: str, reader_rank: int, buf, offs, epoch: int, chunk: int,
                      loc: str) -> None:
        """A transfer (comm program, copy engine, host sum) read ``offs`` of ``buf``."""
        if not buf.tracked or offs.size == 0:
            return
        ep = buf.epoch_of[offs]
        bad = ep != epoch
        if bad.any():
            first = int(offs[np.argmax(bad)])
            produced = buf.tensor not in self.schedule.tensors or self.schedule.is_produced(buf.tensor)
            kind = "early-signal" if produced and ep[np.argmax(bad)] < epoch else (
                "read-before-arrival" if ep[np.argmax(bad)] < epoch else "write-after-read")
            self.report(kind, reader_rank, who, loc, chunk, epoch,
                        f"the transfer of chunk {chunk} reads {int(bad.sum())} element(s) of "
                        f"{buf.tensor} on rank {buf.rank} that hold launch "
                        f"{int(buf.epoch_of[first])}'s data, not launch {epoch}'s"
                        + (" (released before they were stored)" if kind == "early-signal" else ""))
        if reader_rank != buf.rank:
            np.maximum.at(buf.remote_read, offs, epoch)

    def skipped_read(self, reader_rank: int, buf, offs, epoch: int) -> None:
        """A transfer with a run-time extent left ``offs`` of its source region unread (the
        padding past its count, emulate/extents.py): the reader is done with them for this
        launch just as with the rows it copied, so a later launch may overwrite them."""
        if buf.tracked and offs.size and reader_rank != buf.rank:
            np.maximum.at(buf.remote_read, offs, epoch)

    # ----------------------------------------------------------------------------- writes
    def write(self, who: str, writer_rank: int, buf, offs, epoch: int, loc: str,
              chunk: int | None = None) -> None:
        """Any write of launch ``epoch`` into a tracked buffer (staging, store, transfer)."""
        if not buf.tracked or offs.size == 0:
            return
        if epoch >= 2:
            mask = self.remote_readers.get((buf.rank, buf.tensor))
            if mask is not None:
                pending = mask[offs] & (buf.remote_read[offs] < epoch - 1)
                if pending.any():
                    first = int(offs[np.argmax(pending)])
                    c = chunk if chunk is not None else self.chunk_of(buf, first)
                    self.report("write-after-read", writer_rank, who, loc, c, epoch,
                                f"writes {int(pending.sum())} element(s) of {buf.tensor} on rank "
                                f"{buf.rank} for launch {epoch} that a peer has not finished "
                                f"reading for launch {epoch - 1}")
            if writer_rank != buf.rank and self.rank_done[buf.rank] < epoch - 1:
                self.report("write-after-read", writer_rank, who, loc, chunk, epoch,
                            f"writes {buf.tensor} on rank {buf.rank} for launch {epoch} while "
                            f"that rank's launch {epoch - 1} is still running (it may still "
                            f"read the region)")
        if writer_rank != buf.rank and self.rank_done[buf.rank] >= epoch:
            self.report("read-before-arrival", writer_rank, who, loc, chunk, epoch,
                        f"delivers {buf.tensor} into rank {buf.rank} after that rank's launch "
                        f"{epoch} completed: nothing on rank {buf.rank} waits for chunk {chunk}, "
                        f"so its launch returns before its data arrived")
        buf.epoch_of[offs] = epoch

    def compute_store(self, pc, buf, offs, loc) -> None:
        self._extent(buf, offs, loc)
        self.write(pc.name, pc.rank, buf, offs, pc.epoch, loc)
        chunks = self.produced_chunks.get((pc.rank, buf.tensor))
        if chunks and offs.size:
            idx = self._coords(buf, offs)
            for c in chunks:
                inside = np.ones(offs.shape, bool)
                for d, (lo, hi) in enumerate(zip(c.lo, c.hi)):
                    inside &= (idx[d] >= lo) & (idx[d] < hi)
                n = int(inside.sum())
                if n:
                    pc.stored[c.id] = pc.stored.get(c.id, 0) + n

    # ----------------------------------------------------------------------------- signals
    def produced_signal(self, pc, chunk, value: int, flag_after: int, bits: int, buf, loc,
                        valid_hi: int | None = None) -> None:
        """``PRODUCED[chunk] += value`` by ``pc``; ``buf`` is this rank's buffer of the tensor.

        ``valid_hi``: for a chunk with a run-time extent, where its counted rows end (dim 0).
        The rows past it are padding: the producer's tiles past the count release them without
        storing (docs/moe.md section 7), so a program may signal up to that many elements more
        than it stored, and the region must be stored only up to ``valid_hi`` when the flag
        completes. What a copier reads -- the counted rows -- is checked as for any chunk."""
        if value <= 0:
            return
        c = self.schedule.chunk(chunk)
        done = pc.signalled.get(chunk, 0) + value
        pc.signalled[chunk] = done
        stored = pc.stored.get(chunk, 0)
        if valid_hi is not None:
            stored += (c.hi[0] - valid_hi) * (c.volume // (c.hi[0] - c.lo[0]))
        if done > stored:
            self.report("early-signal", pc.rank, pc.name, loc, chunk, pc.epoch,
                        f"signals {done} produced element(s) of chunk {chunk} but has stored "
                        f"only {stored} of them in this launch")
        target = pc.epoch * c.volume
        if buf is not None and buf.tracked and serial_ge(flag_after, target, bits) and \
                not serial_ge(flag_after - value, target, bits):
            shape = self.schedule.tensors[c.tensor].shape
            his = (c.hi[0] if valid_hi is None else valid_hi,) + tuple(c.hi[1:])
            sl = tuple(slice(lo, hi) for lo, hi in zip(c.lo, his))
            region = buf.epoch_of.reshape(shape)[sl]
            stale = region != pc.epoch
            if stale.any():
                self.report("early-signal", pc.rank, pc.name, loc, chunk, pc.epoch,
                            f"PRODUCED[{chunk}] reached its target while {int(stale.sum())} "
                            f"element(s) of the chunk's region are not stored in this launch")

    # ----------------------------------------------------------------------------- deadlock
    def deadlock(self, blocked) -> None:
        """``blocked``: (rank, program name, epoch, wait) of every live coroutine."""
        for rank, name, epoch, w in blocked:
            chunk = getattr(w, "chunk", None)
            loc = getattr(w, "loc", None) or "<host>"
            self.report("deadlock", rank, name, loc, chunk, epoch,
                        f"blocked forever: {w.describe()}")

    def launch_done(self, rank: int, epoch: int) -> None:
        self.rank_done[rank] = max(self.rank_done[rank], epoch)
