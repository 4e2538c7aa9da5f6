"""A ``torch.compile`` (Inductor post-grad) pass: plain-PyTorch all-gather + matmul and matmul +
reduce-scatter become the fused ops. Off by default; :func:`enable_fusion_pass` turns it on.

Why a pass: tensor-parallel code is usually written with functional collectives
(``funcol.all_gather_tensor(x, 0, group) @ w``, ``funcol.reduce_scatter_tensor(x @ w, "sum",
0, group)``, or what DTensor emits), not with our ops. Dynamo and AOT autograd turn those into

    ag = torch.ops._c10d_functional.all_gather_into_tensor(shard, W, group_name)
    a  = torch.ops._c10d_functional.wait_tensor(ag)
    c  = torch.ops.aten.mm(a, b)

    p  = torch.ops.aten.mm(a, b)
    rs = torch.ops._c10d_functional.reduce_scatter_tensor(p, "sum", W, group_name)
    c  = torch.ops._c10d_functional.wait_tensor(rs)

in the forward and the backward graphs alike, and this pass rewrites them to
``torch.ops.syncopate.ag_gemm`` / ``gemm_rs``.

Conventions of PyTorch's own async-TP pass (``torch/_inductor/fx_passes/micro_pipeline_tp.py``),
followed here: it runs as a post-grad pass on the ATen graph (after AOT autograd, so the
forward and backward graphs are rewritten independently and autograd never sees the fused
ops); the fused all-gather op returns the gathered ``A`` (``return_A`` there, ``return_a``
here), which replaces every other use of the all-gather (so one gather serves them all, other
matmuls on it included), and ``return_a`` is switched off when nothing reads it; the fused node
goes where the all-gather was, and the ancestors of ``B`` that came later are moved above it;
a matmul whose result has users besides the reduce-scatter is left alone (the fused op does not
return the partial product); a reduce-scatter saved for backward (an output of the forward
graph) is replaced by the fused result there too. What is different: only 2-D ``aten.mm`` with
the gather/scatter on dim 0 and the ``sum`` reduction (what the fused kernels compute), and no
symmetric-memory opt-in per group -- the ops allocate their own symmetric buffers.

Every pattern that is seen and left alone is recorded with the reason (:func:`last_report`), so
"why did my all-gather not fuse?" has an answer.
"""

from __future__ import annotations

import logging
import operator
import os
import sys
from dataclasses import dataclass, field

import torch

from .. import settings
from ..errors import LaunchError, TorchOpError
from ..ops import REGISTRY
from . import library  # noqa: F401  (registers torch.ops.syncopate.*)

log = logging.getLogger(__name__)
aten = torch.ops.aten

@dataclass
class FusionReport:
    """What one run of the pass did: fused patterns by op, and every pattern it left alone
    with the reason."""

    ag_gemm: int = 0
    gemm_rs: int = 0
    skipped: list = field(default_factory=list)


_LAST: list = [FusionReport()]


def last_report() -> FusionReport:
    """The report of the pass's most recent run (Inductor runs it once per graph: forward,
    then backward)."""
    return _LAST[0]


def _c10d():
    return torch.ops._c10d_functional


def _val(node):
    v = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _ancestors(node) -> set:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        for i in n.all_input_nodes:
            if i not in seen:
                seen.add(i)
                todo.append(i)
    return seen


#: dtypes the fused kernels take on CUDA (the TMA GEMM of syncopate.kernels)
CUDA_DTYPES = (torch.bfloat16, torch.float16)


def operands_problem(va, vb) -> str | None:
    """Why the fused op cannot take ``va @ vb`` (traced values of its operands), or None.

    On CUDA the pass only rewrites what the fused kernels take -- bf16/fp16, rows of ``A``
    (``K``) and of ``B`` and ``C`` (``N``) 16-byte aligned for TMA, ``K`` and ``N`` static (a
    weight's dims) -- so that turning the pass on never turns a working model into one that
    raises at its first launch. Elsewhere (CPU) the ops run their unfused composition, which
    takes anything ``torch.mm`` takes."""
    if va is None or vb is None:
        return "no traced shape (meta['val']) on the operands"
    if va.dim() != 2 or vb.dim() != 2:
        return f"operands are {va.dim()}-D and {vb.dim()}-D; the fused ops take 2-D matrices"
    if va.dtype != vb.dtype:
        return f"operand dtypes differ ({va.dtype}, {vb.dtype})"
    if va.device != vb.device:
        return f"operands on different devices ({va.device}, {vb.device})"
    if va.device.type == "cuda":
        if va.dtype not in CUDA_DTYPES:
            return f"{va.dtype} on CUDA; the fused kernels take bfloat16 or float16"
        for what, n in (("K", va.shape[1]), ("N", vb.shape[1])):
            if not isinstance(n, int):
                return f"{what} is dynamic ({n}); the pass needs it static to check TMA alignment"
            if (n * va.element_size()) % 16:
                return (f"{what} = {n}: rows of {n * va.element_size()} bytes are not a multiple "
                        f"of 16 (TMA)")
    return None


