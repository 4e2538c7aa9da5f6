"""CPU tests of ``python -m syncopate.bench --model block`` (syncopate.bench.block): its
arguments and their refusals, the loopback refusal, the rows it builds (shapes, per-rank
GEMMs and collectives, derived columns, the table), and the whole harness at W = 1 on a
one-rank gloo group -- the real TransformerBlock (fused and unfused) at a tiny shape, forward
and forward + backward, with the CUDA-event timer replaced by a fixed one (the GPU run is
scripts/gpu_block.sh, step bench1)."""

from __future__ import annotations

import importlib
import json

import pytest

bench = importlib.import_module("syncopate.bench.__main__")
from syncopate.bench import block  # noqa: E402


# ------------------------------------------------------------------------- arguments, refusal

def test_model_flag_and_blocks_parse():
    args = bench.parse_args(["--model", "block"])
    assert args.model == "block" and args.blocks is None
    assert [s.name for s in block.shapes_for(args)] == list(block.NAMES)
    args = bench.parse_args(["--model", "block", "--blocks", "llama3-70b, llama3-8b"])
    assert [s.name for s in block.shapes_for(args)] == ["llama3-8b", "llama3-70b"]
    assert bench.parse_args([]).model is None


@pytest.mark.parametrize("argv, says", [
    (["--model", "layer"], "--model: invalid choice: 'layer'"),
    (["--model", "block", "--blocks", "gpt2"], "'gpt2' unknown"),
    (["--model", "block", "--blocks", ""], "give a comma-separated subset of llama3-8b"),
])
def test_bad_values_exit_2_with_the_option_named(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        bench.parse_args(argv)
    assert e.value.code == 2 and says in capsys.readouterr().err


@pytest.mark.parametrize("argv, says", [
    (["--blocks", "llama3-8b"], "add --model block"),
    (["--model", "block", "--check"], "does not combine with --check"),
    (["--model", "block", "--calibrate"], "does not combine with --calibrate"),
    (["--model", "block", "--compile"], "does not combine with --compile"),
])
def test_model_refuses_other_modes(argv, says, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "0")  # would otherwise reach the GPU run
    assert bench.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_model_block_refuses_loopback(capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.delenv("SYNCOPATE_GPU_LOOPBACK", raising=False)
    assert bench.main(["--model", "block", "--loopback", "2"]) == 2
    err = capsys.readouterr().err
    assert "refuses loopback" in err and "tests/gpu" in err and "add --check" not in err
    monkeypatch.setenv("SYNCOPATE_GPU_LOOPBACK", "2")
    monkeypatch.setenv("RANK", "0")
    assert bench.main(["--model", "block"]) == 2
    assert "refuses loopback" in capsys.readouterr().err


def test_model_block_needs_torchrun(capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.delenv("SYNCOPATE_GPU_LOOPBACK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert bench.main(["--model", "block", "--quick"]) == 2
    assert "torchrun" in capsys.readouterr().err


# ------------------------------------------------------------------------------- the rows

def test_standard_shapes_and_quick():
    full = block.shapes_for(bench.parse_args(["--model", "block"]))
    quick = block.shapes_for(bench.parse_args(["--model", "block", "--quick"]))
    by = {s.name: s for s in full}
    assert (by["llama3-8b"].dim, by["llama3-8b"].n_heads, by["llama3-8b"].n_kv_heads,
            by["llama3-8b"].ffn_dim) == (4096, 32, 8, 14336)
    assert (by["llama3-70b"].dim, by["llama3-70b"].n_heads, by["llama3-70b"].n_kv_heads,
            by["llama3-70b"].ffn_dim) == (8192, 64, 8, 28672)
    assert by["llama3-8b-long"].layout == "cp" and by["llama3-8b-long"].seq == 131072
    assert {s.layout for s in full} == {"tp", "cp"}
    for f, q in zip(full, quick):
        assert q.name == f.name and q.seq == f.quick_seq <= f.seq and q.dim == f.dim


@pytest.mark.parametrize("W", [1, 2, 4, 8])
def test_every_shape_splits_its_gemms_over_the_ranks(W):
    """The per-rank GEMMs of every standard shape add up to the unsharded block's FLOPs (each
    layout splits the work W ways, none lost or double counted)."""
    for s in block.SHAPES:
        assert s.problem(W) is None
        whole = sum(M * K * N for _, M, K, N in s.gemms(1))
        assert sum(M * K * N for _, M, K, N in s.gemms(W)) * W == whole
        qkv = (s.n_heads + 2 * s.n_kv_heads) * s.head_dim
        assert s.gemms(1) == [("wqkv", s.seq, s.dim, qkv), ("wo", s.seq, s.dim, s.dim),
                              ("w13", s.seq, s.dim, 2 * s.ffn_dim),
                              ("w2", s.seq, s.ffn_dim, s.dim)]


def test_shapes_that_do_not_divide_are_refused_with_the_reason():
    tp = block.BlockShape("t", 64, 8, 2, 96, 16, 16)
    assert "KV heads (2)" in tp.problem(4)
    assert "does not divide" in block.BlockShape("t", 64, 8, 8, 96, 12, 12).problem(8)
    cp = block.BlockShape("c", 64, 8, 2, 96, 24, 24, layout="cp")
    assert cp.problem(4) is None and cp.problem(3) is None and "2 x 8" in cp.problem(8)


def test_collectives_per_layout_and_direction():
    tp, cp = block.SHAPES[0], block.SHAPES[2]
    assert tp.collectives(1, "fwd") == [] and cp.collectives(1, "fwd+bwd") == []
    f, fb = tp.collectives(2, "fwd"), tp.collectives(2, "fwd+bwd")
    assert sorted(k for k, *_ in f) == ["all_gather"] * 2 + ["reduce_scatter"] * 2
    assert len(fb) == 8 and all(r == tp.seq and c == tp.dim and not fp32 for _, r, c, fp32 in fb)
    kv = 2 * cp.n_kv_heads * cp.head_dim
    assert cp.collectives(4, "fwd") == [("all_gather", cp.seq, kv, False)]
    assert cp.collectives(4, "fwd+bwd") == [("all_gather", cp.seq, kv, False),
                                            ("all_gather", cp.seq, kv, False),
                                            ("reduce_scatter", cp.seq, kv, True)]


def test_async_tp_applies_only_to_tensor_parallel_rows_over_several_ranks():
    tp, cp = block.SHAPES[0], block.SHAPES[2]
    assert block.async_tp_problem(tp, 2, True, True) is None
    assert "W = 1" in block.async_tp_problem(tp, 1, True, True)
    assert "layout cp" in block.async_tp_problem(cp, 4, True, True)
    assert "no async-TP pass" in block.async_tp_problem(tp, 2, False, True)
    assert "not on CUDA" in block.async_tp_problem(tp, 2, True, False)


def test_derive_ideal_throughput_and_ratios():
    r = block.derive({**block.new_row(block.SHAPES[0], "fwd", 2), "fused": 8.0,
                      "unfused": 10.0, "compute": 6.0, "comm": 7.0, "torch async-TP": None})
    assert r["ideal"] == 7.0 and r["tokens"] == 8192
    assert r["fused tok/s"] == pytest.approx(8192 / 8e-3)
    assert r["unfused/fused"] == pytest.approx(1.25) and r["fused/ideal"] == pytest.approx(8 / 7)
    assert r["torch async-TP tok/s"] is None
    r = block.derive({**block.new_row(block.SHAPES[0], "fwd", 2), "fused": None, "compute": 6.0})
    assert r["ideal"] is None and r["unfused/fused"] is None and r["fused/ideal"] is None


def test_table_has_every_column_and_says_why_for_n_a():
    r = block.new_row(block.SHAPES[2], "fwd+bwd", 1)
    r.update({"fused": 100.0, "unfused": 125.0, "compute": 90.0, "comm": 0.0})
    r["notes"]["torch async-TP"] = "W = 1: the block has no collective to overlap"
    r["errors"]["DTensor+pass"] = "RuntimeError: boom"
    t = block.format_table([block.derive(r)])
    for c in block.COLUMNS + ("fused tok/s", "unfused/fused", "fused/ideal"):
        assert c in t
    assert "1.25x" in t and "n/a" in t and "100.000" in t
    assert "[llama3-8b-long fwd+bwd] torch async-TP: W = 1" in t
    assert "DTensor+pass error: RuntimeError: boom" in t


# ------------------------------------------------------------------ the harness at W = 1

TINY = block.BlockShape("tiny", 32, 4, 2, 48, 16, 8)
TINY_CP = block.BlockShape("tiny-cp", 32, 4, 2, 48, 16, 8, layout="cp")


class FixedTimer:
    """Calls the column once (the work really runs) and reports 2 ms."""

    calls = 0

    def __call__(self, fn):
        fn()
        FixedTimer.calls += 1
        return 2.0


def _run_main(monkeypatch, tmp_path, argv, capsys):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    import syncopate.runtime as rt
    from syncopate.runtime.communicator import Communicator
    from syncopate.torch_ops import groups

    class Comm(Communicator):
        """What the harness reads of a Communicator, on the CPU: one rank of gloo."""

        def __init__(self, symm_backend="cuda"):
            self.group = dist.group.WORLD
            self.group_name = self.group.group_name
            self.rank, self.world_size, self.device = 0, 1, torch.device("cpu")

        def clear_cache(self):
            pass

        def close(self):
            pass

    monkeypatch.setattr(block, "SHAPES", (TINY, TINY_CP))
    monkeypatch.setattr(bench, "Timer", lambda *a, **k: FixedTimer())
    monkeypatch.setattr(bench, "init_distributed", lambda: dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1))
    monkeypatch.setattr(rt, "Communicator", Comm)
    monkeypatch.setattr(groups, "_COMMS", {})  # the stub is registered for the group: forget it
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("SYNCOPATE_GPU_LOOPBACK", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    rc = bench.main(["--model", "block", "--out", str(tmp_path), *argv])
    return rc, json.loads((tmp_path / "bench_block.json").read_text()), capsys.readouterr().out


def test_harness_runs_at_world_size_one(monkeypatch, tmp_path, capsys):
    rc, data, out = _run_main(monkeypatch, tmp_path, ["--quick"], capsys)
    assert rc == 0 and data["meta"]["complete"] is True and data["meta"]["world_size"] == 1
    rows = data["rows"]
    assert [(r["model"], r["dir"]) for r in rows] == [
        ("tiny", "fwd"), ("tiny", "fwd+bwd"), ("tiny-cp", "fwd"), ("tiny-cp", "fwd+bwd")]
    for r in rows:
        assert r["S"] == 8 and r["errors"] == {}, r["errors"]  # --quick: the quick sequence
        assert r["fused"] == r["unfused"] == 2.0 and r["fused vs unfused"] <= block.TOLERANCE
        # compute: the GEMMs (and in the backward their gradient GEMMs) and the attention
        assert r["compute"] == (4.0 if r["dir"] == "fwd" else 6.0)
        assert r["comm"] == 0.0 and r["ideal"] == r["compute"]
        assert r["fused tok/s"] == pytest.approx(8 / 2e-3)
        assert r["torch async-TP"] is None and "W = 1" in r["notes"]["torch async-TP"]
        assert r["DTensor+pass"] is None and "W = 1" in r["notes"]["DTensor+pass"]
    assert "tiny-cp" in out and "fused/ideal" in out and "bench_block.json" in out


def test_harness_does_not_time_a_fused_block_that_disagrees(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(block, "TOLERANCE", -1.0)  # any difference counts as a disagreement
    rc, data, out = _run_main(monkeypatch, tmp_path, ["--quick"], capsys)
    assert rc == 0 and len(data["rows"]) == 4
    for r in data["rows"]:
        assert r["fused"] is None and "differs from the unfused block" in r["errors"]["fused"]
        assert r["unfused"] == 2.0
    assert "fused error: output differs" in out


def _run_rank(rank, world_size, out_dir):
    """One rank of the harness at W = 2 on gloo: block.run itself (the shapes shrunk, the
    timer fixed), every column that applies off CUDA -- the modules, the DTensor block compiled
    with syncopate's pass, compute, the collectives -- and the rows rank 0 wrote."""
    import torch
    import torch.distributed as dist

    from syncopate.runtime.communicator import Communicator

    class Comm(Communicator):
        def __init__(self):
            self.group = dist.group.WORLD
            self.group_name = self.group.group_name
            self.rank, self.world_size = rank, world_size
            self.device = torch.device("cpu")

        def clear_cache(self):
            pass

    block.SHAPES = (TINY, TINY_CP)
    args = bench.parse_args(["--model", "block", "--quick", "--out", out_dir])
    rows = block.run(Comm(), args, lambda m: None, FixedTimer(), "cmd")
    return rows


def test_harness_runs_every_column_at_world_size_two(tmp_path):
    """W = 2 (two gloo processes): the fused block's output agrees with the unfused one's on
    both ranks, the collectives are timed, the DTensor block compiles with the pass and the
    report counts its rewrites per graph; async-TP says why it is n/a (CPU; cp)."""
    import os
    import sys
    pytest.importorskip("torch")
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "gpu"))
    from dist_harness import run_ranks
    ranks = run_ranks(_run_rank, str(tmp_path), world_size=2, timeout=900, pg_backend="gloo")
    data = json.loads((tmp_path / "bench_block.json").read_text())
    assert data["meta"]["world_size"] == 2 and data["meta"]["complete"] is True
    assert ranks[0] == data["rows"]  # rank 0's rows are the ones written
    by = {(r["model"], r["dir"]): r for r in data["rows"]}
    assert sorted(by) == [("tiny", "fwd"), ("tiny", "fwd+bwd"), ("tiny-cp", "fwd"),
                          ("tiny-cp", "fwd+bwd")]
    for (model, d), r in by.items():
        assert r["errors"] == {}, r["errors"]
        assert r["W"] == 2 and r["S"] == 8 and r["fused vs unfused"] <= block.TOLERANCE
        assert r["fused"] == r["unfused"] == r["comm"] == 2.0  # timed, collectives included
        assert r["torch async-TP"] is None
    assert "not on CUDA" in by[("tiny", "fwd")]["notes"]["torch async-TP"]
    assert "layout cp" in by[("tiny-cp", "fwd")]["notes"]["torch async-TP"]
    assert by[("tiny-cp", "fwd")]["DTensor+pass"] is None
    # the DTensor block with syncopate's pass: forward 2 + 2, backward 2 ag_gemm
    assert by[("tiny", "fwd")]["DTensor+pass"] == 2.0
    assert by[("tiny", "fwd")]["notes"]["DTensor+pass"] == "fused per graph: fwd ag_gemm 2, gemm_rs 2"
    assert by[("tiny", "fwd+bwd")]["notes"]["DTensor+pass"] == (
        "fused per graph: fwd ag_gemm 2, gemm_rs 2; bwd ag_gemm 2, gemm_rs 0")
