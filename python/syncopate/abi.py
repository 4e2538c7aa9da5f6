"""The fused-kernel ABI shared by the compiler and the runtime (docs/fused-abi.md says why).

Kept free of Triton and torch imports so both the passes and the runtime can use it. What
differs per backend (flag type, launch grid) the backend objects say (:mod:`syncopate.backends`,
which imports nothing of the project but errors).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields
from numbers import Integral

from . import backends
from .errors import LaunchRequirementError
from .tiling import RemapSlice, StoreSlice

#: 3: ``syn_epoch`` is a pointer to the configuration's device epoch word (docs/cuda-graphs.md)
ABI_VERSION = 3

#: Parameters appended to the user's kernel, in order: (name, Triton signature type).
#: ``syn_flags`` is ``*i64`` for the nvshmem backend (NVSHMEM signals are 64-bit).
EXTRA_PARAMS = (
    ("syn_flags", "*i32"),
    ("syn_peers", "*i64"),
    ("syn_table", "*i32"),
    ("syn_diag", "*i32"),
    ("syn_rank", "i32"),
    ("syn_epoch", "*i32"),
    ("syn_timeout_ns", "i64"),
)
EXTRA_PARAM_NAMES = tuple(n for n, _ in EXTRA_PARAMS)

#: Inside the pass pipeline the epoch is the i32 value the waits and signals compute with;
#: the last pass (``load-epoch``) makes the parameter the ``*i32`` above and loads it once at
#: kernel entry (docs/cuda-graphs.md says why: a captured scalar would be replayed stale).
PIPELINE_TYPES = {"syn_epoch": "i32"}

# Watchdog record words.
DIAG_WORDS = 16
DIAG_STATE, DIAG_RANK, DIAG_FLAG, DIAG_VALUE, DIAG_EXPECTED, DIAG_KIND, DIAG_PROGRAM, DIAG_EPOCH = range(8)
KIND_CHUNK, KIND_ENTRY, KIND_CONSUMED, KIND_PRODUCED = range(4)
KIND_NAMES = {KIND_CHUNK: "chunk", KIND_ENTRY: "entry", KIND_CONSUMED: "consumed",
              KIND_PRODUCED: "produced"}


def extra_params(backend: str) -> tuple[tuple[str, str], ...]:
    """The appended parameters with the flag type of ``backend``."""
    flag_ty = backends.get(backend, ValueError).flag_type
    return ((EXTRA_PARAMS[0][0], flag_ty),) + EXTRA_PARAMS[1:]


def pipeline_params(backend: str) -> tuple[tuple[str, str], ...]:
    """The appended parameters as the passes see them before ``load-epoch``."""
    return tuple((n, PIPELINE_TYPES.get(n, t)) for n, t in extra_params(backend))


@dataclass(frozen=True)
class FlagLayout:
    """Word offsets in a rank's flag array for ``num_chunks`` chunks and ``world_size`` ranks."""

    num_chunks: int
    world_size: int

    def chunk(self, c: int) -> int:
        return c

    def entry(self, rank: int) -> int:
        return self.num_chunks + rank

    @property
    def consumed(self) -> int:
        return self.num_chunks + self.world_size

    def produced(self, c: int) -> int:
        return self.num_chunks + self.world_size + 1 + c

    @property
    def words(self) -> int:
        n = 2 * self.num_chunks + self.world_size + 1
        return (n + 15) // 16 * 16


@dataclass(frozen=True)
class Violation:
    """One compiled-in fact a launch breaks: ``param`` (an argument, or ``grid[axis]``) must be
    ``relation`` (``"=="`` or ``"<="``) ``required`` but is ``given``; ``why`` says what the
    kernel would do wrong, ``fix`` what to change."""

    param: str
    relation: str
    required: int
    given: object
    why: str
    fix: str

    def __str__(self) -> str:
        return (f"{self.param}={self.given!r} (the kernel was compiled for "
                f"{self.param} {self.relation} {self.required!r}: {self.why})")


