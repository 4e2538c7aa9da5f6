"""torch.compile and the fusion pass on the CPU, with torch's fake process group (no
communication: shapes and graphs) or a one-rank gloo group (numbers).

* a model calling syncopate.torch_ops traces with fullgraph=True into one graph, and AOT
  autograd's backward graph holds the other fused op (ag_gemm's gradient is a gemm_rs and
  gemm_rs's an ag_gemm);
* fuse_collective_matmuls rewrites the functional-collective patterns that make_fx / AOT
  autograd produce, leaves the others alone with a reason, and the rewritten graph computes
  what the original did;
* enable_fusion_pass() makes Inductor run it on the forward and backward graphs of plain
  funcol code.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

if not dist.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

import syncopate.torch_ops as sto  # noqa: E402
from syncopate.torch_ops import fx_pass  # noqa: E402

OPS = torch.ops.syncopate
C10D = torch.ops._c10d_functional


@contextlib.contextmanager
def process_group(backend: str, world_size: int):
    """torch's default group for one test: ``fake`` (FakeStore; rank 0 of ``world_size``) or
    ``gloo`` on one rank (HashStore); destroyed after, with Dynamo's caches, which hold the
    group's name."""
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


def _targets(gm_or_graph):
    graph = getattr(gm_or_graph, "graph", gm_or_graph)
    return [n.target for n in graph.nodes if n.op == "call_function"]


def _funcol_mlp(pg):
    def mlp(x, w1, w2):
        a = funcol.all_gather_single(x, 0, pg)
        h = torch.relu(a @ w1)
        return funcol.reduce_scatter_single(h @ w2, "sum", 0, pg)
    return mlp


# ------------------------------------------------------------------------------------------
# tracing the ops
# ------------------------------------------------------------------------------------------

class TPMLP(torch.nn.Module):
    """Tensor-parallel MLP on this rank: sequence-sharded x -> ag_gemm (column-parallel w1)
    -> gelu -> gemm_rs (row-parallel w2)."""

    def __init__(self, k, h, group_name):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(k, h))
        self.w2 = torch.nn.Parameter(torch.randn(h, k))
        self.group_name = group_name

    def forward(self, x):
        h = torch.nn.functional.gelu(sto.ag_gemm(x, self.w1, self.group_name))
        return sto.gemm_rs(h, self.w2, self.group_name)


def test_fullgraph_trace_and_backward_uses_the_other_fused_op():
    from torch._dynamo.backends.common import aot_autograd

    graphs = {"dynamo": [], "fw": [], "bw": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm)
            return gm.forward if kind != "dynamo" else backend(gm, example_inputs)
        return compiler

    backend = aot_autograd(fw_compiler=keep("fw"), bw_compiler=keep("bw"))
    with process_group("fake", 4) as pg:
        model = TPMLP(16, 32, sto.group_name(pg))
        x = torch.randn(6, 16, requires_grad=True)
        y = torch.compile(model, fullgraph=True, backend=keep("dynamo"))(x)
        assert tuple(y.shape) == (6, 16)  # [M/W, K] with M = 4 * 6
        y.sum().backward()
        assert tuple(model.w1.grad.shape) == (16, 32) and tuple(x.grad.shape) == (6, 16)
    assert len(graphs["dynamo"]) == 1  # one graph, no break
    fw, bw = _targets(graphs["fw"][0]), _targets(graphs["bw"][0])
    assert fw.count(OPS.ag_gemm.default) == 1 and fw.count(OPS.gemm_rs.default) == 1
    ag = next(n for n in graphs["fw"][0].graph.nodes if n.target is OPS.ag_gemm.default)
    assert ag.args[3] is True or ag.kwargs.get("return_a") is True  # gathered A kept for dW1
    # backward: gemm_rs's dA is an ag_gemm, ag_gemm's dA a gemm_rs; no plain collectives
    assert bw.count(OPS.ag_gemm.default) == 1 and bw.count(OPS.gemm_rs.default) == 1
    assert not [t for t in fw + bw if getattr(t, "namespace", "") == "_c10d_functional"]


