"""Time the grouped GEMM against cuBLAS-based grouped baselines on one GPU (meant for an H200).

    python -m syncopate.bench.grouped [--out grouped.json] [--quick] [--sweep]

Per shape and routing: the Triton kernel on the capacity layout (``[G, C, K]`` + device counts,
grid over the whole capacity, tiles past the count exit), against

* ``mm_loop``: one ``torch.mm`` (cuBLAS) per non-empty expert on its valid rows, counts known
  on the host (the host read-back the Triton kernel avoids is *not* charged to the loop);
* ``grouped_mm``: ``torch._grouped_mm`` (cuBLAS/CUTLASS grouped kernel) on the same tokens
  packed contiguously with an int32 offsets array, where this torch build has it.

Every candidate's output is checked against an fp32 reference first (relative Frobenius error
< 1e-2 over the valid rows; NaN fails). Times are ``triton.testing.do_bench`` medians; TFLOP/s
counts the useful work ``2 * sum(counts) * K * N``; ``ratio_*`` is ``triton_ms / baseline_ms``
(below 1: ours is faster). The ratios are only meaningful measured on the GPU; nothing here
estimates them on a CPU. Exit status: 0 ok, 1 a candidate was wrong, 2 no GPU.
"""

from __future__ import annotations

import argparse
import json
import sys

from triton.testing import do_bench

from ..kernels.grouped_gemm_launch import GroupedGemmConfig, grouped_gemm, grouped_gemm_reference
from .local_gpu import check_out

PROG = "python -m syncopate.bench.grouped"

#: (name, experts on this GPU, hidden K, expert FFN N, tokens routed here (top-k included))
SHAPES = [
    ("mixtral_up", 8, 4096, 14336, 8192),      # Mixtral-8x7B: 8 experts, top-2, 4k tokens
    ("mixtral_down", 8, 14336, 4096, 8192),
    ("deepseek_up", 32, 7168, 2048, 32768),    # DeepSeek-like: many small experts, top-8
    ("deepseek_down", 32, 2048, 7168, 32768),
]
ROUTINGS = ("uniform", "skewed")

#: ``--sweep`` candidates: (name, BLOCK_M, BLOCK_N, BLOCK_K, num_warps, num_stages, GROUP_M).
#: BLOCK_M stays 128: the fused dispatch needs the capacity to be a multiple of it, and the
#: MoE capacities are rounded to 128. ``rowmajor`` is the order before the grouped sweep.
SWEEP = [
    ("128x128x64_w4_s4_g8", 128, 128, 64, 4, 4, 8),
    ("128x128x64_w4_s4_rowmajor", 128, 128, 64, 4, 4, 1),
    ("128x128x64_w8_s4_g8", 128, 128, 64, 8, 4, 8),
    ("128x256x64_w8_s3_g8", 128, 256, 64, 8, 3, 8),
    ("128x256x64_w8_s4_g8", 128, 256, 64, 8, 4, 8),
    ("128x128x128_w8_s3_g8", 128, 128, 128, 8, 3, 8),
]


