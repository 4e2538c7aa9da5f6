"""An op as data: :class:`OpSpec`, and the registry every generic reader walks.

One ``OpSpec`` per op, defined next to the op (``SPEC`` in its module) and registered in
:mod:`syncopate.ops` (one line). What an op is lives there and nowhere else: the shape its
path decision takes, its fused variants and the candidates' cost models
(:mod:`syncopate.ops.choice` weighs them), its launch plan (:mod:`syncopate.ops.driver`
chooses, fuses and launches), how ``syncopate explain`` reads its global shape, which
benchmark columns calibrate it (:mod:`syncopate.bench.fit`), its benchmark rows
(:mod:`syncopate.bench`) and its ``torch.library`` schema (:mod:`syncopate.torch_ops`).
Why: an op scattered over string-keyed tables (nine of them before this module) is one that
a new op silently falls through -- e.g. gets another op's plan -- instead of one place that
says what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import LaunchError

__all__ = ["Bench", "Cand", "FxPattern", "GemmLaunch", "OpSpec", "TorchOp", "REGISTRY",
           "register", "get"]


@dataclass(frozen=True)
class Cand:
    """One way to run an op before calibration scaling (:func:`syncopate.ops.choice.decide`):
    ``model(shape_dict, W) -> (seconds, note)``; ``key``: its entry in the calibration file's
    ``ops`` section; ``host``: host-time keys (summed), the first present of each tuple;
    ``calibrated``: the model's time is already measured (a local GEMM in its own dtype, a
    fused variant scaled by the file's ``fused`` section), so no ``ops`` entry is needed."""

    name: str
    key: str
    path: str  # "fused", "unfused" or "local"
    model: Callable | None
    host: tuple = ()
    local: str | None = None
    backend: str | None = None
    reduce: str | None = None
    plan: tuple | None = None  # (split, comm_programs) of this shape, for the table
    available: bool = True
    why: str = ""
    base_ratio: float | None = None  # FP8 fused: the bf16 op's measured/model at this shape
    calibrated: bool = False


@dataclass(frozen=True)
class GemmLaunch:
    """The launch of a GEMM op that :func:`syncopate.ops.driver.gemm_op` runs: the local GEMM
    ``c = a @ b`` fused with the schedule ``template`` over one of its operands.

    ``staged`` ops gather an input (``operand`` ``a_ptr`` or ``b_ptr``: the caller's shard is
    copied into its block of a symmetric buffer, then the kernel reads the whole); the others
    reduce the output (``c_ptr``: the kernel's partial C goes to a symmetric buffer and the
    call copies the reduced rows out). ``explicit``: the keyword options that mean "the fused
    path" when given. The callables take the op's operands ``(x, y)`` as the op was called."""

    template: str
    operand: str
    #: the tag of the op's symmetric buffer (the template's tensor, bound to ``operand``)
    buffer: str
    #: the backend's template mode for this op (``Backend.op_modes`` key); None: push
    kind: str | None
    staged: bool
    explicit: tuple[str, ...]
    check: Callable  # (x, y, comm, out) -> None; LaunchError saying what to change
    #: (x, y, W) -> the decision shape (``OpSpec.shape``), the local GEMM's M, N, K first
    dims: Callable
    schedule_shape: Callable  # (shape dict, W) -> (shape, dim) of the template's tensor
    reference: Callable  # (x, y, comm, *, kernel, config, out): the unfused path
    plan: Callable  # (backend, reduce, shape dict, W, dtype, order, split, comm_programs,
    #                 cfg) -> (order, split, comm_programs)
    #: (M, W, cfg, config_given) -> ((variant, reason), ...) the decision must leave out
    unavailable: Callable | None = None
    #: (backend, reduce, M, W, cfg, config_given) -> cfg: the chosen variant's checks
    variant: Callable | None = None
    #: the second operand is the gathered shard, staged per call (and so keyed by layout, not
    #: by identity as a weight is); else the first is (``staged``)
    stages_y: bool = False
    #: every rank's result is the whole reduced buffer (an all-reduce), not its rows
    whole: bool = False


@dataclass(frozen=True)
class Bench:
    """The op's rows in ``python -m syncopate.bench`` (a row: the op at one global ``M, N, K``,
    every column side by side), chosen by any of ``tokens`` in ``--ops``: its standard global
    ``shapes`` ``(N, K)`` at each of its ``ms`` (``(full, --quick)``; ``--m`` gives others;
    ``--quick`` takes the first shape), measured by ``row``, the row function as
    ``"module:function"`` of :mod:`syncopate.bench` (which sits above the ops: named here,
    imported there)."""

    tokens: tuple[str, ...]
    shapes: tuple[tuple[int, int], ...]
    row: str
    ms: tuple = ((8192, 1024, 4096), (8192,))


@dataclass(frozen=True)
class FxPattern:
    """The plain-PyTorch code that ``torch.compile``'s opt-in pass
    (:mod:`syncopate.torch_ops.fx_pass`) rewrites into the op: one
    ``torch.ops._c10d_functional.<collective>`` on dim 0 (and its ``wait_tensor``) with one
    ``aten.mm``, the views between them flattening or restoring leading dims. ``operand``:
    ``"a"`` -- the collective's result is the matmul's left operand (an all-gather; with
    ``returns_gathered``, the keyword that makes the op also return that gathered operand, so
    other readers of the gather share it); ``"c"`` -- the matmul's product is the collective's
    input (a reduce-scatter with the ``reduce`` op). Why here: a new op that fuses a
    collective with a GEMM names its pattern beside its schema and the pass picks it up."""

    collective: str
    operand: str
    returns_gathered: str | None = None
    reduce: str | None = None


