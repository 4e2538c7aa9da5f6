"""Which path an op takes: a fused variant, the unfused path (NCCL + the best local GEMM), or
at world size 1 the local GEMM alone -- from the calibrated cost model, never slower than the
alternatives it knows.

The decision is a **pure function** of (op, per-rank GEMM shape, dtype, world size, GPU type,
calibration file content, the caller's restrictions): :func:`decide` reads no rank id, no
clock, no environment variable, no device property other than the GPU type (from the device
*name*), and measures nothing. Why: every rank must take the same path, or one rank would wait
in a fused kernel's flags (or an NCCL call) that its peer never reaches -- a hang, or at best a
CommTimeout. A measurement in the user's process would differ between ranks, so calibration
is done offline (``python -m syncopate.bench --calibrate``) into a file every rank reads as the
same bytes. Predicted times are rounded to nanoseconds before they are compared, so that a
last-bit difference between two hosts' ``libm`` cannot split a near-tie (a tie goes to the
earlier candidate: fused variants first, then the unfused path, Triton before cuBLAS).

What a candidate costs (seconds; a loop of calls is as slow as the larger of its device and
its host time, so a candidate's time is ``max(device_s, host_s)``):

* local GEMM (``triton``: our TMA kernel, ``cublas``: ``torch.matmul``): the calibrated time per
  FLOP of the measured shape classes, interpolated in log-shape space (inverse squared
  distance; a calibrated shape gives its own measurement), times the FLOPs (scaled by peak
  FLOPs for another dtype);
* unfused: the NCCL collective (``alpha + bytes / beta`` of the calibrated world size; another
  world size scales the ring's ``W - 1`` steps) plus the local GEMM;
* fused variant: :func:`syncopate.schedule.cost.estimate` of the op's own plan with the
  calibrated Triton GEMM as its compute, times ``measured / model`` of that variant
  interpolated the same way (so at a calibrated shape it predicts what was measured).

The other ops (``gemm_ar``, ``ag_gemm_fp8``, ``gemm_rs_fp8``, ``ring_attention``,
``ulysses_attention``, ``moe_dispatch_gemm``, ``moe_gemm_combine``; :func:`decide_shape`, shapes
in :data:`syncopate.ops.choice_ops.SHAPES`) weigh the same kinds of candidate -- their fused
variants, the unfused path (NCCL + the local kernel their reference path runs: ours, or cuBLAS
for ``gemm_ar``), and at W = 1 the local kernel alone -- by their analytic cost models on the
calibration's figures (:mod:`syncopate.ops.choice_ops`), scaled by the file's ``ops``
measurements where it has them.

**Model only (not calibrated).** Where an op's candidates have no measurements the decision
says so (``Decision.basis``, ``syncopate explain``) and leaves the fused path only when the
model predicts it slower than the unfused path by more than
:data:`~syncopate.ops.choice_ops.UNCALIBRATED_MARGIN_PCT` (3%): an unvalidated model must not
flip an op on noise (its errors are tens of percent where it has been checked, e.g. ring
attention, docs/ring-attention.md), but where it predicts a clear loss -- Ulysses' comm
programs holding their SMs for the whole kernel (docs/ulysses.md), decode-sized ``gemm_ar``
against one NCCL call -- taking the serial path is the smaller risk. Between fused variants
there is no margin (the ops chose among them by the same model before).

**Without a calibration file for the GPU type** every op keeps its defaults -- fused with its
default variant for W > 1 (``sm``), our local kernel at W = 1 -- and :func:`decide` says how
to calibrate. Why not the model alone: its figures are the H200's (peak FLOPs, NVLink and
NCCL bandwidths, SM count); on another GPU type they are not even approximately right, and a
wrong serial choice would silently drop the overlap the user came for, while the fused default
is what every op did before choosing existed (so an uncalibrated GPU behaves as before).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from ..errors import LaunchError

__all__ = ["Candidate", "Decision", "decide", "decide_shape", "clear_caches", "FUSED_VARIANTS",
           "OPS", "GEMM_OPS"]

OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "ag_gemm_fp8", "gemm_rs_fp8", "ring_attention",
       "ulysses_attention", "moe_dispatch_gemm", "moe_gemm_combine")
#: the ops whose shape is this rank's GEMM ``m x n x k`` (:func:`decide`)
GEMM_OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "ag_gemm_fp8", "gemm_rs_fp8")
#: the fused variants an op chooses among by itself (nvshmem needs a Communicator built with
#: symm_backend='nvshmem': only on request)
FUSED_VARIANTS = {"ag_gemm": ("sm", "ce"), "gemm_rs": ("sm", "ce+epilogue", "ce"),
                  "gemm_ar": ("sm",), "ag_gemm_fp8": ("sm", "ce"),
                  "gemm_rs_fp8": ("sm", "ce+epilogue", "ce"), "ring_attention": ("sm",),
                  "ulysses_attention": ("sm",), "moe_dispatch_gemm": ("sm",),
                  "moe_gemm_combine": ("sm",)}
#: the fused variant of an op without calibration (its default before calibration existed)
UNCALIBRATED_VARIANT = "sm"
#: variants whose side stream waits on flags with cuStreamWaitValue32
_NEEDS_STREAM_WAIT = ("ce+epilogue",)
_COLLECTIVE = {"ag_gemm": "all_gather", "gemm_rs": "reduce_scatter"}
_NCCL_NOTE = "NCCL {coll} of {mib:.1f} MiB at W={w}{extra}"


@dataclass(frozen=True)
class Candidate:
    """One way to run the op, with its predicted time (None when it cannot be predicted or
    does not apply: ``why`` says which)."""

    name: str
    path: str  # "fused", "unfused" or "local"
    local: str | None = None  # the local GEMM of the unfused/local path: "triton" or "cublas"
    backend: str | None = None
    reduce: str | None = None
    split: int | None = None
    comm_programs: int | None = None
    device_s: float | None = None
    host_s: float | None = None
    why: str = ""
    available: bool = True

    @property
    def time_s(self) -> float | None:
        if not self.available or self.device_s is None:
            return None
        return max(self.device_s, self.host_s or 0.0)


@dataclass(frozen=True)
class Decision:
    """What :func:`decide` chose, and every candidate it weighed."""

    op: str
    m: int
    n: int
    k: int
    world_size: int
    dtype: str
    gpu: str | None
    calibration: str | None  # the calibration file's SHA-256, None when uncalibrated
    candidates: tuple = field(default=())
    choice: Candidate | None = None
    note: str = ""
    #: "calibrated", "model only (not calibrated)" or "uncalibrated default"
    basis: str = "calibrated"
    #: the op's shape (:data:`syncopate.ops.choice_ops.SHAPES`; GEMM ops: ``(m, n, k)``)
    shape: tuple = ()

    @property
    def calibrated(self) -> bool:
        return self.basis == "calibrated"

    def table(self) -> str:
        """The candidates, their predicted times and the choice, one per line."""
        lines = []
        for c in self.candidates:
            mark = "->" if c is self.choice else "  "
            if c.time_s is None:
                t = "       n/a"
            else:
                t = f"{c.time_s * 1e3:8.3f} ms"
            dev = "" if c.device_s is None else f"device {c.device_s * 1e3:.3f} ms"
            host = "" if c.host_s is None else f"host {c.host_s * 1e3:.3f} ms"
            plan = "" if c.split is None else f"split {c.split}, {c.comm_programs} comm programs"
            parts = [p for p in (dev, host, plan, c.why) if p]
            lines.append(f"{mark} {c.name:<26} {t}   {'; '.join(parts)}")
        return "\n".join(lines)


def _flops(m, n, k) -> float:
    return 2.0 * m * n * k


def _dist2(p, m, n, k) -> float:
    return sum(math.log(a / b) ** 2 for a, b in ((m, p["m"]), (n, p["n"]), (k, p["k"])))


def _interp(points, m, n, k, value) -> tuple[float, str]:
    """``value(point)`` at ``m x n x k``: the geometric mean over the calibrated shapes
    weighted by inverse squared distance in log-shape space (a calibrated shape gives its own
    value exactly; between shape classes the value moves smoothly instead of jumping at the
    midpoint). The note names the nearest class (ties: the first in the file)."""
    near = min(points, key=lambda p: _dist2(p, m, n, k))
    d0 = _dist2(near, m, n, k)
    where = f"class {near['m']}x{near['n']}x{near['k']}"
    if d0 == 0.0 or len(points) == 1:
        return float(value(near)), where
    num = den = 0.0
    for p in points:
        w = 1.0 / _dist2(p, m, n, k)
        num += w * math.log(value(p))
        den += w
    return math.exp(num / den), (f"{len(points)} classes, nearest "
                                 f"{near['m']}x{near['n']}x{near['k']}")


def _local_s(cal, kind: str, m, n, k, dtype) -> tuple[float, str]:
    """Seconds of the local GEMM ``kind`` (time per FLOP interpolated over the classes)."""
    from ..schedule.cost import GEMM_PEAK_FLOPS
    cd, pts = cal.local_points(dtype)
    per_flop, note = _interp(pts, m, n, k,
                             lambda p: p[f"{kind}_s"] / _flops(p["m"], p["n"], p["k"]))
    t = per_flop * _flops(m, n, k)
    if cd != dtype:
        t *= GEMM_PEAK_FLOPS.get(cd, 1.0) / GEMM_PEAK_FLOPS.get(dtype, GEMM_PEAK_FLOPS[cd])
        note += f" ({cd}, scaled by peak FLOPs)"
    return t, note


def nccl_fit_s(cal, name: str, nbytes: float, W: int) -> tuple[float, str]:
    """``(seconds, note)`` of the NCCL collective ``name`` on ``nbytes`` at world size ``W``
    from its calibrated ``alpha + bytes / beta`` fit; another calibrated world size scales a
    ring's ``W - 1`` steps (the note then says from which)."""
    wc, e = cal.collective(name, W)
    alpha, beta = float(e["alpha_s"]), float(e["beta_bps"])
    if wc == W:
        return alpha + nbytes / beta, ""
    # a ring: W - 1 steps, each rank moving (W - 1) / W of the tensor
    return (alpha * (W - 1) / (wc - 1) + nbytes / beta * ((W - 1) / W) / ((wc - 1) / wc),
            f" (scaled from the calibrated W={wc})")


