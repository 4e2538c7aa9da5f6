"""Issue 13 section 1 for every op: ``gemm_ar``, the FP8 GEMM ops, ring and Ulysses attention and
the MoE dispatch / combine choose between their fused variants and the unfused path by
:func:`syncopate.ops.choice.decide_shape` -- a pure function of the shape, dtype, world size,
GPU type and calibration file, the same on every rank; model only (with a margin) where the
file has no measurements of the op, calibrated where it has; at W = 1 the local kernel alone.
The ag/rs decisions of run 6 are tests/test_ops_choice.py's (unchanged)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from syncopate import calibration
from syncopate.errors import LaunchError
from syncopate.ops import REGISTRY, choice
from syncopate.ops.choice import Candidate, Decision, decide, decide_shape
from syncopate.ops.spec import Cand

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: a shape of each op the benchmark measures (GEMM ops: this rank's GEMM)
SHAPES = {
    "gemm_ar": (16, 8192, 14336),
    "ag_gemm_fp8": (8192, 7168, 4096),
    "gemm_rs_fp8": (8192, 4096, 7168),
    "ring_attention": (1, 32, 8, 32768, 128, 0),
    "ulysses_attention": (1, 32, 8, 32768, 128, 1),
    "moe_dispatch_gemm": (8, 640, 4096, 14336),
    "moe_gemm_combine": (8, 640, 14336, 4096),
}


@pytest.fixture(autouse=True)
def _fresh_caches():
    choice.clear_caches()
    yield
    choice.clear_caches()


# ------------------------------------------------------------------ every op decides

@pytest.mark.parametrize("op", sorted(SHAPES))
@pytest.mark.parametrize("W", [2, 4, 8])
def test_every_op_weighs_its_fused_variants_and_the_unfused_path(op, W):
    d = decide_shape(op, SHAPES[op], W)
    paths = {c.path for c in d.candidates if c.available}
    assert paths == {"fused", "unfused"}, d.table()
    assert {c.name.split()[1] for c in d.candidates if c.path == "fused"} == \
        set(REGISTRY[op].variants) - {"ce+epilogue"} | \
        ({"ce+epilogue"} if op == "gemm_rs_fp8" else set())
    # the shipped file has no measurements of these ops: model only, said so
    assert d.basis == "model only (not calibrated)" and not d.calibrated
    assert d.choice in d.candidates and d.choice.time_s is not None
    assert d.calibration == calibration.load("h200").digest


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_world_size_one_costs_what_the_best_local_kernel_costs(op):
    d = decide_shape(op, SHAPES[op], 1)
    assert {c.path for c in d.candidates} == {"local"}
    best = min(c.time_s for c in d.candidates)
    assert d.choice.path == "local" and d.choice.time_s == best


def test_gemm_ar_at_world_size_one_takes_cublas_where_the_table_says_it_is_faster():
    # run 6's per-rank 8192x7168x4096: cuBLAS 0.608 ms, our kernel 0.629 ms
    d = decide("gemm_ar", 8192, 7168, 4096, 1, "bf16", "h200")
    assert [c.local for c in d.candidates] == ["triton", "cublas"]
    assert d.choice.local == "cublas" and d.calibrated
    assert decide("gemm_ar", 8192, 7168, 4096, 1, "bf16", "h200",
                  cublas=False).choice.local == "triton"


def test_fused_true_and_false_restrict_the_candidates():
    for op, shape in SHAPES.items():
        assert {c.path for c in decide_shape(op, shape, 2, fused=True).candidates} == {"fused"}
        assert {c.path for c in decide_shape(op, shape, 2, fused=False).candidates} == \
            {"unfused"}


def test_without_a_calibration_file_every_op_keeps_its_fused_default():
    for op, shape in SHAPES.items():
        d = decide_shape(op, shape, 2, gpu="a100")
        assert d.choice.name == "fused sm" and d.basis == "uncalibrated default"
        assert "--calibrate" in d.note
        assert decide_shape(op, shape, 1, gpu=None).choice.name == "local triton"
        assert decide_shape(op, shape, 2, gpu=None, fused=False).choice.path == "unfused"


def test_bad_shapes_are_typed_errors_that_name_the_dims():
    with pytest.raises(LaunchError, match=r"\(batch, q_heads, kv_heads, seq, head_dim, causal\)"):
        decide_shape("ring_attention", (1, 2, 3), 2)
    with pytest.raises(LaunchError, match="causal must be 0 or 1"):
        decide_shape("ulysses_attention", (1, 32, 8, 4096, 128, 2), 2)
    with pytest.raises(LaunchError, match="experts must be >= 1"):
        decide_shape("moe_dispatch_gemm", (0, 64, 64, 64), 2)
    with pytest.raises(LaunchError, match="not a GEMM: use decide_shape"):
        decide("ring_attention", 1, 2, 3, 2)
    with pytest.raises(LaunchError, match="unknown op"):
        decide_shape("gemm_xx", (1, 2, 3), 2)


# ------------------------------------------------------------------ rank consistency

_CHILD = """
from syncopate.ops.choice import decide_shape
shapes = {shapes!r}
for op in sorted(shapes):
    for w in (1, 2, 8):
        d = decide_shape(op, shapes[op], w)
        print(op, w, d.calibration, d.basis, d.choice.name,
              [(c.name, c.time_s) for c in d.candidates])
