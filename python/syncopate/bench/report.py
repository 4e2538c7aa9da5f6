"""What a benchmark run reports: the derived columns of a row (``ideal``, the best fused
time, ratios), the table printed at the end, the chart, and ``bench.json`` with the run's
metadata (date, GPU, versions, the git commit measured, the command).
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess

from .. import settings

__all__ = ["columns", "derive", "format_table", "git_commit", "plot", "write_results"]


def derive(r, backends):
    """ideal, best fused, ratios."""
    g, c = r.get("gemm"), r.get("comm")
    r["ideal"] = max(g, c) if g is not None and c is not None else None
    fused = [r.get(f"fused[{b}]") for b in backends if r.get(f"fused[{b}]") is not None]
    r["fused best"] = min(fused) if fused else None
    best_b = [b for b in backends
              if r.get(f"fused[{b}]") is not None and r[f"fused[{b}]"] == r["fused best"]]
    r["fused host"] = r.get(f"fused[{best_b[0]}] host") if best_b else None
    f, i, s = r["fused best"], r["ideal"], r.get("serial cuBLAS")
    r["fused/ideal"] = f / i if f and i else None
    r["serial/fused"] = s / f if f and s else None
    d = r.get("fused default")
    r["default/ideal"] = d / i if d and i else None
    return r


def columns(backends):
    return (["fused default"] + [f"fused[{b}]" for b in backends]
            + ["serial cuBLAS", "serial triton", "torch async-TP", "torch symm one-shot",
               "torch symm two-shot", "gemm", "gemm cuBLAS", "comm",
               "ideal", "fused/ideal", "default/ideal", "serial/fused", "fused host"])


def format_table(results, backends) -> str:
    cols = columns(backends)
    head = ["op", "M", "N", "K"] + cols
    lines = []
    for r in results:
        cells = [r["op"], str(r["M"]), str(r["N"]), str(r["K"])]
        for c in cols:
            v = r.get(c)
            if v is None:
                cells.append("n/a")
            elif "/" in c:
                cells.append(f"{v:.2f}x")
            else:
                cells.append(f"{v:.3f}")
        lines.append(cells)
    widths = [max(len(h), *(len(row[i]) for row in lines)) if lines else len(h)
              for i, h in enumerate(head)]

    def fmt(cells):
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths))
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in lines]
    out.append("times in ms (median device time, max over ranks); fused default = the op with no "
               "backend/split/config arguments; fused[b] = best of the sweep per backend; "
               "fused/ideal takes the best fused; fused host = host (Python + launch) ms per "
               "call of that best fused op")
    return "\n".join(out)


def plot(results, backends, path) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib not installed: no chart"
    series = [f"fused[{b}]" for b in backends] + ["serial cuBLAS", "torch async-TP", "ideal"]
    labels = [f"{r['op']}\n{r['M']}x{r['N']}x{r['K']}" for r in results]
    fig, ax = plt.subplots(figsize=(max(8, 1.6 * len(results)), 5))
    width = 0.8 / len(series)
    for i, s in enumerate(series):
        vals = [r.get(s) or 0.0 for r in results]
        ax.bar([x + i * width for x in range(len(results))], vals, width, label=s)
    ax.set_xticks([x + 0.4 - width / 2 for x in range(len(results))])
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("ms (median)")
    ax.set_title("Syncopate fused ops vs alternatives")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def git_commit() -> str:
    """The commit being measured: ``SYNCOPATE_GIT_COMMIT``, else the ``.syncopate-commit`` file
    at the repository root (written before a run on a machine whose copy of the tree has no
    usable git metadata: the lent GPU machine's copy reports a stale HEAD), else ``git``."""
    if settings.GIT_COMMIT.get():
        return settings.GIT_COMMIT.get()
    here = os.path.dirname(os.path.abspath(__file__))
    marker = os.path.join(here, "..", "..", "..", ".syncopate-commit")
    try:
        with open(marker) as f:
            text = f.read().strip()
        if text:
            return text
    except OSError:
        pass
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True,
                              text=True, timeout=10).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"



def write_results(args, results, backends, skipped, budget, iters, command, comm,
                  final: bool = False) -> str | None:
    """``bench.json`` (and, at the end, ``bench.png``) under ``--out``; returns the plot's note."""
    import torch
    os.makedirs(args.out, exist_ok=True)
    meta = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "gpu": torch.cuda.get_device_name(comm.device), "world_size": comm.world_size,
        "git_commit": git_commit(), "command": command,
        "torch": torch.__version__, "triton": __import__("triton").__version__,
        "dtype": args.dtype, "kernel": args.kernel, "iters": iters, "backends": backends,
        "symm_backend": args.symm, "budget_s": budget, "skipped_rows_over_budget": skipped,
        "complete": final,
    }
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "results": results}, f, indent=1, default=str)
    return plot(results, backends, os.path.join(args.out, "bench.png")) if final else None
