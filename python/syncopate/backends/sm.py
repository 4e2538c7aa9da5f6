"""``sm``: comm programs inside the fused kernel move the data (push or pull) over NVLink
(``partition-sms`` + ``lower-sm``); the host launches the kernel and nothing else."""

from __future__ import annotations

from dataclasses import dataclass

from .base import Backend, Launcher

TILE_ELEMS = 32768       # elements per copy tile: 64 KB of bf16 in flight per program
SUM_TILE_ELEMS = 16384   # sums hold two tiles and an fp32 accumulator per tile
MAX_COLS = 1024


def _pow2_at_least(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


@dataclass(frozen=True)
class CopyTiling:
    """How the comm programs cut a 2-d chunk ``[lo, hi)`` into tiles: ``br x bc`` elements,
    ``ntc`` tiles per row band, ``ntiles`` in all, tile ``t`` to comm program ``t % count``.
    The one definition ``lower-sm`` emits and the CPU emulator replays."""

    br: int
    bc: int
    ntc: int
    ntiles: int

    @classmethod
    def of(cls, lo, hi, accumulate: bool) -> "CopyTiling":
        rows, cols = hi[0] - lo[0], hi[1] - lo[1]
        bc = min(MAX_COLS, _pow2_at_least(cols))
        tile = SUM_TILE_ELEMS if accumulate else TILE_ELEMS
        br = max(1, min(_pow2_at_least(rows), tile // bc))
        ntc = -(-cols // bc)
        return cls(br, bc, ntc, -(-rows // br) * ntc)

    @classmethod
    def covering(cls, boxes, accumulate: bool) -> "CopyTiling":
        """One tile shape for chunks of several sizes (the table lowering emits one copy loop
        per kind of chunk): the shape :meth:`of` picks for the largest rows and columns; for
        equal chunks, the shape :meth:`of` gives each.  ``ntc``/``ntiles`` are those of the
        largest box; :meth:`fit` gives a box's own."""
        rows = max(hi[0] - lo[0] for lo, hi in boxes)
        cols = max(hi[1] - lo[1] for lo, hi in boxes)
        return cls.of((0, 0), (rows, cols), accumulate)

    def fit(self, lo, hi) -> "CopyTiling":
        """This tile shape over the box ``[lo, hi)``: its own ``ntc`` and ``ntiles``."""
        rows, cols = hi[0] - lo[0], hi[1] - lo[1]
        ntc = -(-cols // self.bc)
        return CopyTiling(self.br, self.bc, ntc, -(-rows // self.br) * ntc)

    def tiles(self, lo, hi) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """``[(row range, col range)]`` of every tile, in tile order."""
        out = []
        for t in range(self.ntiles):
            tr, tc = divmod(t, self.ntc)
            r0, c0 = lo[0] + tr * self.br, lo[1] + tc * self.bc
            out.append(((r0, min(r0 + self.br, hi[0])), (c0, min(c0 + self.bc, hi[1]))))
        return out


class SMLauncher(Launcher):
    """Signal ``ENTRY[me] = e`` on every rank on the launch stream, unless the kernel does
    (``abi.signals_entry``: comm program 0 publishes it), then launch the kernel. Its comm
    programs do the rest, including holding the launch open until CONSUMED reached
    ``e * reads(me)`` (pull). Enqueues only on the stream it is given."""

    def capture_refusal(self, cfg) -> str | None:
        """Capturable when the kernel publishes ENTRY itself: then the launch is the device
        epoch advance and the kernel, both reading the epoch from device memory. The runtime's
        ``signal_entry`` takes a host epoch, which a graph would replay stale."""
        if not cfg.abi.signals_entry:
            return ("its kernel does not publish ENTRY itself (abi.signals_entry is False), and "
                    "the runtime's signal_entry takes a host-computed epoch")
        return None

    def kernel_only(self, cfg) -> bool:
        return cfg.abi.signals_entry or self.fk.test_skip_entry

    def launch(self, cfg, grid, args, stream, epoch: int | None, peers, operand_tensors,
               direct=None) -> None:
        fk, a = self.fk, cfg.abi
        if not a.signals_entry and not fk.test_skip_entry:
            from ..runtime import sync_kernels as sk  # Triton kernels: imported on first use
            sk.signal_entry(peers, a.layout.entry(fk.comm.rank), epoch, fk.comm.world_size,
                            flag64=a.flag_dtype == "int64", stream=stream)
        self.run_kernel(cfg, grid, args, stream, direct)


class SM(Backend):
    name = "sm"
    flag_dtype = "int32"
    has_comm_programs = True
    default_comm_programs = 16
    signals_entry = True
    compiles_withheld = True
    pre_resolve_passes = ("partition-sms",)
    launcher_class = SMLauncher
