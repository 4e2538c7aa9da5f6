"""The candidates of the ops that choose their path beyond ``ag_gemm`` / ``gemm_rs``:
``gemm_ar``, ``ag_gemm_fp8``, ``gemm_rs_fp8``, ``ring_attention``, ``ulysses_attention``,
``moe_dispatch_gemm`` and ``moe_gemm_combine`` (:func:`syncopate.ops.choice.decide_shape`).

Each candidate has an **analytic model** of its time on the calibration's GPU (seconds, a
function of the op's shape and the world size), built from the file's measured figures where
it has them -- the local GEMM table (time per FLOP, never below the HBM time of reading the
operands: the calibrated classes are all compute-bound, decode GEMMs are not) and the NCCL
``alpha + bytes / beta`` fits -- and from the cost model's H200 figures where it has not (the
fused plans' :func:`syncopate.schedule.cost.estimate`, the attention kernel's measured TF/s of
:mod:`syncopate.schedule.attention_cost`, SM copy bandwidth per comm program).

Where the file's ``ops`` section has measurements of a candidate (``python -m syncopate.bench
--calibrate --ops ar,ag_fp8,rs_fp8,ring_attn,ulysses,moe``), the model is scaled by
``measured / model`` interpolated between the measured shapes (inverse squared distance in
log-shape space, as for ``ag_gemm``/``gemm_rs``): at a measured shape it predicts what was
measured. A decision all of whose candidates are scaled so is **calibrated**; otherwise it is
**model only (not calibrated)** and :data:`UNCALIBRATED_MARGIN_PCT` applies (see
:mod:`syncopate.ops.choice`).

The FP8 ops' fused variants, while no FP8 measurement exists, take the bf16 op's
``measured / model`` ratio at the shape (taken against the bf16 model, the dtype it was
measured in) times their own FP8 model: the variant's overheads the model misses are assumed
the same, the GEMM twice as fast. (Before this, ``gemm_rs_fp8`` ranked its variants by the bf16
measurements divided by the FP8 model, which credits every fused variant with the bf16 GEMM's
time; the FP8 op now follows this decision.)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

__all__ = ["SHAPES", "FUSED_VARIANTS", "LOCALS", "UNCALIBRATED_MARGIN_PCT", "Spec", "specs"]

#: the shape an op decides on, by name (GEMM ops: this rank's GEMM as in
#: :func:`syncopate.ops.choice.decide`; attention: the whole sequence ``seq`` of ``batch``
#: sequences, ``causal`` 0 or 1; MoE: ``experts`` in all, ``capacity`` rows per (source rank,
#: expert), the GEMM's ``hidden`` -> ``n`` (dispatch) or ``ffn`` -> ``hidden`` (combine))
SHAPES = {
    "gemm_ar": ("m", "n", "k"),
    "ag_gemm_fp8": ("m", "n", "k"),
    "gemm_rs_fp8": ("m", "n", "k"),
    "ring_attention": ("batch", "q_heads", "kv_heads", "seq", "head_dim", "causal"),
    "ulysses_attention": ("batch", "q_heads", "kv_heads", "seq", "head_dim", "causal"),
    "moe_dispatch_gemm": ("experts", "capacity", "hidden", "n"),
    "moe_gemm_combine": ("experts", "capacity", "ffn", "hidden"),
}
#: the fused variants each op chooses among by itself (nvshmem only on request)
FUSED_VARIANTS = {"gemm_ar": ("sm",), "ag_gemm_fp8": ("sm", "ce"),
                  "gemm_rs_fp8": ("sm", "ce+epilogue", "ce"), "ring_attention": ("sm",),
                  "ulysses_attention": ("sm",), "moe_dispatch_gemm": ("sm",),
                  "moe_gemm_combine": ("sm",)}
#: local kernels of the unfused path the op can run (cuBLAS only where its reference path can
#: call it: gemm_ar's local GEMM is a plain matmul; the FP8 reference runs our FP8 kernel,
#: attention and MoE our Triton kernels)
LOCALS = {"gemm_ar": ("triton", "cublas")}
#: a model-only decision leaves the fused path only when the model predicts it slower than the
#: unfused path by more than this (percent, integer arithmetic on nanoseconds)
UNCALIBRATED_MARGIN_PCT = 3
#: SMs of the GPU the H200 figures describe
H200_SMS = 132
_FP8 = "fp8e4m3"


@dataclass(frozen=True)
class Spec:
    """One candidate before scaling: ``model(shape_dict, W) -> (seconds, note)``; ``key`` its
    entry in the calibration's ``ops`` section; ``host``: host-time keys (summed), the first
    present of each tuple."""

    name: str
    key: str
    path: str
    model: object
    host: tuple = ()
    local: str | None = None
    backend: str | None = None
    reduce: str | None = None
    plan: object = None  # (split, comm_programs) of this shape, for the table
    available: bool = True
    why: str = ""
    base_ratio: object = None  # FP8 fused: the bf16 op's measured/model at this shape


def locals_of(op: str, cublas: bool) -> tuple:
    return tuple(k for k in LOCALS.get(op, ("triton",)) if cublas or k != "cublas")


# ------------------------------------------------------------------------------------------
# pieces: local GEMM, NCCL collectives
# ------------------------------------------------------------------------------------------

def local_gemm_s(cal, kind: str, m: int, n: int, k: int, dtype: str) -> tuple[float, str]:
    """Seconds of one local ``m x n x k`` GEMM: the calibrated time per FLOP
    (:func:`syncopate.ops.choice._local_s`), never below the HBM time of reading A and B and
    writing C (bf16 out for FP8)."""
    from ..dtypes import element_bytes
    from .choice import _local_s
    from .gemm_ar_plan import HBM_BPS
    t, note = _local_s(cal, kind, m, n, k, dtype)
    eb = element_bytes(dtype)
    mem = ((m * k + k * n) * eb + m * n * max(eb, 2)) / HBM_BPS
    if mem > t:
        return mem, f"memory-bound ({HBM_BPS / 1e12:.1f} TB/s HBM)"
    return t, note


def collective_s(cal, name: str, nbytes: float, W: int) -> tuple[float, str]:
    """Seconds of one NCCL ``name`` on a tensor of ``nbytes`` (the whole gathered / reduced
    tensor; all-to-all: one rank's buffer). ``all_reduce`` without its own fit: reduce-scatter
    then all-gather of the same tensor (NCCL's ring all-reduce); ``all_to_all`` without its
    own: the all-gather fit (a rank receives ``(W - 1) / W`` of the buffer in both)."""
    table = cal.data["collectives"]
    if name == "all_reduce" and name not in table:
        a, na = collective_s(cal, "reduce_scatter", nbytes, W)
        b, _ = collective_s(cal, "all_gather", nbytes, W)
        return a + b, f"NCCL all-reduce of {nbytes / 2**20:.2f} MiB = reduce-scatter + " \
                      f"all-gather fits at W={W}"
    if name == "all_to_all" and name not in table:
        t, note = collective_s(cal, "all_gather", nbytes, W)
        return t, note.replace("all-gather", "all-to-all (all-gather fit)")
    from .choice import nccl_fit_s
    t, extra = nccl_fit_s(cal, name, nbytes, W)
    return t, f"NCCL {name.replace('_', '-')} of {nbytes / 2**20:.2f} MiB at W={W}{extra}"


def _sum(*parts) -> tuple[float, str]:
    return sum(p[0] for p in parts), " + ".join(p[1] for p in parts)


# ------------------------------------------------------------------------------------------
# per-op models
# ------------------------------------------------------------------------------------------

def _gemm_ar(cal, s, W, dtype, fused, cublas, blocked):
    from ..dtypes import element_bytes
    from ..schedule.cost import estimate
    from ..schedule.templates import all_reduce
    from .gemm_ar_plan import choose_plan

    def fused_sm(s, W):
        m, n, k = s["m"], s["n"], s["k"]
        p = choose_plan(m, n, k, W, dtype, "sm")
        compute, _ = local_gemm_s(cal, "triton", m, n, k, dtype)
        sched = all_reduce((m, n), dtype, W, dim=0, order=p.order, mode="push", split=p.split)
        t = estimate(sched, "sm", max(1, p.comm_programs), compute_time_s=compute).time_s
        return t, f"cost model of the {p.order} plan, calibrated GEMM"

    def unfused(kind):
        def f(s, W):
            return _sum(collective_s(cal, "all_reduce", s["m"] * s["n"] * element_bytes(dtype),
                                     W), local_gemm_s(cal, kind, s["m"], s["n"], s["k"], dtype))
        return f
    p = choose_plan(s["m"], s["n"], s["k"], W, dtype, "sm")
    out = [Spec("fused sm", "sm", "fused", fused_sm, (("gemm_ar:sm", "ag_gemm:sm"),),
                backend="sm", reduce="comm", plan=(p.split, p.comm_programs))]
    out += [Spec(f"unfused (NCCL + {_label(k)})", f"unfused:{k}", "unfused", unfused(k),
                 (("nccl",), (f"local:{k}",)), local=k) for k in locals_of("gemm_ar", cublas)]
    return out


def _fp8_gemm(op, cal, s, W, dtype, fused, cublas, blocked):
    from .choice import _model_s, _plan
    base = "ag_gemm" if op == "ag_gemm_fp8" else "gemm_rs"
    out = []
    for variant in FUSED_VARIANTS[op]:
        backend, _, red = variant.partition("+")
        reduce = red or "comm"

        def model(s, W, backend=backend, reduce=reduce):
            m, n, k = s["m"], s["n"], s["k"]
            split, cp = _plan(base, backend, reduce, m, n, k, W, _FP8)
            compute, _ = local_gemm_s(cal, "triton", m, n, k, _FP8)
            return (_model_s(base, backend, m, n, k, W, _FP8, split, cp, compute),
                    f"cost model of the {base} plan, calibrated GEMM (FP8 by peak FLOPs)")
        split, cp = _plan(base, backend, reduce, s["m"], s["n"], s["k"], W, _FP8)
        ratio = None
        if variant not in blocked and cal.fused(base, W)[1].get(variant):
            ratio = _bf16_ratio(cal, base, variant, backend, reduce, s, W)
        out.append(Spec(f"fused {variant}", variant, "fused", model,
                        ((f"{op}:{variant}", f"{base}:{variant}"),), backend=backend,
                        reduce=reduce, plan=(split, cp), available=variant not in blocked,
                        why=blocked.get(variant, ""), base_ratio=ratio))

    def unfused(s, W):
        m, n, k = s["m"], s["n"], s["k"]
        if op == "ag_gemm_fp8":  # A's bytes and its per-row fp32 scales: two all-gathers
            comm = _sum(collective_s(cal, "all_gather", m * k, W),
                        collective_s(cal, "all_gather", m * 4, W))
        else:  # the bf16 partial C
            comm = collective_s(cal, "reduce_scatter", m * n * 2, W)
        return _sum(comm, local_gemm_s(cal, "triton", m, n, k, _FP8))
    out.append(Spec("unfused (NCCL + triton)", "unfused:triton", "unfused", unfused,
                    (("nccl",), ("local:triton",)), local="triton"))
    out.append(Spec("unfused (NCCL + _scaled_mm)", "unfused:cublas", "unfused", None,
                    local="cublas", available=False,
                    why="the op's unfused path runs our FP8 kernel (torch._scaled_mm is the "
                        "benchmark's 'serial cuBLAS' column, not an op path)"))
    return out


def _bf16_ratio(cal, base, variant, backend, reduce, s, W) -> float:
    """``measured / model`` of the bf16 op's variant at this shape (interpolated as the bf16
    op's decision does): the measurements are bf16, so the ratio is taken against the bf16
    model, and then applies to the FP8 model (whose GEMM is twice as fast)."""
    from .choice import _fused_candidate, _local_s, _model_s, _plan
    m, n, k = s["m"], s["n"], s["k"]
    measured = _fused_candidate(cal, base, variant, m, n, k, W, "bf16").device_s
    split, cp = _plan(base, backend, reduce, m, n, k, W, "bf16")
    compute, _ = _local_s(cal, "triton", m, n, k, "bf16")
    return measured / _model_s(base, backend, m, n, k, W, "bf16", split, cp, compute)


def _attention(op, cal, s, W, dtype, fused, cublas, blocked):
    from ..dtypes import element_bytes
    eb = element_bytes(dtype)
    if op == "ring_attention":
        from ..schedule.attention_cost import attention_time, choose_ring_plan

        def fused_sm(s, W):
            p = choose_ring_plan(s["batch"], s["q_heads"], s["kv_heads"], s["seq"],
                                 s["head_dim"], W, bool(s["causal"]), eb)
            return p["fused_s"], "ring cost model (attention_cost.choose_ring_plan)"

        def unfused(s, W):
            B, Hq, Hkv, S, D = (s[x] for x in ("batch", "q_heads", "kv_heads", "seq",
                                               "head_dim"))
            kv = collective_s(cal, "all_gather", B * Hkv * S * D * eb, W)
            attn = attention_time(B, Hq, S // W, S, D, bool(s["causal"]))
            return _sum(kv, kv, (attn, "attention at the measured TF/s"))
        plan = choose_ring_plan(s["batch"], s["q_heads"], s["kv_heads"], s["seq"],
                                s["head_dim"], W, bool(s["causal"]), eb)
        plan = (plan["split"], plan["comm_programs"])
        nccl = ("nccl",), ("nccl",)
    else:
        from ..schedule.ulysses_cost import OP_DEFAULT_PROGRAMS

        def costs(s, W):
            from ..errors import LaunchError, ScheduleError
            from ..schedule.ulysses_cost import ulysses_costs
            try:
                return ulysses_costs(s["batch"], s["q_heads"], s["kv_heads"], s["seq"],
                                     s["head_dim"], W, bool(s["causal"]), elem_bytes=eb,
                                     gpu=cal.gpu)
            except ScheduleError as e:
                raise LaunchError(str(e)) from None

        def fused_sm(s, W):
            c = costs(s, W)
            return (c.fused_default_s - c.qkv_proj_s - c.out_proj_s,
                    f"ulysses cost model, {OP_DEFAULT_PROGRAMS} comm programs holding their SMs")

        def unfused(s, W):
            c = costs(s, W)
            return c.serial_s - c.qkv_proj_s - c.out_proj_s, "NCCL all-to-alls + attention " \
                                                              "(ulysses cost model)"
        plan = (1, OP_DEFAULT_PROGRAMS)
        nccl = ("nccl",), ("nccl",), ("nccl",), ("nccl",)
    return [Spec("fused sm", "sm", "fused", fused_sm, ((f"{op}:sm", "ag_gemm:sm"),),
                 backend="sm", plan=plan),
            Spec("unfused (NCCL + triton)", "unfused:triton", "unfused", unfused,
                 nccl + (("local:triton",),), local="triton")]


#: Comm-program counts the MoE ops' fused candidates are modelled with (each a candidate: more
#: programs copy faster and take more SMs from the grouped GEMM)
MOE_COMM_PROGRAMS = (2, 4, 8)


def _moe(op, cal, s, W, dtype, fused, cublas, blocked):
    from ..dtypes import element_bytes
    from ..schedule.cost import _SM_ALPHA_S, _sm_bandwidth
    eb = element_bytes(dtype)

    def parts(s, W):
        E, C = s["experts"], s["capacity"]
        El = max(1, E // W)
        if op == "moe_dispatch_gemm":
            n, k, width = s["n"], s["hidden"], s["hidden"]
        else:
            n, k, width = s["hidden"], s["ffn"], s["hidden"]
        g, note = local_gemm_s(cal, "triton", W * C, n, k, dtype)
        return E, C, El, width, El * g, f"{El} experts x GEMM {W * C}x{n}x{k} ({note})"

    def fused_sm(s, W, cp):
        E, C, El, width, gemm, _ = parts(s, W)
        bw = _sm_bandwidth(cp)
        moved = (W - 1) * El * C * width * eb  # what this rank receives (dispatch) / sends
        comm = _SM_ALPHA_S * (W - 1) + moved / bw
        block = _SM_ALPHA_S + moved / max(1, W - 1) / bw
        g = gemm * H200_SMS / (H200_SMS - cp)  # the comm programs' SMs are not the GEMM's
        if op == "moe_dispatch_gemm":  # own block first; the last block arrives, then its GEMM
            t = max(g + max(0.0, block - g / W), comm + g / W)
        else:  # a block leaves when its rows are computed; the last one after the GEMM
            t = max(g, comm) + block
        return t, f"MoE model: grouped GEMM on {H200_SMS - cp} SMs overlapped with " \
                  f"{cp} comm programs' copies"

    def unfused(s, W):
        E, C, El, width, gemm, note = parts(s, W)
        if op == "moe_dispatch_gemm":  # the reference all-gathers every block and the counts
            comm = _sum(collective_s(cal, "all_gather", W * E * C * width * eb, W),
                        collective_s(cal, "all_gather", W * W * E * 4, W))
        else:
            comm = collective_s(cal, "all_to_all", W * El * C * width * eb, W)
        return _sum(comm, (gemm, note))
    n_coll = 2 if op == "moe_dispatch_gemm" else 1
    return [Spec(f"fused sm ({cp} comm programs)", "sm", "fused",
                 functools.partial(fused_sm, cp=cp), ((f"{op}:sm", "ag_gemm:sm"),),
                 backend="sm", plan=(1, cp)) for cp in MOE_COMM_PROGRAMS] + [
            Spec("unfused (NCCL + triton)", "unfused:triton", "unfused", unfused,
                 (("nccl",),) * n_coll + (("local:triton",),), local="triton")]


def _label(kind: str) -> str:
    return "cuBLAS" if kind == "cublas" else kind


def specs(op, cal, s: dict, W: int, dtype: str, fused, cublas: bool, blocked: dict) -> list:
    """The candidates of ``op`` at ``W > 1`` (see the module docstring)."""
    if op == "gemm_ar":
        return _gemm_ar(cal, s, W, dtype, fused, cublas, blocked)
    if op in ("ag_gemm_fp8", "gemm_rs_fp8"):
        return _fp8_gemm(op, cal, s, W, dtype, fused, cublas, blocked)
    if op in ("ring_attention", "ulysses_attention"):
        return _attention(op, cal, s, W, dtype, fused, cublas, blocked)
    return _moe(op, cal, s, W, dtype, fused, cublas, blocked)


def local_specs(op, cal, s: dict, dtype: str, cublas: bool) -> list:
    """World size 1: the local kernel alone (ours; cuBLAS where the op can run it)."""
    if op in ("ring_attention", "ulysses_attention"):
        from ..schedule.attention_cost import attention_time

        def attn(s, W):
            return (attention_time(s["batch"], s["q_heads"], s["seq"], s["seq"], s["head_dim"],
                                   bool(s["causal"])), "attention at the measured TF/s")
        return [Spec("local triton", "local:triton", "local", attn, (("local:triton",),),
                     local="triton")]
    if op.startswith("moe_"):
        dims = (("n", "hidden") if op == "moe_dispatch_gemm" else ("hidden", "ffn"))

        def grouped(s, W):
            g, note = local_gemm_s(cal, "triton", s["capacity"], s[dims[0]], s[dims[1]], dtype)
            return s["experts"] * g, f"{s['experts']} experts x ({note})"
        return [Spec("local triton", "local:triton", "local", grouped, (("local:triton",),),
                     local="triton")]
    kinds = locals_of(op, cublas)

    def gemm(kind):
        return lambda s, W: local_gemm_s(cal, kind, s["m"], s["n"], s["k"], dtype)
    return [Spec(f"local {_label(k)}", f"local:{k}", "local", gemm(k), ((f"local:{k}",),),
                 local=k) for k in kinds]


# ------------------------------------------------------------------------------------------
# measured / model
# ------------------------------------------------------------------------------------------

def _dist2(p: dict, s: dict, dims) -> float:
    return sum(math.log(p[d] / s[d]) ** 2 for d in dims)


def interp(points: list, s: dict, dims, value) -> tuple[float, str]:
    """``value(point)`` at shape ``s``: the geometric mean over the measured points weighted
    by inverse squared distance in log-shape space over ``dims`` (a measured shape gives its
    own value). Points whose other dims differ (``causal``) are not mixed in."""
    near = min(points, key=lambda p: _dist2(p, s, dims))
    d0 = _dist2(near, s, dims)
    where = "measured " + "x".join(str(near[d]) for d in dims)
    if d0 == 0.0 or len(points) == 1:
        return float(value(near)), where
    num = den = 0.0
    for p in points:
        w = 1.0 / _dist2(p, s, dims)
        num += w * math.log(value(p))
        den += w
    return math.exp(num / den), f"{len(points)} measured shapes, nearest {where[9:]}"


@functools.lru_cache(maxsize=128)
def measured_over_model(gpu: str, op: str, key: str, wc: int, dtype: str) -> tuple:
    """``(dims, points, ratios)`` of a candidate's measurements at world size ``wc`` (memoised
    per file: every decision on another shape reuses them)."""
    from .. import calibration
    cal = calibration.load(gpu)
    pts = cal.ops(op, wc)[1].get(key) or []
    dims = [d for d in SHAPES[op] if d != "causal"]
    ratios = []
    for i, p in enumerate(pts):
        bad = [d for d in SHAPES[op] if not isinstance(p.get(d), int) or p[d] < (d != "causal")]
        if bad:
            raise calibration.CalibrationError(
                f"{cal.path}: ops.{op}.{wc}.{key}[{i}] needs the op's shape "
                f"({', '.join(SHAPES[op])}) as integers; {', '.join(bad)} missing or bad: "
                f"regenerate it with python -m syncopate.bench --calibrate")
        s = {d: int(p[d]) for d in SHAPES[op]}
        spec = next(x for x in (specs(op, cal, s, wc, dtype, None, True, {})
                                if wc > 1 else local_specs(op, cal, s, dtype, True))
                    if x.key == key)
        ratios.append(float(p["measured_s"]) / spec.model(s, wc)[0])
    return tuple(dims), tuple(pts), tuple(ratios)
