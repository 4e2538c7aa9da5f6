"""The FP8 benchmark driver (``bench_local --fp8``) on CPU with a fake device backend: every
candidate is checked before it is timed (a kernel that leaves NaN or is off fails and is
listed), "vs torch" compares with ``torch._scaled_mm`` of the same accumulation mode, and the
JSON is complete. The timings themselves need an H200 (nobody has run them yet)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from syncopate.bench.local_fp8 import operands  # noqa: E402
from syncopate.bench.local import main  # noqa: E402


class FakeBackend:
    """CPU stand-in: the 'tma' kernel is torch._scaled_mm (correct, "twice as fast"); the
    'ptr' kernel in fast-accumulation mode never writes its output (must fail)."""

    device = "cpu"

    def available(self):
        return None

    def info(self):
        return dict(device="fake", sms=132, capability=[9, 0], torch=torch.__version__,
                    triton="fake")

    def sync(self):
        pass

    def time_ms(self, fn, warmup_ms, rep_ms):
        fn()
        return float(getattr(fn, "ms", 1.0))

    def launcher(self, a, b, sa, sb, out, kernel, config):
        def launch():
            if kernel == "ptr" and config.FAST_ACCUM:
                return
            out.copy_(torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16))
        launch.ms = 0.5 if kernel == "tma" else 2.0
        return launch, out

    def torch_launcher(self, a, b, sa, sb, fast):
        def launch():
            return torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16)
        return launch


def test_fp8_bench_checks_then_times(tmp_path, capsys):
    out = tmp_path / "fp8.json"
    rc = main(["--fp8", "--shapes", "64x48x32", "--out", str(out)], backend=FakeBackend())
    assert rc == 1  # the broken candidate is a failure
    rep = json.loads(out.read_text())
    assert rep["complete"] and rep["failures"] == 2  # ptr/fast in both scale modes
    assert [r["mode"] for r in rep["results"]] == ["tensor", "row"]
    for r in rep["results"]:
        tma = r["kernels"]["tma/precise"]
        assert tma["correct"] and tma["vs_torch"] == 0.5 and tma["rel_vs_torch"] == 0.0
        assert r["kernels"]["ptr/fast"]["correct"] is False and "ms" not in r["kernels"]["ptr/fast"]
        assert r["kernels"]["ptr/precise"]["vs_torch"] == 2.0
    assert "FAILED" in capsys.readouterr().out


def test_operands_are_scaled_mm_layout():
    """B column-major, row-wise scales [M, 1] / [1, N], and the reference is the dequantised
    product (what ``torch._scaled_mm`` approximates)."""
    a, b, sa, sb, ref = operands(32, 48, 64, "row", "cpu", 0)
    assert a.dtype == b.dtype == torch.float8_e4m3fn and b.stride(0) == 1
    assert sa.shape == (32, 1) and sb.shape == (1, 48)
    got = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16).float()
    assert torch.linalg.norm(got - ref) / torch.linalg.norm(ref) < 1e-2
    a, b, sa, sb, _ = operands(32, 48, 64, "tensor", "cpu", 0)
    assert sa.numel() == sb.numel() == 1
