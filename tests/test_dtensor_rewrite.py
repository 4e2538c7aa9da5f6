"""The compile pass on torch's own tensor parallelism: a Llama-style block parallelised with
DTensor (``parallelize_module``: ColwiseParallel / RowwiseParallel plans, SequenceParallel
norms; syncopate.bench.dtensor_block) and compiled by Inductor with
``syncopate.torch_ops.enable_fusion_pass()`` -- on the CPU, gloo, two processes.

What must hold: the pass recognises what DTensor's plans lower to (all_gather_into_tensor ->
wait_tensor -> reshape -> mm; mm -> reshape -> reduce_scatter_tensor -> wait_tensor) and
rewrites them into torch.ops.syncopate.* -- its report names each rewrite (op, nodes, M/N/K)
and each collective it left alone with the reason -- and the rewritten block computes what
the un-rewritten one does: output and every gradient, against the same block compiled
without the pass (the same Inductor kernels around the matmuls: equal to float rounding of a
reordered sum) and against eager DTensor.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("this torch has no gloo process group", allow_module_level=True)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "gpu"))

from dist_harness import run_ranks  # noqa: E402

import contextlib  # noqa: E402

import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import syncopate.torch_ops as sto  # noqa: E402
from syncopate.ops import REGISTRY  # noqa: E402
from syncopate.ops.spec import FxPattern, OpSpec, TorchOp  # noqa: E402

OPS = torch.ops.syncopate
W = 2
#: (S, B, dim, heads, KV heads, MLP width): B = 2 so the views around the matmuls are real
#: reshapes of 3-D activations; every dim distinct, so a wrong M/N/K shows in the report
S, B, D, H, KV, F = 8, 2, 32, 4, 2, 48
HD = D // H


def _rank(rank, world_size):
    """One rank: the block eager, compiled without the pass and compiled with it; output,
    input gradient and this rank's parameter-gradient shards of each, and the pass's report
    for every graph it ran on (forward, backward)."""
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass
    from torch.distributed.device_mesh import init_device_mesh

    import syncopate.torch_ops as sto
    from syncopate.bench.dtensor_block import dtensor_block

    mesh = init_device_mesh("cpu", (world_size,))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(S, B, D, generator=g)
    gy = torch.randn(S, B, D, generator=g)
    rows = slice(rank * S // world_size, (rank + 1) * S // world_size)
    reports = []

    class Record(CustomGraphPass):
        """Runs after the fusion pass on each graph Inductor lowers: its report, and which
        graph it was (AOT autograd names the backward's incoming gradients tangents_*)."""

        def __call__(self, graph):
            bw = any(n.op == "placeholder" and n.name.startswith("tangents")
                     for n in graph.nodes)
            reports.append(("backward" if bw else "forward", sto.last_report()))

        def uuid(self):
            return b"syncopate-test-dtensor-record"

    def run(mode):
        block = dtensor_block(D, H, KV, F, mesh, seed=3)
        xs = x[rows].clone().requires_grad_()
        fn = block
        if mode != "eager":
            torch._dynamo.reset()
            fn = torch.compile(block, fullgraph=True)
        y = fn(xs)
        (y * gy[rows]).sum().backward()
        grads = {n: p.grad.to_local().clone() for n, p in block.named_parameters()}
        return y.detach(), xs.grad, grads

    out = {"eager": run("eager")}
    saved = config.post_grad_custom_post_pass
    with config.patch(fx_graph_cache=False):  # a cache hit would skip the pass
        try:
            config.post_grad_custom_post_pass = None
            out["compiled"] = run("compiled")
            sto.enable_fusion_pass()
            config.post_grad_custom_post_pass = [*sto.fx_pass._current_passes(), Record()]
            out["rewritten"] = run("rewritten")
        finally:
            config.post_grad_custom_post_pass = saved
    return out, reports


@pytest.fixture(scope="module")
def ranks():
    return run_ranks(_rank, world_size=W, timeout=900, pg_backend="gloo")


def _by_graph(reports):
    graphs = dict(reports)
    assert sorted(graphs) == ["backward", "forward"] and len(reports) == 2
    return graphs["forward"], graphs["backward"]


def test_report_lists_the_expected_rewrites(ranks):
    M = S * B  # the gathered rows: the whole sequence, flattened with the batch
    for _, reports in ranks:
        fw, bw = _by_graph(reports)
        # forward: one gather per PrepareModuleInput, fused with its widest projection (wq;
        # w1 and w3 are equally wide: the first); wo and w2 into their reduce-scatters
        assert sorted((r.op, r.mnk) for r in fw.rewrites) == sorted([
            ("ag_gemm", (M, H // W * HD, D)), ("ag_gemm", (M, F // W, D)),
            ("gemm_rs", (M, D, H // W * HD)), ("gemm_rs", (M, D, F // W))])
        assert fw.skipped == []
        assert (fw.ag_gemm, fw.gemm_rs) == (2, 2)
        # backward: the gathered output gradients times wo and w2 (dX of the row-parallel
        # layers); the column-parallel layers' dX is a reduce-scatter of a sum of matmuls
        # (q + k + v, w1 + w3), which the fused op does not compute: left alone, said why
        assert sorted((r.op, r.mnk) for r in bw.rewrites) == sorted([
            ("ag_gemm", (M, H // W * HD, D)), ("ag_gemm", (M, F // W, D))])
        assert len(bw.skipped) == 2
        assert all("aten.add.Tensor, not an aten.mm" in why for _, why in bw.skipped)
        for r in fw.rewrites + bw.rewrites:  # the report names the nodes it replaced
            assert r.collective.startswith(("all_gather_into_tensor", "reduce_scatter_tensor"))
            assert r.matmul.startswith("mm") and r.node
        lines = fw.lines() + bw.lines()
        assert sum("-> syncopate.ag_gemm" in line for line in lines) == 4
        assert sum("left alone" in line for line in lines) == 2


def test_rewritten_block_computes_what_the_unrewritten_one_does(ranks):
    for out, _ in ranks:
        (y, dx, grads), (cy, cdx, cgrads), (ey, edx, egrads) = (
            out["rewritten"], out["compiled"], out["eager"])
        assert set(grads) == set(cgrads) == set(egrads) and len(grads) == 9
        # same Inductor kernels around the matmuls; the fused op's CPU path is the gather (or
        # scatter) and torch.mm: only the summation order of a reduction may differ
        torch.testing.assert_close(y, cy, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(dx, cdx, rtol=1e-5, atol=1e-5)
        for n in grads:
            torch.testing.assert_close(grads[n], cgrads[n], rtol=1e-5, atol=1e-5, msg=n)
        torch.testing.assert_close(y, ey, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(dx, edx, rtol=1e-4, atol=1e-4)
        for n in grads:
            torch.testing.assert_close(grads[n], egrads[n], rtol=1e-4, atol=1e-4, msg=n)


# ------------------------------------------------------------------------------------------
# the pass's view handling on traced graphs (fast: make_fx, one process)
# ------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _group(backend, world_size):
    """torch's default group for one test: ``fake`` (shapes only) or one-rank ``gloo``."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process")
    if backend == "fake":
        from torch.testing._internal.distributed.fake_pg import FakeStore
        store = FakeStore()
    else:
        store = dist.HashStore()
    dist.init_process_group(backend, store=store, rank=0, world_size=world_size)
    try:
        yield dist.group.WORLD
    finally:
        torch._dynamo.reset()
        dist.destroy_process_group()


def _linear_3d(pg):
    """What F.linear on DTensor's sequence-sharded [S, B, K] activations leaves: the gather,
    views flattening the leading dims for the matmuls and restoring them for the scatter; the
    gathered tensor also read unflattened (a residual, say), and two matmuls on the gather,
    the wider second."""
    def f(x, w_narrow, w_wide, v):
        a = funcol.all_gather_single(x, 0, pg)                 # [S, B, K]
        flat = a.reshape(-1, a.shape[-1])                       # [S*B, K]
        n = flat @ w_narrow
        h = torch.tanh(flat @ w_wide)                           # the widest: fused
        p = (h @ v).reshape(a.shape[0], a.shape[1], -1)         # [S, B, K]
        return n, a.sum(dim=1), funcol.reduce_scatter_single(p, "sum", 0, pg)
    return f


def _args(W_):
    g = torch.Generator().manual_seed(2)
    return [torch.randn(*s, generator=g) for s in ((3, 2, 8), (8, 4), (8, 12), (12, 8))]


def test_pass_takes_the_views_into_the_pattern_and_restores_the_shape():
    with _group("fake", 4) as pg:
        gm = make_fx(_linear_3d(pg), tracing_mode="fake")(*_args(4))
        report = sto.fuse_collective_matmuls(gm.graph)
    assert report.skipped == [] and (report.ag_gemm, report.gemm_rs) == (1, 1)
    (ag,) = [r for r in report.rewrites if r.op == "ag_gemm"]
    (rs,) = [r for r in report.rewrites if r.op == "gemm_rs"]
    assert ag.mnk == (4 * 3 * 2, 12, 8)  # the widest matmul; rows: gathered S times B
    assert rs.mnk == (4 * 3 * 2, 8, 12)
    nodes = {n.name: n for n in gm.graph.nodes}
    fused = nodes[ag.node]
    assert fused.target is OPS.ag_gemm.default and fused.kwargs == {"return_a": True}
    assert tuple(fused.args[0].meta["val"].shape) == (6, 8)  # the shard, flattened
    assert ag.collective not in nodes and ag.matmul not in nodes
    assert tuple(nodes[rs.node].meta["val"].shape) == (6, 8)  # [S*B/W, N]
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert not [t for t in targets if getattr(t, "namespace", "") == "_c10d_functional"]
    assert targets.count(torch.ops.aten.mm.default) == 1  # the narrow one, on the gathered A
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0]
    assert tuple(out[2].meta["val"].shape) == (3, 2, 8)  # the scattered [S/W, B, K] restored


def test_rewritten_views_compute_what_the_original_did():
    with _group("gloo", 1) as pg:
        args = _args(1)
        gm = make_fx(_linear_3d(pg), tracing_mode="real")(*args)
        want = gm(*args)
        report = sto.fuse_collective_matmuls(gm.graph)
        gm.recompile()
        got = gm(*args)
    assert (report.ag_gemm, report.gemm_rs) == (1, 1)
    for w, g in zip(want, got):
        assert w.shape == g.shape
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


def test_a_view_that_does_not_flatten_the_leading_dims_is_not_taken():
    """[S, B, K] -> [S, B*K] is not rows of the gathered matrix: left alone, with the reason
    and the readers it saw."""
    with _group("fake", 2) as pg:
        def f(x, w):
            a = funcol.all_gather_single(x, 0, pg)
            return a.reshape(a.shape[0], -1) @ w
        gm = make_fx(f, tracing_mode="fake")(torch.randn(3, 2, 4), torch.randn(8, 5))
        report = sto.fuse_collective_matmuls(gm.graph)
    assert report.rewrites == [] and len(report.skipped) == 1
    assert "no aten.mm reads the gathered tensor" in report.skipped[0][1]
    assert "its readers: aten.view.default" in report.skipped[0][1]
    assert "left alone" in report.lines()[0]


def test_patterns_the_pass_cannot_apply_are_refused(monkeypatch):
    """The patterns come from the registry; two ops with the same collective would make the
    rewrite depend on registration order, and an operand kind with no matcher would never
    match: both are errors."""
    t = REGISTRY["ag_gemm"].torch
    clash = OpSpec(name="ag_gemm_clash", fn=None, shape=("m",), variants=(),
                   torch=TorchOp(schema=t.schema, check=t.check, impl=t.impl, cuda=t.cuda,
                                 fake=t.fake, pattern=FxPattern("all_gather_into_tensor", "a")))
    monkeypatch.setitem(REGISTRY, "ag_gemm_clash", clash)
    with _group("fake", 2) as pg:
        gm = make_fx(lambda x, w: funcol.all_gather_single(x, 0, pg) @ w,
                     tracing_mode="fake")(torch.randn(3, 4), torch.randn(4, 5))
        with pytest.raises(sto.TorchOpError, match="'ag_gemm' and 'ag_gemm_clash' both claim"):
            sto.fuse_collective_matmuls(gm.graph)
        # an operand the pass has no matcher for is an error, not a pattern never matched
        odd = FxPattern("all_to_all_single", "b")
        monkeypatch.setitem(REGISTRY, "ag_gemm_clash", OpSpec(
            name="ag_gemm_clash", fn=None, shape=("m",), variants=(),
            torch=TorchOp(schema=t.schema, check=t.check, impl=t.impl, cuda=t.cuda,
                          fake=t.fake, pattern=odd)))
        with pytest.raises(sto.TorchOpError, match="FxPattern.operand 'b'"):
            sto.fuse_collective_matmuls(gm.graph)
