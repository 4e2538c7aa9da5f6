"""The local-GEMM benchmark driver on CPU with a fake device backend: the table (every kernel
checked before it is timed, NaN never passes, geomean and worst shape), the tuning run (one
compile per distinct kernel, best and best-fusable config per shape, the budget, a table file
that installs), and the watchdog ending a hung run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from syncopate.kernels import gemm_table  # noqa: E402
from syncopate.bench.local import install_tuned, main  # noqa: E402
from syncopate.kernels.gemm_config import GemmConfig, heuristic_config  # noqa: E402
from syncopate.bench.tuning import candidate_configs  # noqa: E402


class FakeProblem:
    """CPU stand-in for one shape: a config's speed is a function of its fields; warp
    specialised configs "never write" (NaN), 256x128 tiles are 10% off."""

    def __init__(self, backend, M, N, K, dtype, seed):
        self.backend, self.M, self.N, self.K = backend, M, N, K
        self.dtype = dtype

    def cublas_ms(self, warmup_ms, rep_ms):
        self.cublas_err = 0.0
        return 1.0

    def run(self, config, warmup_ms, rep_ms, kernel="auto"):
        cfg = GemmConfig.of(config) if config is not None else \
            heuristic_config(self.M, self.N, self.K, self.dtype, fusable=False)
        self.backend.runs.append((self.M, self.N, self.K, self.dtype, cfg, kernel))
        rec = {"config": cfg.as_dict(), "plan": f"GemmPlan(fake, {cfg})"}
        if cfg.WARP_SPECIALIZE:
            rec.update(rel_err=float("nan"), correct=False)
        elif cfg.BLOCK_M == 256:
            rec.update(rel_err=0.1, correct=False)
        else:
            rec.update(rel_err=1e-3, correct=True,
                       ms=0.5 if cfg.SPLIT_K > 1 else 0.9 if cfg.EPILOGUE_SUBTILE else 1.1)
        return rec

    def e2e_ms(self, warmup_ms, rep_ms):
        return 1.2, 1.0

    def free(self):
        pass


class FakeBackend:
    device = "cpu"

    def __init__(self, fail_compile=()):
        self.runs, self.compiled, self.fail_compile = [], [], fail_compile

    def available(self):
        return None

    def info(self):
        return dict(device="fake H200", sms=132, capability=[9, 0], gpu="h200",
                    torch=torch.__version__, triton="fake")

    def problem(self, M, N, K, dtype, seed):
        return FakeProblem(self, M, N, K, dtype, seed)

    def precompile(self, tasks, *, workers, deadline):
        self.compiled.extend(tasks)
        return {t: ("CompilationError: fake" if t[2] in self.fail_compile else True)
                for t in tasks}


def test_table_checks_before_timing_and_summarises(tmp_path):
    out = tmp_path / "t.json"
    fake = FakeBackend()
    rc = main(["--shapes", "k-heavy", "4096x4096x4096", "--dtypes", "bf16", "fp16",
               "--table", _seed_table(tmp_path), "--out", str(out)], backend=fake)
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["complete"] and rep["mode"] == "table" and len(rep["results"]) == 4
    s = rep["summary"]
    assert s["worst"]["name"] == "square-4096" and s["worst"]["vs_cublas"] == pytest.approx(1.1)
    assert s["best"]["name"] == "k-heavy" and s["best"]["vs_cublas"] == pytest.approx(0.5)
    assert s["geomean_vs_cublas"] == pytest.approx((0.5 * 1.1) ** 0.5)
    assert s["geomean_e2e_vs_cublas"] == pytest.approx(1.2)
    # the default choice was asked for (config None), for every shape and dtype
    assert {(r[0], r[3], r[5]) for r in fake.runs} == {(1024, "bf16", "auto"),
                                                       (1024, "fp16", "auto"),
                                                       (4096, "bf16", "auto"),
                                                       (4096, "fp16", "auto")}


def _seed_table(tmp_path) -> str:
    p = tmp_path / "seed.json"
    gemm_table.write_table(p, [], gpu="h200", source="test")
    return str(p)


def test_table_reports_a_failing_kernel(tmp_path):
    class Broken(FakeBackend):
        def problem(self, *a):
            p = super().problem(*a)
            p.run = lambda config, w, r, kernel="auto": {"correct": False,
                                                         "rel_err": float("nan")}
            return p
    out = tmp_path / "t.json"
    assert main(["--shapes", "64x48x32", "--dtypes", "bf16", "--out", str(out)],
                backend=Broken()) == 1
    rep = json.loads(out.read_text())
    assert rep["summary"]["failures"] == 1 and "ms" not in rep["results"][0]["kernels"]["auto"]


def test_tune_keeps_best_and_best_fusable_and_installs(tmp_path, monkeypatch):
    monkeypatch.setenv("SYNCOPATE_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "tuned.json"
    fake = FakeBackend()
    shapes = ["k-heavy", "square-4096"]
    rc = main(["--tune", "--shapes", *shapes, "--dtypes", "bf16", "--out", str(out),
               "--save-cache"], backend=fake)
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["complete"] and rep["gpu"] == "h200" and len(rep["entries"]) == 2
    # one compile per distinct kernel: the two aligned shapes share their common configs
    assert len(fake.compiled) == len(set(fake.compiled))
    by = {e["name"]: e for e in rep["entries"]}
    kh = by["k-heavy"]
    assert GemmConfig.of(kh["config"]).SPLIT_K > 1 and kh["ms"] == 0.5
    assert GemmConfig.of(kh["fusable_config"]).fusable and kh["fusable_ms"] == 1.1
    sq = by["square-4096"]  # the fake makes the subtiled epilogue the fastest fusable config
    assert sq["config"] == sq["fusable_config"] and GemmConfig.of(sq["config"]).EPILOGUE_SUBTILE
    assert sq["ms"] == 0.9 and sq["vs_cublas"] == 0.9
    for e in rep["entries"]:
        recs = e["candidates"]
        assert len(recs) == len(candidate_configs(e["M"], e["N"], e["K"]))
        for r in recs:
            if r["config"]["WARP_SPECIALIZE"]:
                assert not r["correct"] and "ms" not in r  # NaN never passes, never timed
    # the written file is a table: the cache got it, and it installs
    cached = gemm_table.read_table(gemm_table.cache_path("h200"))
    assert len(cached["entries"]) == 2
    dest = tmp_path / "shipped.json"
    written, n = install_tuned(str(out), dest=dest)
    assert n == 2 and gemm_table.read_table(written)["source"] == "tuned"


def test_tune_skips_what_did_not_compile(tmp_path):
    bad = candidate_configs(4096, 4096, 4096)[1]
    fake = FakeBackend(fail_compile=(bad,))
    out = tmp_path / "tuned.json"
    assert main(["--tune", "--shapes", "square-4096", "--dtypes", "bf16", "--out", str(out)],
                backend=fake) == 0
    recs = json.loads(out.read_text())["entries"][0]["candidates"]
    failed = [r for r in recs if GemmConfig.of(r["config"]) == bad]
    assert failed and not failed[0]["correct"] and "fake" in failed[0]["error"]
    assert all(r[4] != bad for r in fake.runs), "a config that did not compile is not run"


def test_tune_budget_leaves_later_shapes_untuned(tmp_path):
    out = tmp_path / "tuned.json"
    rc = main(["--tune", "--shapes", "square-4096", "k-heavy", "--dtypes", "bf16",
               "--budget-s", "0.000001", "--out", str(out)], backend=FakeBackend())
    rep = json.loads(out.read_text())
    assert rc == 1 and len(rep["skipped_for_budget"]) == 2 and rep["entries"] == []


def test_no_gpu_exits_2(tmp_path):
    class NoGpu(FakeBackend):
        def available(self):
            return "no CUDA device visible to torch"
    out = tmp_path / "r.json"
    assert main(["--out", str(out)], backend=NoGpu()) == 2
    assert json.loads(out.read_text())["error"].startswith("no CUDA")


def test_bad_table_is_refused_before_the_run(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["--table", str(bad)], backend=FakeBackend()) == 2
    assert "no 'entries' list" in capsys.readouterr().err


def test_watchdog_aborts_a_hung_step(tmp_path):
    out = tmp_path / "partial.json"
    script = textwrap.dedent(f"""
        import json, time
        from syncopate.bench.local_gpu import Watchdog
        def dump(reason):
            json.dump({{"aborted": reason}}, open({str(out)!r}, "w"))
        dog = Watchdog(step_timeout_s=0.5, hard_timeout_s=30, on_abort=dump)
        dog.enter("hung kernel")
        time.sleep(20)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 3, res.stderr
    assert "hung kernel" in json.loads(out.read_text())["aborted"]


