"""Which elements of a produced tensor a launch stores, by evaluating the kernel's tiling.

``insert-signals`` counts one store per element of a produced tensor (reduce-scatter and
all-reduce partials): a chunk leaves when its count reaches its volume.  If two store
instances -- two programs, two loop iterations, two store ops -- write the same element, the
chunk leaves before its last value is stored.  Which elements each instance stores is the
kernel's tiling (its grid, its loops, its program-id arithmetic), which depends on the launch;
so ``check-accesses`` records, for every store of a produced tensor whose box it can compute
without reading memory, the pure scalar computation of that box (:class:`StoreSlice`: a
straight-line program of :class:`Step`\\ s over program ids, the grid, kernel scalar
arguments and constants, with the enclosing loops and branches), and :func:`check_stores`
runs it for a launch's grid and scalar arguments, vectorised over every program and loop
iteration, and refuses the launch if any element is stored twice.

The runtime (before a configuration's first launch with a grid and scalars) and the emulator
(before it emulates) call the one :func:`check_stores`; results are cached per (stores, grid,
arguments), so a repeated launch pays nothing.  Data only: numpy, no Triton, torch or IR.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from enum import Enum

import numpy as np

from .errors import LaunchError

__all__ = ["Op", "RemapSlice", "Step", "StoreSlice", "check_remaps", "check_stores"]

#: store instances one check may enumerate: ~100 bytes each while it runs (a loop bound
#: gone wild would exhaust the host's memory)
MAX_INSTANCES = 1 << 24


class Op(str, Enum):
    """What a :class:`Step` computes.  ``for`` repeats every instance once per iteration of a
    loop (``args``: lower bound, upper bound, step) and yields the iteration number; ``where``
    keeps the instances in which ``args[0]`` is true (the branch the store sits in) and yields
    nothing; ``cmp``'s ``value`` is the predicate in arith's order (eq, ne, slt, sle, sgt, sge,
    ult, ule, ugt, uge); ``pid``/``nprogs``'s ``value`` the grid axis; ``arg`` reads kernel
    argument ``name``; ``const`` is ``value``."""

    CONST = "const"
    ARG = "arg"
    PID = "pid"
    NPROGS = "nprogs"
    FOR = "for"
    WHERE = "where"
    ADD = "add"
    SUB = "sub"
    MUL = "mul"
    DIVS = "divs"
    DIVU = "divu"
    REMS = "rems"
    REMU = "remu"
    CEILDIVS = "ceildivs"
    CEILDIVU = "ceildivu"
    FLOORDIVS = "floordivs"
    MINS = "mins"
    MAXS = "maxs"
    MINU = "minu"
    MAXU = "maxu"
    AND = "and"
    OR = "or"
    XOR = "xor"
    SHL = "shl"
    SHRS = "shrs"
    SHRU = "shru"
    EXTS = "exts"
    EXTU = "extu"
    TRUNC = "trunc"
    CMP = "cmp"
    SELECT = "select"


@dataclass(frozen=True)
class Step:
    """One value of a :class:`StoreSlice`: ``op`` of the earlier steps ``args``, an integer of
    ``bits`` bits (the result wraps as the kernel's arithmetic does)."""

    op: Op
    args: tuple[int, ...] = ()
    value: int = 0
    name: str = ""
    bits: int = 64

    def __post_init__(self):
        object.__setattr__(self, "op", Op(self.op))
        object.__setattr__(self, "args", tuple(int(a) for a in self.args))


@dataclass(frozen=True)
class StoreSlice:
    """The box one store op writes into produced tensor ``tensor`` (a box of ``shape``, the
    tensor or the rank's part), as ``steps`` whose values ``start`` (one per dim) are the box's
    start, ``extent`` its size; ``at`` is the store's source location.  ``whole``: every store
    of ``tensor`` has a slice, so a launch must store each element of ``shape`` (a chunk waits
    for all its elements: one the launch never stores keeps it from leaving)."""

    tensor: str
    at: str
    shape: tuple[int, ...]
    steps: tuple[Step, ...]
    start: tuple[int, ...]
    extent: tuple[int, ...]
    whole: bool = False

    def __post_init__(self):
        for f in ("shape", "start", "extent"):
            object.__setattr__(self, f, tuple(int(x) for x in getattr(self, f)))
        object.__setattr__(self, "steps", tuple(
            s if isinstance(s, Step) else Step(**s) for s in self.steps))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RemapSlice:
    """What ``tile-remap`` relies on when it runs every program as if its tile coordinate
    ``X`` were ``table[rank][X]``: ``steps`` compute, for every program and every iteration of
    the tile loops that enclose ``X``, the coordinate (step ``coord``) and ``rest``, every
    other value through which that program's work depends on its program id or tile loop (the
    cut of the program's integer arithmetic below ``X``: ``j = pid % n``'s ``j * BN``, a loop
    bound, a branch's condition).  The remap is a renumbering of the launch's tiles only if,
    for every rank, the launch computes each ``(table[rank][X], rest)`` as often as
    ``(X, rest)`` (:func:`check_remaps`); ``table`` holds a permutation of ``0..tiles-1`` per
    rank (coordinates outside it are not moved), ``at`` the coordinate's source location."""

    tensor: str
    dim: int
    at: str
    tiles: int
    table: tuple[int, ...]
    steps: tuple[Step, ...]
    coord: int
    rest: tuple[int, ...]

    def __post_init__(self):
        for f in ("table", "rest"):
            object.__setattr__(self, f, tuple(int(x) for x in getattr(self, f)))
        object.__setattr__(self, "steps", tuple(
            s if isinstance(s, Step) else Step(**s) for s in self.steps))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _launch_args(slices, values, where: str, what: str) -> tuple:
    """``(name, value)`` of every kernel argument the slices read, sorted; a missing one is a
    :class:`LaunchError`."""
    names = sorted({s.name for sl in slices for s in sl.steps if s.op is Op.ARG})
    missing = [n for n in names if n not in values]
    if missing:
        raise LaunchError(f"{where}the check that {what} needs the kernel argument(s) "
                          f"{', '.join(missing)}")
    return tuple((n, int(values[n])) for n in names)


def _grid3(grid) -> tuple[int, int, int]:
    return tuple(int(x) for x in tuple(grid) + (1,) * (3 - len(grid)))


def check_remaps(remaps, grid, values, where: str = "") -> None:
    """Raise :class:`~syncopate.errors.LaunchError` if a launch of ``grid`` with the kernel
    arguments ``values`` is one on which a tile remap the kernel was compiled with is not a
    renumbering of the tiles the launch computes (:class:`RemapSlice`): a triangle of tiles, a
    grid that covers fewer tiles than the tensor has.  Cached per (remaps, grid, arguments the
    slices read)."""
    if not remaps:
        return
    args = _launch_args(remaps, values, where, "the tile order can be remapped")
    message = _unmatched(tuple(remaps), _grid3(grid), args)
    if message:
        raise LaunchError(where + message)


@functools.lru_cache(maxsize=256)
def _unmatched(remaps: tuple, grid: tuple, args: tuple) -> str | None:
    """The refusal's message for the first remapped tile the launch does not compute, or None."""
    values = dict(args)
    for r in remaps:
        cols, prog, its = _evaluate(r.steps, (r.coord, *r.rest), grid, values,
                                    f"the tile coordinate at {r.at}", r.tensor)
        if not len(prog):
            continue
        x = cols[0]
        rows = np.stack(cols, axis=1)
        have, count = np.unique(rows, axis=0, return_counts=True)
        inside = (x >= 0) & (x < r.tiles)
        for rank in range(len(r.table) // r.tiles):
            row = np.asarray(r.table[rank * r.tiles:(rank + 1) * r.tiles], np.int64)
            moved = rows.copy()
            moved[:, 0] = np.where(inside, row[np.where(inside, x, 0)], x)
            got, got_count = np.unique(moved, axis=0, return_counts=True)
            if got.shape == have.shape and (got == have).all() and (got_count == count).all():
                continue
            known = dict(zip(map(tuple, have.tolist()), count.tolist()))
            after = dict(zip(map(tuple, got.tolist()), got_count.tolist()))
            i = next(i for i, t in enumerate(map(tuple, moved.tolist()))
                     if known.get(t, 0) != after[t])
            t = tuple(moved[i].tolist())
            p = int(prog[i])
            pid = (p % grid[0], p // grid[0] % grid[1], p // (grid[0] * grid[1]))
            loops = f", iteration {tuple(int(k) for k in its[i])} of its tile loops" \
                if its.shape[1] else ""
            return (f"tile-remap compiled the kernel to run the tiles of tensor {r.tensor!r} "
                    f"(dim {r.dim}) in chunk order, as if each program's tile coordinate at "
                    f"{r.at} were table[rank][coordinate]; on rank {rank}, program {pid}"
                    f"{loops} has coordinate {int(x[i])} and would run as coordinate "
                    f"{t[0]}, a tile this launch of grid {grid} computes {known.get(t, 0)} "
                    f"time(s) with that program's other coordinates, the remapped launch "
                    f"{after[t]}: the launch's tiles do not form a grid along the coordinate "
                    f"(a triangle of tiles, or fewer tiles than the tensor has), so the "
                    f"remapped kernel would compute other tiles than the kernel. Fuse with "
                    f"remap=False (syncopate.compile, syncopate.fuse): the kernel keeps its "
                    f"tile order and the waits keep it correct")
    return None


def check_stores(stores, grid, values, where: str = "") -> None:
    """Raise :class:`~syncopate.errors.LaunchError` if a launch of ``grid`` (the user's grid)
    with the kernel arguments ``values`` (name -> value) stores an element of a produced tensor
    twice, naming the element and the two store instances, or never stores an element of a
    tensor whose stores all have slices (``StoreSlice.whole``).  Cached per (stores, grid,
    arguments the slices read)."""
    if not stores:
        return
    args = _launch_args(stores, values, where,
                        "no element of a produced tensor is stored twice")
    message = _overlap(tuple(stores), _grid3(grid), args)
    if message:
        raise LaunchError(where + message)


@functools.lru_cache(maxsize=256)
def _overlap(stores: tuple, grid: tuple, args: tuple) -> str | None:
    """The refusal's message for the first element stored twice or never, or None."""
    values = dict(args)
    for tensor in dict.fromkeys(s.tensor for s in stores):
        mine = [s for s in stores if s.tensor == tensor]
        parts = [(k, *_boxes(s, grid, values)) for k, s in enumerate(mine)]
        lo = np.concatenate([p[1] for p in parts])
        hi = np.concatenate([p[2] for p in parts])
        twice, never = _cover(lo, hi, mine[0].shape)
        if twice is None:
            if never is None or not all(s.whole for s in mine):
                continue
            return (f"element {never} of tensor {tensor!r}, which the kernel produces for the "
                    f"schedule, is never stored in a launch of grid {grid} (by the stores at "
                    f"{', '.join(dict.fromkeys(s.at for s in mine))}). A produced chunk leaves "
                    f"once all its elements are stored, counted one store per element, so the "
                    f"chunk holding it would never leave and the fused kernel would wait for it "
                    f"forever. Launch a grid that stores every element (store zeros where the "
                    f"kernel has nothing to write), or keep the collective after the kernel "
                    f"(fused=False)")
        who = []
        for k, plo, phi, prog, its in parts:
            for i in np.flatnonzero(np.all((plo <= twice) & (twice < phi), axis=1))[:2]:
                loops = f", iteration {tuple(int(x) for x in its[i])} of its loops" \
                    if its.shape[1] else ""
                p = int(prog[i])
                pid = (p % grid[0], p // grid[0] % grid[1], p // (grid[0] * grid[1]))
                who.append(f"the store at {mine[k].at} in program {pid}{loops}")
        return (f"element {twice} of tensor {tensor!r}, which the "
                f"kernel produces for the schedule, is stored twice in one launch of grid "
                f"{grid}: by {who[0]}, and by {who[1]}. A produced chunk leaves once its "
                f"elements are stored, counted one store per element, so it would leave before "
                f"its last value is stored. Tile the tensor so that every element is stored once "
                f"per launch (a loop's step at least its tile, the programs' tiles disjoint), "
                f"or keep the collective after the kernel (fused=False)")
    return None


def _boxes(s: StoreSlice, grid: tuple, values: dict):
    """``(lo, hi, program, iterations)`` of every instance of store ``s`` whose box, clipped to
    ``s.shape``, is not empty: ``lo``/``hi`` ``[n, dims]``, the linear program index ``[n]``
    (x fastest) and the iteration numbers of the enclosing loops ``[n, loops]``."""
    starts, prog, iters = _evaluate(s.steps, s.start, grid, values, f"the store at {s.at}",
                                    s.tensor)
    n = len(prog)
    live = np.ones(n, bool)
    lo, hi = [], []
    for start, ext, size in zip(starts, s.extent, s.shape):
        lo.append(np.minimum(np.maximum(start, 0), size))
        hi.append(np.minimum(np.maximum(start + ext, 0), size))
        live &= hi[-1] > lo[-1]
    return (np.stack(lo, axis=1)[live], np.stack(hi, axis=1)[live], prog[live], iters[live])


def _evaluate(steps, outputs, grid: tuple, values: dict, what: str, tensor: str):
    """Run ``steps`` over every program of ``grid`` and every iteration of their ``for``
    steps (kept where their ``where`` steps hold): ``(the values of steps outputs, each [n],
    the linear program index [n] (x fastest), the iteration numbers of the for steps
    [n, loops])``.  A value is a 0-d array until it depends on the instance; a value is
    dropped after its last use."""
    last = {i: j for j, st in enumerate(steps) for i in st.args}
    last.update({i: len(steps) for i in outputs})
    last.update({j: len(steps) for j, st in enumerate(steps) if st.op is Op.FOR})
    prog = np.arange(grid[0] * grid[1] * grid[2], dtype=np.int64)
    vals: dict = {}
    with np.errstate(all="ignore"):
        for j, st in enumerate(steps):
            a = [vals[i] for i in st.args]
            if st.op is Op.FOR:
                lb, ub, step = a
                trip = np.broadcast_to(np.where(
                    step > 0, np.maximum(0, -((lb - ub) // np.maximum(step, 1))), 0), prog.shape)
                total = int(trip.sum())
                if total > MAX_INSTANCES:
                    raise LaunchError(f"{what} runs more than {MAX_INSTANCES} times in this "
                                      f"launch: too many to check that no element of "
                                      f"{tensor!r} is stored twice or that its tiles can run "
                                      f"in chunk order. Use larger tiles, or keep the "
                                      f"collective after the kernel (fused=False)")
                starts = np.cumsum(trip) - trip
                vals = {i: np.repeat(v, trip) if v.ndim else v for i, v in vals.items()}
                vals[j] = np.arange(total, dtype=np.int64) - np.repeat(starts, trip)
                prog = np.repeat(prog, trip)
            elif st.op is Op.WHERE:
                keep = np.broadcast_to(a[0] != 0, prog.shape)
                vals = {i: v[keep] if v.ndim else v for i, v in vals.items()}
                prog = prog[keep]
            else:
                vals[j] = _wrap(_compute(st, a, [steps[i].bits for i in st.args], prog, grid,
                                         values), st.bits)
            for i in st.args:
                if last[i] == j:
                    del vals[i]
    n = len(prog)
    iters = [np.broadcast_to(vals[j], (n,)) for j, st in enumerate(steps) if st.op is Op.FOR]
    return ([np.broadcast_to(vals[i], (n,)) for i in outputs], prog,
            np.stack(iters, axis=1) if iters else np.zeros((n, 0), np.int64))


def _wrap(x, bits: int):
    """``x`` as a signed integer of ``bits`` bits (two's complement, as the kernel computes)."""
    x = np.asarray(x, np.int64)
    half = 1 << (bits - 1)
    if bits >= 64 or (x.min(initial=0) >= -half and x.max(initial=0) < half):
        return x
    return ((x + half) & ((1 << bits) - 1)) - half


def _unsigned(x, bits: int):
    return x.view(np.uint64) if bits >= 64 else x & ((1 << bits) - 1)


def _nonzero(div):
    """``div`` where the divisor is not 0, 0 where it is (a branch the kernel does not take
    computes it too)."""
    return lambda a, b: np.where(b == 0, 0, div(a, np.where(b == 0, 1, b)))


def _trunc(a, b):
    """Division rounding toward zero (arith.divsi, C's ``/``)."""
    q = np.abs(a) // np.abs(b)
    return np.where((a < 0) != (b < 0), -q, q)


def _ceil(a, b):
    return a // b + (a % b != 0)


_CMP = (np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal)


def _compute(st: Step, a: list, bits: list, prog, grid: tuple, values: dict):
    op = st.op
    if op is Op.CONST:
        return np.int64(st.value)
    if op is Op.ARG:
        return np.int64(values[st.name])
    if op is Op.PID:
        return prog // (1, grid[0], grid[0] * grid[1])[st.value] % grid[st.value]
    if op is Op.NPROGS:
        return np.int64(grid[st.value])
    if op in _SIGNED:
        return _SIGNED[op](*a)
    if op in _UNSIGNED:
        u = [_unsigned(x, b) for x, b in zip(a, bits)]
        return _UNSIGNED[op](*u).astype(np.int64)
    if op is Op.EXTU:
        return _unsigned(a[0], bits[0]).astype(np.int64)
    if op in (Op.EXTS, Op.TRUNC):
        return a[0]
    if op is Op.CMP:
        if st.value < 6:
            return _CMP[st.value](a[0], a[1]).astype(np.int64)
        return _CMP[st.value - 4](*(_unsigned(x, b) for x, b in zip(a, bits))).astype(np.int64)
    assert op is Op.SELECT, op
    return np.where(a[0] != 0, a[1], a[2])


_SIGNED = {
    Op.ADD: np.add, Op.SUB: np.subtract, Op.MUL: np.multiply, Op.DIVS: _nonzero(_trunc),
    Op.REMS: _nonzero(lambda a, b: a - b * _trunc(a, b)), Op.CEILDIVS: _nonzero(_ceil),
    Op.FLOORDIVS: _nonzero(np.floor_divide), Op.MINS: np.minimum, Op.MAXS: np.maximum,
    Op.AND: np.bitwise_and, Op.OR: np.bitwise_or, Op.XOR: np.bitwise_xor,
    Op.SHL: lambda a, b: np.left_shift(a, b & 63), Op.SHRS: lambda a, b: np.right_shift(a, b & 63),
}
_UNSIGNED = {
    Op.DIVU: _nonzero(np.floor_divide), Op.REMU: _nonzero(np.remainder),
    Op.CEILDIVU: _nonzero(_ceil), Op.MINU: np.minimum, Op.MAXU: np.maximum,
    Op.SHRU: lambda a, b: np.right_shift(a, b & 63),
}


def _cover(lo, hi, size) -> tuple:
    """``(the first element two of the boxes [lo, hi) contain, the first element of a tensor of
    ``size`` none contains)`` (lexicographically; None where there is none), as tuples.  The
    boxes' edges cut each dim into intervals; on that grid of cells (at most the tensor's size)
    a difference array adds +-1 at each box's corners, and its prefix sums count the boxes
    covering each cell."""
    n, d = lo.shape
    cuts = [np.unique(np.concatenate([lo[:, k], hi[:, k], [0, size[k]]])) for k in range(d)]
    a = [np.searchsorted(cuts[k], lo[:, k]) for k in range(d)]
    b = [np.searchsorted(cuts[k], hi[:, k]) for k in range(d)]
    shape = tuple(len(c) for c in cuts)
    count = np.zeros(int(np.prod(shape)), np.int64)
    for corner in range(1 << d):
        idx = tuple(b[k] if corner >> k & 1 else a[k] for k in range(d))
        sign = -1 if bin(corner).count("1") % 2 else 1
        count += sign * np.bincount(np.ravel_multi_index(idx, shape), minlength=count.size)
    count = count.reshape(shape)
    for k in range(d):
        np.cumsum(count, axis=k, out=count)
    inner = count[tuple(slice(0, len(c) - 1) for c in cuts)]  # the cells inside the tensor

    def first(cells):
        return tuple(int(cuts[k][cells[0][k]]) for k in range(d)) if len(cells) else None
    return first(np.argwhere(count > 1)), first(np.argwhere(inner == 0))