def _operands_problem(a, b) -> str | None:
    return operands_problem(_val(a), _val(b))


def _set_meta(node) -> None:
    """``meta['val']`` of a new node from the op's fake implementation, so later passes (and
    Inductor's lowering) see shapes; left unset when the graph carries no fake values."""
    args = [(_val(a) if isinstance(a, torch.fx.Node) else a) for a in node.args]
    if any(isinstance(a, torch.fx.Node) and _val(a) is None for a in node.args):
        return
    from torch._guards import detect_fake_mode
    try:
        mode = detect_fake_mode([a for a in args if isinstance(a, torch.Tensor)])
    except AssertionError:  # values from several fake modes (e.g. make_fx tracing_mode="real")
        return
    if mode is None:
        return
    with mode:
        node.meta["val"] = node.target(*args, **node.kwargs)


def _getitem(graph, node, i):
    g = graph.call_function(operator.getitem, (node, i))
    if "val" in node.meta:
        g.meta["val"] = node.meta["val"][i]
    return g


def _fuse_all_gather(graph, ag, report) -> None:
    c10d = _c10d()
    shard, _group_size, group_name = ag.args[:3]
    waits = [u for u in ag.users if u.target is c10d.wait_tensor.default]
    if len(waits) != 1:
        report.skipped.append((ag.name, f"{len(waits)} wait_tensor users; expected one"))
        return
    wait = waits[0]
    # matmuls reading the gathered A as their left operand, whose B does not depend on it
    mms = [u for u in wait.users if u.target is aten.mm.default and u.args[0] is wait
           and wait not in _ancestors(u.args[1]) and u.args[1] is not wait]
    if not mms:
        report.skipped.append((ag.name, "no aten.mm reads the gathered tensor as its left operand"))
        return
    mm = mms[0]
    problem = _operands_problem(shard, mm.args[1])
    if problem is not None:
        report.skipped.append((ag.name, problem))
        return
    b = mm.args[1]
    with graph.inserting_before(ag):
        fused = graph.call_function(torch.ops.syncopate.ag_gemm.default, (shard, b, group_name),
                                    {"return_a": True})
        _set_meta(fused)
        out = _getitem(graph, fused, 0)
        full = _getitem(graph, fused, 1)
    # B (and what it is computed from) may come after the all-gather: move it above the fused
    # node, in its order (its ancestors are not downstream of the all-gather: checked above)
    order = {n: i for i, n in enumerate(graph.nodes)}
    late = sorted((n for n in _ancestors(b) | {b} if n.op != "placeholder"
                   and order[n] > order[fused]), key=order.__getitem__)
    for n in late:
        fused.prepend(n)
    mm.replace_all_uses_with(out)
    graph.erase_node(mm)
    wait.replace_all_uses_with(full)  # other matmuls and readers share the one gather
    graph.erase_node(wait)
    ag.replace_all_uses_with(full)  # e.g. the un-waited tensor saved for backward
    graph.erase_node(ag)
    if not full.users:
        graph.erase_node(full)
        fused.kwargs = {"return_a": False}
        _set_meta(fused)
        if "val" in fused.meta:
            out.meta["val"] = fused.meta["val"][0]
    report.ag_gemm += 1


