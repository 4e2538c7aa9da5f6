"""``torch.ops.syncopate.ring_attention`` and its backward on the CPU.

On loopback ranks (threads, real all-gathers and reduce-scatters between them): the output
and the gradients of q, k, v of every rank's shard -- contiguous shards, and the causal zigzag
shards -- against autograd through SDPA on the whole sequence (GQA, B = 2, W = 2 and 4),
with a gradient flowing into ``lse`` too; ``opcheck`` of both custom ops and ``gradcheck``;
AOT autograd traces the backward as one ``ring_attention_backward`` node (what
``torch.compile`` needs); the fake shapes; the typed errors. The CUDA implementations (the
fused kernels) are the GPU test's (tests/gpu/test_block_gpu.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import syncopate.torch_ops as sto  # noqa: E402
from syncopate.ops.ring_attention import shard_positions  # noqa: E402
from syncopate.runtime.loopback import run_loopback  # noqa: E402
from syncopate.torch_ops import TorchOpError  # noqa: E402

B, HQ, HKV, D = 2, 4, 2, 8


def _ranks(fn, W, *args):
    results = run_loopback(fn, W, *args, timeout_s=300)
    bad = [v for st, v in results if st != "ok"]
    assert not bad, "\n".join(bad)
    return [v for _, v in results]


def _data(S, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(B, h, S, D, generator=g, dtype=dtype)
            for n, h in (("q", HQ), ("k", HKV), ("v", HKV), ("go", HQ))} | {
        "glse": torch.randn(B, HQ, S, generator=g, dtype=dtype)}


def _whole(d, causal):
    """Autograd through fp32 attention on the whole sequence: o, lse and the gradients of
    ``sum(o * go) + sum(lse * glse)``."""
    q, k, v = (d[n].clone().requires_grad_() for n in "qkv")
    G = HQ // HKV
    s = (q @ k.repeat_interleave(G, 1).transpose(-1, -2)) * D ** -0.5
    if causal:
        S = q.shape[2]
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ v.repeat_interleave(G, 1)
    sdpa = torch.nn.functional.scaled_dot_product_attention(
        d["q"], d["k"].repeat_interleave(G, 1), d["v"].repeat_interleave(G, 1), is_causal=causal)
    torch.testing.assert_close(o.detach(), sdpa, rtol=1e-5, atol=1e-5)  # the reference itself
    ((o * d["go"]).sum() + (lse * d["glse"]).sum()).backward()
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


def _rank(rank, W, d, causal):
    g = sto.group_name(None)
    S = d["q"].shape[2]
    pos = shard_positions(S // W, W, rank, causal)
    q, k, v = (d[n][:, :, pos].clone().requires_grad_() for n in "qkv")
    o, lse = torch.ops.syncopate.ring_attention(q, k, v, g, causal)
    ((o * d["go"][:, :, pos]).sum() + (lse * d["glse"][:, :, pos]).sum()).backward()
    return pos, o.detach(), lse.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("causal", [False, True], ids=["contiguous", "zigzag"])
@pytest.mark.parametrize("W", [2, 4])
def test_forward_and_gradients_match_attention_on_the_whole_sequence(W, causal):
    d = _data(8 * W, seed=W + 10 * causal)
    want = _whole(d, causal)
    for pos, *got in _ranks(_rank, W, d, causal):
        for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), got, want):
            torch.testing.assert_close(a, b[:, :, pos], rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{name}: {m}")


def _model_rank(rank, W, d):
    g = sto.group_name(None)
    S = d["q"].shape[2]
    pos = shard_positions(S // W, W, rank, True)
    q, k, v = (d[n][:, :, pos] for n in "qkv")
    return torch.equal(sto.ring_attention(q, k, v, g, causal=True),
                       torch.ops.syncopate.ring_attention(q, k, v, g, True)[0])


def test_model_function_returns_the_output():
    assert _ranks(_model_rank, 2, _data(16, seed=3)) == [True, True]


def _check_rank(rank, W):
    g = sto.group_name(None)
    d = _data(8, seed=4, dtype=torch.float64)
    q, k, v = (d[n].clone().requires_grad_() for n in "qkv")
    o, lse = torch.ops.syncopate.ring_attention(q, k, v, g, True)
    for causal in (False, True):
        torch.library.opcheck(torch.ops.syncopate.ring_attention.default, (q, k, v, g, causal))
        torch.library.opcheck(torch.ops.syncopate.ring_attention_backward.default,
                              (q.detach(), k.detach(), v.detach(), g, o.detach(), lse.detach(),
                               d["go"], causal, None, d["glse"].float()))
        torch.autograd.gradcheck(lambda q, k, v: torch.ops.syncopate.ring_attention(
            q, k, v, g, causal)[0], (q, k, v), eps=1e-6, atol=1e-4, rtol=1e-3)
    return True


def test_opcheck_and_gradcheck():
    """One rank: opcheck traces with make_fx (process-global), and gradcheck's perturbations of
    one rank's inputs would change the other ranks' outputs at the same time."""
    assert _ranks(_check_rank, 1) == [True]


def _traced_rank(rank, W):
    from functorch.compile import aot_function, make_boxed_func
    g = sto.group_name(None)
    graphs = []

    def keep(gm, _):
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)
    d = _data(8, seed=5)
    q, k, v = (d[n].clone().requires_grad_() for n in "qkv")
    f = aot_function(lambda q, k, v: sto.ring_attention(q, k, v, g, causal=True), keep, keep)
    f(q, k, v).sum().backward()
    return graphs


def test_aot_autograd_traces_the_backward_as_one_op():
    (graphs,) = _ranks(_traced_rank, 1)
    fwd, bwd = graphs
    assert "syncopate.ring_attention.default" in fwd
    assert "syncopate.ring_attention_backward.default" in bwd
    assert "ring_attention.default" not in bwd.replace("ring_attention_backward.default", "")


def _fake_rank(rank, W):
    from torch._subclasses.fake_tensor import FakeTensorMode
    g = sto.group_name(None)
    with FakeTensorMode():
        q = torch.empty(1, 4, 6, 8, dtype=torch.bfloat16)
        k = torch.empty(1, 2, 6, 8, dtype=torch.bfloat16)
        o, lse = torch.ops.syncopate.ring_attention(q, k, k, g, True)
        dq, dk, dv = torch.ops.syncopate.ring_attention_backward(q, k, k, g, o, lse, o, True)
        return [(tuple(t.shape), t.dtype) for t in (o, lse, dq, dk, dv)]


def test_fake_implementations_give_shapes_and_dtypes():
    bf = torch.bfloat16
    assert _ranks(_fake_rank, 2)[0] == [((1, 4, 6, 8), bf), ((1, 4, 6), torch.float32),
                                        ((1, 4, 6, 8), bf), ((1, 2, 6, 8), bf),
                                        ((1, 2, 6, 8), bf)]


def _errors_rank(rank, W):
    g = sto.group_name(None)
    x = torch.randn(1, 4, 6, 8)
    cases = [(x[0], x[:, :2], x[:, :2], False), (x, x[:, :3], x[:, :3], False),
             (x, x[:, :2, :4], x[:, :2, :4], False),
             (x[:, :, :5], x[:, :2, :5], x[:, :2, :5], True),
             (x, x[:, :2].double(), x[:, :2].double(), False)]
    msgs = []
    for q, k, v, causal in cases:
        with pytest.raises(TorchOpError) as e:
            torch.ops.syncopate.ring_attention(q, k, v, g, causal)
        msgs.append(str(e.value))
    return msgs


def test_errors_say_what_to_change():
    msgs = _ranks(_errors_rank, 2)[0]
    assert "must be 4-D" in msgs[0] and "multiple of KV heads" in msgs[1]
    assert "shard length" in msgs[2] and "is odd" in msgs[3] and "one floating dtype" in msgs[4]


def test_cuda_implementations_hand_the_op_its_arguments(monkeypatch):
    """The CUDA kernels registered for the two custom ops call ``ring_attention`` and
    ``ring_attention_backward`` with the arguments in their places (the schema's order is not
    the functions' own)."""
    import importlib
    ra = importlib.import_module("syncopate.ops.ring_attention")
    seen = []
    monkeypatch.setattr(ra, "ring_attention", lambda *a, **kw: seen.append((a, kw)))
    monkeypatch.setattr(ra, "ring_attention_backward", lambda *a, **kw: seen.append((a, kw)))
    q, k, v, o, lse, do, dlse, comm = (object() for _ in range(8))
    ra.TORCH.cuda(q, k, v, comm, True, 0.5)
    (suffix, bwd_op), = ra.TORCH.companions
    bwd_op.cuda(q, k, v, comm, o, lse, do, True, 0.5, dlse)
    assert suffix == "backward"
    assert seen == [((q, k, v, comm), dict(causal=True, sm_scale=0.5)),
                    ((q, k, v, o, lse, do, comm), dict(causal=True, sm_scale=0.5, dlse=dlse))]
