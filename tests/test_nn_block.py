"""syncopate.nn on the CPU: the tensor+sequence-parallel and the context-parallel block against
the unsharded block, forward and every gradient, on loopback ranks (threads with real
collectives between them), through the registered ops (their CPU composition) and through the
plain composition (``fused=False``); 20 training steps against the unsharded model's; the MoE
block's inference; no host read in a forward + backward; the weights' round trip; the memory
report; the typed errors.

Why fp32 and 1e-4: the loopback group's reductions sum in fp32 (runtime/loopback.py), so the
sharded block agrees with the unsharded one to fp32 rounding, not bitwise. The GPU test
(tests/gpu/test_block_gpu.py) checks the bf16 fused kernels the same way.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

import syncopate.nn as snn  # noqa: E402
from syncopate.errors import UsageError  # noqa: E402
from syncopate.runtime.loopback import run_loopback  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "runtime"))
from host_syncs import host_syncs  # noqa: E402

#: dim, n_heads, n_kv_heads, ffn_dim, head_dim; sequence, batch (heads divide by W = 4)
DIM, HQ, HKV, FFN, HD = 64, 8, 4, 96, 16
SEQ, BATCH = 16, 2
TOL = dict(rtol=1e-4, atol=1e-4)


def _ranks(fn, W, *args):
    results = run_loopback(fn, W, *args, timeout_s=300)
    bad = [v for st, v in results if st != "ok"]
    assert not bad, "\n".join(bad)
    return [v for _, v in results]


def _block(layout, fused, **kw):
    return snn.TransformerBlock(DIM, HQ, HKV, FFN, None, layout, fused, dtype=torch.float32,
                                head_dim=HD, **kw)


def _reference(seed):
    return snn.ReferenceBlock(DIM, HQ, HKV, FFN, head_dim=HD, seed=seed)


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(SEQ, BATCH, DIM, generator=g), torch.randn(SEQ, BATCH, DIM, generator=g)


def _grads_as_reference(blk):
    """The gradients of every rank's shards, assembled into the unsharded shapes (the
    weights' own gathering, ``reference()``, applied to the gradients)."""
    saved = [p.detach().clone() for p in blk.parameters()]
    with torch.no_grad():
        for p in blk.parameters():
            p.copy_(p.grad)
    g = blk.reference()
    with torch.no_grad():
        for p, s in zip(blk.parameters(), saved):
            p.copy_(s)
    return {n: t.detach() for n, t in g.named_parameters()}


def _block_rank(rank, W, layout, fused, state, x, gy, sync):
    blk = _block(layout, fused)
    ref = _reference(None)
    ref.load_state_dict(state)
    blk.load_from(ref)
    xs = blk.shard_sequence(x).clone().requires_grad_()
    y = blk(xs)
    (y * blk.shard_sequence(gy)).sum().backward()
    if sync:
        assert snn.sync_grads(blk, blk.par) == sum(
            1 for p in blk.parameters() if getattr(p, snn.parallel.REPLICATED, False))
    back = {n: t.detach() for n, t in blk.reference().named_parameters()}
    return blk.positions(SEQ), y.detach(), xs.grad, back, _grads_as_reference(blk)


def _unsharded(seed):
    ref = _reference(seed)
    x, gy = _data(seed)
    xr = x.clone().requires_grad_()
    y = ref(xr)
    (y * gy).sum().backward()
    grads = {n: p.grad for n, p in ref.named_parameters()}
    return ref, x, gy, y.detach(), xr.grad, grads


@pytest.mark.parametrize("fused", [None, False], ids=["ops", "unfused"])
@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("layout", ["tp", "cp"])
def test_block_forward_and_every_gradient_match_the_unsharded_block(layout, W, fused):
    ref, x, gy, y, dx, grads = _unsharded(seed=W * 10 + (layout == "cp"))
    for pos, ys, dxs, back, gs in _ranks(_block_rank, W, layout, fused, ref.state_dict(), x, gy,
                                         True):
        torch.testing.assert_close(ys, y[pos], **TOL)
        torch.testing.assert_close(dxs, dx[pos], **TOL)
        for n, p in ref.named_parameters():
            torch.testing.assert_close(back[n], p.detach(), rtol=0, atol=0)  # the round trip
            torch.testing.assert_close(gs[n], grads[n], **TOL, msg=lambda m: f"d{n}: {m}")


