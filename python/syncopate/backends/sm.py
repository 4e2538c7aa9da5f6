"""``sm``: comm programs inside the fused kernel move the data (push or pull) over NVLink
(``partition-sms`` + ``lower-sm``); the host launches the kernel and nothing else
(``runtime/launchers/sm.py``). Also the comm programs' copy tiling, which ``lower-sm`` emits
and the emulator replays."""

from __future__ import annotations

from dataclasses import dataclass

from .spec import BackendSpec

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


SM = BackendSpec(
    name="sm",
    has_comm_programs=True,
    default_comm_programs=16,
    sum_on_destination=True,
    signals_entry=True,
    compiles_withheld=True,
    pre_resolve_passes=("partition-sms",),
    # a system-scope release/acquire round trip plus the programs' start on a chunk
    link_alpha_s=3e-6,
)
