"""Which path an op takes: a fused variant, the unfused path (NCCL + the best local kernel), or
at world size 1 the local kernel alone -- from the calibrated cost model, never slower than the
alternatives it knows (docs/choosing-the-path.md: the inputs, the model, the margin, the
calibration files). One decision for every op: the op's :class:`~.spec.OpSpec` lists its
candidates and their models; this module weighs them.

The decision is a **pure function** of (op, shape, dtype, world size, GPU type, calibration
file content, the caller's restrictions): it reads no rank id, clock, environment variable or
device property other than the GPU type (from the device *name*), and measures nothing. Why:
every rank must take the same path, or one rank would wait in a fused kernel's flags (or an
NCCL call) that its peer never reaches. Predicted times are compared rounded to nanoseconds, so
that a last-bit difference between two hosts' ``libm`` cannot split a near-tie (a tie goes to
the earlier candidate: fused variants first, then the unfused path, Triton before cuBLAS).

A decision with an unmeasured candidate is **model only (not calibrated)**: it leaves the fused
path only when the model predicts it slower than the unfused path by more than
:data:`UNCALIBRATED_MARGIN_PCT` -- an unvalidated model must not flip an op on noise. **Without
a calibration file for the GPU type** every op keeps its defaults (its first fused variant for
W > 1, our local kernel at W = 1): the model's figures are an H200's, not even approximately
right on another GPU type.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from .. import calibration
from ..dtypes import canonical, element_bytes
from ..errors import LaunchError
from ..schedule.cost import GEMM_PEAK_FLOPS, estimate
from ..schedule.templates import TEMPLATES
from . import spec as specs
from .gemm_ar_plan import HBM_BPS
from .spec import Cand

__all__ = ["Candidate", "Decision", "decide", "decide_shape", "clear_caches",
           "UNCALIBRATED_MARGIN_PCT", "local_gemm_s", "local_s", "collective_s",
           "interp", "add", "label"]

#: a model-only decision leaves the fused path only when the model predicts it slower than the
#: unfused path by more than this (percent, integer arithmetic on nanoseconds)
UNCALIBRATED_MARGIN_PCT = 3
#: variants whose side stream waits on flags with cuStreamWaitValue32
_NEEDS_STREAM_WAIT = ("ce+epilogue",)


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
    """What :func:`decide_shape` chose, and every candidate it weighed."""

    op: str
    world_size: int
    dtype: str
    gpu: str | None
    calibration: str | None  # the calibration file's SHA-256, None when uncalibrated
    candidates: tuple = field(default=())
    choice: Candidate | None = None
    note: str = ""
    #: "calibrated", "model only (not calibrated)" or "uncalibrated default"
    basis: str = "calibrated"
    #: the op's shape (``OpSpec.shape``; GEMM ops: ``(m, n, k)``)
    shape: tuple = ()

    @property
    def calibrated(self) -> bool:
        return self.basis == "calibrated"

    def table(self) -> str:
        """The candidates, their predicted times and the choice, one per line."""
        lines = []
        for c in self.candidates:
            mark = "->" if c is self.choice else "  "
            t = "       n/a" if c.time_s is None else f"{c.time_s * 1e3:8.3f} ms"
            dev = "" if c.device_s is None else f"device {c.device_s * 1e3:.3f} ms"
            host = "" if c.host_s is None else f"host {c.host_s * 1e3:.3f} ms"
            plan = "" if c.split is None else f"split {c.split}, {c.comm_programs} comm programs"
            parts = [p for p in (dev, host, plan, c.why) if p]
            lines.append(f"{mark} {c.name:<26} {t}   {'; '.join(parts)}")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------
# pieces of the candidates' models
# ------------------------------------------------------------------------------------------

def _dist2(p: dict, s: dict, dims) -> float:
    return sum(math.log(s[d] / p[d]) ** 2 for d in dims)


def interp(points: list, s: dict, dims, value, names=("measured {}", "{} measured shapes, "
                                                      "nearest {}")) -> tuple[float, str]:
    """``value(point)`` at shape ``s``: the geometric mean over the points weighted by inverse
    squared distance in log-shape space over ``dims`` (a measured shape gives its own value
    exactly; between shapes the value moves smoothly instead of jumping at the midpoint). The
    note names the nearest point (ties: the first in the file) by ``names``."""
    near = min(points, key=lambda p: _dist2(p, s, dims))
    at = "x".join(str(near[d]) for d in dims)
    if _dist2(near, s, dims) == 0.0 or len(points) == 1:
        return float(value(near)), names[0].format(at)
    num = den = 0.0
    for p in points:
        w = 1.0 / _dist2(p, s, dims)
        num += w * math.log(value(p))
        den += w
    return math.exp(num / den), names[1].format(len(points), at)


_MNK = ("m", "n", "k")
_CLASSES = ("class {}", "{} classes, nearest {}")


def local_s(cal, kind: str, m, n, k, dtype) -> tuple[float, str]:
    """Seconds of the local GEMM ``kind`` (time per FLOP interpolated over the classes)."""
    cd, pts = cal.local_points(dtype)
    per_flop, note = interp(pts, {"m": m, "n": n, "k": k}, _MNK,
                            lambda p: p[f"{kind}_s"] / (2.0 * p["m"] * p["n"] * p["k"]), _CLASSES)
    t = per_flop * (2.0 * m * n * k)
    if cd != dtype:
        t *= GEMM_PEAK_FLOPS.get(cd, 1.0) / GEMM_PEAK_FLOPS.get(dtype, GEMM_PEAK_FLOPS[cd])
        note += f" ({cd}, scaled by peak FLOPs)"
    return t, note


def local_gemm_s(cal, kind: str, m: int, n: int, k: int, dtype: str) -> tuple[float, str]:
    """:func:`local_s`, never below the HBM time of reading A and B and writing C (bf16 out
    for FP8): the calibrated classes are all compute-bound, decode GEMMs are not."""
    t, note = local_s(cal, kind, m, n, k, dtype)
    eb = element_bytes(dtype)
    mem = ((m * k + k * n) * eb + m * n * max(eb, 2)) / HBM_BPS
    if mem > t:
        return mem, f"memory-bound ({HBM_BPS / 1e12:.1f} TB/s HBM)"
    return t, note


def collective_s(cal, name: str, nbytes: float, W: int, digits: int = 2) -> tuple[float, str]:
    """Seconds of one NCCL ``name`` on a tensor of ``nbytes`` (the whole gathered / reduced
    tensor; all-to-all: one rank's buffer) from its calibrated ``alpha + bytes / beta`` fit;
    another calibrated world size scales a ring's ``W - 1`` steps (the note then says from
    which). ``all_reduce`` without its own fit: reduce-scatter then all-gather of the same
    tensor (NCCL's ring all-reduce); ``all_to_all`` without its own: the all-gather fit (a rank
    receives ``(W - 1) / W`` of the buffer in both)."""
    table = cal.data["collectives"]
    if name == "all_reduce" and name not in table:
        a, _ = collective_s(cal, "reduce_scatter", nbytes, W)
        b, _ = collective_s(cal, "all_gather", nbytes, W)
        return a + b, f"NCCL all-reduce of {nbytes / 2**20:.2f} MiB = reduce-scatter + " \
                      f"all-gather fits at W={W}"
    if name == "all_to_all" and name not in table:
        t, note = collective_s(cal, "all_gather", nbytes, W)
        return t, note.replace("all-gather", "all-to-all (all-gather fit)")
    wc, e = cal.collective(name, W)
    alpha, beta = float(e["alpha_s"]), float(e["beta_bps"])
    t, extra = alpha + nbytes / beta, ""
    if wc != W:  # a ring: W - 1 steps, each rank moving (W - 1) / W of the tensor
        t = alpha * (W - 1) / (wc - 1) + nbytes / beta * ((W - 1) / W) / ((wc - 1) / wc)
        extra = f" (scaled from the calibrated W={wc})"
    return t, (f"NCCL {name.replace('_', '-')} of {nbytes / 2**20:.{digits}f} MiB at "
               f"W={W}{extra}")


def add(*parts) -> tuple[float, str]:
    """``(seconds, note)`` of parts run one after the other."""
    return sum(p[0] for p in parts), " + ".join(p[1] for p in parts)


def label(kind: str) -> str:
    return "cuBLAS" if kind == "cublas" else kind


def local_cands(spec, cal, s: dict, dtype: str, cublas: bool) -> list:
    """World size 1 of a GEMM op: each local GEMM it can run (``spec.locals``) on ``s``'s ``m,
    n, k`` -- measured ops (``spec.fused_section``) by :func:`local_s`, the others by
    :func:`local_gemm_s`, measured when the file's local table has ``dtype`` itself."""
    fn = local_s if spec.fused_section else local_gemm_s
    calibrated = spec.fused_section or cal.local_points(dtype)[0] == dtype
    return [Cand(f"local {label(k)}", f"local:{k}", "local",
                 functools.partial(_local_model, fn, cal, k, dtype), ((f"local:{k}",),),
                 local=k, calibrated=calibrated) for k in kinds(spec.locals, cublas)]


