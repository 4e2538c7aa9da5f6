"""Runs the local GEMM's plans under Triton's interpreter for tests/test_gemm_table.py: the TMA
kernel on ragged shapes, the split-K kernel and its reduction, and staged operands (rows that
are not a multiple of 16 bytes, transposed views, unaligned bases).

A separate process because ``TRITON_INTERPRET=1`` must be set before triton is imported (see
tests/attention_interp_worker.py, whose interpreter shims -- NumPy >= 2.4 ``__index__`` and bf16
``tl.dot`` -- are applied by importing it). Run as ``TRITON_INTERPRET=1 python
gemm_interp_worker.py CASES.json RESULTS.json``. Each case builds its plan with the launcher's
own :func:`~syncopate.kernels.gemm_launch.make_plan` (CPU tensors: the device is described, not
asked) and runs it exactly as :func:`matmul` does; the output is NaN-poisoned first.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import attention_interp_worker  # noqa: E402,F401  (applies the interpreter shims)
import torch  # noqa: E402
import triton  # noqa: E402

from syncopate.kernels.gemm_launch import make_plan  # noqa: E402
from interp_runner import serve_cases  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _alloc(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8)


def _operand(rows, cols, dt, layout, g):
    """A ``[rows, cols]`` operand in ``layout``: 'row' (contiguous), 'col' (a transposed view),
    'wide' (a slice of wider rows), 'offset' (base 2 bytes past an aligned address)."""
    x = torch.randn(rows, cols, generator=g).to(dt)
    if layout == "col":
        return x.t().contiguous().t()
    if layout == "wide":
        w = torch.zeros(rows, cols + 5, dtype=dt)
        w[:, :cols] = x
        return w[:, :cols]
    if layout == "offset":
        flat = torch.zeros(rows * cols + 1, dtype=dt)
        v = flat[1:].view(rows, cols)
        v.copy_(x)
        return v
    return x


def run_case(c):
    g = torch.Generator().manual_seed(c["seed"])
    dt = DTYPES[c["dtype"]]
    M, N, K = c["M"], c["N"], c["K"]
    a = _operand(M, K, dt, c.get("a", "row"), g)
    b = _operand(K, N, dt, c.get("b", "row"), g)
    out = torch.full((M, N), float("nan"), dtype=dt)
    if c.get("out") == "col":
        out = out.t().contiguous().t()
    plan = make_plan(a, b, out, kernel=c.get("kernel", "auto"), config=c["config"], num_sms=4,
                     capability=(9, 0), gpu="h200")
    plan(a, b, out)
    ref = a.float() @ b.float()
    got = out.float()
    err = float(torch.linalg.norm(got - ref) / torch.linalg.norm(ref))
    # run again: the split-K reduction must give the same bits (fixed summation order)
    again = torch.full_like(out, float("nan"))
    plan(a, b, again)
    return dict(kind=plan.kind, staged=[plan.stage_a, plan.stage_b, plan.stage_c],
                err=err if err == err else 1e9, nan=int(torch.isnan(got).sum()),
                bitwise_repeat=bool(torch.equal(out.view(torch.int16), again.view(torch.int16))))


def main(cases_path, results_path):
    triton.set_allocator(_alloc)
    serve_cases(run_case, cases_path, results_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
