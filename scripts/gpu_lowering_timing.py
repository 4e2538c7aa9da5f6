"""One-GPU loopback comparison of the unrolled and the table lowering (issue 10): kernel
time (CUDA events, median of 50 launches, W virtual ranks sharing the GPU, so absolute times
are not those of W GPUs; the ratio between the two forms is the point), registers and shared
memory of the fused kernel, and a correctness check of each form against the unfused path.

    SYNCOPATE_GPU_LOOPBACK=2 python scripts/gpu_lowering_timing.py          # TIMING lines
    SYNCOPATE_GPU_LOOPBACK=8 python scripts/gpu_lowering_timing.py --ce-w8  # a diagnosis run
"""

from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "tests", "gpu")]

import gpu_workers as w  # noqa: E402
from dist_harness import loopback_world, run_ranks  # noqa: E402

CASES = [("ag", (2048, 4096, 4096)), ("rs", (2048, 4096, 4096))]
CE_CASES = [("ce", "bfloat16", 200, 328, 136, 1, "tma"), ("ce", "bfloat16", 200, 328, 136, 2, "tma"),
            ("ce", "bfloat16", 200, 328, 136, 4, "tma")]


def main() -> int:
    W = loopback_world() or 2
    bad = 0
    for lowering in os.environ.get("GPU_TIMING_LOWERINGS", "unrolled table").split():
        os.environ["SYNCOPATE_LOWERING"] = lowering
        if "--ce-w8" in sys.argv:
            res = run_ranks(w.ag_gemm_cases, CE_CASES, world_size=W, timeout=240)
            probs = [p for r in res for p in (r or [])]
            print(f"CE W={W} lowering={lowering}: {len(probs)} problems", flush=True)
            for p in probs[:4]:
                print("   ", p.splitlines()[0][:300], flush=True)
            bad += bool(probs)
            continue
        for op, shape in CASES:
            res = run_ranks(w.lowering_timing, op, shape, world_size=W, timeout=240)
            for rank_lines in res:
                for line in rank_lines or []:
                    print(line, flush=True)
                    bad += not line.startswith("TIMING")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
