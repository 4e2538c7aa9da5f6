"""The chunk table: the schedule as data in device memory, read by table-driven fused kernels.

Issue 10: the unrolled lowering emits code per chunk (an interval test and a spin per chunk a
tile may read, a copy loop per chunk on the comm programs), so a W = 8 all-gather split 4 (224
chunks) was a 6 MB kernel that compiled for over three minutes.  With ``lowering="table"``
the fused kernel's code is O(1) in the number of chunks: it loops over per-rank lists read from
this table (``syn_table``, docs/fused-abi.md "The chunk table").  One table serves every rank
(each rank indexes its own lists by ``syn_rank``), like one binary does.

The table is a flat array of int32 words, built from the verified schedule by
:func:`build` -- the same function for the compiler (which records it in the ABI), the
runtime (which rebuilds it from the schedule and refuses a table that differs,
:func:`validate`) and the emulator::

    header    [MAGIC, VERSION, WORDS, NUM_CHUNKS, WORLD_SIZE, NUM_TENSORS, CHECKSUM, CELLS]
    records   per chunk id, REC_WORDS words each:
              [TENSOR, SRC, DST, FLAGS, VOLUME, AFTER_START, AFTER_COUNT, NDIM, LO x4, HI x4]
    directory per rank, per list: [start, count] (start: an absolute word index)
              lists: RECV(t) for every tensor slot t, SEND(t) for every slot, EXEC, PUSHED
    reads     per rank: the CONSUMED target per epoch (pull reads of its buffers)
    lists     chunk ids; after-lists (the ``after`` chunks a transfer waits for on the source)
    cells     (header word CELLS is its first word) per tensor slot
              [START, NDIM, (DIM, GRAIN, COUNT) x MAX_CELL_DIMS] (START 0: no cell map; unused
              dim triples 0), then the cell maps: per rank, COUNT_0 * ... words (row-major
              over the NDIM cell dims), the word of cell (k_0, ...) the chunk of the slot
              delivered to the rank that covers [k_i * GRAIN_i, (k_i + 1) * GRAIN_i) along
              every DIM_i, or -1 (:func:`cell_map`)
    remaps    appended by the lowering: per ``syncopate.remap``, W rows of ``tiles`` words

* ``RECV(t)``: chunks of tensor ``t`` delivered to the rank, in ``(step, id)`` order (what a
  tile's wait scans);
* ``SEND(t)``: chunks of ``t`` that leave the rank or reduce into it (what a producer tile
  signals);
* ``EXEC``: the chunks the rank's comm programs run, in program order
  (:func:`syncopate.schedule.execution.program_order`);
* ``PUSHED``: chunks pushed to the rank by their source (comm program 0 awaits them).
* a cell map: a tile's wait inside a loop (the K/V blocks of ring and Ulysses attention) reads
  the one or two chunks its box can meet by index instead of scanning ``RECV(t)``, so the loop
  around it stays free of an inner loop (which stops Triton's software pipelining of its
  loads).  Only schedules whose chunks of ``t`` cut at most :data:`MAX_CELL_DIMS` dims on a
  common grid, with no two chunks delivered to one rank in one cell, get one (:func:`cell_map`
  says why not otherwise).

``FLAGS`` bit 0: a ``sum`` chunk; bit 1: its destination runs it (``side == "dst"``).  Tensor
slots follow the schedule's tensor order.  Words are int32: a value that does not fit is a
:class:`~syncopate.errors.CompileError` at build time (the unrolled lowering has no such limit).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .errors import CompileError, LaunchError
from .schedule.execution import program_order, side

MAGIC = 0x53594E54  # "SYNT"
#: 2: the cell maps (header word ``H_CELLS``); 3: cell maps over up to ``MAX_CELL_DIMS`` dims
#: (the Ulysses all-to-all's chunks cut heads and sequence), the directory entry per slot
#: grown from 4 to ``CELL_DIR_WORDS`` words -- a version 2 table is refused (:func:`validate`)
VERSION = 3
HEADER_WORDS = 8
H_MAGIC, H_VERSION, H_WORDS, H_CHUNKS, H_WORLD, H_TENSORS, H_CHECKSUM, H_CELLS = range(8)

#: the most dims a cell map indexes: 2 covers every template whose waits sit in a loop (ring
#: attention's K/V cut the sequence; the Ulysses all-to-all's cut heads and sequence); a
#: schedule cutting more gets none (its waits scan the RECV list)
MAX_CELL_DIMS = 2
#: words per tensor slot in the cell directory: [start, ndim, (dim, grain, count) x 2]
CELL_DIR_WORDS = 2 + 3 * MAX_CELL_DIMS
#: the longest cell map (cells per rank) the table holds; a schedule needing more gets none
#: (its waits scan the RECV list)
MAX_CELLS = 4096
#: a cell with no chunk delivered to the rank
NO_CHUNK = -1

MAX_DIMS = 4
REC_WORDS = 16
R_TENSOR, R_SRC, R_DST, R_FLAGS, R_VOLUME, R_AFTER_START, R_AFTER_COUNT, R_NDIM = range(8)
R_LO = 8
R_HI = 12
FLAG_SUM = 1
FLAG_ON_DST = 2

INT32_MAX = 2 ** 31 - 1

#: the ``lowering`` choices of ``syncopate.compile``
LOWERINGS = ("auto", "unrolled", "table")
#: ``auto`` lowers schedules of at least this many chunks through the table (fewer: unrolled,
#: the code the compiler emitted before the table existed; bench/results says why the line is
#: here)
TABLE_MIN_CHUNKS = 9


def choose_lowering(requested: str, num_chunks: int) -> str:
    """``"unrolled"`` or ``"table"`` for a ``requested`` lowering and a schedule's size."""
    if requested == "auto":
        return "table" if num_chunks >= TABLE_MIN_CHUNKS else "unrolled"
    if requested not in LOWERINGS:
        raise CompileError(f"lowering={requested!r}: choose one of {', '.join(LOWERINGS)}")
    return requested