def test_group_object_or_default_group_traces_to_the_name():
    """Inside fullgraph compile the wrappers also take a ProcessGroup or None: Dynamo folds the
    group to its name, a constant argument of the op node."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    with process_group("fake", 2) as pg:
        for group in (pg, None):
            y = torch.compile(lambda x, w: sto.gemm_rs(x, w, group), fullgraph=True,
                              backend=backend)(torch.randn(4, 3), torch.randn(3, 5))
            assert tuple(y.shape) == (2, 5)
        want = pg.group_name
    for gm in graphs:
        (node,) = [n for n in gm.graph.nodes if n.target in (OPS.gemm_rs, OPS.gemm_rs.default)]
        assert node.args[2] == want


# ------------------------------------------------------------------------------------------
# the pass on traced graphs
# ------------------------------------------------------------------------------------------

def _trace(fn, *shapes, mode="fake"):
    g = torch.Generator().manual_seed(0)
    args = [torch.randn(*s, generator=g) for s in shapes]
    return make_fx(fn, tracing_mode=mode)(*args), args


def test_pass_rewrites_both_patterns_and_shares_one_gather():
    with process_group("fake", 4) as pg:
        def f(x, w, v):
            a = funcol.all_gather_single(x, 0, pg)
            h = a @ (w * 2)  # B computed after the gather: moved above the fused op
            k = a @ v  # a second matmul on the same gather reads the fused op's gathered A
            return h, k, a.sum(), funcol.reduce_scatter_single(h @ w.t(), "sum", 0, pg)

        gm, _ = _trace(f, (2, 8), (8, 6), (8, 3))
        before = _targets(gm)
        assert C10D.all_gather_into_tensor.default in before
        report = sto.fuse_collective_matmuls(gm.graph)
    after = _targets(gm)
    assert (report.ag_gemm, report.gemm_rs, report.skipped) == (1, 1, [])
    assert sto.last_report() is report
    assert after.count(OPS.ag_gemm.default) == 1 and after.count(OPS.gemm_rs.default) == 1
    assert after.count(torch.ops.aten.mm.default) == 1  # only `a @ v`, on the gathered A
    assert not [t for t in after if getattr(t, "namespace", "") == "_c10d_functional"]
    fused = next(n for n in gm.graph.nodes if n.target is OPS.ag_gemm.default)
    assert fused.kwargs == {"return_a": True}
    assert tuple(fused.meta["val"][0].shape) == (8, 6)  # fake value: [W * 2, 6]


def test_pass_turns_return_a_off_when_nothing_reads_the_gather():
    with process_group("fake", 2) as pg:
        gm, _ = _trace(lambda x, w: funcol.all_gather_single(x, 0, pg) @ w, (3, 4), (4, 5))
        sto.fuse_collective_matmuls(gm.graph)
    (node,) = [n for n in gm.graph.nodes if n.target is OPS.ag_gemm.default]
    assert node.kwargs == {"return_a": False}
    assert [n.args[1] for n in gm.graph.nodes if n.op == "call_function"
            and n.target.__name__ == "getitem"] == [0]


def test_pass_leaves_unfusible_patterns_with_reasons():
    with process_group("fake", 2) as pg:
        def f(x, w, y):
            p = x @ w
            avg = funcol.reduce_scatter_single(y @ w, "avg", 0, pg)  # not a sum
            shared = funcol.reduce_scatter_single(p, "sum", 0, pg)  # p is also returned
            g = funcol.all_gather_single(x, 0, pg)
            return p, avg, shared, g.sum()  # gathered, but no matmul reads it

        gm, _ = _trace(f, (4, 6), (6, 4), (4, 6))
        report = sto.fuse_collective_matmuls(gm.graph)
    assert (report.ag_gemm, report.gemm_rs) == (0, 0)
    reasons = " | ".join(why for _, why in report.skipped)
    assert "reduce_op 'avg'" in reasons
    assert "other users" in reasons
    assert "no aten.mm reads the gathered tensor" in reasons
    assert not [t for t in _targets(gm) if getattr(t, "namespace", "") == "syncopate"]


def test_pass_rewrites_on_cuda_only_what_the_fused_kernels_take():
    """Fake CUDA values (no GPU needed): bf16/fp16 with 16-byte rows pass; fp32 and ragged rows
    are left alone, so enabling the pass cannot make a model fail at launch. On the CPU any
    operands go (a symbolic-shape graph too)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()):
        def t(*shape, dtype=torch.bfloat16, device="cuda"):
            return torch.empty(*shape, dtype=dtype, device=device)
        assert fx_pass.operands_problem(t(4, 64), t(64, 24)) is None
        assert fx_pass.operands_problem(t(4, 64, dtype=torch.half), t(64, 8, dtype=torch.half)) is None
        assert "float32 on CUDA" in fx_pass.operands_problem(t(4, 64, dtype=torch.float32),
                                                             t(64, 24, dtype=torch.float32))
        assert "K = 60" in fx_pass.operands_problem(t(4, 60), t(60, 24))
        assert "N = 20" in fx_pass.operands_problem(t(4, 64), t(64, 20))
        assert fx_pass.operands_problem(t(4, 60, device="cpu"), t(60, 20, device="cpu")) is None
    with process_group("fake", 2) as pg:
        def f(x, w):
            return funcol.all_gather_single(x, 0, pg) @ w
        gm = make_fx(f, tracing_mode="symbolic")(torch.randn(4, 64), torch.randn(64, 24))
        # CPU values: dynamic dims are fine there (the unfused composition takes them)
        assert sto.fuse_collective_matmuls(gm.graph).ag_gemm == 1