"""


def test_every_op_decides_the_same_in_processes_with_different_rank_state():
    """Fresh interpreters that differ in what ranks differ in (RANK, LOCAL_RANK,
    CUDA_VISIBLE_DEVICES, the hash seed) print the same decisions, times included, bit for
    bit: no rank input, nothing measured, the same file bytes."""
    import inspect
    assert not any("rank" in p for p in inspect.signature(decide_shape).parameters)
    outs = []
    for rank in (0, 1):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                   CUDA_VISIBLE_DEVICES=str(rank), PYTHONHASHSEED=str(29 + rank),
                   SYNCOPATE_TIMEOUT_S=str(5 + rank))
        outs.append(subprocess.run([sys.executable, "-c", _CHILD.format(shapes=SHAPES)],
                                   env=env, capture_output=True, text=True, check=True,
                                   timeout=180).stdout)
    assert outs[0] == outs[1] and outs[0].count("\n") == 3 * len(SHAPES)


def test_the_ops_route_gives_every_rank_the_same_decision(monkeypatch):
    torch = pytest.importorskip("torch")
    from syncopate.ops import driver
    monkeypatch.setattr(driver, "gpu_of", lambda comm: "h200")
    got = []
    for rank in (0, 1):
        choice.clear_caches()
        comm = SimpleNamespace(world_size=2, rank=rank, device=torch.device("cpu"))
        got.append([driver.route(REGISTRY[op], comm, shape, torch.bfloat16, fused=None)
                    for op, shape in sorted(SHAPES.items())])
    assert got[0] == got[1]
    comm = SimpleNamespace(world_size=2, rank=0, device=torch.device("cpu"))
    ar = REGISTRY["gemm_ar"]
    assert driver.route(ar, comm, SHAPES["gemm_ar"], torch.bfloat16, fused=True) is None
    assert driver.route(ar, comm, SHAPES["gemm_ar"], torch.bfloat16, fused=None,
                        explicit=True) is None
    monkeypatch.setenv("SYNCOPATE", "0")
    assert driver.route(ar, comm, SHAPES["gemm_ar"], torch.bfloat16, fused=None) is None


# ------------------------------------------------------------------ the margin

def _two_specs(fused_s, unfused_s):
    def specs(spec, cal, s, W, dtype, cublas, blocked):
        return [Cand("fused sm", "sm", "fused", lambda s, W: (fused_s, "test"), backend="sm"),
                Cand("unfused (NCCL + triton)", "unfused:triton", "unfused",
                     lambda s, W: (unfused_s, "test"), local="triton")]
    return specs


@pytest.mark.parametrize("fused_s,unfused_s,want", [
    (1.02e-3, 1.00e-3, "fused"),    # 2% slower: within the margin, the fused default stays
    (1.03e-3, 1.00e-3, "fused"),    # exactly the margin: stays
    (1.031e-3, 1.00e-3, "unfused"),  # past it: the model's choice
    (0.99e-3, 1.00e-3, "fused"),
])
def test_a_model_only_decision_leaves_the_fused_path_only_past_the_margin(
        monkeypatch, fused_s, unfused_s, want):
    monkeypatch.setitem(REGISTRY, "ring_attention", dataclasses.replace(
        REGISTRY["ring_attention"], candidates=_two_specs(fused_s, unfused_s)))
    d = decide_shape("ring_attention", SHAPES["ring_attention"], 2)
    assert d.basis == "model only (not calibrated)" and d.choice.path == want, d.table()
    if want == "fused" and fused_s > unfused_s:
        assert "margin" in d.note


def _calibrated_copy(tmp_path, monkeypatch, ops_section):
    """The shipped h200 file plus an ``ops`` section, as the package's calibration dir."""
    with open(calibration.calibration_path("h200")) as f:
        data = json.load(f)
    data["ops"] = ops_section
    (tmp_path / "h200.json").write_text(json.dumps(data))
    monkeypatch.setattr(calibration, "calibration_dir", lambda: str(tmp_path))
    choice.clear_caches()


