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
``torch.ops.syncopate.ag_gemm`` / ``gemm_rs``. What it matches is the registry's: each op
with a ``TorchOp.pattern`` (:class:`syncopate.ops.spec.FxPattern`: the collective, which
matmul operand it acts on) -- no table here.

DTensor's tensor parallelism (``parallelize_module`` with ``ColwiseParallel`` /
``RowwiseParallel`` and ``SequenceParallel``, activations ``[S, B, D]`` sharded on the
sequence, dim 0) lowers to the same collectives with views around the matmul, as ``F.linear``
on a 3-D input leaves them: ``wait -> reshape [S*B, D] -> mm`` and ``mm -> reshape [S, B, N]
-> reduce_scatter``. A view that flattens (or restores) the leading dims commutes with a
dim-0 gather or scatter (rank ``r``'s rows are the same rows either way), so the pass takes
the views as part of the pattern: the fused op gets the shard flattened to 2-D and its result
is viewed back. One gather read by several matmuls (DTensor's ``PrepareModuleInput`` gathers
once for ``wq``/``wk``/``wv``, once for ``w1``/``w3``) is fused with the widest of them; the
others read the gathered operand the op returns.

Conventions of PyTorch's own async-TP pass (``torch/_inductor/fx_passes/micro_pipeline_tp.py``),
followed here: it runs as a post-grad pass on the ATen graph (after AOT autograd, so the
forward and backward graphs are rewritten independently and autograd never sees the fused
ops); the fused all-gather op returns the gathered ``A`` (``return_A`` there, ``return_a``
here), which replaces every other use of the all-gather (so one gather serves them all, other
matmuls on it included), and ``return_a`` is switched off when nothing reads it; the fused node
goes where the all-gather was, and the ancestors of ``B`` that came later are moved above it;
a matmul whose result has users besides the reduce-scatter is left alone (the fused op does not
return the partial product); a reduce-scatter saved for backward (an output of the forward
graph) is replaced by the fused result there too. What is different: only ``aten.mm`` (2-D,
or 3-D+ through the flattening views) with the gather/scatter on dim 0 and the ``sum``
reduction (what the fused kernels compute); a reduce-scatter of a *sum* of matmuls (the input
gradient of ``wq``/``wk``/``wv`` or of ``w1``/``w3`` in the backward) is left alone; no
symmetric-memory opt-in per group -- the ops allocate their own symmetric buffers.

Every rewrite (the collective and matmul nodes, the op they became) and every collective left
alone, with the reason, is in the report (:func:`last_report`), so "what did the pass do, and
why did my all-gather not fuse?" has an answer.
"""

from __future__ import annotations

import functools
import logging
import operator
import os
import sys
from dataclasses import dataclass, field

import torch
from torch.fx.experimental.symbolic_shapes import statically_known_true

from .. import settings
from ..errors import LaunchError, TorchOpError
from ..ops import REGISTRY
from . import library  # noqa: F401  (registers torch.ops.syncopate.*)

log = logging.getLogger(__name__)
aten = torch.ops.aten


@dataclass(frozen=True)
class Rewrite:
    """One pattern the pass rewrote: the registered op it became, the nodes it replaced (the
    collective and the matmul, by their names in the graph it ran on), the new op node's name
    and the fused GEMM's ``M, N, K`` (sizes as traced; symbolic ones as their expressions)."""

    op: str
    collective: str
    matmul: str
    node: str
    mnk: tuple


@dataclass
class FusionReport:
    """What one run of the pass did: every rewrite (:class:`Rewrite`), and every collective it
    left alone with the reason. ``report.<op>`` (e.g. ``report.ag_gemm``) is the number of
    rewrites into that op, for every op with a pattern (``TorchOp.pattern``)."""

    rewrites: list = field(default_factory=list)
    skipped: list = field(default_factory=list)

    def count(self, op: str) -> int:
        return sum(r.op == op for r in self.rewrites)

    def __getattr__(self, name):
        if name in _patterns_by_op():
            return self.count(name)
        raise AttributeError(name)

    def lines(self) -> list[str]:
        """One line per rewrite and per collective left alone (what a user reads)."""
        return ([f"{r.collective} + {r.matmul} -> syncopate.{r.op} ({r.node}, M,N,K = "
                 f"{', '.join(str(d) for d in r.mnk)})" for r in self.rewrites]
                + [f"{name} left alone: {why}" for name, why in self.skipped])


_LAST: list = [FusionReport()]


def last_report() -> FusionReport:
    """The report of the pass's most recent run (Inductor runs it once per graph: forward,
    then backward; a graph loaded from Inductor's FX graph cache is not passed again)."""
    return _LAST[0]


def _c10d():
    return torch.ops._c10d_functional


def _patterns_by_op() -> dict:
    """op name -> its :class:`~syncopate.ops.spec.FxPattern`, for every registered op with one."""
    return {name: s.torch.pattern for name, s in REGISTRY.items()
            if s.torch is not None and s.torch.pattern is not None}


def _patterns() -> dict:
    """The collective's op overload -> ``(op name, pattern, the fused op's overload)``: the
    registry's patterns, resolved. Two ops claiming one collective would make the rewrite
    depend on registration order: refused."""
    out = {}
    for name, pat in _patterns_by_op().items():
        if pat.operand not in _MATCHERS:
            raise TorchOpError(f"op {name!r}: FxPattern.operand {pat.operand!r}; the pass "
                               f"rewrites 'a' (a gathered left operand) or 'c' (a scattered "
                               f"product)")
        target = getattr(_c10d(), pat.collective).default
        if target in out:
            raise TorchOpError(f"ops {out[target][0]!r} and {name!r} both claim "
                               f"{pat.collective}; give one pattern per collective")
        out[target] = (name, pat, getattr(torch.ops.syncopate, name).default)
    return out


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

#: the view ops between a collective and its matmul (what ``F.linear`` on a 3-D activation,
#: and DTensor's sharding of it, leave in a post-grad graph)
_RESHAPES = (aten.reshape.default, aten.view.default, aten._unsafe_view.default)


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


def _known(cond) -> bool:
    """True only when ``cond`` holds for every value of its symbols (no guard is added)."""
    return bool(statically_known_true(cond))


def _flattens(src, dst) -> bool:
    """``dst`` is ``src`` with its leading dims flattened: ``[d0, ..., K] -> [d0 * ..., K]``
    (a reshape to that shape, whatever the strides, reads the rows in this order)."""
    if src is None or dst is None or dst.dim() != 2 or src.dim() < 2:
        return False
    rows = 1
    for d in src.shape[:-1]:
        rows = rows * d
    return _known(dst.shape[1] == src.shape[-1]) and _known(dst.shape[0] == rows)


def _static_tail(v) -> list | None:
    """``[-1, *v.shape[1:]]`` -- the reshape that restores ``v``'s shape from its rows -- when
    those dims are static, else None."""
    tail = list(v.shape[1:])
    return [-1, *tail] if all(isinstance(d, int) for d in tail) else None


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


def _call(graph, target, args, kwargs=None):
    n = graph.call_function(target, args, kwargs or {})
    _set_meta(n)
    return n


def _getitem(graph, node, i):
    g = graph.call_function(operator.getitem, (node, i))
    if "val" in node.meta:
        g.meta["val"] = node.meta["val"][i]
    return g


def _mnk(a, b) -> tuple:
    va, vb = _val(a), _val(b)
    if va is None or vb is None:
        return ()
    return tuple(d if isinstance(d, int) else str(d) for d in (va.shape[0], vb.shape[1],
                                                               va.shape[1]))


def _fuse_gather(graph, ag, name, pat, op, report) -> str | None:
    """``all_gather(shard) -> wait -> [flatten] -> mm(., B)`` into ``op(shard2d, B)``; the
    gathered operand (2-D), returned by the op, replaces every other reader of the gather.
    Returns why the all-gather was left alone, or None."""
    c10d = _c10d()
    shard, _group_size, group_name = ag.args[:3]
    waits = [u for u in ag.users if u.target is c10d.wait_tensor.default]
    if len(waits) != 1:
        return f"{len(waits)} wait_tensor users; expected one"
    wait = waits[0]
    vw = _val(wait)
    # the gathered tensor as a matrix: itself when 2-D, or views flattening its leading dims
    flats = ([wait] if vw is not None and vw.dim() == 2 else []) + [
        u for u in wait.users if u.target in _RESHAPES and _flattens(vw, _val(u))]
    mms = [u for f in flats for u in f.users
           if u.target is aten.mm.default and u.args[0] is f and u.args[1] is not f
           and wait not in _ancestors(u.args[1])]
    if not mms:
        readers = sorted({str(u.target) for u in wait.users})
        return ("no aten.mm reads the gathered tensor (or a view of it flattening its leading "
                f"dims) as its left operand; its readers: {', '.join(readers) or 'none'}")

    def width(mm):  # the widest matmul gets the overlap; the others read the gathered A
        n = _val(mm.args[1]).shape[1] if _val(mm.args[1]) is not None else 0
        return n if isinstance(n, int) else 0
    mm = max(mms, key=width)
    flat, b = mm.args[0], mm.args[1]
    problem = operands_problem(_val(flat), _val(b))
    if problem is not None:
        return problem
    others = [u for u in wait.users if u not in flats] + [u for u in ag.users if u is not wait]
    k = _val(flat).shape[1]
    restore = _static_tail(vw)
    if wait is not flat and (not isinstance(k, int) or (others and restore is None)):
        return (f"the gathered tensor is {vw.dim()}-D with shape {tuple(vw.shape)}, dynamic "
                f"past dim 0: the pass cannot write the views it needs")
    with graph.inserting_before(ag):
        a2 = shard if wait is flat else _call(graph, aten.reshape.default, (shard, [-1, k]))
        fused = _call(graph, op, (a2, b, group_name), {pat.returns_gathered: True})
        out = _getitem(graph, fused, 0)
        full = _getitem(graph, fused, 1)
        whole = full if wait is flat or not others else _call(graph, aten.reshape.default,
                                                              (full, restore))
    # B (and what it is computed from) may come after the all-gather: move it above the new
    # nodes, in its order (its ancestors are not downstream of the all-gather: checked above)
    first = fused if a2 is shard else a2
    order = {n: i for i, n in enumerate(graph.nodes)}
    late = sorted((n for n in _ancestors(b) | {b} if n.op != "placeholder"
                   and order[n] > order[first]), key=order.__getitem__)
    for n in late:
        first.prepend(n)
    report.rewrites.append(Rewrite(name, ag.name, mm.name, fused.name, _mnk(flat, b)))
    mm.replace_all_uses_with(out)
    graph.erase_node(mm)
    for f in flats:
        if f is not wait:  # every flattened view reads the returned (2-D) gathered operand
            f.replace_all_uses_with(full)
            graph.erase_node(f)
    wait.replace_all_uses_with(whole)  # other readers share the one gather
    graph.erase_node(wait)
    ag.replace_all_uses_with(whole)  # e.g. the un-waited tensor saved for backward
    graph.erase_node(ag)
    if whole is not full and not whole.users:
        graph.erase_node(whole)
    if not full.users:
        graph.erase_node(full)
        fused.kwargs = {pat.returns_gathered: False}
        _set_meta(fused)
        if "val" in fused.meta:
            out.meta["val"] = fused.meta["val"][0]


def _fuse_scatter(graph, rs, name, pat, op, report) -> str | None:
    """``mm(A, B) -> [unflatten] -> reduce_scatter -> wait`` into ``op(A, B)`` (restored to
    the scattered tensor's shape). Returns why the reduce-scatter was left alone, or None."""
    c10d = _c10d()
    inp, reduce_op, _group_size, group_name = rs.args[:4]
    if str(reduce_op).lower() != pat.reduce:
        return f"reduce_op {reduce_op!r}; the fused op takes {pat.reduce!r}"
    view = None
    if (isinstance(inp, torch.fx.Node) and inp.target in _RESHAPES
            and isinstance(inp.args[0], torch.fx.Node) and inp.args[0].target is aten.mm.default
            and _flattens(_val(inp), _val(inp.args[0]))):
        view, inp = inp, inp.args[0]
    if not (isinstance(inp, torch.fx.Node) and inp.target is aten.mm.default):
        what = inp.target if isinstance(inp, torch.fx.Node) else type(inp).__name__
        return f"its input is {what}, not an aten.mm (or a view of one restoring leading dims)"
    if set(inp.users) != {view or rs} or (view is not None and set(view.users) != {rs}):
        return "the matmul result has other users; the fused op does not return the partial product"
    a, b = inp.args[:2]
    problem = operands_problem(_val(a), _val(b))
    if problem is not None:
        return problem
    waits = [u for u in rs.users if u.target is c10d.wait_tensor.default]
    others = [u for u in rs.users if u.target is not c10d.wait_tensor.default and u.op != "output"]
    if len(waits) != 1 or others:
        return "expected one wait_tensor user (and the graph output)"
    restore = _static_tail(_val(view)) if view is not None else None
    if view is not None and restore is None:
        return f"the product is scattered as shape {tuple(_val(view).shape)}, dynamic past dim 0"
    with graph.inserting_before(rs):
        fused = _call(graph, op, (a, b, group_name))
        result = fused if view is None else _call(graph, aten.reshape.default, (fused, restore))
    report.rewrites.append(Rewrite(name, rs.name, inp.name, fused.name, _mnk(a, b)))
    waits[0].replace_all_uses_with(result)
    graph.erase_node(waits[0])
    rs.replace_all_uses_with(result)  # saved for backward: the fused result, already complete
    graph.erase_node(rs)
    if view is not None:
        graph.erase_node(view)
    graph.erase_node(inp)


_MATCHERS = {"a": _fuse_gather, "c": _fuse_scatter}


def fuse_collective_matmuls(graph: torch.fx.Graph) -> FusionReport:
    """Rewrite every fusible pattern of a registered op (``TorchOp.pattern``: all-gather ->
    wait -> mm into ``ag_gemm``, mm -> reduce-scatter -> wait into ``gemm_rs``, with the views
    between them) in ``graph`` (in place) into the fused ops; returns (and keeps,
    :func:`last_report`) what it did. Gathers are rewritten first (a scatter's matmul may read
    a gather)."""
    report = FusionReport()
    patterns = _patterns()
    for operand in _MATCHERS:  # gathers first
        for node in list(graph.nodes):
            hit = patterns.get(node.target) if node.op == "call_function" else None
            if hit is not None and hit[1].operand == operand:
                why = _MATCHERS[operand](graph, node, *hit, report)
                if why is not None:
                    report.skipped.append((node.name, why))
    if report.rewrites:
        graph.lint()
    for name, why in report.skipped:
        log.debug("syncopate fusion pass: left %s alone: %s", name, why)
    _LAST[0] = report
    return report


# ------------------------------------------------------------------------------------------
# The switch
# ------------------------------------------------------------------------------------------

@functools.cache
def _instance():
    """The one pass object (enable/disable/enabled find it by identity); its class is made on
    first use, like the rest of this switch's Inductor imports."""
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

    return SyncopateFusionPass()


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
    if not fusion_pass_enabled():
        _set_passes(_current_passes() + [_instance()])


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