def _local_model(fn, cal, kind, dtype, s, W):
    return fn(cal, kind, s["m"], s["n"], s["k"], dtype)


def kinds(locals_: tuple, cublas: bool) -> tuple:
    """The local kernels among ``locals_`` the caller allows (``cublas`` False: ours only)."""
    return tuple(k for k in locals_ if cublas or k != "cublas")


#: the op whose measured host times stand in for an op without its own (the nearest kind of
#: call: one fused launch with its staging)
HOST_REFERENCE = "ag_gemm"


def host_keys(spec, variant: str) -> tuple:
    """The host-time keys of a fused variant: the op's own, else :data:`HOST_REFERENCE`'s."""
    return ((f"{spec.name}:{variant}", f"{HOST_REFERENCE}:{variant}"),)


def plan_estimate(spec, backend: str, reduce: str, s: dict, W, dtype, compute_s: float):
    """``((order, split, comm programs), seconds)``: a GEMM op's plan for the shape ``s``
    (``spec.gemm.plan``, nothing fixed by a caller) and the schedule cost model's fused time
    of it, with ``compute_s`` as the GEMM."""
    g = spec.gemm
    order, split, cp = g.plan(backend, reduce, s, W, dtype, None, None, None, None)
    shape, dim = g.schedule_shape(s, W)
    sched = TEMPLATES[g.template](shape, dtype, W, dim=dim, order=order or "swizzle",
                                 split=split)
    return (order or "swizzle", split, cp), \
        estimate(sched, backend, max(int(cp), 1), compute_time_s=compute_s).time_s