def test_a_calibrated_decision_takes_the_measured_faster_path_without_margin(
        tmp_path, monkeypatch):
    s = dict(zip(REGISTRY["ring_attention"].shape, SHAPES["ring_attention"]))
    _calibrated_copy(tmp_path, monkeypatch, {"ring_attention": {"2": {
        "sm": [{**s, "measured_s": 1.02e-3, "source": "synthetic"}],
        "unfused:triton": [{**s, "measured_s": 1.00e-3, "source": "synthetic"}]}}})
    d = decide_shape("ring_attention", SHAPES["ring_attention"], 2)
    assert d.calibrated and d.choice.path == "unfused", d.table()
    # at the measured shape the prediction is the measurement
    assert {c.name: round(c.device_s, 9) for c in d.candidates} == \
        {"fused sm": 1.02e-3, "unfused (NCCL + triton)": 1.00e-3}
    # the other causality is not interpolated from these: model only again
    other = decide_shape("ring_attention", SHAPES["ring_attention"][:5] + (1,), 2)
    assert not other.calibrated


def test_measurements_scale_the_model_between_measured_shapes(tmp_path, monkeypatch):
    """gemm_ar measured at M = 16 and 8192 (W = 2): at those shapes the prediction is the
    measurement; between them each candidate is its model times an interpolated ratio (so
    the M = 128 prediction lies between the model times the two measured ratios)."""
    from syncopate.calibration import load
    pts = {}
    for M, sm, ser in ((16, 90e-6, 60e-6), (8192, 3.0e-3, 3.2e-3)):
        shape = {"m": M, "n": 8192, "k": 14336}
        pts.setdefault("sm", []).append({**shape, "measured_s": sm, "source": "synthetic"})
        pts.setdefault("unfused:triton", []).append({**shape, "measured_s": ser,
                                                     "source": "synthetic"})
        pts.setdefault("unfused:cublas", []).append({**shape, "measured_s": ser * 1.01,
                                                     "source": "synthetic"})
    _calibrated_copy(tmp_path, monkeypatch, {"gemm_ar": {"2": pts}})
    d16 = decide("gemm_ar", 16, 8192, 14336, 2, "bf16", "h200")
    assert d16.calibrated and d16.choice.name == "unfused (NCCL + triton)"
    assert round(d16.choice.device_s, 9) == 60e-6
    d8k = decide("gemm_ar", 8192, 8192, 14336, 2, "bf16", "h200")
    assert d8k.choice.name == "fused sm" and round(d8k.choice.device_s, 9) == 3.0e-3
    cal = load("h200")
    mid = decide("gemm_ar", 128, 8192, 14336, 2, "bf16", "h200")
    sm = next(x for x in choice.gemm_cands(REGISTRY["gemm_ar"], cal,
                                           {"m": 128, "n": 8192, "k": 14336}, 2, "bf16", True,
                                           {}) if x.key == "sm")
    model = sm.model({"m": 128, "n": 8192, "k": 14336}, 2)[0]
    ratios = choice.measured_over_model("h200", "gemm_ar", "sm", 2, "bf16")[2]
    got = next(c for c in mid.candidates if c.name == "fused sm").device_s
    assert min(ratios) * model <= got <= max(ratios) * model
    assert "measured/model" in next(c for c in mid.candidates if c.name == "fused sm").why


