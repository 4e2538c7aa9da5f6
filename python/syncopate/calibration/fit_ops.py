"""The ``ops`` section of a calibration file from benchmark rows: measured device times of the
candidates of ``gemm_ar``, the FP8 GEMM ops, ring and Ulysses attention and the MoE dispatch
and combine, at the benchmark's shapes (no GPU needed here).

Which column measures which candidate (the op's own plan for fused columns; the op's unfused
path for serial ones):

=====================  ==========================================  ==========================
op (bench row)         fused                                       unfused
=====================  ==========================================  ==========================
gemm_ar (``ar``)       ``fused[sm] auto`` -> ``sm``                ``serial triton`` ->
                                                                   ``unfused:triton``,
                                                                   ``serial cuBLAS`` ->
                                                                   ``unfused:cublas``
ag/rs_gemm_fp8         ``fused[<variant>] auto`` -> ``<variant>``  ``serial triton``
ring_attention         ``fused`` (fused=True) -> ``sm``            ``serial``
ulysses_attention      ``fused`` (backend sm) -> ``sm``            ``serial``
moe_dispatch_gemm      ``dispatch fused`` -> ``sm``                ``dispatch serial``
moe_gemm_combine       ``combine fused`` -> ``sm``                 ``combine serial``
=====================  ==========================================  ==========================

The MoE rows are taken with uniform routing only: the cost model assumes every expert's
capacity is used, which the "hot" routing's rows do not (their time depends on the data).
Shapes are the op's decision shape (:data:`syncopate.ops.choice_ops.SHAPES`).
"""

from __future__ import annotations

__all__ = ["ops_points", "merge_ops"]


def _add(out: dict, op: str, W: int, key: str, shape: dict, ms, source: str) -> None:
    if not ms:
        return
    out.setdefault(op, {}).setdefault(str(W), {}).setdefault(key, []).append(
        {**shape, "measured_s": float(ms) * 1e-3, "source": source})


def ops_points(rows: list[dict], W: int, source: str) -> dict:
    """``{op: {W: {candidate: [points]}}}`` of the rows this module knows (others ignored):
    ``bench.json``'s results and the rows of ``bench_ring_attn.json``, ``bench_ulysses.json``,
    ``bench_moe.json`` (times in ms, as the benchmark writes them)."""
    out: dict = {}
    for r in rows:
        name = str(r.get("op", "")).split("[")[0]
        w = int(r.get("W", W))
        where = f"{source}: {r.get('op')}"
        if name == "gemm_ar":
            M, N, K = int(r["M"]), int(r["N"]), int(r["K"])
            s = {"m": M, "n": N, "k": K // w}
            where += f" {M}x{N}x{K} W={w}"
            for col, key in (("fused[sm] auto", "sm"), ("serial triton", "unfused:triton"),
                             ("serial cuBLAS", "unfused:cublas")):
                _add(out, name, w, key, s, r.get(col), f"{where}, column '{col}'")
        elif name in ("ag_gemm_fp8", "gemm_rs_fp8"):
            M, N, K = int(r["M"]), int(r["N"]), int(r["K"])
            s = ({"m": M, "n": N // w, "k": K} if name == "ag_gemm_fp8" else
                 {"m": M, "n": N, "k": K // w})
            where += f" {M}x{N}x{K} W={w}"
            for variant in ("sm", "ce", "ce+epilogue"):
                col = f"fused[{variant}] auto"
                _add(out, name, w, variant, s, r.get(col), f"{where}, column '{col}'")
            _add(out, name, w, "unfused:triton", s, r.get("serial triton"),
                 f"{where}, column 'serial triton'")
        elif name in ("ring_attn", "ulysses"):
            op = "ring_attention" if name == "ring_attn" else "ulysses_attention"
            s = {"batch": int(r.get("B", 1)), "q_heads": int(r["Hq"]),
                 "kv_heads": int(r["Hkv"]), "seq": int(r["S"]), "head_dim": int(r["D"]),
                 "causal": int(bool(r["causal"]))}
            where += f" S={r['S']} Hq={r['Hq']} Hkv={r['Hkv']} D={r['D']} " \
                     f"causal={r['causal']} W={w}"
            _add(out, op, w, "sm", s, r.get("fused"), f"{where}, column 'fused'")
            _add(out, op, w, "unfused:triton", s, r.get("serial"), f"{where}, column 'serial'")
        elif name == "moe" and r.get("routing") == "uniform":
            E, C, H, F = int(r["E"]), int(r["C"]), int(r["H"]), int(r["F"])
            where += f" {r.get('shape')} E={E} C={C} H={H} F={F} W={w} uniform"
            for part, op, s in (("dispatch", "moe_dispatch_gemm",
                                 {"experts": E, "capacity": C, "hidden": H, "n": F}),
                                ("combine", "moe_gemm_combine",
                                 {"experts": E, "capacity": C, "ffn": F, "hidden": H})):
                _add(out, op, w, "sm", s, r.get(f"{part} fused"),
                     f"{where}, column '{part} fused'")
                _add(out, op, w, "unfused:triton", s, r.get(f"{part} serial"),
                     f"{where}, column '{part} serial'")
    return out


def merge_ops(old: dict | None, new: dict) -> dict:
    """``new`` with what ``old`` measured at other world sizes or of other candidates kept."""
    out = {op: {w: dict(c) for w, c in t.items()} for op, t in (old or {}).items()}
    for op, table in new.items():
        for w, cands in table.items():
            out.setdefault(op, {}).setdefault(w, {}).update(cands)
    return out