def variant_s(spec, cal, variant: str, s: dict, W, dtype: str, local=local_s) -> float:
    """The schedule cost model's time of a GEMM op's fused ``variant`` (``backend[+reduce]``)
    on ``s`` (:func:`plan_estimate`), its GEMM by ``local`` (calibrated)."""
    backend, _, red = variant.partition("+")
    compute, _ = local(cal, "triton", s["m"], s["n"], s["k"], dtype)
    return plan_estimate(spec, backend, red or "comm", s, W, dtype, compute)[1]


@functools.lru_cache(maxsize=64)
def fused_ratios(gpu, op: str, variant: str, wc: int, dtype: str) -> tuple:
    """``measured / model`` at each point of a GEMM op's variant in the file's ``fused``
    section (memoised per file: every decision on another shape reuses them)."""
    cal = calibration.load(gpu)
    return tuple(float(p["measured_s"]) / variant_s(specs.get(op), cal, variant, p, wc, dtype)
                 for p in cal.fused(op, wc)[1][variant])


def gemm_cands(spec, cal, s: dict, W: int, dtype: str, cublas: bool, blocked: dict) -> list:
    """The candidates of a GEMM op (``spec.gemm``) at W > 1 on this rank's ``m x n x k``: each
    fused variant -- the cost model's estimate of its plan with the calibrated GEMM as compute
    -- then the unfused path: the op's NCCL collective (its template's, on the whole schedule
    tensor) plus each local kernel.

    ``spec.fused_section`` (``ag_gemm``, ``gemm_rs``): the variants are measured in the file's
    ``fused`` section -- each scaled by ``measured / model`` there (unavailable without
    measurements), the local GEMM without the HBM floor, every candidate measured. Otherwise
    the ``ops`` section scales them where it has them (:func:`decide_shape`)."""
    g = spec.gemm
    section = spec.fused_section
    m, n, k = s["m"], s["n"], s["k"]
    op = spec.name
    out = []
    for variant in spec.variants:
        backend, _, red = variant.partition("+")
        reduce = red or "comm"
        name = f"fused {variant}"
        if variant in blocked:
            out.append(Cand(name, variant, "fused", None, backend=backend, reduce=reduce,
                            available=False, why=blocked[variant]))
            continue
        plan = g.plan(backend, reduce, s, W, dtype, None, None, None, None)[1:]
        host = host_keys(spec, variant)
        if section:
            wc, pts = cal.fused(op, W)[0], cal.fused(op, W)[1].get(variant)
            if not pts:
                out.append(Cand(name, variant, "fused", None, backend=backend, reduce=reduce,
                                plan=plan, available=False,
                                why=f"not calibrated for {op} (run python -m syncopate.bench "
                                    f"--calibrate --backends {variant})"))
                continue
            model = functools.partial(section_model, spec, cal, variant, wc, dtype)
            host = ((f"{op}:{variant}",),)
        else:
            model = functools.partial(_plan_model, spec, cal, backend, reduce, dtype)
        out.append(Cand(name, variant, "fused", model, host, backend=backend, reduce=reduce,
                        plan=plan, calibrated=section))
    shape, _ = g.schedule_shape(s, W)
    nbytes = math.prod(shape) * element_bytes(dtype)
    for kind in kinds(spec.locals, cublas):
        out.append(Cand(f"unfused (NCCL + {label(kind)})", f"unfused:{kind}", "unfused",
                        functools.partial(_unfused_model, g.template, cal, kind, nbytes, dtype,
                                          section), (("nccl",), (f"local:{kind}",)),
                        local=kind, calibrated=section))
    return out


