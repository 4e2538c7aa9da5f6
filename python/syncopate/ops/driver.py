"""The generic op driver: choose -> fuse -> launch, for every op from its :class:`~.spec.OpSpec`.

* choose: :func:`route` / :func:`fused_variant` / :func:`decide` ask
  :func:`syncopate.ops.choice.decide_shape` for the op's path (the same on every rank);
  :func:`world_size_one` runs the local kernel alone at W = 1; :func:`gemm_plan` and
  :func:`loopback_comm_programs` fix a fused variant's plan;
* fuse: :func:`cached_fused` keeps one FusedKernel per configuration on the communicator
  (:func:`fused_kernel` for the GEMM ops' templates);
* launch: a :class:`~syncopate.runtime.launch_plan.LaunchPlan` per argument layout (the op's
  Python once per layout), and :func:`gemm_op`, the whole call of a GEMM op (``ag_gemm``,
  ``gemm_rs``, ``gemm_ar``, ``ag_weight_gemm``) from its ``OpSpec.gemm``.

The fused and the unfused path of an op launch the **same** local kernel
(:mod:`syncopate.kernels`) with the **same** config, so the fused result is bitwise the result
of the local kernel on the gathered operand (the compiler adds waits/signals and remaps tile
order; it does not change a tile's arithmetic).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton

from .. import backends, calibration, kernels
from ..dtypes import canonical
from ..errors import LaunchError, TorchOpError
from ..kernels.gemm_config import _short
from ..runtime import collectives, graphs
from ..runtime.fused import fuse, fused_enabled
from ..runtime.launch_plan import LaunchPlan, find, keep
from ..runtime.residency import sm_share
from ..schedule import cost
from ..schedule.templates import TEMPLATES
from . import choice


@dataclass
class GemmCall:
    """A ready-to-launch local GEMM: ``fn[grid](*args, **options)``."""

    fn: object
    args: list
    grid: tuple
    options: dict
    kernel: str


def symmetric_buffer(comm, tag: str, shape, dtype):
    """The communicator's symmetric ``shape`` buffer of ``dtype`` for ``tag`` (an op's named
    buffer), allocated on first use -- a collective: every rank asks for it with the same
    shape -- and cached on the communicator."""
    shape = tuple(int(s) for s in shape)
    dt = torch.empty((), dtype=dtype).dtype
    key = (tag, shape, dt)
    buf = comm.cache.get(key)
    if buf is None:
        buf = comm.cache[key] = comm.empty(shape, dt)
    return buf


def short_kernel(kernel: str) -> str:
    try:
        return _short(kernel)
    except ValueError as e:
        raise LaunchError(str(e)) from None


def resolve_config(kernel: str, M: int, N: int, K: int, dtype, config=None):
    if config is None:
        return _default_config(kernel, M, N, K, dtype)
    k = short_kernel(kernel)
    cfg = kernels.GemmConfig.of(config)
    cfg.check(k, fusable=True)
    return cfg


@functools.lru_cache(maxsize=256)
def _default_config(kernel: str, M: int, N: int, K: int, dtype):
    """Memoised: the ops call this on every launch, and choosing a config costs milliseconds
    of Python, more than the GEMM itself at M = 1024."""
    k = short_kernel(kernel)
    cfg = kernels.default_config(M, N, K, dtype, k, fusable=True)
    cfg.check(k, fusable=True)
    return cfg


def gemm_call(kernel: str, a, b, c, config, *, num_programs: int | None = None) -> GemmCall:
    """The local GEMM ``c = a @ b`` as a kernel, positional args (constexprs in position, as
    Triton 3.6's launcher expects) and grid. ``num_programs``: the persistent kernel's
    ``NUM_SMS`` (programs of the tile loop); default: the device's SM count. ``c`` None: a new
    ``[M, N]`` output (a plan's first launch without ``out=``)."""
    if c is None:
        c = torch.empty((a.shape[0], b.shape[1]), device=a.device, dtype=a.dtype)
    k = short_kernel(kernel)
    M, N, K = kernels.check_operands(a, b, c, k)
    cfg = resolve_config(k, M, N, K, a.dtype, config)
    fn = kernels.kernel_fn(k)
    tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
    vals = dict(a_ptr=a, b_ptr=b, c_ptr=c, M=M, N=N, K=K, stride_am=a.stride(0),
                stride_ak=a.stride(1), stride_bk=b.stride(0), stride_bn=b.stride(1),
                stride_cm=c.stride(0), stride_cn=c.stride(1))  # tma takes no inner strides
    if k == "ptr":
        vals.update(cfg.constexprs(k))
        grid = (max(1, tiles),)
    else:
        sms = int(num_programs) if num_programs else kernels.num_sms(a.device)
        vals.update(cfg.constexprs(k, sms))
        grid = (max(1, min(sms, tiles)),)
    args = [vals[n] for n in fn.arg_names]
    return GemmCall(fn=fn, args=args, grid=grid, options=cfg.options(), kernel=k)


def run_local(call: GemmCall) -> None:
    """Launch the local (unfused) kernel on the current stream."""
    if call.kernel == "tma":
        kernels.ensure_tma_allocator()
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
    plan = cost.choose_gemm_plan(kind, M, N, K, world_size, canonical(dtype),
                                 backend=backend, comm_programs=comm_programs)
    return (int(split) if split is not None else int(plan["split"]),
            int(comm_programs) if comm_programs is not None else int(plan["comm_programs"]))


def compute_programs(comm, comm_programs: int) -> int:
    """Programs of the persistent GEMM's tile loop: the SMs this rank may use (all of them, or
    its share in loopback, :func:`syncopate.runtime.residency.sm_share`) minus the comm
    programs, which run in the same kernel on SMs of their own."""
    share = sm_share(kernels.num_sms(comm.device), getattr(comm, "colocated", 1))
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
    return max(1, min(int(chosen), sm_share(kernels.num_sms(comm.device), ranks) // 2))


def check_matrices(**named) -> None:
    """A GEMM op's two operands (by name): 2-D tensors of one dtype (:class:`LaunchError`)."""
    for name, t in named.items():
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise LaunchError(f"{name} must be a 2-D torch.Tensor")
    (n1, t1), (n2, t2) = named.items()
    if t1.dtype != t2.dtype:
        raise LaunchError(f"{n1} is {t1.dtype} but {n2} is {t2.dtype}: cast one of them")


def save_operands(ctx, inputs, output):
    """A GEMM torch op's autograd setup (``TorchOp.setup``): its group's name and its two
    operands, for a backward that needs both."""
    x, y, ctx.group_name = inputs[:3]
    ctx.save_for_backward(x, y)


def check_k_sharded(a, b_shard) -> None:
    """``a`` ``[M, K/W]`` and ``b_shard`` ``[K/W, N]``: 2-D tensors of one dtype whose inner
    dims agree (the operands of the K-sharded ops, ``gemm_rs`` and ``gemm_ar``)."""
    check_matrices(a=a, b_shard=b_shard)
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


def cached_fused(comm, key: tuple, fn, schedule, *, config=None, reduce: str = "comm",
                 **options):
    """The FusedKernel of ``fn`` fused with ``schedule()`` (built only on a miss), cached under
    ``key`` on the communicator (one per configuration, per communicator): :func:`fuse` with
    ``options``, ``config``'s compile options and ``reduce`` unless ``"comm"``. A kernel that
    timed out is rebuilt: its flags disagree across ranks."""
    fk = comm.cache.get(key)
    if fk is None or getattr(fk, "_poisoned", None):
        opts = config.options() if hasattr(config, "options") else {}
        if reduce != "comm":
            opts["reduce"] = reduce
        fk = comm.cache[key] = fuse(fn, schedule(), comm=comm, **options, **opts)
    return fk


def template_mode(kind, backend: str, mode=None) -> str:
    """``mode`` or, when None, a GEMM op's template mode on ``backend``: the backend's for the
    op's ``kind`` (``GemmLaunch.kind``, ``Backend.op_modes``), push for an op without one."""
    return mode or (backends.get(backend, LaunchError).op_modes[kind] if kind else "push")


def fused_kernel(comm, spec, shape, dim: int, dtype, *, backend, split, order, mode,
                 comm_programs, kernel, config, reduce: str = "comm"):
    """The cached FusedKernel of a GEMM op: the local ``kernel`` fused with the op's schedule
    template (``spec.gemm``) over ``shape``, sharded along ``dim``."""
    g = spec.gemm
    k = short_kernel(kernel)
    mode = template_mode(g.kind, backend, mode)
    return cached_fused(
        comm, (f"{spec.name}.fk", *shape, dim, str(dtype), backend, split, order, mode,
               comm_programs, k, repr(config), reduce), kernels.kernel_fn(k),
        lambda: TEMPLATES[g.template](tuple(shape), canonical(dtype), comm.world_size,
                                      dim=dim, order=order, mode=mode, split=split),
        config=config, reduce=reduce, operand=g.operand, backend=backend,
        comm_programs=kernel_comm_programs(backend, comm_programs), defer_consumed_wait=g.staged)


def use_fused(fused) -> bool:
    """Whether an op call takes a fused path: ``fused`` when given, else unless ``SYNCOPATE=0``
    (``runtime.fused_enabled``)."""
    return fused_enabled() if fused is None else fused is not False


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
    return fused_variant(spec, comm, dims, dtype, cublas=kernel is None and config is None,
                         fused=fused, unavailable=unavailable)


def world_size_one(spec, comm, a, b, out, kernel, config, ours: bool, check):
    """World size 1: nothing to communicate, so no fused machinery at all (no symmetric
    buffers, flags or comm programs) -- the local GEMM, ours or cuBLAS where the calibration
    says it is faster and the caller pinned neither our kernel, a config nor the unfused
    reference (``ours``: ``fused=False`` / ``SYNCOPATE=0``, whose contract is our kernel's
    bits): the op then costs what the best local GEMM costs. The result is ``a @ b`` (the
    collective of one rank is the identity). The op's checks (``check()``) and decision run
    once per layout (shapes, dtypes and devices are the key), kept as the layout's
    :class:`LaunchPlan` (its ``local`` launch): at W = 1 a small GEMM's host time is the op's
    Python, ~45 us per call without it against ~7 us for torch.matmul on the CPU test host."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        check()
    key = (spec.name, a.shape, a.dtype, a.device, b.shape, b.dtype, b.device, comm.device,
           kernel, repr(config), ours)
    plan = find(comm, key)
    if plan is None:
        if graphs.capturing():  # the decision and the kernel's compile and load are eager work
            raise graphs.cold_path(spec.name)
        check()
        dims = spec.gemm.dims(a, b, 1)
        M, N, K = dims[:3]
        k, cfg = CUBLAS, None
        if kernel != CUBLAS and decide(spec, comm, dims, a.dtype, kernel=triton_kernel(kernel)
                                       if ours else kernel, config=config,
                                       fused=None).choice.local != CUBLAS:
            k = triton_kernel(kernel)
            cfg = resolve_config(k, M, N, K, a.dtype, config)
        plan = LaunchPlan(local=lambda a, b, out: local_gemm(k, a, b, out, cfg))
        keep(comm, key, plan)
    shape = (a.shape[0], b.shape[1])
    if out is None:
        out = torch.empty(shape, device=a.device, dtype=a.dtype)
    elif out.shape != shape or out.dtype != a.dtype:
        raise LaunchError(f"out must be [M, N] = {shape} in {a.dtype} at world size 1, got "
                          f"{tuple(out.shape)} {out.dtype}")
    plan.local(a, b, out)
    return out


def route(spec, comm, shape, dtype, *, fused, explicit: bool = False, unavailable=()):
    """The decision of an op that may choose its path (:func:`syncopate.ops.choice.decide_shape`)
    -- ``fused`` None, ``SYNCOPATE`` not 0, no fused-only argument given (``explicit``: a
    backend, split, comm-program count ... is the caller's choice of the fused path), more
    than one rank -- else None: the caller's ``fused`` (or ``SYNCOPATE``) stands. The inputs
    are the same on every rank (shape, dtype, world size, the GPU type from the device name),
    so every rank takes the same path."""
    if fused is not None or explicit or comm.world_size == 1 or not fused_enabled():
        return None
    return fused_variant(spec, comm, shape, dtype, unavailable=unavailable, fused=None)


def fused_variant(spec, comm, shape, dtype, *, cublas: bool = False, unavailable=(),
                  fused=True):
    """The decision restricted to ``fused`` (default: the fused variants only -- which one an
    op called with ``fused=True`` and no backend runs)."""
    return choice.decide_shape(spec.name, shape, comm.world_size, canonical(dtype),
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


def gemm_key(op: str, comm, a, b, out, options: tuple, b_by_layout: bool = False):
    """The layout of a GEMM op's call (its :class:`LaunchPlan`'s key): ``a`` by shape, strides,
    dtype, device and 16-byte alignment (it is a fresh activation each step; its address goes
    into the arguments per call), ``b`` (a weight) and a given ``out`` by identity -- ``b`` by
    layout too when ``b_by_layout`` (a shard the call stages: its address is read per call) --,
    the op's options (kernel and config included, :func:`config_key`), and the communicator's
    registry generation (a released buffer invalidates every plan). Runs on every eager call:
    written for speed (no closure, torch's Tensor type looked up once)."""
    T = torch.Tensor
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


def prepare(spec, comm, fk, x, y, out, cfg, s: dict, kernel: str, programs) -> LaunchPlan:
    """The :class:`LaunchPlan` of a fused GEMM op's layout (decision shape ``s``): the local
    GEMM ``x @ y`` with the op's symmetric buffer (``GemmLaunch.buffer``, the template's
    tensor) as its ``operand``. An op that gathers stages into this rank's block of it (along
    the template's dim) and writes ``out``; one that reduces copies out this rank's rows (all
    of them with ``whole``)."""
    g = spec.gemm
    W, M, N = comm.world_size, s["m"], s["n"]
    shape, dim = g.schedule_shape(s, W)
    buf = symmetric_buffer(comm, g.buffer, shape, x.dtype)
    block = buf.narrow(dim, comm.rank * (shape[dim] // W), shape[dim] // W)
    call = gemm_call(kernel, *(buf if p == g.operand else t for p, t in
                               (("a_ptr", x), ("b_ptr", y), ("c_ptr", out))), cfg,
                     num_programs=programs)
    a_index = None if g.operand == "a_ptr" else call.fn.arg_names.index("a_ptr")
    if g.staged:
        return LaunchPlan(fk=fk, grid=call.grid, args=list(call.args), out_shape=(M, N),
                          a_index=a_index, out_index=call.fn.arg_names.index("c_ptr"),
                          slot=block)
    rows = M if g.whole else M // W
    if not g.whole and out is not None and (tuple(out.shape) != (rows, N)
                                            or out.dtype != x.dtype):
        raise LaunchError(f"out must be this rank's [M/W, N] = {(rows, N)} rows in {x.dtype}, got "
                          f"{tuple(out.shape)} {out.dtype}")
    return LaunchPlan(fk=fk, grid=call.grid, args=list(call.args), out_shape=(rows, N),
                      a_index=a_index, result=buf if g.whole else block)


def _run(g, plan, x, y, out):
    """A plan's launch: the gathered shard staged (``x``, or ``y`` for an op that gathers its
    second operand), or the reduced rows copied out."""
    if not g.staged:
        return plan.run_copy_out(x, out)
    return plan.run_staged(y, out, x) if g.stages_y else plan.run_staged(x, out)


def gemm_op(spec, x, y, comm, out, fused, kernel, config, options: tuple):
    """The call ``spec.fn(x, y, comm, **options, kernel=, config=, out=, fused=)`` of a GEMM
    op (``OpSpec.gemm``; ``options``: the values of :data:`OPTIONS`), the same for every one:

    * per argument layout, once it ran fused: the layout's key, its cached
      :class:`LaunchPlan`, its launch -- nothing else;
    * world size 1: :func:`world_size_one`;
    * ``fused=False``, ``SYNCOPATE=0`` or ``kernel='cublas'``: the op's unfused reference;
    * no backend (nor reduce) given: the decision (:func:`decide`; fused only when ``fused``
      is True or a fused-only option is given) -- the unfused path with its local kernel, or
      a fused variant;
    * a fused variant: its plan (``g.plan``), the cached FusedKernel, the op's buffers and
      argument list (:func:`prepare`), launched and kept for the next call of this layout."""
    g = spec.gemm
    use = fused_enabled() if fused is None else fused is not False  # use_fused, inline
    W = comm.world_size
    key = None
    if use and W > 1:
        key = gemm_key(spec.name, comm, x, y, out, options + (kernel, config_key(config)),
                       g.stages_y)
        plan = find(comm, key)
        if plan is not None:  # _run, inline (this is the whole per-call path of a layout)
            if not g.staged:
                return plan.run_copy_out(x, out)
            return plan.run_staged(y, out, x) if g.stages_y else plan.run_staged(x, out)
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
                      order=order, mode=template_mode(g.kind, backend, mode),
                      comm_programs=cp, kernel=tk, config=cfg, reduce=reduce)
    nprog = None
    if short_kernel(tk) == "tma":
        # the comm programs take SMs of their own: the persistent GEMM gets the rest
        nprog = compute_programs(comm, kernel_comm_programs(backend, cp))
    plan = prepare(spec, comm, fk, x, y, out, cfg, s, tk, nprog)
    result = _run(g, plan, x, y, out)
    if key is not None:  # the generation of after the first launch (it allocates the flags)
        keep(comm, key[:-1] + (comm.generation,), plan)
    return result
