"""Ulysses attention that trains, on the CPU: ``torch.ops.syncopate.ulysses_attention`` and its
backward, ``ContextParallelAttention(method="ulysses")`` and the typed errors.

On loopback ranks (threads with real all-to-alls between them), contiguous sequence blocks, GQA
(8 query heads, 4 KV heads: both divide by W = 2 and 4), fp32: the op's output, its
head-sharded ``lse`` and the gradients of q, k, v (with a gradient into ``lse`` too) against
autograd through fp32 attention on the whole sequence; the module on the registered op and on
the plain composition (``fused=False``: differentiable all-to-alls around SDPA) against SDPA,
and against each other; ``opcheck`` and ``gradcheck`` of both custom ops; AOT autograd traces
the backward as one ``ulysses_attention_backward`` node and the fake implementations give the
shapes (what ``torch.compile`` needs); a head count that does not divide over the ranks is
refused saying to use ring attention. The block is tests/test_nn_block.py's ("cp-ulysses"); the
CUDA implementations (the fused forward, the local backward kernels) are the GPU test's
(tests/gpu/test_block_gpu.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import syncopate.nn as snn  # noqa: E402
import syncopate.torch_ops as sto  # noqa: E402
from syncopate.errors import UsageError  # noqa: E402
from syncopate.torch_ops import TorchOpError  # noqa: E402
from test_nn_attention_op import _ranks, _whole  # noqa: E402

B, HQ, HKV, D = 2, 8, 4, 8
OPS = torch.ops.syncopate


def _data(S, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(B, h, S, D, generator=g, dtype=dtype)
            for n, h in (("q", HQ), ("k", HKV), ("v", HKV), ("go", HQ))} | {
        "glse": torch.randn(B, HQ, S, generator=g, dtype=dtype)}


def _blocks(rank, W, S):
    return slice(rank * S // W, (rank + 1) * S // W)


def _heads(rank, W):
    return slice(rank * HQ // W, (rank + 1) * HQ // W)


def _op_rank(rank, W, d, causal):
    g = sto.group_name(None)
    rows, heads = _blocks(rank, W, d["q"].shape[2]), _heads(rank, W)
    q, k, v = (d[n][:, :, rows].clone().requires_grad_() for n in "qkv")
    o, lse = OPS.ulysses_attention(q, k, v, g, causal)
    ((o * d["go"][:, :, rows]).sum() + (lse * d["glse"][:, heads]).sum()).backward()
    return o.detach(), lse.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("W", [2, 4])
def test_op_forward_and_gradients_match_attention_on_the_whole_sequence(W, causal):
    """Rank r: o and dq, dk, dv of its sequence block, lse of its heads over the whole
    sequence (what the kernel computes and the backward takes)."""
    d = _data(4 * W, seed=W + 10 * causal)
    o, lse, dq, dk, dv = _whole(d, causal)
    for r, got in enumerate(_ranks(_op_rank, W, d, causal)):
        rows, heads = _blocks(r, W, 4 * W), _heads(r, W)
        want = (o[:, :, rows], lse[:, heads], dq[:, :, rows], dk[:, :, rows], dv[:, :, rows])
        for name, a, b in zip(("o", "lse", "dq", "dk", "dv"), got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=lambda m: f"{name}: {m}")


def _module_rank(rank, W, d, causal, fused):
    att = snn.ContextParallelAttention(None, causal=causal, method="ulysses", fused=fused)
    S = d["q"].shape[2]
    pos = att.positions(S // W)
    q, k, v = (d[n][:, :, pos].clone().requires_grad_() for n in "qkv")
    o = att(q, k, v)
    (o * d["go"][:, :, pos]).sum().backward()
    return pos, o.detach(), q.grad, k.grad, v.grad


@pytest.mark.parametrize("fused", [None, False], ids=["op", "unfused"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("W", [2, 4])
def test_module_forward_and_gradients_match_sdpa_on_the_whole_sequence(W, causal, fused):
    d = _data(4 * W, seed=3 * W + causal)
    q, k, v = (d[n].clone().requires_grad_() for n in "qkv")
    o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                         enable_gqa=True)
    (o * d["go"]).sum().backward()
    for r, (pos, *got) in enumerate(_ranks(_module_rank, W, d, causal, fused)):
        assert torch.equal(pos, torch.arange(r * 4, (r + 1) * 4))  # contiguous, causal or not
        for name, a, b in zip(("o", "dq", "dk", "dv"), got, (o.detach(), q.grad, k.grad,
                                                             v.grad)):
            torch.testing.assert_close(a, b[:, :, pos], rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"{name}: {m}")


def test_op_path_agrees_with_the_plain_composition():
    """The registered op's CPU path (the fused op's stand-in on the CPU) and ``fused=False``
    (all-to-alls + SDPA) on the same ranks: output and gradients."""
    d = _data(16, seed=21)
    op = _ranks(_module_rank, 4, d, True, None)
    plain = _ranks(_module_rank, 4, d, True, False)
    for a, b in zip(op, plain):
        for x, y in zip(a[1:], b[1:]):
            torch.testing.assert_close(x, y, rtol=1e-5, atol=1e-5)


def _check_rank(rank, W):
    g = sto.group_name(None)
    d = _data(8, seed=4, dtype=torch.float64)
    q, k, v = (d[n].clone().requires_grad_() for n in "qkv")
    for causal in (False, True):
        o, lse = OPS.ulysses_attention(q, k, v, g, causal)
        torch.library.opcheck(OPS.ulysses_attention.default, (q, k, v, g, causal))
        torch.library.opcheck(OPS.ulysses_attention_backward.default,
                              (q.detach(), k.detach(), v.detach(), g, o.detach(), lse.detach(),
                               d["go"], causal, None, d["glse"].float()))
        torch.autograd.gradcheck(lambda q, k, v: OPS.ulysses_attention(q, k, v, g, causal)[0],
                                 (q, k, v), eps=1e-6, atol=1e-4, rtol=1e-3)
    return True


def test_opcheck_and_gradcheck():
    """One rank (as ring attention's: opcheck traces process-globally, and perturbing one
    rank's inputs would change the others' outputs)."""
    assert _ranks(_check_rank, 1) == [True]


def _traced_rank(rank, W):
    from functorch.compile import aot_function, make_boxed_func
    g = sto.group_name(None)
    graphs = []

    def keep(gm, _):
        graphs.append(str(gm.graph))
        return make_boxed_func(gm.forward)
    d = _data(8, seed=5)
    q, k, v = (d[n][:, :, _blocks(rank, W, 8)].clone().requires_grad_() for n in "qkv")
    f = aot_function(lambda q, k, v: sto.ulysses_attention(q, k, v, g, causal=True), keep, keep)
    f(q, k, v).sum().backward()
    return graphs


def test_aot_autograd_traces_the_backward_as_one_op():
    """One rank: AOT autograd's tracing state is process-global (two threads tracing at once
    trip over it); the block test traces W = 2 through torch.compile's lock."""
    for fwd, bwd in _ranks(_traced_rank, 1):
        assert "syncopate.ulysses_attention.default" in fwd
        assert "syncopate.ulysses_attention_backward.default" in bwd
        assert "ulysses_attention.default" not in bwd.replace(
            "ulysses_attention_backward.default", "")


