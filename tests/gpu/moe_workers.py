"""Rank workers of the MoE GPU tests (tests/test_multi_gpu.py runs them through
dist_harness.run_ranks, one process per GPU or one thread per virtual rank in loopback).

Kept out of gpu_workers.py, which is long already; the harness sends a worker by qualified
name, and the children get the parent's sys.path, so this module is importable there too."""

from __future__ import annotations


def _moe_case(comm, case, launches):
    """One ``moe_dispatch_gemm`` case over ``launches`` launches with fresh routings: the fused
    op against the unfused path (all-gather + the same grouped GEMM) and against per-expert
    fp32 matmuls of the tokens every rank routed here. Returns problem strings."""
    import torch

    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import moe_dispatch_gemm, moe_dispatch_gemm_reference

    routing, E, C, H, N, T, k = case
    W, r, dev = comm.world_size, comm.rank, comm.device
    El = E // W
    cfg = GroupedGemmConfig(64, 64, 64, 4, 3)
    problems = []
    for it in range(launches):
        g = torch.Generator(device="cpu").manual_seed(100 + it)  # same on every rank
        xs = [torch.randn(T, H, generator=g).to(torch.bfloat16).to(dev) for _ in range(W)]
        if routing == "hot":
            ids = [torch.zeros(T, k, dtype=torch.int64) for _ in range(W)]
            for s in range(W):
                ids[s][:, 1:] = torch.randint(1, E, (T, k - 1), generator=g)
        else:
            ids = [torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
                   for _ in range(W)]
        ids = [i.to(dev) for i in ids]
        wts = torch.rand(T, k, generator=g).to(dev)
        w_full = (torch.randn(E, H, N, generator=g) / H ** 0.5).to(torch.bfloat16).to(dev)
        w_local = w_full[r * El:(r + 1) * El].contiguous()
        ref = moe_dispatch_gemm_reference(xs[r], ids[r], wts, w_local, comm, capacity=C,
                                          config=cfg, on_overflow="drop")
        got = moe_dispatch_gemm(xs[r], ids[r], wts, w_local, comm, capacity=C, config=cfg,
                                on_overflow="drop", comm_programs=2)
        torch.cuda.synchronize(dev)
        comm.check()
        tag = f"{case} launch {it}"
        if not torch.equal(got.counts, ref.counts):
            problems.append(f"{tag}: counts differ: {got.counts.tolist()} vs "
                            f"{ref.counts.tolist()}")
            continue
        for s in range(W):
            for e in range(El):
                n = int(got.counts[s, e])
                x = r * El + e
                toks = (ids[s] == x).any(1).nonzero().flatten()[:C]
                exact = xs[s][toks].float() @ w_full[x].float()
                a = got.out[s * El + e, :n].float()
                if n != toks.numel():
                    problems.append(f"{tag}: group ({s}, {e}) has {n} rows, expected "
                                    f"{toks.numel()}")
                elif n and not torch.equal(a, ref.out[s * El + e, :n].float()):
                    problems.append(f"{tag}: group ({s}, {e}) fused != unfused (same kernel)")
                elif n and float((a - exact).norm() / exact.norm()) > 1e-2:
                    problems.append(f"{tag}: group ({s}, {e}) off the fp32 product")
    return problems


def moe_dispatch_cases(rank, W, cases, launches=3):
    from gpu_workers import each_case
    return each_case(_moe_case, cases, launches)


def _routing(kind, W, T, k, E, g):
    """Every rank's ``topk_ids`` and weights (the same generator on every rank)."""
    import torch
    ids = []
    for _ in range(W):
        scores = torch.rand(T, E, generator=g)
        if kind == "hot":
            scores[:, 0] += 1.0          # expert 0 is every token's first choice
        elif kind == "empty":
            scores[:, 1::2] -= 2.0       # odd experts: nobody's choice
        ids.append(scores.topk(k, dim=1).indices)
    return ids, [torch.rand(T, k, generator=g) for _ in range(W)]


def _layer_reference(x, ids, wts, w1, w2, C):
    """One rank's layer in fp32 from the routing alone: each expert keeps its first ``C``
    (token, choice) pairs in token order; ``sum_i w * silu(x @ w1[e]) @ w2[e]``."""
    import torch
    T, k = ids.shape
    out = torch.zeros(T, w2.shape[2], device=x.device)
    flat = ids.reshape(-1)
    for e in range(w1.shape[0]):
        pos = (flat == e).nonzero().flatten()[:C]
        if not pos.numel():
            continue
        t, i = pos // k, pos % k
        y = torch.nn.functional.silu(x[t].float() @ w1[e].float()) @ w2[e].float()
        out.index_add_(0, t, wts[t, i, None].float() * y)
    return out


def _layer_case(comm, case, launches):
    """``moe_dispatch_gemm`` -> SiLU -> ``moe_gemm_combine``, fused, over ``launches`` launches
    with fresh routings: against the unfused layer (all-gather + grouped GEMM, grouped GEMM +
    all-to-all + weighted sum: the same kernels, so bitwise) and the fp32 torch layer."""
    import torch

    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import moe_dispatch_gemm, moe_gemm_combine

    kind, mode, E, C, Hd, F, T, k = case
    W, r, dev = comm.world_size, comm.rank, comm.device
    El = E // W
    cfg = GroupedGemmConfig(64, 64, 64, 4, 3)
    problems = []
    for it in range(launches):
        g = torch.Generator(device="cpu").manual_seed(200 + it)  # same on every rank
        xs = [torch.randn(T, Hd, generator=g).to(torch.bfloat16) for _ in range(W)]
        ids, wts = _routing(kind, W, T, k, E, g)
        w1 = (torch.randn(E, Hd, F, generator=g) / Hd ** 0.5).to(torch.bfloat16).to(dev)
        w2 = (torch.randn(E, F, Hd, generator=g) / F ** 0.5).to(torch.bfloat16).to(dev)
        x, i, wt = xs[r].to(dev), ids[r].to(dev), wts[r].to(dev)
        mine = slice(r * El, (r + 1) * El)
        outs = {}
        for fused in (False, True):
            d = moe_dispatch_gemm(x, i, wt, w1[mine].contiguous(), comm, capacity=C,
                                  config=cfg, on_overflow="drop", fused=fused,
                                  comm_programs=2)
            h = torch.nn.functional.silu(d.out.float()).to(torch.bfloat16)
            outs[fused] = moe_gemm_combine(h, w2[mine].contiguous(), d, comm, config=cfg,
                                           mode=mode, fused=fused, comm_programs=2)
        torch.cuda.current_stream().synchronize()
        comm.check()
        tag = f"{case} launch {it}"
        if not torch.equal(outs[True], outs[False]):
            diff = float((outs[True].float() - outs[False].float()).abs().max())
            problems.append(f"{tag}: fused layer != unfused layer (max diff {diff:.3g})")
        ref = _layer_reference(x, i, wt, w1, w2, C)
        err = float((outs[True].float() - ref).norm() / ref.norm().clamp(min=1e-6))
        if not torch.isfinite(outs[True]).all() or err > 2e-2:
            problems.append(f"{tag}: fused layer off the fp32 torch layer (rel err {err:.3g})")
    return problems


def moe_layer_cases(rank, W, cases, launches=3):
    from gpu_workers import each_case
    return each_case(_layer_case, cases, launches)
