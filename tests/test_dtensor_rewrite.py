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