def section_model(spec, cal, variant, wc, dtype, s, W):
    model = variant_s(spec, cal, variant, s, W, dtype)
    pts = cal.fused(spec.name, W)[1][variant]
    ratios = fused_ratios(cal.gpu, spec.name, variant, wc, dtype)
    ratio, where = interp(pts, s, _MNK, lambda p: ratios[pts.index(p)], _CLASSES)
    return model * ratio, f"model x {ratio:.2f} (measured/model, {where}, W={wc})"


def _plan_model(spec, cal, backend, reduce, dtype, s, W):
    compute, _ = local_gemm_s(cal, "triton", s["m"], s["n"], s["k"], dtype)
    (order, _, _), t = plan_estimate(spec, backend, reduce, s, W, dtype, compute)
    return t, f"cost model of the {order} plan, calibrated GEMM"


def _unfused_model(collective, cal, kind, nbytes, dtype, section, s, W):
    if section:  # the measured GEMM ops' notes, as their tables have always read
        ct, cnote = collective_s(cal, collective, nbytes, W, digits=1)
        t, note = local_s(cal, kind, s["m"], s["n"], s["k"], dtype)
        return ct + t, f"{cnote} + GEMM {note}"
    return add(collective_s(cal, collective, nbytes, W),
               local_gemm_s(cal, kind, s["m"], s["n"], s["k"], dtype))


