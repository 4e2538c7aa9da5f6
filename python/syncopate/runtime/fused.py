"""``fuse``: a launchable fused kernel from a local Triton kernel and a chunk schedule.

``fk = fuse(kernel, schedule, operand='a_ptr', backend='sm', comm=comm)`` then
``fk[grid](*user_args)`` with exactly the user kernel's arguments (constexprs included, in
position, or as keywords). Each call:

1. checks the watchdog records of earlier launches (pinned memory: no synchronisation) and
   raises :class:`CommTimeout` if a spin timed out;
2. validates the arguments against the schedule (:class:`LaunchError` says what to change):
   world size, operand shape and dtype, operand in this communicator's symmetric memory and
   contiguous;
3. compiles once per configuration through ``syncopate.compile`` -- key: argument types and
   Triton's specialisation (divisibility, ``== 1``), constexpr values, schedule digest,
   backend, comm-program count and compile options;
4. takes the next **epoch** of this configuration (1, 2, 3, ...; flags only grow, never
   reset). Epochs count launches per configuration, not per FusedKernel: each configuration
   has its own flags, and its chunk flags count ``writers`` per launch *of that flag array*,
   so a kernel launched with two specialisations in turn must not skip epochs on either;
5. launches ``abi.grid(grid)`` programs with the ABI's extra arguments appended
   (``syn_flags, syn_peers, syn_diag, syn_rank, syn_epoch, syn_timeout_ns``).

Backends:

* ``sm`` / ``nvshmem``: the runtime signals ``ENTRY[me] = e`` on every rank (unless the compiler
  says its kernel does, ``abi.signals_entry``) on the launch stream, then launches the kernel;
  comm programs inside it do the rest, including holding the launch open until CONSUMED
  reached ``e * reads(me)`` (pull). For ``nvshmem`` the kernel's CUmodule is initialised for
  NVSHMEM once after it is loaded.
* ``ce``: the host side of the protocol runs on a side stream (see :mod:`.plan` for why the
  ENTRY wait comes before the kernel is released)::

      main:  [staged]──────────────(wait entered)[ fused kernel ]──(wait side)[reduce][CONSUMED wait]
      side:   (wait staged)[signal ENTRY][wait ENTRY*](entered)[copy c0][flag c0][copy c1]...[CONSUMED += n]

  Each chunk: peer -> local copy of the region (copy engine), then
  ``stream_write_value32(flags, chunk, e)`` (the driver fences before the write, so the data is
  visible first); pull reads add to the source's CONSUMED after the copies.

Why there is no write-after-read race with epochs (docs/fused-abi.md): a peer writes into this
rank's buffer in epoch ``e`` only after it saw ``ENTRY[me] >= e``, which this rank writes after
its launch ``e - 1`` completed (stream order), so every read of that buffer in ``e - 1`` is
done. A peer reads this rank's buffer in epoch ``e`` only after ``ENTRY[me] >= e`` (the data is
staged), and this rank stages ``e + 1`` only after CONSUMED reached ``e * reads(me)``.

The CONSUMED wait. By default it is enqueued at the end of each launch on the launch stream
(safe for any caller). An op that stages into the symmetric buffer itself creates the
FusedKernel with ``defer_consumed_wait=True`` and calls :meth:`FusedKernel.before_staging`
before it writes the buffer: the wait then overlaps the previous launch's tail with whatever the
caller does in between.

``SYNCOPATE=0`` in the environment makes :func:`fused_enabled` False; the ops then take their
unfused fallback (NCCL collective + the same local kernel). ``fuse`` itself always fuses.
"""

from __future__ import annotations

import inspect
import os
import threading
import warnings
from dataclasses import dataclass, field

from .. import abi
from ..errors import CompileError, LaunchError
from . import _cuda, diag
from . import plan as planmod

FLAG_LIMIT = 2**31 - 1

#: Fused compiles of one process run one at a time. With one process per GPU this never
#: waits; in loopback the W virtual ranks compile the same configuration at the same moment,
#: and serialising them lets ranks 1..W-1 hit the compile cache rank 0 just filled (one binary
#: serves every rank) instead of repeating the compile under the GIL -- and keeps the
#: compiler's shared xDSL context out of concurrent use.
_COMPILE_LOCK = threading.Lock()


def fused_enabled(env=None) -> bool:
    """False when ``SYNCOPATE=0`` (or ``false``/``off``/``no``): use the unfused fallbacks."""
    env = os.environ if env is None else env
    return env.get("SYNCOPATE", "1").strip().lower() not in ("0", "false", "off", "no")


# ------------------------------------------------------------------------------------------
# Argument specialisation (what Triton's JIT would do), kept separate for CPU tests
# ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Specialization:
    """The compile-relevant facts of one call: signature, constexprs, divisibility attrs."""

    signature: tuple  # ((name, type), ...) in parameter order; "constexpr" for constexprs
    constexprs: tuple  # ((name, value), ...)
    attrs: tuple  # ((index, (("tt.divisibility", 16),)), ...)

    def signature_dict(self) -> dict:
        return dict(self.signature)

    def constexpr_dict(self) -> dict:
        return dict(self.constexprs)

    def attrs_dict(self) -> dict:
        return {(i,): [list(a) for a in v] for i, v in self.attrs}


