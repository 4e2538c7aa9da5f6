"""Time the grouped GEMM against cuBLAS-based grouped baselines on one GPU (meant for an H200).

    python -m syncopate.kernels.bench_grouped [--out grouped.json] [--quick]

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
import os
import json
import sys

#: (name, experts on this GPU, hidden K, expert FFN N, tokens routed here (top-k included))
SHAPES = [
    ("mixtral_up", 8, 4096, 14336, 8192),      # Mixtral-8x7B: 8 experts, top-2, 4k tokens
    ("mixtral_down", 8, 14336, 4096, 8192),
    ("deepseek_up", 32, 7168, 2048, 32768),    # DeepSeek-like: many small experts, top-8
    ("deepseek_down", 32, 2048, 7168, 32768),
]
ROUTINGS = ("uniform", "skewed")


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
    ap = argparse.ArgumentParser(prog="python -m syncopate.kernels.bench_grouped",
                                 description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=None, help="write the rows as JSON here")
    ap.add_argument("--quick", action="store_true", help="the first two shapes only")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    prog = "python -m syncopate.kernels.bench_grouped"
    if args.out is not None:
        folder = os.path.dirname(args.out) or "."
        if os.path.isdir(args.out) or not os.path.isdir(folder):
            print(f"{prog}: error: --out {args.out}: " + (
                "is a directory; give a file name" if os.path.isdir(args.out)
                else f"no folder {folder}; create it first"), file=sys.stderr)
            return 1
    import torch
    if not torch.cuda.is_available():
        print(f"{prog}: error: no CUDA GPU: the grouped GEMM ratio must be measured on a GPU",
              file=sys.stderr)
        return 1
    from triton.testing import do_bench

    from .grouped_gemm_launch import grouped_gemm, grouped_gemm_reference
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
    for b in bad:
        print("FAILED:", b, file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
