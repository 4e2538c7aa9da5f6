"""Per-rank bodies of tests/gpu/test_torch_ops_gpu.py (run by dist_harness.run_ranks: one process
per GPU, or W threads of one process in loopback). Each returns a list of problems, empty when
everything matched.
"""

from __future__ import annotations


def _rand(shape, dtype, seed, device, scale=1.0):
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * scale).to(dtype)


def _rel(x, ref):
    import torch
    return float(torch.linalg.norm(x.float() - ref.float())
                 / torch.linalg.norm(ref.float()).clamp_min(1e-30))


def _problem(name, got, want, tol):
    err = _rel(got, want)
    return None if err <= tol else f"{name}: relative error {err:.3g} > {tol:g}"


def _data(M, K, H, device, dtype):
    """The unsharded problem, the same on every rank (seeded): x [M, K], w1 [K, H], w2 [H, K]
    (scaled so activations stay O(1)), and the output gradient gy [M, K]."""
    return (_rand((M, K), dtype, 11, device), _rand((K, H), dtype, 12, device, K ** -0.5),
            _rand((H, K), dtype, 13, device, H ** -0.5), _rand((M, K), dtype, 14, device))


def _reference(x, w1, w2, gy, backward):
    """fp32 unsharded MLP ``gelu(x @ w1) @ w2`` and, with ``backward``, the gradients of
    ``sum(y * gy)``."""
    import torch
    xr, w1r, w2r = (t.float().requires_grad_(backward) for t in (x, w1, w2))
    y = torch.nn.functional.gelu(xr @ w1r) @ w2r
    if not backward:
        return y.detach(), None, None, None
    (y * gy.float()).sum().backward()
    return y.detach(), xr.grad, w1r.grad, w2r.grad


def compiled_tp_mlp(rank, W, cases, backward):
    """``torch.compile(fullgraph=True)`` (Inductor) of a tensor-parallel MLP built from
    ``syncopate.torch_ops.ag_gemm`` / ``gemm_rs`` on every rank: its output against the fp32
    unsharded reference and against the same module run eagerly (the fused ops without
    Inductor); with ``backward``, the gradients of x's shard and both weight shards (computed
    by the fused ops in the backward) against the reference's."""
    import torch

    import syncopate.torch_ops as sto

    name = sto.group_name(None)
    dev = torch.device("cuda", torch.cuda.current_device())
    dtype = torch.bfloat16
    problems = []

    class TPMLP(torch.nn.Module):
        def __init__(self, w1s, w2s):
            super().__init__()
            self.w1 = torch.nn.Parameter(w1s)
            self.w2 = torch.nn.Parameter(w2s)

        def forward(self, x):
            h = torch.nn.functional.gelu(sto.ag_gemm(x, self.w1, name))
            return sto.gemm_rs(h, self.w2, name)

    for M, K, H in cases:
        case = f"M={M} K={K} H={H} W={W}"
        x, w1, w2, gy = _data(M, K, H, dev, dtype)
        ms, hs = M // W, H // W
        rows, cols = slice(rank * ms, (rank + 1) * ms), slice(rank * hs, (rank + 1) * hs)
        xs = x[rows].clone().requires_grad_(backward)
        model = TPMLP(w1[:, cols].contiguous(), w2[cols].contiguous())
        compiled = torch.compile(model, fullgraph=True)
        y = compiled(xs)
        with torch.no_grad():
            eager = model(xs)
        yr, dx, dw1, dw2 = _reference(x, w1, w2, gy, backward)
        checks = [(f"{case} output vs fp32 reference", y, yr[rows], 3e-2),
                  (f"{case} compiled vs eager ops", y, eager, 2e-2)]
        if backward:
            (y.float() * gy[rows].float()).sum().backward()
            checks += [(f"{case} d x_shard", xs.grad, dx[rows], 3e-2),
                       (f"{case} d w1_shard", model.w1.grad, dw1[:, cols], 3e-2),
                       (f"{case} d w2_shard", model.w2.grad, dw2[cols], 3e-2)]
        torch.cuda.synchronize()
        for check in checks:
            if check[1] is None:
                problems.append(f"{check[0]}: no gradient")
                continue
            p = _problem(*check)
            if p:
                problems.append(p)
    return problems


def fusion_pass_tp_mlp(rank, W, M, K, H):
    """Plain PyTorch (functional collectives + matmul) compiled with the fusion pass on: the
    pass fuses both patterns in the forward and the backward graph, and outputs and gradients
    match the same function run eagerly through NCCL. Needs torch process groups (one process
    per GPU): the functional collectives resolve their group in torch's registry."""
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch._inductor import config

    import syncopate.torch_ops as sto

    config.fx_graph_cache = False  # a cache hit would skip the pass (and its report)
    pg = dist.group.WORLD
    dev = torch.device("cuda", torch.cuda.current_device())
    problems = []

    def mlp(x, w1, w2):
        a = funcol.all_gather_single(x, 0, pg)
        h = torch.nn.functional.gelu(a @ w1)
        return funcol.reduce_scatter_single(h @ w2, "sum", 0, pg)

    x, w1, w2, gy = _data(M, K, H, dev, torch.bfloat16)
    ms, hs = M // W, H // W
    rows, cols = slice(rank * ms, (rank + 1) * ms), slice(rank * hs, (rank + 1) * hs)

    reports = []

    def run(fn, report=False):
        args = [t.clone().requires_grad_() for t in (x[rows], w1[:, cols].contiguous(),
                                                     w2[cols].contiguous())]
        y = fn(*args)  # compiles the forward graph (the pass runs on it) on the first call
        if report:
            reports.append(sto.last_report())
        (y.float() * gy[rows].float()).sum().backward()  # compiles the backward graph
        if report:
            reports.append(sto.last_report())
        return [y.detach()] + [a.grad for a in args]

    sto.enable_fusion_pass()
    try:
        got = run(torch.compile(mlp, fullgraph=True), report=True)
    finally:
        sto.disable_fusion_pass()
    want = run(mlp)
    torch.cuda.synchronize()
    for what, r in zip(("forward", "backward"), reports):
        if (r.ag_gemm, r.gemm_rs) != (1, 1):
            problems.append(f"{what} graph: pass fused ag_gemm={r.ag_gemm} gemm_rs={r.gemm_rs}, "
                            f"expected 1 and 1; left alone: {r.skipped}")
    for n, g, w in zip(("output", "d x_shard", "d w1_shard", "d w2_shard"), got, want):
        p = _problem(f"M={M} K={K} H={H} {n} (fused vs eager funcol)", g, w, 2e-2)
        if p:
            problems.append(p)
    return problems