def _param_names(kernel) -> list[str]:
    names = getattr(kernel, "arg_names", None)
    if names is None:
        names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    return list(names)


def _params(kernel) -> list:
    """Triton ``KernelParam``s, or stand-ins for a plain function (tests)."""
    ps = getattr(kernel, "params", None)
    if ps is not None:
        return list(ps)

    @dataclass
    class _P:
        name: str
        is_constexpr: bool
        is_const: bool = False
        do_not_specialize: bool = False
        do_not_specialize_on_alignment: bool = False

    sig = inspect.signature(getattr(kernel, "fn", kernel))
    return [_P(n, "constexpr" in str(p.annotation)) for n, p in sig.parameters.items()]


LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                  "launch_cooperative_grid", "launch_pdl")


def bind_args(kernel, args, kwargs) -> tuple[list, dict]:
    """Bind a call's positional and keyword arguments to the kernel's parameters (defaults
    applied). Returns ``(values in parameter order, launch options found in kwargs)``."""
    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTIONS}
    names = _param_names(kernel)
    try:
        sig = inspect.signature(getattr(kernel, "fn", kernel))
        ba = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise LaunchError(f"arguments do not match the kernel's parameters ({', '.join(names)}): "
                          f"{e}. Pass exactly the arguments of the unfused kernel, constexprs "
                          f"included") from None
    ba.apply_defaults()
    return [ba.arguments[n] for n in names], options


def specialize(kernel, values) -> Specialization:
    """Signature/constexprs/attrs for ``values`` the way Triton 3.6's JIT specialises them
    (``native_specialize_impl``: pointers typed by dtype, ints as i32/i64, ``== 1`` and None as
    constexprs, 16-divisibility as ``tt.divisibility``)."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    sig, cx, attrs = [], [], []
    for i, (p, v) in enumerate(zip(_params(kernel), values)):
        if p.is_constexpr:
            sig.append((p.name, "constexpr"))
            cx.append((p.name, v))
            continue
        ty, key = native_specialize_impl(BaseBackend, v, p.is_const, not p.do_not_specialize,
                                         not p.do_not_specialize_on_alignment)
        if ty == "constexpr":
            sig.append((p.name, "constexpr"))
            cx.append((p.name, v))
            continue
        sig.append((p.name, ty))
        if isinstance(key, str) and "D" in key:
            attrs.append((i, (("tt.divisibility", 16),)))
    return Specialization(tuple(sig), tuple(cx), tuple(attrs))


def _freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _freeze(x)) for k, x in v.items()))
    return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)


# ------------------------------------------------------------------------------------------
# Epochs
# ------------------------------------------------------------------------------------------

class EpochCounter:
    """Launch numbers of one configuration (one flag array): 1, 2, 3, ... (``syn_epoch`` is
    an i32).

    Flags hold ``epoch * count`` and only grow. They may wrap around 2^32 (a produced count of
    tens of thousands of tile signals wraps after ~10^5 launches): every spin compares with
    serial-number arithmetic, ``(int32)(flag - target) >= 0``, which is exact as long as a
    target is less than 2^31 ahead of the flag -- always true, since a flag is at most one
    epoch behind its target. The only hard limit is the epoch itself."""

    def __init__(self, limit: int = FLAG_LIMIT):
        self.value = 0
        self.limit = limit

    def next(self) -> int:
        e = self.value + 1
        if e > self.limit:
            raise LaunchError(f"epoch {e} does not fit syn_epoch (i32); create a new FusedKernel "
                              f"(fresh flags) to continue")
        self.value = e
        return e


def wrap32(x: int) -> int:
    """``x`` as the int32 a 32-bit flag holds after wrapping (targets of 32-bit spins)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def kernel_timeout_ns(env=None) -> int:
    """``syn_timeout_ns`` for the fused kernel: the compiler's convention is that a negative
    value selects the ``trap`` action (docs/fused-abi.md, "Runtime notes")."""
    t = diag.timeout_ns(env)
    return -t if (t and diag.timeout_action(env) == "trap") else t


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
    ce_plan: planmod.CEPlan | None = None
    slots: dict = field(default_factory=dict)  # tensor name -> symmetric [W, *shape] (ce reduce)
    ce_prepared: dict = field(default_factory=dict)  # operand ptrs -> _CEPrepared (ce backend)
    consumed_pending: int = 0  # epoch whose CONSUMED wait is not yet enqueued (deferred mode)
    #: launches of this configuration: its flags count per launch of *this* flag array
    epochs: EpochCounter = field(default_factory=EpochCounter)
    nvshmem_ready: bool = False
    events: dict = field(default_factory=dict)
    #: launch grids checked co-resident for loopback (residency.py)
    resident: set = field(default_factory=set)


