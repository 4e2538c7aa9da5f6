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

__all__ = ["aligned", "columns", "derive", "format_table", "git_commit", "plot", "run_meta",
           "write_json", "write_results"]


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
    lines = [[r["op"], str(r["M"]), str(r["N"]), str(r["K"])]
             + ["n/a" if r.get(c) is None else f"{r[c]:.2f}x" if "/" in c else f"{r[c]:.3f}"
                for c in cols] for r in results]
    return "\n".join(aligned(["op", "M", "N", "K"] + cols, lines) + [
        "times in ms (median device time, max over ranks); fused default = the op with no "
        "backend/split/config arguments; fused[b] = best of the sweep per backend; "
        "fused/ideal takes the best fused; fused host = host (Python + launch) ms per "
        "call of that best fused op"])


def aligned(head: list[str], rows: list[list[str]]) -> list[str]:
    """A table's lines: the head, a rule, the rows, every column right-aligned to its widest
    cell (the benchmark's table and the block's)."""
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h)
              for i, h in enumerate(head)]

    def fmt(cells):
        return "  ".join(c.rjust(w) for c, w in zip(cells, widths))
    return [fmt(head), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows]


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



def run_meta(args, comm, command: str, final: bool, **more) -> dict:
    """What a result file says of its run: date, GPU, world size, the commit measured, the
    command, versions, dtype, whether the run completed, and ``more``."""
    import torch
    dev = torch.device(comm.device)
    return {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "gpu": torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev),
            "world_size": comm.world_size, "git_commit": git_commit(), "command": command,
            "torch": torch.__version__, "dtype": args.dtype, **more, "complete": final}


def write_json(path: str, doc: dict) -> None:
    """``doc`` as indented JSON at ``path``, its folder made first."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)


def write_results(args, results, backends, skipped, budget, iters, command, comm,
                  final: bool = False) -> str | None:
    """``bench.json`` (and, at the end, ``bench.png``) under ``--out``; returns the plot's note."""
    meta = run_meta(args, comm, command, final, triton=__import__("triton").__version__,
                    kernel=args.kernel, iters=iters, backends=backends, symm_backend=args.symm,
                    budget_s=budget, skipped_rows_over_budget=skipped)
    write_json(os.path.join(args.out, "bench.json"), {"meta": meta, "results": results})
    return plot(results, backends, os.path.join(args.out, "bench.png")) if final else None
