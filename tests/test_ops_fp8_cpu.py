"""The FP8 ops refuse bad operands before anything collective or any launch, with the fix in
the message (a fake communicator: the checks run on the host). Their GPU runs are
tests/gpu/test_multi_gpu_fp8.py; what they compile is emulated in tests/test_emulate_fp8.py."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.ops import ag_gemm_fp8, gemm_rs_fp8  # noqa: E402
from syncopate.ops._fp8 import row_scales  # noqa: E402

F8 = torch.float8_e4m3fn


class FakeComm:
    world_size, rank, device, colocated = 2, 0, torch.device("cpu"), 1
    cache: dict = {}


def _ops(M=64, N=32, K=48):
    return (torch.zeros(M, K).to(F8), torch.zeros(N, K).to(F8).t(), torch.ones(M, 1),
            torch.ones(1, N))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("op", [ag_gemm_fp8, gemm_rs_fp8])
def test_ops_say_what_to_change(op, fused):
    a, b, sa, sb = _ops()
    with pytest.raises(LaunchError, match="b must be column-major"):
        op(a, b.contiguous(), sa, sb, FakeComm(), fused=fused)
    with pytest.raises(LaunchError, match=r"scale_a has shape \(32, 1\).*\(64, 1\)"):
        op(a, b, sa[:32], sb, FakeComm(), fused=fused)
    with pytest.raises(LaunchError, match="a must be torch.float8_e4m3fn"):
        op(a.float(), b, sa, sb, FakeComm(), fused=fused)
    with pytest.raises(LaunchError, match="scale_b must be torch.float32"):
        op(a, b, sa, sb.double(), FakeComm(), fused=fused)
    with pytest.raises(LaunchError, match="CUDA device"):  # well-formed: only the device is off
        op(a, b, sa, sb, FakeComm(), fused=fused)


def test_tensorwise_scale_a_becomes_the_shards_rows():
    s = torch.tensor(0.25)
    r = row_scales(s, 5)
    assert r.shape == (5, 1) and bool((r == 0.25).all())
    rows = torch.rand(5, 1)
    assert row_scales(rows, 5) is rows