@functools.lru_cache(maxsize=128)
def measured_over_model(gpu: str, op: str, key: str, wc: int, dtype: str) -> tuple:
    """``(dims, points, ratios)`` of a candidate's ``ops`` measurements at world size ``wc``
    (memoised per file: every decision on another shape reuses them)."""
    cal = calibration.load(gpu)
    spec = specs.get(op)
    pts = cal.ops(op, wc)[1].get(key) or []
    dims = [d for d in spec.shape if d not in spec.flags]
    ratios = []
    for i, p in enumerate(pts):
        bad = [d for d in spec.shape if not isinstance(p.get(d), int)
               or p[d] < (d not in spec.flags)]
        if bad:
            raise calibration.CalibrationError(
                f"{cal.path}: ops.{op}.{wc}.{key}[{i}] needs the op's shape "
                f"({', '.join(spec.shape)}) as integers; {', '.join(bad)} missing or bad: "
                f"regenerate it with python -m syncopate.bench --calibrate")
        s = {d: int(p[d]) for d in spec.shape}
        cands = ((spec.candidates or gemm_cands)(spec, cal, s, wc, dtype, True, {}) if wc > 1
                 else (spec.local_candidates or local_cands)(spec, cal, s, dtype, True))
        x = next(x for x in cands if x.key == key)
        ratios.append(float(p["measured_s"]) / x.model(s, wc)[0])
    return tuple(dims), tuple(pts), tuple(ratios)


# ------------------------------------------------------------------------------------------
# the decision
# ------------------------------------------------------------------------------------------

def _ns(c: Candidate) -> float:
    return math.inf if c.time_s is None else round(c.time_s * 1e9)


def decide(op: str, m: int, n: int, k: int, world_size: int, dtype="bf16",
           gpu: str | None = "h200", *, cublas: bool = True, fused: bool | None = None,
           unavailable: tuple = ()) -> Decision:
    """:func:`decide_shape` of a GEMM op on this rank's ``m x n x k`` (``ag_gemm``: ``m`` is
    the gathered M, ``n`` this rank's columns; ``gemm_rs``: ``k`` this rank's K shard)."""
    spec = specs.get(op)
    if spec.shape != _MNK:
        raise LaunchError(f"{op} is not a GEMM: use decide_shape({op!r}, "
                          f"({', '.join(spec.shape)}), world_size, ...)")
    return decide_shape(op, (m, n, k), world_size, dtype, gpu, cublas=cublas, fused=fused,
                        unavailable=unavailable)


def decide_shape(op: str, shape, world_size: int, dtype=None, gpu: str | None = "h200", *,
                 cublas: bool = True, fused: bool | None = None,
                 unavailable: tuple = ()) -> Decision:
    """The path of a registered op on ``shape`` (the dims of its ``OpSpec.shape``: GEMM ops
    this rank's ``(m, n, k)``, attention ``(batch, q_heads, kv_heads, seq, head_dim,
    causal)`` with ``seq`` the whole sequence, MoE ``(experts, capacity, hidden, n)`` /
    ``(experts, capacity, ffn, hidden)``) at ``world_size``. ``dtype``: the inputs' (default
    bf16; the FP8 ops are always e4m3).

    ``gpu``: the GPU type (a calibration file stem, e.g. ``h200``; None: uncalibrated).
    ``cublas``: whether the unfused/local path may use cuBLAS (False when the caller pinned our
    kernel or its config: the result contract is then the local kernel's bits). ``fused``:
    None any path, True fused variants only, False the unfused path only. ``unavailable``:
    ``(variant, reason)`` pairs the op knows cannot run for this call (e.g. the epilogue
    variant's tile order). A pure function of its arguments and the calibration file's bytes,
    memoised."""
    spec = specs.get(op)
    names = spec.shape
    try:
        dims = tuple(int(v) for v in shape)
    except (TypeError, ValueError):
        dims = ()
    if len(dims) != len(names):
        raise LaunchError(f"{op} decides on the shape ({', '.join(names)}): {len(names)} "
                          f"integers, got {shape!r}")
    for name, v in zip(names, dims):
        flag = name in spec.flags
        if v < (0 if flag else 1) or (flag and v > 1):
            raise LaunchError(f"{op}: {name} must be {'0 or 1' if flag else '>= 1'}, got {v}")
    if int(world_size) < 1:
        raise LaunchError(f"world size must be >= 1, got {world_size}")
    dt = spec.dtype or canonical(dtype or "bf16")
    return _decide(op, dims, int(world_size), dt, gpu, bool(cublas), fused, tuple(unavailable))


