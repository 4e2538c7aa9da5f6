"""The ops (ag_gemm, gemm_rs) on the fake communicator: fallback selection, argument errors,
the cost model's defaults, prepared calls reused per layout, and the choice between the sm
and the ce + epilogue variants of gemm_rs.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from runtime_fakes import fake_comm, patch_gemm_op  # noqa: E402


def test_ag_gemm_fallback_selection(monkeypatch):
    import importlib
    mod = importlib.import_module("syncopate.ops.ag_gemm")
    c = fake_comm()
    calls = []
    patch_gemm_op(monkeypatch, mod, reference=lambda *a, **k: calls.append("ref") or "ref",
                  fused_kernel=lambda *a, **k: calls.append(
                      ("fused", k["backend"], k["split"], k["comm_programs"]))
                  or (_ for _ in ()).throw(RuntimeError("stop")))
    a = torch.empty(32, 64, dtype=torch.bfloat16)
    b = torch.empty(64, 48, dtype=torch.bfloat16)
    monkeypatch.setenv("SYNCOPATE", "0")
    assert mod.ag_gemm(a, b, c) == "ref"
    monkeypatch.setenv("SYNCOPATE", "1")
    assert mod.ag_gemm(a, b, c, fused=False) == "ref"
    with pytest.raises(RuntimeError, match="stop"):
        mod.ag_gemm(a, b, c, backend="sm", split=4)
    assert calls[-1][:3] == ("fused", "sm", 4) and calls[-1][3] > 0  # cost model picks programs
    with pytest.raises(RuntimeError, match="stop"):
        mod.ag_gemm(a, b, c, backend="ce", comm_programs=8)
    assert calls[-1][1] == "ce" and calls[-1][3] == 0  # ce has no comm programs


def test_gemm_rs_fallback_selection(monkeypatch):
    import importlib
    mod = importlib.import_module("syncopate.ops.gemm_rs")
    c = fake_comm()
    patch_gemm_op(monkeypatch, mod, reference=lambda *a, **k: "ref")
    monkeypatch.setenv("SYNCOPATE", "0")
    a = torch.empty(64, 32, dtype=torch.bfloat16)
    b = torch.empty(32, 48, dtype=torch.bfloat16)
    assert mod.gemm_rs(a, b, c) == "ref"


def test_op_argument_errors():
    from syncopate.ops import ag_gemm, gemm_rs
    c = fake_comm()
    bf = torch.bfloat16
    with pytest.raises(LaunchError, match="b.shape\\[0\\] must be 64"):
        ag_gemm(torch.empty(8, 64, dtype=bf), torch.empty(32, 8, dtype=bf), c)
    with pytest.raises(LaunchError, match="cast one of them"):
        ag_gemm(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=torch.float16), c)
    with pytest.raises(LaunchError, match="multiple of the world size"):
        gemm_rs(torch.empty(7, 64, dtype=bf), torch.empty(64, 8, dtype=bf), c)
    d = fake_comm()
    d.device = torch.device("cuda", 1)
    with pytest.raises(LaunchError, match="move it"):
        ag_gemm(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=bf), d)


def test_choose_defaults_and_overrides():
    from syncopate.ops import driver
    assert driver.gemm_plan("ag", "sm", 8192, 4096, 4096, 2, "bf16", 4, 8) == (4, 8)
    s, cp = driver.gemm_plan("ag", "ce", 8192, 4096, 4096, 2, "bf16", None, None)
    assert cp == 0 and s >= 1
    s, cp = driver.gemm_plan("ag", "sm", 8192, 4096, 4096, 2, "bf16", None, None)
    assert cp > 0


def _op_fixture(monkeypatch, mod_name):
    """The op module with its GPU-only pieces replaced: gemm_call builds the argument list from
    the real kernel's parameter names, the FusedKernel records its launches."""
    import importlib

    from syncopate.kernels import kernel_fn
    from syncopate.ops import driver
    mod = importlib.import_module(mod_name)
    calls = {"gemm_call": 0, "launches": []}

    class FakeFK:
        _poisoned = None
        staged = 0

        def before_staging(self):
            FakeFK.staged += 1

        def __getitem__(self, grid):
            return lambda *args: calls["launches"].append((grid, list(args)))

        def launch(self, grid, args):  # the ops' prepared calls launch without the closure
            return self[grid](*args)

        def _launch_key(self, grid, args, kwargs):  # no fast path: the plan never binds
            return None

    fk = FakeFK()

    def gemm_call(kernel, a, b, c, cfg, *, num_programs=None):
        calls["gemm_call"] += 1
        fn = kernel_fn("tma")
        vals = {n: None for n in fn.arg_names}
        vals.update(a_ptr=a, b_ptr=b, c_ptr=c, M=a.shape[0], N=b.shape[1], K=a.shape[1])
        return driver.GemmCall(fn=fn, args=[vals[n] for n in fn.arg_names], grid=(7,), options={},
                               kernel="tma")
    monkeypatch.setattr(driver, "gemm_call", gemm_call)
    patch_gemm_op(monkeypatch, mod, fused_kernel=lambda *a, **k: fk)
    import syncopate.kernels as kmod
    monkeypatch.setattr(kmod, "num_sms", lambda device=None: 132)
    monkeypatch.setenv("SYNCOPATE", "1")
    return mod, calls, fk


