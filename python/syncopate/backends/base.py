"""What a backend is: :class:`Backend` (compile side: ABI parameters, flag type, passes, defaults,
option checks, launch grid) and :class:`Launcher` (host side, one per FusedKernel).

Imports nothing of the project but :mod:`syncopate.errors`: :mod:`syncopate.abi` (and through
it the passes) asks the registry for flag types and grids, so a backend module sits below the
ABI and reaches the runtime only through the objects the FusedKernel hands its launcher, and
through the runtime's leaf helpers (``runtime._cuda``, ``runtime.plan``). docs/backends.md says
how to add one.
"""

from __future__ import annotations

from ..errors import CompileError, LaunchError

#: where a reduce-scatter's ``sum`` chunks are added (``syncopate.compile(reduce=...)``)
REDUCE_MODES = ("comm", "epilogue")


class Launcher:
    """The host side of one backend for one FusedKernel: what happens around the kernel launch.

    The FusedKernel core (``runtime/fused.py``) owns configurations, flags, epochs, the peers
    table and the watchdog; it calls :meth:`configure` once per compiled configuration (after
    its flags exist) and :meth:`launch` once per launch, with the launch stream current when
    :attr:`needs_stream_context` is True (else the launch only enqueues on ``stream``, passed
    explicitly)."""

    #: launch under ``torch.cuda.device(...)`` / ``torch.cuda.stream(S)`` (else everything
    #: it enqueues names its stream; another device's launch enters the device anyway)
    needs_stream_context = False
    #: :meth:`launch` reads ``operand_tensors`` (else it gets None when no context is entered)
    needs_operands = False

    def __init__(self, fk):
        self.fk = fk

    def compiled_skips(self, chunks: frozenset[int]) -> frozenset[int]:
        """The withheld chunks (``FusedKernel.test_skip_chunks``) compiled into the kernel."""
        return frozenset()

    def configure(self, cfg) -> None:
        """Per-configuration host state, after ``cfg.flags`` and ``cfg.flag_addrs`` exist."""

    def launch(self, cfg, grid, args, stream, epoch: int | None, peers,
               operand_tensors: dict, direct: dict | None = None) -> None:
        """Enqueue one launch on ``stream``. ``epoch`` is the host's count of this launch, or
        None under CUDA-graph capture (only backends whose :meth:`capture_refusal` is None are
        launched then, and they must not use it). ``direct``: handed to :meth:`run_kernel`."""
        raise NotImplementedError

    def kernel_only(self, cfg) -> bool:
        """Whether :meth:`launch` of ``cfg`` enqueues nothing but :meth:`run_kernel`: a
        bound launch (``runtime/bound.py``) may then launch the kernel directly."""
        return False

    def bind(self, cfg, grid, dl, peers, operand_tensors, copy_after: bool | None):
        """For a launcher that enqueues more than the kernel: a bound call's whole launch
        (``runtime/bound.py``), ``run(stream, e, values, copy) -> bool``, or None (the default:
        the bound path takes only :meth:`kernel_only` launches)."""
        return None

    def consumed_program(self, cfg):
        """The CONSUMED wait of ``cfg`` as a compiled stream program, or None (the default:
        ``FusedKernel.consumed_wait`` launches the wait kernel itself)."""
        return None

    def capture_refusal(self, cfg) -> str | None:
        """Why a launch of ``cfg`` cannot be captured in a CUDA graph (None: it can). A
        backend may allow capture only if everything it enqueues reads the epoch from the
        device (docs/cuda-graphs.md); the default refuses."""
        return (f"the {type(self).__name__} host side has not been shown to keep host-computed "
                f"epochs out of what it enqueues")

    def run_kernel(self, cfg, grid, args, stream, direct: dict | None = None) -> None:
        """Launch the compiled fused kernel itself on ``stream``.

        ``direct``: the cache of :class:`~syncopate.runtime.direct_launch.DirectLaunch` es of
        the call's argument layout (``FusedKernel._prepare``; None: the layout's first launch,
        or a captured one). With it, the kernel is launched with one ``cuLaunchKernel`` whose
        parameters were packed at the layout's previous launch; every scalar argument is then
        the same by the fast path's key, only tensor addresses are read again."""
        ck = cfg.compiled.kernel
        if direct is not None:
            from ..runtime import direct_launch
            # the ABI's last parameter, the watchdog timeout, is read from the environment at
            # each launch and is not in the fast path's key
            key = (grid, args[-1])
            dl = direct.get(key)
            if dl is None:
                dl = direct_launch.build(ck, args, fixed_scalars=True, device=stream.device)
                direct[key] = dl or False
            if dl and dl(grid, args, stream.cuda_stream):
                return
        if getattr(ck.metadata, "global_scratch_size", 0):
            # device-side TMA descriptors live in Triton's global scratch (allocator per thread)
            from ..kernels import ensure_tma_allocator
            ensure_tma_allocator()
        ck[grid](*args, stream=stream.cuda_stream)


