"""What a backend is: a :class:`BackendSpec`, frozen data that every layer reads instead of
comparing backend names (the ABI, the passes, the schedule's execution and cost models, the
emulator, the runtime, the ops). Its host side -- the launcher -- lives with the runtime
(:mod:`syncopate.runtime.launchers`), looked up by spec.

Imports nothing of the project but :mod:`syncopate.errors`, and nothing outside the standard
library: it sits at the bottom of the layers (docs/backends.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Callable, Mapping

from ..errors import CompileError, LaunchError

#: where a reduce-scatter's ``sum`` chunks are added (``syncopate.compile(reduce=...)``)
REDUCE_MODES = ("comm", "epilogue")

_FLAG_TYPES = {"int32": "*i32", "int64": "*i64"}


@dataclass(frozen=True, eq=False)
class BackendSpec:
    """One way of moving a schedule's chunks. Specs compare by identity (one per registered
    backend; the runtime keys its launchers by them)."""

    name: str
    #: dtype of ``syn_flags`` (docs/fused-abi.md): ``"int32"`` or ``"int64"``
    flag_dtype: str = "int32"
    #: programs inside the fused kernel move the data (``grid[0] + comm_programs`` programs)
    has_comm_programs: bool = False
    #: comm programs when the caller gives none
    default_comm_programs: int = 0
    #: the host moves the chunks on a side stream instead, in the plan's order
    #: (``schedule/ce_plan.py``), ``sum`` chunks into the owner's per-source slots, added after the
    #: kernel or by its epilogue; the emulator replays that protocol
    side_stream: bool = False
    #: a ``sum`` chunk runs on its destination whatever its mode (who executes a chunk:
    #: ``schedule/execution.py``); else on the side its mode names
    sum_on_destination: bool = False
    #: the compiled kernel publishes ``ENTRY[me]`` itself (``FusedABI.signals_entry``)
    signals_entry: bool = False
    #: ``reduce=`` values it compiles
    reduce_modes: tuple[str, ...] = ("comm",)
    #: ``withhold_chunks`` is compiled into the kernel (else withheld at run time, or refused)
    compiles_withheld: bool = False
    #: the ``Communicator(symm_backend=...)`` it needs, None for any
    symm_backend: str | None = None
    #: passes of the pipeline's tail before ``resolve-chunks`` (``syncopate_mlir.pipeline``)
    pre_resolve_passes: tuple[str, ...] = ()
    #: schedule mode of the ops' templates per collective (``ops/_gemm.py``)
    op_modes: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({"ag": "push", "rs": "push"}))
    #: the cost model's link (``schedule/cost.py``): fixed cost per chunk, and bandwidth --
    #: None: the comm programs' measured bandwidth curve, by their count
    link_alpha_s: float = 3e-6
    link_beta_bps: float | None = None
    #: Triton ``extern_libs`` it links: ``(name, path())``, the path looked up at compile time
    extern_libs: tuple[tuple[str, Callable[[], str]], ...] = ()

    def __post_init__(self):
        for wrong, need in (
                (not self.name, "a name"),
                (self.flag_dtype not in _FLAG_TYPES, f"a flag_dtype in {tuple(_FLAG_TYPES)}"),
                (self.has_comm_programs == self.side_stream, "exactly one of has_comm_programs "
                 "(comm programs in the kernel move the chunks) and side_stream (the host does)"),
                (not set(self.reduce_modes) <= set(REDUCE_MODES),
                 f"reduce_modes within {REDUCE_MODES}"),
                (self.link_beta_bps is None and not self.has_comm_programs,
                 "link_beta_bps (the cost model's bandwidth) without comm programs")):
            if wrong:
                raise ValueError(f"backend {self.name!r} needs {need}")
        object.__setattr__(self, "op_modes", MappingProxyType(dict(self.op_modes)))

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    # -- ABI --------------------------------------------------------------------------------

    @property
    def flag_type(self) -> str:
        """Triton signature type of ``syn_flags``."""
        return _FLAG_TYPES[self.flag_dtype]

    def launch_grid(self, grid: tuple[int, int, int], comm_programs: int) -> tuple[int, int, int]:
        """The fused kernel's launch grid for the user's 3-D grid: the comm programs come first
        along axis 0 (docs/fused-abi.md, "Grid")."""
        if not self.has_comm_programs:
            return tuple(grid)
        return (grid[0] + comm_programs, grid[1], grid[2])

    def chunk_writers(self, comm_programs: int) -> int:
        """How many writers each add 1 to a chunk's flag in one epoch."""
        return max(1, comm_programs) if self.has_comm_programs else 1

    # -- compile ----------------------------------------------------------------------------

    @property
    def lowering_pass(self) -> str:
        return f"lower-{self.name}"

    def pipeline_tail(self) -> list[str]:
        """The passes after the backend-independent ones (``syncopate_mlir.pipeline``)."""
        return [*self.pre_resolve_passes, "resolve-chunks", self.lowering_pass]

    def check_options(self, *, comm_programs=None, reduce: str = "comm", withhold_chunks=()) -> int:
        """Validate the compile options for this backend (:class:`CompileError` says what to
        change); returns the comm-program count to compile with."""
        if reduce not in REDUCE_MODES:
            raise CompileError(f"reduce={reduce!r}; choose 'comm' or 'epilogue'")
        if reduce not in self.reduce_modes:
            able = " or ".join(repr(b.name) for b in _REGISTRY.values() if reduce in b.reduce_modes)
            raise CompileError(f"reduce={reduce!r} is implemented for backend={able}; "
                               f"use reduce='comm' with backend={self.name!r}")
        if withhold_chunks and not self.compiles_withheld:
            able = ", ".join(b.name for b in _REGISTRY.values() if b.compiles_withheld)
            raise CompileError(f"withhold_chunks is compiled into the comm programs of backends "
                               f"{able}; the {self.name} backend withholds at run time "
                               f"(FusedKernel.test_skip_chunks)")
        if not self.has_comm_programs:
            return 0
        if comm_programs is None:
            return self.default_comm_programs
        if comm_programs < 1:
            raise CompileError(f"backend {self.name!r} needs comm_programs >= 1")
        return int(comm_programs)

    def compile_options(self, options: dict) -> dict:
        """Triton options this backend adds (its ``extern_libs``); ``options`` is updated."""
        if self.extern_libs:
            options.setdefault("extern_libs", {n: path() for n, path in self.extern_libs})
        return options

    # -- runtime ----------------------------------------------------------------------------

    def check_communicator(self, comm) -> None:
        """Refuse (:class:`LaunchError`) a communicator this backend cannot run on."""
        if self.symm_backend is not None and comm.symm_backend != self.symm_backend:
            raise LaunchError(f"backend={self.name!r} needs a Communicator(symm_backend="
                              f"{self.symm_backend!r}) (its buffers must live in the "
                              f"{self.symm_backend.upper()} heap)")


#: name -> spec, in registration order (``syncopate.backends`` fills it)
_REGISTRY: dict[str, BackendSpec] = {}