def counts_for(routing: str, E: int, tokens: int, gen):
    """Tokens per expert: ``uniform`` multinomial, ``skewed`` Zipf-like (expert 0 hot, the
    last quarter of the experts empty). Returns (counts list, capacity) with the capacity the
    largest count rounded up to 128 (no drops in the benchmark)."""
    import torch
    if routing == "uniform":
        p = torch.ones(E)
    else:
        p = 1.0 / torch.arange(1, E + 1, dtype=torch.float32) ** 1.2
        p[E - max(1, E // 4):] = 0
    ids = torch.multinomial(p / p.sum(), tokens, replacement=True, generator=gen)
    counts = torch.bincount(ids, minlength=E).tolist()
    cap = max(128, -(-max(counts) // 128) * 128)
    return counts, cap


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG,
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--quick", action="store_true", help="the first two shapes only")
    ap.add_argument("--sweep", action="store_true",
                    help="also time every config of SWEEP (checked first) and report the best")
    return ap


def format_table(rows) -> str:
    """The rows as a table (times in ms; ratios are ours / the baseline, below 1: faster)."""
    def f(r, k, fmt="{:.3f}"):
        return fmt.format(r[k]) if isinstance(r.get(k), float) else "-"
    lines = [f"{'shape':<14}{'routing':<9}{'triton ms':>10}{'mm_loop':>9}{'grouped_mm':>11}"
             f"{'vs loop':>9}{'vs gmm':>8}  best of --sweep"]
    for r in rows:
        best = (f"{r['sweep_best']} {r['sweep_ms'][r['sweep_best']]:.3f} ms "
                f"({f(r, 'best_ratio_mm_loop', '{:.2f}x')} loop, "
                f"{f(r, 'best_ratio_grouped_mm', '{:.2f}x')} gmm)" if "sweep_best" in r else "")
        lines.append(f"{r['shape']:<14}{r['routing']:<9}{f(r, 'triton_ms'):>10}"
                     f"{f(r, 'mm_loop_ms'):>9}{f(r, 'grouped_mm_ms'):>11}"
                     f"{f(r, 'ratio_mm_loop', '{:.2f}x'):>9}"
                     f"{f(r, 'ratio_grouped_mm', '{:.2f}x'):>8}  {best}")
    return "\n".join(lines)


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.out is not None:
        check_out(args.out, PROG)
    import torch
    if not torch.cuda.is_available():
        print(f"{PROG}: error: no CUDA GPU: the grouped GEMM ratio must be measured on a GPU",
              file=sys.stderr)
        return 1
    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator().manual_seed(0)
    has_gmm = hasattr(torch, "_grouped_mm")
    rows, bad = [], []
    for name, E, K, N, tokens in SHAPES[:2] if args.quick else SHAPES:
        w = (torch.randn(E, K, N, device="cuda") / K ** 0.5).to(torch.bfloat16)
        for routing in ROUTINGS:
            counts, C = counts_for(routing, E, tokens, gen)
            a = torch.zeros(E, C, K, device="cuda", dtype=torch.bfloat16)
            for e, n in enumerate(counts):
                a[e, :n] = torch.randn(n, K, device="cuda").to(torch.bfloat16)
            count = torch.tensor(counts, dtype=torch.int32, device="cuda")
            ref = [a[e, :n].float() @ w[e].float() for e, n in enumerate(counts)]

            def err(out):
                num = sum(float(torch.linalg.norm(out[e, :n].float() - ref[e]) ** 2)
                          for e, n in enumerate(counts))
                den = sum(float(torch.linalg.norm(r) ** 2) for r in ref)
                return (num / max(den, 1e-30)) ** 0.5

            rec = dict(shape=name, routing=routing, E=E, K=K, N=N, tokens=tokens, capacity=C,
                       max_count=max(counts), empty=sum(n == 0 for n in counts))
            flop = 2.0 * sum(counts) * K * N
            out = torch.full((E, C, N), float("nan"), device="cuda", dtype=torch.bfloat16)
            cands = {"triton": lambda: grouped_gemm(a, w, count, out),
                     "mm_loop": lambda: grouped_gemm_reference(a, w, count, out,
                                                               counts_host=counts)}
            if has_gmm:
                packed = torch.cat([a[e, :n] for e, n in enumerate(counts)])
                offs = torch.tensor(counts, device="cuda").cumsum(0).to(torch.int32)
                gout = torch.empty(packed.shape[0], N, device="cuda", dtype=torch.bfloat16)

                def gmm():
                    gout.copy_(torch._grouped_mm(packed, w, offs=offs))
                cands["grouped_mm"] = gmm
            for cname, fn in cands.items():
                try:
                    out.fill_(float("nan"))
                    fn()
                    torch.cuda.synchronize()
                    if cname == "grouped_mm":
                        out2 = torch.full_like(out, float("nan"))
                        starts = [0] + offs.tolist()[:-1]
                        for e, n in enumerate(counts):
                            out2[e, :n] = gout[starts[e]:starts[e] + n]
                        e_ = err(out2)
                    else:
                        e_ = err(out)
                    if not e_ < 1e-2:
                        bad.append(f"{name}/{routing}/{cname}: error {e_:.3g}")
                        continue
                    ms = do_bench(fn, warmup=25, rep=100)
                    rec[f"{cname}_ms"] = ms
                    rec[f"{cname}_tflops"] = flop / ms / 1e9
                except Exception as ex:  # a baseline missing in this build is reported, not fatal
                    rec[f"{cname}_error"] = f"{type(ex).__name__}: {ex}"[:300]
            if args.sweep:
                rec["sweep_ms"] = {}
                for cname, *cfg in SWEEP:
                    c = GroupedGemmConfig(*cfg)
                    try:
                        out.fill_(float("nan"))
                        grouped_gemm(a, w, count, out, config=c)
                        torch.cuda.synchronize()
                        e_ = err(out)
                        if not e_ < 1e-2:
                            bad.append(f"{name}/{routing}/{cname}: error {e_:.3g}")
                            continue
                        rec["sweep_ms"][cname] = do_bench(
                            lambda: grouped_gemm(a, w, count, out, config=c), warmup=25, rep=100)
                    except Exception as ex:  # a config this GPU cannot run is reported
                        rec["sweep_ms"][cname] = f"{type(ex).__name__}: {ex}"[:200]
                timed = {k: v for k, v in rec["sweep_ms"].items() if isinstance(v, float)}
                if timed:
                    rec["sweep_best"] = min(timed, key=timed.get)
                    best = timed[rec["sweep_best"]]
                    for base in ("mm_loop", "grouped_mm"):
                        if f"{base}_ms" in rec:
                            rec[f"best_ratio_{base}"] = best / rec[f"{base}_ms"]
            for base in ("mm_loop", "grouped_mm"):
                if f"{base}_ms" in rec and "triton_ms" in rec:
                    rec[f"ratio_{base}"] = rec["triton_ms"] / rec[f"{base}_ms"]
            rows.append(rec)
            print(json.dumps(rec), flush=True)
    result = dict(device=torch.cuda.get_device_name(), torch=torch.__version__, rows=rows,
                  failures=bad)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    print("\n" + format_table(rows))
    for b in bad:
        print("FAILED:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