def _collective_s(cal, op, nbytes, W) -> tuple[float, str]:
    name = _COLLECTIVE[op]
    t, extra = nccl_fit_s(cal, name, nbytes, W)
    return t, _NCCL_NOTE.format(coll=name.replace("_", "-"), mib=nbytes / 2**20, w=W,
                                extra=extra)


def _plan(op, backend, reduce, m, n, k, W, dtype) -> tuple[int, int]:
    from . import _gemm
    if op == "gemm_rs":
        from .gemm_rs import default_plan
        return default_plan(backend, reduce, m, n, k, W, dtype)
    return _gemm.choose(op, backend, m, n, k, W, dtype, None, None)


def _model_s(op, backend, m, n, k, W, dtype, split, cp, compute_s) -> float:
    """The schedule cost model's fused time of a plan, with ``compute_s`` as the GEMM."""
    from ..schedule import cost
    from ..schedule.templates import all_gather, reduce_scatter
    if op == "ag_gemm":
        sched = all_gather((m, k), dtype, W, dim=0, split=split)
    else:
        sched = reduce_scatter((m, n), dtype, W, dim=0, split=split)
    return cost.estimate(sched, backend, max(int(cp), 1), compute_time_s=compute_s).time_s


@functools.lru_cache(maxsize=64)
def _measured_over_model(gpu, op, variant, wc, dtype) -> tuple:
    """``measured / model`` at each calibrated shape of a fused variant (per file, memoised:
    every decision on another shape reuses them)."""
    from .. import calibration
    cal = calibration.load(gpu)
    backend, _, red = variant.partition("+")
    out = []
    for p in cal.fused(op, wc)[1][variant]:
        split, cp = _plan(op, backend, red or "comm", p["m"], p["n"], p["k"], wc, dtype)
        compute, _ = _local_s(cal, "triton", p["m"], p["n"], p["k"], dtype)
        out.append(float(p["measured_s"]) / _model_s(op, backend, p["m"], p["n"], p["k"], wc,
                                                     dtype, split, cp, compute))
    return tuple(out)