class FusedKernel:
    """A fused multi-GPU kernel. Launch with ``fk[grid](*user_args, stream=None)``."""

    def __init__(self, kernel, schedule, *, operand, backend: str = "sm", comm_programs=None,
                 comm=None, defer_consumed_wait: bool = False, compile_fn=None, target=None,
                 **compile_options):
        if backend not in abi.BACKENDS:
            raise LaunchError(f"backend={backend!r}; choose one of {', '.join(abi.BACKENDS)}")
        if comm is None:
            raise LaunchError("fuse(...) needs comm=Communicator(...): the process group and the "
                              "symmetric memory the fused kernel communicates through")
        if int(schedule.world_size) != comm.world_size:
            raise LaunchError(f"the schedule is for {schedule.world_size} ranks but the process "
                              f"group has {comm.world_size}: build the schedule with "
                              f"world_size={comm.world_size}")
        if backend == "nvshmem" and comm.symm_backend != "nvshmem":
            raise LaunchError("backend='nvshmem' needs a Communicator(symm_backend='nvshmem') (its "
                              "buffers must live in the NVSHMEM heap)")
        self.kernel = kernel
        self.schedule = schedule
        self.backend = backend
        self.comm_programs = comm_programs
        self.comm = comm
        self.defer_consumed_wait = defer_consumed_wait
        self.compile_options = dict(compile_options)
        self._compile_fn = compile_fn
        #: compile target, e.g. ("cuda", 90); default: the communicator's device
        self.target = target
        self.operands = self._operand_map(operand)
        self.schedule_key = planmod.schedule_key(schedule)
        names = _param_names(kernel)
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
        register = getattr(comm, "register_fused", None)
        if register is not None:
            register(self)
        self._skip_chunks: frozenset[int] = frozenset()
        #: fault injection for tests: skip signalling ENTRY (ce/sm)
        self.test_skip_entry = False
        self.last_config = None

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

    # -- setup ----------------------------------------------------------------------------

    def _operand_map(self, operand) -> dict[str, str]:
        """``{kernel parameter: schedule tensor}``."""
        names = list(planmod.tensors(self.schedule))
        if isinstance(operand, str):
            if len(names) != 1:
                raise LaunchError(f"the schedule moves tensors {names}; map each operand: "
                                  f"operand={{'{operand}': '<tensor name>'}}")
            return {operand: names[0]}
        if isinstance(operand, dict):
            for p, t in operand.items():
                planmod.tensor_spec(self.schedule, t)
            return dict(operand)
        if isinstance(operand, (list, tuple)) and len(operand) == len(names):
            return dict(zip(operand, names))
        raise LaunchError("operand must be a parameter name, a list of them (one per schedule "
                          "tensor, in order) or a {parameter: tensor} dict")

    def __getitem__(self, grid):
        def runner(*args, stream=None, **kwargs):
            return self.launch(grid, args, kwargs, stream=stream)
        return runner

    @property
    def epoch(self) -> int:
        """The epoch of the last launch (0 before the first), in its configuration's count."""
        return self.last_config.epochs.value if self.last_config is not None else 0

    # -- validation -----------------------------------------------------------------------

    def validate(self, values) -> dict:
        """Check operands against the schedule; returns ``{param: tensor}``."""
        import torch

        names = _param_names(self.kernel)
        comm = self.comm
        out = {}
        for p, tname in self.operands.items():
            t = values[names.index(p)]
            spec = planmod.tensor_spec(self.schedule, tname)
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"operand {p} must be a torch.Tensor (the symmetric buffer of "
                                  f"schedule tensor {tname!r}), got {type(t).__name__}")
            if tuple(t.shape) != tuple(spec.shape):
                raise LaunchError(f"operand {p} has shape {tuple(t.shape)} but schedule tensor "
                                  f"{tname!r} is {tuple(spec.shape)}: pass the whole (global-shape) "
                                  f"symmetric buffer, or build the schedule for shape {tuple(t.shape)}")
            from .communicator import dtype_name
            if dtype_name(t.dtype) != dtype_name(_torch_name(spec.dtype)):
                raise LaunchError(f"operand {p} is {t.dtype} but schedule tensor {tname!r} is "
                                  f"{spec.dtype}: cast the operand or rebuild the schedule")
            if t.device != comm.device:
                raise LaunchError(f"operand {p} is on {t.device}, the communicator on {comm.device}")
            if comm.allocation(t) is None:
                other = _owner_elsewhere(t, comm)
                if other is not None:
                    raise LaunchError(
                        f"operand {p} lives in symmetric memory of another Communicator (group "
                        f"{other.group_name!r}, {other.world_size} ranks) but this fused kernel "
                        f"communicates over group {comm.group_name!r}: use the same Communicator for "
                        f"the buffer and fuse(..., comm=...)")
            comm.require_symmetric(t, f"operand {p}", contiguous=True)
            out[p] = t
        return out

    # -- compile --------------------------------------------------------------------------

    def _compile(self, spec: Specialization, options: dict):
        fn = self._compile_fn
        if fn is None:
            try:
                import syncopate
                fn = syncopate.compile
            except (ImportError, AttributeError) as e:
                raise CompileError(f"the Syncopate compiler is not available ({e}); install the "
                                   f"full package or pass compile_fn=") from None
        import torch
        if self.target is not None:
            target = self.target
        else:
            cap = torch.cuda.get_device_capability(self.comm.device)
            target = ("cuda", cap[0] * 10 + cap[1])
        operand = next(iter(self.operands)) if len(self.operands) == 1 else dict(self.operands)
        kw = dict(signature=spec.signature_dict(), constexprs=spec.constexpr_dict(),
                  schedule=self.schedule, operand=operand, backend=self.backend,
                  comm_programs=self.comm_programs, target=target)
        if self._compiled_skips():
            kw["withhold_chunks"] = tuple(sorted(self._compiled_skips()))
        kw.update(options)
        try:
            params = inspect.signature(fn).parameters
            if "attrs" in params or any(p.kind == p.VAR_KEYWORD for p in params.values()):
                kw["attrs"] = spec.attrs_dict()
        except (TypeError, ValueError):
            pass
        return fn(self.kernel, **kw)

    def _compiled_skips(self) -> frozenset[int]:
        """The withheld chunks that are compiled in (sm/nvshmem; ce skips at run time)."""
        return self._skip_chunks if self.backend != "ce" else frozenset()

    def _config(self, spec: Specialization, options: dict) -> _Config:
        key = (spec, _freeze(options), self.schedule_key, self.backend, self.comm_programs,
               self._compiled_skips())
        cfg = self._configs.get(key)
        if cfg is not None:
            return cfg
        with _COMPILE_LOCK:
            fc = self._compile(spec, options)
        a = fc.abi
        self._check_abi(a)
        # load the module now, before the flags' barrier: loading may need a context
        # synchronisation, which in loopback would wait for a peer's kernel that spins until
        # this rank launches (sync_kernels.preload says why)
        init = getattr(fc.kernel, "_init_handles", None)
        if init is not None and getattr(self.comm, "loopback", False):
            init()
        cfg = _Config(compiled=fc, abi=a)
        comm = self.comm
        cfg.flags = comm.new_flags(a.layout.words, a.flag_dtype)
        cfg.flag_addrs = comm.peer_ptrs(cfg.flags)
        if self.backend == "ce":
            cfg.ce_plan = planmod.build_ce_plan(self.schedule, comm.rank, a.produced_count)
            if a.epilogue_slots:
                check_epilogue_plan(cfg.ce_plan, _cuda.stream_wait_available())
            for tname in cfg.ce_plan.reduce_tensors:
                spec_t = planmod.tensor_spec(self.schedule, tname)
                cfg.slots[tname] = comm.empty((comm.world_size,) + tuple(spec_t.shape),
                                              _torch_name(spec_t.dtype))
        self._configs[key] = cfg
        return cfg

    def _check_abi(self, a: abi.FusedABI) -> None:
        if a.version != abi.ABI_VERSION:
            raise CompileError(f"compiler produced ABI version {a.version}, runtime speaks "
                               f"{abi.ABI_VERSION}: reinstall syncopate so both match")
        if a.backend != self.backend:
            raise CompileError(f"compiler produced a {a.backend!r} kernel for backend {self.backend!r}")
        if a.world_size != self.comm.world_size:
            raise CompileError(f"compiler produced a kernel for {a.world_size} ranks, group has "
                               f"{self.comm.world_size}")
        if a.num_chunks != planmod.num_chunks(self.schedule):
            raise CompileError(f"ABI says {a.num_chunks} chunks, the schedule has "
                               f"{planmod.num_chunks(self.schedule)}")
        if a.operands and list(a.operands) != list(self.operands):
            # The ABI's operand order defines the rows of syn_peers; follow the compiler.
            missing = [p for p in a.operands if p not in _param_names(self.kernel)]
            if missing:
                raise CompileError(f"ABI operands {missing} are not kernel parameters")

    def _peers_table(self, cfg: _Config, operand_tensors: dict):
        import torch

        order = list(cfg.abi.operands) if cfg.abi.operands else list(self.operands)
        # keyed by the registry generation too: a buffer released and reallocated at the same
        # local address may map to other peer addresses
        ptrs = (self.comm.generation,) + tuple(operand_tensors[p].data_ptr() for p in order)
        t = cfg.peers_tables.get(ptrs)
        if t is None:
            rows = [cfg.flag_addrs] + [self.comm.peer_ptrs(operand_tensors[p]) for p in order]
            for tname in getattr(cfg.abi, "epilogue_slots", None) or []:
                # the epilogue reduction reads this rank's slots of ``tname`` (row after the
                # operands, docs/fused-abi.md)
                if tname not in cfg.slots:
                    raise CompileError(f"the kernel reads slots of {tname!r} but the runtime has "
                                       f"none (backend {self.backend!r})")
                rows.append(self.comm.peer_ptrs(cfg.slots[tname]))
            t = torch.tensor(rows, dtype=torch.int64).to(self.comm.device)
            if len(cfg.peers_tables) > 16:  # callers cycling through buffers: bound the cache
                cfg.peers_tables.clear()
            cfg.peers_tables[ptrs] = t
        return t

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
        layout = abi.FlagLayout(planmod.num_chunks(self.schedule), self.comm.world_size)
        err = diag.make_timeout(rec, diag.timeout_s(), layout,
                                f"backend {self.backend}; this FusedKernel is now unusable (its "
                                f"flags disagree across ranks): create a new one")
        self._poisoned = str(err)
        raise err

    def before_staging(self, stream=None) -> None:
        """Enqueue (on ``stream``, default current) the wait that makes it safe to overwrite this
        rank's symmetric operand: ``CONSUMED >= e * reads(me)`` for the last epoch ``e``
        (``ce`` backend, deferred mode). A no-op when nothing is pending."""
        for cfg in self._configs.values():
            if cfg.consumed_pending:
                self._consumed_wait(cfg, cfg.consumed_pending, stream)
                cfg.consumed_pending = 0

    def _consumed_wait(self, cfg: _Config, epoch: int, stream) -> None:
        from . import sync_kernels as sk

        reads = cfg.ce_plan.reads_of_me if cfg.ce_plan is not None else \
            int(cfg.abi.reads_per_src.get(self.comm.rank, 0))
        if reads == 0:
            return
        flag64 = cfg.abi.flag_dtype == "int64"
        target = epoch * reads if flag64 else wrap32(epoch * reads)
        sk.wait_flag(cfg.flags.data_ptr(), cfg.abi.layout.consumed, target, self.diag_addr,
                     rank=self.comm.rank, kind=abi.KIND_CONSUMED, epoch=epoch,
                     timeout_ns=diag.timeout_ns(), flag64=flag64,
                     trap=diag.timeout_action() == "trap", stream=stream)

    def _launch_key(self, grid, args, kwargs):
        """A hashable key for the call, or None (no fast path): positional arguments only;
        operand tensors by (address, shape, strides, dtype, device); other tensors by what
        Triton specialises on -- dtype, device and 16-byte alignment -- so a fresh output
        tensor each call still hits; other values by type and value; plus the grid (when not
        callable) and the communicator's registry generation. Everything the slow path derives
        from a call -- binding, validation, specialisation, the compiled configuration,
        requirements, the peers table -- is a function of this key."""
        import torch

        if kwargs:
            return None
        ops = self._op_pos
        key = [len(args), self.comm.generation]
        for i, v in enumerate(args):
            if isinstance(v, torch.Tensor):
                if i in ops:
                    key.append((v.data_ptr(), v.shape, v.stride(), v.dtype, v.device))
                else:
                    key.append((v.dtype, v.device, v.data_ptr() % 16 == 0))
            elif v is None or isinstance(v, (bool, int, float, str)):
                key.append((type(v), v))
            else:
                return None
        key.append(None if callable(grid) else tuple(grid))
        return tuple(key)

    def _refuse_if_poisoned(self) -> None:
        if self._poisoned:
            raise LaunchError(f"this FusedKernel timed out earlier and cannot be reused: "
                              f"{self._poisoned}")

    def warmup(self, grid, *args, **kwargs) -> None:
        """Everything a launch with these arguments does before enqueueing: bind, validate,
        specialise, compile, allocate the configuration's flags and peers table. Collective
        (the flags are a symmetric allocation): call it on every rank. Use it to keep the first
        launch's compile out of a timed step, or to line the ranks up before a launch."""
        with self._lock:
            self._refuse_if_poisoned()
            cfg, _, _, g = self._prepare(grid, args, kwargs)
            self._check_coresident(cfg, g)

    def _prepare(self, grid, args, kwargs):
        """``(config, argument values, peers table, grid)`` of a call: from the fast path when
        this argument layout was seen before, else derived (and remembered)."""
        fkey = self._launch_key(grid, args, kwargs)
        hit = self._fast.get(fkey) if fkey is not None else None
        if hit is not None:
            cfg, tail, peers, g = hit
            values = list(args) + tail
            if g is None:
                g = cfg.abi.grid(tuple(grid(dict(zip(_param_names(self.kernel), values)))))
            return cfg, values, peers, g
        values, launch_opts = bind_args(self.kernel, args, kwargs or {})
        options = dict(self.compile_options)
        options.update(launch_opts)
        operand_tensors = self.validate(values)
        spec = specialize(self.kernel, values)
        cfg = self._config(spec, options)
        check_requirements(cfg.abi, _param_names(self.kernel), values)
        g = cfg.abi.grid(tuple(grid(dict(zip(_param_names(self.kernel), values))))
                         if callable(grid) else tuple(grid))
        peers = self._peers_table(cfg, operand_tensors)
        if fkey is not None:
            # the first launch of a configuration allocates its flags (a new symmetric
            # buffer): key on the registry as it is now
            fkey = self._launch_key(grid, args, kwargs)
            if len(self._fast) >= 64:  # callers cycling through buffers: bound it
                self._fast.clear()
            self._fast[fkey] = (cfg, values[len(args):], peers, None if callable(grid) else g)
        return cfg, values, peers, g

    def launch(self, grid, args, kwargs=None, *, stream=None):
        """Launch once (see the module docstring). Repeated calls with the same argument
        layout (same buffers, shapes, scalars and grid) take a fast path that skips binding,
        validation and specialisation: at M = 1024 those cost as much as the GEMM."""
        import torch

        with self._lock:
            self._refuse_if_poisoned()
            self.comm.check()  # this kernel's record and every other one of the communicator
            self.check()
            cfg, values, peers, g = self._prepare(grid, args, kwargs)
            self._check_coresident(cfg, g)
            self.last_config = cfg
            comm = self.comm
            S = stream if stream is not None else torch.cuda.current_stream(comm.device)
            if isinstance(S, int):
                S = torch.cuda.ExternalStream(S, device=comm.device)
            if self.backend == "ce" and cfg.consumed_pending:
                # The caller did not call before_staging(); enqueue it now (best effort).
                self._consumed_wait(cfg, cfg.consumed_pending, S)
                cfg.consumed_pending = 0
            e = cfg.epochs.next()
            extra = [cfg.flags, peers, self.diag_addr, comm.rank, e, kernel_timeout_ns()]
            if self.backend != "ce" and torch.cuda.current_device() == comm.device.index:
                # sm/nvshmem enqueue only on S, passed explicitly: no device/stream switch
                self._launch_sm(cfg, g, values + extra, S, e, peers)
                return e
            with torch.cuda.device(comm.device), torch.cuda.stream(S):
                if self.backend == "ce":
                    operand_tensors = {p: values[i] for p, i in self._op_index.items()}
                    self._launch_ce(cfg, g, values + extra, S, e, peers, operand_tensors)
                else:
                    self._launch_sm(cfg, g, values + extra, S, e, peers)
            return e

    def _check_coresident(self, cfg: _Config, g) -> None:
        """Loopback: refuse (:class:`CoResidencyError`) a launch grid whose W copies, one per
        virtual rank, would not all be resident on the shared GPU at once (residency.py says
        why that could deadlock). Checked once per configuration and grid."""
        ranks = getattr(self.comm, "colocated", 1)
        if ranks <= 1 or tuple(g) in cfg.resident:
            return
        from . import residency
        programs = 1
        for d in g:
            programs *= int(d)
        ck = cfg.compiled.kernel
        limits = residency.DeviceLimits.of(self.comm.device)
        per_sm = residency.kernel_blocks_per_sm(ck, limits)
        residency.check(programs, ranks, limits, per_sm,
                        what=f"{getattr(self.kernel, '__name__', 'the kernel')} "
                             f"(backend {self.backend}, {getattr(ck.metadata, 'num_warps', '?')} warps, "
                             f"{getattr(ck.metadata, 'shared', '?')} B shared memory)")
        cfg.resident.add(tuple(g))

    def _run_kernel(self, cfg: _Config, g, all_args, S) -> None:
        ck = cfg.compiled.kernel
        if getattr(ck.metadata, "global_scratch_size", 0):
            # device-side TMA descriptors live in Triton's global scratch (allocator per thread)
            from ..kernels import ensure_tma_allocator
            ensure_tma_allocator()
        if self.backend == "nvshmem" and not cfg.nvshmem_ready:
            _nvshmem_module_init(ck)
            cfg.nvshmem_ready = True
        ck[g](*all_args, stream=S.cuda_stream)

    def _launch_sm(self, cfg: _Config, g, all_args, S, e, peers) -> None:
        from . import sync_kernels as sk

        a = cfg.abi
        if not getattr(a, "signals_entry", False) and not self.test_skip_entry:
            sk.signal_entry(peers, a.layout.entry(self.comm.rank), e, self.comm.world_size,
                            flag64=a.flag_dtype == "int64", stream=S)
        self._run_kernel(cfg, g, all_args, S)

    def _event(self, cfg: _Config, name: str):
        import torch

        ev = cfg.events.get(name)
        if ev is None:
            ev = torch.cuda.Event()
            cfg.events[name] = ev
        return ev

    def _ce_prepare(self, cfg: _Config, operand_tensors: dict) -> "_CEPrepared":
        """Views, copy geometry and flag views of every step of this rank's ``ce`` plan, for
        these operand buffers (cached: the plan and the buffers fix all of it)."""
        key = (self.comm.generation,) + tuple(operand_tensors[p].data_ptr()
                                              for p in sorted(operand_tensors))
        prep = cfg.ce_prepared.get(key)
        if prep is not None:
            return prep
        comm, me, p = self.comm, self.comm.rank, cfg.ce_plan
        param_of = {t: prm for prm, t in self.operands.items()}
        steps = []
        for st in p.steps:
            t = operand_tensors[param_of[st.tensor]]
            copy = None
            if st.src != st.dst:
                if st.reduce:
                    slot_local = cfg.slots[st.tensor]
                    dst_t = comm.peer_view(slot_local, st.dst)[st.src][st.slices]
                    src_t = t[st.slices] if st.src == me else comm.peer_view(t, st.src)[st.slices]
                elif st.mode == "pull":
                    dst_t = t[st.slices]
                    src_t = comm.peer_view(t, st.src)[st.slices]
                else:
                    dst_t = comm.peer_view(t, st.dst)[st.slices]
                    src_t = t[st.slices]
                copy = region_copier(dst_t, src_t)
            steps.append((st, copy, comm.flag_view_u32(cfg.flags, st.dst)))
        groups: dict = {}
        for st in p.reduce_in:
            groups.setdefault((st.tensor, _slices_key(st.slices)), (st.slices, []))[1].append(st.src)
        reductions = []
        for (tname, _), (sl, srcs) in groups.items():
            t = operand_tensors[param_of[tname]]
            slots = cfg.slots[tname]
            reductions.append((t[sl], [slots[s][sl] for s in sorted(srcs)]))
        prep = _CEPrepared(steps, reductions)
        if len(cfg.ce_prepared) > 16:  # callers cycling through buffers: bound the cache
            cfg.ce_prepared.clear()
        cfg.ce_prepared[key] = prep
        return prep

    def _launch_ce(self, cfg: _Config, g, all_args, S, e, peers, operand_tensors) -> None:
        import torch

        from . import sync_kernels as sk

        comm = self.comm
        a = cfg.abi
        lay = a.layout
        me, W = comm.rank, comm.world_size
        X = comm.stream("syncopate-ce")
        tmo = diag.timeout_ns()
        trap = diag.timeout_action() == "trap"
        p = cfg.ce_plan

        # 1. Entry: after the staged inputs (and launch e-1, by stream order) on the main stream.
        staged = self._event(cfg, "staged")
        staged.record(S)
        X.wait_event(staged)
        if not self.test_skip_entry:
            sk.signal_entry(peers, lay.entry(me), e, W, stream=X)
        sk.wait_flag(cfg.flags.data_ptr(), lay.entry(0), e, self.diag_addr, rank=me,
                     kind=abi.KIND_ENTRY, epoch=e, timeout_ns=tmo, count=W, trap=trap, stream=X)
        entered = self._event(cfg, "entered")
        entered.record(X)
        S.wait_event(entered)

        # 2. The fused kernel.
        self._run_kernel(cfg, g, all_args, S)
        kernel_done = None

        # 3. Copies and flags on the side stream (no SM needed from here on). The views,
        #    copy geometry and flag views of every step are prepared once per set of operand
        #    buffers: per launch only the enqueueing is left (host time at M = 1024 matters).
        prep = self._ce_prepare(cfg, operand_tensors)
        with torch.cuda.stream(X):
            for st, copy, flag_view in prep.steps:
                if st.chunk in self.test_skip_chunks:
                    continue
                need_kernel = st.wait_kernel
                if st.wait_produced:
                    addr = cfg.flags.data_ptr() + lay.produced(st.chunk) * 4
                    need_kernel = not _cuda.stream_wait_value32(X.cuda_stream, addr,
                                                                (e * st.wait_produced) & 0xFFFFFFFF)
                if need_kernel and kernel_done is None:
                    # no PRODUCED count (or no stream memory ops): wait for the whole kernel
                    kernel_done = self._event(cfg, "kernel_done")
                    kernel_done.record(S)
                    X.wait_event(kernel_done)
                if copy is not None:
                    copy(X)
                torch.ops.symm_mem.stream_write_value32_(flag_view, lay.chunk(st.chunk), e)
            for src, n in sorted(p.consumed_adds.items()):
                sk.add_flag(cfg.flag_addrs[src], lay.consumed, n, stream=X)
        done = self._event(cfg, "comm_done")
        done.record(X)
        S.wait_event(done)

        # 4. Reductions of chunks pushed into this rank's slots (after the kernel, on S), unless
        #    the kernel's epilogue already added them (reduce="epilogue": it waited for them).
        if p.reduce_in and not cfg.abi.epilogue_slots:
            for st in p.reduce_in:
                sk.wait_flag(cfg.flags.data_ptr(), lay.chunk(st.chunk), e, self.diag_addr, rank=me,
                             kind=abi.KIND_CHUNK, epoch=e, timeout_ns=tmo, trap=trap, stream=S)
            for own, parts in prep.reductions:
                acc = own.float()
                for part in parts:
                    acc += part.float()
                own.copy_(acc)

        # 5. CONSUMED: nobody may overwrite this rank's buffers before peers finished reading.
        if self.defer_consumed_wait:
            cfg.consumed_pending = e
        else:
            self._consumed_wait(cfg, e, S)