@dataclass(frozen=True)
class TableLayout:
    """Word offsets of a table for ``num_chunks`` chunks, ``num_tensors`` tensor slots and
    ``world_size`` ranks (what the passes bake into the kernel as constants)."""

    num_chunks: int
    num_tensors: int
    world_size: int

    @property
    def lists_per_rank(self) -> int:
        return 2 * self.num_tensors + 2

    def record(self, chunk: int) -> int:
        return HEADER_WORDS + chunk * REC_WORDS

    @property
    def directory(self) -> int:
        return HEADER_WORDS + self.num_chunks * REC_WORDS

    def recv(self, slot: int) -> int:
        """List index (within a rank's directory) of RECV(slot)."""
        return slot

    def send(self, slot: int) -> int:
        return self.num_tensors + slot

    @property
    def exec(self) -> int:
        return 2 * self.num_tensors

    @property
    def pushed(self) -> int:
        return 2 * self.num_tensors + 1

    def entry(self, rank: int, lst: int) -> int:
        """Word index of ``[start, count]`` of list ``lst`` of ``rank``."""
        return self.directory + 2 * (rank * self.lists_per_rank + lst)

    @property
    def reads(self) -> int:
        return self.directory + 2 * self.world_size * self.lists_per_rank

    @property
    def pool(self) -> int:
        return self.reads + self.world_size


def layout_of(sched) -> TableLayout:
    return TableLayout(sched.num_chunks, len(sched.tensors), sched.world_size)


def tensor_slots(sched) -> dict[str, int]:
    """Schedule tensor name -> slot (the schedule's tensor order)."""
    return {name: i for i, name in enumerate(sched.tensors)}


def recv_list(sched, rank: int, tensor: str) -> list:
    return sched.chunks_to(rank, tensor)


def send_list(sched, rank: int, tensor: str) -> list:
    """Chunks of ``tensor`` a producer tile on ``rank`` signals: those leaving ``rank`` and the
    ``sum`` chunks reducing into it (the destination adds its own partial too)."""
    return [c for c in sched.chunks if c.tensor == tensor and
            (c.src == rank or (c.reduce == "sum" and c.dst == rank))]


def exec_list(sched, rank: int, backend: str) -> list:
    """The chunks ``rank`` runs, in program order (:func:`schedule.execution.program_order`)."""
    return program_order(sched, backend)[rank]


def pushed_list(sched, rank: int, backend: str) -> list:
    return [c for c in sched.ordered_chunks()
            if side(c, backend) == "src" and c.dst == rank]


def after_waits(sched, chunk) -> list[int]:
    """The ``after`` chunks a transfer of ``chunk`` waits for: those its source received
    (their flags live on the source)."""
    return [a for a in chunk.after if sched.chunk(a).dst == chunk.src]


def reads_per_src(sched, backend: str, writers: int) -> dict[int, int]:
    """Per rank, how many CONSUMED increments its buffers get per epoch (pull reads by peers'
    comm programs; each of ``writers`` comm programs adds one per chunk)."""
    out = {r: 0 for r in range(sched.world_size)}
    for c in sched.chunks:
        if side(c, backend) == "dst":
            out[c.src] += writers
    return out


