"""``ag_weight_gemm`` (``a @ all_gather(w_shard)``) on the CPU: the unfused path in loopback
(W = 2 and 3, the weight sharded along N and along K) against ``a @ W``, world size 1, the
argument errors, the prepared call on the fake communicator (the shard staged into its block
of the symmetric weight, the activations swapped in per call), and the path the decision
names -- all through the generic driver from the op's registered spec.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.runtime import collectives  # noqa: E402
from syncopate.runtime.loopback import run_loopback  # noqa: E402
from runtime_fakes import fake_comm, patch_gemm_op  # noqa: E402
from test_ops_cpu import _fake_decision, _op_fixture  # noqa: E402


def _shard(w, dim, rank, W):
    """Rank ``rank``'s shard of the ``[K, N]`` weight along ``dim`` (0: K, 1: N)."""
    n = w.shape[dim] // W
    return w.narrow(dim, rank * n, n).clone()


def _unfused_rank(rank, W, dim, seed):
    from syncopate.ops import ag_weight_gemm
    bf = torch.bfloat16
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(8 * W, 4 * W, generator=g).to(bf)  # the same weight on every rank
    a = torch.randn(5, 8 * W, generator=torch.Generator().manual_seed(seed + 1 + rank)).to(bf)
    comm = SimpleNamespace(group=collectives.current_loopback(), world_size=W, rank=rank,
                           device=torch.device("cpu"), cache={}, generation=0)
    shard = _shard(w, dim, rank, W)
    out = ag_weight_gemm(a, shard, comm, kernel="cublas")
    ref = ag_weight_gemm(a, shard, comm, kernel="cublas", fused=False)
    return out, ref, a.float() @ w.float()


@pytest.mark.parametrize("dim", [1, 0], ids=["N-sharded", "K-sharded"])
@pytest.mark.parametrize("W", [2, 3])
def test_unfused_path_gathers_the_weight_along_its_sharded_dim(W, dim):
    for seed in (3, 4):  # fresh random inputs
        for status, value in run_loopback(_unfused_rank, W, dim, seed, timeout_s=120):
            assert status == "ok", value
            out, ref, want = value
            assert torch.equal(out, ref)  # the fused call's choice here: cuBLAS, unfused
            assert torch.allclose(out.float(), want, rtol=2e-2, atol=2e-2)


def test_world_size_one_is_the_local_gemm(monkeypatch):
    from syncopate.ops import ag_weight_gemm, driver
    ran = []
    monkeypatch.setattr(driver, "local_gemm", lambda k, a, b, out, cfg: ran.append(k) or
                        out.copy_(a @ b))
    monkeypatch.setattr(driver, "_W1_PLANS", {})
    a, w = torch.randn(6, 8).to(torch.bfloat16), torch.randn(8, 5).to(torch.bfloat16)
    out = ag_weight_gemm(a, w, fake_comm(W=1), kernel="tma", backend="sm")
    assert ran == ["tma"] and torch.equal(out, a @ w)


def test_argument_errors_say_what_to_change():
    from syncopate.ops import ag_weight_gemm
    c = fake_comm(W=2)
    a = torch.randn(4, 8)
    with pytest.raises(LaunchError, match=r"w_shard must be \[K, N/W\] = \[8, ...\].*\[K/W, N\]"):
        ag_weight_gemm(a, torch.randn(3, 6), c)
    with pytest.raises(LaunchError, match="cast one of them"):
        ag_weight_gemm(a, torch.randn(8, 6, dtype=torch.float64), c)
    with pytest.raises(LaunchError, match="2-D torch.Tensor"):
        ag_weight_gemm(a[0], torch.randn(8, 6), c)


@pytest.mark.parametrize("dim", [1, 0], ids=["N-sharded", "K-sharded"])
def test_prepared_call_stages_the_shard_and_swaps_in_the_activations(monkeypatch, dim):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.ag_weight_gemm")
    built = []
    patch_gemm_op(monkeypatch, mod, fused_kernel=lambda *a, **k: built.append((a, k)) or fk)
    c = fake_comm(W=2, rank=1)
    bf = torch.bfloat16
    K, N = 64, 96
    w = torch.randn(K, N).to(bf)
    a1, a2 = torch.randn(32, K).to(bf), torch.randn(32, K).to(bf)
    s1, s2 = _shard(w, dim, 1, 2), _shard(-w, dim, 1, 2)  # a new shard tensor, same layout
    out1 = mod.ag_weight_gemm(a1, s1, c, backend="sm", split=1, comm_programs=8)
    out2 = mod.ag_weight_gemm(a2, s2, c, backend="sm", split=1, comm_programs=8)
    assert calls["gemm_call"] == 1 and len(calls["launches"]) == 2 and len(built) == 1
    (_, _, shape, sdim, _), _ = built[0]
    assert tuple(shape) == (K, N) and sdim == dim  # the template over the whole weight
    Wb = mod.ag_weight_gemm_buffer(c, K, N, bf)
    assert torch.equal(Wb.narrow(dim, (K, N)[dim] // 2, (K, N)[dim] // 2), s2)  # rank 1's block
    from syncopate.kernels import kernel_fn
    names = list(kernel_fn("tma").arg_names)
    (_, args1), (_, args2) = calls["launches"]
    assert args1[names.index("a_ptr")] is a1 and args2[names.index("a_ptr")] is a2
    assert args1[names.index("b_ptr")] is Wb and args2[names.index("c_ptr")] is out2
    assert out1.shape == out2.shape == (32, N) and out1 is not out2


def test_the_op_takes_the_path_its_decision_names(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.ag_weight_gemm")
    built, refs = [], []
    patch_gemm_op(monkeypatch, mod, reference=lambda *a, **k: refs.append(k) or "ref",
                  fused_kernel=lambda *a, **k: built.append(k) or fk)
    c = fake_comm(W=2)
    bf = torch.bfloat16
    a, w = torch.randn(32, 64).to(bf), torch.randn(64, 48).to(bf)
    seen = _fake_decision(monkeypatch, "fused", backend="ce", reduce="comm")
    mod.ag_weight_gemm(a, w, c)
    assert built[-1]["backend"] == "ce" and built[-1]["comm_programs"] == 0
    assert (seen[-1]["m"], seen[-1]["n"], seen[-1]["k"]) == (32, 96, 64)  # the whole weight
    _fake_decision(monkeypatch, "unfused", local="cublas")
    assert mod.ag_weight_gemm(torch.randn(16, 64).to(bf), w, c) == "ref"
    assert refs[-1]["kernel"] == "cublas"
