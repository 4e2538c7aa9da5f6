"""The local FP8 GEMM (``syncopate.kernels.scaled_mm``) against ``torch._scaled_mm`` on one
Hopper GPU: ragged shapes, both scale modes, both kernels, both accumulation modes. Outputs are
poisoned with NaN first, so a tile that is never written fails. Skipped without an sm_90 GPU
(the CPU tests are tests/test_kernels_fp8.py)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9:
    pytest.skip("needs an sm_90+ CUDA GPU (FP8 wgmma); the CPU compile and interpreter tests "
                "are tests/test_kernels_fp8.py", allow_module_level=True)

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import default_fp8_config, scaled_mm  # noqa: E402
from syncopate.bench.local_fp8 import operands  # noqa: E402

pytestmark = pytest.mark.gpu

#: torch._scaled_mm needs K and N multiples of 16; M is free
SHAPES = [(1000, 4000, 1008), (129, 272, 64), (8, 16, 16), (2048, 2048, 2048), (4096, 512, 8192)]


def _rel(x, ref):
    return float(torch.linalg.norm(x.float() - ref.float()) / torch.linalg.norm(ref.float()))


@pytest.mark.parametrize("fast", [False, True], ids=["precise", "fast"])
@pytest.mark.parametrize("mode", ["tensor", "row"])
@pytest.mark.parametrize("kernel", ["tma", "ptr"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_torch_scaled_mm(shape, kernel, mode, fast):
    M, N, K = shape
    a, b, sa, sb, ref = operands(M, N, K, mode, "cuda", sum(shape))
    out = torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)
    scaled_mm(a, b, sa, sb, out, kernel=kernel,
              config=default_fp8_config(M, N, K, kernel, fast_accum=fast))
    want = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    torch.cuda.synchronize()
    assert torch.isfinite(out).all(), "a tile was not written"
    # both round an fp32 sum of the same exact fp8 products to bf16: they differ by the order
    # of the sum (and, with fast accumulation, by Hopper's reduced-precision accumulator)
    assert _rel(out, want) < (2e-2 if fast else 5e-3), _rel(out, want)
    assert _rel(out, ref) < 1e-2


def test_default_config_and_mixed_modes():
    """The default config; a row-wise A with a tensor-wise B (what ag_gemm_fp8 launches), which
    torch._scaled_mm refuses: compared with the dequantised product."""
    M, N, K = 1024, 1024, 512
    a, b, sa, _, _ = operands(M, N, K, "row", "cuda", 7)
    sb = torch.tensor(0.02, device="cuda")
    out = scaled_mm(a, b, sa, sb)
    ref = (a.float() * sa) @ b.float() * sb
    torch.cuda.synchronize()
    assert _rel(out, ref) < 1e-2


def test_row_major_b_is_refused_for_tma_and_correct_for_ptr():
    M, N, K = 256, 256, 256
    a, b, sa, sb, ref = operands(M, N, K, "row", "cuda", 3)
    with pytest.raises(LaunchError, match="column-major"):
        scaled_mm(a, b.contiguous(), sa, sb, kernel="tma")
    out = scaled_mm(a, b.contiguous(), sa, sb, kernel="ptr")
    torch.cuda.synchronize()
    assert _rel(out, ref) < 1e-2
