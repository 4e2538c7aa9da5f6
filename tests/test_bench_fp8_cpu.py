"""The FP8 rows of ``python -m syncopate.bench`` on CPU: which rows ``--ops ag_fp8,rs_fp8``
adds, that an FP8 row sweeps like its bf16 op (the epilogue variant included), and that a torch
without async-TP's FP8 ops gets its peer column reported as absent, not a crash. Timings need
GPUs (nobody has run them yet)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import syncopate.bench.__main__ as bench  # noqa: E402
from syncopate.bench import rows as fp8_bench  # noqa: E402
from syncopate.bench.fused import sweep_fused  # noqa: E402
from syncopate.bench.fused import safe  # noqa: E402


def test_fp8_rows():
    args = bench.parse_args(["--quick", "--ops", "ag_fp8,rs_fp8", "--scales", "tensor"])
    rows = bench.rows_for(args, 2)
    assert [r[0] for r in rows] == ["ag_gemm_fp8", "gemm_rs_fp8"]
    assert args.scales == "tensor"
    assert all(r[0] not in ("ag_gemm_fp8", "gemm_rs_fp8")
               for r in bench.rows_for(bench.parse_args(["--quick"]), 2))


def test_fp8_row_sweeps_as_its_bf16_op(monkeypatch):
    """``base_op`` makes the sweep take the GEMM+RS candidates and the epilogue variant."""
    import syncopate.bench.fused as fused
    seen = []
    monkeypatch.setattr(fused, "checked_time",
                        lambda comm, timer, run, correct: (run(), (1.0, 0.1))[1])
    r = {"op": "gemm_rs_fp8[row]", "base_op": "gemm_rs"}
    args = bench.parse_args(["--quick"])
    sweep_fused(r, None, None, ["sm", "ce+epilogue"], args, print,
                lambda **kw: seen.append(kw), lambda res: True, "")
    assert {"backend": "ce", "split": 1, "comm_programs": 0, "reduce": "epilogue"} in seen
    assert r["fused[ce+epilogue]"] == 1.0 and r["fused[sm]"] == 1.0


def test_missing_async_tp_op_is_reported(monkeypatch):
    class NoSymm:
        pass
    monkeypatch.setattr(torch.ops, "symm_mem", NoSymm(), raising=False)
    r = {}
    safe(r, "torch async-TP",
          lambda: fp8_bench.symm_op("fused_all_gather_scaled_matmul"))
    assert r["torch async-TP"] is None
    assert "absent in this torch" in r["errors"]["torch async-TP"]