def test_precompile_pool_runs_tasks_in_spawned_workers():
    """The pool machinery of the GPU tuning run on a CPU: tasks are pickled to spawned workers
    and every one comes back -- here with the worker's error (no CUDA device), which the tuning
    records instead of timing the candidate."""
    import time

    from syncopate.bench.local_gpu import CudaBackend
    cfg = candidate_configs(256, 256, 256)[0]
    tasks = [((256, 256, 256), "bf16", cfg), ((1000, 3000, 1500), "fp16", cfg)]
    res = CudaBackend().precompile(tasks, workers=2, deadline=time.monotonic() + 120)
    assert set(res) == set(tasks)
    for r in res.values():
        assert isinstance(r, str) and ("CUDA" in r or "cuda" in r or "driver" in r), r


def test_a_shape_with_no_correct_candidate_keeps_the_table_valid(tmp_path):
    """A failed shape goes to "failed", so the file still loads as a table: the GPU script
    passes it to --table and the lead installs it."""
    class AllWrongForSmallM(FakeBackend):
        def problem(self, M, N, K, dtype, seed):
            p = super().problem(M, N, K, dtype, seed)
            if M <= 64:
                p.run = lambda config, w, r, kernel="auto": {"correct": False,
                                                             "rel_err": float("nan")}
            return p
    out = tmp_path / "tuned.json"
    rc = main(["--tune", "--shapes", "decode-m16", "square-4096", "--dtypes", "bf16",
               "--out", str(out)], backend=AllWrongForSmallM())
    assert rc == 1
    rep = json.loads(out.read_text())
    assert [e["name"] for e in rep["entries"]] == ["square-4096"]
    assert [e["name"] for e in rep["failed"]] == ["decode-m16"]
    assert len(gemm_table.read_table(out)["entries"]) == 1
    assert main(["--table", str(out), "--shapes", "square-4096", "--dtypes", "bf16",
                 "--workers", "0"], backend=FakeBackend()) == 0
    _, n = install_tuned(str(out), dest=tmp_path / "shipped.json")
    assert n == 1