def test_a_bad_ops_section_is_refused_with_the_field(tmp_path, monkeypatch):
    _calibrated_copy(tmp_path, monkeypatch, {"gemm_ar": {"2": {"sm": [{"m": 1}]}}})
    with pytest.raises(calibration.CalibrationError, match=r"ops\.gemm_ar\.2\.sm\[0\]"):
        calibration.load("h200")
    _calibrated_copy(tmp_path, monkeypatch, {"gemm_ar": {"2": {"sm": [
        {"m": 16, "n": 8192, "measured_s": 1e-4}]}}})
    with pytest.raises(calibration.CalibrationError, match=r"ops\.gemm_ar\.2\.sm\[0\].*k "
                                                           r"missing"):
        decide("gemm_ar", 16, 8192, 14336, 2, "bf16", "h200")


# ------------------------------------------------------------------ the fit of bench rows

def test_bench_rows_of_every_op_fit_into_the_ops_section_and_are_used(tmp_path, monkeypatch):
    """A run directory as ``--calibrate --from-results`` reads it: run 6's bench.json plus a
    gemm_ar row and ring/Ulysses/MoE tables (synthetic times) -> a file whose ``ops`` section
    names each row and column, that the parser accepts and the decisions use."""
    from syncopate.bench.calibrate import from_results
    run = tmp_path / "run"
    shutil.copytree(os.path.join(ROOT, "bench", "results", "2026-11-30-h200x2-run6"), run)
    bench = json.loads((run / "bench.json").read_text())
    bench["results"].append({"op": "gemm_ar", "M": 16, "N": 8192, "K": 28672, "K_local": 14336,
                             "comm": 0.030, "gemm": 0.070, "gemm cuBLAS": 0.065,
                             "serial triton": 0.105, "serial cuBLAS": 0.100,
                             "fused[sm] auto": 0.080})
    (run / "bench.json").write_text(json.dumps(bench))
    attn = dict(S=32768, Hq=32, Hkv=8, D=128, W=2, errors={})
    (run / "bench_ring_attn.json").write_text(json.dumps({"rows": [
        dict(op="ring_attn", causal=False, fused=20.0, serial=21.0, **attn)]}))
    (run / "bench_ulysses.json").write_text(json.dumps({"rows": [
        dict(op="ulysses", causal=True, fused=12.0, serial=10.0, **attn)]}))
    moe = dict(op="moe", shape="mixtral", E=8, k=2, H=4096, F=14336, T=4096, C=2560, W=2,
               errors={})
    (run / "bench_moe.json").write_text(json.dumps({"rows": [
        dict(routing="uniform", **{"dispatch fused": 3.0, "dispatch serial": 4.0,
                                   "combine fused": 3.5, "combine serial": 3.4}, **moe),
        dict(routing="hot", **{"dispatch fused": 9.0, "dispatch serial": 9.5}, **moe)]}))
    out = tmp_path / "cal"
    path = from_results(str(run), str(out))
    data = json.loads(open(path).read())
    ops = data["ops"]
    assert set(ops) == {"gemm_ar", "ring_attention", "ulysses_attention", "moe_dispatch_gemm",
                        "moe_gemm_combine"}
    assert ops["gemm_ar"]["2"]["sm"][0]["k"] == 14336
    assert "column 'fused[sm] auto'" in ops["gemm_ar"]["2"]["sm"][0]["source"]
    assert [p["measured_s"] for p in ops["moe_dispatch_gemm"]["2"]["sm"]] == [3.0e-3]  # uniform
    assert "all_reduce" in data["collectives"]  # gemm_ar's comm column
    assert "gemm_ar" not in data["fused"]
    monkeypatch.setattr(calibration, "calibration_dir", lambda: str(out))
    choice.clear_caches()
    u = decide_shape("ulysses_attention", (1, 32, 8, 32768, 128, 1), 2)
    assert u.calibrated and u.choice.path == "unfused"
    assert round(u.choice.device_s, 9) == 10e-3
    c = decide_shape("moe_gemm_combine", (8, 2560, 14336, 4096), 2)
    # measured: the fused candidate that ran (2 comm programs) predicts what was measured, and
    # the fastest prediction wins with no margin (the other counts scale the same ratio)
    two = next(x for x in c.candidates if x.comm_programs == 2)
    assert c.calibrated and round(two.device_s, 9) == 3.5e-3
    timed = [x for x in c.candidates if x.time_s is not None]
    assert c.choice == min(timed, key=lambda x: round(x.time_s, 9))