def test_rewritten_graph_computes_what_the_original_did():
    """On a real (one-rank gloo) group: the original graph and the rewritten one give the same
    numbers, forward and backward (AOT autograd's joint graph, rewritten as a whole)."""
    with process_group("gloo", 1) as pg:
        def f(x, w, v):
            a = funcol.all_gather_single(x, 0, pg)
            h = torch.tanh(a @ w)
            return funcol.reduce_scatter_single(h @ v, "sum", 0, pg), a.sum()

        gm, args = _trace(f, (5, 8), (8, 6), (6, 8), mode="real")
        want = gm(*args)
        report = sto.fuse_collective_matmuls(gm.graph)
        gm.recompile()
        got = gm(*args)
    assert (report.ag_gemm, report.gemm_rs) == (1, 1)
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------------------------------------
# the switch, through Inductor
# ------------------------------------------------------------------------------------------

def test_switch_runs_the_pass_in_inductor_forward_and_backward():
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import CustomGraphPass

    seen = []

    class Record(CustomGraphPass):
        """Runs after the fusion pass: the post-grad graphs Inductor lowers."""

        def __call__(self, graph):
            seen.append(_targets(graph))

        def uuid(self):
            return b"syncopate-test-record"

    saved = config.post_grad_custom_post_pass
    try:
        config.post_grad_custom_post_pass = None
        assert not sto.fusion_pass_enabled()
        sto.enable_fusion_pass()
        sto.enable_fusion_pass()  # idempotent
        assert sto.fusion_pass_enabled()
        config.post_grad_custom_post_pass = fx_pass._current_passes() + [Record()]
        with process_group("fake", 2) as pg:
            x = torch.randn(4, 8, requires_grad=True)
            w1 = torch.randn(8, 6, requires_grad=True)
            w2 = torch.randn(6, 8, requires_grad=True)
            with torch._inductor.config.patch(fx_graph_cache=False):
                y = torch.compile(_funcol_mlp(pg), fullgraph=True)(x, w1, w2)
                y.sum().backward()
        assert tuple(y.shape) == (4, 8) and tuple(w1.grad.shape) == (8, 6)
        assert len(seen) == 2  # forward, backward
        for targets in seen:
            assert OPS.ag_gemm.default in targets and OPS.gemm_rs.default in targets
            assert not [t for t in targets if getattr(t, "namespace", "") == "_c10d_functional"]
        sto.disable_fusion_pass()
        assert not sto.fusion_pass_enabled()
        assert [type(p).__name__ for p in fx_pass._current_passes()] == ["Record"]
    finally:
        config.post_grad_custom_post_pass = saved


def test_env_switch():
    from torch._inductor import config
    saved = config.post_grad_custom_post_pass
    try:
        config.post_grad_custom_post_pass = None
        assert fx_pass.enable_from_env({}) is False and not sto.fusion_pass_enabled()
        assert fx_pass.enable_from_env({"SYNCOPATE_TORCH_FUSION": "0"}) is False
        with pytest.raises(sto.TorchOpError, match="use 1 to enable"):
            fx_pass.enable_from_env({"SYNCOPATE_TORCH_FUSION": "yes please"})
        assert fx_pass.enable_from_env({"SYNCOPATE_TORCH_FUSION": "1"}) is True
        assert sto.fusion_pass_enabled()
    finally:
        config.post_grad_custom_post_pass = saved
