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


def _group_interval(shape, dims, lo, hi) -> tuple[int, int] | None:
    """``[lo, hi)`` of the flattened index over ``dims`` (consecutive, row-major) when the box
    is one interval of it -- leading dims of extent 1, one dim of any extent, then full dims
    -- else None."""
    p = next((d for d in dims if hi[d] - lo[d] > 1), dims[-1] if dims else None)
    if p is None:
        return (0, 1)
    if any(lo[d] != 0 or hi[d] != shape[d] for d in dims if d > p):
        return None
    flat, stride = 0, 1
    for d in reversed(dims):
        flat += lo[d] * stride
        stride *= shape[d]
    vol = 1
    for d in dims:
        vol *= hi[d] - lo[d]
    return flat, flat + vol


def copy_view(shape, boxes) -> int | None:
    """The split ``k`` of a row-major tensor into a 2-d view -- rows the flattened dims
    ``[0, k)``, columns the flattened dims ``[k, nd)`` -- in which every box ``(lo, hi)`` is a
    2-d box; None when there is none.  The comm programs copy 2-d tiles, so an N-d chunk is
    copied through this view (a head of a ``[B, H, S, D]`` tensor, all batches: rows ``B``,
    columns ``H * S * D``).  1-d tensors are one row (``k = 0``), 2-d tensors their own view
    (``k = 1``); for more dims the largest ``k`` that fits every box."""
    nd = len(shape)
    if nd <= 2:
        return nd - 1
    for k in range(nd - 1, 0, -1):
        if all(_group_interval(shape, range(k), lo, hi) is not None
               and _group_interval(shape, range(k, nd), lo, hi) is not None for lo, hi in boxes):
            return k
    return None


def view_shape(shape, k: int) -> tuple[int, int]:
    rows = 1
    for n in shape[:k]:
        rows *= n
    cols = 1
    for n in shape[k:]:
        cols *= n
    return rows, cols


def view_box(shape, k: int, lo, hi) -> tuple[tuple[int, int], tuple[int, int]]:
    """A box of the tensor as the 2-d box of the view ``k`` (:func:`copy_view` chose ``k``)."""
    nd = len(shape)
    r = _group_interval(shape, range(k), lo, hi)
    c = _group_interval(shape, range(k, nd), lo, hi)
    if r is None or c is None:
        raise ValueError(f"box {list(lo)}..{list(hi)} is not a 2-d box of the view k={k}")
    return (r[0], c[0]), (r[1], c[1])


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

    def launch(self, cfg, grid, args, stream, epoch: int, peers, operand_tensors) -> None:
        fk, a = self.fk, cfg.abi
        if not a.signals_entry and not fk.test_skip_entry:
            from ..runtime import sync_kernels as sk  # Triton kernels: imported on first use
            sk.signal_entry(peers, a.layout.entry(fk.comm.rank), epoch, fk.comm.world_size,
                            flag64=a.flag_dtype == "int64", stream=stream)
        self.run_kernel(cfg, grid, args, stream)


class SM(Backend):
    name = "sm"
    flag_dtype = "int32"
    has_comm_programs = True
    default_comm_programs = 16
    signals_entry = True
    compiles_withheld = True
    pre_resolve_passes = ("partition-sms",)
    launcher_class = SMLauncher
