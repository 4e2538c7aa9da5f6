"""The prepare step of every GEMM op (the LaunchPlan the op caches per layout) built on
the CPU with the real local-kernel argument list, ``out`` left out as a user calls the op.

Why: the CPU tests of the ops stand fakes in for the fused kernel and often for the whole
launch spec, and the first GPU run after the ops became specs failed in every ag_gemm case
with ``'NoneType' object has no attribute 'stride'``: the prepare step handed ``out=None`` to
the GEMM's argument builder.  Here the prepare step runs as the op runs it (kernel ``ptr``:
no SM count needed); the FusedKernel is a stand-in, and the operand check runs without its
"CUDA tensors only" clause (it would refuse these CPU tensors before anything else)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.ops import REGISTRY, driver  # noqa: E402


class _Comm:
    rank, world_size = 1, 2

    def __init__(self):
        self.cache = {}

    def empty(self, shape, dtype):
        return torch.empty(shape, dtype=dtype)


def _operands(name, W=2, M=64, N=48, K=32):
    """``(x, y, s)`` of op ``name`` on this rank, ``s`` its decision shape as ``dims`` reads it."""
    dt = torch.bfloat16
    g = REGISTRY[name].gemm
    if name == "ag_gemm":
        x, y = torch.randn(M // W, K, dtype=dt), torch.randn(K, N, dtype=dt)
    elif name == "ag_weight_gemm":
        x, y = torch.randn(M, K, dtype=dt), torch.randn(K // W, N, dtype=dt)
    else:
        x, y = torch.randn(M, K // W, dtype=dt), torch.randn(K // W, N, dtype=dt)
    return x, y, dict(zip(REGISTRY[name].shape, g.dims(x, y, W)))


STAGED = [n for n, s in REGISTRY.items() if s.gemm is not None]


def test_the_staged_gemm_ops_are_walked():
    assert {"ag_gemm", "gemm_rs", "gemm_ar", "ag_weight_gemm"} <= set(STAGED)


def _check_operands_on_cpu(a, b, c, kernel):
    assert c is not None, "the GEMM's output is None"
    assert a.shape[1] == b.shape[0] and tuple(c.shape) == (a.shape[0], b.shape[1])
    return a.shape[0], b.shape[1], a.shape[1]


@pytest.mark.parametrize("name", STAGED)
def test_prepare_without_out_builds_the_kernel_arguments(name, monkeypatch):
    import syncopate.kernels as kernels
    monkeypatch.setattr(kernels, "check_operands", _check_operands_on_cpu)
    x, y, s = _operands(name)
    prep = driver.prepare(REGISTRY[name], _Comm(), object(), x, y, None, None, s, "ptr", None)
    out = prep.args[prep.out_index] if prep.out_index is not None else None
    if out is not None:
        assert isinstance(out, torch.Tensor) and tuple(out.shape)[1] == s["n"]
    assert all(a is not None for a in prep.args)
