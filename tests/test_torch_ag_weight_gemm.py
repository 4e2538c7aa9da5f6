"""``torch.ops.syncopate.ag_weight_gemm`` on the CPU (registered from the op's spec, no code of
its own in torch_ops): forward and autograd of an FSDP-style linear against the unsharded
reference on W = 2 and 3 loopback ranks -- every rank its own batch rows, the weight sharded
along N or along K -- so ``dA = dC @ W^T`` (the op again, on the transposed shard) and
``dW_shard = reduce_scatter(A^T @ dC)`` (``gemm_rs``) are checked with real collectives; then
opcheck / gradcheck, fake shapes and the typed errors.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import syncopate.torch_ops as sto  # noqa: E402
from syncopate.runtime.loopback import run_loopback  # noqa: E402
from syncopate.torch_ops import TorchOpError  # noqa: E402


def _ranks(fn, W, *args):
    results = run_loopback(fn, W, *args, timeout_s=300)
    bad = [v for st, v in results if st != "ok"]
    assert not bad, "\n".join(bad)
    return [v for _, v in results]


def _data(W, seed):
    g = torch.Generator().manual_seed(seed)
    M, K, N = 3 * W, 4 * W, 5 * W
    return {n: torch.randn(*s, generator=g) for n, s in (("x", (M, K)), ("w", (K, N)),
                                                         ("gy", (M, N)))}


def _fsdp_rank(rank, W, d, dim):
    """This rank's batch rows through the sharded linear, and their gradients."""
    g = sto.group_name(None)
    rows = slice(rank * d["x"].shape[0] // W, (rank + 1) * d["x"].shape[0] // W)
    n = d["w"].shape[dim] // W
    x = d["x"][rows].clone().requires_grad_()
    w_shard = d["w"].narrow(dim, rank * n, n).clone().requires_grad_()
    y = sto.ag_weight_gemm(x, w_shard, g)
    (y * d["gy"][rows]).sum().backward()
    return rows, y.detach(), x.grad, w_shard.grad


@pytest.mark.parametrize("dim", [1, 0], ids=["N-sharded", "K-sharded"])
@pytest.mark.parametrize("W", [2, 3])
def test_forward_and_backward_match_the_unsharded_linear(W, dim):
    for seed in (0, 1):  # fresh random inputs
        d = _data(W, seed)
        x, w = d["x"].clone().requires_grad_(), d["w"].clone().requires_grad_()
        y = x @ w
        (y * d["gy"]).sum().backward()
        for rank, (rows, out, dx, dw) in enumerate(_ranks(_fsdp_rank, W, d, dim)):
            n = w.shape[dim] // W
            torch.testing.assert_close(out, y.detach()[rows], rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(dx, x.grad[rows], rtol=1e-5, atol=1e-5)
            # the weight's gradient summed over every rank's batch, this rank's shard of it
            torch.testing.assert_close(dw, w.grad.narrow(dim, rank * n, n), rtol=1e-5,
                                       atol=1e-5)


def _opcheck_rank(rank, W):
    g = sto.group_name(None)
    gen = torch.Generator().manual_seed(5)
    for dtype in (torch.float32, torch.float64):
        a = torch.randn(4, 6, generator=gen, dtype=dtype, requires_grad=True)
        w = torch.randn(6, 5, generator=gen, dtype=dtype, requires_grad=True)
        torch.library.opcheck(torch.ops.syncopate.ag_weight_gemm.default, (a, w, g))
        torch.autograd.gradcheck(lambda a, w: sto.ag_weight_gemm(a, w, g),
                                 (a.double(), w.double()), eps=1e-3, atol=1e-3, rtol=1e-3)
    return True


def test_opcheck_and_gradcheck():
    """One rank, as tests/test_torch_ops.py: opcheck traces with make_fx, whose patcher is
    process-global."""
    assert _ranks(_opcheck_rank, 1) == [True]


def _fake_rank(rank, W):
    from torch._subclasses.fake_tensor import FakeTensorMode
    g = sto.group_name(None)
    with FakeTensorMode():
        a = torch.empty(3, 8, dtype=torch.bfloat16)
        by_n = torch.ops.syncopate.ag_weight_gemm(a, torch.empty(8, 5, dtype=torch.bfloat16), g)
        by_k = torch.ops.syncopate.ag_weight_gemm(a, torch.empty(2, 5, dtype=torch.bfloat16), g)
        return [tuple(by_n.shape), tuple(by_k.shape)]


def test_fake_shapes_read_the_sharded_dim():
    assert _ranks(_fake_rank, 4)[0] == [(3, 20), (3, 5)]


def _errors_rank(rank, W):
    g = sto.group_name(None)
    with pytest.raises(TorchOpError, match=r"w_shard must be \[K, N/W\]") as e:
        torch.ops.syncopate.ag_weight_gemm(torch.randn(4, 8), torch.randn(3, 5), g)
    with pytest.raises(TorchOpError, match="must be 2-D"):
        sto.ag_weight_gemm(torch.randn(4, 8)[None], torch.randn(8, 5), g)
    return str(e.value)


def test_errors_say_what_to_change():
    assert "[K/W, N]" in _ranks(_errors_rank, 2)[0]