def _fake_rank(rank, W):
    from torch._subclasses.fake_tensor import FakeTensorMode
    g = sto.group_name(None)
    with FakeTensorMode():
        q = torch.empty(1, 4, 6, 8, dtype=torch.bfloat16)
        k = torch.empty(1, 2, 6, 8, dtype=torch.bfloat16)
        o, lse = OPS.ulysses_attention(q, k, k, g, True)
        dq, dk, dv = OPS.ulysses_attention_backward(q, k, k, g, o, lse, o, True)
        return [(tuple(t.shape), t.dtype) for t in (o, lse, dq, dk, dv)]


def test_fake_implementations_give_shapes_and_dtypes():
    """lse is this rank's heads (4 / W = 2) over the whole sequence (6 W = 12)."""
    bf = torch.bfloat16
    assert _ranks(_fake_rank, 2)[0] == [((1, 4, 6, 8), bf), ((1, 2, 12), torch.float32),
                                        ((1, 4, 6, 8), bf), ((1, 2, 6, 8), bf),
                                        ((1, 2, 6, 8), bf)]


def _errors_rank(rank, W):
    g = sto.group_name(None)
    q, k = torch.randn(1, 6, 4, 8), torch.randn(1, 2, 4, 8)  # 6 and 2 heads over 4 ranks
    msgs = []
    for fused in (None, False):
        att = snn.ContextParallelAttention(None, method="ulysses", fused=fused)
        with pytest.raises(UsageError) as e:
            att(q, k, k)
        msgs.append(str(e.value))
    with pytest.raises(UsageError) as e:
        snn.TransformerBlock(48, 6, 2, 64, None, "cp", dtype=torch.float32,
                             cp_method="ulysses")
    msgs.append(str(e.value))
    with pytest.raises(TorchOpError) as e:
        OPS.ulysses_attention(q, k, k, g, False)
    msgs.append(str(e.value))
    q4 = torch.randn(1, 4, 4, 8)
    with pytest.raises(TorchOpError) as e:  # lse of every head, not this rank's
        OPS.ulysses_attention_backward(q4, q4, q4, g, q4, torch.randn(1, 4, 16), q4, False)
    msgs.append(str(e.value))
    for bad in (dict(method="zigzag"),):
        with pytest.raises(UsageError) as e:
            snn.ContextParallelAttention(None, **bad)
        msgs.append(str(e.value))
    with pytest.raises(UsageError) as e:
        snn.TransformerBlock(64, 8, 4, 64, None, "cp", cp_method="ulyses")
    msgs.append(str(e.value))
    return msgs