@pytest.mark.parametrize("layout", ["tp", "cp"])
def test_replicated_gradients_are_partial_until_synced(layout):
    """Without sync_grads a replicated weight's gradient is this rank's share only (what
    makes the sync necessary); the sharded weights' gradients are whole either way."""
    ref, x, gy, _, _, grads = _unsharded(seed=5)
    for _, _, _, _, gs in _ranks(_block_rank, 2, layout, None, ref.state_dict(), x, gy, False):
        assert not torch.allclose(gs["attn_norm"], grads["attn_norm"], **TOL)
        if layout == "tp":
            torch.testing.assert_close(gs["wq"], grads["wq"], **TOL)


def _train_rank(rank, W, layout, fused, state, xs_all, ts_all, steps, lr):
    stack = snn.TransformerStack(2, DIM, HQ, HKV, FFN, None, layout, fused, torch.float32,
                                 head_dim=HD)
    ref = snn.ReferenceStack(2, DIM, HQ, HKV, FFN, head_dim=HD)
    ref.load_state_dict(state)
    stack.load_from(ref)
    opt = torch.optim.AdamW(stack.parameters(), lr=lr)
    n = xs_all[0].numel()
    losses = []
    for i in range(steps):
        x, t = stack.shard_sequence(xs_all[i]), stack.shard_sequence(ts_all[i])
        loss = ((stack(x) - t) ** 2).sum() / n  # this rank's share of the global mean
        opt.zero_grad()
        loss.backward()
        stack.sync_grads()
        opt.step()
        total = loss.detach().clone()
        snn.parallel.collectives.all_reduce(total, group=stack.par.group)
        losses.append(float(total))
    return losses