# ------------------------------------------------------------------ the ops' wiring

class _Fused(Exception):
    """The fused path was taken (its kernel builder, patched, raises this)."""


def _decision(op, path, backend="sm", reduce="comm"):
    c = Candidate(f"{path} test", path, local="triton" if path != "fused" else None,
                  backend=backend if path == "fused" else None, reduce=reduce,
                  device_s=1e-3)
    return Decision(op, 2, "bf16", "h200", "x", (c,), c, "", basis="calibrated")


#: the op module's fused-kernel builder and unfused reference, where not ``<op>_...``
_NAMES = {"ulysses_attention": ("ulysses_fused_kernel", "ulysses_attention_reference")}


def _patch(monkeypatch, mod, op, path, seen):
    def fake_decide(o, shape, W, dtype=None, gpu=None, **kw):
        seen.append((o, tuple(shape), W, kw.get("fused")))
        return _decision(o, path)

    def fused_kernel(*a, **k):
        raise _Fused()

    def reference(*a, **k):
        seen.append("reference")
        return ("REF", "REF") if op == "ring_attention" else "REF"
    fk, ref = _NAMES.get(op, (f"{op}_fused_kernel", f"{op}_reference"))
    monkeypatch.setattr(choice, "decide_shape", fake_decide)
    if mod.SPEC.gemm is not None:  # the generic driver's GEMM op: its spec's reference
        from syncopate.ops import driver
        monkeypatch.setattr(driver, "fused_kernel", fused_kernel)
        monkeypatch.setattr(mod, "SPEC", dataclasses.replace(mod.SPEC, gemm=dataclasses.replace(
            mod.SPEC.gemm, reference=reference)))
    else:
        monkeypatch.setattr(mod, fk, fused_kernel)
        monkeypatch.setattr(mod, ref, reference)
    monkeypatch.delenv("SYNCOPATE", raising=False)


