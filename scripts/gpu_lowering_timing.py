"""One-GPU loopback comparison of the unrolled and the table lowering (issue 10): kernel
time (CUDA events, median of 50 launches, W virtual ranks sharing the GPU, so absolute times
are not those of W GPUs; the ratio between the two forms is the point), registers and shared
memory of the fused kernel, and a correctness check of each form against the unfused path.

    SYNCOPATE_GPU_LOOPBACK=2 python scripts/gpu_lowering_timing.py   # prints TIMING lines
"""

from __future__ import annotations

import os
import sys

sys.path[:0] = [os.path.join(os.path.dirname(__file__), "..", "tests", "gpu")]

import gpu_workers as w  # noqa: E402
from dist_harness import loopback_world, run_ranks  # noqa: E402

W = loopback_world() or 2
CASES = [("ag", (2048, 4096, 4096)), ("rs", (2048, 4096, 4096))]
bad = 0
for lowering in ("unrolled", "table"):
    os.environ["SYNCOPATE_LOWERING"] = lowering
    for op, shape in CASES:
        res = run_ranks(w.lowering_timing, op, shape, world_size=W, timeout=240)
        for rank_lines in res:
            for line in rank_lines or []:
                print(line, flush=True)
                bad += not line.startswith("TIMING")
sys.exit(1 if bad else 0)
