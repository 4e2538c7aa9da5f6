"""CPU tests of the benchmark's pure parts: rows, sweep, derived columns, table, chart guard,
argument parsing (the GPU run itself is scripts/gpu_check.sh)."""

from __future__ import annotations

import importlib

import pytest

bench = importlib.import_module("syncopate.bench.__main__")


def test_rows_full_and_quick():
    full = bench.rows_for(bench.parse_args([]), 2)
    assert ("ag_gemm", 8192, 14336, 4096) in full and ("gemm_rs", 8192, 4096, 14336) in full
    assert ("ag_gemm", 8192, 29568, 8192) in full and ("ag_gemm", 1024, 28672, 8192) in full
    assert {M for _, M, _, _ in full} == {8192, 1024, 4096}
    assert len(full) == 3 * (3 + 2)
    quick = bench.rows_for(bench.parse_args(["--quick"]), 2)
    assert 2 <= len(quick) <= 4 and set(quick) <= set(full)
    only_ag = bench.rows_for(bench.parse_args(["--quick", "--ops", "ag"]), 2)
    assert all(op == "ag_gemm" for op, *_ in only_ag)


def test_rows_for_chosen_m():
    rows = bench.rows_for(bench.parse_args(["--m", "8192", "--ops", "rs"]), 2)
    assert rows == [("gemm_rs", 8192, 4096, 14336), ("gemm_rs", 8192, 8192, 28672)]
    assert {M for _, M, _, _ in bench.rows_for(bench.parse_args(["--m", "1024,4096"]), 2)} == {1024, 4096}


def test_a_row_starts_only_if_it_should_end_within_the_budget():
    # run 5: rows took 49, 51, 32, 60 s; a 207 s budget started a fifth row at 192 s and the
    # step's timeout killed it, with the table never printed
    assert bench.start_row(0.0, 0.0, 207)
    assert bench.start_row(132.4, 51.0, 207)
    assert not bench.start_row(192.5, 60.1, 207)


def test_results_are_written_after_every_row(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    args = bench.parse_args(["--out", str(tmp_path)])
    r = bench.derive({"op": "gemm_rs", "M": 8, "N": 4, "K": 2, "gemm": 1.0, "comm": 0.5,
                      "fused default": 1.2, "fused[sm]": 1.1}, ["sm"])

    class Comm:
        device = "cpu"
        world_size = 2
    import json
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "fake")
    bench.write_results(args, [r], ["sm"], [], 100.0, 20, "cmd", Comm())
    data = json.loads((tmp_path / "bench.json").read_text())
    assert data["meta"]["complete"] is False and data["meta"]["command"] == "cmd"
    assert data["results"][0]["default/ideal"] == pytest.approx(1.2)
    assert not (tmp_path / "bench.png").exists()  # the chart only at the end


def test_sweep_is_small_and_ce_has_no_comm_programs():
    for quick in (True, False):
        assert all(cp == 0 for _, cp in bench.sweep_for("ce", quick))
        assert all(cp > 0 for _, cp in bench.sweep_for("sm", quick))
        assert len(bench.sweep_for("sm", quick)) <= 5
        assert all(cp < 32 for _, cp in bench.sweep_for("sm", quick))
    assert bench.sweep_for("sm", False, (8, 4))[-1] == (8, 4)  # the op's own pick is timed
    assert bench.sweep_for("sm", False, (1, 8)) == bench.sweep_for("sm", False)
    # GEMM+RS: the epilogue variant sweeps its splits; plain ce (dominated by it) one point
    assert bench.sweep_for("ce", False, None, "gemm_rs", "epilogue") == [(1, 0), (2, 0), (4, 0)]
    assert bench.sweep_for("ce", False, None, "gemm_rs") == [(2, 0)]


def test_derive_ratios():
    r = bench.derive({"gemm": 1.0, "comm": 0.5, "serial cuBLAS": 1.6, "fused[sm]": 1.2,
                      "fused[ce]": 1.1}, ["sm", "ce"])
    assert r["ideal"] == 1.0 and r["fused best"] == 1.1
    assert r["fused/ideal"] == pytest.approx(1.1) and r["serial/fused"] == pytest.approx(1.6 / 1.1)
    r = bench.derive({"gemm": None, "comm": 0.5, "fused[sm]": None}, ["sm"])
    assert r["ideal"] is None and r["fused/ideal"] is None and r["serial/fused"] is None