def _calls(torch):
    """``op -> (module, call(**kw), the decision's expected shape)`` on CPU tensors, rank 0
    of 2 (what the op checks before it decides is host-side)."""
    from syncopate.ops import _fp8
    comm = SimpleNamespace(world_size=2, rank=0, device=torch.device("cpu"), group=None,
                           cache={}, colocated=1, generation=0,
                           empty=lambda shape, dt: torch.zeros(shape, dtype=dt))
    bf = torch.bfloat16
    a, b = torch.randn(64, 32).to(bf), torch.randn(32, 48).to(bf)
    q = torch.randn(1, 4, 128, 64).to(bf)
    kv = torch.randn(1, 2, 128, 64).to(bf)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 32, generator=g).to(bf)
    ids = torch.stack([torch.randperm(4, generator=g)[:2] for _ in range(8)])
    wts, w1 = torch.rand(8, 2, generator=g), torch.randn(2, 32, 16).to(bf)
    from syncopate.ops import MoEDispatch
    from syncopate.ops.moe_routing import pack_dispatch
    p = pack_dispatch(x, ids, 4, 2, 128)
    cnt = torch.cat([p.counts.reshape(-1)] * 2)
    routing = MoEDispatch(None, cnt.view(2, 2, 4)[:, 0, :2].contiguous(), p.slot, p.dropped,
                          wts, cnt)
    h, w2 = torch.randn(4, 128, 32).to(bf), torch.randn(2, 32, 16).to(bf)
    f8 = (torch.zeros(64, 48).to(torch.float8_e4m3fn),
          torch.zeros(32, 48).to(torch.float8_e4m3fn).t(), torch.ones(64, 1), torch.ones(1, 32))
    import importlib

    def m(name):
        return importlib.import_module(f"syncopate.ops.{name}")
    from syncopate import ops
    return comm, {
        "gemm_ar": (m("gemm_ar"), lambda **kw: ops.gemm_ar(a, b, comm, **kw), (64, 48, 32)),
        "ag_gemm_fp8": (m("ag_gemm_fp8"), lambda **kw: ops.ag_gemm_fp8(*f8, comm, **kw),
                        (128, 32, 48)),
        "gemm_rs_fp8": (m("gemm_rs_fp8"), lambda **kw: ops.gemm_rs_fp8(*f8, comm, **kw),
                        (64, 32, 48)),
        "ring_attention": (m("ring_attention"),
                           lambda **kw: ops.ring_attention(q, kv, kv, comm, **kw),
                           (1, 4, 2, 256, 64, 0)),
        "ulysses_attention": (m("ulysses"),
                              lambda **kw: ops.ulysses_attention(q, kv, kv, comm, **kw),
                              (1, 4, 2, 256, 64, 0)),
        "moe_dispatch_gemm": (m("moe_dispatch_gemm"),
                              lambda **kw: ops.moe_dispatch_gemm(x, ids, wts, w1, comm,
                                                                 capacity=128, **kw),
                              (4, 128, 32, 16)),
        "moe_gemm_combine": (m("moe_gemm_combine"),
                             lambda **kw: ops.moe_gemm_combine(h, w2, routing, comm, **kw),
                             (4, 128, 32, 16)),
    }, _fp8


def _fake_fp8_check(torch):
    def check_local(a, b, sa, sb, comm, kernel):
        return SimpleNamespace(M=a.shape[0], K=a.shape[1], N=b.shape[1], sb_cols=True)
    return check_local


@pytest.mark.parametrize("op", sorted(SHAPES))
def test_each_op_takes_the_path_its_decision_names(monkeypatch, op):
    """fused=None: the op asks the decision (with its own decision shape) and runs its unfused
    reference when told to, the fused kernel when told to; fused=True / an explicit fused
    argument / fused=False are the caller's and never ask."""
    torch = pytest.importorskip("torch")
    comm, calls, _fp8 = _calls(torch)
    monkeypatch.setattr(_fp8, "check_local", _fake_fp8_check(torch))
    mod, call, shape = calls[op]
    seen: list = []
    _patch(monkeypatch, mod, op, "unfused", seen)
    res = call()
    assert seen == [(op, shape, 2, None), "reference"], seen
    assert res in ("REF", ("REF", "REF"))
    seen.clear()
    monkeypatch.setattr(choice, "decide_shape",
                        lambda o, s, W, *a, **k: seen.append((o, tuple(s), W, k.get("fused")))
                        or _decision(o, "fused"))
    with pytest.raises(_Fused):
        call()
    assert seen == [(op, shape, 2, None)]
    seen.clear()
    with pytest.raises(_Fused):
        call(fused=True)
    explicit = {"gemm_rs_fp8": dict(backend="sm")}.get(op, dict(comm_programs=2))
    with pytest.raises(_Fused):
        call(**explicit)
    call(fused=False)
    # the caller's paths never ask which path; an FP8 or GEMM op called fused=True without a
    # backend asks which fused variant, a MoE op how many comm programs (fused=True: the fused
    # candidates only)
    assert [x for x in seen if x == "reference" or x[3] is not True] == ["reference"]
    assert all(x == "reference" or op.endswith("_fp8") or op.startswith("moe_")
               or REGISTRY[op].gemm is not None for x in seen)