def test_ag_gemm_prepares_a_call_once_per_layout(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.ag_gemm")
    c = fake_comm()
    bf = torch.bfloat16
    b = torch.randn(64, 48).to(bf)
    a1, a2 = torch.randn(32, 64).to(bf), torch.randn(32, 64).to(bf)
    out1 = mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8)
    out2 = mod.ag_gemm(a2, b, c, backend="sm", split=2, comm_programs=8)  # new A, same layout
    assert calls["gemm_call"] == 1 and len(calls["launches"]) == 2 and fk.staged == 2
    A = mod.ag_gemm_buffer(c, 32, 64, bf)
    assert torch.equal(A[:32], a2)  # rank 0's rows hold the latest shard
    (_, args1), (_, args2) = calls["launches"]
    c_idx = list(__import__("syncopate.kernels", fromlist=["kernel_fn"]).kernel_fn("tma").arg_names).index("c_ptr")
    assert args1[c_idx] is out1 and args2[c_idx] is out2 and out1 is not out2  # fresh outputs
    out = torch.empty(64, 48, dtype=bf)
    assert mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8, out=out) is out
    assert mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8, out=out) is out
    assert calls["gemm_call"] == 2  # a given out is part of the layout (checked once)
    mod.ag_gemm(a1, torch.randn(64, 48).to(bf), c, backend="sm", split=2, comm_programs=8)
    mod.ag_gemm(a1, b, c, backend="sm", split=4, comm_programs=8)
    assert calls["gemm_call"] == 4  # another weight, another split: prepared anew
    other = c.empty((4,), torch.float32)  # a new buffer cannot alias a registered one
    mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8)
    assert calls["gemm_call"] == 4
    c.release(other)  # the registry lost a buffer (its address may come back): prepared anew
    mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8)
    assert calls["gemm_call"] == 5
    with pytest.raises(LaunchError, match="2-D torch.Tensor"):
        mod.ag_gemm([1, 2], b, c)


