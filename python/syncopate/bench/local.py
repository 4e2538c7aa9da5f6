"""The local GEMM against cuBLAS on one GPU (meant for an H200): the table, the tuning run, and
installing a tuning run's result as the shipped defaults.

    python -m syncopate.bench.local --out local_gemm.json            # the table
    python -m syncopate.bench.local --tune --out tuned.json          # tune (GPU)
    python -m syncopate.bench.local --table tuned.json --out t.json  # table with it
    python -m syncopate.bench.local --install-tuned tuned.json       # ship it (CPU)
    python -m syncopate.bench.local --fp8 --out local_fp8.json       # FP8 vs _scaled_mm

The table: per shape of ``--set`` (default ``broad``: square, tall-skinny, short-wide, K-heavy,
ragged, small-M and LLaMA-MLP shapes; :data:`.local_gpu.SHAPE_SETS`) and dtype, fresh random
A and B, an fp32 reference (``torch.matmul(a.float(), b.float())``, TF32 off), cuBLAS
(``torch.matmul``), then ``syncopate.kernels.matmul``'s *default choice* (``kernel='auto'``
with the config table's config: what a user gets) and, with ``--kernels ptr``, the pointer
kernel's default. Every kernel run is checked before it is timed -- output poisoned with NaN,
relative Frobenius error against the reference < 1e-2, NaN never passes -- so a fast wrong
kernel cannot win. ``device ms`` are ``triton.testing.do_bench`` medians of the launch alone
(L2 flushed between repetitions); ``e2e ms`` time the whole call ``matmul(a, b)`` /
``torch.matmul(a, b)`` by the wall clock, back to back, output allocation and host work
included (when the host is slower than the GPU, the difference shows there). The summary
gives the geometric mean of ``device ms / cuBLAS ms`` over the set, and the worst shape with
the plan that ran it.

Tuning (``--tune``): :func:`.tuning.tune` -- a pruned candidate space per shape, compiled
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
import os
import sys
import time

from .. import dtypes, settings
from ..cli_args import nonnegative_int, positive_float
from ..errors import LaunchError
from ..kernels import gemm_table
from ..kernels.gemm_launch import plan_layout
from .local_fp8 import main as fp8_main
from .local_gpu import (SHAPE_SETS, CudaBackend, Report, Watchdog, check_out, config_str,
                        gemm_shape, geomean, shape_name)
from .tuning import save_to_cache, table_entries, tune

PROG = "python -m syncopate.bench.local"


def build_parser() -> argparse.ArgumentParser:
    """The arguments, every value checked at parse time (before a GPU is touched)."""
    p = argparse.ArgumentParser(prog=PROG,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write results as JSON to this path")
    p.add_argument("--set", default="broad", choices=sorted(SHAPE_SETS),
                   help="named shape set (default broad)")
    p.add_argument("--shapes", nargs="*", metavar="MxNxK", type=gemm_shape,
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
                        "python -m syncopate.bench.local_fp8; its options follow --fp8)")
    return p


def _err(msg: str) -> int:
    print(f"{PROG}: error: {msg}", file=sys.stderr)
    return 2


def install_tuned(path: str, gpu: str | None = None, dest=None) -> tuple[str, int]:
    """Merge a tuning result's entries into the shipped defaults of its GPU (or ``dest``);
    ``(file written, entries installed)``. The candidates' records are left out."""
    doc = gemm_table.read_table(path)
    key = gpu or doc.get("gpu")
    if not key:
        raise ValueError(f"{path} names no GPU; pass --gpu (e.g. --gpu h200)")
    new = [{**{k: v for k, v in e.items() if k != "candidates"}, "measured": True}
           for e in table_entries(doc)]
    if not new:
        raise ValueError(f"{path} has no entry with a measured config to install")
    dest = dest or gemm_table.shipped_path(key)
    old = gemm_table.read_table(dest)["entries"] if os.path.isfile(dest) else []
    merged = gemm_table.merge_entries(old, new)
    dev = doc.get("device") or {}
    n_seed = sum(1 for e in merged if not e.get("measured", True))
    gemm_table.write_table(
        dest, merged, gpu=key, source="tuned",
        note=(f"{len(merged) - n_seed} entries measured by {PROG} --tune on "
              f"{dev.get('device', key)} (torch {dev.get('torch')}, "
              f"triton {dev.get('triton')})" + (f"; {n_seed} seed entries (heuristic choices, "
                                                "not measured) remain" if n_seed else "")))
    return str(dest), len(new)


def main(argv=None, backend=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--fp8" in argv:  # the FP8 GEMM against torch._scaled_mm: its own driver
        return fp8_main([x for x in argv if x != "--fp8"], backend)
    args = build_parser().parse_args(argv)
    if args.install_tuned:
        try:
            dest, n = install_tuned(args.install_tuned, args.gpu)
        except (LaunchError, ValueError, OSError) as e:
            return _err(str(e))
        print(f"installed {n} tuned entries into {dest}")
        return 0
    if args.out:
        check_out(args.out, PROG)
    if args.table:
        if not os.path.isfile(args.table):
            return _err(f"--table {args.table}: no such file")
        try:
            gemm_table.read_table(args.table)
        except LaunchError as e:
            return _err(str(e))
        settings.GEMM_TABLE.set(os.path.abspath(args.table))
        gemm_table.reload_tables()

    report = Report(args.out, tool="syncopate.bench.local", mode="tune" if args.tune else "table")
    backend = backend or CudaBackend()
    if report.refuse(backend, PROG):
        return 2
    shapes = [tuple(s) for s in args.shapes] if args.shapes else \
        list(SHAPE_SETS[args.set].values())
    report.update(device=backend.info())
    dog = Watchdog(args.step_timeout_s, args.hard_timeout_s, report.write)
    _quiet_tf32()
    try:
        if args.tune:
            return _tune(args, backend, shapes, report, dog)
        return _table(args, backend, shapes, report, dog)
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


def _tune(args, backend, shapes, report, dog) -> int:
    dog.enter("tune", timeout_s=args.budget_s + 120)

    def progress(rep):
        report.update(rep)
        report.write()
    rep = tune(backend, shapes, args.dtypes, budget_s=args.budget_s, workers=args.workers,
               warmup_ms=args.warmup_ms, rep_ms=args.rep_ms, seed=args.seed,
               on_progress=progress)
    report.update(rep)
    report["complete"] = True
    report.write()
    bad = rep["failed"]
    print(f"\ntuned {len(rep['entries'])} of {len(shapes) * len(args.dtypes)} "
          f"shape/dtype pairs in {rep['elapsed_s']:.1f} s ({rep['distinct_compiles']} compiles, "
          f"{rep['compile_failures']} failed or not reached); geomean best/cuBLAS "
          f"{rep['geomean_vs_cublas']:.3f}")
    if args.save_cache:
        print(f"merged into the tuning cache {save_to_cache(rep)}")
    if args.out:
        print(f"wrote {args.out} (install with: {PROG} --install-tuned {args.out})")
    return 1 if bad or rep["skipped_for_budget"] else 0


def _table(args, backend, shapes, report, dog) -> int:
    t0 = time.monotonic()
    report["results"] = []
    report["table"] = settings.GEMM_TABLE.get() or "cache + shipped defaults"
    # precompile what the defaults need, in parallel (most is cached after a --tune run)
    if args.workers and hasattr(backend, "precompile"):
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
            report.write()
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
    report.write()

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
              f"{config_str(cfg) if cfg else 'FAILED'}{staged}")
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
