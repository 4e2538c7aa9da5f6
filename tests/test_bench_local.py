"""The local-GEMM benchmark driver on CPU with a fake device backend: candidates are checked
before they are timed (poisoned output, NaN never passes), the budget stops the sweep, the JSON
is complete, and the watchdog ends a hung run."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from syncopate.kernels import bench_local  # noqa: E402
from syncopate.kernels.bench_local import candidate_configs, main  # noqa: E402


class FakeBackend:
    """CPU stand-in: correct results except for two deliberately broken config families."""

    device = "cpu"

    def __init__(self):
        self.timed = []

    def available(self):
        return None

    def info(self):
        return dict(device="fake", sms=132, capability=[9, 0], torch=torch.__version__,
                    triton="fake")

    def sync(self):
        pass

    def time_ms(self, fn, warmup_ms, rep_ms):
        fn()
        self.timed.append(fn)
        return float(getattr(fn, "ms", 1.0))

    def launcher(self, a, b, out, kernel, config):
        def launch():
            if config.WARP_SPECIALIZE:
                return  # never writes: output stays NaN
            c = torch.matmul(a.float(), b.float())
            if config.EPILOGUE_SUBTILE:
                c = c * 1.1  # 10% off
            out.copy_(c.to(out.dtype))
        # The 128x128 ptr config is "fastest"; cuBLAS times 1.0.
        launch.ms = 0.5 if (kernel == "ptr" and config.BLOCK_N == 128) else 0.8
        return launch, out


def test_every_candidate_is_valid_for_the_bench_shapes():
    for shape in bench_local.SHAPES:
        for kernel in ("tma", "ptr"):
            cands = candidate_configs(*shape, kernel)
            assert 4 <= len(cands) <= 8 and len(set(cands)) == len(cands)
            for c in cands:
                c.check(kernel)


def test_driver_checks_before_timing_and_writes_json(tmp_path):
    out = tmp_path / "r.json"
    fake = FakeBackend()
    rc = main(["--shapes", "64x48x32", "72x40x24", "--out", str(out)], backend=fake)
    assert rc == 1, "broken candidates must make the run fail"
    rep = json.loads(out.read_text())
    assert rep["complete"] and rep["device"] == "fake" and len(rep["results"]) == 2
    for res in rep["results"]:
        assert res["cublas"]["ms"] == 0.8 or res["cublas"]["ms"] == 1.0
        for kernel in ("tma", "ptr"):
            kr = res["kernels"][kernel]
            allc = [kr["default"]] + kr["candidates"]
            for c in allc:
                if c["config"]["WARP_SPECIALIZE"]:
                    assert not c["correct"] and "ms" not in c  # NaN never passes, never timed
                elif c["config"]["EPILOGUE_SUBTILE"]:
                    assert not c["correct"] and c["rel_err"] > 1e-2
                else:
                    assert c["correct"] and c["rel_err"] < 1e-2 and c["ms"] > 0
            assert kr["best"]["correct"]
        assert res["kernels"]["ptr"]["best"]["config"]["BLOCK_N"] == 128
    assert rep["failures"] > 0 and rep["sweep_skipped_for_budget"] == 0


def test_budget_stops_the_sweep_but_not_the_defaults(tmp_path):
    out = tmp_path / "r.json"
    rc = main(["--shapes", "64x48x32", "--budget-s", "0", "--kernels", "ptr", "--out", str(out)],
              backend=FakeBackend())
    rep = json.loads(out.read_text())
    assert rc == 0 and rep["complete"]
    kr = rep["results"][0]["kernels"]["ptr"]
    assert kr["default"]["correct"] and kr["candidates"] == []
    assert rep["sweep_skipped_for_budget"] == len(candidate_configs(64, 48, 32, "ptr")) - 1


def test_no_gpu_exits_2(tmp_path):
    class NoGpu(FakeBackend):
        def available(self):
            return "no CUDA device visible to torch"
    out = tmp_path / "r.json"
    assert main(["--out", str(out)], backend=NoGpu()) == 2
    assert json.loads(out.read_text())["error"].startswith("no CUDA")


def test_watchdog_aborts_a_hung_step(tmp_path):
    out = tmp_path / "partial.json"
    script = textwrap.dedent(f"""
        import json, time
        from syncopate.kernels.bench_local import Watchdog
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
