"""The ``ops`` section of a calibration file from benchmark rows: measured device times of the
candidates of every registered op whose ``OpSpec.bench_rows`` name the row (``gemm_ar``, the FP8
GEMM ops, ring and Ulysses attention, the MoE dispatch and combine), at the benchmark's shapes
(no GPU needed here).

Which column measures which candidate is the op's (``OpSpec.fit``); a GEMM op without its own
takes its columns by name: ``fused[<variant>] auto`` (the op's own plan) for each fused
variant, ``serial <local kernel>`` (``serial triton``, ``serial cuBLAS``) for its unfused path
with each local kernel it can run, its decision shape from the row's global ``M, N, K``
(``OpSpec.explain``). Shapes are the op's decision shape (``OpSpec.shape``).
"""

from __future__ import annotations

from ..ops import REGISTRY
from ..ops.choice import label

__all__ = ["ops_points", "merge_ops"]


def _add(out: dict, op: str, W: int, key: str, shape: dict, ms, source: str) -> None:
    if not ms:
        return
    out.setdefault(op, {}).setdefault(str(W), {}).setdefault(key, []).append(
        {**shape, "measured_s": float(ms) * 1e-3, "source": source})


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
                _add(out, spec.name, w, key, s, r.get(col),
                     f"{source}: {r.get('op')}{where}, column '{col}'")
    return out


def merge_ops(old: dict | None, new: dict) -> dict:
    """``new`` with what ``old`` measured at other world sizes or of other candidates kept."""
    out = {op: {w: dict(c) for w, c in t.items()} for op, t in (old or {}).items()}
    for op, table in new.items():
        for w, cands in table.items():
            out.setdefault(op, {}).setdefault(w, {}).update(cands)
    return out