def _fused_candidate(cal, op, variant, m, n, k, W, dtype) -> Candidate:
    backend, _, red = variant.partition("+")
    reduce = red or "comm"
    split, cp = _plan(op, backend, reduce, m, n, k, W, dtype)
    wc, variants = cal.fused(op, W)
    pts = variants.get(variant)
    name = f"fused {variant}"
    if not pts:
        return Candidate(name, "fused", backend=backend, reduce=reduce, split=split,
                         comm_programs=cp, available=False,
                         why=f"not calibrated for {op} (run python -m syncopate.bench "
                             f"--calibrate --backends {variant})")
    compute, _ = _local_s(cal, "triton", m, n, k, dtype)
    model = _model_s(op, backend, m, n, k, W, dtype, split, cp, compute)

    ratios = _measured_over_model(cal.gpu, op, variant, wc, dtype)
    ratio, where = _interp(pts, m, n, k, lambda p: ratios[pts.index(p)])
    why = f"model x {ratio:.2f} (measured/model, {where}, W={wc})"
    return Candidate(name, "fused", backend=backend, reduce=reduce, split=split,
                     comm_programs=cp, device_s=model * ratio,
                     host_s=cal.host_s(f"{op}:{variant}"), why=why)


def _round_ns(t: float | None) -> float:
    return math.inf if t is None else round(t * 1e9)


