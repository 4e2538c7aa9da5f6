"""``fuse``: a launchable fused kernel from a local Triton kernel and a chunk schedule.

``fk = fuse(kernel, schedule, operand='a_ptr', backend='sm', comm=comm)`` then
``fk[grid](*user_args)`` with exactly the user kernel's arguments (constexprs included, in
position, or as keywords). Each call:

1. checks the watchdog records of earlier launches (pinned memory: no synchronisation) and
   raises :class:`CommTimeout` if a spin timed out;
2. validates the arguments against the schedule (:class:`LaunchError` says what to change):
   world size, operand shape and dtype, operand in this communicator's symmetric memory and
   contiguous;
3. compiles once per configuration through :func:`syncopate.compiler.compile` -- key: argument
   types and Triton's specialisation (:mod:`.specialize`: divisibility, ``== 1``), constexpr
   values, schedule digest, backend, comm-program count and compile options;
4. advances the **epoch** of this configuration (1, 2, 3, ...; flags only grow, never
   reset) *on the device*: a one-thread kernel increments the configuration's epoch word on
   the launch stream, and the fused kernel loads the word at entry (ABI 3,
   docs/cuda-graphs.md), so a CUDA-graph replay runs with a fresh epoch. The host keeps the
   same count for its own protocol steps (``ce``) while it sees every launch. Epochs count
   launches per configuration, not per FusedKernel: each configuration has its own flags, and
   its chunk flags count ``writers`` per launch *of that flag array*, so a kernel launched with
   two specialisations in turn must not skip epochs on either;
5. hands the launch -- ``abi.grid(grid)`` programs with the ABI's extra arguments appended
   (``syn_flags, syn_peers, syn_table, syn_diag, syn_rank, syn_epoch, syn_timeout_ns``) -- to the
   backend's launcher (:mod:`.launchers`): ``sm`` signals ENTRY unless the kernel does
   and launches; ``nvshmem`` adds NVSHMEM's module init; ``ce`` runs the host side of the
   protocol on a side stream (``launchers/ce.py``).

Why there is no write-after-read race with epochs: docs/fused-abi.md, "The handshake".

The CONSUMED wait. By default the ``ce`` launcher enqueues it at the end of each launch on the
launch stream (safe for any caller); ``sm``/``nvshmem`` comm programs hold the launch open
instead. An op that stages into the symmetric buffer itself creates the FusedKernel with
``defer_consumed_wait=True`` and calls :meth:`FusedKernel.before_staging` before it writes the
buffer: the wait then overlaps the previous launch's tail with whatever the caller does in
between.

``SYNCOPATE=0`` in the environment makes :func:`fused_enabled` False; the ops then take their
unfused fallback (NCCL collective + the same local kernel). ``fuse`` itself always fuses.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from dataclasses import dataclass, field

import torch

from .. import abi, backends, chunk_table, compiler, dtypes, settings, tiling
from .. import trace as tr
from ..errors import CompileError, LaunchError
from ..schedule.ce_plan import CEPlan
from . import collectives as dist
from . import diag, fastlaunch, graphs, launchers, residency
from . import sync_kernels as sk
from .epochs import EpochCounter, kernel_timeout_ns
from .operands import operand_map, register_comm, tensor_spec, validate_operands
from .specialize import Specialization, bind_args, freeze, launch_key, param_names, specialize

__all__ = ["FusedKernel", "fuse", "fused_enabled"]

#: Fused compiles of one process run one at a time. With one process per GPU this never
#: waits; in loopback the W virtual ranks compile the same configuration at the same moment,
#: and serialising them lets ranks 1..W-1 hit the compile cache rank 0 just filled (one binary
#: serves every rank) instead of repeating the compile under the GIL -- and keeps the
#: compiler's shared xDSL context out of concurrent use.
_COMPILE_LOCK = threading.Lock()

#: watchdog kind names (what launchers pass to :meth:`FusedKernel.wait_flag`) -> record codes
_KIND_CODES = {name: code for code, name in abi.KIND_NAMES.items()}


def fused_enabled(env=None) -> bool:
    """False when ``SYNCOPATE=0`` (or ``false``/``off``/``no``): use the unfused fallbacks.
    Read on every eager op call that leaves ``fused`` to the environment (one lookup,
    :mod:`syncopate.settings`)."""
    return settings.SYNCOPATE.get(env) is not False


# ------------------------------------------------------------------------------------------
# The fused kernel
# ------------------------------------------------------------------------------------------

@dataclass
class _Config:
    """One compiled configuration and its device-side state."""

    compiled: object  # FusedCompile
    abi: abi.FusedABI
    flags: object = None  # torch tensor (symmetric)
    flag_addrs: list = field(default_factory=list)  # flag base address per rank
    peers_tables: dict = field(default_factory=dict)  # operand ptrs -> device int64 [NBUF, W]
    #: this rank's host copy plan (``ce``; set by its launcher's ``configure``)
    ce_plan: CEPlan | None = None
    slots: dict = field(default_factory=dict)  # tensor name -> symmetric [W, *shape] (reduce)
    consumed_pending: int = 0  # epoch whose CONSUMED wait is not yet enqueued (deferred mode)
    #: launches of this configuration: its flags count per launch of *this* flag array
    epochs: EpochCounter = field(default_factory=EpochCounter)
    #: the backend launcher's own state of this configuration (prepared views, events, ...)
    host: dict = field(default_factory=dict)
    #: launch grids checked co-resident for loopback (residency.py)
    resident: set = field(default_factory=set)
    #: the chunk table on this rank's device (int32; ``syn_table``), validated before upload
    table: object = None
    #: the trace buffer (int64; ``trace=True``: docs/tracing.md), its address the peers
    #: table's last row
    trace_buf: object = None
    #: the device epoch word (int32 ``[4]``, word 0; ``syn_epoch``) the kernel loads at entry,
    #: advanced on the device before each launch, and its host-pinned mirror (word 0) with the
    #: mirror's device address (docs/cuda-graphs.md)
    epoch_word: object = None
    epoch_mirror: object = None
    epoch_mirror_addr: int = 0
    #: launched under CUDA-graph capture: from then on the host count ``epochs`` misses the
    #: replays, and the epoch is read from the mirror
    captured: bool = False


class FusedKernel:
    """A fused multi-GPU kernel. Launch with ``fk[grid](*user_args, stream=None)``."""

    def __init__(self, kernel, schedule, *, operand, backend: str = "sm", comm_programs=None,
                 comm=None, defer_consumed_wait: bool = False, compile_fn=None, target=None,
                 **compile_options):
        be = backends.get(backend, LaunchError)
        if comm is None:
            raise LaunchError("fuse(...) needs comm=Communicator(...): the process group and the "
                              "symmetric memory the fused kernel communicates through")
        if int(schedule.world_size) != comm.world_size:
            raise LaunchError(f"the schedule is for {schedule.world_size} ranks but the process "
                              f"group has {comm.world_size}: build the schedule with "
                              f"world_size={comm.world_size}")
        be.check_communicator(comm)
        be.check_options(comm_programs=comm_programs, reduce=compile_options.get("reduce", "comm"))
        settings.EPOCH_ADVANCE.get()  # refuses the withdrawn memop advance
        self.kernel = kernel
        self.schedule = schedule
        self.backend = be.name  # also sets the launcher
        self.comm_programs = comm_programs
        self.comm = comm
        self.defer_consumed_wait = defer_consumed_wait
        self.compile_options = dict(compile_options)
        #: integer parameters compiled as constants of their values (see :func:`fuse`)
        self.constant_args = frozenset(self.compile_options.pop("constant_args", ()) or ())
        #: record a timeline (docs/tracing.md): ``trace=True``, or SYNCOPATE_TRACE=1 by default
        trace = self.compile_options.pop("trace", None)
        self.trace = bool(settings.TRACE.get() if trace is None else trace)
        if self.trace:
            self.compile_options["trace"] = True
        #: the kernel advances its own epoch word, no advance kernel before it
        #: (docs/cuda-graphs.md): ``"auto"`` by default (where the kernel allows it; the
        #: ABI says which), ``True`` requires it, ``False`` keeps the advance kernel;
        #: SYNCOPATE_SELF_ADVANCE=1 / 0 / auto sets the default
        self_advance = self.compile_options.pop("self_advance", None)
        self_advance = compiler.self_advance_mode(settings.SELF_ADVANCE.get()
                                                  if self_advance is None else self_advance)
        if self_advance != "off":
            self.compile_options["self_advance"] = True if self_advance == "on" else "auto"
        #: the compiler (same keywords as :func:`syncopate.compiler.compile`; tests pass fakes)
        self._compile_fn = compile_fn if compile_fn is not None else compiler.compile
        #: compile target, e.g. ("cuda", 90); default: the communicator's device
        self.target = target
        self.operands = operand_map(schedule, operand)
        self.schedule_key = schedule.content_hash()
        names = param_names(kernel)
        for p in sorted(self.constant_args - set(names)):
            raise LaunchError(f"constant_args names {p!r}, which is not a parameter of "
                              f"{getattr(kernel, '__name__', kernel)}; its parameters are "
                              f"{', '.join(names)}")
        for p in self.operands:
            if p not in names:
                raise LaunchError(f"operand {p!r} is not a parameter of {getattr(kernel, '__name__', kernel)}"
                                  f"; its parameters are {', '.join(names)}")
        #: operand parameter -> position in the kernel's arguments
        self._op_index = {p: names.index(p) for p in self.operands}
        self._op_pos = frozenset(self._op_index.values())
        self._configs: dict = {}
        #: launch fast path: call key -> (config, default-argument tail, peers table, grid)
        self._fast: dict = {}
        self._lock = threading.Lock()
        self._poisoned: str | None = None
        #: watchdog record of this kernel's launches (pinned, device-mapped)
        self.diag, self.diag_addr = diag.new_record()
        self._diag_state = diag.state_word(self.diag)
        #: set while a launch under CUDA-graph capture prepares: refuse what cannot be captured
        self._capture_now = False
        comm.register_fused(self)
        self._skip_chunks: frozenset[int] = frozenset()
        #: fault injection for tests: skip signalling ENTRY (ce/sm)
        self.test_skip_entry = False
        self.last_config = None

    @property
    def backend(self) -> str:
        """The backend's name; :attr:`launcher` is its host side for this kernel."""
        return self._backend.name

    @backend.setter
    def backend(self, name: str) -> None:
        self._backend = backends.get(name, LaunchError)
        self.launcher = launchers.launcher(self._backend, self)

    @property
    def test_skip_chunks(self) -> frozenset[int]:
        """Fault injection (tests; rehearsing a hang): chunks whose executing rank moves the data
        but never signals it, so the ranks reading them time out naming them. ``ce``: this
        rank's side stream skips their copy and flag (set it on the rank that should withhold).
        ``sm``/``nvshmem``: compiled into the comm programs (``compile(withhold_chunks=...)``),
        a new configuration with its own flags: set it on *every* rank (the flags are a
        collective allocation; only each chunk's executing rank leaves its signal out), then
        :meth:`warmup` so the compile does not skew the ranks' launches."""
        return self._skip_chunks

    @test_skip_chunks.setter
    def test_skip_chunks(self, chunks) -> None:
        self._skip_chunks = frozenset(int(c) for c in chunks)
        self._fast.clear()  # the fast path would keep the configuration compiled without them

    def __getitem__(self, grid):
        def runner(*args, stream=None, **kwargs):
            return self.launch(grid, args, kwargs, stream=stream)
        return runner

    @property
    def epoch(self) -> int:
        """The epoch of the last launch (0 before the first), in its configuration's count: the
        host's count while it saw every launch, the device's (:meth:`device_epoch`) once the
        configuration was captured into a CUDA graph."""
        cfg = self.last_config
        if cfg is None:
            return 0
        return self.device_epoch() if cfg.captured else cfg.epochs.value

    def device_epoch(self) -> int:
        """The epoch of the last advance that *ran* on the device for the last launched
        configuration, read from its pinned mirror without synchronising: how the host learns
        the epoch of graph replays it never counted (launches still queued are not included)."""
        cfg = self.last_config
        if cfg is None or cfg.epoch_mirror is None:
            return 0
        return int(cfg.epoch_mirror[0])

    # -- validation -----------------------------------------------------------------------

    def validate(self, values) -> dict:
        """Check operands against the schedule; returns ``{param: tensor}``."""
        return validate_operands(self.schedule, self.operands, param_names(self.kernel),
                                 self.comm, values)

    # -- compile --------------------------------------------------------------------------

    def _compile(self, spec: Specialization, options: dict):
        target = self.target
        if target is None:
            cap = torch.cuda.get_device_capability(self.comm.device)
            target = ("cuda", cap[0] * 10 + cap[1])
        operand = next(iter(self.operands)) if len(self.operands) == 1 else dict(self.operands)
        kw = dict(signature=spec.signature_dict(), constexprs=spec.constexpr_dict(),
                  attrs=spec.attrs_dict(), schedule=self.schedule, operand=operand,
                  backend=self.backend, comm_programs=self.comm_programs, target=target)
        if self._compiled_skips():
            kw["withhold_chunks"] = tuple(sorted(self._compiled_skips()))
        kw.update(options)
        return self._compile_fn(self.kernel, **kw)

    def _compiled_skips(self) -> frozenset[int]:
        """The withheld chunks that are compiled in (``Backend.compiles_withheld``: sm/nvshmem;
        ce skips at run time)."""
        return self._skip_chunks if self._backend.compiles_withheld else frozenset()

    def _config(self, spec: Specialization, options: dict) -> _Config:
        key = (spec, freeze(options), self.schedule_key, self.backend, self.comm_programs,
               self._compiled_skips())
        cfg = self._configs.get(key)
        if cfg is not None:
            return cfg
        if self._capture_now:
            raise graphs.unwarmed(self.kernel)
        with _COMPILE_LOCK:
            fc = self._compile(spec, options)
        a = fc.abi
        self._check_abi(a)
        # load the module now, before the flags' barrier: loading may need a context
        # synchronisation, which in loopback would wait for a peer's kernel that spins until
        # this rank launches (sync_kernels.preload says why)
        if self.comm.colocated > 1:
            fc.kernel._init_handles()
        cfg = _Config(compiled=fc, abi=a)
        # the table's upload (a host-to-device copy) also before the barrier: after it a peer
        # may already spin on this rank, and a copy ordered behind its kernel would never start
        cfg.table = self._upload_table(a)
        self._new_epoch_word(cfg)
        comm = self.comm
        if a.trace:  # also before the barrier (its zero fill is a kernel)
            # counter, capacity (SYNCOPATE_TRACE_EVENTS, default 262144 events, 8 MiB), then
            # 4 words per event (passes/insert_trace.py)
            n = int(settings.TRACE_EVENTS.get())
            cfg.trace_buf = torch.zeros(tr.HEADER + tr.WORDS * n, dtype=torch.int64,
                                        device=comm.device)
            cfg.trace_buf[1] = n
        cfg.flags = comm.new_flags(a.layout.words, a.flag_dtype)
        cfg.flag_addrs = comm.peer_ptrs(cfg.flags)
        self.launcher.configure(cfg)
        self._configs[key] = cfg
        return cfg

    def schedule_buffer(self, tensor: str, leading: tuple = ()):
        """A new symmetric buffer ``[*leading, *shape]`` of schedule tensor ``tensor``'s dtype
        (collective: every rank allocates it)."""
        spec = tensor_spec(self.schedule, tensor)
        return self.comm.empty(tuple(leading) + tuple(spec.shape), dtypes.torch_name(spec.dtype))

    def _check_abi(self, a: abi.FusedABI) -> None:
        if a.version != abi.ABI_VERSION:
            raise CompileError(f"compiler produced ABI version {a.version}, runtime speaks "
                               f"{abi.ABI_VERSION}: reinstall syncopate so both match")
        if a.backend != self.backend:
            raise CompileError(f"compiler produced a {a.backend!r} kernel for backend {self.backend!r}")
        if a.world_size != self.comm.world_size:
            raise CompileError(f"compiler produced a kernel for {a.world_size} ranks, group has "
                               f"{self.comm.world_size}")
        if a.num_chunks != self.schedule.num_chunks:
            raise CompileError(f"ABI says {a.num_chunks} chunks, the schedule has "
                               f"{self.schedule.num_chunks}")
        # The ABI's operand order defines the rows of syn_peers; follow the compiler (the
        # kernel's own operands are its parameters, checked at creation).
        missing = [p for p in a.operands or () if p not in param_names(self.kernel)]
        if missing:
            raise CompileError(f"ABI operands {missing} are not kernel parameters")

    def _new_epoch_word(self, cfg: _Config) -> None:
        """The configuration's zeroed device epoch word -- int32 ``[4]`` (word 0 is the epoch
        ``syn_epoch`` points at; 16 bytes keep the ABI's pointer alignment) -- and its
        host-pinned mirror with the mirror's device address (docs/cuda-graphs.md). Zeroed with
        the flags (before their barrier, like the table's upload): the first advance makes it
        1, the epoch every rank's first launch of this configuration uses."""
        cfg.epoch_word = torch.zeros(4, dtype=torch.int32, device=self.comm.device)
        cfg.epoch_mirror, cfg.epoch_mirror_addr = diag.new_pinned(4)
        if cfg.abi.self_advance:
            # the kernel's last program stores each epoch into the mirror itself: its address
            # in word[2] (low half) and word[3] (high half), passes/self_advance_epoch.py
            a = cfg.epoch_mirror_addr
            cfg.epoch_word[2] = diag.wrap32(a & 0xFFFFFFFF)
            cfg.epoch_word[3] = diag.wrap32(a >> 32)

    def _advance_epoch(self, cfg: _Config, stream) -> None:
        """Enqueue the device epoch advance of ``cfg`` on ``stream``, before its kernel."""
        sk.advance_epoch(cfg.epoch_word.data_ptr(), cfg.epoch_mirror_addr, stream=stream)

    def _advance_counted(self, cfg: _Config, stream, e) -> None:
        """The device advance of an eager launch whose host count is already ``e`` (None under
        capture). If enqueueing the advance fails, the host count is taken back: for ``ce``
        the host's epochs (flag values its side stream writes) must never run ahead of the
        device's (what the kernel waits for), or a wait would be satisfied by the previous
        launch's writes. A self-advancing kernel (``abi.self_advance``) needs nothing: it
        runs with the word + 1 and stores that when its last program ends."""
        if cfg.abi.self_advance:
            return
        try:
            self._advance_epoch(cfg, stream)
        except BaseException:
            if e is not None:
                cfg.epochs.value = e - 1
            raise

    def _upload_table(self, a: abi.FusedABI):
        """The chunk table of a configuration on the device, after checking that it is the
        schedule's (``chunk_table.validate``: a table that disagrees would make tiles wait for
        flags nobody raises -- refused with a LaunchError before any launch)."""
        if a.table or a.lowering == "table":
            writers = backends.get(a.backend).chunk_writers(a.comm_programs)
            chunk_table.validate(a.table, self.schedule, a.backend, writers, a.table_remaps)
        words = a.table or [0]  # an unrolled kernel never reads it
        return torch.tensor(words, dtype=torch.int32).to(self.comm.device)

    def _peers_table(self, cfg: _Config, operand_tensors: dict):
        order = list(cfg.abi.operands) if cfg.abi.operands else list(self.operands)
        # keyed by the registry generation too: a buffer released and reallocated at the same
        # local address may map to other peer addresses
        ptrs = (self.comm.generation,) + tuple(operand_tensors[p].data_ptr() for p in order)
        t = cfg.peers_tables.get(ptrs)
        if t is None and self._capture_now:
            raise graphs.new_buffers()
        if t is None:
            rows = [cfg.flag_addrs] + [self.comm.peer_ptrs(operand_tensors[p]) for p in order]
            for tname in cfg.abi.epilogue_slots:
                # the epilogue reduction reads this rank's slots of ``tname`` (row after the
                # operands, docs/fused-abi.md)
                if tname not in cfg.slots:
                    raise CompileError(f"the kernel reads slots of {tname!r} but the runtime has "
                                       f"none (backend {self.backend!r})")
                rows.append(self.comm.peer_ptrs(cfg.slots[tname]))
            if cfg.abi.trace:  # the last row: this rank's trace buffer (insert-trace)
                rows.append([cfg.trace_buf.data_ptr()] * self.comm.world_size)
            t = torch.tensor(rows, dtype=torch.int64).to(self.comm.device)
            if len(cfg.peers_tables) > 16:  # callers cycling through buffers: bound the cache
                cfg.peers_tables.clear()
            cfg.peers_tables[ptrs] = t
        return t

    # -- trace ----------------------------------------------------------------------------

    def _traced_config(self) -> _Config:
        """The last launched configuration, which must have a trace buffer, after this rank's
        current stream finished (its launches wrote the buffer)."""
        cfg = self.last_config
        if not self.trace or cfg is None or cfg.trace_buf is None:
            raise LaunchError("no trace: create the kernel with fuse(..., trace=True) (or "
                              "SYNCOPATE_TRACE=1) and launch it first")
        torch.cuda.current_stream(self.comm.device).synchronize()
        return cfg

    def trace_events(self, reset: bool = False):
        """``(events, dropped)`` this rank's traced launches recorded (of the last launched
        configuration; ``syncopate.trace.Event``). Synchronises this rank's current stream.
        ``reset`` empties the buffer afterwards."""
        cfg = self._traced_config()
        words = cfg.trace_buf.cpu().tolist()
        if reset:
            cfg.trace_buf[0] = 0
        return tr.decode(words, self.comm.rank)

    def gather_trace(self, path: str | None = None, reset: bool = False):
        """Every rank's events on every rank (a collective: call it on all ranks), written as
        a Chrome trace to ``path`` by rank 0 when given; returns ``(events, dropped)``."""
        cfg = self._traced_config()
        buf = cfg.trace_buf
        out = torch.empty((self.comm.world_size, buf.numel()), dtype=buf.dtype, device=buf.device)
        dist.all_gather_into_tensor(out, buf, group=self.comm.group)
        rows = out.cpu().tolist()
        if reset:
            buf[0] = 0
        events, dropped = [], 0
        for r, words in enumerate(rows):
            ev, d = tr.decode(words, r)
            events += ev
            dropped += d
        if path is not None and self.comm.rank == 0:
            a = cfg.abi
            tr.save_chrome(path, events, num_chunks=a.num_chunks, world_size=a.world_size,
                           comm_programs=a.comm_programs,
                           title=getattr(self.kernel, "__name__", "fused kernel"))
        return events, dropped

    # -- launch ---------------------------------------------------------------------------

    def check(self) -> None:
        """Raise :class:`CommTimeout` if a spin of an earlier launch of this kernel timed out
        (also marks the kernel unusable: its flags no longer agree across ranks)."""
        if not self._diag_state():  # the common case, without reading the whole record
            return
        rec = diag.read_record(lambda: [int(x) for x in self.diag.tolist()])
        if rec is None:
            return
        self.diag.zero_()
        layout = abi.FlagLayout(self.schedule.num_chunks, self.comm.world_size)
        err = diag.make_timeout(rec, settings.TIMEOUT_S.get(), layout,
                                f"backend {self.backend}; this FusedKernel is now unusable (its "
                                f"flags disagree across ranks): create a new one")
        self._poisoned = f"it timed out earlier: {err}"
        raise err

    def before_staging(self, stream=None) -> None:
        """Enqueue (on ``stream``, default current) the wait that makes it safe to overwrite this
        rank's symmetric operand: ``CONSUMED >= e * reads(me)`` for the last epoch ``e``
        (``ce`` backend, deferred mode). A no-op when nothing is pending. Under CUDA-graph
        capture a pending wait is refused (:class:`GraphCaptureError`) and stays pending: its
        target is a host epoch, and enqueued into a capture it would be lost to the eager
        stream (the next staging would overwrite a buffer peers may still read)."""
        pending = [c for c in self._configs.values() if c.consumed_pending]
        if not pending:  # the common case (sm, nvshmem; ce before its first launch)
            return
        if graphs.capturing():
            raise graphs.refused(self.backend, graphs.PENDING_CONSUMED)
        for cfg in pending:
            self.consumed_wait(cfg, cfg.consumed_pending, stream)
            cfg.consumed_pending = 0

    def wait_flag(self, cfg: _Config, index: int, target: int, kind: str, epoch: int, stream,
                  count: int = 1) -> None:
        """Enqueue on ``stream`` a spin until ``flags[index + i] >= target`` (``i < count``) on
        this rank's flags of ``cfg``, under this kernel's watchdog record (``kind``: ``"chunk"``,
        ``"entry"``, ``"consumed"`` or ``"produced"``, what a timeout names)."""
        args, cx = self.wait_spec(cfg, index, target, kind, epoch)
        sk.wait_flag(*args[:4], rank=args[4], kind=args[5], epoch=args[6], timeout_ns=args[7],
                     count=count, flag64=cx["FLAG64"], trap=cx["TRAP"], stream=stream)

    def wait_spec(self, cfg: _Config, index: int, target, kind: str, epoch):
        """``(arguments, constexprs)`` of the sync kernels' flag wait (``_wait_kernel``) that
        :meth:`wait_flag` enqueues. ``target`` and ``epoch``: ints, or
        :class:`~.stream_program.Epoch` values for a stream program (the ce launcher's)."""
        flag64 = cfg.abi.flag_dtype == "int64"
        timeout_ns, action = settings.watchdog()
        if not flag64:
            target = (diag.wrap32(target) if isinstance(target, int)
                      else dataclasses.replace(target, wrap32=True))
        return ((cfg.flags.data_ptr(), index, target, self.diag_addr, self.comm.rank,
                 _KIND_CODES[kind], epoch, timeout_ns), {"FLAG64": flag64, "TRAP": action == "trap"})

    def consumed_wait(self, cfg: _Config, epoch: int, stream) -> None:
        """Wait (on ``stream``) until every peer finished reading this rank's buffers in
        ``epoch``: ``CONSUMED >= epoch * reads(me)``."""
        reads = self.launcher.reads_of_me(cfg)
        if not reads:
            return
        prog = self.launcher.consumed_program(cfg)
        if prog is not None:  # one C call (the ce launcher's stream program)
            if stream is None:
                handle = fastlaunch.current_raw_stream(fastlaunch.current_device())
            else:
                handle = stream if isinstance(stream, int) else stream.cuda_stream
            prog.run(handle, epoch)
            return
        self.wait_flag(cfg, cfg.abi.layout.consumed, epoch * reads, "consumed", epoch, stream)

    def _launch_key(self, grid, args, kwargs):
        """A hashable key for the call, or None (no fast path): :func:`.specialize.launch_key`
        with this kernel's operand positions and the communicator's registry generation."""
        return launch_key(self._op_pos, self.comm.generation, grid, args, kwargs)

    def _refuse_if_poisoned(self) -> None:
        if self._poisoned:
            raise LaunchError(f"this FusedKernel cannot be reused: {self._poisoned}")

    def warmup(self, grid, *args, **kwargs) -> None:
        """Everything a launch with these arguments does before enqueueing: bind, validate,
        specialise, compile, allocate the configuration's flags and peers table. Collective
        (the flags are a symmetric allocation): call it on every rank. Use it to keep the first
        launch's compile out of a timed step, or to line the ranks up before a launch."""
        with self._lock:
            self._refuse_if_poisoned()
            cfg, _, _, g, _ = self._prepare(grid, args, kwargs)
            self._check_coresident(cfg, g)

    def _prepare(self, grid, args, kwargs):
        """``(config, argument values, peers table, grid, direct)`` of a call: from the fast
        path when this argument layout was seen before, else derived (and remembered).
        ``direct``: the layout's cache of direct launches (``Launcher.run_kernel``), None on
        the slow path."""
        fkey = self._launch_key(grid, args, kwargs)
        hit = self._fast.get(fkey) if fkey is not None else None
        if hit is not None:
            cfg, tail, peers, g, direct = hit
            values = list(args) + tail
            if g is None:
                g = cfg.abi.grid(tuple(grid(dict(zip(param_names(self.kernel), values)))))
            return cfg, values, peers, g, direct
        values, launch_opts = bind_args(self.kernel, args, kwargs or {})
        operand_tensors = self.validate(values)
        spec = specialize(self.kernel, values, self.constant_args)
        cfg = self._config(spec, {**self.compile_options, **launch_opts})
        named = dict(zip(param_names(self.kernel), values))
        abi.check_launch(named, cfg.abi.requirements, cfg.abi.upper_bounds)
        user_grid = tuple(grid(named)) if callable(grid) else tuple(grid)
        tiling.check_stores(cfg.abi.stores, user_grid, named)
        tiling.check_remaps(cfg.abi.remap_checks, user_grid, named)
        g = cfg.abi.grid(user_grid)
        peers = self._peers_table(cfg, operand_tensors)
        if fkey is not None:
            if len(self._fast) >= 64:  # callers cycling through buffers: bound it
                self._fast.clear()
            # the last item: this layout's direct launches (``direct_launch``), built at its
            # second launch -- the first goes through Triton's launcher, which checks pointers
            self._fast[fkey] = (cfg, values[len(args):], peers, None if callable(grid) else g, {})
        return cfg, values, peers, g, None

    def launch(self, grid, args, kwargs=None, *, stream=None):
        """Launch once (see the module docstring). Repeated calls with the same argument
        layout (same buffers, shapes, scalars and grid) take a fast path that skips binding,
        validation and specialisation: at M = 1024 those cost as much as the GEMM.

        Returns the launch's epoch when the host knows it (eager launches of a configuration
        never captured), else None. Under CUDA-graph capture (:mod:`.graphs`) the launch
        enqueues the same device work -- epoch advance, kernel -- and refuses with
        :class:`GraphCaptureError` what would be baked wrongly (docs/cuda-graphs.md)."""
        capturing = graphs.capturing(stream)
        with self._lock:
            self._refuse_if_poisoned()
            # this kernel's record (registered at creation) and every other one of the
            # communicator's: one pass, read from pinned memory
            self.comm.check()
            self._capture_now = capturing
            try:
                cfg, values, peers, g, direct = self._prepare(grid, args, kwargs)
            finally:
                self._capture_now = False
            self._check_coresident(cfg, g)
            comm = self.comm
            align = not capturing and self.meets_peers
            if align:
                self._meet_peers("start")
            L = self.launcher
            # the launch only enqueues on S, passed explicitly: no device/stream switch
            on_device = fastlaunch.current_device() == comm.device.index
            no_switch = not L.needs_stream_context and on_device
            S = current_stream(comm.device) if stream is None else stream
            if isinstance(S, int):
                S = torch.cuda.ExternalStream(S, device=comm.device)
            if capturing:
                graphs.refuse_capture(self.launcher, self.backend, cfg)
                cfg.captured = True
                direct = None  # a captured launch keeps Triton's launcher (its scratch is the graph's)
                graphs.note_launch(self)
                e = None
            else:
                if cfg.consumed_pending:
                    # The caller did not call before_staging(); enqueue it now (best effort).
                    self.consumed_wait(cfg, cfg.consumed_pending, S)
                    cfg.consumed_pending = 0
                e = cfg.epochs.next()
            self.last_config = cfg
            all_args = values + [cfg.flags, peers, cfg.table, self.diag_addr, comm.rank,
                                 cfg.epoch_word, kernel_timeout_ns()]
            try:
                if no_switch:
                    self._advance_counted(cfg, S, e)
                    operand_tensors = ({p: values[i] for p, i in self._op_index.items()}
                                       if L.needs_operands else None)
                    L.launch(cfg, g, all_args, S, e, peers, operand_tensors, direct=direct)
                else:
                    # the device switch only when needed: entering it costs a few us
                    with (contextlib.nullcontext() if on_device
                          else torch.cuda.device(comm.device)), torch.cuda.stream(S):
                        operand_tensors = {p: values[i] for p, i in self._op_index.items()}
                        self._advance_counted(cfg, S, e)
                        L.launch(cfg, g, all_args, S, e, peers, operand_tensors, direct=direct)
            except BaseException as exc:
                if e is not None and cfg.abi.self_advance:
                    self._poison_partial_launch(e, exc)
                raise
            if align:
                self._meet_peers("end")
            return None if cfg.captured else e

    @property
    def meets_peers(self) -> bool:
        """Whether eager launches meet the other virtual ranks (:meth:`_meet_peers`): loopback
        with ``SYNCOPATE_LOOPBACK_ALIGN``. The ops' bound launch paths step aside then."""
        return self.comm.colocated > 1 and settings.LOOPBACK_ALIGN.get()

    def _meet_peers(self, stage: str) -> None:
        """While :attr:`meets_peers`: the virtual ranks meet on the host at the
        ``"start"`` of every fused launch (compiled and loaded, nothing of it enqueued) and at
        its ``"end"`` (every rank's kernel enqueued). Why: the W ranks share one CUDA context,
        where a device or pinned allocation, a memset or a module load issued by one rank's
        thread may keep later work of every stream from running beside earlier work (CUDA's
        implicit synchronisation, docs/loopback.md). Issued while a peer's fused kernel spins
        on this rank, that would hold this rank's own kernel back until the watchdog. With
        both meetings nothing of the kind comes between the ranks' launches of one epoch. A
        rank at a different launch or collective raises :class:`LoopbackError` naming both."""
        self.comm.group.exchange(f"{stage} of fused launch {self.kernel.__name__}", None)

    def _poison_partial_launch(self, e: int, exc: BaseException) -> None:
        """An eager launch of a self-advancing configuration failed after the host counted it
        (epoch ``e``). Whether its kernel was enqueued is unknown -- the ce launcher enqueues
        it between its side stream's steps -- so the device's epoch word may stay at ``e - 1``
        while the host's count is ``e``: the host's flags (ce copies, entry signals) would then
        run ahead of the kernel's waits, which a previous launch's flags could satisfy. No
        rollback can be right in both cases, so the kernel refuses further launches, as after
        a timeout (its flags may disagree across ranks anyway: the peers launched)."""
        self._poisoned = (f"launch {e} failed part-way ({type(exc).__name__}: {exc}); its "
                          f"self-advancing epoch may disagree with the host's count: create "
                          f"a new FusedKernel")

    def _check_coresident(self, cfg: _Config, g) -> None:
        """Loopback: refuse a launch grid whose W copies would not all be resident on the shared
        GPU at once (:func:`.residency.check_config`)."""
        if self.comm.colocated > 1 and tuple(g) not in cfg.resident:
            residency.check_config(self, cfg, g)


