"""Runs the FP8 GEMM kernels under Triton's interpreter for tests/test_kernels_fp8.py.

Why a separate process: ``TRITON_INTERPRET=1`` is read when ``@triton.jit`` decorates, so it
must be set before triton is first imported. Run as
``TRITON_INTERPRET=1 python fp8_interp_worker.py CASES.json RESULTS.json``.

Why a shim: Triton 3.6's interpreter stores float8 tensors as their uint8 bit patterns and its
``tl.dot`` multiplies whatever numpy arrays it holds, so an fp8 dot would multiply the bit
patterns. ``create_dot`` here first decodes e4m3 bits to fp32 with ``torch.float8_e4m3fn``
(exact: every e4m3 value is an fp32 value); the kernels are not bent for it. The interpreter
then accumulates in fp32 (no model of Hopper's reduced-precision FP8 accumulation).
Each case's kernel arguments are built by the launcher's own :func:`fp8_args`; the CUDA-only
device check of :func:`check_fp8_operands` is the one step skipped.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import triton.runtime.interpreter as interp  # noqa: E402

_orig_patch_tensor = interp._patch_lang_tensor


def _patch_lang_tensor(tensor, scope):
    # NumPy >= 2.4 refuses int() of a 1-element 1-D array (the interpreter's __index__)
    _orig_patch_tensor(tensor, scope)
    scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))


def _widen(h):
    if h.dtype.scalar == tl.float8e4nv:
        bits = torch.from_numpy(np.ascontiguousarray(h.data).astype(np.uint8))
        return interp.TensorHandle(bits.view(torch.float8_e4m3fn).float().numpy(), tl.float32)
    return h


_orig_dot = interp.InterpreterBuilder.create_dot


def _create_dot(self, a, b, d, *args):
    return _orig_dot(self, _widen(a), _widen(b), d, *args)


interp._patch_lang_tensor = _patch_lang_tensor
interp.InterpreterBuilder.create_dot = _create_dot

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