@dataclass(frozen=True)
class TorchOp:
    """``torch.ops.syncopate.<name>(x, y, str group_name, *rest)``, registered from this by
    :mod:`syncopate.torch_ops.library` (which resolves ``group_name``). ``check(x, y, W,
    *rest)``: shapes, dtypes (a :class:`~syncopate.errors.TorchOpError`, at trace time too);
    ``impl(x, y, group, W, *rest)``: any device but CUDA -- the unfused composition through
    :mod:`syncopate.runtime.collectives`, so CPU tests run, differentiate and ``opcheck`` the
    op; ``cuda(x, y, comm, *rest)``: the op itself; ``fake(x, y, W, *rest)``: shapes only;
    ``setup``/``backward``: its autograd (``torch.library.register_autograd``); ``model(x, y,
    group_name)``: ``syncopate.torch_ops.<name>``, the function model code calls; ``pattern``:
    what the compile pass rewrites into it (None: nothing).

    ``tensors``: how many tensors precede ``group_name`` (``x, y`` above; attention's ``q, k,
    v``: 3) -- every callable takes them in that place. ``companions``: further custom ops
    registered with this one, ``(suffix, TorchOp)`` -> ``torch.ops.syncopate.<name>_<suffix>``
    (no ``model``): e.g. a backward that must be one node of a traced graph, so that AOT
    autograd can trace the op's ``backward`` (a Python function launching kernels cannot be)."""

    schema: str
    check: Callable
    impl: Callable
    cuda: Callable
    fake: Callable
    model: Callable | None = None
    setup: Callable | None = None
    backward: Callable | None = None
    tensors: int = 2
    companions: tuple = ()
    pattern: FxPattern | None = None


@dataclass(frozen=True)
class OpSpec:
    """Everything generic code needs to know about one op (module docstring)."""

    name: str
    #: the op itself (its public signature is the op's; the spec only describes it)
    fn: Callable
    #: the shape its path decision takes, by name (GEMM ops: this rank's local GEMM ``m, n,
    #: k`` first); every dim >= 1 but the ``flags``
    shape: tuple[str, ...]
    #: the fused variants it chooses among by itself; the first is its uncalibrated default
    variants: tuple[str, ...]
    #: ``(spec, cal, shape_dict, W, dtype, cublas, blocked) -> [Cand]``: the candidates at
    #: W > 1 (None: a GEMM op's, :func:`syncopate.ops.choice.gemm_cands`)
    candidates: Callable | None = None
    #: ``(spec, cal, shape_dict, dtype, cublas) -> [Cand]``: the local kernel(s) at W = 1
    #: (None: its local GEMMs, :func:`syncopate.ops.choice.local_cands`)
    local_candidates: Callable | None = None
    #: dims of ``shape`` that are 0 or 1 (``causal``): a measurement speaks only for its own
    #: flags, never interpolated across them
    flags: tuple[str, ...] = ()
    #: the local kernels its unfused path and its W = 1 path can run (cuBLAS only where its
    #: reference path can call it)
    locals: tuple[str, ...] = ("triton",)
    #: its fused variants are measured into the calibration file's ``fused`` section (from
    #: its benchmark rows, :mod:`syncopate.bench.fit`) and its decision scales them by
    #: those measurements (:func:`syncopate.ops.choice.gemm_cands`); other ops' candidates are
    #: measured in the ``ops`` section
    fused_section: bool = False
    #: the decision's dtype when the op fixes it (FP8 ops), else the inputs'
    dtype: str | None = None
    #: ``syncopate explain``: how its ``--shape`` reads (the op's global problem) ...
    explain_shape: str = "M,N,K (three integers)"
    #: ... and ``(name, dims, W, batch, causal) -> decision shape`` (LaunchError when they do not
    #: fit the op or do not divide over W ranks)
    explain: Callable | None = None
    #: the benchmark rows (their ``op`` before any ``[...]``) whose columns measure its
    #: candidates into the calibration's ``ops`` section, and ``(row, W) -> (shape_dict,
    #: where, [(candidate key, column)])`` (None: a GEMM op's own columns, ``fused[<variant>]
    #: auto`` and ``serial <local>``; :mod:`syncopate.bench.fit`)
    bench_rows: tuple[str, ...] = ()
    fit: Callable | None = None
    #: its rows in ``python -m syncopate.bench`` (None: none, or a table of its own)
    bench: Bench | None = None
    #: the launch of a GEMM op that the generic driver runs (None: the op launches itself)
    gemm: GemmLaunch | None = None
    #: ``torch.ops.syncopate.<name>`` (None: not a torch op)
    torch: TorchOp | None = None


#: name -> OpSpec, in registration order (filled by :mod:`syncopate.ops`)
REGISTRY: dict[str, OpSpec] = {}


def register(*specs: OpSpec) -> None:
    for s in specs:
        if s.name in REGISTRY and REGISTRY[s.name] is not s:
            raise LaunchError(f"op {s.name!r} is registered twice: give the new op its own name")
        REGISTRY[s.name] = s


def get(name: str) -> OpSpec:
    """The op's spec; a :class:`LaunchError` naming the registered ops for any other name."""
    spec = REGISTRY.get(name)
    if spec is None:
        raise LaunchError(f"unknown op {name!r}; the ops that choose their path are "
                          f"{', '.join(REGISTRY)}")
    return spec
