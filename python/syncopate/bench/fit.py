"""Build a calibration file's content from measurements (no GPU needed here).

The measuring is done elsewhere -- the benchmark's rows (:mod:`syncopate.bench.rows`: the
collective alone, our GEMM and cuBLAS alone, each fused variant at the op's own plan), a
collective sweep and host timings (:mod:`syncopate.bench.calibrate`) -- and this module turns
them into the file :mod:`syncopate.calibration` reads. The same code seeds the shipped file
from a past run's ``bench.json`` (``--calibrate --from-results DIR``) and writes a fresh one
after ``--calibrate`` measured, so the two cannot drift apart.  It lives with the benchmark
(the edge layer) because it reads the op registry; the file's reader, :mod:`syncopate.calibration`,
sits in the data layer.

The file's ``ops`` section (:func:`ops_points`): measured device times of the candidates of
every registered op whose ``OpSpec.bench_rows`` name the row (``gemm_ar``, the FP8 GEMM ops,
ring and Ulysses attention, the MoE dispatch and combine), at the benchmark's shapes.

Which column measures which candidate is the op's (``OpSpec.fit``); a GEMM op without its own
takes its columns by name: ``fused[<variant>] auto`` (the op's own plan) for each fused
variant, ``serial <local kernel>`` (``serial triton``, ``serial cuBLAS``) for its unfused path
with each local kernel it can run, its decision shape from the row's global ``M, N, K``
(``OpSpec.explain``). Shapes are the op's decision shape (``OpSpec.shape``).
"""

from __future__ import annotations

import os
import re
import statistics

import math

from ..calibration import FORMAT, CalibrationError
from ..dtypes import canonical, element_bytes
from ..ops import REGISTRY
from ..ops.choice import label

__all__ = ["from_bench_rows", "fit_alpha_beta", "parse_host_profile", "merge", "ops_points",
           "merge_ops"]

#: scripts/gpu_host_profile.py's rows -> host_s keys (the local GEMMs, each fused variant's
#: whole op: ``<op>:<variant>``)
_PROFILE_ROWS = {
    "local gemm launch (floor)": "local:triton",
    "torch.matmul": "local:cublas",
    "ag_gemm sm: whole op": "ag_gemm:sm",
    "ag_gemm ce: whole op": "ag_gemm:ce",
    "rs_gemm sm: whole op": "gemm_rs:sm",
    "rs_gemm ce: whole op": "gemm_rs:ce",
    "rs_gemm ce+epilogue: whole op": "gemm_rs:ce+epilogue",
}


