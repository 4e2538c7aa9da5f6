"""The local GEMM against cuBLAS on one GPU (meant for an H200): the table, the tuning run, and
installing a tuning run's result as the shipped defaults.

    python -m syncopate.kernels.bench_local --out local_gemm.json            # the table
    python -m syncopate.kernels.bench_local --tune --out tuned.json          # tune (GPU)
    python -m syncopate.kernels.bench_local --table tuned.json --out t.json  # table with it
    python -m syncopate.kernels.bench_local --install-tuned tuned.json       # ship it (CPU)
    python -m syncopate.kernels.bench_local --fp8 --out local_fp8.json       # FP8 vs _scaled_mm

The table: per shape of ``--set`` (default ``broad``: square, tall-skinny, short-wide, K-heavy,
ragged, small-M and LLaMA-MLP shapes; :data:`~.gemm_tuning.SHAPE_SETS`) and dtype, fresh random
A and B, an fp32 reference (``torch.matmul(a.float(), b.float())``, TF32 off), cuBLAS
(``torch.matmul``), then :func:`~.gemm_launch.matmul`'s *default choice* (``kernel='auto'``
with the config table's config: what a user gets) and, with ``--kernels ptr``, the pointer
kernel's default. Every kernel run is checked before it is timed -- output poisoned with NaN,
relative Frobenius error against the reference < 1e-2, NaN never passes -- so a fast wrong
kernel cannot win. ``device ms`` are ``triton.testing.do_bench`` medians of the launch alone
(L2 flushed between repetitions); ``e2e ms`` time the whole call ``matmul(a, b)`` /
``torch.matmul(a, b)`` by the wall clock, back to back, output allocation and host work
included (when the host is slower than the GPU, the difference shows there). The summary
gives the geometric mean of ``device ms / cuBLAS ms`` over the set, and the worst shape with
the plan that ran it.

Tuning (``--tune``): :func:`~.gemm_tuning.tune` -- a pruned candidate space per shape, compiled
in parallel worker processes, measured under ``--budget-s``; writes a config table with every
candidate's record. ``--save-cache`` also merges it into the user's cache;
``--install-tuned F`` (no GPU needed) merges F's entries into the shipped defaults file
``syncopate/kernels/configs/<gpu>.json`` of this source tree.

Exit status: 0 all correct, 1 some kernel or candidate failed (listed), 2 no GPU, 3 watchdog.
Timeout-safe: every device wait is a bounded ``do_bench``; a watchdog thread writes the
partial JSON and exits 3 if one step exceeds ``--step-timeout-s`` or the run
``--hard-timeout-s``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time

from .. import dtypes, settings
from .gemm_tuning import SHAPE_SETS, TOL, config_str, geomean, shape_name

#: The fused ops' benchmark shapes (kept for scripts that import them).
SHAPES = list(SHAPE_SETS["fused"].values())


class Watchdog:
    """Aborts the process (after writing what was measured) if a step or the run overruns."""

    def __init__(self, step_timeout_s: float, hard_timeout_s: float, on_abort):
        self.t0 = time.monotonic()
        self.step = "start"
        self.step_t0 = self.t0
        self.step_timeout_s = step_timeout_s
        self.hard_timeout_s = hard_timeout_s
        self.on_abort = on_abort
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-watchdog")
        self._thread.start()

    def enter(self, step: str, timeout_s: float | None = None) -> None:
        """Start a step; ``timeout_s`` overrides the per-step limit for this one."""
        self.step, self.step_t0 = step, time.monotonic()
        self._limit = timeout_s

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            reason = None
            limit = getattr(self, "_limit", None) or self.step_timeout_s
            if now - self.step_t0 > limit:
                reason = f"step '{self.step}' exceeded {limit:g} s"
            elif now - self.t0 > self.hard_timeout_s:
                reason = f"run exceeded {self.hard_timeout_s:g} s (during '{self.step}')"
            if reason:
                try:
                    self.on_abort(reason)
                finally:
                    sys.stderr.write(f"bench_local: ABORT: {reason}\n")
                    sys.stderr.flush()
                    os._exit(3)


# ----------------------------------------------------------------------------------------------
# The device side (tests substitute a CPU fake with the same methods)
# ----------------------------------------------------------------------------------------------


def _compile_task(M: int, N: int, K: int, dtype: str, config: dict) -> str | bool:
    """Worker process: compile every kernel of the plan of ``(M, N, K, dtype, config)`` on fresh
    CUDA tensors (Triton's JIT warmup, no launch); True, or the error as text."""
    try:
        import torch

        from .gemm_launch import make_plan
        dt = dtypes.torch_dtype(dtype)
        a = torch.empty((M, K), dtype=dt, device="cuda")
        b = torch.empty((K, N), dtype=dt, device="cuda")
        c = torch.empty((M, N), dtype=dt, device="cuda")
        make_plan(a, b, c, kernel="auto", config=config).warmup(a, b, c)
        return True
    except Exception as e:  # compile error, out of resources: the candidate is not timed
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def _worker_init() -> None:
    """Import torch and start CUDA once per worker (not per task). A failure here is left to
    the tasks to report: an initializer that raises would break the whole pool."""
    try:
        import torch
        torch.cuda.init()
    except Exception:
        pass


class CudaProblem:
    """One shape and dtype on the GPU: operands, fp32 reference, and the timed runs."""

    def __init__(self, backend, M, N, K, dtype: str, seed: int):
        import torch
        self.backend = backend
        self.M, self.N, self.K = M, N, K
        self.dtype = dtypes.torch_dtype(dtype)
        g = torch.Generator(device="cuda")
        g.manual_seed(seed + M * 7 + N * 13 + K * 17)
        self.a = torch.randn(M, K, device="cuda", generator=g).to(self.dtype)
        self.b = torch.randn(K, N, device="cuda", generator=g).to(self.dtype)
        self.ref = torch.matmul(self.a.float(), self.b.float())
        self.ref_norm = torch.linalg.norm(self.ref)

    def rel_err(self, c) -> float:
        import torch
        return float(torch.linalg.norm(c.float() - self.ref) / self.ref_norm)

    def cublas_ms(self, warmup_ms, rep_ms) -> float:
        import torch
        c = torch.empty(self.M, self.N, device="cuda", dtype=self.dtype)
        self.cublas_err = None
        ms = self.backend.time_ms(lambda: torch.matmul(self.a, self.b, out=c), warmup_ms, rep_ms)
        self.cublas_err = self.rel_err(c)
        self._cublas_ms = ms
        return ms

    def run(self, config, warmup_ms, rep_ms, kernel: str = "auto") -> dict:
        """Check, then time, the local GEMM with ``config`` (None: the default choice)."""
        import torch

        from .gemm_launch import _plan_for, make_launcher
        rec = {}
        try:
            out = torch.full((self.M, self.N), float("nan"), device="cuda", dtype=self.dtype)
            launch, out = make_launcher(self.a, self.b, out, kernel=kernel, config=config)
            plan = _plan_for(self.a, self.b, out, kernel, config)[0]
            rec["plan"] = repr(plan)
            rec["config"] = plan.config.as_dict()
            launch()
            torch.cuda.synchronize()
            err = self.rel_err(out)
            rec["rel_err"] = err
            rec["correct"] = bool(err < TOL)  # NaN compares False: never passes
            if rec["correct"]:
                rec["ms"] = self.backend.time_ms(launch, warmup_ms, rep_ms)
        except Exception as e:  # compile failure, out of resources, ...
            rec["correct"] = False
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return rec

    def e2e_ms(self, warmup_ms, rep_ms) -> tuple[float, float]:
        """``(matmul(a, b), torch.matmul(a, b))`` timed whole by the wall clock: calls back to
        back, then one synchronisation, divided by the count (median of 3). Allocation and the
        host's work are included: when the host takes longer per call than the GPU, this is the
        host's time -- what a caller of small GEMMs sees."""
        import torch

        from .gemm_launch import matmul
        est = getattr(self, "_cublas_ms", None) or 0.05
        n = max(10, min(5000, int(rep_ms / max(est, 0.002))))

        def wall(fn) -> float:
            fn()
            torch.cuda.synchronize()
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                torch.cuda.synchronize()
                runs.append((time.perf_counter() - t0) * 1e3 / n)
            return sorted(runs)[1]
        return wall(lambda: matmul(self.a, self.b)), wall(lambda: torch.matmul(self.a, self.b))

    def free(self) -> None:
        self.a = self.b = self.ref = None


class CudaBackend:
    """Everything the driver asks of the device, in one place (tests substitute a CPU fake)."""

    device = "cuda"

    def available(self) -> str | None:
        """None when usable, else the reason it is not."""
        import torch
        if not torch.cuda.is_available():
            return "no CUDA device visible to torch"
        return None

    def info(self) -> dict:
        import torch
        import triton

        from .gemm_launch import device_info
        props = torch.cuda.get_device_properties(0)
        sms, cap, gpu = device_info(0)
        return dict(device=props.name, sms=sms, capability=list(cap), gpu=gpu,
                    torch=torch.__version__, triton=triton.__version__)

    def sync(self) -> None:
        import torch
        torch.cuda.synchronize()

    def time_ms(self, fn, warmup_ms: float, rep_ms: float) -> float:
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    def problem(self, M, N, K, dtype, seed) -> CudaProblem:
        return CudaProblem(self, M, N, K, dtype, seed)

    def precompile(self, tasks, *, workers: int, deadline: float) -> dict:
        """Compile ``tasks`` (``(shape, dtype, config)``) in ``workers`` spawned processes until
        ``deadline`` (``time.monotonic()``); ``{task: True or error text}`` for those that
        finished. Workers still busy at the deadline are terminated."""
        import multiprocessing as mp
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
        results = {}
        if not tasks:
            return results
        if workers <= 0:  # in this process, one by one
            for t in tasks:
                if time.monotonic() > deadline:
                    break
                results[t] = _compile_task(*t[0], t[1], t[2].as_dict())
            return results
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init)
        futs = {ex.submit(_compile_task, *t[0], t[1], t[2].as_dict()): t for t in tasks}
        pending = set(futs)
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
                for f in done:
                    try:
                        results[futs[f]] = f.result()
                    except Exception as e:  # a worker died
                        results[futs[f]] = f"{type(e).__name__}: {e}"
        finally:
            procs = list((getattr(ex, "_processes", None) or {}).values())
            ex.shutdown(wait=not pending, cancel_futures=True)
            if pending:
                for p in procs:
                    if p.is_alive():
                        p.terminate()
        return results