def decide(op: str, m: int, n: int, k: int, world_size: int, dtype="bf16",
           gpu: str | None = "h200", *, cublas: bool = True, fused: bool | None = None,
           unavailable: tuple = ()) -> Decision:
    """The path of ``op`` on a per-rank ``m x n x k`` GEMM (``ag_gemm``: ``m`` is the gathered
    M, ``n`` this rank's columns; ``gemm_rs``: ``k`` this rank's K shard) at ``world_size``.

    ``gpu``: the GPU type (a calibration file stem, e.g. ``h200``; None: uncalibrated).
    ``cublas``: whether the unfused/local path may use cuBLAS (False when the caller pinned our
    kernel or its config: the result contract is then the local kernel's bits). ``fused``:
    None any path, True fused variants only, False the unfused path only. ``unavailable``:
    ``(variant, reason)`` pairs the op knows cannot run for this call (e.g. the epilogue
    variant's tile order). Memoised; the arguments are the whole input.
    """
    from ..dtypes import canonical
    if op not in OPS:
        raise LaunchError(f"unknown op {op!r}; the ops that choose their path are "
                          f"{', '.join(OPS)}")
    if op not in GEMM_OPS:
        from .choice_ops import SHAPES
        raise LaunchError(f"{op} is not a GEMM: use decide_shape({op!r}, "
                          f"({', '.join(SHAPES[op])}), world_size, ...)")
    if op not in ("ag_gemm", "gemm_rs"):
        return decide_shape(op, (m, n, k), world_size, dtype, gpu, cublas=cublas, fused=fused,
                            unavailable=unavailable)
    if world_size < 1:
        raise LaunchError(f"world size must be >= 1, got {world_size}")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if int(v) < 1:
            raise LaunchError(f"{name} must be >= 1, got {v}")
    return _decide(op, int(m), int(n), int(k), int(world_size), canonical(dtype), gpu,
                   bool(cublas), fused, tuple(unavailable))


def _uncalibrated(gpu, W: int, fused, variant: str) -> tuple[Candidate, str]:
    """The one candidate of a GPU type with no calibration file, and why: the local kernel at
    W = 1, the unfused path when asked (``fused=False``), else the op's first fused
    ``variant`` (the model's figures are an H200's: no basis to leave the fused path)."""
    from .. import calibration
    how = (f"no calibration for GPU type {gpu!r} (shipped: "
           f"{', '.join(calibration.known_gpus()) or 'none'}): run python -m syncopate.bench "
           f"--calibrate on it" if gpu else "not a CUDA GPU: uncalibrated")
    if W == 1:
        return Candidate("local triton", "local", local="triton", why="uncalibrated default"), how
    if fused is False:
        return Candidate("unfused (NCCL + triton)", "unfused", local="triton",
                         why="requested (fused=False)"), how
    backend, _, red = variant.partition("+")
    return Candidate(f"fused {variant}", "fused", backend=backend, reduce=red or "comm",
                     why="uncalibrated default"), how


