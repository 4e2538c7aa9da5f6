"""Time the local flash-attention kernel against SDPA's flash and cuDNN backends on one GPU.

Why: issue 11 section 1 asks for the ratio of our kernel (syncopate.kernels.attention, the one
the compiler will fuse with ring / Ulysses communication) to torch's best local attention, per
shape, and aims for parity.  Medians of CUDA-event timings of back-to-back launches after a
warm-up; TFLOP/s counts 4 * B * Hq * Sq * Skv * D (two matmuls), halved for causal with
Sq == Skv.  SDPA runs with ``enable_gqa=True``; a backend that refuses GQA gets K/V expanded to
Hq heads beforehand (outside the timing) and is marked ``*``.  Each row also checks our output
against SDPA's (max abs error) so a fast wrong kernel does not pass unnoticed.

    python scripts/bench_attention.py                 # the standard shapes, default configs
    python scripts/bench_attention.py --sweep         # also try the config candidates
    python scripts/bench_attention.py --seq 4096 --causal 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

SHAPES = [  # (B, Hq, Hkv, S, D)
    (1, 32, 8, 4096, 128),
    (1, 32, 8, 8192, 128),
    (1, 32, 8, 16384, 128),
]


def candidate_configs(head_dim: int) -> list:
    """The default plus the Hopper candidates of Triton's fused-attention tutorial."""
    from syncopate.kernels import AttentionConfig, attention_default_config
    cands = [attention_default_config(head_dim)]
    for bm, bn, w, s in ((128, 64, 8, 3), (128, 128, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2),
                         (64, 64, 4, 4), (128, 64, 8, 4), (128, 32, 8, 4)):
        c = AttentionConfig(BLOCK_M=bm, BLOCK_N=bn, num_warps=w, num_stages=s)
        if c not in cands:
            cands.append(c)
    return cands