def check_epilogue_plan(plan: planmod.CEPlan, stream_waits: bool) -> None:
    """The epilogue reduction's kernel waits for chunks the side stream copies *while it runs*:
    every copy must start on its own PRODUCED flag (``cuStreamWaitValue32``), never on the end
    of the kernel, or the two would wait for each other until the watchdog fires."""
    if not stream_waits:
        raise LaunchError("reduce='epilogue' needs cuStreamWaitValue32 (CUDA stream memory "
                          "operations), which this driver does not expose; use reduce='comm'")
    late = [st.chunk for st in plan.steps if st.wait_kernel]
    if late:
        raise LaunchError(f"reduce='epilogue': chunks {late[:8]} would be copied only after the "
                          f"kernel ends (no PRODUCED count), while the kernel waits for them; use "
                          f"reduce='comm' for this schedule")


def check_requirements(a: abi.FusedABI, names, values) -> None:
    """The compiler's launch-time requirements (``abi.requirements``, e.g. ``{"stride_am":
    4096}``: facts its analysis baked into the kernel) must hold for this call."""
    bad = abi.contradictions(a, dict(zip(names, values)))
    if bad:
        raise LaunchError("arguments break what the fused kernel was compiled for: " + "; ".join(bad)
                          + ". Pass operands with the layout the schedule describes (e.g. a "
                            "contiguous row-major buffer of the schedule tensor's shape)")


