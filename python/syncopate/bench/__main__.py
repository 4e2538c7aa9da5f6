"""``python -m syncopate.bench``: fused AG+GEMM and GEMM+RS against the alternatives.

Run under torchrun, one process per GPU::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 -m syncopate.bench --out bench_out [--quick]

Columns, measured side by side in one run (medians of CUDA-event times over ``--iters``
iterations, the L2 flushed before each, the max over ranks since an op is as slow as its
slowest rank):

* ``fused[<backend>]`` -- the best (split, comm programs) of a small sweep, per backend;
* ``serial cuBLAS`` -- NCCL collective then ``torch.matmul``;
* ``serial triton`` -- NCCL collective then our local Triton kernel (the unfused path);
* ``torch async-TP`` -- ``torch.ops.symm_mem.fused_all_gather_matmul`` /
  ``fused_matmul_reduce_scatter``;
* ``gemm`` (our local kernel alone), ``gemm cuBLAS``, ``comm`` (the NCCL collective alone),
  ``ideal = max(gemm, comm)``; ratios ``fused/ideal`` and ``serial/fused``.

``--compile`` instead times the *compile* of the fused GEMMs on the CPU (no GPU, no torchrun):
the syncopate stage pass by pass and the whole compile, as a table and ``compile.json``
(:mod:`syncopate.bench.compile_time`).

Every fused configuration is checked against the reference before it is timed (AG+GEMM:
bitwise equal to the local kernel on the gathered A; GEMM+RS: relative error vs the NCCL
path); a configuration that fails its check is reported and not timed. Writes
``bench.json`` (with date, GPU, git commit, command) and ``bench.png`` under ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

AG_SHAPES = [(14336, 4096), (28672, 8192), (29568, 8192)]  # (N, K), B per rank [K, N/W]
RS_SHAPES = [(14336, 4096), (28672, 8192)]  # (K, N), A per rank [M, K/W]
M_MAIN = 8192
M_EXTRA = (1024, 4096)


def parse_args(argv=None):
    p = argparse.ArgumentParser(prog="python -m syncopate.bench", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="bench_out", help="directory for bench.json and bench.png")
    p.add_argument("--quick", action="store_true", help="a small subset (for CI-style checks)")
    p.add_argument("--iters", type=int, default=None, help="timed iterations per column")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--backends", default="sm,ce",
                   help="fused backends (nvshmem needs --symm nvshmem; ce+epilogue: GEMM+RS with "
                        "the sum in the owner's epilogue)")
    p.add_argument("--symm", default="cuda", choices=("cuda", "nvshmem"),
                   help="torch symmetric-memory backend of the process")
    p.add_argument("--ops", default="ag,rs")
    p.add_argument("--kernel", default="tma", choices=("tma", "ptr"))
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--budget-s", type=float, default=None,
                   help="start a row only if it should end within this many seconds, judged by "
                        "the slowest row so far (default 150, quick 60)")
    p.add_argument("--m", default=None,
                   help="comma-separated M values to run (default: 8192, 1024, 4096; quick: 8192)")
    from .compile_time import add_arguments
    add_arguments(p)
    return p.parse_args(argv)


def rows_for(args, W):
    rows = []
    ms = (M_MAIN,) if args.quick else (M_MAIN,) + M_EXTRA
    if args.m:
        ms = tuple(int(x) for x in args.m.split(",") if x)
    ops = args.ops.split(",")
    for M in ms:
        if "ag" in ops:
            for N, K in (AG_SHAPES[:1] if args.quick else AG_SHAPES):
                rows.append(("ag_gemm", M, N, K))
        if "rs" in ops:
            for K, N in (RS_SHAPES[:1] if args.quick else RS_SHAPES):
                rows.append(("gemm_rs", M, N, K))
    if args.quick and "ag" in ops and not args.m:
        rows.append(("ag_gemm", 1024, AG_SHAPES[0][0], AG_SHAPES[0][1]))
    return rows


def sweep_for(backend, quick, auto=None, op="ag_gemm", reduce=""):
    """(split, comm_programs) candidates per backend, small on purpose (each is a compile),
    plus ``auto`` -- what the op picks by itself (the cost model) -- when it is not among them.
    cp = 32 is gone: on 2 x H200 it was slower than 16 on every shape (run 2), since the comm
    programs' SMs are taken from the GEMM. GEMM+RS sweeps finer splits: its last band's
    reduction is an exposed tail (split 1 was 1.4x slower than split 4, run 3)."""
    if backend == "ce" and op == "gemm_rs" and reduce != "epilogue" and not quick:
        # the sum after the kernel: 1.2-1.4x slower than the epilogue variant on every shape of
        # runs 4-5 (0.93-1.13 vs 0.70 ms at 8192x4096x14336); one point keeps it on the chart
        cands = [(2, 0)]
    elif backend == "ce":
        cands = [(1, 0), (2, 0)] if quick else [(1, 0), (2, 0), (4, 0)]
    elif backend == "nvshmem":
        cands = [(2, 8)] if quick else [(1, 8), (2, 8), (4, 8), (4, 16)]
    elif op == "gemm_rs" and not quick:
        # runs 4-5: 16/16 never the best (within 2% of 16/8 at M = 8192); 4/8 the best only at
        # M = 1024, by 0.5% over 2/16
        cands = [(2, 16), (4, 16), (8, 8), (8, 16), (16, 8)]
    else:
        cands = [(2, 16)] if quick else [(1, 8), (2, 8), (4, 8), (2, 16), (4, 16)]
    if auto is not None and tuple(auto) not in cands:
        cands.append(tuple(auto))
    return cands


class Timer:
    """Median **device** time of ``fn`` (CUDA events), the L2 flushed before each iteration,
    plus the median **host** time of one call (``last_host_ms``, after each timing).

    Why a sleep kernel before each iteration: at M = 1024 an op's Python (argument checks,
    launches) can take longer than its kernels, and with the events right behind the flush the
    GPU would sit idle waiting for the host inside the timed window -- the column would measure
    Python, not the op. ``torch.cuda._sleep`` (calibrated to ``run_ahead_ms``, more than one
    call's host time) keeps the GPU busy while the host enqueues the iteration, so the events
    bracket only GPU work and the host runs further ahead each iteration; the host time is
    reported beside it. The iterations are queued back to back (no synchronisation between
    them), so the collectives keep the ranks' GPUs aligned. Every column is timed the same way."""

    def __init__(self, device, iters, warmup, run_ahead_ms: float = 1.0):
        import torch
        self.iters, self.warmup = iters, warmup
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=device)
        #: median host time (ms) of one call in the last timing
        self.last_host_ms: float | None = None
        self.sleep_cycles = self._calibrate(run_ahead_ms)

    @staticmethod
    def _calibrate(ms: float) -> int:
        import torch
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # warm up
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        torch.cuda.synchronize()
        per_ms = cycles / max(s.elapsed_time(e), 1e-3)
        return int(per_ms * ms)

    def __call__(self, fn):
        import torch
        import torch.distributed as dist
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        host = []
        for s, e in zip(starts, ends):
            self.flush.zero_()
            torch.cuda._sleep(self.sleep_cycles)
            s.record()
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
            e.record()
        torch.cuda.synchronize()  # every event complete before elapsed_time
        ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
        t = torch.tensor([ms, statistics.median(host) * 1e3], device=self.flush.device,
                         dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.last_host_ms = float(t[1])
        return float(t[0])


def _safe(results, name, fn):
    try:
        results[name] = fn()
    except Exception as e:  # noqa: BLE001 - a column that cannot run is reported, not fatal
        results[name] = None
        results.setdefault("errors", {})[name] = _error_text(e)


def bench_ag(comm, timer, M, N, K, args, backends, log):
    import torch
    import torch.distributed as dist

    from ..ops import ag_gemm
    from ..ops._gemm import choose, gemm_call, resolve_config, run_local
    W = comm.world_size
    dtype = getattr(torch, args.dtype)
    Nl, Ms = N // W, M // W
    dev = comm.device
    g = torch.Generator(device=dev)
    g.manual_seed(1 + comm.rank)
    a = torch.randn(Ms, K, generator=g, device=dev).to(dtype)
    b = torch.randn(K, Nl, generator=g, device=dev).to(dtype)
    cfg = resolve_config(args.kernel, M, Nl, K, dtype)
    gathered = torch.empty(M, K, device=dev, dtype=dtype)
    out = torch.empty(M, Nl, device=dev, dtype=dtype)
    r: dict = {"op": "ag_gemm", "M": M, "N": N, "K": K, "N_local": Nl, "config": cfg.as_dict()}
    dist.all_gather_into_tensor(gathered, a)
    ref = torch.empty(M, Nl, device=dev, dtype=dtype)
    run_local(gemm_call(args.kernel, gathered, b, ref, cfg))

    _safe(r, "comm", lambda: timer(lambda: dist.all_gather_into_tensor(gathered, a)))
    _safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, gathered, b, out, cfg))))
    _safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(gathered, b, out=out)))
    _safe(r, "serial cuBLAS", lambda: timer(lambda: (dist.all_gather_into_tensor(gathered, a),
                                                     torch.matmul(gathered, b, out=out))))
    _safe(r, "serial triton", lambda: timer(lambda: ag_gemm(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    def async_tp():
        _enable_symm_mem(comm)
        fn = lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [b], 0, comm.group_name,
                                                                 return_A=False)  # noqa: E731
        _, (c,) = fn()
        if (c.float() - ref.float()).norm() / ref.float().norm() > 2e-2:
            raise RuntimeError("async-TP result does not match the reference")
        return timer(fn)
    _safe(r, "torch async-TP", async_tp)

    def same_as_local_kernel(res):
        return bool(torch.equal(res, ref))

    mismatch = "result differs from the local kernel on the gathered A"
    _time_default(r, comm, timer, lambda: ag_gemm(a, b, comm, out=out), same_as_local_kernel,
                  mismatch, lambda: "sm split={} cp={}".format(
                      *choose("ag_gemm", "sm", M, Nl, K, W, dtype, None, None)))
    _sweep_fused(r, comm, timer, backends, args, log,
                 lambda **kw: ag_gemm(a, b, comm, kernel=args.kernel, config=cfg, out=out, **kw),
                 same_as_local_kernel, mismatch,
                 auto=lambda be, red: choose("ag_gemm", be, M, Nl, K, W, dtype, None, None))
    return r


def bench_rs(comm, timer, M, N, K, args, backends, log):
    import torch
    import torch.distributed as dist

    from ..ops import gemm_rs
    from ..ops._gemm import gemm_call, resolve_config, run_local
    from ..ops.gemm_rs import default_plan, resolve_variant
    W = comm.world_size
    dtype = getattr(torch, args.dtype)
    Kl = K // W
    dev = comm.device
    g = torch.Generator(device=dev)
    g.manual_seed(3 + comm.rank)
    a = torch.randn(M, Kl, generator=g, device=dev).to(dtype)
    b = torch.randn(Kl, N, generator=g, device=dev).to(dtype)
    cfg = resolve_config(args.kernel, M, N, Kl, dtype)
    partial = torch.empty(M, N, device=dev, dtype=dtype)
    out = torch.empty(M // W, N, device=dev, dtype=dtype)
    r: dict = {"op": "gemm_rs", "M": M, "N": N, "K": K, "K_local": Kl, "config": cfg.as_dict()}
    ref = gemm_rs(a, b, comm, kernel=args.kernel, config=cfg, fused=False).clone()

    _safe(r, "comm", lambda: timer(lambda: dist.reduce_scatter_tensor(out, partial)))
    _safe(r, "gemm", lambda: timer(lambda: run_local(gemm_call(args.kernel, a, b, partial, cfg))))
    _safe(r, "gemm cuBLAS", lambda: timer(lambda: torch.matmul(a, b, out=partial)))
    _safe(r, "serial cuBLAS", lambda: timer(lambda: (torch.matmul(a, b, out=partial),
                                                     dist.reduce_scatter_tensor(out, partial))))
    _safe(r, "serial triton", lambda: timer(lambda: gemm_rs(a, b, comm, kernel=args.kernel,
                                                             config=cfg, out=out, fused=False)))

    def async_tp():
        _enable_symm_mem(comm)
        fn = lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0,  # noqa: E731
                                                                     comm.group_name)
        c = fn()
        if (c.float() - ref.float()).norm() / ref.float().norm() > 2e-2:
            raise RuntimeError("async-TP result does not match the reference")
        return timer(fn)
    _safe(r, "torch async-TP", async_tp)

    def close_to_nccl_path(res):
        return float((res.float() - ref.float()).norm() / ref.float().norm()) <= 2e-2

    def rs_default():
        be, red, _ = resolve_variant(M, N, Kl, W, dtype, cfg, False)
        split, cp = default_plan(be, red, M, N, Kl, W, dtype)
        return f"{be}{'+epilogue' if red == 'epilogue' else ''} split={split} cp={cp}"
    _time_default(r, comm, timer, lambda: gemm_rs(a, b, comm, out=out), close_to_nccl_path,
                  "result differs from the NCCL path", rs_default)
    _sweep_fused(r, comm, timer, backends, args, log,
                 # the epilogue variant takes the default config: the op may lower its GROUP_M
                 lambda **kw: gemm_rs(a, b, comm, kernel=args.kernel, out=out,
                                      config=None if kw.get("reduce") == "epilogue" else cfg, **kw),
                 close_to_nccl_path, "result differs from the NCCL path",
                 auto=lambda be, red: default_plan(be, red or "comm", M, N, Kl, W, dtype))
    return r


def _error_text(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def _checked_time(comm, timer, run, correct):
    """``(device ms, host ms)`` of ``run()``, or None when ``correct(result)`` fails on any
    rank (then it is not timed). Exceptions (a CommTimeout, a launch error) propagate."""
    import torch
    import torch.distributed as dist

    res = run()
    torch.cuda.synchronize()
    comm.check()
    ok = torch.tensor([int(correct(res))], device=comm.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if not int(ok):
        return None
    t = timer(run)
    host = timer.last_host_ms
    comm.check()
    return t, host


def _time_default(r, comm, timer, run, correct, mismatch, describe):
    """``fused default``: the op called as a user would, with no backend, split, comm-program
    count or config (the op's own choice, ``describe()`` says which), checked like the sweep."""
    try:
        timed = _checked_time(comm, timer, run, correct)
    except Exception as e:  # noqa: BLE001
        r.setdefault("errors", {})["fused default"] = _error_text(e)
        return
    if timed is None:
        r.setdefault("check_failed", []).append("default")
        r.setdefault("errors", {})["fused default"] = mismatch
        return
    r["fused default"], r["fused default host"] = timed
    r["fused default is"] = describe()


def _sweep_fused(r, comm, timer, backends, args, log, run, correct, mismatch, auto=None):
    """Time ``run(backend=, split=, comm_programs=)`` over the sweep of each backend; every
    candidate is checked with ``correct(result)`` on every rank before it is timed.
    ``auto(backend, reduce)``: the (split, comm_programs) the op would pick itself; its time
    is kept as ``fused[<backend>] auto`` (how good the default is)."""
    for backend in backends:
        # "ce+epilogue": the ce backend with reduce="epilogue" (GEMM+RS only)
        be, _, red = backend.partition("+")
        if red and r["op"] != "gemm_rs":
            continue
        best = None
        pick = auto(be, red) if auto is not None else None
        for split, cp in sweep_for(be, args.quick, pick, r["op"], red):
            label = f"{backend} split={split} cp={cp}"
            kw = dict(backend=be, split=split, comm_programs=cp)
            if red:
                kw["reduce"] = red
            try:
                timed = _checked_time(comm, timer, lambda: run(**kw), correct)
            except Exception as e:  # noqa: BLE001
                r.setdefault("errors", {})[label] = _error_text(e)
                continue
            if timed is None:
                r.setdefault("check_failed", []).append(label)
                log(f"  {label}: {mismatch}; not timed")
                continue
            t, host = timed
            r.setdefault("sweep", {})[label] = t
            r.setdefault("sweep host", {})[label] = host
            if pick is not None and (split, cp) == tuple(pick):
                r[f"fused[{backend}] auto"] = t
                r[f"fused[{backend}] auto pick"] = {"split": split, "comm_programs": cp}
            if best is None or t < best[0]:
                best = (t, split, cp, host)
        r[f"fused[{backend}]"] = best[0] if best else None
        if best:
            r[f"fused[{backend}] best"] = {"split": best[1], "comm_programs": best[2]}
            r[f"fused[{backend}] host"] = best[3]


def _enable_symm_mem(comm):
    """torch 2.11 still wants ``enable_symm_mem_for_group`` before the async-TP ops (deprecated
    and a no-op in newer torch)."""
    import warnings

    from torch.distributed import _symmetric_memory as symm_mem
    fn = getattr(symm_mem, "enable_symm_mem_for_group", None)
    if fn is not None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(comm.group_name)


def derive(r, backends):
    """ideal, best fused, ratios."""
    g, c = r.get("gemm"), r.get("comm")
    r["ideal"] = max(g, c) if g is not None and c is not None else None
    fused = [r.get(f"fused[{b}]") for b in backends if r.get(f"fused[{b}]") is not None]
    r["fused best"] = min(fused) if fused else None
    best_b = [b for b in backends if r.get(f"fused[{b}]") is not None and r[f"fused[{b}]"] == r["fused best"]]
    r["fused host"] = r.get(f"fused[{best_b[0]}] host") if best_b else None
    f, i, s = r["fused best"], r["ideal"], r.get("serial cuBLAS")
    r["fused/ideal"] = f / i if f and i else None
    r["serial/fused"] = s / f if f and s else None
    d = r.get("fused default")
    r["default/ideal"] = d / i if d and i else None
    return r


def columns(backends):
    return (["fused default"] + [f"fused[{b}]" for b in backends]
            + ["serial cuBLAS", "serial triton", "torch async-TP", "gemm", "gemm cuBLAS", "comm",
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
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.rjust(w) for c, w in zip(cells, widths))  # noqa: E731
    out = [fmt(head), fmt(["-" * w for w in widths])] + [fmt(l) for l in lines]
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
    env = os.environ.get("SYNCOPATE_GIT_COMMIT", "").strip()
    if env:
        return env
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
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                              timeout=10).stdout.strip() or "unknown"
    except Exception:  # noqa: BLE001
        return "unknown"


def init_distributed() -> None:
    """One process per GPU under torchrun: the lent machine's settings (no NVLink multicast)
    unless the caller set them, this rank's GPU, the NCCL process group."""
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(k, v)
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))


def start_row(elapsed: float, slowest: float, budget: float) -> bool:
    """Whether a row may start: it should end within the budget if it takes as long as the
    slowest row so far (rows differ by up to ~2x; a killed row loses its whole sweep)."""
    return elapsed + slowest <= budget


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


def loopback_refusal(env=None, *, in_loopback: bool | None = None,
                     device_count: int | None = None) -> str | None:
    """Why the benchmark must not run here, or None. It refuses loopback (W virtual ranks on
    one GPU, docs/loopback.md) and, likewise, more ranks on this node than GPUs: the ranks
    then share SMs, copy engines and (loopback) the host's GIL, so every time it would print
    measures the sharing, not the kernels. Correctness runs there; timings do not."""
    env = os.environ if env is None else env
    if in_loopback is None:
        from ..runtime import collectives
        in_loopback = collectives.current_loopback() is not None
    lb = env.get("SYNCOPATE_GPU_LOOPBACK", "").strip()
    if in_loopback or (lb and lb != "0"):
        return ("the benchmark refuses loopback (W virtual ranks sharing one GPU): its timings "
                "would measure the ranks competing for the same SMs and copy engines, not the "
                "kernels. Loopback is for correctness (tests/gpu with SYNCOPATE_GPU_LOOPBACK=W); "
                "benchmark with one process per GPU: torchrun --nproc-per-node <GPUs> -m "
                "syncopate.bench (unset SYNCOPATE_GPU_LOOPBACK)")
    local = env.get("LOCAL_WORLD_SIZE")
    if local and device_count is None:
        import torch
        device_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if local and device_count is not None and int(local) > device_count:
        return (f"{local} ranks on this node but {device_count} GPU(s): ranks would share a GPU "
                f"and the timings would be meaningless; run with --nproc-per-node "
                f"{max(1, device_count)} (one process per GPU)")
    return None


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.compile:  # CPU only: no torchrun, no GPU, no loopback question
        from . import compile_time
        return compile_time.main(args, " ".join([sys.executable, "-m", "syncopate.bench"]
                                                + (argv if argv is not None else sys.argv[1:])),
                                 git_commit())
    why = loopback_refusal()
    if why is not None:
        print(f"syncopate.bench: {why}", file=sys.stderr)
        return 2
    if "RANK" not in os.environ:
        print("run under torchrun: torchrun --nproc-per-node <GPUs> -m syncopate.bench ...",
              file=sys.stderr)
        return 2
    import torch
    import torch.distributed as dist

    from ..runtime import Communicator
    init_distributed()
    comm = Communicator(symm_backend=args.symm)
    rank0 = comm.rank == 0
    log = (lambda m: print(m, flush=True)) if rank0 else (lambda m: None)
    backends = [b for b in args.backends.split(",") if b]
    if "nvshmem" in backends and args.symm != "nvshmem":
        log("nvshmem backend needs --symm nvshmem; dropping it")
        backends.remove("nvshmem")
    iters = args.iters or (10 if args.quick else 20)
    timer = Timer(comm.device, iters, args.warmup)
    budget = args.budget_s if args.budget_s is not None else (60.0 if args.quick else 150.0)
    t_start = time.monotonic()
    results, skipped, slowest = [], [], 0.0
    command = " ".join([sys.executable, "-m", "syncopate.bench"]
                       + (argv if argv is not None else sys.argv[1:]))
    for op, M, N, K in rows_for(args, comm.world_size):
        # rank 0 decides for all (each rank's clock differs a little: a rank that skipped a row
        # its peers started would hang them in the row's first collective)
        go = torch.tensor([int(start_row(time.monotonic() - t_start, slowest, budget))],
                          device=comm.device)
        dist.broadcast(go, 0, group=comm.group)
        if not int(go):
            skipped.append((op, M, N, K))
            continue
        log(f"{op} M={M} N={N} K={K} ...")
        t0 = time.monotonic()
        fn = bench_ag if op == "ag_gemm" else bench_rs
        r = fn(comm, timer, M, N, K, args, backends, log)
        results.append(derive(r, backends))
        log("  sweep: " + ", ".join(f"{k} {v:.3f}" for k, v in (r.get("sweep") or {}).items()))
        comm.clear_cache()  # free this row's symmetric buffers before the next shape
        slowest = max(slowest, time.monotonic() - t0)
        log(f"  done in {time.monotonic() - t0:.1f} s")
        if rank0:  # after every row: a run killed by its time limit keeps the rows it finished
            write_results(args, results, backends, skipped, budget, iters, command, comm)
    if rank0:
        note = write_results(args, results, backends, skipped, budget, iters, command, comm,
                             final=True)
        print(format_table(results, backends))
        for r in results:
            for name, err in (r.get("errors") or {}).items():
                print(f"  [{r['op']} {r['M']}x{r['N']}x{r['K']}] {name}: {err}")
        for r in results:
            if r.get("fused default is"):
                print(f"  [{r['op']} {r['M']}x{r['N']}x{r['K']}] fused default = {r['fused default is']}")
        if skipped:
            print(f"skipped (would end past the {budget:g} s budget): {skipped}")
        if note:
            print(note)
        print(f"wrote {os.path.join(args.out, 'bench.json')}")
    comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
