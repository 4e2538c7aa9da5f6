"""Runs the grouped GEMM kernel under Triton's interpreter for tests/test_grouped_gemm.py.

A separate process because ``TRITON_INTERPRET=1`` must be set before triton is imported (see
tests/attention_interp_worker.py, whose two interpreter shims -- NumPy >= 2.4 ``__index__`` and
bf16 ``tl.dot`` -- are applied by importing it). Run as ``TRITON_INTERPRET=1 python
grouped_gemm_interp_worker.py CASES.json RESULTS.json``; each case reports the worst error
against per-group fp32 matmuls, and how many padding rows (past the count) were written.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_interp_worker  # noqa: E402,F401  (applies the interpreter shims)
import torch  # noqa: E402
import triton  # noqa: E402
from interp_runner import serve_cases  # noqa: E402

from syncopate.kernels.grouped_gemm import grouped_gemm_kernel  # noqa: E402
from syncopate.kernels.grouped_gemm_launch import (GroupedGemmConfig,  # noqa: E402
                                                   check_operands)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def run_case(c):
    torch.manual_seed(c["seed"])
    dt = DTYPES[c["dtype"]]
    E, gpe, C, K, N = c["E"], c["gpe"], c["C"], c["K"], c["N"]
    G = E * gpe
    a = torch.randn(G, C, K).to(dt)
    w = (torch.randn(E, K, N) / K ** 0.5).to(dt)
    count = torch.tensor(c["counts"], dtype=torch.int32)
    out = torch.full((G, C, N), float("nan"), dtype=dt)
    check_operands(a, w, count, out, segments=gpe)
    cfg = GroupedGemmConfig(**c["config"])
    grid = (G * triton.cdiv(C, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N),)
    grouped_gemm_kernel[grid](a, w, out, count, C, N, K, E, G * C, 0, E, 0, E, a.stride(1),
                              a.stride(2), w.stride(0), w.stride(1), w.stride(2), out.stride(1),
                              out.stride(2), **cfg.constexprs())
    err, written_padding, unwritten = 0.0, 0, 0
    for g in range(G):
        n = max(0, min(c["counts"][g], C))
        ref = a[g, :n].float() @ w[g % E].float()
        got = out[g, :n].float()
        unwritten += int(torch.isnan(got).sum())
        if n:
            err = max(err, float(((got - ref).abs() / (1 + ref.abs())).max()))
        written_padding += int((~torch.isnan(out[g, n:].float())).sum())
    return dict(err=err, written_padding=written_padding, unwritten=unwritten)


def main(cases_path, results_path):
    serve_cases(run_case, cases_path, results_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
