"""Validate and time the local GEMMs against cuBLAS on one GPU (meant for an H200).

    python -m syncopate.kernels.bench_local --out local_gemm.json

For each shape (bf16 by default): fresh random A and B, an fp32 reference
(``torch.matmul(a.float(), b.float())``, TF32 off), cuBLAS (``torch.matmul`` in bf16), then
both Triton kernels at their default config and a small sweep of candidate configs. Every
candidate is checked before it is timed -- its output buffer is poisoned with NaN first, the
relative Frobenius error against the reference must be < 1e-2, and NaN never passes (``not
err < tol``) -- so a fast wrong config cannot win. Times are ``triton.testing.do_bench``
medians (L2 flushed between repetitions), TFLOP/s is ``2*M*N*K / time``, and "vs cuBLAS" is the
time ratio ``kernel_ms / cublas_ms`` (below 1 is faster than cuBLAS).

Exit status: 0 all candidates correct, 1 some candidate failed (listed), 2 no GPU, 3 watchdog.

Timeout-safe by construction: no loop waits on the device except through bounded
``do_bench`` calls; phase 1 (cuBLAS + both defaults, every shape) runs first, phase 2 (the
sweep) only while ``--budget-s`` has time left (a candidate is not started when the remaining
budget is smaller than the slowest candidate so far took); and a watchdog thread writes the
partial JSON and exits with status 3 if any single step exceeds ``--step-timeout-s`` or the
whole run exceeds ``--hard-timeout-s`` (a hung kernel cannot hang the job).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import warnings

from .. import dtypes

SHAPES = [(8192, 8192, 8192), (8192, 14336, 4096), (8192, 7168, 4096), (8192, 14336, 8192),
          (4096, 14336, 8192), (1024, 14336, 4096)]
TOL = 1e-2


def candidate_configs(M: int, N: int, K: int, kernel: str, dtype="bf16") -> list:
    """Default config first, then a handful of Hopper alternatives (deduplicated, all valid)."""
    from .gemm_config import GemmConfig, default_config
    default = default_config(M, N, K, dtype, kernel)
    if kernel == "tma":
        alts = [
            GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3),
            GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=4, EPILOGUE_SUBTILE=True),
            GemmConfig(128, 256, 64, 8, num_warps=4, num_stages=3, WARP_SPECIALIZE=True,
                       FLATTEN=False),
            GemmConfig(128, 128, 64, 8, num_warps=8, num_stages=4),
            GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=5, WARP_SPECIALIZE=True,
                       FLATTEN=False),
            GemmConfig(256, 128, 64, 8, num_warps=8, num_stages=3),
        ]
    else:
        alts = [
            GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=3),
            GemmConfig(128, 256, 64, 8, num_warps=8, num_stages=4),
            GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=4),
            GemmConfig(128, 128, 64, 8, num_warps=8, num_stages=4),
            GemmConfig(256, 128, 64, 8, num_warps=8, num_stages=3),
        ]
    out = [default]
    for c in alts:
        if c not in out:
            try:
                out.append(c.check(kernel))
            except Exception:
                pass
    return out


def config_str(c) -> str:
    s = f"{c.BLOCK_M}x{c.BLOCK_N}x{c.BLOCK_K} w{c.num_warps} s{c.num_stages} g{c.GROUP_M}"
    if c.WARP_SPECIALIZE:
        s += " ws"
    if c.EPILOGUE_SUBTILE:
        s += " sub"
    if not c.FLATTEN:
        s += " noflat"
    return s


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

    def enter(self, step: str) -> None:
        self.step, self.step_t0 = step, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            reason = None
            if now - self.step_t0 > self.step_timeout_s:
                reason = f"step '{self.step}' exceeded {self.step_timeout_s:g} s"
            elif now - self.t0 > self.hard_timeout_s:
                reason = f"run exceeded {self.hard_timeout_s:g} s (during '{self.step}')"
            if reason:
                try:
                    self.on_abort(reason)
                finally:
                    sys.stderr.write(f"bench_local: ABORT: {reason}\n")
                    sys.stderr.flush()
                    os._exit(3)


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

        from .gemm_launch import num_sms
        props = torch.cuda.get_device_properties(0)
        return dict(device=props.name, sms=num_sms(0),
                    capability=list(torch.cuda.get_device_capability()),
                    torch=torch.__version__, triton=triton.__version__)

    def sync(self) -> None:
        import torch
        torch.cuda.synchronize()

    def time_ms(self, fn, warmup_ms: float, rep_ms: float) -> float:
        from triton.testing import do_bench
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    def launcher(self, a, b, out, kernel, config):
        from .gemm_launch import make_launcher
        return make_launcher(a, b, out, kernel=kernel, config=config)


def _gemm_shape(text: str) -> tuple[int, int, int]:
    """``--shapes MxNxK``: three positive sizes (``x`` or ``,`` between them)."""
    from ..cli_args import shape
    dims = shape(text)
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
    from ..cli_args import nonnegative_float, nonnegative_int, positive_float
    p = argparse.ArgumentParser(prog="python -m syncopate.kernels.bench_local",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write results as JSON to this path")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--shapes", nargs="*", metavar="MxNxK", type=_gemm_shape,
                   help="shapes to run (default: the six benchmark shapes)")
    p.add_argument("--kernels", nargs="*", default=["tma", "ptr"], choices=["tma", "ptr"])
    p.add_argument("--no-sweep", action="store_true", help="time the default configs only")
    p.add_argument("--budget-s", type=nonnegative_float, default=50.0,
                   help="soft time budget; the config sweep stops when it is spent (default 50)")
    p.add_argument("--step-timeout-s", type=positive_float, default=60.0)
    p.add_argument("--hard-timeout-s", type=positive_float, default=240.0)
    p.add_argument("--warmup-ms", type=positive_float, default=10.0)
    p.add_argument("--rep-ms", type=positive_float, default=40.0)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    return p


def main(argv=None, backend=None) -> int:
    args = build_parser().parse_args(argv)
    if args.out:
        _check_out(args.out)

    import torch

    report: dict = {"tool": "syncopate.kernels.bench_local", "dtype": args.dtype, "tol": TOL,
                    "budget_s": args.budget_s, "results": [], "complete": False}
    lock = threading.Lock()

    def write(reason=None):
        with lock:
            if reason:
                report["aborted"] = reason
            if args.out:
                tmp = args.out + ".tmp"
                with open(tmp, "w") as f:
                    json.dump(report, f, indent=2)
                os.replace(tmp, args.out)

    backend = backend or CudaBackend()
    dev = backend.device
    why = backend.available()
    if why:
        report["error"] = why
        print(f"python -m syncopate.kernels.bench_local: error: {why}; nothing to run",
              file=sys.stderr)
        write()
        return 2

    shapes = list(args.shapes) if args.shapes else SHAPES
    dtype = dtypes.torch_dtype(args.dtype)
    report.update(backend.info())
    if report["capability"][0] < 9 and "tma" in args.kernels:
        print("bench_local: TMA kernel needs sm_90+; timing kernel='ptr' only", file=sys.stderr)
        args.kernels = [k for k in args.kernels if k != "tma"]

    dog = Watchdog(args.step_timeout_s, args.hard_timeout_s, write)
    t_start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.backends.cuda.matmul.allow_tf32 = False  # a true fp32 reference

    def bench(fn) -> float:
        return backend.time_ms(fn, args.warmup_ms, args.rep_ms)

    # Per shape: operands, reference, and the result record.
    data = {}
    records = {}
    for (M, N, K) in shapes:
        dog.enter(f"setup {M}x{N}x{K}")
        g = torch.Generator(device=dev)
        g.manual_seed(args.seed + M * 7 + N * 13 + K * 17)
        a = torch.randn(M, K, device=dev, generator=g).to(dtype)
        b = torch.randn(K, N, device=dev, generator=g).to(dtype)
        ref = torch.matmul(a.float(), b.float())
        ref_norm = torch.linalg.norm(ref)
        data[(M, N, K)] = (a, b, ref, ref_norm)
        rec = {"M": M, "N": N, "K": K, "flop": 2.0 * M * N * K, "kernels": {}}
        records[(M, N, K)] = rec
        report["results"].append(rec)

    def rel_err(c, ref, ref_norm) -> float:
        return float(torch.linalg.norm(c.float() - ref) / ref_norm)

    def tflops(rec, ms):
        return rec["flop"] / (ms * 1e-3) / 1e12

    def run_candidate(shape, kernel, cfg) -> dict:
        a, b, ref, ref_norm = data[shape]
        M, N, _ = shape
        entry = {"kernel": kernel, "shape": list(shape), "config": cfg.as_dict(),
                 "config_str": config_str(cfg)}
        try:
            out = torch.full((M, N), float("nan"), device=dev, dtype=dtype)
            launch, out = backend.launcher(a, b, out, kernel, cfg)
            launch()
            backend.sync()
            err = rel_err(out, ref, ref_norm)
            entry["rel_err"] = err
            entry["correct"] = bool(err < TOL)  # NaN compares False: never passes
            if entry["correct"]:
                ms = bench(launch)
                entry["ms"] = ms
                entry["tflops"] = tflops(records[shape], ms)
        except Exception as e:  # compile failure, out of resources, ...
            entry["correct"] = False
            entry["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return entry

    def best_of(cands):
        ok = [c for c in cands if c.get("correct") and "ms" in c]
        return min(ok, key=lambda c: c["ms"]) if ok else None

    # Phase 1: cuBLAS and the default configs, every shape.
    for shape in shapes:
        rec = records[shape]
        a, b, ref, ref_norm = data[shape]
        dog.enter(f"cublas {shape}")
        c = torch.empty(shape[0], shape[1], device=dev, dtype=dtype)
        ms = bench(lambda: torch.matmul(a, b, out=c))
        rec["cublas"] = {"ms": ms, "tflops": tflops(rec, ms), "rel_err": rel_err(c, ref, ref_norm)}
        for kernel in args.kernels:
            cfg = candidate_configs(*shape, kernel, args.dtype)[0]
            dog.enter(f"{kernel} default {config_str(cfg)} {shape}")
            rec["kernels"][kernel] = {"default": run_candidate(shape, kernel, cfg), "candidates": []}
        write()
    report["phase1_s"] = time.monotonic() - t_start

    # Phase 2: sweep while the budget lasts. Candidates go round-robin over the shapes in
    # priority order, so a cut budget costs every shape the same tail of the list; a config
    # compiles once and then serves every shape. A candidate is not started unless the
    # slowest candidate so far would still finish inside the budget.
    skipped = 0
    slowest = 0.0
    if not args.no_sweep:
        plan = {(shape, kernel): candidate_configs(*shape, kernel, args.dtype)[1:]
                for shape in shapes for kernel in args.kernels}
        depth = max((len(v) for v in plan.values()), default=0)
        for i in range(depth):
            for shape in shapes:
                for kernel in args.kernels:
                    if i >= len(plan[(shape, kernel)]):
                        continue
                    cfg = plan[(shape, kernel)][i]
                    t0 = time.monotonic()
                    if t0 - t_start + max(slowest, 1.0) > args.budget_s:
                        skipped += 1
                        continue
                    dog.enter(f"{kernel} {config_str(cfg)} {shape}")
                    records[shape]["kernels"][kernel]["candidates"].append(
                        run_candidate(shape, kernel, cfg))
                    slowest = max(slowest, time.monotonic() - t0)
            write()
    report["sweep_skipped_for_budget"] = skipped

    # Summary.
    rows = []
    for shape in shapes:
        rec = records[shape]
        cub = rec["cublas"]
        rows.append((f"{shape[0]}x{shape[1]}x{shape[2]}", "cublas", "-", cub["ms"], cub["tflops"],
                     1.0, cub["rel_err"], 1.0))
        for kernel in args.kernels:
            kr = rec["kernels"][kernel]
            best = best_of([kr["default"]] + kr["candidates"])
            kr["best"] = best
            if best is None:
                errs = [c.get("error") or f"rel_err={c.get('rel_err')}" for c in
                        [kr["default"]] + kr["candidates"]]
                rows.append((f"{shape[0]}x{shape[1]}x{shape[2]}", kernel, "FAILED: " + str(errs[0]),
                             float("nan"), float("nan"), float("nan"), float("nan"), float("nan")))
                continue
            best["vs_cublas"] = best["ms"] / cub["ms"]
            if kr["default"].get("ms"):
                kr["default"]["vs_cublas"] = kr["default"]["ms"] / cub["ms"]
            rows.append((f"{shape[0]}x{shape[1]}x{shape[2]}", kernel, best["config_str"], best["ms"],
                         best["tflops"], best["vs_cublas"], best["rel_err"],
                         kr["default"].get("vs_cublas", float("nan"))))
    failures = [c for rec in records.values() for kr in rec["kernels"].values()
                for c in [kr["default"]] + kr["candidates"] if not c.get("correct")]
    report["failures"] = len(failures)
    report["elapsed_s"] = time.monotonic() - t_start
    report["complete"] = True
    dog.stop()
    write()

    hdr = ("shape", "kernel", "best config", "ms", "TFLOP/s", "vs cuBLAS", "rel err", "default")
    print(f"{hdr[0]:<18} {hdr[1]:<7} {hdr[2]:<30} {hdr[3]:>8} {hdr[4]:>8} {hdr[5]:>9} {hdr[6]:>9} "
          f"{hdr[7]:>8}")
    for r in rows:
        print(f"{r[0]:<18} {r[1]:<7} {r[2]:<30.30} {r[3]:>8.3f} {r[4]:>8.1f} {r[5]:>8.3f}x "
              f"{r[6]:>9.2e} {r[7]:>7.3f}x")
    print(f"\n{report['device']}, {report['sms']} SMs, torch {report['torch']}, triton "
          f"{report['triton']}; {args.dtype}; vs cuBLAS = kernel ms / cuBLAS ms (default: the default config's); "
          f"{report['elapsed_s']:.1f} s; {len(failures)} failing candidate(s); "
          f"{skipped} sweep candidate(s) skipped for the budget")
    for c in failures:
        print(f"  FAILED {c['kernel']} {'x'.join(map(str, c['shape']))} {c['config_str']}: "
              f"{c.get('error') or 'rel_err=%s' % c.get('rel_err')}")
    if args.out:
        print(f"wrote {args.out}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