def time_ms(fn, warmup: int = 5, reps: int = 30) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` CUDA-event-timed calls."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def flops(B, Hq, Sq, Skv, D, causal) -> float:
    f = 4.0 * B * Hq * Sq * Skv * D
    return f / 2 if causal and Sq == Skv else f


def sdpa_fn(backend_name, q, k, v, causal):
    """A closure running SDPA on one backend, and whether K/V had to be expanded (no GQA)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)

    def gqa():
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    try:
        gqa()
        torch.cuda.synchronize()
        return gqa, False
    except RuntimeError:
        group = q.shape[1] // k.shape[1]
        ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

        def expanded():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
        try:
            expanded()
            torch.cuda.synchronize()
            return expanded, True
        except RuntimeError:
            return None, False


def bench_shape(B, Hq, Hkv, S, D, causal, dtype, sweep: bool) -> dict:
    import torch
    from syncopate.kernels import attention, attention_default_config
    torch.manual_seed(0)
    q = torch.randn(B, Hq, S, D, device="cuda", dtype=dtype)
    k = torch.randn(B, Hkv, S, D, device="cuda", dtype=dtype)
    v = torch.randn(B, Hkv, S, D, device="cuda", dtype=dtype)
    fl = flops(B, Hq, S, S, D, causal)
    row = dict(B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, causal=causal, dtype=str(dtype))
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
        fn, expanded = sdpa_fn(name, q, k, v, causal)
        key = "flash" if name == "FLASH_ATTENTION" else "cudnn"
        row[key + "_ms"] = time_ms(fn) if fn else None
        row[key + "_expanded"] = expanded
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                            enable_gqa=True)
    configs = candidate_configs(D) if sweep else [attention_default_config(D)]
    best = None
    for cfg in configs:
        try:
            o, _ = attention(q, k, v, causal=causal, config=cfg)
            err = float((o.float() - ref.float()).abs().max())
            ms = time_ms(lambda: attention(q, k, v, causal=causal, config=cfg))
        except Exception as e:  # a candidate that does not compile / fit: report, go on
            print(f"  config {cfg} failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
            continue
        if best is None or ms < best[0]:
            best = (ms, cfg, err)
    row["ours_ms"], row["ours_config"], row["ours_max_err"] = (
        (best[0], best[1].as_dict(), best[2]) if best else (None, None, None))
    row["zigzag_ms"] = row["zigzag_max_err"] = None
    if causal and best:
        # the zigzag-layout causal kernel ring attention fuses (8 segments: W = 4), on the whole
        # sequence: what its in-loop skip of later segments costs against the prefix loop
        from syncopate.kernels.attention_zigzag import (attention_zigzag, zigzag_order,
                                                        zigzag_unorder)
        W = 4
        qz, kz, vz = (zigzag_order(x, W) for x in (q, k, v))
        try:
            oz, _ = attention_zigzag(qz, kz, vz, 2 * W, 0, config=best[1])
            row["zigzag_max_err"] = float((zigzag_unorder(oz, W).float() - ref.float()).abs().max())
            row["zigzag_ms"] = time_ms(lambda: attention_zigzag(qz, kz, vz, 2 * W, 0,
                                                                config=best[1]))
        except Exception as e:  # reported, the row stays
            print(f"  zigzag failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
    for key in ("ours", "flash", "cudnn"):
        ms = row[key + "_ms"]
        row[key + "_tflops"] = fl / (ms * 1e-3) / 1e12 if ms else None
    for key in ("flash", "cudnn"):
        row["ratio_vs_" + key] = (row[key + "_ms"] / row["ours_ms"]
                                  if row["ours_ms"] and row[key + "_ms"] else None)
    return row


def _fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def print_table(rows) -> None:
    print(f"{'B':>2} {'Hq/Hkv':>7} {'S':>6} {'D':>4} {'causal':>6} | {'ours ms':>8} "
          f"{'TF/s':>6} | {'flash ms':>8} {'TF/s':>6} | {'cudnn ms':>8} {'TF/s':>6} | "
          f"{'flash/ours':>10} {'cudnn/ours':>10} | {'max err':>8}")
    for r in rows:
        print(f"{r['B']:>2} {str(r['Hq']) + '/' + str(r['Hkv']):>7} {r['S']:>6} {r['D']:>4} "
              f"{str(r['causal']):>6} | {_fmt(r['ours_ms'], '.3f'):>8} "
              f"{_fmt(r['ours_tflops']):>6} | {_fmt(r['flash_ms'], '.3f'):>8}"
              f"{'*' if r['flash_expanded'] else ' '}{_fmt(r['flash_tflops']):>5} | "
              f"{_fmt(r['cudnn_ms'], '.3f'):>8}{'*' if r['cudnn_expanded'] else ' '}"
              f"{_fmt(r['cudnn_tflops']):>5} | {_fmt(r['ratio_vs_flash'], '.2f'):>10} "
              f"{_fmt(r['ratio_vs_cudnn'], '.2f'):>10} | {_fmt(r['ours_max_err'], '.2e'):>8}")
    print("ratio = SDPA time / our time (> 1: ours is faster); * = K/V expanded (no GQA)")
    for r in rows:
        if r.get("zigzag_ms"):
            print(f"zigzag causal kernel (8 segments, whole sequence) S={r['S']}: "
                  f"{r['zigzag_ms']:.3f} ms vs ours {r['ours_ms']:.3f} ms "
                  f"({r['zigzag_ms'] / r['ours_ms']:.2f}x), max err {r['zigzag_max_err']:.2e}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, nargs="*", help="sequence lengths (default 4k, 8k, 16k)")
    p.add_argument("--causal", type=int, nargs="*", default=[0, 1], help="0 and/or 1")
    p.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    p.add_argument("--sweep", action="store_true", help="try the config candidates too")
    p.add_argument("--json", help="write the rows here")
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("bench_attention: needs a CUDA GPU (none visible to torch)", file=sys.stderr)
        return 2
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    shapes = [s for s in SHAPES if not args.seq or s[3] in args.seq]
    if args.seq:
        shapes += [(1, 32, 8, s, 128) for s in args.seq if s not in {x[3] for x in SHAPES}]
    rows = []
    for B, Hq, Hkv, S, D in shapes:
        for causal in args.causal:
            rows.append(bench_shape(B, Hq, Hkv, S, D, bool(causal), dtype, args.sweep))
            print(f"  done S={S} causal={bool(causal)}", file=sys.stderr)
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}")
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
