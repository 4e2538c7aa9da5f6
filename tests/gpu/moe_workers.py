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
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for case in cases:
        try:
            problems += _moe_case(comm, case, launches)
        except Exception as e:  # noqa: BLE001 - report every case
            import traceback
            problems.append(f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
    comm.close()
    return problems