@pytest.mark.parametrize("layout", ["tp", "cp"])
def test_twenty_training_steps_track_the_unsharded_model(layout):
    steps, lr, W = 20, 3e-3, 2
    ref = snn.ReferenceStack(2, DIM, HQ, HKV, FFN, head_dim=HD, seed=7)
    state = {k: v.clone() for k, v in ref.state_dict().items()}
    g = torch.Generator().manual_seed(8)
    xs = [torch.randn(SEQ, BATCH, DIM, generator=g) for _ in range(steps)]
    ts = [torch.randn(SEQ, BATCH, DIM, generator=g) for _ in range(steps)]
    opt = torch.optim.AdamW(ref.parameters(), lr=lr)
    want = []
    for i in range(steps):
        loss = ((ref(xs[i]) - ts[i]) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        want.append(float(loss.detach()))
    assert want[-1] < want[0]  # it trains
    for got in _ranks(_train_rank, W, layout, None, state, xs, ts, steps, lr):
        for i, (a, b) in enumerate(zip(got, want)):
            assert abs(a - b) <= 1e-4 * abs(b), f"step {i}: loss {a} vs unsharded {b}"


def _no_sync_rank(rank, W, layout, state, x):
    blk = _block(layout, None)
    ref = _reference(None)
    ref.load_state_dict(state)
    blk.load_from(ref)
    xs = blk.shard_sequence(x).clone().requires_grad_()
    with host_syncs() as seen:
        blk(xs).square().sum().backward()
    return seen


@pytest.mark.parametrize("layout", ["tp", "cp"])
def test_forward_and_backward_read_nothing_back_to_the_host(layout):
    """The block's own code between the ops reads no device value on the host (what CUDA-graph
    capture and an asynchronous stream of ops need); the ops' CUDA paths are checked by
    tests/runtime/test_graph_capture_ops.py."""
    ref = _reference(3)
    x, _ = _data(3)
    for seen in _ranks(_no_sync_rank, 2, layout, ref.state_dict(), x):
        assert seen == []


def _moe_rank(rank, W, state, x):
    moe = snn.MoE(num_experts=4, top_k=2, capacity=128, on_overflow="error")
    blk = snn.TransformerBlock(DIM, HQ, HKV, FFN, None, "tp", None, dtype=torch.bfloat16,
                               head_dim=HD, moe=moe)
    ref = snn.ReferenceBlock(DIM, HQ, HKV, FFN, moe, head_dim=HD)
    ref.load_state_dict(state)
    blk.load_from(ref)
    with torch.no_grad():
        y = blk(blk.shard_sequence(x).to(torch.bfloat16))
    with pytest.raises(UsageError, match="inference only"):
        blk(blk.shard_sequence(x).to(torch.bfloat16))
    return blk.positions(SEQ), y.float(), int(blk.moe_dropped.sum())


def test_moe_block_inference_matches_the_unsharded_block():
    moe = snn.MoE(num_experts=4, top_k=2, capacity=128)
    ref = snn.ReferenceBlock(DIM, HQ, HKV, FFN, moe, head_dim=HD, seed=11)
    with torch.no_grad():  # the sharded block computes in bf16: the same rounded weights
        for p in ref.parameters():
            if p is not ref.router:
                p.copy_(p.to(torch.bfloat16).float())
    x, _ = _data(11)
    x = x.to(torch.bfloat16).float()
    with torch.no_grad():
        y = ref(x)
    for pos, ys, dropped in _ranks(_moe_rank, 2, ref.state_dict(), x):
        assert dropped == 0
        err = float((ys - y[pos]).norm() / y[pos].norm())
        assert err < 2e-2, err


def test_memory_report_counts_parameters_gradients_and_symmetric_buffers():
    from runtime_fakes import fake_comm

    from syncopate.ops import driver
    comm = fake_comm(W=2)
    driver.symmetric_buffer(comm, "op.K", (4, 8), torch.bfloat16)
    driver.symmetric_buffer(comm, "op.K", (4, 8), torch.bfloat16)  # the same buffer again
    driver.symmetric_buffer(comm, "op.DK", (2, 8), torch.float32)
    lin = torch.nn.Linear(3, 5, bias=False)
    lin(torch.randn(2, 3)).sum().backward()
    rep = snn.memory_held(lin, comm)
    assert rep.params == rep.grads == 15 * 4
    assert rep.buffers == {"op.K": 64, "op.DK": 64} and rep.symmetric == 128
    assert rep.total == 15 * 8 + 128 and "symmetric" in str(rep)


def _errors_rank(rank, W):
    msgs = []
    for kw in (dict(layout="xx"), dict(n_kv_heads=1), dict(moe=4), dict(n_heads=6)):
        args = dict(dim=DIM, n_heads=HQ, n_kv_heads=HKV, ffn_dim=FFN, comm=None, head_dim=HD)
        args.update(kw)
        try:
            snn.TransformerBlock(**args)
        except UsageError as e:
            msgs.append(str(e))
    blk = _block("tp", None)
    try:
        blk(torch.randn(4, DIM))
    except UsageError as e:
        msgs.append(str(e))
    try:
        snn.ColumnParallelLinear(8, 10, None, parts=(4, 4))
    except UsageError as e:
        msgs.append(str(e))
    return msgs


def test_typed_errors_say_what_to_change():
    msgs = _ranks(_errors_rank, 2)[0]
    assert len(msgs) == 6, msgs
    assert "choose 'tp'" in msgs[0] and "must divide by 2" in msgs[1]
    assert "syncopate.nn.MoE" in msgs[2] and "multiple of n_kv_heads" in msgs[3]
    assert "[S/W, B, dim=64]" in msgs[4] and "add up to out_features" in msgs[5]


def _compiled_rank(rank, W, layout, state, x):
    blk = _block(layout, None)
    ref = _reference(None)
    ref.load_state_dict(state)
    blk.load_from(ref)
    xs = blk.shard_sequence(x).requires_grad_()
    y = blk(xs)
    y.square().sum().backward()
    dx, xs.grad = xs.grad.clone(), None
    yc = torch.compile(blk, fullgraph=True, backend="aot_eager")(xs)
    yc.square().sum().backward()
    return torch.equal(yc, y) and torch.equal(xs.grad, dx)


@pytest.mark.parametrize("layout", ["tp", "cp"])
def test_block_compiles_as_one_graph(layout):
    """torch.compile(fullgraph=True) (AOT autograd, eager kernels) traces the whole block --
    its ops as single nodes, forward and backward -- and gives the eager block's bits."""
    ref = _reference(6)
    x, _ = _data(6)
    assert _ranks(_compiled_rank, 2, layout, ref.state_dict(), x) == [True, True]