def _uncalibrated(gpu, W: int, fused, variant: str) -> tuple[Candidate, str]:
    """The one candidate of a GPU type with no calibration file, and why: the local kernel at
    W = 1, the unfused path when asked (``fused=False``), else the op's first fused
    ``variant`` (the model's figures are an H200's: no basis to leave the fused path)."""
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
def _decide(op, dims, W, dtype, gpu, cublas, fused, unavailable) -> Decision:
    spec = specs.get(op)
    cal = calibration.load(gpu)
    s = dict(zip(spec.shape, dims))
    if cal is None:
        c, how = _uncalibrated(gpu, W, fused, spec.variants[0])
        return Decision(op, W, dtype, gpu, None, (c,), c, how,
                        basis="uncalibrated default", shape=dims)
    blocked = dict(unavailable)
    if not cal.stream_wait:
        for v in _NEEDS_STREAM_WAIT:
            blocked.setdefault(v, "the calibrated machine's driver had no stream memory "
                                  "operations (stream_wait in the calibration file)")
    if W == 1:
        xs = (spec.local_candidates or local_cands)(spec, cal, s, dtype, cublas)
        note = "world size 1: nothing to communicate, the local kernel alone"
    else:
        xs = [x for x in (spec.candidates or gemm_cands)(spec, cal, s, W, dtype, cublas, blocked)
              if fused is None or (x.path == "fused") == bool(fused)]
        note = ""
    wc, measured = cal.ops(op, W)
    cands, all_measured = [], True
    for x in xs:
        plan = x.plan or (None, None)
        fixed = dict(local=x.local, backend=x.backend, reduce=x.reduce, split=plan[0],
                     comm_programs=plan[1])
        if not x.available or x.model is None:
            cands.append(Candidate(x.name, x.path, **fixed, available=False, why=x.why))
            continue
        t, why = x.model(s, W)
        if x.calibrated:
            pass
        elif measured.get(x.key):
            dn, pts, ratios = measured_over_model(cal.gpu, op, x.key, wc, dtype)
            same = [i for i, p in enumerate(pts)
                    if all(int(p.get(f, 0)) == s[f] for f in spec.flags)]
            if same:
                r, where = interp([pts[i] for i in same], s, dn, lambda p: ratios[pts.index(p)])
                t *= r
                why = f"model x {r:.2f} (measured/model, {where}, W={wc}); {why}"
            else:
                all_measured = False
        elif x.base_ratio is not None:
            t *= x.base_ratio
            why = f"model x {x.base_ratio:.2f} (the bf16 op's measured/model); {why}"
            all_measured = False
        else:
            all_measured = False
        host = sum(cal.host_s_any(*keys) for keys in x.host) if x.host else None
        cands.append(Candidate(x.name, x.path, **fixed, device_s=t, host_s=host, why=why))
    ranked = [c for c in cands if c.time_s is not None]
    if not ranked:
        raise LaunchError(f"{op}: no candidate path can be predicted for {dims} at W={W} on "
                          f"{gpu}: " + "; ".join(f"{c.name}: {c.why}" for c in cands)
                          + ". Pass fused=True/False (or backend=) to choose the path yourself")
    best = min(ranked, key=_ns)
    basis = "calibrated" if all_measured else "model only (not calibrated)"
    if not all_measured and best.path == "unfused":
        fb = min((c for c in ranked if c.path == "fused"), key=_ns, default=None)
        if fb is not None and _ns(fb) * 100 <= _ns(best) * (100 + UNCALIBRATED_MARGIN_PCT):
            note = (f"model only: {best.name} predicted {(_ns(fb) / _ns(best) - 1) * 100:.1f}% "
                    f"faster, within the {UNCALIBRATED_MARGIN_PCT}% margin: {fb.name} kept")
            best = fb
    return Decision(op, W, dtype, gpu, cal.digest, tuple(cands), best, note,
                    basis=basis, shape=dims)


def clear_caches() -> None:
    """Forget every memoised decision and calibration (a process that just wrote a calibration
    file, or a test that swapped one in)."""
    for fn in (_decide, measured_over_model, fused_ratios, calibration.load):
        fn.cache_clear()
