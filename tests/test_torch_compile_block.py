"""torch.compile(fullgraph=True) of syncopate.nn.TransformerBlock on the CPU path: both layouts
trace into one graph (no graph break: fullgraph=True raises on one), the fused ops stay whole
nodes of it in both directions (AOT autograd's forward holds ag_gemm / gemm_rs,
ring_attention or ulysses_attention, its backward the ops' backwards -- and no plain collective), and the compiled
block computes what the eager one does: output, input gradient and every weight gradient.

Loopback ranks (threads of this process with real collectives between them: W = 2) run the
ops' CPU composition; Dynamo's compile lock serialises their compiles. AOT autograd with the
graphs kept shows what was traced; Inductor (torch.compile's default backend) compiles the
same block for real.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import syncopate.nn as snn  # noqa: E402
from syncopate.runtime.loopback import run_loopback  # noqa: E402

OPS = torch.ops.syncopate
#: dim, n_heads, n_kv_heads, ffn_dim, head_dim; sequence, batch (all distinct, heads divide by 2)
DIM, HQ, HKV, FFN, HD = 32, 4, 2, 48, 8
SEQ, BATCH = 8, 2
W = 2


def _ranks(fn, *args):
    # each case compiles TransformerBlock.forward anew (per rank and layout): forget the earlier
    # cases' compiles, or the cases together exceed Dynamo's recompile limit of one code object
    torch._dynamo.reset()
    results = run_loopback(fn, W, *args, timeout_s=600)
    bad = [v for st, v in results if st != "ok"]
    assert not bad, "\n".join(bad)
    return [v for _, v in results]


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _run(blk, fn, x, gy):
    xs = blk.shard_sequence(x).clone().requires_grad_()
    y = fn(xs)
    (y * blk.shard_sequence(gy)).sum().backward()
    grads = {n: p.grad.clone() for n, p in blk.named_parameters()}
    for p in blk.parameters():
        p.grad = None
    return y.detach(), xs.grad, grads


def _compile_rank(rank, world_size, layout, backend, state, x, gy):
    """Eager, then compiled (``backend``: "graphs" -- AOT autograd keeping its graphs -- or
    "inductor"): the results of both and the traced graphs' targets."""
    from torch._dynamo.backends.common import aot_autograd

    layout, _, method = layout.partition("-")  # "cp-ulysses": cp_method="ulysses"
    blk = snn.TransformerBlock(DIM, HQ, HKV, FFN, None, layout, None, dtype=torch.float32,
                               head_dim=HD, cp_method=method or "ring")
    ref = snn.ReferenceBlock(DIM, HQ, HKV, FFN, head_dim=HD)
    ref.load_state_dict(state)
    blk.load_from(ref)
    eager = _run(blk, blk, x, gy)
    graphs = {"dynamo": [], "fw": [], "bw": []}
    if backend == "graphs":
        def keep(kind):
            def compiler(gm, example_inputs):
                graphs[kind].append(_targets(gm))
                return gm.forward
            return compiler
        aot = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))

        def be(gm, example_inputs):
            graphs["dynamo"].append(len(gm.graph.nodes))
            return aot(gm, example_inputs)
    else:
        be = "inductor"
    compiled = _run(blk, torch.compile(blk, fullgraph=True, backend=be), x, gy)
    return eager, compiled, graphs


def _close(got, want, msg=None):
    # Inductor reorders fp32 sums (and the order depends on the CPU's vector width: the CI
    # machine's differs from ours), so an element near zero of a gradient whose entries reach
    # ~20 can be off by a few 1e-6: the absolute tolerance is relative to the tensor's scale. A
    # wrong gradient is off by O(scale), four orders of magnitude above it.
    scale = max(1.0, want.abs().max().item())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=2e-5 * scale, msg=msg)


def _check_numbers(results):
    for (ey, edx, eg), (cy, cdx, cg), _ in results:
        _close(cy, ey)
        _close(cdx, edx)
        assert set(cg) == set(eg) and len(eg) == 6  # norms, wqkv, wo, w13, w2
        for n in eg:
            _close(cg[n], eg[n], msg=n)


def _data():
    ref = snn.ReferenceBlock(DIM, HQ, HKV, FFN, head_dim=HD, seed=4)
    with torch.no_grad():  # random norm weights: a ones weight would hide a wrong gradient
        ref.attn_norm.normal_()
        ref.ffn_norm.normal_()
    g = torch.Generator().manual_seed(9)
    return ref.state_dict(), torch.randn(SEQ, BATCH, DIM, generator=g), \
        torch.randn(SEQ, BATCH, DIM, generator=g)


#: what each layout's traced graphs must hold: the fused ops, forward and backward
EXPECTED = {
    "tp": ({OPS.ag_gemm.default: 2, OPS.gemm_rs.default: 2},
           # ag_gemm's dA is a gemm_rs, gemm_rs's an ag_gemm
           {OPS.ag_gemm.default: 2, OPS.gemm_rs.default: 2}),
    "cp": ({OPS.ring_attention.default: 1}, {OPS.ring_attention_backward.default: 1}),
    "cp-ulysses": ({OPS.ulysses_attention.default: 1},
                   {OPS.ulysses_attention_backward.default: 1}),
}


@pytest.mark.parametrize("layout", list(EXPECTED))
def test_block_traces_into_one_graph_with_the_fused_ops(layout):
    state, x, gy = _data()
    results = _ranks(_compile_rank, layout, "graphs", state, x, gy)
    _check_numbers(results)
    fw_want, bw_want = EXPECTED[layout]
    for _, _, graphs in results:
        assert len(graphs["dynamo"]) == 1  # one graph (fullgraph=True: a break would raise)
        (fw,), (bw,) = graphs["fw"], graphs["bw"]
        assert {t: fw.count(t) for t in fw_want} == fw_want
        assert {t: bw.count(t) for t in bw_want} == bw_want
        assert not [t for t in fw + bw if getattr(t, "namespace", "") == "_c10d_functional"]


@pytest.mark.parametrize("layout", list(EXPECTED))
def test_block_compiles_with_inductor_and_matches_eager(layout):
    state, x, gy = _data()
    _check_numbers(_ranks(_compile_rank, layout, "inductor", state, x, gy))