# ----------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------


def _gemm_shape(text: str) -> tuple[int, int, int]:
    """``--shapes MxNxK`` or a shape's name in the sets (``k-heavy``)."""
    from ..cli_args import shape
    if text in SHAPE_SETS["all"]:
        return SHAPE_SETS["all"][text]
    try:
        dims = shape(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e}; or a shape name: "
                                         f"{', '.join(SHAPE_SETS['all'])}") from None
    if len(dims) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give M, N and K, e.g. 8192x8192x8192")
    return dims


def _check_out(path: str) -> None:
    """``--out``: its folder must exist and the path must not be a folder; checked before the
    run, whose partial results (watchdog, no GPU) are written there."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path) or not os.path.isdir(folder):
        print(f"python -m syncopate.kernels.bench_local: error: --out {path}: "
              + ("is a directory; give a file name" if os.path.isdir(path)
                 else f"no folder {folder}; create it first"), file=sys.stderr)
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    """The arguments, every value checked at parse time (before a GPU is touched)."""
    from ..cli_args import nonnegative_int, positive_float
    p = argparse.ArgumentParser(prog="python -m syncopate.kernels.bench_local",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write results as JSON to this path")
    p.add_argument("--set", default="broad", choices=sorted(SHAPE_SETS),
                   help="named shape set (default broad)")
    p.add_argument("--shapes", nargs="*", metavar="MxNxK", type=_gemm_shape,
                   help="shapes (MxNxK or names) instead of --set")
    p.add_argument("--dtypes", nargs="*", default=["bf16", "fp16"], choices=["bf16", "fp16"])
    p.add_argument("--kernels", nargs="*", default=["auto"], choices=["auto", "tma", "ptr"],
                   help="kernels to time at their default config (default: auto, the choice "
                        "matmul makes)")
    p.add_argument("--tune", action="store_true",
                   help="tune the config per shape and write the table to --out")
    p.add_argument("--save-cache", action="store_true",
                   help="with --tune: merge the result into the user's tuning cache")
    p.add_argument("--table", metavar="FILE",
                   help="use this config table instead of the cache and shipped defaults")
    p.add_argument("--install-tuned", metavar="FILE",
                   help="merge a --tune result into the shipped defaults file (no GPU needed)")
    p.add_argument("--gpu", help="with --install-tuned: the GPU key (default: the file's)")
    p.add_argument("--workers", type=nonnegative_int, default=12,
                   help="processes compiling in parallel (0: compile in this process)")
    p.add_argument("--budget-s", type=positive_float, default=240.0,
                   help="--tune's time budget, compile and measurement (default 240)")
    p.add_argument("--no-e2e", action="store_true", help="skip the host-included timings")
    p.add_argument("--step-timeout-s", type=positive_float, default=90.0)
    p.add_argument("--hard-timeout-s", type=positive_float, default=480.0)
    p.add_argument("--warmup-ms", type=positive_float, default=10.0)
    p.add_argument("--rep-ms", type=positive_float, default=40.0)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--fp8", action="store_true",
                   help="time the FP8 GEMM against torch._scaled_mm instead (its own driver, "
                        ":mod:`syncopate.kernels.bench_fp8`; its options follow --fp8)")
    return p


def _err(msg: str) -> int:
    print(f"python -m syncopate.kernels.bench_local: error: {msg}", file=sys.stderr)
    return 2


def install_tuned(path: str, gpu: str | None = None, dest=None) -> tuple[str, int]:
    """Merge a tuning result's entries into the shipped defaults of its GPU (or ``dest``);
    ``(file written, entries installed)``. The candidates' records are left out."""
    from . import gemm_table
    from .gemm_tuning import table_entries
    doc = gemm_table.read_table(path)
    key = gpu or doc.get("gpu")
    if not key:
        raise ValueError(f"{path} names no GPU; pass --gpu (e.g. --gpu h200)")
    new = []
    for e in table_entries(doc):
        e = {k: v for k, v in e.items() if k not in ("candidates",)}
        e["measured"] = True
        new.append(e)
    if not new:
        raise ValueError(f"{path} has no entry with a measured config to install")
    dest = dest or gemm_table.shipped_path(key)
    old = gemm_table.read_table(dest)["entries"] if os.path.isfile(dest) else []
    merged = gemm_table.merge_entries(old, new)
    dev = doc.get("device") or {}
    n_seed = sum(1 for e in merged if not e.get("measured", True))
    gemm_table.write_table(
        dest, merged, gpu=key, source="tuned",
        note=(f"{len(merged) - n_seed} entries measured by python -m syncopate.kernels."
              f"bench_local --tune on {dev.get('device', key)} (torch {dev.get('torch')}, "
              f"triton {dev.get('triton')})" + (f"; {n_seed} seed entries (heuristic choices, "
                                                "not measured) remain" if n_seed else "")))
    return str(dest), len(new)


