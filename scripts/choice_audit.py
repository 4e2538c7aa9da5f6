"""Never-slower audit of a multi-GPU benchmark run (issue 13 section 1, issue 15): for every row
of the ops beyond ag_gemm / gemm_rs (gemm_ar, FP8, ring / Ulysses attention, MoE) that measured
both a fused and an unfused candidate, what the op decides *without* those measurements (the
shipped calibration: model only) and how much slower that choice measured than the measured
best (the regret). Run on any machine after the GPU run, before refitting the calibration:

    python scripts/choice_audit.py bench/results/<run>          # bench.json + bench_*.json

A regret over the margin (3%) is a model error the calibration must fix: refit with
``python -m syncopate.bench --calibrate --from-results <run>`` (then every decision at a
measured shape takes the measured faster path). Which column is which candidate:
``syncopate/calibration/fit_ops.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def audit(directory: str, gpu: str = "h200") -> list[dict]:
    """One entry per measured (op, W, shape): the decision, the measured times, the regret."""
    from syncopate.bench.calibrate import OP_TABLES
    from syncopate.calibration.fit_ops import ops_points
    from syncopate.ops import REGISTRY
    from syncopate.ops.choice import decide_shape
    with open(os.path.join(directory, "bench.json")) as f:
        data = json.load(f)
    rows, W = list(data["results"]), int(data["meta"]["world_size"])
    for name in OP_TABLES:
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path) as f:
                rows += json.load(f)["rows"]
    by_shape: dict = {}
    for op, table in ops_points(rows, W, directory).items():
        for w, cands in table.items():
            for key, pts in cands.items():
                for p in pts:
                    shape = tuple(int(p[d]) for d in REGISTRY[op].shape)
                    by_shape.setdefault((op, int(w), shape), {})[key] = p["measured_s"]
    out = []
    for (op, w, shape), measured in sorted(by_shape.items()):
        if not any(k.startswith("unfused") for k in measured) or len(measured) < 2:
            continue
        d = decide_shape(op, shape, w, gpu=gpu)
        c = d.choice
        key = c.name.split()[1] if c.path == "fused" else f"unfused:{c.local}"
        best = min(measured.values())
        got = measured.get(key)
        out.append({"op": op, "W": w, "shape": shape, "choice": c.name, "basis": d.basis,
                    "measured_choice_s": got, "measured_best_s": best,
                    "best": min(measured, key=measured.get),
                    "regret": None if got is None else got / best - 1})
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("directory", help="a benchmark result directory (bench.json, bench_*.json)")
    p.add_argument("--gpu", default="h200", help="the calibration file to decide with")
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    rows = audit(args.directory, args.gpu)
    over = 0
    for r in rows:
        reg = "not measured" if r["regret"] is None else f"{r['regret'] * 100:+.1f}%"
        over += r["regret"] is not None and r["regret"] > 0.03
        print(f"{r['op']:<18} W={r['W']} {'x'.join(map(str, r['shape'])):<28} "
              f"{r['choice']:<26} regret {reg:>12}  (best measured: {r['best']})")
    print(f"{len(rows)} rows, {over} with a regret over 3%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