_LAYOUT_FIX = ("Pass operands with the layout the schedule describes (e.g. a contiguous "
               "row-major buffer of the schedule tensor's shape), or give the schedule the "
               "shape of the tensor the kernel indexes")


def launch_violations(values, requirements, upper_bounds, grid=None,
                      grid_axes=None) -> list[Violation]:
    """Every fact the compiler baked into a fused kernel that a launch breaks -- the one check
    of them, which the runtime (before every launch), the emulator (before emulating one) and
    the CLI (at compile time, from --shape) all call, so they refuse the same launches.

    ``values``: kernel parameter -> value (any subset; a parameter not given is not checked);
    ``requirements``: parameter -> the value the analysis derived (e.g. a stride matched to a
    dim); ``upper_bounds``: parameter -> the largest value a mask ``index < param`` may take
    without reading past a communicated tensor's dim; ``grid`` (with ``grid_axes``, the
    program-id axes the kernel reads; None: unknown): a grid larger than 1 along an axis the
    kernel never reads would run every tile, and signal its chunks, more than once."""
    bad = []
    for name, want in requirements.items():
        if name in values and values[name] != want:
            bad.append(Violation(name, "==", want, values[name],
                                 "its analysis matched this argument to the schedule "
                                 "tensor's layout", _LAYOUT_FIX))
    for name, limit in upper_bounds.items():
        got = values.get(name)
        if isinstance(got, Integral) and not isinstance(got, bool) and got > limit:
            bad.append(Violation(name, "<=", limit, got,
                                 f"a mask `index < {name}` bounds an access of a communicated "
                                 f"tensor whose dim holds {limit}: the kernel would read "
                                 f"past it", _LAYOUT_FIX))
    if grid is not None and grid_axes is not None:
        g = tuple(grid) + (1,) * (3 - len(grid))
        for axis in (1, 2):
            if g[axis] > 1 and axis not in grid_axes:
                bad.append(Violation(f"grid[{axis}]", "==", 1, g[axis],
                                     f"the kernel never reads tl.program_id({axis}): every "
                                     f"tile would run {g[axis]} times and signal its chunks "
                                     f"as often", "Launch a grid of 1 along that axis"))
    return bad


def check_launch(values, requirements, upper_bounds, grid=None, grid_axes=None,
                 where: str = "") -> None:
    """Raise :class:`~syncopate.errors.LaunchRequirementError` listing
    :func:`launch_violations` if there are any (``where`` prefixes the message, e.g. the
    emulated rank)."""
    bad = launch_violations(values, requirements, upper_bounds, grid, grid_axes)
    if bad:
        raise LaunchRequirementError(bad, where)