def _slices_key(sl):
    return tuple((s.start, s.stop) for s in sl)


_COPY_WARNED = False


def copy_region(dst, src, stream) -> None:
    """Copy a region between two views (one may be a peer's) with the copy engine.

    Contiguous views: ``Tensor.copy_`` (``cudaMemcpyAsync``). Views with one strided level
    (a column block of a row-major matrix): ``cuMemcpy2DAsync``. Anything else falls back to
    ``Tensor.copy_`` (an SM kernel; warned once, since it competes with the fused kernel)."""
    global _COPY_WARNED
    if dst.is_contiguous() and src.is_contiguous():
        dst.copy_(src, non_blocking=True)
        return
    shp = _rows_cols(dst, src)
    if shp is not None:
        rows, width, dpitch, spitch = shp
        if _cuda.memcpy2d_async(dst.data_ptr(), dpitch, src.data_ptr(), spitch, width, rows,
                                stream.cuda_stream):
            return
    if not _COPY_WARNED:
        warnings.warn("syncopate ce backend: a chunk region is not a 2-D block; copying it with "
                      "an SM kernel (slower, and it competes with the fused kernel for SMs)")
        _COPY_WARNED = True
    dst.copy_(src, non_blocking=True)


def region_copier(dst, src):
    """``copy(stream)`` doing :func:`copy_region` (dst <- src) with its geometry worked out once:
    contiguous views copy with ``Tensor.copy_``, one strided level with ``cuMemcpy2DAsync``
    (falling back to :func:`copy_region` if the driver call is unavailable)."""
    if dst.is_contiguous() and src.is_contiguous():
        return lambda stream: dst.copy_(src, non_blocking=True)
    shp = _rows_cols(dst, src)
    if shp is not None:
        rows, width, dpitch, spitch = shp
        dptr, sptr = dst.data_ptr(), src.data_ptr()

        def copy2d(stream):
            if not _cuda.memcpy2d_async(dptr, dpitch, sptr, spitch, width, rows, stream.cuda_stream):
                copy_region(dst, src, stream)
        return copy2d
    return lambda stream: copy_region(dst, src, stream)


