"""torch.ops.syncopate.* on the CPU: opcheck, forward and autograd numbers against the unfused
single-process reference, compiled (fullgraph) against eager, and the typed errors.

The ranks are loopback virtual ranks (syncopate.runtime.loopback, threads of this process with
CPU tensors): the ops' CPU path runs the real collectives between them, so a W = 2 or 4 result
is a real reduce-scatter / all-gather, not a world-size-1 identity. The loopback group's
reductions sum in fp32 (loopback._reduce), hence fp32 tolerances even for fp64 inputs.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import syncopate.torch_ops as sto  # noqa: E402
from syncopate.runtime.loopback import run_loopback  # noqa: E402
from syncopate.torch_ops import TorchOpError  # noqa: E402


def _ranks(fn, W, *args):
    """``fn(rank, W, *args)`` on W loopback ranks; the per-rank values (a failing rank's
    traceback is raised)."""
    results = run_loopback(fn, W, *args, timeout_s=300)
    bad = [v for st, v in results if st != "ok"]
    assert not bad, "\n".join(bad)
    return [v for _, v in results]


def _mlp_data(M=8, K=12, H=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(*s, generator=g, dtype=dtype)
            for n, s in (("x", (M, K)), ("w1", (K, H)), ("w2", (H, K)), ("gy", (M, K)))}


def _reference(d):
    """Unsharded TP MLP ``relu(x @ w1) @ w2``, its output and the gradients of
    ``sum(y * gy)``."""
    x, w1, w2 = (d[n].clone().requires_grad_() for n in ("x", "w1", "w2"))
    y = torch.relu(x @ w1) @ w2
    (y * d["gy"]).sum().backward()
    return y.detach(), x.grad, w1.grad, w2.grad


def _shards(d, rank, W):
    M, H = d["x"].shape[0], d["w1"].shape[1]
    ms, hs = M // W, H // W
    rows, cols = slice(rank * ms, (rank + 1) * ms), slice(rank * hs, (rank + 1) * hs)
    return rows, cols, (d["x"][rows].clone().requires_grad_(),
                        d["w1"][:, cols].clone().requires_grad_(),
                        d["w2"][cols].clone().requires_grad_())


def _tp_mlp_rank(rank, W, d, compiled):
    """Sequence-parallel input -> ag_gemm (column-parallel w1) -> relu -> gemm_rs (row-parallel
    w2): this rank's output rows and its shards' gradients."""
    g = sto.group_name(None)
    rows, cols, (xs, w1s, w2s) = _shards(d, rank, W)

    def mlp(x, w1, w2):
        return sto.gemm_rs(torch.relu(sto.ag_gemm(x, w1, g)), w2, g)

    f = torch.compile(mlp, fullgraph=True, backend="aot_eager") if compiled else mlp
    y = f(xs, w1s, w2s)
    (y * d["gy"][rows]).sum().backward()
    return rows, cols, y.detach(), xs.grad, w1s.grad, w2s.grad


@pytest.mark.parametrize("W", [2, 4])
def test_tp_mlp_forward_and_gradients_match_unfused_reference(W):
    d = _mlp_data()
    y, dx, dw1, dw2 = _reference(d)
    for rows, cols, ys, dxs, dw1s, dw2s in _ranks(_tp_mlp_rank, W, d, False):
        torch.testing.assert_close(ys, y[rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dxs, dx[rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dw1s, dw1[:, cols], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dw2s, dw2[cols], rtol=1e-5, atol=1e-5)


def test_compiled_fullgraph_tp_mlp_matches_eager_and_reference():
    """torch.compile(fullgraph=True) (AOT autograd, eager kernels) of the TP MLP on 2 ranks:
    forward and gradients equal the eager ops' and the unsharded reference's."""
    d = _mlp_data(seed=1)
    y, dx, dw1, dw2 = _reference(d)
    eager = _ranks(_tp_mlp_rank, 2, d, False)
    compiled = _ranks(_tp_mlp_rank, 2, d, True)
    for e, c in zip(eager, compiled):
        rows, cols = c[0], c[1]
        for te, tc in zip(e[2:], c[2:]):
            torch.testing.assert_close(tc, te, rtol=0, atol=0)
        torch.testing.assert_close(c[2], y[rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(c[3], dx[rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(c[4], dw1[:, cols], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(c[5], dw2[cols], rtol=1e-5, atol=1e-5)


def _gathered_grad_rank(rank, W, d):
    """A loss that reads ag_gemm's gathered A as well as its product: a_shard's gradient must
    carry both parts (the product's through gemm_rs, the gathered A's through the
    reduce-scatter)."""
    g = sto.group_name(None)
    rows, cols, (xs, w1s, _) = _shards(d, rank, W)
    out, full = torch.ops.syncopate.ag_gemm(xs, w1s, g, True)
    loss = (out * out).sum() + (full * full.sin()).sum() / W
    loss.backward()
    return rows, cols, out.detach(), full.detach(), xs.grad, w1s.grad


def test_gradient_through_returned_gathered_a():
    W = 2
    d = _mlp_data(seed=2)
    x, w1 = d["x"].clone().requires_grad_(), d["w1"].clone().requires_grad_()
    H = w1.shape[1]
    parts = [x @ w1[:, r * H // W:(r + 1) * H // W] for r in range(W)]
    loss = sum((p * p).sum() for p in parts) + (x * x.sin()).sum()
    loss.backward()
    for rows, cols, out, full, dxs, dw1s in _ranks(_gathered_grad_rank, W, d):
        torch.testing.assert_close(full, d["x"], rtol=0, atol=0)
        torch.testing.assert_close(out, d["x"] @ d["w1"][:, cols], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(dxs, x.grad[rows], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dw1s, w1.grad[:, cols], rtol=1e-5, atol=1e-5)


def _opcheck_rank(rank, W):
    g = sto.group_name(None)
    gen = torch.Generator().manual_seed(3)
    for dtype in (torch.float32, torch.float64):
        a = torch.randn(4, 6, generator=gen, dtype=dtype, requires_grad=True)
        b = torch.randn(6, 5, generator=gen, dtype=dtype, requires_grad=True)
        torch.library.opcheck(torch.ops.syncopate.ag_gemm.default, (a, b, g), {"return_a": True})
        torch.library.opcheck(torch.ops.syncopate.ag_gemm.default, (a, b.detach(), g))
        torch.library.opcheck(torch.ops.syncopate.gemm_rs.default, (a, b, g))
        torch.library.opcheck(torch.ops.syncopate.reduce_scatter.default, (a.detach(), g))
        # finite differences at fp32 precision: the loopback reduction rounds to fp32
        tol = dict(eps=1e-3, atol=1e-3, rtol=1e-3)
        torch.autograd.gradcheck(lambda a, b: sto.ag_gemm(a, b, g), (a.double(), b.double()), **tol)
        torch.autograd.gradcheck(lambda a, b: sto.gemm_rs(a, b, g), (a.double(), b.double()), **tol)
    return True


def test_opcheck_and_gradcheck():
    """torch.library.opcheck (schema, autograd registration, fake tensor, AOT dispatch with
    static and dynamic shapes) and gradcheck of the ops. One rank: opcheck traces with
    make_fx, whose patcher is process-global, so ranks in threads cannot trace at once."""
    assert _ranks(_opcheck_rank, 1) == [True]


def _fake_shapes_rank(rank, W):
    from torch._subclasses.fake_tensor import FakeTensorMode
    g = sto.group_name(None)
    with FakeTensorMode():
        a = torch.empty(3, 8, dtype=torch.bfloat16)
        b = torch.empty(8, 5, dtype=torch.bfloat16)
        out, full = torch.ops.syncopate.ag_gemm(a, b, g, True)
        rs = torch.ops.syncopate.gemm_rs(torch.empty(12, 8, dtype=torch.bfloat16), b, g)
        return [(tuple(t.shape), t.dtype) for t in (out, full, rs)]


def test_fake_implementations_give_shapes_and_dtypes():
    (got,) = _ranks(_fake_shapes_rank, 1)
    assert got == [((3, 5), torch.bfloat16), ((3, 8), torch.bfloat16), ((12, 5), torch.bfloat16)]
    got4 = _ranks(_fake_shapes_rank, 4)
    assert got4[0] == [((12, 5), torch.bfloat16), ((12, 8), torch.bfloat16),
                       ((3, 5), torch.bfloat16)]


def _errors_rank(rank, W):
    g = sto.group_name(None)
    msgs = {}

    def grab(key, fn):
        with pytest.raises(TorchOpError) as e:
            fn()
        msgs[key] = str(e.value)

    a, b = torch.randn(4, 6), torch.randn(6, 5)
    grab("K", lambda: torch.ops.syncopate.ag_gemm(a, torch.randn(5, 6), g))
    grab("dtype", lambda: torch.ops.syncopate.gemm_rs(a, b.double(), g))
    grab("dim", lambda: sto.ag_gemm(a[None], b, g))
    grab("rows", lambda: sto.gemm_rs(torch.randn(3, 6), b, g))
    grab("group", lambda: sto.gemm_rs(a, b, "no-such-group"))
    grab("return_a", lambda: torch.ops.syncopate.ag_gemm(a, b.requires_grad_(), g, False))
    grab("name", lambda: sto.group_name(object()))
    return msgs


def test_errors_say_what_to_change():
    msgs = _ranks(_errors_rank, 2)[1]
    assert "b.shape[0] must be 6" in msgs["K"]
    assert "torch.float32" in msgs["dtype"] and "cast" in msgs["dtype"]
    assert "must be 2-D" in msgs["dim"] and "flatten" in msgs["dim"]
    assert "multiple of the world size 2" in msgs["rows"]
    assert "no-such-group" in msgs["group"] and "group_name(group)" in msgs["group"]
    assert "return_a=True" in msgs["return_a"]
    assert "ProcessGroup" in msgs["name"]
