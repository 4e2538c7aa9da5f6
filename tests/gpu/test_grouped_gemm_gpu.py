"""The grouped GEMM on one GPU against per-expert cuBLAS matmuls: random, skewed (one hot
expert), empty experts, over-capacity counts (clamped to the capacity in the kernel) and two
groups per expert. Outputs are NaN-poisoned: a valid row left unwritten, or a padding row
written, fails."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU; the CPU tests are tests/test_grouped_gemm.py",
                allow_module_level=True)

from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig, grouped_gemm  # noqa: E402

pytestmark = pytest.mark.gpu

CASES = [
    ("random", [100, 256, 3, 177], 1, 256),
    ("one_hot", [256, 0, 0, 0], 1, 256),
    ("empty", [0, 0, 0, 0], 1, 128),
    ("over_capacity", [999, 5, -3, 128], 1, 128),
    ("two_per_expert", [64, 0, 128, 1, 77, 128], 2, 128),
]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("config", [None, GroupedGemmConfig(64, 128, 64, 4, 3)])
@pytest.mark.parametrize("name,counts,gpe,C", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("sliced", [False, True], ids=["one_launch", "sliced"])
def test_matches_per_expert_mm(name, counts, gpe, C, dtype, config, sliced, monkeypatch):
    if sliced:  # as if the operands passed the 32-bit offsets: one launch per group
        import syncopate.kernels.grouped_gemm_launch as gl
        monkeypatch.setattr(gl, "OFFSET_LIMIT", 320 * max(C, 384) + 1)
    g = torch.Generator(device="cuda").manual_seed(7)
    G, K, N = len(counts), 320, 384
    E = G // gpe
    a = torch.randn(G, C, K, device="cuda", generator=g).to(dtype)
    w = (torch.randn(E, K, N, device="cuda", generator=g) / K ** 0.5).to(dtype)
    count = torch.tensor(counts, dtype=torch.int32, device="cuda")
    out = torch.full((G, C, N), float("nan"), device="cuda", dtype=dtype)
    grouped_gemm(a, w, count, out, segments=gpe, config=config)
    for gi, n in enumerate(counts):
        n = max(0, min(n, C))
        ref = a[gi, :n].float() @ w[gi % E].float()
        assert not torch.isnan(out[gi, :n]).any(), f"group {gi}: valid rows unwritten"
        assert torch.isnan(out[gi, n:]).all(), f"group {gi}: rows past the count written"
        if n:
            rel = torch.linalg.norm(out[gi, :n].float() - ref) / torch.linalg.norm(ref)
            assert rel < 1e-2, f"group {gi}: relative error {float(rel):.3g}"
