"""The epilogue reduction cannot deadlock where the op allows it (CPU simulation).

With ``reduce="epilogue"`` a GEMM tile of rows its rank owns waits for the other ranks'
partials of those rows, which they compute in their own GEMM tiles -- compute waits on compute
across ranks. This file simulates both kernels' tile walks exactly as compiled (the persistent
kernel's grouped walk with ``tile-remap``'s sends-first table, and the one-tile-per-program
kernel dispatched in program order onto a limited number of SMs) for every rank at once, with
the schedule's chunks as the only dependencies (the copy engine moves a chunk once its source
tiles are done), and checks:

* every configuration ``gemm_rs._check_epilogue_order`` accepts completes, whatever the number
  of programs or resident slots;
* the refusals are not vacuous: some refused configurations really deadlock.
"""

from __future__ import annotations

import itertools

import pytest

from passes.tile_remap import remap_table
from syncopate.errors import LaunchError
from syncopate.schedule.templates import reduce_scatter


def _grouped(tile_id, num_m, num_n, group_m):
    """``kernels.gemm._grouped_tile`` in Python."""
    in_group = group_m * num_n
    first = (tile_id // in_group) * group_m
    size = min(num_m - first, group_m)
    t = tile_id % in_group
    return first + t % size, t // size


class _Cfg:
    def __init__(self, bm, gm):
        self.BLOCK_M, self.GROUP_M = bm, gm


def _setup(W, rows, bm, gm, num_n, split):
    M = W * rows
    sched = reduce_scatter((M, 8 * num_n), "bf16", W, dim=0, split=split)
    tiles, table = remap_table(sched, "C", 0, bm, "producer", sends_only=True)
    num_m = tiles

    def rows_of(pid_m):
        return pid_m * bm, min((pid_m + 1) * bm, M)

    def walk(rank):
        """Tiles (pid_m, pid_n) in tile-id order, remapped for ``rank``."""
        out = []
        for tid in range(num_m * num_n):
            pm, pn = _grouped(tid, num_m, num_n, gm)
            out.append((table[rank * tiles + pm], pn))
        return out

    chunks = [c for c in sched.chunks if c.reduce == "sum"]

    def needs(rank, tile):
        lo, hi = rows_of(tile[0])
        return [c.id for c in chunks if c.dst == rank and c.lo[0] < hi and lo < c.hi[0]]

    def produces(rank, tile):
        lo, hi = rows_of(tile[0])
        return [c.id for c in chunks if c.src == rank and c.lo[0] < hi and lo < c.hi[0]]

    # a chunk is ready when every tile of its rows on its source rank is done (all columns)
    total = {c.id: 0 for c in chunks}
    for r in range(W):
        for t in walk(r):
            for cid in produces(r, t):
                total[cid] += 1
    return M, walk, needs, produces, total


def _simulate(W, rows, bm, gm, num_n, split, programs=None, slots=None) -> bool:
    """True when every tile of every rank completes. ``programs``: persistent kernel with that
    many programs per rank; ``slots``: one tile per program, dispatched in program order onto
    that many resident slots per rank."""
    M, walk, needs, produces, total = _setup(W, rows, bm, gm, num_n, split)
    done_count = {cid: 0 for cid in total}
    seqs = {}
    for r in range(W):
        order = walk(r)
        if programs is not None:
            seqs[r] = [order[p::programs] for p in range(programs)]
        else:
            seqs[r] = order
    pos = {r: [0] * len(seqs[r]) for r in range(W)} if programs is not None else None
    resident = {r: [] for r in range(W)}  # slots: indices of dispatched, unfinished tiles
    nxt = {r: 0 for r in range(W)}

    def ready(rank, tile):
        return all(done_count[c] == total[c] for c in needs(rank, tile))

    def finish(rank, tile):
        for c in produces(rank, tile):
            done_count[c] += 1

    while True:
        progress = False
        for r in range(W):
            if programs is not None:
                for p, seq in enumerate(seqs[r]):
                    while pos[r][p] < len(seq) and ready(r, seq[pos[r][p]]):
                        finish(r, seq[pos[r][p]])
                        pos[r][p] += 1
                        progress = True
            else:
                while len(resident[r]) < slots and nxt[r] < len(seqs[r]):
                    resident[r].append(nxt[r])
                    nxt[r] += 1
                for i in list(resident[r]):
                    if ready(r, seqs[r][i]):
                        finish(r, seqs[r][i])
                        resident[r].remove(i)
                        progress = True
        if programs is not None:
            if all(pos[r][p] == len(s) for r in range(W) for p, s in enumerate(seqs[r])):
                return True
        elif all(nxt[r] == len(seqs[r]) and not resident[r] for r in range(W)):
            return True
        if not progress:
            return False


def _allowed(W, rows, bm, gm) -> bool:
    from syncopate.ops.gemm_rs import _check_epilogue_order
    try:
        _check_epilogue_order("ce", W * rows, W, _Cfg(bm, gm))
        return True
    except LaunchError:
        return False


CONFIGS = list(itertools.product((2, 3, 4), (64, 128, 200, 256, 512), (64, 128), (1, 4, 8),
                                 (1, 3), (1, 2, 4)))


@pytest.mark.parametrize("programs", [1, 3, 8, 132])
def test_persistent_walk_never_deadlocks_where_allowed(programs):
    allowed = 0
    for W, rows, bm, gm, num_n, split in CONFIGS:
        if _allowed(W, rows, bm, gm):
            allowed += 1
            assert _simulate(W, rows, bm, gm, num_n, split, programs=programs), \
                (W, rows, bm, gm, num_n, split, programs)
    assert allowed > 20


@pytest.mark.parametrize("slots", [1, 2, 5, 132])
def test_one_tile_per_program_never_deadlocks_where_allowed(slots):
    for W, rows, bm, gm, num_n, split in CONFIGS:
        if _allowed(W, rows, bm, gm):
            assert _simulate(W, rows, bm, gm, num_n, split, slots=slots), \
                (W, rows, bm, gm, num_n, split, slots)


def test_refused_orders_do_deadlock_somewhere():
    """A tile holding two owners' rows (rows not a multiple of BLOCK_M), and sent tiles that do
    not fill whole groups, deadlock for some program count: the refusals are needed. (Some
    refusals are conservative -- e.g. one tile column walks the groups in order anyway -- but
    most refused configurations of the grid really deadlock.)"""
    for cfg in [(2, 64, 128, 1, 1, 1), (2, 128, 64, 4, 3, 1), (2, 64, 64, 8, 3, 2)]:
        assert not _allowed(*cfg[:4])
        assert any(not _simulate(*cfg, programs=p) for p in (1, 2, 3, 4, 8)), cfg
    refused = [c for c in CONFIGS if not _allowed(*c[:4])]
    dead = [c for c in refused if any(not _simulate(*c, programs=p) for p in (1, 2, 3, 4, 8))]
    assert len(dead) > len(refused) // 2
