"""Validate and time the local FP8 GEMM against ``torch._scaled_mm`` on one GPU (an H200).

    python -m syncopate.bench.local --fp8 --out local_fp8.json
    python -m syncopate.bench.local_fp8 --out local_fp8.json        # the same

Per shape and scale mode (``tensor``: one fp32 scale each; ``row``: ``scale_a`` ``[M, 1]``,
``scale_b`` ``[1, N]``): A and B quantised to e4m3 from random fp32 with amax scales (B stored
column-major, as ``torch._scaled_mm`` requires), then ``torch._scaled_mm`` (cuBLAS / CUTLASS,
``use_fast_accum=False`` and True) and our kernels (``FAST_ACCUM`` False and True, both
kernels at their default configs). Every candidate is checked before it is timed: its output is
poisoned with NaN, its relative Frobenius error against the fp32 product of the dequantised
operands must be < 1e-2 (NaN never passes), and it is compared with ``torch._scaled_mm`` of the
same accumulation mode (reported as ``rel_vs_torch``). Times are ``do_bench`` medians; "vs torch"
is ``kernel_ms / torch._scaled_mm_ms`` with the same ``use_fast_accum`` (below 1 is faster).

Exit status: 0 all correct, 1 some candidate failed (listed), 2 no GPU (or not sm_90: the
kernels use FP8 wgmma), 3 watchdog (:class:`.local_gpu.Watchdog`: a hung kernel cannot hang the job).
"""

from __future__ import annotations

import argparse
import sys
import time

from ..cli_args import nonnegative_int, positive_float
from ..kernels.gemm_fp8_config import default_fp8_config
from ..kernels.gemm_fp8_launch import make_fp8_launcher
from .local_gpu import TOL, CudaBackend, Report, Watchdog, check_out, gemm_shape

PROG = "python -m syncopate.bench.local_fp8"
SHAPES = [(8192, 8192, 8192), (8192, 14336, 4096), (8192, 7168, 4096), (4096, 14336, 8192),
          (1024, 14336, 4096), (1000, 4000, 1008)]
MODES = ("tensor", "row")


def quantize(x, axis, group=None):
    """``(q, scale)``: ``x`` (fp32) scaled into e4m3's range by its amax -- over the whole tensor
    (``axis`` None; with a process ``group``, the max over its ranks, so that every rank shares
    the scale) or per row / column (``axis`` 1: one per row, ``[R, 1]``; 0: ``[1, C]``)."""
    import torch
    import torch.distributed as dist
    amax = x.abs().amax() if axis is None else x.abs().amax(dim=axis, keepdim=True)
    if axis is None and group is not None:
        amax = amax.reshape(1)
        dist.all_reduce(amax, op=dist.ReduceOp.MAX, group=group)
        amax = amax.reshape(())
    scale = (amax.float().clamp_min(1e-12) / 448.0)
    return (x / scale).to(torch.float8_e4m3fn), scale


def operands(M, N, K, mode, device, seed):
    """e4m3 A ``[M, K]``, column-major e4m3 B ``[K, N]``, their scales, and the fp32 product of
    the dequantised operands (the reference)."""
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    a32 = torch.randn(M, K, device=device, generator=g)
    bt32 = torch.randn(N, K, device=device, generator=g)
    rows = mode == "row"
    a, sa = quantize(a32, 1 if rows else None)
    bt, sbt = quantize(bt32, 1 if rows else None)     # per row of B^T = per column of B
    b, sb = bt.t(), (sbt.t() if rows else sbt)
    ref = (a.float() * sa) @ (b.float() * sb)
    return a, b, sa.contiguous(), sb.contiguous(), ref


class Fp8CudaBackend(CudaBackend):
    """What the driver asks of the device (tests substitute a CPU fake)."""

    def available(self):
        import torch
        why = super().available()
        if why is None and torch.cuda.get_device_capability()[0] < 9:
            why = "the FP8 kernels need sm_90+ (FP8 wgmma)"
        return why

    def launcher(self, a, b, sa, sb, out, kernel, config):
        return make_fp8_launcher(a, b, sa, sb, out, kernel=kernel, config=config)

    def torch_launcher(self, a, b, sa, sb, fast):
        import torch

        def launch():
            return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16,
                                    use_fast_accum=fast)
        return launch


