"""``syncopate.bench --check``'s report: one line per row of every op and the exit status.

The report runs after the GPU work; a row shape it does not know (the Ulysses row once fell
through to the ring-attention line and raised ``KeyError`` after a passing check) must be caught
here, on the CPU, not at the end of a GPU run.
"""
from __future__ import annotations

import copy

import pytest

from syncopate.bench.__main__ import check_row_line, report_check_rows

RING = dict(op="ring_attn", S=1024, Hq=4, Hkv=1, D=128, causal=True, finite=True,
            max_diff_o=0.0, max_diff_lse=0.0)
ULYSSES = dict(op="ulysses", S=1024, Hq=8, Hkv=4, D=128, causal=False, W=2, errors={},
               bitwise_fused_vs_serial=True, max_diff_fused_vs_serial=0.0,
               finite_fused=True, finite_serial=True, rel_err_fused=2.2e-3,
               rel_err_serial=2.2e-3)
MOE = dict(op="moe", shape="small", routing="hot", E=8, k=2, H=1024, F=2048, T=256, C=64, W=2,
           dropped=0, counts_equal=True, max_diff=0.0, bitwise=True)
GEMM_AR = {"op": "gemm_ar", "M": 64, "N": 4096, "K": 4096, "rel_err_vs_nccl": 0.0,
           "finite": True, "ranks_differ": 0}
ROWS = [RING, ULYSSES, MOE, GEMM_AR]


def test_every_op_row_has_its_line_and_a_clean_run_exits_0(capsys):
    assert report_check_rows(copy.deepcopy(ROWS)) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert len(lines) == 4 and err == ""
    assert lines[0].startswith("ring_attn S=1024 causal=True") and "|lse| diff 0" in lines[0]
    assert lines[1].startswith("ulysses S=1024") and "bitwise equal" in lines[1]
    assert lines[2].startswith("moe small hot W=2") and "bitwise True" in lines[2]
    assert lines[3].startswith("gemm_ar M=64 N=4096 K=4096")


def test_a_row_without_op_is_ring_attention():
    """Older ring-attention rows carried no ``op`` key; they still print."""
    row = {k: v for k, v in RING.items() if k != "op"}
    assert check_row_line(row) == check_row_line(RING)


@pytest.mark.parametrize("bad, says", [
    (dict(RING, max_diff_o=0.5), "max |o| diff 0.5 is above"),
    (dict(RING, max_diff_lse=0.1), "max |lse| diff 0.1 is above"),
    (dict(RING, finite=False), "NaN/Inf in the fused output"),
    (dict(ULYSSES, bitwise_fused_vs_serial=False, max_diff_fused_vs_serial=0.25),
     "fused differs from serial"),
    (dict(ULYSSES, rel_err_fused=0.5), "fused relative error 0.5"),
    (dict(MOE, bitwise=False, max_diff=0.125), "fused differs from unfused"),
    (dict(GEMM_AR, ranks_differ=3), "3 elements differ between ranks"),
    (dict(GEMM_AR, finite=False), "NaN/Inf"),
])
def test_each_op_failure_exits_1_and_says_what(capsys, bad, says):
    rows = copy.deepcopy(ROWS)
    rows = [bad if r["op"] == bad["op"] else r for r in rows]
    assert report_check_rows(rows) == 1
    err = capsys.readouterr().err
    assert says in err and err.startswith("syncopate.bench --check: ")


def test_a_report_bug_is_one_line_not_a_traceback(monkeypatch, capsys):
    """After the GPU work, ``check_main`` reports through the CLI's handler: a row the report
    cannot read (the KeyError found on the H200) is one 'internal error' line and exit 1."""
    import argparse

    from syncopate.bench import __main__ as bench
    monkeypatch.delenv("SYNCOPATE_TRACEBACK", raising=False)
    monkeypatch.setattr(bench, "_check_worker", lambda rank, W, args: [dict(op="ring_attn")])
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(bench, "init_distributed", lambda: None)
    import torch.distributed as dist
    monkeypatch.setattr(dist, "get_rank", lambda: 0)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)
    monkeypatch.delenv("SYNCOPATE_GPU_LOOPBACK", raising=False)
    args = argparse.Namespace(loopback=0, ops="ring_attn")
    assert bench.check_main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error in python -m syncopate.bench --check: KeyError" in err[0]