#: (device index, raw stream handle) -> the ``torch.cuda.Stream`` torch returned for it
_STREAMS: dict = {}


def current_stream(device):
    """``torch.cuda.current_stream(device)``, looked up by the raw handle: building the Stream
    object (device index normalisation, ``Stream.__new__``) cost ~4 us of an eager launch on an
    H200 host, the raw handle ~0.2 us. The object is the one torch gave for that handle the
    first time. Without the raw accessor (a CPU build of torch), torch's call."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return torch.cuda.current_stream(device)
    key = (device.index, raw(device.index))
    s = _STREAMS.get(key)
    if s is None:
        if len(_STREAMS) >= 256:  # streams created and dropped in a loop: bound it
            _STREAMS.clear()
        s = _STREAMS[key] = torch.cuda.current_stream(device)
    return s


def fuse(kernel, schedule, *, operand, backend: str = "sm", comm_programs=None, comm=None,
         defer_consumed_wait: bool = False, **compile_options) -> FusedKernel:
    """A :class:`FusedKernel` for ``kernel`` (a ``@triton.jit`` function written for one GPU)
    and ``schedule`` (a :class:`syncopate.schedule.Schedule`). ``operand``: the kernel parameter
    that is the schedule's tensor (or a ``{parameter: tensor}`` dict). ``compile_options``:
    ``num_warps``, ``num_stages``, ... as for Triton, plus ``constant_args=('stride_kn', ...)``:
    integer parameters compiled as constants of their launch values (a new compile per value),
    for a kernel whose strides or sizes are runtime arguments but whose communicated accesses
    the analysis can bound only with them known (attention's K/V strides, its sequence length
    as the KV loop's trip count); ``trace=True`` (docs/tracing.md); ``self_advance``: the
    kernel advances its own epoch word and no advance kernel runs before a launch
    (docs/cuda-graphs.md; ``"auto"`` by default: wherever the kernel allows it; ``True``
    requires it, ``False`` keeps the advance kernel; ``SYNCOPATE_SELF_ADVANCE`` = 1 / 0).
    Compilation happens at the first launch of each configuration."""
    if comm is not None:
        register_comm(comm)
    return FusedKernel(kernel, schedule, operand=operand, backend=backend,
                       comm_programs=comm_programs, comm=comm,
                       defer_consumed_wait=defer_consumed_wait, **compile_options)