@dataclass(frozen=True)
class ChunkKind:
    """What the comm programs' code for a chunk depends on besides its record's numbers: its
    tensor, which end runs it, and whether it adds.  The table lowering emits one body per kind
    the schedule has (a handful), where the unrolled lowering emits one per chunk."""

    tensor: str
    on_dst: bool
    sum: bool

    def flags(self) -> int:
        return (FLAG_SUM if self.sum else 0) | (FLAG_ON_DST if self.on_dst else 0)


def chunk_kinds(sched, backend: str) -> dict[ChunkKind, list]:
    """Kind -> the schedule's chunks of that kind, kinds in order of first appearance."""
    out: dict[ChunkKind, list] = {}
    for c in sched.ordered_chunks():
        k = ChunkKind(c.tensor, side(c, backend) == "dst", c.reduce == "sum")
        out.setdefault(k, []).append(c)
    return out


@dataclass(frozen=True)
class CellGrid:
    """A grid over a tensor's chunked dims ``dims``: along ``dims[i]`` cell ``k_i`` is
    ``[k_i * grains[i], (k_i + 1) * grains[i])``, ``counts[i]`` cells; a rank's row of a cell
    map lists its cells row-major (the last dim fastest)."""

    dims: tuple[int, ...]
    grains: tuple[int, ...]
    counts: tuple[int, ...]

    @property
    def cells(self) -> int:
        """Cells per rank (the length of a row)."""
        return math.prod(self.counts)

    @property
    def strides(self) -> tuple[int, ...]:
        """Row-major strides of the cell dims within a row."""
        return tuple(math.prod(self.counts[i + 1:]) for i in range(len(self.counts)))


@dataclass(frozen=True)
class CellMap:
    """The chunks of one tensor delivered to each rank, by cell of ``grid``: ``rows[r][k]`` is
    the chunk delivered to rank ``r`` covering cell ``k``, or :data:`NO_CHUNK`.

    What makes it sound (:func:`cell_map` builds one only then): every chunk spans the tensor
    along every dim not in ``grid.dims``, every chunk boundary along ``grid.dims[i]`` is a
    multiple of ``grid.grains[i]`` (so a chunk is exactly a box of whole cells), and no two
    chunks delivered to one rank share a cell.  A box meets a chunk iff it meets one of the
    chunk's cells (both are products of intervals), so the chunks delivered to ``r`` that meet
    a box are exactly the chunks ``rows[r][k]`` of the cells ``k`` the box touches -- the set
    the ``RECV`` scan finds."""

    grid: CellGrid
    rows: tuple[tuple[int, ...], ...]