@dataclass
class FusedABI:
    """What the runtime needs to know to launch a fused kernel (returned by the compiler)."""

    backend: str
    world_size: int
    num_chunks: int
    comm_programs: int
    mode: str  # "push" | "pull" | "none" (ce backend: host copies)
    operands: list[str] = field(default_factory=list)  # kernel parameter names, NBUF-1 of them
    chunk_count: dict[int, int] = field(default_factory=dict)  # writers per chunk flag
    produced_count: dict[int, int] = field(default_factory=dict)  # producer tiles per chunk
    reads_per_src: dict[int, int] = field(default_factory=dict)  # CONSUMED target per epoch, by rank
    user_params: list[str] = field(default_factory=list)
    #: launch-time requirements the analysis derived, e.g. {"stride_am": 4096}: the runtime
    #: and the emulator check them before launch (:func:`check_launch`: a stride matched to
    #: the wrong dim is a LaunchRequirementError, never a silent miscompile)
    requirements: dict[str, int] = field(default_factory=dict)
    #: kernel parameter -> schedule tensor it holds (ordered like ``operands``)
    tensors: dict[str, str] = field(default_factory=dict)
    version: int = ABI_VERSION
    #: (added by the runtime, docs/fused-abi.md "Runtime notes") True when the kernel itself
    #: writes ENTRY[me] = epoch on every rank; False (default): the runtime launches its
    #: ``signal_entry`` on the launch stream right before the kernel. A second store of the
    #: same epoch is harmless, so False is always safe.
    signals_entry: bool = False
    #: schedule tensors whose per-source slot buffers ``[W, *shape]`` the kernel reads (the
    #: ``epilogue`` reduction): their rows follow the operands' rows in ``syn_peers``, each
    #: holding every rank's slot base address
    epilogue_slots: list[str] = field(default_factory=list)
    #: launch-time upper bounds the analysis derived from masks, e.g. {"n_cols": 4096}: the
    #: access reads indices < n_cols of a dim of 4096, so a larger n_cols would read past it
    upper_bounds: dict[str, int] = field(default_factory=dict)
    #: program-id axes the kernel reads; None = unknown (an ABI written before this field).
    #: A grid larger than 1 along another axis would run every tile more than once.
    grid_axes: list[int] | None = None
    #: the boxes of the stores into produced tensors, as slices the runtime evaluates per
    #: launch (:func:`syncopate.tiling.check_stores`: no element is stored twice)
    stores: list[StoreSlice] = field(default_factory=list)
    #: the tile coordinates tile-remap renumbered, as slices the runtime evaluates per launch
    #: (:func:`syncopate.tiling.check_remaps`: the remap renumbers the launch's tiles)
    remap_checks: list[RemapSlice] = field(default_factory=list)
    #: the chunk table (:mod:`syncopate.chunk_table`) the kernel reads through ``syn_table``:
    #: int32 words, built from the schedule; the runtime validates it before its first upload
    table: list[int] = field(default_factory=list)
    #: ``(start, tiles)`` of each remap section appended to the table by the lowering
    table_remaps: list[tuple[int, int]] = field(default_factory=list)
    #: how the chunk-level code was lowered: "unrolled" (code per chunk) | "table" (loops over
    #: the chunk table, code size independent of the chunk count)
    lowering: str = "unrolled"
    #: the kernel records events into a trace buffer whose address is the peers table's last
    #: row (``insert-trace``, docs/tracing.md); the runtime allocates it and appends the row
    trace: bool = False
    #: the kernel advances its own epoch word (``self-advance-epoch``): the word holds the last
    #: finished launch's epoch, a launch runs with ``word[0] + 1``, and the runtime enqueues no
    #: advance (docs/cuda-graphs.md)
    self_advance: bool = False

    @property
    def layout(self) -> FlagLayout:
        return FlagLayout(self.num_chunks, self.world_size)

    @property
    def flag_dtype(self) -> str:
        return backends.get(self.backend).flag_dtype

    def grid(self, grid: tuple[int, ...]) -> tuple[int, int, int]:
        """The launch grid of the fused kernel for the user's grid."""
        g = tuple(grid) + (1,) * (3 - len(grid))
        check_launch({}, {}, {}, g, self.grid_axes)
        return backends.get(self.backend).launch_grid(g, self.comm_programs)

    def to_json(self) -> dict:
        """The fields as JSON data, ``version`` first."""
        out = {"version": self.version}
        for f in fields(self):
            out.setdefault(f.name, _json(getattr(self, f.name)))
        return out

    @classmethod
    def from_json(cls, d: dict) -> "FusedABI":
        """The ABI :meth:`to_json` wrote; a field an older ABI lacks takes its default."""
        kw = {f.name: copy.deepcopy(d[f.name]) for f in fields(cls) if f.name in d}
        kw.update({k: {int(i): v for i, v in d[k].items()} for k in _CHUNK_MAPS},
                  stores=[StoreSlice(**s) for s in d.get("stores", [])],
                  remap_checks=[RemapSlice(**s) for s in d.get("remap_checks", [])],
                  table_remaps=[tuple(x) for x in d.get("table_remaps", [])])
        return cls(**kw)


#: the ABI's maps keyed by a chunk or a rank (JSON keys are strings)
_CHUNK_MAPS = ("chunk_count", "produced_count", "reads_per_src")


def _json(v):
    """``v`` as JSON data: a map's keys as strings, pairs as lists, slices as dicts."""
    if isinstance(v, dict):
        return {str(k): x for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json(x) for x in v]
    return v.to_json() if isinstance(v, (StoreSlice, RemapSlice)) else v