@dataclass
class _CEPrepared:
    """One rank's ``ce`` steps for one set of operand buffers: ``(step, copy(stream) or None,
    uint32 view of the destination's flags)``, and the reductions ``(own region, [slot
    regions in source order])``."""

    steps: list
    reductions: list


def _rows_cols(dst, src):
    """``(rows, width_bytes, dst_pitch, src_pitch)`` if both views are ``rows`` blocks of
    contiguous bytes at a constant pitch; else None."""
    def collapse(t):
        es = t.element_size()
        dims = [(s, st) for s, st in zip(t.shape, t.stride()) if s != 1]
        if not dims:
            return 1, es, es
        # merge contiguous trailing dims
        inner = 1
        while dims and dims[-1][1] == inner:
            inner *= dims[-1][0]
            dims.pop()
        if len(dims) > 1:
            return None
        if not dims:
            return 1, inner * es, inner * es
        return dims[0][0], inner * es, dims[0][1] * es
    a, b = collapse(dst), collapse(src)
    if a is None or b is None or a[0] != b[0] or a[1] != b[1]:
        return None
    return a[0], a[1], a[2], b[2]


def _torch_name(dtype_str):
    from ..dtypes import torch_name
    return torch_name(dtype_str)


def _owner_elsewhere(t, comm):
    for other in list(_LIVE_COMMS):
        if other is not comm and not other._closed and other.allocation(t) is not None:
            return other
    return None