def test_gemm_rs_prepared_call_swaps_in_a_and_copies_the_result(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_rs")
    c = fake_comm()
    bf = torch.bfloat16
    b = torch.randn(32, 48).to(bf)
    a1, a2 = torch.randn(64, 32).to(bf), torch.randn(64, 32).to(bf)
    C = mod.gemm_rs_buffer(c, 64, 48, bf)
    C.copy_(torch.randn(64, 48).to(bf))
    r1 = mod.gemm_rs(a1, b, c, backend="sm", split=4, comm_programs=16)
    r2 = mod.gemm_rs(a2, b, c, backend="sm", split=4, comm_programs=16)
    assert calls["gemm_call"] == 1
    a_idx = list(__import__("syncopate.kernels", fromlist=["kernel_fn"]).kernel_fn("tma").arg_names).index("a_ptr")
    assert calls["launches"][0][1][a_idx] is a1 and calls["launches"][1][1][a_idx] is a2
    assert torch.equal(r1, C[:32]) and torch.equal(r2, C[:32]) and r1 is not r2
    with pytest.raises(LaunchError, match=r"\[M/W, N\]"):
        mod.gemm_rs(a1, b, c, backend="sm", split=4, comm_programs=16,
                    out=torch.empty(64, 48, dtype=bf))


def test_gemm_rs_epilogue_refuses_orders_that_could_deadlock(monkeypatch):
    """reduce='epilogue' only where every program computes what it sends before what it owns:
    M/W whole BLOCK_M tiles filling whole GROUP_M groups; ce only. Refused before any launch."""
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_rs")
    from syncopate.ops.driver import resolve_config
    c = fake_comm()
    bf = torch.bfloat16
    b = torch.randn(32, 48).to(bf)
    with pytest.raises(LaunchError, match="needs backend='ce'"):
        mod.gemm_rs(torch.randn(2048, 32).to(bf), b, c, backend="sm", reduce="epilogue")
    with pytest.raises(LaunchError, match="M/W = 200"):
        mod.gemm_rs(torch.randn(400, 32).to(bf), b, c, backend="ce", reduce="epilogue")
    cfg = resolve_config("tma", 2048, 48, 32, bf)
    M = 2 * cfg.BLOCK_M * cfg.GROUP_M
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, backend="ce", reduce="epilogue", split=2)
    assert calls["gemm_call"] == 1 and len(calls["launches"]) == 1
    # two tiles per rank: the default config's GROUP_M is lowered to fill whole groups ...
    small = 2 * 2 * cfg.BLOCK_M
    mod.gemm_rs(torch.randn(small, 32).to(bf), b, c, backend="ce", reduce="epilogue", split=2)
    assert calls["gemm_call"] == 2
    # ... but an explicit config is the caller's: refused with what to change
    with pytest.raises(LaunchError, match="GROUP_M = 8"):
        mod.gemm_rs(torch.randn(small, 32).to(bf), b, c, backend="ce", reduce="epilogue",
                    config=dict(BLOCK_M=cfg.BLOCK_M, GROUP_M=8))
    with pytest.raises(LaunchError, match="choose 'comm' or 'epilogue'"):
        mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, backend="ce", reduce="sum")


def _fake_decision(monkeypatch, path, **kw):
    """Replace the op's decision (ops/choice.py) by one that takes ``path``; record its inputs."""
    from syncopate.ops import choice
    seen = []

    def decide(op, shape, W, dtype="bf16", gpu=None, *, cublas=True, fused=None,
               unavailable=()):
        m, n, k = shape[:3]
        seen.append(dict(op=op, m=m, n=n, k=k, W=W, cublas=cublas, fused=fused,
                         unavailable=dict(unavailable)))
        kw2 = dict(kw, local=kw.get("local") if cublas else "triton")  # cuBLAS only if allowed
        if f"{kw.get('backend')}+{kw.get('reduce')}" in dict(unavailable):  # as the real one
            kw2.update(backend="sm", reduce="comm")
        c = choice.Candidate(name="fake", path=path, **kw2)
        return choice.Decision(op, W, dtype, gpu, None, (c,), c)
    monkeypatch.setattr(choice, "decide_shape", decide)
    return seen