@functools.lru_cache(maxsize=512)
def _decide(op, m, n, k, W, dtype, gpu, cublas, fused, unavailable) -> Decision:
    from .. import calibration
    from ..dtypes import element_bytes
    cal = calibration.load(gpu)
    locals_ = ("triton", "cublas") if cublas else ("triton",)
    blocked = dict(unavailable)
    if cal is not None and not cal.stream_wait:
        for v in _NEEDS_STREAM_WAIT:
            blocked.setdefault(v, "the calibrated machine's driver had no stream memory "
                                  "operations (stream_wait in the calibration file)")
    cands: list[Candidate] = []
    if cal is None:
        c, how = _uncalibrated(gpu, W, fused, UNCALIBRATED_VARIANT)
        return Decision(op, m, n, k, W, dtype, gpu, None, (c,), c, how,
                        basis="uncalibrated default", shape=(m, n, k))
    if W == 1:
        for kind in locals_:
            t, note = _local_s(cal, kind, m, n, k, dtype)
            cands.append(Candidate(f"local {'cuBLAS' if kind == 'cublas' else kind}", "local",
                                   local=kind, device_s=t, host_s=cal.host_s(f"local:{kind}"),
                                   why=note))
        note = "world size 1: nothing to communicate, the local GEMM alone"
    else:
        if fused is not False:
            for variant in FUSED_VARIANTS[op]:
                if variant in blocked:
                    backend, _, red = variant.partition("+")
                    cands.append(Candidate(f"fused {variant}", "fused", backend=backend,
                                           reduce=red or "comm", available=False,
                                           why=blocked[variant]))
                else:
                    cands.append(_fused_candidate(cal, op, variant, m, n, k, W, dtype))
        if fused is not True:
            esize = element_bytes(dtype)
            nbytes = (m * k if op == "ag_gemm" else m * n) * esize
            ct, cnote = _collective_s(cal, op, nbytes, W)
            for kind in locals_:
                t, note = _local_s(cal, kind, m, n, k, dtype)
                label = "cuBLAS" if kind == "cublas" else kind
                cands.append(Candidate(f"unfused (NCCL + {label})", "unfused", local=kind,
                                       device_s=ct + t,
                                       host_s=cal.host_s("nccl") + cal.host_s(f"local:{kind}"),
                                       why=f"{cnote} + GEMM {note}"))
        note = ""
    ranked = [c for c in cands if c.time_s is not None]
    if not ranked:
        raise LaunchError(f"{op}: no candidate path can be predicted for {m}x{n}x{k} at "
                          f"W={W} on {gpu}: "
                          + "; ".join(f"{c.name}: {c.why}" for c in cands)
                          + ". Pass backend= (or fused=False) to choose the path yourself")
    best = min(ranked, key=lambda c: _round_ns(c.time_s))
    return Decision(op, m, n, k, W, dtype, gpu, cal.digest, tuple(cands), best, note,
                    shape=(m, n, k))


def clear_caches() -> None:
    """Forget every memoised decision and calibration (a process that just wrote a calibration
    file, or a test that swapped one in)."""
    from .. import calibration
    from . import choice_ops
    _decide.cache_clear()
    _decide_model.cache_clear()
    _measured_over_model.cache_clear()
    choice_ops.measured_over_model.cache_clear()
    calibration.load.cache_clear()


def decide_shape(op: str, shape, world_size: int, dtype=None, gpu: str | None = "h200", *,
                 cublas: bool = True, fused: bool | None = None,
                 unavailable: tuple = ()) -> Decision:
    """The path of any op in :data:`OPS` on ``shape`` (the dims of
    :data:`syncopate.ops.choice_ops.SHAPES`: GEMM ops this rank's ``(m, n, k)``, attention
    ``(batch, q_heads, kv_heads, seq, head_dim, causal)`` with ``seq`` the whole sequence, MoE
    ``(experts, capacity, hidden, n)`` / ``(experts, capacity, ffn, hidden)``) at
    ``world_size``. ``dtype``: the inputs' (default bf16; the FP8 ops are always e4m3).
    Other arguments as :func:`decide`. A pure function of its arguments and the calibration
    file's bytes, memoised."""
    from ..dtypes import canonical
    from .choice_ops import SHAPES
    if op not in OPS:
        raise LaunchError(f"unknown op {op!r}; the ops that choose their path are "
                          f"{', '.join(OPS)}")
    names = SHAPES.get(op, ("m", "n", "k"))
    try:
        dims = tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        dims = ()
    if len(dims) != len(names):
        raise LaunchError(f"{op} decides on the shape ({', '.join(names)}): {len(names)} "
                          f"integers, got {shape!r}")
    for name, v in zip(names, dims):
        if v < (0 if name == "causal" else 1) or (name == "causal" and v > 1):
            raise LaunchError(f"{op}: {name} must be "
                              f"{'0 or 1' if name == 'causal' else '>= 1'}, got {v}")
    if int(world_size) < 1:
        raise LaunchError(f"world size must be >= 1, got {world_size}")
    if op in ("ag_gemm", "gemm_rs"):
        return decide(op, *dims, world_size, dtype or "bf16", gpu, cublas=cublas, fused=fused,
                      unavailable=unavailable)
    dt = "fp8e4m3" if op.endswith("_fp8") else canonical(dtype or "bf16")
    return _decide_model(op, dims, int(world_size), dt, gpu, bool(cublas), fused,
                         tuple(unavailable))


