"""scripts/bench_attention.py run as written, on the CPU under Triton's interpreter
(``--device cpu``): the GPU sweep must not be the first place the script's own code runs.

Before syncopate.kernels installed its interpreter repairs, every row of this run failed
("only 0-dimensional arrays can be converted to Python scalars") and nothing caught it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_attention_runs_and_checks_a_row_under_the_interpreter(tmp_path):
    out = tmp_path / "rows.json"
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "scripts", "bench_attention.py"), "--device", "cpu",
         "--shapes", "1,2,1,128,64", "--causal", "0", "--workers", "0", "--reps-s", "0.01",
         "--json", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    run = json.loads(out.read_text())
    assert run["failures"] == []
    (row,) = run["rows"]
    # the fast and the fusable forward, their LSE, and the backward, each checked against SDPA
    assert row["ours_ok"] and row["fusable_ok"] and row["ours_bwd_ok"], row
    assert row["ours_err"] < 2e-2 and row["ours_lse_err"] < 1e-3
    assert row["ours_bwd_err"] < 2e-2 and row["fusable_bwd_err"] < 2e-2