def test_gemm_rs_follows_the_decision(monkeypatch):
    """Left to itself the op runs what the decision chose -- a fused variant (with its plan),
    or the unfused path with our kernel or cuBLAS; the epilogue variant is offered to the
    decision only where its tiles fit; an explicit backend keeps reduce='comm' and asks no
    decision."""
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_rs")
    from syncopate.ops.driver import resolve_config
    built, refs = [], []
    patch_gemm_op(monkeypatch, mod, reference=lambda *a, **k: refs.append(k) or "ref",
                  fused_kernel=lambda *a, **k: built.append(k) or fk)
    c = fake_comm()
    bf = torch.bfloat16
    b = torch.randn(32, 48).to(bf)
    cfg = resolve_config("tma", 2048, 48, 32, bf)
    M = 2 * cfg.BLOCK_M * cfg.GROUP_M

    seen = _fake_decision(monkeypatch, "fused", backend="ce", reduce="epilogue")
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c)
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("ce", "epilogue")
    assert (built[-1]["split"], built[-1]["comm_programs"]) == (mod.EPILOGUE_SPLIT, 0)
    assert seen[-1]["unavailable"] == {} and seen[-1]["cublas"] and seen[-1]["fused"] is None
    assert (seen[-1]["m"], seen[-1]["n"], seen[-1]["k"], seen[-1]["W"]) == (M, 48, 32, 2)
    mod.gemm_rs(torch.randn(400, 32).to(bf), b, c, kernel="tma")  # M/W = 200: no whole tiles
    assert "ce+epilogue" in seen[-1]["unavailable"] and not seen[-1]["cublas"]

    _fake_decision(monkeypatch, "unfused", local="cublas")
    assert mod.gemm_rs(torch.randn(M + 256, 32).to(bf), b, c) == "ref"
    assert refs[-1]["kernel"] == "cublas"
    _fake_decision(monkeypatch, "unfused", local="triton")
    assert mod.gemm_rs(torch.randn(M + 512, 32).to(bf), b, c) == "ref"
    assert refs[-1]["kernel"] == "tma"

    seen = _fake_decision(monkeypatch, "unfused", local="cublas")
    n = len(built)
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, backend="ce")
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("ce", "comm") and not seen
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, reduce="epilogue")
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("ce", "epilogue") and len(built) == n + 2
    seen = _fake_decision(monkeypatch, "fused", backend="sm", reduce="comm")
    mod.gemm_rs(torch.randn(M + 768, 32).to(bf), b, c, fused=True)
    assert seen[-1]["fused"] is True and built[-1]["backend"] == "sm"
    assert built[-1]["comm_programs"] > 0  # the cost model's plan
    with pytest.raises(LaunchError, match="cannot be fused"):
        mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, kernel="cublas", backend="sm")


def test_ag_gemm_follows_the_decision(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.ag_gemm")
    built, refs = [], []
    patch_gemm_op(monkeypatch, mod, reference=lambda *a, **k: refs.append(k) or "ref",
                  fused_kernel=lambda *a, **k: built.append(k) or fk)
    c = fake_comm()
    bf = torch.bfloat16
    a, b = torch.randn(32, 64).to(bf), torch.randn(64, 48).to(bf)
    seen = _fake_decision(monkeypatch, "fused", backend="ce", reduce="comm")
    mod.ag_gemm(a, b, c)
    assert built[-1]["backend"] == "ce" and (seen[-1]["m"], seen[-1]["n"], seen[-1]["k"]) == \
        (64, 48, 64)
    _fake_decision(monkeypatch, "unfused", local="cublas")
    assert mod.ag_gemm(torch.randn(16, 64).to(bf), b, c) == "ref" and refs[-1]["kernel"] == "cublas"
    assert mod.ag_gemm(torch.randn(16, 64).to(bf), b, c, config=dict(BLOCK_M=64)) == "ref"
    assert refs[-1]["kernel"] == "tma"  # a config pins our kernel: cuBLAS not offered
    with pytest.raises(LaunchError, match="takes none"):
        mod.ag_gemm(a, b, c, kernel="cublas", config=dict(BLOCK_M=64))


def test_gemm_rs_default_by_gemm_length():
    """The fused variant the H200 calibration picks on the standard shapes (run 6): the
    epilogue variant at M = 8192 and 4096 and for the long M = 1024 GEMM; sm for M = 1024 x
    4096 x 14336 (a ~0.08 ms GEMM: the epilogue variant's ~0.28 ms of host time would show)."""
    import importlib

    from syncopate.ops.driver import resolve_config
    mod = importlib.import_module("syncopate.ops.gemm_rs")
    bf = torch.bfloat16
    for (M, N, K), want in (((8192, 4096, 14336), "ce"), ((8192, 8192, 28672), "ce"),
                            ((4096, 4096, 14336), "ce"), ((1024, 8192, 28672), "ce"),
                            ((1024, 4096, 14336), "sm")):
        Kl = K // 2
        cfg = resolve_config("tma", M, N, Kl, bf)
        be, red, cfg2 = mod.resolve_variant(M, N, Kl, 2, bf, cfg, False, gpu="h200")
        assert be == want and red == ("epilogue" if want == "ce" else "comm"), (M, N, K)
    # no calibration (another GPU type, or none): sm, as before calibration existed
    cfg = resolve_config("tma", 8192, 4096, 7168, bf)
    assert mod.resolve_variant(8192, 4096, 7168, 2, bf, cfg, False, gpu=None)[:2] == ("sm", "comm")