def _ns(c: Candidate) -> float:
    return _round_ns(c.time_s)


@functools.lru_cache(maxsize=512)
def _decide_model(op, dims, W, dtype, gpu, cublas, fused, unavailable) -> Decision:
    """:func:`decide_shape` of the ops of :mod:`.choice_ops` (module docstring: the margin)."""
    from .. import calibration
    from . import choice_ops as co
    cal = calibration.load(gpu)
    s = dict(zip(co.SHAPES[op], dims))
    m, n, k = dims if op in GEMM_OPS else (0, 0, 0)
    if cal is None:
        c, how = _uncalibrated(gpu, W, fused, co.FUSED_VARIANTS[op][0])
        return Decision(op, m, n, k, W, dtype, gpu, None, (c,), c, how,
                        basis="uncalibrated default", shape=dims)
    blocked = dict(unavailable)
    if not cal.stream_wait:
        for v in _NEEDS_STREAM_WAIT:
            blocked.setdefault(v, "the calibrated machine's driver had no stream memory "
                                  "operations (stream_wait in the calibration file)")
    if W == 1:
        specs = co.local_specs(op, cal, s, dtype, cublas)
        note = "world size 1: nothing to communicate, the local kernel alone"
    else:
        specs = [x for x in co.specs(op, cal, s, W, dtype, fused, cublas, blocked)
                 if fused is None or (x.path == "fused") == bool(fused)]
        note = ""
    wc, measured = cal.ops(op, W)
    cands, all_measured = [], True
    for x in specs:
        if not x.available or x.model is None:
            cands.append(Candidate(x.name, x.path, local=x.local, backend=x.backend,
                                   reduce=x.reduce, available=False, why=x.why))
            continue
        t, why = x.model(s, W)
        if measured.get(x.key):
            dn, pts, ratios = co.measured_over_model(cal.gpu, op, x.key, wc, dtype)
            same = [i for i, p in enumerate(pts) if int(p.get("causal", 0)) == s.get("causal", 0)]
            if same:
                r, where = co.interp([pts[i] for i in same], s, dn,
                                     lambda p: ratios[pts.index(p)])
                t *= r
                why = f"model x {r:.2f} (measured/model, {where}, W={wc}); {why}"
            else:
                all_measured = False
        elif x.base_ratio is not None:
            t *= x.base_ratio
            why = f"model x {x.base_ratio:.2f} (the bf16 op's measured/model); {why}"
            all_measured = False
        elif not (x.path == "local" and op in GEMM_OPS and cal.local_points(dtype)[0] == dtype):
            all_measured = False  # (a GEMM's local table in its own dtype is measured)
        host = sum(cal.host_s_any(*keys) for keys in x.host) if x.host else None
        cands.append(Candidate(x.name, x.path, local=x.local, backend=x.backend,
                               reduce=x.reduce, split=None if x.plan is None else x.plan[0],
                               comm_programs=None if x.plan is None else x.plan[1],
                               device_s=t, host_s=host, why=why))
    ranked = [c for c in cands if c.time_s is not None]
    if not ranked:
        raise LaunchError(f"{op}: no candidate path can be predicted for {dims} at W={W} on "
                          f"{gpu}: " + "; ".join(f"{c.name}: {c.why}" for c in cands)
                          + ". Pass fused=True/False (or backend=) to choose the path yourself")
    best = min(ranked, key=_ns)
    basis = "calibrated" if all_measured else "model only (not calibrated)"
    if not all_measured and best.path == "unfused":
        fb = min((c for c in ranked if c.path == "fused"), key=_ns, default=None)
        if fb is not None and _ns(fb) * 100 <= _ns(best) * (100 + co.UNCALIBRATED_MARGIN_PCT):
            note = (f"model only: {best.name} predicted {(_ns(fb) / _ns(best) - 1) * 100:.1f}% "
                    f"faster, within the {co.UNCALIBRATED_MARGIN_PCT}% margin: {fb.name} kept")
            best = fb
    return Decision(op, m, n, k, W, dtype, gpu, cal.digest, tuple(cands), best, note,
                    basis=basis, shape=dims)