def test_world_size_one_runs_the_local_kernel_alone_for_the_new_ops(monkeypatch):
    """gemm_ar at W = 1 goes through the local-GEMM choice (no all-reduce, no fused kernel);
    Ulysses at W = 1 is the local attention kernel alone."""
    torch = pytest.importorskip("torch")
    import importlib

    from syncopate.ops import driver
    from syncopate.runtime import collectives
    gemm_ar = importlib.import_module("syncopate.ops.gemm_ar")
    ulysses = importlib.import_module("syncopate.ops.ulysses")

    def boom(*a, **k):
        raise AssertionError("fused machinery or NCCL used at world size 1")
    for name in ("all_reduce", "all_to_all_single"):
        monkeypatch.setattr(collectives, name, boom)
    monkeypatch.setattr(gemm_ar, "gemm_ar_fused_kernel", boom)
    monkeypatch.setattr(ulysses, "ulysses_fused_kernel", boom)
    ran = []
    monkeypatch.setattr(driver, "local_gemm",
                        lambda kernel, a, b, out, config: ran.append(kernel) or
                        out.copy_(a.float() @ b.float()))
    monkeypatch.setattr(driver, "gpu_of", lambda comm: "h200")
    comm = SimpleNamespace(world_size=1, rank=0, device=torch.device("cpu"), cache={})
    a, b = torch.randn(64, 32).to(torch.bfloat16), torch.randn(32, 48).to(torch.bfloat16)
    for kw in ({}, {"kernel": "tma"}, {"backend": "sm", "split": 2}, {"fused": False}):
        gemm_ar.gemm_ar(a, b, comm, **kw)
    # the op's own choice (our kernel or cuBLAS, as the table says) unless the caller pinned our
    # kernel or asked for the reference; fused arguments do not matter with nothing to reduce
    best = decide("gemm_ar", 64, 48, 32, 1, "bf16", "h200").choice.local
    want = "tma" if best == "triton" else best
    assert ran == [want, "tma", want, "tma"]
    monkeypatch.setattr(ulysses, "_local_attention",
                        lambda q, k, v, causal, sm_scale, cfg, fusable=True:
                        ran.append("attention") or q)
    q = torch.randn(1, 4, 128, 64).to(torch.bfloat16)
    assert ulysses.ulysses_attention(q, q[:, :2], q[:, :2], comm) is q
    assert ran[-1] == "attention"


# ------------------------------------------------------------------ syncopate explain

@pytest.mark.parametrize("op,shape,extra", [
    ("gemm_ar", "16,8192,28672", []), ("ag_gemm_fp8", "8192,14336,4096", []),
    ("gemm_rs_fp8", "8192,4096,14336", []), ("ring_attention", "32768,32,8,128", ["--causal"]),
    ("ulysses_attention", "32768,32,8,128", ["--batch", "2"]),
    ("moe_dispatch_gemm", "8,640,4096,14336", []), ("moe_gemm_combine", "8,640,14336,4096", [])])
