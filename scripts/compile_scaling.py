"""Compile time and code size against the chunk count (issue 10), CPU only: the project's
pointer GEMM 8192 x 2048 x 1024 (bf16) fused with an all-gather (push, sm, 8 comm programs),
for W and split, in the unrolled and the table lowering.  Prints a markdown table: chunks,
the whole ``syncopate.compile`` (Triton + ours + ptxas, Triton's cache bypassed), the
syncopate passes' share, PTX size, and registers (``ptxas -v`` on the PTX).

    python scripts/compile_scaling.py [--lowering table,unrolled] [--max-unrolled-chunks N]
        [--cases 2x1,2x4,4x2,8x1,8x2,8x4,16x1,32x1] [--op ag|rs]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
import time

import triton

import syncopate
from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
from syncopate.schedule import all_gather, reduce_scatter

M, N, K = 8192, 2048, 1024
PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas")


def registers(ptx: str) -> str:
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(ptx)
    try:
        out = subprocess.run([PTXAS, "-arch=sm_90a", "-v", f.name, "-o", os.devnull],
                             capture_output=True, text=True, timeout=600)
        regs = re.findall(r"Used (\d+) registers", out.stdout + out.stderr)
        return "/".join(sorted(set(regs), key=int)) or "?"
    finally:
        os.unlink(f.name)


def one(W: int, split: int, lowering: str, op: str, kernel: str) -> dict:
    if op == "ag":
        cfg = default_config(M, N, K, "bf16", kernel)
        sched = all_gather([M, K], "bf16", W, mode="push", split=split)
        operand = "a_ptr"
    else:
        cfg = default_config(M, N, K, "bf16", kernel)
        sched = reduce_scatter([M, N], "bf16", W, split=split)
        operand = "c_ptr"
    name = "matmul_ptr_kernel" if kernel == "ptr" else "matmul_tma_persistent_kernel"
    sig, cx = compile_args(name, "bf16", cfg)
    t0 = time.perf_counter()
    fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx, schedule=sched,
                           operand=operand, backend="sm", comm_programs=8,
                           attrs=compile_attrs(name), lowering=lowering, keep_ir=False,
                           **cfg.options())
    dt = time.perf_counter() - t0
    ptx = fc.asm["ptx"]
    passes = sum(fc.times_ms.values()) / 1e3
    return dict(W=W, split=split, chunks=sched.num_chunks, lowering=fc.abi.lowering,
                compile=dt, passes=passes, ptx=len(ptx) / 1024, regs=registers(ptx),
                table=len(fc.abi.table))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lowering", default="table,unrolled")
    ap.add_argument("--cases", default="2x1,2x4,4x2,8x1,8x2,8x4,16x1,32x1")
    ap.add_argument("--max-unrolled-chunks", type=int, default=1 << 30)
    ap.add_argument("--op", default="ag")
    ap.add_argument("--kernel", default="ptr")
    a = ap.parse_args()
    triton.knobs.compilation.always_compile = True  # bypass Triton's cache: the real compile
    print(f"# {a.op} {a.kernel} GEMM {M}x{N}x{K} bf16, sm, 8 comm programs; "
          f"commit {os.environ.get('GIT_COMMIT', '?')}", flush=True)
    print("| W | split | chunks | lowering | compile (s) | passes (s) | PTX (KB) | registers | "
          "table (words) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |", flush=True)
    for case in a.cases.split(","):
        W, split = (int(x) for x in case.split("x"))
        for lowering in a.lowering.split(","):
            chunks = W * (W - 1) * split
            if lowering == "unrolled" and chunks > a.max_unrolled_chunks:
                print(f"| {W} | {split} | {chunks} | unrolled | not run (> "
                      f"{a.max_unrolled_chunks} chunks) | | | | |", flush=True)
                continue
            r = one(W, split, lowering, a.op, a.kernel)
            print(f"| {r['W']} | {r['split']} | {r['chunks']} | {r['lowering']} | "
                  f"{r['compile']:.1f} | {r['passes']:.2f} | {r['ptx']:.0f} | {r['regs']} | "
                  f"{r['table']} |", flush=True)


if __name__ == "__main__":
    main()