def fit_alpha_beta(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``seconds = alpha + bytes / beta`` over ``(bytes, seconds)`` points, with
    ``alpha >= 0`` (refitted through the origin when the free fit's intercept is negative)."""
    if len(points) < 1:
        raise CalibrationError("fitting a collective needs at least one measured point")
    xs = [float(b) for b, _ in points]
    ys = [float(t) for _, t in points]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if n >= 2 and sxx > 0:
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        alpha = my - slope * mx
    else:
        slope, alpha = 0.0, -1.0
    if alpha < 0 or slope <= 0:
        alpha = 0.0
        slope = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    if slope <= 0:
        raise CalibrationError(f"collective points {points} give no positive bandwidth")
    return alpha, 1.0 / slope


def parse_host_profile(text: str, source: str) -> dict:
    """``host_s`` entries from ``scripts/gpu_host_profile.py``'s table (microseconds)."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"\s*(.+?)\s{2,}([0-9.]+)\s*$", line)
        if m and m.group(1).strip() in _PROFILE_ROWS:
            out[_PROFILE_ROWS[m.group(1).strip()]] = {
                "seconds": float(m.group(2)) * 1e-6,
                "source": f"{source}: '{m.group(1).strip()}' (median of 200 calls, rank 0)"}
    return out


def from_bench_rows(rows: list[dict], meta: dict, source: str, *, host: dict,
                    stream_wait: tuple[bool, str], gpu: str,
                    collective_points: dict | None = None, extra_meta: dict | None = None,
                    op_rows: list[dict] | None = None) -> dict:
    """A calibration file's content from benchmark rows (``bench.json``'s ``results``).

    ``meta``: the run's ``bench.json`` meta (world size, dtype, GPU, commit); ``source``: where
    the rows are (a path), written into every number's ``source``. ``host``: ``host_s``
    entries (:func:`parse_host_profile` or measured); ``collective_points``: extra
    ``{name: [(bytes, seconds, source)]}`` of a sweep (fitted together with the rows' own
    ``comm`` column). ``host`` must have the local GEMMs', one NCCL launch's and every
    calibrated variant's whole op (``<op>:<variant>``). Rows of the registered GEMM ops
    (``OpSpec.gemm``) give the local GEMM table and the NCCL fits (the op's collective on its
    schedule tensor); those of an op measured in the ``fused`` section
    (``OpSpec.fused_section``) its variants. ``op_rows``:
    rows of the other ops' tables (ring attention, Ulysses, MoE), fitted with ``rows`` into the
    ``ops`` section (:func:`ops_points`)."""
    W = int(meta["world_size"])
    dtype = canonical(meta.get("dtype", "bfloat16"))
    esize = element_bytes(dtype)
    local: dict[tuple, dict] = {}
    coll: dict[str, list] = {"all_gather": [], "reduce_scatter": [], "all_reduce": []}
    fused: dict[str, dict] = {}
    measured_ops = ops_points(list(rows) + list(op_rows or []), W, source)
    for r in rows:
        spec = REGISTRY.get(r["op"])
        if spec is None or spec.gemm is None:
            continue  # the FP8 rows: the ops section only (their GEMM is not the bf16 table's)
        op, M, N, K = r["op"], int(r["M"]), int(r["N"]), int(r["K"])
        where = f"{source}: {op} {M}x{N}x{K} W={W}"
        s = dict(zip(spec.shape, spec.explain(op, (M, N, K), W)))
        m, n, k = s["m"], s["n"], s["k"]
        if r.get("gemm") and r.get("gemm cuBLAS"):
            local.setdefault((m, n, k), {"m": m, "n": n, "k": k, "triton": [], "cublas": [],
                                         "source": []})
            e = local[(m, n, k)]
            e["triton"].append(r["gemm"] * 1e-3)
            e["cublas"].append(r["gemm cuBLAS"] * 1e-3)
            e["source"].append(f"{where}, columns 'gemm' / 'gemm cuBLAS'")
        if r.get("comm"):  # the op's collective on its whole schedule tensor
            nbytes = math.prod(spec.gemm.schedule_shape(s, W)[0]) * esize
            coll[spec.gemm.template].append((nbytes, r["comm"] * 1e-3,
                                             f"{where}, column 'comm'"))
        for label in meta.get("backends", []) if spec.fused_section else ():
            t = r.get(f"fused[{label}] auto")
            if not t:
                continue
            pick = r.get(f"fused[{label}] auto pick") or {}
            fused.setdefault(op, {}).setdefault(label, []).append({
                "m": m, "n": n, "k": k, "measured_s": t * 1e-3, "split": pick.get("split"),
                "comm_programs": pick.get("comm_programs"),
                "source": f"{where}, column 'fused[{label}] auto' (the op's own plan)"})
    for name, pts in (collective_points or {}).items():
        coll.setdefault(name, []).extend(pts)
    needed = ["local:triton", "local:cublas", "nccl"] + [f"{op}:{v}" for op, vs in fused.items()
                                                         for v in vs]
    missing = [k for k in needed if k not in host]
    if missing:
        raise CalibrationError(f"host times missing for {missing}: measure them (--calibrate) "
                               f"or give them in the host profile")
    points = [{"m": e["m"], "n": e["n"], "k": e["k"],
               "triton_s": statistics.median(e["triton"]),
               "cublas_s": statistics.median(e["cublas"]),
               "source": "; ".join(e["source"])} for _, e in sorted(local.items())]
    collectives = {}
    for name, pts in coll.items():
        if not pts and name == "all_reduce":
            continue  # optional: the ops derive it from the reduce-scatter and all-gather
        if not pts:
            raise CalibrationError(f"no {name} measurement in {source}: the calibration needs "
                                   f"both collectives (run the bench with --ops ag,rs)")
        alpha, beta = fit_alpha_beta([(b, t) for b, t, _ in pts])
        collectives[name] = {str(W): {
            "alpha_s": alpha, "beta_bps": beta,
            "points": [[b, t] for b, t, _ in pts],
            "source": "least-squares alpha + bytes/beta over the points (bytes of the whole "
                      "tensor); points from " + "; ".join(s for _, _, s in pts)}}
    out = {
        "format": FORMAT,
        "gpu": gpu,
        "device_name": meta.get("gpu"),
        "provenance": {"source": source, "git_commit": meta.get("git_commit"),
                       "date": meta.get("date"), "command": meta.get("command"),
                       "torch": meta.get("torch"), "triton": meta.get("triton"),
                       **(extra_meta or {})},
        "local_gemm": {"points": {dtype: points},
                       "source": "per-rank GEMMs of the benchmark rows, median device time "
                                 "(CUDA events, L2 flushed) of our TMA kernel and torch.matmul"},
        "collectives": collectives,
        "fused": {op: {str(W): variants} for op, variants in fused.items()},
        "host_s": host,
        "stream_wait": {"available": bool(stream_wait[0]), "source": stream_wait[1]},
    }
    if measured_ops:
        out["ops"] = measured_ops
    return out


def merge(old: dict | None, new: dict) -> dict:
    """``new`` with what ``old`` measured and ``new`` did not kept: other world sizes (a
    calibration on 2 GPUs does not erase one made on 8), other dtypes, other local GEMM
    shapes (a shape measured again takes the new times)."""
    if not old or old.get("format") != FORMAT or old.get("gpu") != new.get("gpu"):
        return new
    out = dict(new)
    pts = {}
    for dt in set(old["local_gemm"]["points"]) | set(new["local_gemm"]["points"]):
        by_shape = {(p["m"], p["n"], p["k"]): p for p in old["local_gemm"]["points"].get(dt, [])}
        by_shape.update({(p["m"], p["n"], p["k"]): p for p in
                         new["local_gemm"]["points"].get(dt, [])})  # a re-measured shape: new
        pts[dt] = [by_shape[s] for s in sorted(by_shape)]
    out["local_gemm"] = {**new["local_gemm"], "points": pts}
    for section in ("collectives", "fused"):
        merged = {}
        for key in set(old.get(section, {})) | set(new.get(section, {})):
            merged[key] = {**old.get(section, {}).get(key, {}),
                           **new.get(section, {}).get(key, {})}
        out[section] = merged
    if old.get("ops") or new.get("ops"):
        out["ops"] = merge_ops(old.get("ops"), new.get("ops") or {})
    return out


def relpath(path: str) -> str:
    """``path`` relative to the repository (the calibration directory's ancestor), for the
    file's provenance: absolute paths of one machine mean nothing on another."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    ap = os.path.abspath(path)
    return os.path.relpath(ap, root) if ap.startswith(root + os.sep) else path


def gemm_fit(spec, r: dict, w: int):
    """A GEMM op's candidates in a bench row of its own (module docstring)."""
    M, N, K = int(r["M"]), int(r["N"]), int(r["K"])
    s = dict(zip(spec.shape, spec.explain(spec.name, (M, N, K), w)))
    return (s, f" {M}x{N}x{K} W={w}",
            [(v, f"fused[{v}] auto") for v in spec.variants]
            + [(f"unfused:{k}", f"serial {label(k)}") for k in spec.locals])


def ops_points(rows: list[dict], W: int, source: str) -> dict:
    """``{op: {W: {candidate: [points]}}}`` of the rows a registered op reads (others
    ignored): ``bench.json``'s results and the rows of ``bench_ring_attn.json``,
    ``bench_ulysses.json``, ``bench_moe.json`` (times in ms, as the benchmark writes them)."""
    out: dict = {}
    for r in rows:
        name = str(r.get("op", "")).split("[")[0]
        w = int(r.get("W", W))
        for spec in REGISTRY.values():
            if name not in spec.bench_rows:
                continue
            got = spec.fit(r, w) if spec.fit is not None else gemm_fit(spec, r, w)
            if got is None:
                continue
            s, where, columns = got
            for key, col in columns:
                if r.get(col):
                    out.setdefault(spec.name, {}).setdefault(str(w), {}).setdefault(key, []).append(
                        {**s, "measured_s": float(r[col]) * 1e-3,
                         "source": f"{source}: {r.get('op')}{where}, column '{col}'"})
    return out


def merge_ops(old: dict | None, new: dict) -> dict:
    """``new`` with what ``old`` measured at other world sizes or of other candidates kept."""
    out = {op: {w: dict(c) for w, c in t.items()} for op, t in (old or {}).items()}
    for op, table in new.items():
        for w, cands in table.items():
            out.setdefault(op, {}).setdefault(w, {}).update(cands)
    return out
