"""The local GEMM's config choice on a CPU: the shipped defaults file, the user's tuning cache
and the nearest-bucket lookup (:mod:`syncopate.kernels.gemm_table`), installing a tuning run,
the pruned candidate space, typed errors for bad configs and tables, and -- under Triton's
interpreter (tests/gemm_interp_worker.py) -- the plans ``matmul`` runs: the TMA kernel on
ragged shapes, split-K with its deterministic reduction, and staged operands."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from interp_runner import run_interpreter_worker  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import gemm_table  # noqa: E402
from syncopate.bench.local_gpu import SHAPE_SETS  # noqa: E402
from syncopate.bench.tuning import candidate_configs, compile_key  # noqa: E402
from syncopate.kernels.gemm_config import GemmConfig, heuristic_config  # noqa: E402
from syncopate.kernels.gemm_table import default_config  # noqa: E402

WORKER = Path(__file__).with_name("gemm_interp_worker.py")
SPLIT = GemmConfig(128, 128, 64, 8, 8, 4, EPILOGUE_SUBTILE=True, SPLIT_K=2)
ODD = GemmConfig(64, 256, 64, 4, 4, 3)  # a config the heuristic never picks


@pytest.fixture(autouse=True)
def _fresh_tables(monkeypatch, tmp_path):
    """Each test sees only the tables it sets up: an empty cache dir, no override."""
    monkeypatch.setenv("SYNCOPATE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SYNCOPATE_GEMM_TABLE", raising=False)
    gemm_table.reload_tables()
    yield
    gemm_table.reload_tables()


def _entry(M, N, K, config, fusable=None, dtype="bf16", measured=True):
    return dict(dtype=dtype, M=M, N=N, K=K, config=config, fusable_config=fusable or config,
                measured=measured, ms=1.0 if measured else None)


def _table(path, entries, gpu="h200"):
    return gemm_table.write_table(path, entries, gpu=gpu, source="test")


# ------------------------------------------------------------------------------------------------
# The shipped defaults
# ------------------------------------------------------------------------------------------------


def test_shipped_h200_table_is_valid_and_says_what_it_is():
    path = gemm_table.shipped_path("h200")
    doc = gemm_table.read_table(path)
    assert doc["gpu"] == "h200" and doc["source"] in ("seed", "tuned") and doc["note"]
    shapes = {(e["dtype"], e["M"], e["N"], e["K"]) for e in doc["entries"]}
    for dt in ("bf16", "fp16"):
        for s in SHAPE_SETS["broad"].values():
            assert (dt, *s) in shapes, f"no shipped entry for {dt} {s}"
    for e in doc["entries"]:
        assert e["fusable_config"].fusable
        if not e.get("measured", True):
            # a seed entry is the heuristic's choice, with no measured numbers
            assert "SEED, NOT MEASURED" in doc["note"] or doc["source"] == "tuned"
            assert e.get("ms") is None and e.get("vs_cublas") is None
            assert e["config"] == heuristic_config(e["M"], e["N"], e["K"], e["dtype"], "tma",
                                                   fusable=False)
            assert e["fusable_config"] == heuristic_config(e["M"], e["N"], e["K"], e["dtype"],
                                                           "tma", fusable=True)
        else:
            assert e["ms"] > 0 and e["cublas_ms"] > 0


def test_shipped_table_is_package_data():
    import tomllib
    root = Path(__file__).resolve().parents[1]
    data = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "configs/*.json" in data["package-data"]["syncopate.kernels"]


def test_default_config_consults_the_shipped_file(monkeypatch, tmp_path):
    shipped = tmp_path / "shipped"
    _table(shipped / "h200.json", [_entry(4096, 4096, 4096, ODD)])
    monkeypatch.setattr(gemm_table, "SHIPPED_DIR", shipped)
    gemm_table.reload_tables()
    assert default_config(4096, 4096, 4096, "bf16", "tma") == ODD
    assert default_config(4096, 4096, 4096, "bf16", "tma", fusable=False) == ODD
    # nearest bucket: within MAX_DISTANCE (log2 units) of the entry
    assert default_config(6000, 4096, 2048, "bf16", "tma") == ODD
    # too far, another dtype, another GPU, the pointer kernel: the heuristic
    assert default_config(256, 256, 65536, "bf16", "tma") == heuristic_config(256, 256, 65536)
    assert default_config(4096, 4096, 4096, "fp16", "tma") == heuristic_config(4096, 4096, 4096)
    assert default_config(4096, 4096, 4096, "bf16", "tma", gpu="b200") == \
        heuristic_config(4096, 4096, 4096)
    assert default_config(4096, 4096, 4096, "bf16", "ptr") == \
        heuristic_config(4096, 4096, 4096, "bf16", "ptr")


def test_seed_entries_decide_their_own_shape_only(monkeypatch, tmp_path):
    _table(tmp_path / "t.json", [_entry(4096, 4096, 4096, ODD, measured=False)])
    monkeypatch.setenv("SYNCOPATE_GEMM_TABLE", str(tmp_path / "t.json"))
    gemm_table.reload_tables()
    assert default_config(4096, 4096, 4096) == ODD
    assert default_config(4096, 4096, 4000) == heuristic_config(4096, 4096, 4000)


def test_fusable_choice_never_splits_or_specialises(monkeypatch, tmp_path):
    ws = GemmConfig(128, 256, 64, 8, 4, 3, WARP_SPECIALIZE=True, FLATTEN=False)
    _table(tmp_path / "t.json", [_entry(1024, 1024, 32768, SPLIT, ODD),
                                 _entry(8192, 8192, 8192, ws, ODD)])
    monkeypatch.setenv("SYNCOPATE_GEMM_TABLE", str(tmp_path / "t.json"))
    gemm_table.reload_tables()
    assert default_config(1024, 1024, 32768, fusable=False) == SPLIT
    assert default_config(8192, 8192, 8192, fusable=False) == ws
    for s in [(1024, 1024, 32768), (8192, 8192, 8192)]:
        assert default_config(*s) == ODD and default_config(*s).fusable
    # the fused ops' default goes through the same table, fusable
    from syncopate.ops.driver import _default_config, resolve_config
    _default_config.cache_clear()
    assert _default_config("tma", 1024, 1024, 32768, "bf16") == ODD
    with pytest.raises(LaunchError, match="fused ops cannot run split-K"):
        resolve_config("tma", 1024, 1024, 32768, "bf16", SPLIT)
    with pytest.raises(LaunchError, match="cannot run a warp-specialised"):
        resolve_config("tma", 8192, 8192, 8192, "bf16", ws)
    _default_config.cache_clear()


def test_split_k_from_a_neighbour_is_resplit_for_the_query(monkeypatch, tmp_path):
    _table(tmp_path / "t.json", [_entry(1024, 1024, 32768, SPLIT, ODD)])
    monkeypatch.setenv("SYNCOPATE_GEMM_TABLE", str(tmp_path / "t.json"))
    gemm_table.reload_tables()
    # 512 x 1024: 32 tiles of 128x128 -> 4 splits fill 128 of 132 SMs
    assert default_config(512, 1024, 32768, fusable=False).SPLIT_K == 4
    # 2048 x 2048: 256 tiles fill the GPU: no split; the entry's measured fusable config
    assert default_config(2048, 2048, 32768, fusable=False) == ODD


def test_table_off_means_heuristic(monkeypatch, tmp_path):
    monkeypatch.setenv("SYNCOPATE_GEMM_TABLE", "off")
    gemm_table.reload_tables()
    for s in SHAPE_SETS["all"].values():
        assert default_config(*s, fusable=False) == heuristic_config(*s, fusable=False)


# ------------------------------------------------------------------------------------------------
# The user's cache, installing a tuning run
# ------------------------------------------------------------------------------------------------


def test_user_cache_is_written_read_and_wins_over_shipped(monkeypatch, tmp_path):
    shipped = tmp_path / "shipped"
    other = GemmConfig(128, 128, 64, 8, 8, 4)
    _table(shipped / "h200.json", [_entry(4096, 4096, 4096, other)])
    monkeypatch.setattr(gemm_table, "SHIPPED_DIR", shipped)
    path = gemm_table.cache_path("h200")
    assert path == tmp_path / "cache" / "gemm" / "h200.json"
    assert not path.exists()
    gemm_table.reload_tables()
    assert default_config(4096, 4096, 4096) == other
    _table(path, [_entry(4096, 4096, 4096, ODD)])  # write_table forgets the loaded tables
    assert json.loads(path.read_text())["entries"][0]["config"]["BLOCK_M"] == 64
    assert default_config(4096, 4096, 4096) == ODD
    merged = gemm_table.merge_entries(gemm_table.read_table(path)["entries"],
                                      [_entry(4096, 4096, 4096, other), _entry(64, 64, 64, ODD)])
    assert len(merged) == 2 and merged[0]["config"] == other


def test_cache_dir_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("SYNCOPATE_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert gemm_table.cache_dir() == tmp_path / "xdg" / "syncopate"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert gemm_table.cache_dir() == Path(os.path.expanduser("~")) / ".cache" / "syncopate"


def test_install_tuned_merges_measured_entries(tmp_path):
    from syncopate.bench.local import install_tuned, main
    dest = tmp_path / "h200.json"
    _table(dest, [_entry(16, 8192, 8192, ODD, measured=False),
                  _entry(4096, 4096, 4096, ODD, measured=False)])
    tuned = tmp_path / "tuned.json"
    e = _entry(4096, 4096, 4096, SPLIT, GemmConfig(128, 128, 64, 8, 8, 4))
    e.update(candidates=[{"config": SPLIT.as_dict(), "ms": 1.0}], cublas_ms=1.1)
    failed = dict(dtype="bf16", M=77, N=8192, K=4096, candidates=[], error="no correct")
    tuned.write_text(json.dumps({"format": 1, "gpu": "h200", "device": {"device": "NVIDIA H200"},
                                 "entries": [gemm_table.entry_json(e)] + [failed]}))
    with pytest.raises(LaunchError, match="bad entry"):  # a failed shape has no config
        install_tuned(str(tuned), dest=dest)
    doc = json.loads(tuned.read_text())
    doc["entries"] = doc["entries"][:1]
    tuned.write_text(json.dumps(doc))
    written, n = install_tuned(str(tuned), dest=dest)
    assert n == 1
    out = gemm_table.read_table(written)
    by = {(x["M"], x["N"], x["K"]): x for x in out["entries"]}
    assert by[(4096, 4096, 4096)]["config"] == SPLIT and by[(4096, 4096, 4096)]["measured"]
    assert "candidates" not in by[(4096, 4096, 4096)]
    assert not by[(16, 8192, 8192)]["measured"]
    assert out["source"] == "tuned" and "1 seed entries" in out["note"]
    assert main(["--install-tuned", str(tmp_path / "missing.json")]) == 2


@pytest.mark.parametrize("text,match", [
    ("not json", "is not JSON"),
    ('{"format": 1}', "no 'entries' list"),
    ('{"format": 9, "entries": []}', "format 9"),
    ('{"entries": [{"dtype": "bf16", "M": 1}]}', "bad entry"),
    ('{"entries": [{"dtype": "fp32", "M": 8, "N": 8, "K": 8, "config": {}}]}', "bad entry"),
    ('{"entries": [{"dtype": "bf16", "M": 8, "N": 8, "K": 8, "config": {"num_stages": 9}}]}',
     "shared memory"),
    ('{"entries": [{"dtype": "bf16", "M": 8, "N": 8, "K": 8, "config": {}, '
     '"fusable_config": {"SPLIT_K": 2}}]}', "fused ops cannot run split-K"),
    ('{"entries": [{"dtype": "bf16", "M": 8, "N": 8, "K": 8, "config": {"BLOCK_SIZE_M": 8}}]}',
     "unknown GEMM config keys"),
])
def test_bad_table_is_a_typed_error_naming_the_file(tmp_path, monkeypatch, text, match):
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    with pytest.raises(LaunchError, match=match) as err:
        gemm_table.read_table(bad)
    assert str(bad) in str(err.value)
    monkeypatch.setenv("SYNCOPATE_GEMM_TABLE", str(bad))
    gemm_table.reload_tables()
    with pytest.raises(LaunchError):
        default_config(8, 8, 8)


def test_gpu_keys():
    assert gemm_table.gpu_key("NVIDIA H200") == "h200"
    assert gemm_table.gpu_key("NVIDIA H100 80GB HBM3") == "h100"
    assert gemm_table.gpu_key("NVIDIA A100-SXM4-80GB") == "a100-sxm4-80gb"


# ------------------------------------------------------------------------------------------------
# Configs: typed errors, candidates
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg,kernel,match", [
    (GemmConfig(SPLIT_K=0), "tma", "SPLIT_K=0 must be an integer from 1 to 16"),
    (GemmConfig(SPLIT_K=32), "tma", "from 1 to 16"),
    (GemmConfig(SPLIT_K=2, num_stages=2), "ptr", "use kernel='tma' or 'auto'"),
    (GemmConfig(SPLIT_K=2, num_warps=4, WARP_SPECIALIZE=True, FLATTEN=False, num_stages=2),
     "tma", "not warp-specialised"),
    (GemmConfig(SPLIT_K=2, num_stages=3), "tma", "shared memory"),
])
def test_bad_split_k_configs_say_what_to_change(cfg, kernel, match):
    with pytest.raises(LaunchError, match=match):
        cfg.check(kernel)


def test_split_configs_fit_and_are_marked():
    assert SPLIT.check("tma") and not SPLIT.fusable
    with pytest.raises(LaunchError, match="fused ops cannot run split-K"):
        SPLIT.check("tma", fusable=True)
    # the fp32 staging buffer counts double
    assert SPLIT.smem_bytes("tma") - SPLIT.replace(SPLIT_K=1).smem_bytes("tma") == 128 * 64 * 2


def test_heuristic_splits_few_tile_problems_only_for_the_local_matmul():
    kh = SHAPE_SETS["broad"]["k-heavy"]
    assert heuristic_config(*kh, fusable=False).SPLIT_K == 2
    assert heuristic_config(*kh).SPLIT_K == 1
    assert heuristic_config(*SHAPE_SETS["broad"]["square-8192"], fusable=False).SPLIT_K == 1
    dec = heuristic_config(*SHAPE_SETS["broad"]["decode-m16"], fusable=False)
    assert (dec.BLOCK_M, dec.num_warps) == (64, 4)


@pytest.mark.parametrize("name", sorted(SHAPE_SETS["all"]))
def test_candidates_are_few_valid_and_include_a_fusable_one(name):
    s = SHAPE_SETS["all"][name]
    for dt in ("bf16", "fp16"):
        cands = candidate_configs(*s, dt)
        assert 3 <= len(cands) <= 8 and len(set(cands)) == len(cands)
        assert cands[0] == heuristic_config(*s, dt)
        assert any(c.fusable for c in cands)
        for c in cands:
            c.check("tma")


def test_compile_key_groups_what_triton_compiles_once():
    cfg = GemmConfig()
    assert compile_key(4096, 4096, 4096, "bf16", cfg) == compile_key(8192, 8192, 8192, "bf16",
                                                                      cfg)
    assert compile_key(4096, 4096, 4096, "bf16", cfg) != compile_key(4096, 4096, 4096, "fp16",
                                                                      cfg)
    ragged = compile_key(1000, 3000, 1500, "bf16", cfg)
    assert ragged != compile_key(4096, 4096, 4096, "bf16", cfg)
    assert ragged[3:6] == (True, False, False), "K = 1500 rows are 3000 bytes: A is staged"
    assert compile_key(1024, 1024, 32768, "bf16", SPLIT)[1] == "splitk"


# ------------------------------------------------------------------------------------------------
# Plans under Triton's interpreter
# ------------------------------------------------------------------------------------------------

_SMALL = dict(BLOCK_M=64, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_warps=4, num_stages=2)
INTERP_CASES = [
    dict(name="tma-ragged-bf16", M=70, N=40, K=48, dtype="bf16", config=_SMALL, kind="tma",
         staged=[False, False, False]),
    dict(name="tma-ragged-fp16-m1", M=1, N=24, K=40, dtype="fp16", config=_SMALL, kind="tma",
         staged=[False, False, False]),
    dict(name="splitk-3-uneven", M=70, N=40, K=200, dtype="fp16", kind="splitk",
         config=dict(_SMALL, SPLIT_K=3, EPILOGUE_SUBTILE=True), staged=[False, False, False]),
    dict(name="splitk-empty-split", M=33, N=24, K=40, dtype="bf16", kind="splitk",
         config=dict(_SMALL, SPLIT_K=4), staged=[False, False, False]),
    dict(name="splitk-staged-a-col-out", M=40, N=48, K=45, dtype="bf16", kind="splitk", out="col",
         config=dict(_SMALL, SPLIT_K=2), staged=[True, False, False]),
    dict(name="staged-odd-k", M=33, N=40, K=45, dtype="bf16", config=_SMALL, kind="tma",
         staged=[True, False, False]),
    dict(name="staged-odd-n-col-a", M=33, N=37, K=40, dtype="fp16", a="col", out="col",
         config=_SMALL, kind="tma", staged=[True, True, True]),
    dict(name="staged-offset-b-wide-a", M=50, N=24, K=40, dtype="bf16", a="wide", b="offset",
         config=_SMALL, kind="tma", staged=[True, True, False]),
    dict(name="ptr-odd", M=33, N=37, K=45, dtype="bf16", a="col", kernel="ptr",
         config=dict(_SMALL, BLOCK_M=32), kind="ptr", staged=[False, False, False]),
]


@pytest.fixture(scope="module")
def interp_results(tmp_path_factory):
    cases = [dict(c, seed=i) for i, c in enumerate(INTERP_CASES)]
    return run_interpreter_worker(WORKER, cases, tmp_path_factory.mktemp("gemm_interp"))


@pytest.mark.parametrize("case", INTERP_CASES, ids=lambda c: c["name"])
def test_plans_are_correct_under_the_interpreter(interp_results, case):
    r = interp_results[case["name"]]
    assert "error" not in r, r.get("error")
    assert r["kind"] == case["kind"] and r["staged"] == case["staged"]
    assert r["nan"] == 0, "a tile of the output was never written"
    assert r["err"] < 1e-2
    assert r["bitwise_repeat"], "the result must not depend on the run"