def test_table_lists_every_column():
    r = bench.derive({"op": "ag_gemm", "M": 8192, "N": 14336, "K": 4096, "gemm": 1.0, "comm": 0.3,
                      "serial cuBLAS": 1.4, "fused[sm]": 1.1}, ["sm"])
    t = bench.format_table([r], ["sm"])
    for col in bench.columns(["sm"]):
        assert col in t
    assert "1.100" in t and "n/a" in t and "1.27x" in t


def test_plot_guarded(tmp_path):
    r = bench.derive({"op": "gemm_rs", "M": 1, "N": 2, "K": 3, "gemm": 1.0, "comm": 2.0}, ["ce"])
    note = bench.plot([r], ["ce"], str(tmp_path / "b.png"))
    assert note is None or "matplotlib" in note
    if note is None:
        assert (tmp_path / "b.png").stat().st_size > 0


def test_main_refuses_without_torchrun(monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.delenv("RANK", raising=False)
    assert bench.main(["--quick"]) == 2
    assert "torchrun" in capsys.readouterr().err


def test_timer_reads_events_only_after_synchronising(monkeypatch):
    """The Timer's contract with CUDA, on fakes: the sleep runs before each start event (host
    run-ahead), every event is complete (synchronize) before elapsed_time, and host time is
    reported beside the device median."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    log = []

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self, stream=None):
            log.append("record")
            self.t = len(log)
            self.done = False
            pending.append(self)

        def elapsed_time(self, end):
            if not (self.done and end.done):
                raise RuntimeError("Both events must be completed before calculating elapsed time.")
            return float(end.t - self.t)

    pending = []

    def synchronize(device=None):
        log.append("sync")
        for ev in pending:
            ev.done = True

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", synchronize)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append("sleep"))
    monkeypatch.setattr(torch, "empty", lambda *a, **k: torch.zeros(4, dtype=torch.uint8))
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: None)
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None: None)
    timer = bench.Timer("cpu", iters=5, warmup=1)
    ms = timer(lambda: log.append("fn"))
    assert ms == 2.0  # record, fn, record
    assert timer.last_host_ms is not None and timer.last_host_ms >= 0
    calib = ["sleep", "record", "sleep", "record", "sync"]
    warm = ["fn", "sync"]
    timed = ["sleep", "record", "fn", "record"] * 5 + ["sync"]
    assert log == calib + warm + timed


def test_git_commit_prefers_the_env_then_the_marker(monkeypatch, tmp_path):
    monkeypatch.setenv("SYNCOPATE_GIT_COMMIT", "abc123")
    assert bench.git_commit() == "abc123"
    monkeypatch.delenv("SYNCOPATE_GIT_COMMIT")
    assert bench.git_commit()  # the marker file if present, else git, else "unknown"


def test_main_writes_rows_as_they_finish_and_skips_what_would_overrun(monkeypatch, tmp_path, capsys):
    """main() on a one-rank gloo group with the rows faked: each finished row lands in
    bench.json, the row that would end past the budget is skipped (and reported), the table
    printed last names the default's choice."""
    torch = pytest.importorskip("torch")
    import json

    import torch.distributed as dist

    import syncopate.runtime as rt

    class Comm:
        rank, world_size, device, group = 0, 1, "cpu", None

        def __init__(self, symm_backend="cuda"):
            pass

        def clear_cache(self):
            pass

        def close(self):
            pass

    clock = {"t": 0.0}
    monkeypatch.setattr(bench.time, "monotonic", lambda: clock["t"])

    def fake_row(op):
        def run(comm, timer, M, N, K, args, backends, log):
            clock["t"] += 40.0  # every row takes 40 s
            data = json.loads((tmp_path / "bench.json").read_text()) if (tmp_path / "bench.json").exists() else None
            seen.append(len(data["results"]) if data else 0)
            return {"op": op, "M": M, "N": N, "K": K, "gemm": 1.0, "comm": 0.5, "fused[sm]": 1.1,
                    "fused default": 1.2, "fused default is": "sm split=1 cp=8"}
        return run
    seen = []
    from syncopate.bench import rows  # where the ops' specs name their row functions
    monkeypatch.setattr(rows, "bench_ag", fake_row("ag_gemm"))
    monkeypatch.setattr(rows, "bench_rs", fake_row("gemm_rs"))
    monkeypatch.setattr(bench, "Timer", lambda *a, **k: None)
    monkeypatch.setattr(bench, "init_distributed", lambda: dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1))
    monkeypatch.setattr(rt, "Communicator", Comm)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "fake")
    monkeypatch.setenv("RANK", "0")
    # 100 s: rows at t=0 and t=40 start (each should end by 80), the third (t=80) would not
    assert bench.main(["--out", str(tmp_path), "--m", "8192", "--ops", "ag", "--backends", "sm",
                       "--budget-s", "100"]) == 0
    assert seen == [0, 1]  # the first row was on disk before the second ran
    data = json.loads((tmp_path / "bench.json").read_text())
    assert [r["N"] for r in data["results"]] == [14336, 28672]
    assert data["meta"]["complete"] is True
    assert data["meta"]["skipped_rows_over_budget"] == [["ag_gemm", 8192, 29568, 8192]]
    out = capsys.readouterr().out
    assert "fused default = sm split=1 cp=8" in out and "would end past the 100 s budget" in out


