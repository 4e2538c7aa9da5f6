"""Runs the FP8 GEMM kernels under Triton's interpreter for tests/test_kernels_fp8.py.

Why a separate process: ``TRITON_INTERPRET=1`` is read when ``@triton.jit`` decorates, so it
must be set before triton is first imported. Run as
``TRITON_INTERPRET=1 python fp8_interp_worker.py CASES.json RESULTS.json``.

The interpreter decodes e4m3 dot operands to fp32 (exact) through
:mod:`syncopate.kernels.interpreter`, installed when syncopate.kernels is imported; it then
accumulates in fp32 (no model of Hopper's reduced-precision FP8 accumulation).
Each case's kernel arguments are built by the launcher's own :func:`fp8_args`; the CUDA-only
device check of :func:`check_fp8_operands` is the one step skipped.
"""

from __future__ import annotations

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

import torch  # noqa: E402
import triton  # noqa: E402
from syncopate.kernels.gemm_fp8 import fp8_kernel_fn  # noqa: E402
from syncopate.kernels.gemm_fp8_config import Fp8GemmConfig  # noqa: E402
from syncopate.kernels.gemm_fp8_launch import Fp8Problem, fp8_args, scale_mode  # noqa: E402


def _alloc(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8)


def run_case(case: dict) -> dict:
    """One GEMM: random e4m3 A, column-major B, scales of the case's modes; returns the kernel's
    output, ``torch._scaled_mm`` of the same operands (torch's CPU implementation) and the
    magnitude ``|A| @ |B| * |sa| * |sb|`` (the scale of an fp32 summation-order difference)."""
    M, N, K = case["M"], case["N"], case["K"]
    g = torch.Generator().manual_seed(case["seed"])
    a = (torch.randn(M, K, generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(N, K, generator=g) * 2).to(torch.float8_e4m3fn).t()  # column-major [K, N]
    sa = (torch.rand(M, 1, generator=g) + 0.5) if case["rows"] else torch.tensor(0.75)
    sb = (torch.rand(1, N, generator=g) + 0.5) if case["rows"] else torch.tensor(1.25)
    out = torch.full((M, N), float("nan"), dtype=torch.bfloat16)
    cfg = Fp8GemmConfig(**case["config"])
    prob = Fp8Problem(M, N, K, scale_mode(sa, M, "scale_a", 0), scale_mode(sb, N, "scale_b", 1))
    args, grid = fp8_args(case["kernel"], a, b, out, sa.float(), sb.float(), prob, cfg,
                          programs=case.get("programs", 4))
    fp8_kernel_fn(case["kernel"])[grid](*args)
    ref = torch._scaled_mm(a, b, sa.float(), sb.float(), out_dtype=torch.bfloat16)  # CPU
    return {"out": out.float().tolist(), "ref": ref.float().tolist(),
            "acc_abs": (a.float().abs() @ b.float().abs() * sa.abs() * sb.abs()).tolist()}


def main() -> None:
    triton.set_allocator(_alloc)
    cases = json.load(open(sys.argv[1]))
    json.dump([run_case(c) for c in cases], open(sys.argv[2], "w"))


if __name__ == "__main__":
    main()
