"""gemm_ar on the fake communicator (CPU): argument errors, the refused backends, the unfused
fallback's selection, prepared calls reused per layout with the whole C copied out, and the
cost model's choice of plan (tests/test_emulate_gemm_ar.py runs the fused kernels)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from runtime_fakes import fake_comm, patch_gemm_op  # noqa: E402

from test_ops_cpu import _op_fixture  # noqa: E402

bf = torch.bfloat16


def test_argument_errors_say_what_to_change():
    from syncopate.ops import gemm_ar
    c = fake_comm()
    with pytest.raises(LaunchError, match=r"b_shard.shape\[0\] must be 64"):
        gemm_ar(torch.empty(8, 64, dtype=bf), torch.empty(32, 8, dtype=bf), c)
    with pytest.raises(LaunchError, match="cast one of them"):
        gemm_ar(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=torch.float16), c)
    with pytest.raises(LaunchError, match="2-D torch.Tensor"):
        gemm_ar(torch.empty(8, 64, 2, dtype=bf), torch.empty(64, 8, dtype=bf), c)
    with pytest.raises(LaunchError, match="M and N must be >= 1"):
        gemm_ar(torch.empty(0, 64, dtype=bf), torch.empty(64, 8, dtype=bf), c)
    with pytest.raises(LaunchError, match=r"whole \[M, N\] = \(8, 8\)"):
        gemm_ar(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=bf), c,
                out=torch.empty(4, 8, dtype=bf))
    d = fake_comm()
    d.device = torch.device("cuda", 1)
    with pytest.raises(LaunchError, match="move it"):
        gemm_ar(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=bf), d)


def test_refused_backends_name_the_working_ones(monkeypatch):
    from syncopate.ops import gemm_ar
    monkeypatch.setenv("SYNCOPATE", "1")
    c = fake_comm()
    a, b = torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=bf)
    with pytest.raises(LaunchError, match="cannot use backend='ce'.*Use backend='sm'"):
        gemm_ar(a, b, c, backend="ce")
    with pytest.raises(LaunchError, match="'sm' or 'nvshmem'"):
        gemm_ar(a, b, c, backend="tcp")
    with pytest.raises(LaunchError, match="order='tree'"):
        gemm_ar(a, b, c, order="tree")
    with pytest.raises(LaunchError, match="order='tree'"):  # also with the plan fixed
        gemm_ar(a, b, c, order="tree", split=1, comm_programs=8)


def test_unfused_path_when_asked(monkeypatch):
    import importlib
    mod = importlib.import_module("syncopate.ops.gemm_ar")
    patch_gemm_op(monkeypatch, mod, reference=lambda *a, **k: "ref")
    a, b = torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=bf)
    monkeypatch.setenv("SYNCOPATE", "0")
    assert mod.gemm_ar(a, b, fake_comm()) == "ref"
    monkeypatch.setenv("SYNCOPATE", "1")
    assert mod.gemm_ar(a, b, fake_comm(), fused=False) == "ref"
    # one rank: nothing to reduce, the local GEMM alone (ops.driver.world_size_one)
    from syncopate.ops import driver
    monkeypatch.setattr(driver, "world_size_one", lambda spec, *a, **k: f"local {spec.name}")
    assert mod.gemm_ar(a, b, fake_comm(W=1)) == "local gemm_ar"


def test_prepared_call_swaps_in_a_and_copies_the_whole_result(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_ar")
    built = []
    patch_gemm_op(monkeypatch, mod, fused_kernel=lambda *a, **k: built.append(k) or fk)
    c = fake_comm()
    b = torch.randn(32, 48).to(bf)
    a1, a2 = torch.randn(64, 32).to(bf), torch.randn(64, 32).to(bf)
    C = mod.gemm_ar_buffer(c, 64, 48, bf)
    C.copy_(torch.randn(64, 48).to(bf))
    r1 = mod.gemm_ar(a1, b, c, split=2, comm_programs=8)
    r2 = mod.gemm_ar(a2, b, c, split=2, comm_programs=8)
    assert calls["gemm_call"] == 1 and len(built) == 1  # the second call took the fast path
    assert built[0]["mode"] == "push" and built[0]["backend"] == "sm"
    assert built[0]["split"] == 2 and built[0]["comm_programs"] == 8
    assert built[0]["order"] in ("swizzle", "ring")  # the cost model's, not fixed here
    from syncopate.kernels import kernel_fn
    a_idx = list(kernel_fn("tma").arg_names).index("a_ptr")
    c_idx = list(kernel_fn("tma").arg_names).index("c_ptr")
    (_, args1), (_, args2) = calls["launches"]
    assert args1[a_idx] is a1 and args2[a_idx] is a2 and args1[c_idx] is C
    assert torch.equal(r1, C) and torch.equal(r2, C) and r1 is not r2  # fresh copies of all C
    out = torch.empty(64, 48, dtype=bf)
    assert mod.gemm_ar(a1, b, c, split=2, comm_programs=8, out=out) is out


def test_plan_keeps_what_the_caller_fixed_and_fills_the_rest(monkeypatch):
    from syncopate.ops.gemm_ar import default_plan
    assert default_plan("sm", 512, 1024, 512, 2, bf, "ring", 4, 8) == ("ring", 4, 8)
    order, split, cp = default_plan("sm", 512, 1024, 512, 2, bf, order="ring")
    assert order == "ring" and split >= 1 and cp >= 1
    order, split, cp = default_plan("sm", 512, 1024, 512, 2, bf, comm_programs=4)
    assert cp == 4


def test_choice_between_orders_and_splits():
    """The cost model's picks at the issue's shapes (N = 8192, K = 28672 / W): swizzle on
    NVSwitch-like links (ring only adds hops there), one piece per owner when the output is
    small (decode: the GEMM is memory-bound and the chunks' alphas dominate), more pieces as
    M grows (the reduce-scatter starts while the GEMM still runs), and the fused estimate
    below the serial one at M = 8192."""
    from syncopate.ops.gemm_ar_plan import choose_plan, gemm_seconds
    for W in (2, 4):
        K = 28672 // W
        small, big = choose_plan(1, 8192, K, W), choose_plan(8192, 8192, K, W)
        assert small.order == big.order == "swizzle"
        assert small.split == 1 and big.split > small.split
        assert big.fused_s < big.serial_s
    # the decode GEMM is memory-bound: reading B, not the FLOP peak, sets its time
    assert gemm_seconds(1, 8192, 7168) == pytest.approx(2 * (7168 + 7168 * 8192 + 8192) / 4.0e12)
    # ties go to the first order, the fewer programs and the smaller split: at W = 2 the two
    # orders are the same chunks
    p = choose_plan(64, 256, 256, 2, programs=(8, 16))
    assert p.order == "swizzle"
    with pytest.raises(LaunchError, match="backend 'sm' or 'nvshmem'"):
        choose_plan(64, 256, 256, 2, backend="ce")


def test_no_split_finer_than_a_tile():
    """Pieces shorter than the GEMM's tile cannot leave earlier than a tile-high piece: with
    ``block_m`` such splits are not tried (split 1 always is), and the op passes its config's
    BLOCK_M."""
    from syncopate.ops.gemm_ar_plan import choose_plan
    free = choose_plan(512, 8192, 14336, 2)
    assert free.split > 2  # the model alone would cut 256 rows per owner finer than 128
    tiled = choose_plan(512, 8192, 14336, 2, block_m=128)
    assert tiled.split <= 2 and 256 // tiled.split >= 128
    assert choose_plan(64, 8192, 14336, 2, block_m=128).split == 1
    assert choose_plan(512, 8192, 14336, 2, block_m=128, split=4).split == 4  # the caller's


def test_the_op_plans_with_its_configs_tile_height(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_ar")
    patch_gemm_op(monkeypatch, mod, fused_kernel=lambda *a, **k: fk)
    import syncopate.ops.gemm_ar_plan as plan
    seen = []
    real = plan.choose_plan
    monkeypatch.setattr(plan, "choose_plan", lambda *a, **k: seen.append(k) or real(*a, **k))
    from syncopate.ops.driver import resolve_config
    a, b = torch.randn(512, 64).to(bf), torch.randn(64, 256).to(bf)
    mod.gemm_ar(a, b, fake_comm())
    assert seen and seen[-1]["block_m"] == resolve_config("tma", 512, 256, 64, bf).BLOCK_M
