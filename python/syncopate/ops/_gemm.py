"""Shared plumbing of the GEMM ops: the local kernel's argument list, and op defaults.

The fused and the unfused path of an op launch the **same** local kernel
(:mod:`syncopate.kernels`) with the **same** config, so the fused result is bitwise the result
of the local kernel on the gathered operand (the compiler adds waits/signals and remaps tile
order; it does not change a tile's arithmetic).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

from .. import backends
from ..errors import LaunchError


@dataclass
class GemmCall:
    """A ready-to-launch local GEMM: ``fn[grid](*args, **options)``."""

    fn: object
    args: list
    grid: tuple
    options: dict
    config: object
    kernel: str


def symmetric_buffer(comm, tag: str, shape, dtype):
    """The communicator's symmetric ``shape`` buffer of ``dtype`` for ``tag`` (an op's named
    buffer), allocated on first use -- a collective: every rank asks for it with the same
    shape -- and cached on the communicator."""
    import torch
    shape = tuple(int(s) for s in shape)
    dt = torch.empty((), dtype=dtype).dtype
    key = (tag, shape, dt)
    buf = comm.cache.get(key)
    if buf is None:
        buf = comm.empty(shape, dt)
        comm.cache[key] = buf
    return buf


def short_kernel(kernel: str) -> str:
    from ..kernels.gemm_config import _short
    try:
        return _short(kernel)
    except ValueError as e:
        raise LaunchError(str(e)) from None


def resolve_config(kernel: str, M: int, N: int, K: int, dtype, config=None):
    if config is None:
        return _default_config(kernel, M, N, K, dtype)
    from ..kernels import GemmConfig
    k = short_kernel(kernel)
    cfg = GemmConfig.of(config)
    cfg.check(k, fusable=True)
    return cfg


@functools.lru_cache(maxsize=256)
def _default_config(kernel: str, M: int, N: int, K: int, dtype):
    """Memoised: the ops call this on every launch, and choosing a config costs milliseconds
    of Python, more than the GEMM itself at M = 1024."""
    from ..kernels import default_config
    k = short_kernel(kernel)
    cfg = default_config(M, N, K, dtype, k, fusable=True)
    cfg.check(k, fusable=True)
    return cfg


def gemm_call(kernel: str, a, b, c, config, *, num_programs: int | None = None) -> GemmCall:
    """The local GEMM ``c = a @ b`` as a kernel, positional args (constexprs in position, as
    Triton 3.6's launcher expects) and grid. ``num_programs``: the persistent kernel's
    ``NUM_SMS`` (programs of the tile loop); default: the device's SM count."""
    import triton

    from ..kernels import check_operands, kernel_fn, num_sms
    k = short_kernel(kernel)
    M, N, K = check_operands(a, b, c, k)
    cfg = resolve_config(k, M, N, K, a.dtype, config)
    fn = kernel_fn(k)
    tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
    if k == "ptr":
        vals = dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=a.stride(0),
                    stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
                    stride_cm=c.stride(0), stride_cn=c.stride(1), **cfg.constexprs(k))
        grid = (max(1, tiles),)
    else:
        sms = int(num_programs) if num_programs else num_sms(a.device)
        vals = dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=a.stride(0),
                    stride_bk=b.stride(0), stride_cm=c.stride(0), **cfg.constexprs(k, sms))
        grid = (max(1, min(sms, tiles)),)
    args = [vals[n] for n in fn.arg_names]
    return GemmCall(fn=fn, args=args, grid=grid, options=cfg.options(), config=cfg, kernel=k)


def run_local(call: GemmCall) -> None:
    """Launch the local (unfused) kernel on the current stream."""
    from ..kernels import ensure_tma_allocator
    if call.kernel == "tma":
        ensure_tma_allocator()
    call.fn[call.grid](*call.args, **call.options)


def choose(op: str, backend: str, M: int, N: int, K: int, world_size: int, dtype, split,
           comm_programs):
    """``(split, comm_programs)``: the caller's, else the cost model's
    (``syncopate.schedule.cost.choose_gemm_plan``: ``op`` 'ag_gemm' takes this rank's GEMM
    ``N``/``K`` and the global ``M``; 'gemm_rs' this rank's sharded ``K``)."""
    if not backends.get(backend, LaunchError).has_comm_programs:
        comm_programs = 0  # e.g. the copy engine needs no programs in the kernel
    if split is not None and comm_programs is not None:
        return int(split), int(comm_programs)
    return _choose(op, backend, M, N, K, world_size, dtype, split, comm_programs)