class Backend:
    """One way of moving a schedule's chunks. Subclasses set the class attributes and name their
    :class:`Launcher`; the registry (:mod:`syncopate.backends`) holds one instance of each."""

    name: str = ""
    #: dtype of ``syn_flags`` (docs/fused-abi.md): ``"int32"`` or ``"int64"``
    flag_dtype: str = "int32"
    #: programs inside the fused kernel move the data (``grid[0] + comm_programs`` programs)
    has_comm_programs: bool = False
    #: comm programs when the caller gives none (``compiler.DEFAULT_COMM_PROGRAMS``)
    default_comm_programs: int = 0
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
    #: schedule mode of the ops' templates per op (``ops/driver.py``)
    op_modes: dict = {"ag": "push", "rs": "push"}
    launcher_class: type = Launcher

    def __repr__(self) -> str:
        return f"<backend {self.name}>"

    # -- ABI --------------------------------------------------------------------------------

    @property
    def flag_type(self) -> str:
        """Triton signature type of ``syn_flags``."""
        return {"int32": "*i32", "int64": "*i64"}[self.flag_dtype]

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
            others = [b.name for b in _registered() if reduce in b.reduce_modes]
            raise CompileError(f"reduce={reduce!r} is implemented for backend="
                               f"{' or '.join(repr(o) for o in others)}; use reduce='comm' with "
                               f"backend={self.name!r}")
        if withhold_chunks and not self.compiles_withheld:
            raise CompileError(f"withhold_chunks is compiled into the comm programs of backends "
                               f"{', '.join(b.name for b in _registered() if b.compiles_withheld)}; "
                               f"the {self.name} backend withholds at run time "
                               f"(FusedKernel.test_skip_chunks)")
        if not self.has_comm_programs:
            return 0
        if comm_programs is None:
            return self.default_comm_programs
        if comm_programs < 1:
            raise CompileError(f"backend {self.name!r} needs comm_programs >= 1")
        return int(comm_programs)

    def compile_options(self, options: dict) -> dict:
        """Triton options this backend adds (e.g. ``extern_libs``); ``options`` is updated."""
        return options

    # -- runtime ----------------------------------------------------------------------------

    def check_communicator(self, comm) -> None:
        """Refuse (:class:`LaunchError`) a communicator this backend cannot run on."""
        if self.symm_backend is not None and comm.symm_backend != self.symm_backend:
            raise LaunchError(f"backend={self.name!r} needs a Communicator(symm_backend="
                              f"{self.symm_backend!r}) (its buffers must live in the "
                              f"{self.symm_backend.upper()} heap)")

    def launcher(self, fk) -> Launcher:
        return self.launcher_class(fk)


_REGISTRY: dict[str, Backend] = {}


def _registered() -> list[Backend]:
    return list(_REGISTRY.values())