def cell_map(sched, tensor: str) -> CellMap | None:
    """The cell map of ``tensor`` (see :class:`CellMap`), or None where the schedule has none:
    chunks cutting no dim or more than :data:`MAX_CELL_DIMS`, more than :data:`MAX_CELLS`
    cells per rank, or two chunks delivered to one rank overlapping (``sum`` chunks from several
    sources into one region)."""
    dims = tuple(sched.chunked_dims(tensor))
    if not 1 <= len(dims) <= MAX_CELL_DIMS:
        return None
    shape = sched.tensor(tensor).shape
    mine = [c for c in sched.chunks if c.tensor == tensor]
    grains = [math.gcd(shape[d], *(x for c in mine for x in (c.lo[d], c.hi[d]))) for d in dims]
    if min(grains) <= 0:
        return None
    grid = CellGrid(dims, tuple(grains), tuple(shape[d] // g for d, g in zip(dims, grains)))
    if grid.cells > MAX_CELLS:
        return None
    rows = []
    for r in range(sched.world_size):
        row = [NO_CHUNK] * grid.cells
        for c in recv_list(sched, r, tensor):
            spans = [range(c.lo[d] // g, c.hi[d] // g) for d, g in zip(dims, grains)]
            for ks in itertools.product(*spans):
                k = sum(k * s for k, s in zip(ks, grid.strides))
                if row[k] != NO_CHUNK:
                    return None
                row[k] = c.id
        rows.append(tuple(row))
    return CellMap(grid, tuple(rows))


def cells_of(words, slot: int) -> tuple[int, CellGrid] | None:
    """``(start, grid)`` of tensor slot ``slot``'s cell map in ``words``, or None when it has
    none (rank ``r``'s row starts at word ``start + r * grid.cells``)."""
    at = int(words[H_CELLS]) + CELL_DIR_WORDS * slot
    start, ndim = int(words[at]), int(words[at + 1])
    if not start:
        return None
    triples = [[int(words[at + 2 + 3 * i + j]) for i in range(ndim)] for j in range(3)]
    return start, CellGrid(*(tuple(t) for t in triples))


def _word(value: int, what: str) -> int:
    if not -2 ** 31 <= value <= INT32_MAX:
        raise CompileError(f"the chunk table holds int32 words; {what} = {value} does not fit: "
                           f"compile with lowering='unrolled'")
    return int(value)


def checksum(words: list[int]) -> int:
    """Sum of every word but the checksum word, mod 2**31."""
    return (sum(words) - words[H_CHECKSUM]) % (2 ** 31)


def build(sched, backend: str, writers: int) -> list[int]:
    """The table of ``sched`` for ``backend`` (``writers``: adds per chunk flag per epoch)."""
    lay = layout_of(sched)
    slots = tensor_slots(sched)
    words = [0] * lay.pool
    words[H_MAGIC], words[H_VERSION] = MAGIC, VERSION
    words[H_CHUNKS], words[H_WORLD], words[H_TENSORS] = lay.num_chunks, lay.world_size, len(slots)
    pool: list[int] = []

    def put_list(ids: list[int]) -> tuple[int, int]:
        start = lay.pool + len(pool)
        pool.extend(ids)
        return start, len(ids)

    order = program_order(sched, backend)
    for r in range(sched.world_size):
        lists = {}
        for name, s in slots.items():
            lists[lay.recv(s)] = [c.id for c in recv_list(sched, r, name)]
            lists[lay.send(s)] = [c.id for c in send_list(sched, r, name)]
        lists[lay.exec] = [c.id for c in order[r]]
        lists[lay.pushed] = [c.id for c in pushed_list(sched, r, backend)]
        for lst in range(lay.lists_per_rank):
            start, count = put_list(lists[lst])
            words[lay.entry(r, lst)] = start
            words[lay.entry(r, lst) + 1] = count
    for r, n in reads_per_src(sched, backend, writers).items():
        words[lay.reads + r] = _word(n, f"the CONSUMED target of rank {r}")
    for c in sched.chunks:
        if len(c.lo) > MAX_DIMS:
            raise CompileError(f"chunk {c.id}: the chunk table holds boxes of up to {MAX_DIMS} "
                               f"dims; tensor {c.tensor!r} has {len(c.lo)}: compile with "
                               f"lowering='unrolled'")
        rec = lay.record(c.id)
        after = after_waits(sched, c)
        start, count = put_list(after)
        flags = ChunkKind(c.tensor, side(c, backend) == "dst", c.reduce == "sum").flags()
        words[rec:rec + 8] = [slots[c.tensor], c.src, c.dst, flags,
                              _word(c.volume, f"the volume of chunk {c.id}"), start, count,
                              len(c.lo)]
        lo = list(c.lo) + [0] * (MAX_DIMS - len(c.lo))
        hi = list(c.hi) + [1] * (MAX_DIMS - len(c.hi))
        words[rec + R_LO:rec + R_LO + MAX_DIMS] = [_word(x, f"chunk {c.id} offset") for x in lo]
        words[rec + R_HI:rec + R_HI + MAX_DIMS] = [_word(x, f"chunk {c.id} stop") for x in hi]
    words.extend(pool)
    _put_cells(words, sched)
    return seal(words)


def _put_cells(words: list[int], sched) -> None:
    """Append the cell directory and the cell maps (:func:`cell_map`) to ``words``."""
    words[H_CELLS] = len(words)
    directory = len(words)
    words.extend([0] * (CELL_DIR_WORDS * len(sched.tensors)))
    for name, s in tensor_slots(sched).items():
        m = cell_map(sched, name)
        if m is None:
            continue
        entry = [len(words), len(m.grid.dims)]
        for d, grain, n in zip(m.grid.dims, m.grid.grains, m.grid.counts):
            entry += [d, _word(grain, f"the cell of {name!r}"), n]
        at = directory + CELL_DIR_WORDS * s
        words[at:at + len(entry)] = entry
        for row in m.rows:
            words.extend(row)


def seal(words: list[int]) -> list[int]:
    """Set the word count and the checksum (after appending sections)."""
    words = list(words)
    words[H_WORDS] = len(words)
    words[H_CHECKSUM] = 0
    words[H_CHECKSUM] = checksum(words)
    return words


def append_remap(words: list[int], table: list[int]) -> tuple[list[int], int]:
    """``words`` with a remap section appended (``W`` rows of ``tiles`` words); returns the new
    table and the section's start."""
    start = len(words)
    return seal(list(words) + [int(x) for x in table]), start


@dataclass(frozen=True)
class Record:
    """One chunk as the table says it (what the fused kernel and the emulator read)."""

    id: int
    tensor: int
    src: int
    dst: int
    sum: bool
    on_dst: bool
    volume: int
    after: tuple[int, ...]
    lo: tuple[int, ...]
    hi: tuple[int, ...]


def record(words, chunk: int) -> Record:
    """Chunk ``chunk``'s record in ``words`` (a list, or the emulator's int32 array as is)."""
    def w(i: int) -> int:
        return int(words[i])

    lay = TableLayout(w(H_CHUNKS), w(H_TENSORS), w(H_WORLD))
    r = lay.record(chunk)
    nd = w(r + R_NDIM)
    s, n = w(r + R_AFTER_START), w(r + R_AFTER_COUNT)
    return Record(chunk, w(r + R_TENSOR), w(r + R_SRC), w(r + R_DST),
                  bool(w(r + R_FLAGS) & FLAG_SUM), bool(w(r + R_FLAGS) & FLAG_ON_DST),
                  w(r + R_VOLUME), tuple(w(i) for i in range(s, s + n)),
                  tuple(w(r + R_LO + d) for d in range(nd)),
                  tuple(w(r + R_HI + d) for d in range(nd)))


def rank_list(words, rank: int, lst: int) -> list[int]:
    """The chunk ids of list ``lst`` (a :class:`TableLayout` list index) of ``rank``."""
    lay = TableLayout(words[H_CHUNKS], words[H_TENSORS], words[H_WORLD])
    e = lay.entry(rank, lst)
    start, count = words[e], words[e + 1]
    return list(words[start:start + count])


def validate(words, sched, backend: str, writers: int, remaps=()) -> None:
    """Raise :class:`LaunchError` unless ``words`` is the table of ``sched`` (plus the remap
    sections ``remaps``: ``(start, tiles)`` pairs, each row a permutation of its tiles).

    Run by the runtime before a table's first upload: a table that disagrees with the schedule
    (a corrupted ABI, a kernel compiled for another schedule) would make tiles wait for flags
    nobody raises; refusing it is a typed error instead of a watchdog timeout."""
    words = [int(x) for x in words]
    if len(words) < HEADER_WORDS or words[H_MAGIC] != MAGIC:
        raise LaunchError("the chunk table has no header (magic word missing): the kernel's "
                          "ABI is corrupt; recompile it")
    if words[H_VERSION] != VERSION:
        raise LaunchError(f"chunk table version {words[H_VERSION]}, the runtime reads "
                          f"{VERSION}: reinstall syncopate so compiler and runtime match")
    if words[H_WORDS] != len(words) or checksum(words) != words[H_CHECKSUM]:
        raise LaunchError("the chunk table's length or checksum is wrong: the kernel's ABI is "
                          "corrupt; recompile it")
    want = build(sched, backend, writers)
    n = len(want)
    got = words[:n]
    got[H_WORDS] = want[H_WORDS]
    got[H_CHECKSUM] = want[H_CHECKSUM]
    if got != want:
        bad = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if bad is None:  # every word there is right: the table stops short
            raise LaunchError(f"the chunk table has {len(words)} words, the schedule's takes "
                              f"{n}: the table is truncated (the kernel's ABI is corrupt); "
                              f"recompile it")
        raise LaunchError(f"the chunk table disagrees with the schedule at word {bad} "
                          f"({got[bad]} != {want[bad]}): the kernel was compiled for another "
                          f"schedule or its ABI is corrupt; recompile it")
    end = n
    W = sched.world_size
    for start, tiles in sorted(remaps):
        if start != end or start + W * tiles > len(words):
            raise LaunchError(f"remap section at word {start} ({W} x {tiles}) does not follow "
                              f"the table's layout: the ABI is corrupt; recompile it")
        for r in range(W):
            row = words[start + r * tiles:start + (r + 1) * tiles]
            if sorted(row) != list(range(tiles)):
                raise LaunchError(f"remap section at word {start}: row {r} is not a "
                                  f"permutation of 0..{tiles - 1}; recompile the kernel")
        end = start + W * tiles
    if end != len(words):
        raise LaunchError(f"the chunk table has {len(words) - end} words past its last "
                          f"section: the ABI is corrupt; recompile it")