def _fuse_reduce_scatter(graph, rs, report) -> None:
    c10d = _c10d()
    inp, reduce_op, _group_size, group_name = rs.args[:4]
    if str(reduce_op).lower() != "sum":
        report.skipped.append((rs.name, f"reduce_op {reduce_op!r}; the fused op sums"))
        return
    if not (isinstance(inp, torch.fx.Node) and inp.target is aten.mm.default):
        report.skipped.append((rs.name, "its input is not an aten.mm"))
        return
    if set(inp.users) != {rs}:
        report.skipped.append((rs.name, "the matmul result has other users; the fused op does "
                                        "not return the partial product"))
        return
    a, b = inp.args[:2]
    problem = _operands_problem(a, b)
    if problem is not None:
        report.skipped.append((rs.name, problem))
        return
    waits = [u for u in rs.users if u.target is c10d.wait_tensor.default]
    others = [u for u in rs.users if u.target is not c10d.wait_tensor.default and u.op != "output"]
    if len(waits) != 1 or others:
        report.skipped.append((rs.name, "expected one wait_tensor user (and the graph output)"))
        return
    with graph.inserting_before(rs):
        fused = graph.call_function(torch.ops.syncopate.gemm_rs.default, (a, b, group_name))
        _set_meta(fused)
    waits[0].replace_all_uses_with(fused)
    graph.erase_node(waits[0])
    rs.replace_all_uses_with(fused)  # saved for backward: the fused result, already complete
    graph.erase_node(rs)
    graph.erase_node(inp)
    report.gemm_rs += 1


def fuse_collective_matmuls(graph: torch.fx.Graph) -> FusionReport:
    """Rewrite every fusible ``all_gather_into_tensor`` -> ``wait_tensor`` -> ``mm`` and
    ``mm`` -> ``reduce_scatter_tensor`` -> ``wait_tensor`` in ``graph`` (in place) into the
    fused ops; returns (and keeps, :func:`last_report`) what it did."""
    report = FusionReport()
    c10d = _c10d()
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is c10d.all_gather_into_tensor.default:
            _fuse_all_gather(graph, node, report)
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target is c10d.reduce_scatter_tensor.default:
            _fuse_reduce_scatter(graph, node, report)
    if report.ag_gemm or report.gemm_rs:
        graph.lint()
    for name, why in report.skipped:
        log.debug("syncopate fusion pass: left %s alone: %s", name, why)
    _LAST[0] = report
    return report


# ------------------------------------------------------------------------------------------
# The switch
# ------------------------------------------------------------------------------------------

def _pass_class():
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class SyncopateFusionPass(CustomGraphPass):
        """The pass as Inductor's ``post_grad_custom_post_pass``; ``uuid`` hashes this file and
        the op definitions so Inductor's FX graph cache is keyed on them (a cached graph
        compiled without the pass is not reused with it, or after the pass changed)."""

        def __call__(self, graph: torch.fx.Graph) -> None:
            fuse_collective_matmuls(graph)

        def uuid(self) -> bytes:
            here = os.path.dirname(os.path.abspath(__file__))
            ops = sorted(sys.modules[s.fn.__module__].__file__ for s in REGISTRY.values()
                         if s.torch is not None)  # the ops' definitions (OpSpec.torch)
            return get_hash_for_files((os.path.join(here, "fx_pass.py"),
                                       os.path.join(here, "library.py"), *ops))

    return SyncopateFusionPass


_INSTANCE: list = []


def _instance():
    if not _INSTANCE:
        _INSTANCE.append(_pass_class()())
    return _INSTANCE[0]


def _current_passes() -> list:
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import get_custom_graph_passes
    return list(get_custom_graph_passes(config.post_grad_custom_post_pass))


def _set_passes(passes: list) -> None:
    from torch._inductor import config
    config.post_grad_custom_post_pass = (None if not passes else passes[0] if len(passes) == 1
                                         else passes)


def enable_fusion_pass() -> None:
    """Run the pass in every later ``torch.compile`` (Inductor backend) of this process. Other
    post-grad custom passes already set are kept (it is appended after them); idempotent."""
    passes = _current_passes()
    if not any(p is _instance() for p in passes):
        _set_passes(passes + [_instance()])


def disable_fusion_pass() -> None:
    """Stop running the pass (other custom passes stay); idempotent. Graphs already compiled
    keep what they were compiled with: ``torch._dynamo.reset()`` to recompile."""
    _set_passes([p for p in _current_passes() if p is not _instance()])


def fusion_pass_enabled() -> bool:
    return any(p is _instance() for p in _current_passes())


def enable_from_env(env=None) -> bool:
    """Enable the pass when ``SYNCOPATE_TORCH_FUSION`` is on (:mod:`syncopate.settings`); a
    value that is not a switch is an error (a typo must not silently leave the pass off)."""
    try:
        on = settings.TORCH_FUSION.get(env)
    except LaunchError as e:
        raise TorchOpError(str(e)) from None
    if on:
        enable_fusion_pass()
    return on