def build_parser() -> argparse.ArgumentParser:
    """The arguments, every value checked at parse time (before a GPU is touched)."""
    p = argparse.ArgumentParser(prog=PROG,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--out", help="write results as JSON to this path")
    p.add_argument("--shapes", nargs="*", metavar="MxNxK", type=gemm_shape)
    p.add_argument("--kernels", nargs="*", default=["tma", "ptr"], choices=["tma", "ptr"])
    p.add_argument("--modes", nargs="*", default=list(MODES), choices=list(MODES))
    p.add_argument("--step-timeout-s", type=positive_float, default=60.0)
    p.add_argument("--hard-timeout-s", type=positive_float, default=300.0)
    p.add_argument("--warmup-ms", type=positive_float, default=10.0)
    p.add_argument("--rep-ms", type=positive_float, default=40.0)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    return p


def main(argv=None, backend=None) -> int:
    args = build_parser().parse_args(argv)
    if args.out:
        check_out(args.out, PROG)

    import torch

    report = Report(args.out, tool="syncopate.bench.local_fp8", tol=TOL, results=[])
    backend = backend or Fp8CudaBackend()
    if report.refuse(backend, PROG):
        return 2
    report.update(backend.info())
    shapes = ([tuple(s) for s in args.shapes]
              if args.shapes else SHAPES)
    dog = Watchdog(args.step_timeout_s, args.hard_timeout_s, report.write)
    t0 = time.monotonic()
    failures = []
    for (M, N, K) in shapes:
        for mode in args.modes:
            dog.enter(f"setup {M}x{N}x{K} {mode}")
            a, b, sa, sb, ref = operands(M, N, K, mode, backend.device,
                                         args.seed + M * 7 + N * 13 + K * 17)
            ref_norm = torch.linalg.norm(ref)
            flop = 2.0 * M * N * K
            rec = {"M": M, "N": N, "K": K, "mode": mode, "flop": flop, "torch": {},
                   "kernels": {}}
            report["results"].append(rec)
            for fast in (False, True):
                tag = "fast" if fast else "precise"
                dog.enter(f"torch._scaled_mm {tag} {M}x{N}x{K} {mode}")
                tl = backend.torch_launcher(a, b, sa, sb, fast)
                try:
                    tout = tl()
                    backend.sync()
                    tms = backend.time_ms(tl, args.warmup_ms, args.rep_ms)
                    rec["torch"][tag] = {"ms": tms, "tflops": flop / tms / 1e9,
                                         "rel_err": float(torch.linalg.norm(tout.float() - ref)
                                                          / ref_norm)}
                except Exception as ex:  # e.g. a torch build without this scale mode
                    tout, tms = None, float("nan")
                    rec["torch"][tag] = {"error": f"{type(ex).__name__}: {str(ex)[:300]}"}
                for kernel in args.kernels:
                    cfg = default_fp8_config(M, N, K, kernel, fast_accum=fast)
                    name = f"{kernel}/{tag}"
                    dog.enter(f"{name} {M}x{N}x{K} {mode}")
                    e = {"config": cfg.as_dict()}
                    try:
                        out = torch.full((M, N), float("nan"), device=backend.device,
                                         dtype=torch.bfloat16)
                        launch, out = backend.launcher(a, b, sa, sb, out, kernel, cfg)
                        launch()
                        backend.sync()
                        e["rel_err"] = float(torch.linalg.norm(out.float() - ref) / ref_norm)
                        if tout is not None:
                            e["rel_vs_torch"] = float(
                                torch.linalg.norm(out.float() - tout.float())
                                / torch.linalg.norm(tout.float()))
                        e["correct"] = bool(e["rel_err"] < TOL)
                        if e["correct"]:
                            e["ms"] = backend.time_ms(launch, args.warmup_ms, args.rep_ms)
                            e["tflops"] = flop / e["ms"] / 1e9
                            e["vs_torch"] = e["ms"] / tms
                    except Exception as ex:  # compile failure, out of resources, ...
                        e["correct"] = False
                        e["error"] = f"{type(ex).__name__}: {str(ex)[:300]}"
                    rec["kernels"][name] = e
                    if not e["correct"]:
                        failures.append((M, N, K, mode, name, e.get("error") or e.get("rel_err")))
            report.write()
    report["elapsed_s"] = time.monotonic() - t0
    report["failures"] = len(failures)
    report["complete"] = True
    dog.stop()
    report.write()
    print(f"{'shape':<18} {'scales':<7} {'kernel':<13} {'ms':>8} {'torch ms':>9} "
          f"{'vs torch':>9} {'rel vs torch':>12}")
    nan = float("nan")
    for r in report["results"]:
        for name, e in r["kernels"].items():  # name: kernel/precise or kernel/fast
            tms = r["torch"][name.split("/")[1]].get("ms", nan)
            shape = f"{r['M']}x{r['N']}x{r['K']}"
            print(f"{shape:<18} {r['mode']:<7} {name:<13} {e.get('ms', nan):>8.3f} {tms:>9.3f} "
                  f"{e.get('vs_torch', nan):>8.3f}x {e.get('rel_vs_torch', nan):>12.2e}")
    print(f"\n{report['device']}, torch {report['torch']}, triton {report['triton']}; "
          f"vs torch = kernel ms / torch._scaled_mm ms (same use_fast_accum); "
          f"{report['elapsed_s']:.1f} s; {len(failures)} failing candidate(s)")
    for f in failures:
        print(f"  FAILED {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
