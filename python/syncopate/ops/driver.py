"""The generic op driver: choose -> fuse -> launch, for every op from its :class:`~.spec.OpSpec`.

* choose: :func:`route` / :func:`fused_variant` / :func:`decide` ask
  :func:`syncopate.ops.choice.decide_shape` for the op's path (the same on every rank);
  :func:`world_size_one` runs the local kernel alone at W = 1; :func:`gemm_plan` and
  :func:`loopback_comm_programs` fix a fused variant's plan;
* fuse: :func:`cached_fused` keeps one FusedKernel per configuration on the communicator
  (:func:`fused_kernel` for the GEMM ops' templates);
* launch: :class:`PreparedCall`, the op's Python once per argument layout, and
  :func:`gemm_op`, the whole call of a GEMM op (``ag_gemm``, ``gemm_rs``, ``gemm_ar``,
  ``ag_weight_gemm``) from its ``OpSpec.gemm``.

The fused and the unfused path of an op launch the **same** local kernel
(:mod:`syncopate.kernels`) with the **same** config, so the fused result is bitwise the result
of the local kernel on the gathered operand (the compiler adds waits/signals and remaps tile
order; it does not change a tile's arithmetic).
"""

from __future__ import annotations

import functools

from dataclasses import dataclass

from .. import backends, calibration
from ..dtypes import canonical
from ..errors import LaunchError, TorchOpError
from ..runtime import collectives, graphs
from ..runtime.residency import sm_share
from ..schedule import cost
from ..schedule.model import normalize_dtype
from ..schedule.templates import TEMPLATES
from . import choice


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
    ``NUM_SMS`` (programs of the tile loop); default: the device's SM count. ``c`` None: a new
    ``[M, N]`` output (a prepared call's first launch without ``out=``)."""
    import triton

    from ..kernels import check_operands, kernel_fn, num_sms
    if c is None:
        c = _lazy.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
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


@functools.lru_cache(maxsize=256)
def gemm_plan(kind: str, backend: str, M: int, N: int, K: int, world_size: int, dtype, split,
              comm_programs) -> tuple[int, int]:
    """``(split, comm_programs)`` of a fused GEMM with an all-gather (``kind`` ``"ag"``: ``N``,
    ``K`` this rank's, ``M`` the gathered) or a reduce-scatter (``"rs"``: ``K`` this rank's
    shard): the caller's, else the cost model's
    (:func:`syncopate.schedule.cost.choose_gemm_plan`). Memoised (~10 ms of Python per call
    otherwise, on every launch); a backend without comm programs (ce) has none."""
    if not backends.get(backend, LaunchError).has_comm_programs:
        comm_programs = 0  # e.g. the copy engine needs no programs in the kernel
    if split is not None and comm_programs is not None:
        return int(split), int(comm_programs)
    plan = cost.choose_gemm_plan(kind, M, N, K, world_size, normalize_dtype(schedule_dtype(dtype)),
                                 backend=backend, comm_programs=comm_programs)
    return (int(split) if split is not None else int(plan["split"]),
            int(comm_programs) if comm_programs is not None else int(plan["comm_programs"]))


def compute_programs(comm, comm_programs: int) -> int:
    """Programs of the persistent GEMM's tile loop: the SMs this rank may use (all of them, or
    its share in loopback, :func:`syncopate.runtime.residency.sm_share`) minus the comm
    programs, which run in the same kernel on SMs of their own."""
    from ..kernels import num_sms
    share = sm_share(num_sms(comm.device), getattr(comm, "colocated", 1))
    return max(1, share - int(comm_programs))


def kernel_comm_programs(backend: str, comm_programs: int) -> int:
    """The programs ``backend`` adds to the kernel's grid (0 for a backend without comm
    programs)."""
    return int(comm_programs) if backends.get(backend, LaunchError).has_comm_programs else 0


def loopback_comm_programs(comm, chosen: int, requested) -> int:
    """The cost model's comm-program count assumes a whole GPU per rank; in loopback a rank
    has ``sm_share`` SMs, so a count the caller did not fix is capped at half of them (the
    GEMM keeps the other half and the kernel stays co-resident with the other ranks')."""
    ranks = getattr(comm, "colocated", 1)
    if requested is not None or ranks <= 1 or not chosen:
        return chosen
    from ..kernels import num_sms
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


def all_gather_rows(x, group, W: int):
    """``[W * rows, ...]``: every rank's ``x`` in rank order, through the group's collectives
    (NCCL, gloo or loopback: the ops' unfused paths and their CPU compositions)."""
    gathered = x.new_empty((x.shape[0] * W, *x.shape[1:]))
    collectives.all_gather_into_tensor(gathered, x.contiguous(), group=group)
    return gathered


def reduce_scatter_rows(x, group, W: int):
    """This rank's ``[rows / W, ...]`` of the sum over ranks of ``x`` (the group's
    collectives, as :func:`all_gather_rows`)."""
    out = x.new_empty((x.shape[0] // W, *x.shape[1:]))
    collectives.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


def torch_matrices(op: str, **named) -> None:
    """The checks of a ``torch.ops.syncopate`` GEMM op's two matrices (at trace time too):
    2-D, one dtype, one device (:class:`TorchOpError` saying what to change)."""
    for name, t in named.items():
        if t.dim() != 2:
            raise TorchOpError(f"{op}: {name} must be 2-D, got shape {tuple(t.shape)}: reshape it "
                               f"to a matrix (e.g. {name}.flatten(0, -2) for a batch of rows)")
    (n1, t1), (n2, t2) = named.items()
    if t1.dtype != t2.dtype:
        raise TorchOpError(f"{op}: {n1} is {t1.dtype} but {n2} is {t2.dtype}: cast one of them "
                           f"(e.g. {n2}.to({t1.dtype}))")
    if t1.device != t2.device:
        raise TorchOpError(f"{op}: {n1} is on {t1.device} but {n2} is on {t2.device}: move "
                           f"{n2} with .to({str(t1.device)!r})")


def schedule_dtype(dtype) -> str:
    """The schedule's (canonical) name of a torch dtype or any other spelling."""
    return canonical(dtype)


def cached_fused(comm, key: tuple, build):
    """The FusedKernel cached under ``key`` on the communicator, ``build()`` on a miss (one per
    configuration, per communicator). A kernel that timed out is rebuilt: its flags disagree
    across ranks."""
    fk = comm.cache.get(key)
    if fk is None or getattr(fk, "_poisoned", None):
        fk = build()
        comm.cache[key] = fk
    return fk


def template_mode(spec, backend: str, mode=None) -> str:
    """``mode`` or, when None, the GEMM op's template mode on ``backend``: the backend's for the
    op's kind (``Backend.op_modes``), push for an op without one."""
    g = spec.gemm
    return mode or (backends.get(backend, LaunchError).op_modes[g.kind] if g.kind else "push")


def fused_kernel(comm, spec, shape, dim: int, dtype, *, backend, split, order, mode,
                 comm_programs, kernel, config, reduce: str = "comm"):
    """The cached FusedKernel of a GEMM op: the local ``kernel`` fused with the op's schedule
    template (``spec.gemm``) over ``shape``, sharded along ``dim``."""
    from ..kernels import kernel_fn
    from ..runtime.fused import fuse

    g = spec.gemm
    k = short_kernel(kernel)
    be = backends.get(backend, LaunchError)
    mode = template_mode(spec, backend, mode)

    def build():
        sched = TEMPLATES[g.template](tuple(shape), schedule_dtype(dtype), comm.world_size,
                                      dim=dim, order=order, mode=mode, split=split)
        opts = config.options() if hasattr(config, "options") else {}
        if reduce != "comm":
            opts["reduce"] = reduce
        return fuse(kernel_fn(k), sched, operand=g.operand, backend=backend,
                    comm_programs=comm_programs if be.has_comm_programs else 0, comm=comm,
                    defer_consumed_wait=g.staged, **opts)
    return cached_fused(comm, (f"{spec.name}.fk", *shape, dim, str(dtype), backend, split, order,
                               mode, comm_programs, k, repr(config), reduce), build)


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

    def run_staged(self, a_shard, out, a=None):
        """An all-gather's call: stage ``a_shard`` into this rank's block of the symmetric
        operand (``slot``; nothing to copy when it already is it) and launch with ``out``
        (allocated when None) and, when the gathered operand is not the kernel's first, ``a``
        at ``a_index``; returns ``out``.

        The per-call path of every eager call with this layout, written for speed: the copy
        goes to the bound launch as addresses (``BoundLaunch.fast``); anything the bound path
        does not take goes through :meth:`launch` with the CONSUMED wait before the staging
        (``FusedKernel.before_staging``). The bound path makes that wait itself where there is
        one: only ce defers it, and ce's bound launch (``CELauncher.bind``) enqueues it first."""
        if out is None:
            out = _lazy.empty(self.out_shape, device=a_shard.device, dtype=a_shard.dtype)
        args = self.args.copy()
        args[self.out_index] = out
        if a is not None:
            args[self.a_index] = a
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


def prepared_key(op: str, comm, a, b, out, options: tuple, b_by_layout: bool = False):
    """The layout of a call: ``a`` by shape, strides, dtype, device and 16-byte alignment (it is
    a fresh activation each step; its address goes into the arguments per call), ``b`` (a
    weight) and a given ``out`` by identity -- ``b`` by layout too when ``b_by_layout`` (a
    shard the call stages: its address is read per call) --, the op's options, and the
    communicator's registry generation (a released buffer invalidates every prepared call).
    Runs on every eager call: written for speed (no closure, torch's Tensor type looked up
    once)."""
    T = _lazy.Tensor
    if not (isinstance(a, T) and isinstance(b, T) and (out is None or isinstance(out, T))):
        return None  # the op's checks say what is wrong
    return (op, a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16 == 0,
            b.data_ptr() % 16 == 0 if b_by_layout else b.data_ptr(), b.shape, b.stride(),
            b.dtype, b.device,
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
# The op's path: fused, unfused or (world size 1) the local kernel alone -- ops/choice.py
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
        _GPU_BY_DEVICE[dev] = calibration.device_gpu_type(dev)
    return _GPU_BY_DEVICE[dev]


def decide(spec, comm, dims, dtype, *, kernel, config, fused, unavailable=()):
    """The GEMM op's path on its decision shape ``dims`` (``GemmLaunch.dims``,
    :func:`syncopate.ops.choice.decide_shape`): cuBLAS is a candidate only when the caller
    pinned neither our kernel nor its config."""
    return choice.decide_shape(spec.name, dims, comm.world_size, schedule_dtype(dtype),
                               gpu_of(comm), cublas=kernel is None and config is None,
                               fused=fused, unavailable=unavailable)


#: world size 1: (local GEMM, config) per call layout -- the op's checks and decision once per
#: layout, not per call (at W = 1 a small GEMM's host time is the op's Python: ~45 us per call
#: without this against ~7 us for torch.matmul on the CPU test host)
_W1_PLANS: dict = {}
_W1_PLANS_MAX = 256


def world_size_one(spec, comm, a, b, out, kernel, config, ours: bool = False, check=None):
    """World size 1: nothing to communicate, so no fused machinery at all (no symmetric
    buffers, flags or comm programs) -- the local GEMM, ours or cuBLAS where the calibration
    says it is faster and the caller pinned neither our kernel, a config nor the unfused
    reference (``ours``: ``fused=False`` / ``SYNCOPATE=0``, whose contract is our kernel's
    bits): the op then costs what the best local GEMM costs. The result is ``a @ b`` (the
    collective of one rank is the identity). ``check()``: the op's argument checks, run once
    per layout (shapes, dtypes and devices are the memo's key)."""
    import torch
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check()
    key = (spec.name, a.shape, a.dtype, a.device, b.shape, b.dtype, b.device, comm.device,
           gpu_of(comm), kernel, repr(config), ours)
    plan = _W1_PLANS.get(key)
    if plan is None:
        if graphs.capturing():  # the decision and the kernel's compile and load are eager work
            raise graphs.cold_path(spec.name)
        if check is not None:
            check()
        dims = spec.gemm.dims(a, b, 1)
        M, N, K = dims[:3]
        if kernel == CUBLAS:
            plan = (CUBLAS, None)
        else:
            local = decide(spec, comm, dims, a.dtype, kernel=triton_kernel(kernel) if ours
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


def route(spec, comm, shape, dtype, *, fused, explicit: bool = False, cublas: bool = False,
          unavailable=()):
    """The decision of an op that may choose its path (:func:`syncopate.ops.choice.decide_shape`)
    -- ``fused`` None, ``SYNCOPATE`` not 0, no fused-only argument given (``explicit``: a
    backend, split, comm-program count ... is the caller's choice of the fused path), more
    than one rank -- else None: the caller's ``fused`` (or ``SYNCOPATE``) stands. The inputs
    are the same on every rank (shape, dtype, world size, the GPU type from the device name),
    so every rank takes the same path."""
    if fused is not None or explicit or comm.world_size == 1 or not _lazy.fused_enabled():
        return None
    return fused_variant(spec, comm, shape, dtype, cublas=cublas, unavailable=unavailable,
                         fused=None)


def fused_variant(spec, comm, shape, dtype, *, cublas: bool = False, unavailable=(),
                  fused=True):
    """The decision restricted to ``fused`` (default: the fused variants only -- which one an
    op called with ``fused=True`` and no backend runs)."""
    return choice.decide_shape(spec.name, shape, comm.world_size, schedule_dtype(dtype),
                               gpu_of(comm), cublas=cublas, fused=fused,
                               unavailable=tuple(unavailable))


def choose(spec, comm, shape, dtype, *, fused, explicit: bool, named: bool, unavailable=()):
    """``(fused path?, the decision's candidate or None)`` of an op called with ``fused`` not
    False on more than one rank: the decision when the caller left the path open
    (:func:`route`), the best fused variant when the caller asked for the fused path
    (``fused=True`` or a fused-only option) without ``named`` the variant (backend, comm
    programs ...) itself, else the caller's fused path (no candidate)."""
    d = route(spec, comm, shape, dtype, fused=fused, explicit=explicit, unavailable=unavailable)
    if d is None and not named:
        d = fused_variant(spec, comm, shape, dtype, unavailable=unavailable)
    return d is None or d.choice.path == "fused", None if d is None else d.choice


# ------------------------------------------------------------------------------------------
# A GEMM op's whole call
# ------------------------------------------------------------------------------------------

#: the options of a GEMM op's call, in the order :func:`gemm_op` takes them (``None``: not
#: given, or not an option of the op)
OPTIONS = ("backend", "split", "order", "mode", "comm_programs", "reduce")


def gemm_key(spec, comm, x, y, out, options: tuple, kernel, config):
    """The prepared-call key of a GEMM op's call (:func:`prepared_key`)."""
    return prepared_key(spec.name, comm, x, y, out, options + (kernel, config_key(config)),
                        spec.gemm.stages_y)


def _run(g, prep, x, y, out):
    """A prepared call's launch: the gathered shard staged (``x``, or ``y`` for an op that
    gathers its second operand), or the reduced rows copied out."""
    if not g.staged:
        return prep.run_copy_out(x, out)
    return prep.run_staged(y, out, x) if g.stages_y else prep.run_staged(x, out)


def gemm_op(spec, x, y, comm, out, fused, kernel, config, options: tuple):
    """The call ``spec.fn(x, y, comm, **options, kernel=, config=, out=, fused=)`` of a GEMM
    op (``OpSpec.gemm``; ``options``: the values of :data:`OPTIONS`), the same for every one:

    * per argument layout, once it ran fused: the prepared call (the layout's key, the cached
      :class:`PreparedCall`, its launch) -- nothing else;
    * world size 1: :func:`world_size_one`;
    * ``fused=False``, ``SYNCOPATE=0`` or ``kernel='cublas'``: the op's unfused reference;
    * no backend (nor reduce) given: the decision (:func:`decide`; fused only when ``fused``
      is True or a fused-only option is given) -- the unfused path with its local kernel, or
      a fused variant;
    * a fused variant: its plan (``g.plan``), the cached FusedKernel, the op's buffers and
      argument list (``g.prepare``), launched and kept for the next call of this layout."""
    g = spec.gemm
    use = _lazy.fused_enabled() if fused is None else fused is not False  # use_fused, inline
    W = comm.world_size
    key = None
    if use and W > 1:
        # gemm_key inline (a call less: this is the whole per-call path of a prepared layout)
        key = prepared_key(spec.name, comm, x, y, out, options + (kernel, config_key(config)),
                           g.stages_y)
        prep = get_prepared(comm, key)
        if prep is not None:  # _run, inline
            if not g.staged:
                return prep.run_copy_out(x, out)
            return prep.run_staged(y, out, x) if g.stages_y else prep.run_staged(x, out)
    backend, split, order, mode, comm_programs, reduce = options
    named = dict(zip(OPTIONS, options))
    explicit = any(named[k] is not None for k in g.explicit)
    check_kernel(kernel, config, fused is True or explicit)
    if W == 1:
        return world_size_one(spec, comm, x, y, out, kernel, config, ours=not use,
                              check=lambda: g.check(x, y, comm, out))
    g.check(x, y, comm, out)
    dims = g.dims(x, y, W)
    M, N, K = dims[:3]
    tk = triton_kernel(kernel)
    cfg = None if kernel == CUBLAS else resolve_config(tk, M, N, K, x.dtype, config)
    if not use or kernel == CUBLAS:
        return g.reference(x, y, comm, kernel=kernel or tk, config=cfg, out=out)
    if backend is None and reduce is None:
        un = g.unavailable(M, W, cfg, config is not None) if g.unavailable else ()
        c = decide(spec, comm, dims, x.dtype, kernel=kernel, config=config,
                   fused=True if fused is True or explicit else None, unavailable=un).choice
        if c.path != "fused":
            return g.reference(x, y, comm, kernel=CUBLAS if c.local == CUBLAS else tk,
                               config=cfg, out=out)
        backend, reduce = c.backend, c.reduce
    backend, reduce = backend or ("ce" if reduce == "epilogue" else "sm"), reduce or "comm"
    if g.variant is not None:  # the variant's own checks; its config (e.g. GROUP_M lowered)
        cfg = g.variant(backend, reduce, M, W, cfg, config is not None)
    s = dict(zip(spec.shape, dims))
    order, split, cp = g.plan(backend, reduce, s, W, x.dtype, order, split, comm_programs, cfg)
    cp = loopback_comm_programs(comm, cp, comm_programs)
    shape, dim = g.schedule_shape(s, W)
    fk = fused_kernel(comm, spec, shape, dim, x.dtype, backend=backend, split=split,
                      order=order, mode=template_mode(spec, backend, mode),
                      comm_programs=cp, kernel=tk, config=cfg, reduce=reduce)
    nprog = None
    if short_kernel(tk) == "tma":
        # the comm programs take SMs of their own: the persistent GEMM gets the rest
        nprog = compute_programs(comm, kernel_comm_programs(backend, cp))
    prep = g.prepare(comm, fk, x, y, out, cfg, M, N, K, tk, nprog)
    result = _run(g, prep, x, y, out)
    put_prepared(comm, key, prep)  # after the first launch (it allocates the flags)
    return result