@functools.lru_cache(maxsize=256)
def _choose(op, backend, M, N, K, world_size, dtype, split, comm_programs):
    """Memoised cost-model choice (~10 ms of Python per call otherwise, on every launch); what
    the caller fixed is kept."""
    from ..schedule import cost
    from ..schedule.model import normalize_dtype
    plan = cost.choose_gemm_plan("ag" if op.startswith("ag") else "rs", M, N, K, world_size,
                                 normalize_dtype(schedule_dtype(dtype)), backend=backend,
                                 comm_programs=comm_programs)
    return (int(split) if split is not None else int(plan["split"]),
            int(comm_programs) if comm_programs is not None else int(plan["comm_programs"]))


def compute_programs(comm, comm_programs: int) -> int:
    """Programs of the persistent GEMM's tile loop: the SMs this rank may use (all of them, or
    its share in loopback, :func:`syncopate.runtime.residency.sm_share`) minus the comm
    programs, which run in the same kernel on SMs of their own."""
    from ..kernels import num_sms
    from ..runtime.residency import sm_share
    share = sm_share(num_sms(comm.device), getattr(comm, "colocated", 1))
    return max(1, share - int(comm_programs))


def kernel_comm_programs(backend: str, comm_programs: int) -> int:
    """The programs ``backend`` adds to the kernel's grid (0 for a backend without comm programs)."""
    return int(comm_programs) if backends.get(backend, LaunchError).has_comm_programs else 0


