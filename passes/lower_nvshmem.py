"""``lower-nvshmem``: comm programs move chunks with NVSHMEM device calls.

Contiguous ``none`` chunks move with one block-scoped NVSHMEM call per comm program:
``nvshmemx_putmem_signal_block`` (push: the data and the destination's ``CHUNK[c] += 1`` in
one operation, ordered by NVSHMEM) or ``nvshmemx_getmem_block`` (pull, followed by the local
flag and the source's ``CONSUMED``).  ``ENTRY`` is published with ``nvshmemx_signal_op``.
Flags are 64-bit (NVSHMEM signals are ``uint64_t``).  The calls are ``tt.extern_elementwise``
ops resolved against ``libnvshmem_device.bc`` (Triton's ``extern_libs`` option); every thread
of the comm program calls them with the same arguments, as block-scoped NVSHMEM calls require.
Chunks that are not contiguous, and ``sum`` chunks, use the P2P tile copies of ``lower-sm``
(peers on one node are load/store reachable through the same symmetric heap).  After loading
the module the runtime runs ``nvshmemx_cumodule_init`` on it.  With ``lowering="table"`` the
same calls are made per kind of chunk, with the rows read from the chunk table
(:meth:`NvshmemLowering.move_kind`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, i32, i64
from xdsl.passes import ModulePass

from syncopate import chunk_table as ct
from syncopate_mlir.dialects import tt

from .builder import Builder
from .lower_sm import CommLowering
from .lowering import addptr

NVSHMEM_SIGNAL_SET = 0
NVSHMEM_SIGNAL_ADD = 5


class NvshmemLowering(CommLowering):
    def _call(self, b: Builder, symbol: str, args) -> None:
        b.insert(tt.ExternElementwiseOp(list(args), i32, symbol, pure=False))

    def _addr(self, b: Builder, ptr) -> object:
        return b.insert(tt.PtrToIntOp(ptr, i64)).results[0]

    def signal_remote(self, b: Builder, index, value, op, peer) -> None:
        sig = self._addr(b, addptr(b, self.args["syn_flags"], index))
        code = NVSHMEM_SIGNAL_SET if op == "set" else NVSHMEM_SIGNAL_ADD
        self._call(b, "nvshmemx_signal_op", [sig, b.i64(value), b.const(code), peer])

    def _contiguous(self, c) -> bool:
        shape = self.sched.tensors[c.tensor].shape
        return all(lo == 0 and hi == n for lo, hi, n in zip(c.lo[1:], c.hi[1:], shape[1:]))

    def move(self, b: Builder, o, c, side, src, dst) -> bool:
        if c.reduce == "sum" or not self._contiguous(c) or c.id in self.withheld:
            # (a withheld chunk: P2P tiles, since a put-with-signal would signal it)
            return super().move(b, o, c, side, src, dst)
        return self._move_rows(b, o, o.base, c.tensor, c.lo[0], c.hi[0],
                               c.id if side == "src" else None, src, dst)

    def _move_rows(self, b: Builder, o, base, tensor: str, lo, hi, push_chunk, src,
                   dst) -> bool:
        """One block-scoped NVSHMEM call moving this comm program's share of the whole rows
        ``[lo, hi)`` of ``tensor`` (ints: the unrolled form; i32 values: the table form):
        a put-with-signal of ``CHUNK[push_chunk]`` on the destination when ``push_chunk`` is
        given (returns True: the put signalled), else a get from ``src``."""
        shape = self.sched.tensors[tensor].shape
        row = math.prod(shape[1:])
        esize = self.sched.element_bytes(tensor)
        rows = b.const(hi - lo) if isinstance(lo, int) and isinstance(hi, int) else b.sub(hi, lo)
        # rows of this comm program: [lo + pid * per, min(hi, lo + (pid + 1) * per))
        per = b.divsi(b.add(rows, b.sub(o.count, b.const(1))), o.count)
        first = b.minsi(b.add(b.value(lo), b.mul(o.pid, per)), b.value(hi))
        last = b.minsi(b.add(first, per), b.value(hi))
        nbytes = b.i64(b.mul(b.sub(last, first), b.const(row * esize)))
        ptr = addptr(b, base, b.mul(first, b.const(row)))
        addr = self._addr(b, ptr)
        if push_chunk is not None:
            sig = self._addr(b, addptr(b, self.args["syn_flags"], b.value(push_chunk)))
            self._call(b, "nvshmemx_putmem_signal_block",
                       [addr, addr, nbytes, sig, b.const(1, i64), b.const(NVSHMEM_SIGNAL_ADD), dst])
            return True  # the put carried the destination's CHUNK[c] += 1
        self._call(b, "nvshmemx_getmem_block", [addr, addr, nbytes, src])
        return False

    def move_kind(self, b: Builder, o, rd, rec, kind, chunks, src, dst) -> bool:
        """The table form of :meth:`move`: one NVSHMEM call per comm program for a kind whose
        chunks are all contiguous copies (rows read from the chunk's record), P2P tiles
        otherwise."""
        if kind.sum or not all(self._contiguous(c) for c in chunks) or \
                any(c.id in self.withheld for c in chunks):
            return super().move_kind(b, o, rd, rec, kind, chunks, src, dst)
        base = o.bases[list(self.operands.values()).index(kind.tensor)]
        lo = rd.field(b, rec, ct.R_LO)
        hi = rd.field(b, rec, ct.R_HI)
        return self._move_rows(b, o, base, kind.tensor, lo, hi,
                               None if kind.on_dst else o.chunk, src, dst)


@dataclass(frozen=True)
class LowerNvshmem(ModulePass):
    name: ClassVar[str] = "lower-nvshmem"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        NvshmemLowering(op).lower()