def test_explain_every_op_prints_candidates_basis_and_choice(capsys, op, shape, extra):
    from syncopate.cli import main
    assert main(["explain", op, "--shape", shape, "--world-size", "2", *extra]) == 0
    out = capsys.readouterr().out
    assert "basis: model only (not calibrated)" in out and "choice: " in out
    assert "fused sm" in out and "unfused (NCCL + triton)" in out and " ms" in out
    assert main(["explain", op, "--shape", shape, "--world-size", "1", *extra]) == 0
    assert "world size 1" in capsys.readouterr().out


@pytest.mark.parametrize("argv,err", [
    (["explain", "gemm_ar", "--shape", "16,8192,28671", "--world-size", "2"], "multiple of 2"),
    (["explain", "ring_attention", "--shape", "16,8192,28671", "--world-size", "2"],
     "wants --shape S,Hq,Hkv,D"),
    (["explain", "ulysses_attention", "--shape", "4096,32,6,128", "--world-size", "4"],
     "Hkv divisible by 4"),
    (["explain", "moe_dispatch_gemm", "--shape", "6,640,4096,14336", "--world-size", "4"],
     "E = 6 must be a multiple of 4"),
    (["explain", "moe_gemm_combine", "--shape", "8,640,14336", "--world-size", "2"],
     "wants --shape E,C,F,H")])
def test_explain_refuses_shapes_that_do_not_fit_the_op(capsys, argv, err):
    from syncopate.cli import main
    assert main(argv) == 1
    assert err in capsys.readouterr().err


def test_calibrate_measures_every_op_with_the_benchmarks_own_row_functions(monkeypatch):
    """``--calibrate --ops ...`` times each op's candidates with the functions the benchmark
    tables use (so a calibration and a benchmark run measure the same thing)."""
    from syncopate.bench import attention, calibrate, moe, rows, runs, ulysses
    from syncopate.bench.__main__ import row_fn
    assert row_fn("ag_gemm") is rows.bench_ag
    assert row_fn("gemm_rs") is rows.bench_rs
    assert row_fn("gemm_ar") is rows.bench_ar
    assert row_fn("ag_gemm_fp8") is rows.bench_ag_fp8
    assert row_fn("gemm_rs_fp8") is rows.bench_rs_fp8
    assert list(runs.TABLES.values()) == [attention, ulysses, moe]
    from syncopate.bench.__main__ import parse_args
    args = parse_args(["--calibrate", "--ops", "ag,rs,ar,ag_fp8,rs_fp8,ring_attn,ulysses,moe"])
    ran = []
    fake = SimpleNamespace(run=lambda comm, args, log, check_only, timer: ran.append(
        check_only) or [{"op": "x"}])
    monkeypatch.setattr(runs, "TABLES", dict.fromkeys(runs.TABLES, fake))
    monkeypatch.setattr(calibrate, "TABLES", runs.TABLES)
    got = calibrate._op_tables(None, None, args, False)
    assert ran == [False] * 3 and len(got) == 3


def test_the_never_slower_audit_reports_the_regret_of_each_measured_row(tmp_path):
    """scripts/choice_audit.py (run after a multi-GPU benchmark): the model-only choice of each
    measured row and how much slower it measured than the measured best."""
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from choice_audit import audit
    run = tmp_path / "run"
    run.mkdir()
    (run / "bench.json").write_text(json.dumps({"meta": {"world_size": 2}, "results": [
        {"op": "gemm_ar", "M": 8192, "N": 8192, "K": 28672, "serial triton": 3.0,
         "serial cuBLAS": 3.1, "fused[sm] auto": 3.3}]}))
    rows = audit(str(run))
    assert len(rows) == 1 and rows[0]["best"] == "unfused:triton"
    d = decide("gemm_ar", 8192, 8192, 14336, 2, "bf16", "h200")
    want = {"fused sm": 3.3, "unfused (NCCL + triton)": 3.0,
            "unfused (NCCL + cuBLAS)": 3.1}[d.choice.name] / 3.0 - 1
    assert rows[0]["choice"] == d.choice.name and abs(rows[0]["regret"] - want) < 1e-9