def loopback_comm_programs(comm, chosen: int, requested) -> int:
    """The cost model's comm-program count assumes a whole GPU per rank; in loopback a rank
    has ``sm_share`` SMs, so a count the caller did not fix is capped at half of them (the
    GEMM keeps the other half and the kernel stays co-resident with the other ranks')."""
    ranks = getattr(comm, "colocated", 1)
    if requested is not None or ranks <= 1 or not chosen:
        return chosen
    from ..kernels import num_sms
    from ..runtime.residency import sm_share
    return max(1, min(int(chosen), sm_share(num_sms(comm.device), ranks) // 2))


def check_k_sharded(a, b_shard) -> None:
    """``a`` ``[M, K/W]`` and ``b_shard`` ``[K/W, N]``: 2-D tensors of one dtype whose inner
    dims agree (the operands of the K-sharded ops, ``gemm_rs`` and ``gemm_ar``)."""
    import torch
    for name, t in (("a", a), ("b_shard", b_shard)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise LaunchError(f"{name} must be a 2-D torch.Tensor")
    if a.dtype != b_shard.dtype:
        raise LaunchError(f"a is {a.dtype} but b_shard is {b_shard.dtype}: cast one of them")
    if a.shape[1] != b_shard.shape[0]:
        raise LaunchError(f"a is [M, K/W] = {tuple(a.shape)} and b_shard must be [K/W, N] but is "
                          f"{tuple(b_shard.shape)}: b_shard.shape[0] must be {a.shape[1]}")


def check_comm_device(comm, *tensors):
    for name, t in tensors:
        if t.device != comm.device:
            raise LaunchError(f"{name} is on {t.device} but the communicator (rank {comm.rank}) "
                              f"uses {comm.device}: move it with .to({str(comm.device)!r})")


def template(name: str):
    """A schedule template by name."""
    from ..schedule.templates import TEMPLATES
    return TEMPLATES[name]


def schedule_dtype(dtype) -> str:
    """The schedule's (canonical) name of a torch dtype or any other spelling."""
    from ..dtypes import canonical
    return canonical(dtype)


def fused_kernel(comm, op: str, template_name: str, shape, dtype, operand: str, *, backend,
                 split, order, mode, comm_programs, kernel, config, reduce: str = "comm",
                 **fuse_options):
    """The cached FusedKernel of an op: the local ``kernel`` fused with the schedule template
    ``template_name`` over ``shape`` (one per configuration, per communicator).  A kernel that
    timed out is rebuilt: its flags disagree across ranks."""
    from ..kernels import kernel_fn
    from ..runtime.fused import fuse

    k = short_kernel(kernel)
    be = backends.get(backend, LaunchError)
    mode = mode or be.op_modes[op]
    key = (f"{op}.fk", *shape, str(dtype), backend, split, order, mode, comm_programs, k,
           repr(config), reduce)
    fk = comm.cache.get(key)
    if fk is not None and getattr(fk, "_poisoned", None):
        fk = None
    if fk is None:
        sched = template(template_name)(tuple(shape), schedule_dtype(dtype), comm.world_size,
                                        dim=0, order=order, mode=mode, split=split)
        opts = config.options() if hasattr(config, "options") else {}
        if reduce != "comm":
            opts["reduce"] = reduce
        fk = fuse(kernel_fn(k), sched, operand=operand, backend=backend,
                  comm_programs=comm_programs if be.has_comm_programs else 0, comm=comm,
                  **fuse_options, **opts)
        comm.cache[key] = fk
    return fk


# ------------------------------------------------------------------------------------------
# Prepared calls: the op's Python once per argument layout
# ------------------------------------------------------------------------------------------

@dataclass
class PreparedCall:
    """Everything an op derived for one argument layout: the FusedKernel, its grid and
    positional arguments (with the per-call tensors swapped in at ``a_index`` / ``out_index``),
    the staging slot (AG) or the result rows (RS), and the output shape.

    Why: at M = 1024 the op's own Python (checks, config and plan choice, cache lookups, the
    GEMM's argument list) cost ~100 us per call on the GPU host, as much as the GEMM
    (bench/results/2026-11-30-h200x2-run4/host_profile.log)."""

    fk: object
    grid: tuple
    args: list
    out_shape: tuple
    a_index: int | None = None
    out_index: int | None = None
    slot: object = None
    result: object = None
    #: the FusedKernel's launch bound to this layout (``FusedKernel.bind``): the per-call path
    bound: object = None
    #: the byte count of the call's copy as one memcpy (``runtime.bound.memcpy_bytes``; 0:
    #: ``Tensor.copy_``), worked out at the first call: the layout fixes it
    copy_bytes: int | None = None

    def __post_init__(self):
        if self.bound is None:
            self.bound = self.fk.bind(self.grid)
        #: the fixed tensors' addresses and strides (the staging slot, the result rows: parts
        #: of symmetric buffers, which stay put while the registry generation the call's key
        #: holds does), read once instead of per call
        self._slot_at = (None if self.slot is None
                         else (self.slot.data_ptr(), self.slot.stride()))
        self._result_ptr = None if self.result is None else self.result.data_ptr()

    def launch(self, args: list, copy_dst=None, copy_src=None, *, after: bool = False) -> None:
        """Launch with ``args``; with ``copy_dst``, ``copy_dst.copy_(copy_src)`` before the
        kernel (``after`` False) or after it, enqueued with the launch when it can be one
        memcpy (``runtime/bound.py``)."""
        copy = None
        if copy_dst is not None:
            copy = _lazy.Copy(copy_dst, copy_src, after=after, nbytes=self.copy_bytes)
            self.copy_bytes = copy.nbytes
        self.bound(args, copy)

    def run_staged(self, a_shard, out):
        """An all-gather's call: stage ``a_shard`` into this rank's rows of the symmetric
        operand (``slot``; nothing to copy when it already is them) and launch with ``out``
        (allocated when None); returns ``out``.

        The per-call path of every eager call with this layout, written for speed: the copy
        goes to the bound launch as addresses (``BoundLaunch.fast``); anything the bound path
        does not take goes through :meth:`launch` with the CONSUMED wait before the staging
        (``FusedKernel.before_staging``). The bound path makes that wait itself where there is
        one: only ce defers it, and ce's bound launch (``CELauncher.bind``) enqueues it first."""
        if out is None:
            out = _lazy.empty(self.out_shape, device=a_shard.device, dtype=a_shard.dtype)
        args = self.args.copy()
        args[self.out_index] = out
        slot_ptr, slot_stride = self._slot_at
        src = a_shard.data_ptr()
        if src == slot_ptr and a_shard.stride() == slot_stride:  # written in place
            # the bound path makes the deferred CONSUMED wait itself (ce: in its ENTER kernel)
            if not self.bound.fast(args, None):
                self.fk.before_staging()
                self.bound(args)
            return out
        n = self.copy_bytes
        if n and self.bound.fast(args, (slot_ptr, src, n, False)):
            return out
        self.fk.before_staging()
        self.launch(args, self.slot, a_shard)
        return out

    def run_copy_out(self, a, out):
        """A reduce-scatter's or all-reduce's call: launch with ``a``, then copy the reduced
        rows (``result``, in the symmetric buffer the next launch overwrites; the copy is
        stream-ordered before it) into ``out`` (allocated when None); returns ``out``. The copy
        goes with the launch as in :meth:`run_staged`."""
        args = self.args.copy()
        args[self.a_index] = a
        if out is None:
            out = _lazy.empty(self.out_shape, device=a.device, dtype=a.dtype)
        n = self.copy_bytes
        if n and self.bound.fast(args, (out.data_ptr(), self._result_ptr, n, True)):
            return out
        self.launch(args, out, self.result, after=True)
        return out


class _Lazy:
    """Runtime names the ops' per-call paths use, imported at first use (the runtime's fused
    module pulls in the compiler) and then read as attributes: a function-level ``from ...
    import`` costs ~1 us per call, a sizeable part of a 20 us budget."""

    def __getattr__(self, name):
        if name == "Copy":
            from ..runtime.bound import Copy as value
        elif name == "Tensor":
            from torch import Tensor as value
        elif name == "empty":
            from torch import empty as value
        elif name == "fused_enabled":
            from ..runtime.fused import fused_enabled as value
        else:
            raise AttributeError(name)
        setattr(self, name, value)
        return value


_lazy = _Lazy()


def use_fused(fused) -> bool:
    """Whether an op call takes a fused path: ``fused`` when given, else unless ``SYNCOPATE=0``
    (``runtime.fused_enabled``)."""
    if fused is not None:
        return fused is not False
    return _lazy.fused_enabled()


_PREPARED = "ops.prepared"
_PREPARED_MAX = 64


def prepared_key(op: str, comm, a, b, out, options: tuple):
    """The layout of a call: ``a`` by shape, strides, dtype, device and 16-byte alignment (it is
    a fresh activation each step; its address goes into the arguments per call), ``b`` (a
    weight) and a given ``out`` by identity, the op's options, and the communicator's registry
    generation (a released buffer invalidates every prepared call). Runs on every eager call:
    written for speed (no closure, torch's Tensor type looked up once)."""
    T = _lazy.Tensor
    if not (isinstance(a, T) and isinstance(b, T) and (out is None or isinstance(out, T))):
        return None  # the op's checks say what is wrong
    return (op, a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16 == 0,
            b.data_ptr(), b.shape, b.stride(), b.dtype, b.device,
            None if out is None else (out.data_ptr(), out.shape, out.stride(), out.dtype,
                                      out.device),
            options, comm.generation)


def config_key(config):
    """``config`` as part of a per-call key: itself when hashable (a frozen ``GemmConfig``:
    hashing its fields costs a fraction of the ``repr`` the keys used, ~2 us per call), else
    its ``repr`` (a dict of overrides)."""
    if config is None:
        return None
    try:
        hash(config)
    except TypeError:
        return repr(config)
    return config


def get_prepared(comm, key):
    if key is None:
        return None
    prep = comm.cache.get(_PREPARED, {}).get(key)
    if prep is None or getattr(prep.fk, "_poisoned", None):
        return None
    return prep


def put_prepared(comm, key, prep: PreparedCall) -> None:
    """Store ``prep`` under ``key`` with the registry generation of *now*: preparing (and the
    first launch, which allocates the kernel's flags) registers symmetric buffers, and the
    next call must still find it."""
    if key is None:
        return
    key = key[:-1] + (comm.generation,)
    table = comm.cache.setdefault(_PREPARED, {})
    if len(table) >= _PREPARED_MAX:  # callers cycling through output buffers: bound it
        table.clear()
    table[key] = prep


# ------------------------------------------------------------------------------------------
# The op's path: fused, unfused or (world size 1) the local GEMM alone -- ops/choice.py
# ------------------------------------------------------------------------------------------

#: the ``kernel`` name of cuBLAS (``torch.matmul``): unfused and local paths only
CUBLAS = "cublas"


def triton_kernel(kernel) -> str:
    """Our local kernel of a call: ``kernel`` or, when the op may choose (None), ``tma``."""
    return "tma" if kernel is None else kernel


def check_kernel(kernel, config, fused_requested: bool) -> None:
    if kernel == CUBLAS:
        if config is not None:
            raise LaunchError("config= selects a tile config of our Triton kernel; cuBLAS "
                              "(kernel='cublas') takes none: drop config or use kernel='tma'")
        if fused_requested:
            raise LaunchError("kernel='cublas' cannot be fused (the compiler fuses Triton "
                              "kernels): use kernel='tma' for the fused path, or fused=False")


def local_gemm(kernel: str, a, b, out, config) -> None:
    """``out = a @ b`` with our kernel (``config``) or cuBLAS (``kernel='cublas'``)."""
    if kernel == CUBLAS:
        import torch
        torch.matmul(a, b, out=out)
        return
    run_local(gemm_call(kernel, a, b, out, config))


_GPU_BY_DEVICE: dict = {}


def gpu_of(comm) -> str | None:
    """The GPU type the op's decision is keyed on (from the device name: the same on every rank
    of a node; None for a non-CUDA device, e.g. the CPU tests' fake communicator). Memoised
    per device (a device's name does not change in a process)."""
    dev = comm.device
    if dev not in _GPU_BY_DEVICE:
        from ..calibration import device_gpu_type
        _GPU_BY_DEVICE[dev] = device_gpu_type(dev)
    return _GPU_BY_DEVICE[dev]


def decide(op: str, comm, m: int, n: int, k: int, dtype, *, kernel, config, fused,
           unavailable=()):
    """The op's path (:func:`syncopate.ops.choice.decide`): cuBLAS is a candidate only when the
    caller pinned neither our kernel nor its config."""
    from .choice import decide as _decide
    return _decide(op, m, n, k, comm.world_size, schedule_dtype(dtype), gpu_of(comm),
                   cublas=kernel is None and config is None, fused=fused,
                   unavailable=unavailable)


#: world size 1: (local GEMM, config) per call layout -- the op's checks and decision once per
#: layout, not per call (at W = 1 a small GEMM's host time is the op's Python: ~45 us per call
#: without this against ~7 us for torch.matmul on the CPU test host)
_W1_PLANS: dict = {}
_W1_PLANS_MAX = 256


def world_size_one(op: str, comm, a, b, out, kernel, config, ours: bool = False, check=None):
    """World size 1: nothing to communicate, so no fused machinery at all (no symmetric
    buffers, flags or comm programs) -- the local GEMM, ours or cuBLAS where the calibration
    says it is faster and the caller pinned neither our kernel, a config nor the unfused
    reference (``ours``: ``fused=False`` / ``SYNCOPATE=0``, whose contract is our kernel's
    bits): the op then costs what the best local GEMM costs. The result is ``a @ b`` (the
    all-gather and the reduce-scatter of one rank are the identity). ``check()``: the op's
    argument checks, run once per layout (shapes, dtypes and devices are the memo's key)."""
    import torch
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check()
    key = (op, a.shape, a.dtype, a.device, b.shape, b.dtype, b.device, comm.device, gpu_of(comm),
           kernel, repr(config), ours)
    plan = _W1_PLANS.get(key)
    if plan is None:
        from ..runtime import graphs
        if graphs.capturing():  # the decision and the kernel's compile and load are eager work
            raise graphs.cold_path(op)
        if check is not None:
            check()
        M, K = a.shape
        N = b.shape[1]
        if kernel == CUBLAS:
            plan = (CUBLAS, None)
        else:
            local = decide(op, comm, M, N, K, a.dtype, kernel=triton_kernel(kernel) if ours
                           else kernel, config=config, fused=None).choice.local
            k = triton_kernel(kernel)
            plan = (CUBLAS, None) if local == CUBLAS else \
                (k, resolve_config(k, M, N, K, a.dtype, config))
        if len(_W1_PLANS) >= _W1_PLANS_MAX:
            _W1_PLANS.clear()
        _W1_PLANS[key] = plan
    shape = (a.shape[0], b.shape[1])
    if out is None:
        out = torch.empty(shape, device=a.device, dtype=a.dtype)
    elif out.shape != shape or out.dtype != a.dtype:
        raise LaunchError(f"out must be [M, N] = {shape} in {a.dtype} at world size 1, got "
                          f"{tuple(out.shape)} {out.dtype}")
    local_gemm(plan[0], a, b, out, plan[1])
    return out


def route(op: str, comm, shape, dtype, *, fused, explicit: bool = False, cublas: bool = False,
          unavailable=()):
    """The decision of an op that may choose its path (:func:`syncopate.ops.choice.decide_shape`)
    -- ``fused`` None, ``SYNCOPATE`` not 0, no fused-only argument given (``explicit``: a
    backend, split, comm-program count ... is the caller's choice of the fused path), more
    than one rank -- else None: the caller's ``fused`` (or ``SYNCOPATE``) stands. The inputs
    are the same on every rank (shape, dtype, world size, the GPU type from the device name),
    so every rank takes the same path."""
    from ..runtime.fused import fused_enabled
    if fused is not None or explicit or comm.world_size == 1 or not fused_enabled():
        return None
    return fused_variant(op, comm, shape, dtype, cublas=cublas, unavailable=unavailable,
                         fused=None)


def fused_variant(op: str, comm, shape, dtype, *, cublas: bool = False, unavailable=(),
                  fused=True):
    """The decision restricted to ``fused`` (default: the fused variants only -- which one an
    op called with ``fused=True`` and no backend runs)."""
    from .choice import decide_shape
    return decide_shape(op, shape, comm.world_size, schedule_dtype(dtype), gpu_of(comm),
                        cublas=cublas, fused=fused, unavailable=tuple(unavailable))