def test_fused_default_is_checked_before_it_is_timed(monkeypatch):
    """A default whose result is wrong on any rank is reported and not timed; a raising one is
    reported with its error; a correct one gets its device and host times and its description."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from syncopate.bench import fused
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(dist, "all_reduce", lambda t, op=None: None)

    class Comm:
        device = "cpu"
        checks = 0

        def check(self):
            Comm.checks += 1

    class Timer:
        last_host_ms = 0.05

        def __call__(self, fn):
            fn()
            return 1.5

    r = {}
    fused.time_default(r, Comm(), Timer(), lambda: 1, lambda res: False, "differs", lambda: "x")
    assert "fused default" not in r and r["errors"]["fused default"] == "differs"
    r = {}
    fused.time_default(r, Comm(), Timer(), lambda: 1 / 0, lambda res: True, "differs", lambda: "x")
    assert r["errors"]["fused default"].startswith("ZeroDivisionError")
    r = {}
    fused.time_default(r, Comm(), Timer(), lambda: 1, lambda res: True, "differs", lambda: "sm")
    assert (r["fused default"], r["fused default host"], r["fused default is"]) == (1.5, 0.05, "sm")
    assert Comm.checks == 3  # after the mismatching run; after the good run and its timing


def test_compile_mode_reports_the_stage_per_pass_without_a_gpu(tmp_path, capsys):
    """``--compile``: no torchrun, no GPU; a table and compile.json with every step's median
    (``--compile-runs 0`` skips the whole compiles, which take seconds each)."""
    pytest.importorskip("triton")
    pytest.importorskip("xdsl")
    import json
    rc = bench.main(["--compile", "--compile-runs", "0", "--runs", "2", "--kernels", "tma",
                     "--world-sizes", "2", "--ops", "ag", "--backends", "sm",
                     "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert "| tma AG+GEMM W=2 sm |" in out and "stage" in out
    data = json.loads((tmp_path / "compile.json").read_text())
    (r,), meta = data["results"], data["meta"]
    from syncopate_mlir.pipeline import pass_names
    want = ["parse", *(("lower" if n.startswith("lower-") else n) for n in pass_names("sm")), "print"]
    assert list(r["steps_ms"]) == want and r["stage_ms"] > 0 and "compile_ms" not in r
    assert (r["world_size"], r["backend"], r["reduce"]) == (2, "sm", "comm") and r["comm_programs"] > 0
    assert meta["runs"] == 2 and meta["keep_ir"] is False and "--compile" in meta["command"]


def test_check_mode_refuses_other_ops_and_needs_a_launcher(capsys, monkeypatch):
    """``--check`` runs ring attention's correctness rows only, in loopback or under torchrun;
    anything else is a usage error (exit 2) with one line saying what to do."""
    from syncopate.bench.__main__ import main
    monkeypatch.delenv("SYNCOPATE_GPU_LOOPBACK", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main(["--check", "--ops", "ag"]) == 2
    assert "ring_attn, ulysses, ar and/or moe" in capsys.readouterr().err
    assert main(["--check", "--ops", "ring_attn"]) == 2
    assert "--loopback W" in capsys.readouterr().err
    assert main(["--check", "--ops", "gemm_ar"]) == 2  # accepted op, but no launcher
    assert "--loopback W" in capsys.readouterr().err
    assert main(["--check", "--ops", "moe"]) == 2  # accepted op, but no launcher
    assert "--loopback W" in capsys.readouterr().err
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():  # loopback on a machine without a GPU: one line
        assert main(["--check", "--ops", "moe", "--loopback", "2"]) == 1
        assert "needs a CUDA GPU" in capsys.readouterr().err


def test_moe_rows_capacities_and_check_verdict():
    """``--ops moe``: Mixtral-like and DeepSeek-like shapes, uniform and hot routing; the
    capacity is the expected load x 1.25 rounded up to the GEMM's 128 rows (the fused kernels
    need a multiple of BLOCK_M); the quick shape keeps W = 4 loopback co-resident. A check
    row fails when the fused layer is not bitwise the unfused one or the counts differ."""
    import types

    from syncopate.bench import moe as mb
    full = mb.rows(types.SimpleNamespace(quick=False))
    assert {(r[0], r[-1]) for r in full} == {(n, rt) for n in ("mixtral", "deepseek")
                                             for rt in ("uniform", "hot")}
    assert mb.capacity(4096, 2, 16) == 640       # 512 expected rows x 1.25
    assert mb.capacity(4096, 6, 128) == 256      # 192 x 1.25 = 240 -> 256
    assert mb.capacity(10, 1, 64) == 128 and mb.capacity(4096, 2, 16) % 128 == 0
    (name, El, k, H, F, T, _), _ = mb.rows(types.SimpleNamespace(quick=True))
    for W in (2, 4):  # every rank's grid (128x128 tiles, 1 per SM, + 2 comm programs) fits
        C = mb.capacity(T, k, El * W)
        assert W * (W * El * (C // 128) * (max(H, F) // 128) + 2) <= 132 - W
    ok = dict(shape="s", routing="hot", max_diff=0.0, bitwise=True, counts_equal=True)
    assert mb.check_problems([ok]) == []
    bad = dict(ok, bitwise=False, max_diff=0.5)
    assert "fused differs from unfused" in mb.check_problems([bad])[0]


def test_ring_attention_rows_cover_the_issue_shapes():
    """32k/64k/128k tokens, 32/8 heads, D = 128, causal and not; the quick shape fits W = 4
    loopback (2 query blocks x 4 heads + 4 comm programs per rank)."""
    import types

    from syncopate.bench import attention as ab
    full = ab.rows(types.SimpleNamespace(quick=False))
    assert {(S, c) for S, _, _, _, c in full} == {(S, c) for S in (32768, 65536, 131072)
                                                  for c in (False, True)}
    assert all((Hq, Hkv, D) == (32, 8, 128) for _, Hq, Hkv, D, _ in full)
    (S, Hq, Hkv, D, _), _ = ab.rows(types.SimpleNamespace(quick=True))
    assert (S // 4 // 128) * Hq + 4 <= 32


def test_gemm_ar_rows_cover_the_issue_shapes():
    """``--ops ar`` (or ``gemm_ar``): LLaMA-70B's down-projection (N = 8192, K = 28672 split
    over the ranks) at decode/prefill M = 1 ... 512 and at 8192; ``--quick`` two of them,
    ``--m`` chosen ones; the default ops do not include it."""
    rows = bench.rows_for(bench.parse_args(["--ops", "ar"]), 4)
    assert rows == [("gemm_ar", M, 8192, 28672) for M in (1, 16, 64, 128, 256, 512, 8192)]
    assert bench.rows_for(bench.parse_args(["--ops", "gemm_ar", "--quick"]), 2) == \
        [("gemm_ar", 16, 8192, 28672), ("gemm_ar", 8192, 8192, 28672)]
    assert bench.rows_for(bench.parse_args(["--ops", "ar", "--m", "32"]), 2) == \
        [("gemm_ar", 32, 8192, 28672)]
    assert not any(op == "gemm_ar" for op, *_ in bench.rows_for(bench.parse_args([]), 2))
    cols = bench.columns(["sm"])
    assert "torch symm one-shot" in cols and "torch symm two-shot" in cols


def test_gemm_ar_missing_symm_op_and_check_problems_are_reported():
    """A torch without a symmetric-memory all-reduce gets a column error naming the op (the
    row goes on); ``--check`` rows with NaN, a large error or ranks that differ are problems."""
    pytest.importorskip("torch")
    from syncopate.bench import rows as ab
    with pytest.raises(RuntimeError, match="symm_mem.no_such_all_reduce is absent"):
        ab.symm_op("no_such_all_reduce")
    r = {}
    ab.safe(r, "torch symm one-shot", lambda: ab.symm_op("no_such_all_reduce"))
    assert r["torch symm one-shot"] is None
    assert "no_such_all_reduce" in r["errors"]["torch symm one-shot"]
    good = {"M": 1, "N": 8, "K": 4, "finite": True, "rel_err_vs_nccl": 1e-3, "ranks_differ": 0}
    assert ab.check_problems([good]) == []
    bad = ab.check_problems([dict(good, finite=False), dict(good, rel_err_vs_nccl=0.5),
                             dict(good, ranks_differ=3)])
    assert len(bad) == 3 and "NaN" in bad[0] and "0.5" in bad[1] and "3 elements" in bad[2]


# ------------------------------------------------------------------ --ops ulysses

def test_ulysses_rows_cover_the_issue_shapes_and_quick_fits_loopback():
    """The issue's shapes (as ring_attn's), causal and not; the quick shape at every W keeps
    GQA, two KV heads per rank (the overlap column's two head groups), and all W ranks'
    attention tiles plus 4 comm programs each resident on one H200 at once (docs/loopback.md);
    W = 2 checks 1024 tokens."""
    import types

    from syncopate.bench import ulysses as ub
    from syncopate.ops.ulysses import check_plan
    full = ub.rows(types.SimpleNamespace(quick=False), 8)
    assert {(S, c) for S, _, _, _, c in full} == {(S, c) for S in (32768, 65536, 131072)
                                                  for c in (False, True)}
    assert all((Hq, Hkv, D) == (32, 8, 128) for _, Hq, Hkv, D, _ in full)
    for W in (1, 2, 3, 4, 8):
        quick = ub.rows(types.SimpleNamespace(quick=True), W)
        assert [c for *_, c in quick] == [False, True]
        S, Hq, Hkv, D, _ = quick[0]
        check_plan(1, Hq, Hkv, S, D, W)
        assert Hq > Hkv and ub.overlap_groups(Hkv, W) == 2
        assert -(-S // 128) * Hq + W * 4 <= 132 - W, (W, S, Hq)
    assert ub.quick_shape(2) == (1024, 8, 4, 128)


def _ulysses_baseline_body(rank, W, causal, groups):
    import torch

    from syncopate.bench import ulysses as ub
    from syncopate.runtime import collectives
    comm = type("Comm", (), dict(rank=rank, world_size=W, group=collectives.current_loopback(),
                                 device=torch.device("cpu")))()
    g = torch.Generator().manual_seed(0)   # the same whole sequence on every rank
    B, Hq, Hkv, S, D = 2, 4 * W, 2 * W, 16 * W, 32
    q, k, v = (torch.randn(B, h, S, D, generator=g).to(torch.bfloat16) for h in (Hq, Hkv, Hkv))
    rows = slice(rank * S // W, (rank + 1) * S // W)

    def attend(q, k, v, causal):  # fp32 SDPA: the same math as the reference, head by head
        return ub.sdpa(q.float(), k.float(), v.float(), causal).to(q.dtype)
    o = ub.ulysses_by_head_groups(q[:, :, rows].contiguous(), k[:, :, rows].contiguous(),
                                  v[:, :, rows].contiguous(), comm, causal, groups, attend)
    want = ub.reference_rows(q, k, v, causal, rows)
    full = ub.sdpa(q.float(), k.float(), v.float(), causal)[:, :, rows]
    return (float((o.float() - want.to(o.dtype).float()).abs().max()),
            float((want - full).abs().max()))


@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("groups", [1, 2])
def test_ulysses_baselines_move_every_head_group_in_loopback(W, causal, groups):
    """The deepspeed (one group) and overlap (one group per KV head) columns' all-to-alls, in
    CPU loopback threads with fp32 SDPA standing in for flash: rank r gets rows r of attention
    over the whole sequence; and the check's reference (this rank's query rows against the keys
    up to them, lower-right causal mask) equals SDPA over the whole sequence, rows r."""
    pytest.importorskip("torch")
    from syncopate.runtime.loopback import run_loopback
    res = run_loopback(_ulysses_baseline_body, W, causal, groups, timeout_s=60)
    for status, val in res:
        assert status == "ok", val
        err, ref_err = val
        assert err == 0.0 and ref_err < 1e-5, val


def test_ulysses_head_groups_must_divide_the_kv_heads():
    torch = pytest.importorskip("torch")
    from syncopate.bench import ulysses as ub
    comm = type("Comm", (), dict(rank=0, world_size=2, group=None,
                                 device=torch.device("cpu")))()
    q, k = torch.zeros(1, 8, 4, 16), torch.zeros(1, 2, 4, 16)
    with pytest.raises(ValueError, match="2 head groups need a multiple of 2 KV heads per rank"):
        ub.ulysses_by_head_groups(q, k, k, comm, False, groups=2)
    assert ub.overlap_groups(8, 8) == 1 and ub.overlap_groups(8, 2) == 4


def test_ulysses_check_problems_and_table():
    """A ``--check`` row fails on fused != serial, NaN, an error above the tolerance or a
    baseline that raised, not on a column that is not measured; the timed table derives
    ideal = max(attn, comm) and the ratios, and shows '-' for a missing column."""
    from syncopate.bench import ulysses as ub
    good = dict(op="ulysses", S=2048, Hq=4, Hkv=2, D=128, causal=False, W=2,
                bitwise_fused_vs_serial=True, max_diff_fused_vs_serial=0.0,
                finite_fused=True, rel_err_fused=3e-3, finite_deepspeed=True,
                rel_err_deepspeed=4e-3, errors={"overlap": ub._one_group_note(2, 2)})
    assert ub.check_problems([good]) == []
    assert "fused vs serial bitwise equal" in ub.summary(good)
    bad = ub.check_problems([
        dict(good, bitwise_fused_vs_serial=False, max_diff_fused_vs_serial=0.5),
        dict(good, finite_fused=False),
        dict(good, rel_err_deepspeed=0.2),
        dict(good, errors={"deepspeed": "RuntimeError: no flash"})])
    assert len(bad) == 4
    assert "must be bitwise equal" in bad[0] and "fused has NaN/Inf" in bad[1]
    assert "deepspeed relative error 0.2" in bad[2] and "deepspeed failed" in bad[3]
    r = ub.derive(dict(S=32768, Hq=32, Hkv=8, D=128, causal=True, W=4, fused=2.0, serial=3.0,
                       deepspeed=2.5, attn=1.5, comm=1.8, sdpa=1.7))
    assert r["ideal"] == 1.8 and r["serial/fused"] == 1.5 and r["fused TF/s"] > 0
    table = ub.format_rows([r]).splitlines()
    assert table[0].split(" | ")[2:10] == list(ub.COLUMNS)
    cells = table[1].split(" | ")
    assert cells[5] == "-" and cells[-1] == "1.11"   # overlap not measured; fused / ideal


def test_ulysses_loopback_is_refused_for_timing(capsys, monkeypatch):
    """``--ops ulysses --loopback 2`` without ``--check`` would time W ranks sharing one GPU:
    refused with what to do; ``--check`` needs a launcher."""
    from syncopate.bench.__main__ import main
    monkeypatch.delenv("SYNCOPATE_GPU_LOOPBACK", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    assert main(["--ops", "ulysses", "--loopback", "2"]) == 2
    err = capsys.readouterr().err
    assert "refuses loopback" in err and "add --check" in err
    assert main(["--check", "--ops", "ulysses"]) == 2
    assert "--loopback W" in capsys.readouterr().err