def main(argv=None, backend=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--fp8" in argv:  # the FP8 GEMM against torch._scaled_mm: its own driver
        from .bench_fp8 import main as fp8_main
        return fp8_main([x for x in argv if x != "--fp8"], backend)
    args = build_parser().parse_args(argv)
    if args.install_tuned:
        from ..errors import LaunchError
        try:
            dest, n = install_tuned(args.install_tuned, args.gpu)
        except (LaunchError, ValueError, OSError) as e:
            return _err(str(e))
        print(f"installed {n} tuned entries into {dest}")
        return 0
    if args.out:
        _check_out(args.out)
    if args.table:
        if not os.path.isfile(args.table):
            return _err(f"--table {args.table}: no such file")
        from . import gemm_table
        from ..errors import LaunchError
        try:
            gemm_table.read_table(args.table)
        except LaunchError as e:
            return _err(str(e))
        settings.GEMM_TABLE.set(os.path.abspath(args.table))
        gemm_table.reload_tables()

    report: dict = {"tool": "syncopate.kernels.bench_local", "mode": "tune" if args.tune
                    else "table", "complete": False}
    lock = threading.Lock()

    def write(reason=None, doc=None):
        with lock:
            if reason:
                report["aborted"] = reason
            if args.out:
                tmp = args.out + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(doc if doc is not None else report, f, indent=1)
                os.replace(tmp, args.out)

    backend = backend or CudaBackend()
    why = backend.available()
    if why:
        report["error"] = why
        print(f"python -m syncopate.kernels.bench_local: error: {why}; nothing to run",
              file=sys.stderr)
        write()
        return 2
    shapes = [tuple(s) for s in args.shapes] if args.shapes else \
        list(SHAPE_SETS[args.set].values())
    report.update(device=backend.info())
    dog = Watchdog(args.step_timeout_s, args.hard_timeout_s, write)
    _quiet_tf32()
    try:
        if args.tune:
            return _tune(args, backend, shapes, report, dog, write)
        return _table(args, backend, shapes, report, dog, write)
    finally:
        dog.stop()


def _quiet_tf32() -> None:
    import warnings
    try:
        import torch
    except ImportError:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = False  # a true fp32 reference


def _tune(args, backend, shapes, report, dog, write) -> int:
    from .gemm_tuning import tune
    dog.enter("tune", timeout_s=args.budget_s + 120)

    def progress(rep):
        report.update(rep)
        write()
    rep = tune(backend, shapes, args.dtypes, budget_s=args.budget_s, workers=args.workers,
               warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, seed=args.seed,
               on_progress=progress)
    report.update(rep)
    report["complete"] = True
    write()
    bad = rep["failed"]
    print(f"\ntuned {len(rep['entries'])} of {len(shapes) * len(args.dtypes)} "
          f"shape/dtype pairs in {rep['elapsed_s']:.1f} s ({rep['distinct_compiles']} compiles, "
          f"{rep['compile_failures']} failed or not reached); geomean best/cuBLAS "
          f"{rep['geomean_vs_cublas']:.3f}")
    if args.save_cache:
        from . import gemm_table
        from .gemm_tuning import table_entries
        path = gemm_table.cache_path(rep["gpu"])
        old = gemm_table.read_table(path)["entries"] if path.is_file() else []
        gemm_table.write_table(path, gemm_table.merge_entries(old, table_entries(rep)),
                               gpu=rep["gpu"], source="tuned (user cache)")
        print(f"merged into the tuning cache {path}")
    if args.out:
        print(f"wrote {args.out} (install with: python -m syncopate.kernels.bench_local "
              f"--install-tuned {args.out})")
    return 1 if bad or rep["skipped_for_budget"] else 0


def _table(args, backend, shapes, report, dog, write) -> int:
    from .gemm_config import GemmConfig
    t0 = time.monotonic()
    report["results"] = []
    report["table"] = settings.GEMM_TABLE.get() or "cache + shipped defaults"
    # precompile what the defaults need, in parallel (most is cached after a --tune run)
    if args.workers and hasattr(backend, "precompile"):
        from .gemm_launch import plan_layout
        info = backend.info()
        tasks = {}
        for s in shapes:
            for dt in args.dtypes:
                cfg = plan_layout(*s, dtypes.torch_dtype(dt), None, info["sms"],
                                  gpu=info["gpu"]).config
                tasks[(tuple(s), dt, cfg)] = None
        dog.enter("precompile", timeout_s=200)
        backend.precompile(list(tasks), workers=args.workers, deadline=time.monotonic() + 150)
    failures = []
    for dt in args.dtypes:
        for s in shapes:
            M, N, K = s
            dog.enter(f"{dt} {shape_name(s)}")
            prob = backend.problem(M, N, K, dt, args.seed)
            cub = prob.cublas_ms(args.warmup_ms, args.rep_ms)
            rec = {"name": shape_name(s), "M": M, "N": N, "K": K, "dtype": dt,
                   "flop": 2.0 * M * N * K, "cublas_ms": cub,
                   "cublas_rel_err": getattr(prob, "cublas_err", None), "kernels": {}}
            for kernel in args.kernels:
                r = prob.run(None, args.warmup_ms, args.rep_ms, kernel=kernel)
                if r.get("ms"):
                    r["vs_cublas"] = r["ms"] / cub
                    r["tflops"] = rec["flop"] / (r["ms"] * 1e-3) / 1e12
                else:
                    failures.append((dt, s, kernel,
                                     r.get("error") or f"rel_err={r.get('rel_err')}"))
                rec["kernels"][kernel] = r
            if not args.no_e2e and rec["kernels"].get("auto", {}).get("ms"):
                ours, theirs = prob.e2e_ms(args.warmup_ms, args.rep_ms)
                rec.update(e2e_ms=ours, cublas_e2e_ms=theirs, e2e_vs_cublas=ours / theirs)
            prob.free()
            report["results"].append(rec)
            write()
    # summary
    main_k = args.kernels[0]
    ratios = [(r["kernels"][main_k].get("vs_cublas"), r) for r in report["results"]]
    ok = [(x, r) for x, r in ratios if x]
    summ = {"kernel": main_k, "geomean_vs_cublas": geomean(x for x, _ in ok),
            "geomean_e2e_vs_cublas": geomean(r.get("e2e_vs_cublas") for r in report["results"]),
            "shapes": len(ratios), "failures": len(failures)}
    for dt in args.dtypes:
        summ[f"geomean_vs_cublas_{dt}"] = geomean(x for x, r in ok if r["dtype"] == dt)
    if ok:
        x, w = max(ok, key=lambda t: t[0])
        summ["worst"] = {"name": w["name"], "dtype": w["dtype"], "vs_cublas": x,
                         "plan": w["kernels"][main_k].get("plan")}
        x, b = min(ok, key=lambda t: t[0])
        summ["best"] = {"name": b["name"], "dtype": b["dtype"], "vs_cublas": x}
    report["summary"] = summ
    report["elapsed_s"] = time.monotonic() - t0
    report["complete"] = True
    write()

    print(f"{'shape':<14} {'MxNxK':<18} {'dt':<4} {'cuBLAS ms':>9} " +
          " ".join(f"{k + ' ms':>9} {'vs cuBLAS':>9}" for k in args.kernels) +
          f" {'e2e vs':>7}  config")
    for r in report["results"]:
        cols = []
        for k in args.kernels:
            kr = r["kernels"][k]
            nan = float("nan")
            cols.append(f"{kr.get('ms', nan):>9.4f} {kr.get('vs_cublas', nan):>8.3f}x")
        cfg = r["kernels"][main_k].get("config")
        plan = r["kernels"][main_k].get("plan") or ""
        staged = " staged " + plan.split("staged ")[1].rstrip(")") if "staged" in plan else ""
        print(f"{r['name']:<14} {r['M']}x{r['N']}x{r['K']:<8} {r['dtype']:<4} "
              f"{r['cublas_ms']:>9.4f} " + " ".join(cols) +
              f" {r.get('e2e_vs_cublas', float('nan')):>6.3f}x  "
              f"{config_str(GemmConfig.of(cfg)) if cfg else 'FAILED'}{staged}")
    dev = report["device"]
    print(f"\n{dev.get('device')}, {dev.get('sms')} SMs, torch {dev.get('torch')}, triton "
          f"{dev.get('triton')}; table: {report['table']}")
    print(f"geomean {main_k}/cuBLAS (device time): {summ['geomean_vs_cublas']:.3f}  " +
          "  ".join(f"{dt}: {summ[f'geomean_vs_cublas_{dt}']:.3f}" for dt in args.dtypes) +
          f"; host included (e2e): {summ['geomean_e2e_vs_cublas']:.3f}")
    if "worst" in summ:
        w = summ["worst"]
        print(f"worst: {w['name']} {w['dtype']} {w['vs_cublas']:.3f}x ({w['plan']})")
    for f in failures:
        print(f"  FAILED {f[0]} {shape_name(f[1])} {f[2]}: {f[3]}")
    if args.out:
        print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