def test_a_head_count_that_does_not_divide_is_refused_saying_to_use_ring():
    msgs = _ranks(_errors_rank, 4)[0]
    for m in msgs[:3]:
        assert "query heads (6) and KV heads (2) must divide by 4" in m and "method='ring'" in m
    assert "must divide by the world size (4)" in msgs[3] and "ring_attention" in msgs[3]
    assert "[B, Hq/W, S] = (1, 1, 16)" in msgs[4]
    assert "offers ring, ulysses" in msgs[5] and "cp_method='ulyses'" in msgs[6]


def test_cuda_implementations_hand_the_op_its_arguments(monkeypatch):
    """The CUDA kernels registered for the two custom ops call ``ulysses_attention`` (asking
    for its lse) and ``ulysses_attention_backward`` with the arguments in their places."""
    import importlib
    ul = importlib.import_module("syncopate.ops.ulysses")
    seen = []
    monkeypatch.setattr(ul, "ulysses_attention", lambda *a, **kw: seen.append((a, kw)))
    monkeypatch.setattr(ul, "ulysses_attention_backward", lambda *a, **kw: seen.append((a, kw)))
    q, k, v, o, lse, do, dlse, comm = (object() for _ in range(8))
    ul.TORCH.cuda(q, k, v, comm, True, 0.5)
    (suffix, bwd_op), = ul.TORCH.companions
    bwd_op.cuda(q, k, v, comm, o, lse, do, True, 0.5, dlse)
    assert suffix == "backward"
    assert seen == [((q, k, v, comm), dict(causal=True, sm_scale=0.5, return_lse=True)),
                    ((q, k, v, o, lse, do, comm), dict(causal=True, sm_scale=0.5, dlse=dlse))]