import weakref  # noqa: E402

_LIVE_COMMS: "weakref.WeakSet" = weakref.WeakSet()


def _register_comm(comm) -> None:
    _LIVE_COMMS.add(comm)


def _nvshmem_module_init(ck) -> None:
    """Initialise NVSHMEM device state in the fused kernel's CUmodule (once, after load):
    ``torch._C._distributed_c10d._nvshmemx_cumodule_init(module)``, as torch's own
    ``@requires_nvshmem`` Triton kernels do."""
    try:
        from torch._C._distributed_c10d import _nvshmemx_cumodule_init
    except ImportError as e:
        raise LaunchError(f"this torch build has no NVSHMEM module init ({e}); use backend 'sm'") from None
    ck._init_handles()  # loads the cubin: ck.module becomes the CUmodule handle
    _nvshmemx_cumodule_init(ck.module)


def fuse(kernel, schedule, *, operand, backend: str = "sm", comm_programs=None, comm=None,
         defer_consumed_wait: bool = False, **compile_options) -> FusedKernel:
    """A :class:`FusedKernel` for ``kernel`` (a ``@triton.jit`` function written for one GPU)
    and ``schedule`` (a :class:`syncopate.schedule.Schedule`). ``operand``: the kernel parameter
    that is the schedule's tensor (or a ``{parameter: tensor}`` dict). ``compile_options``:
    ``num_warps``, ``num_stages``, ... as for Triton. Compilation happens at the first launch of
    each configuration."""
    if comm is not None:
        _register_comm(comm)
    return FusedKernel(kernel, schedule, operand=operand, backend=backend,
                       comm_programs=comm_programs, comm=comm,
                       defer_consumed_wait=defer_consumed_wait, **compile_options)
