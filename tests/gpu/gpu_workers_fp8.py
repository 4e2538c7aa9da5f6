"""Per-rank bodies of the FP8 op tests (tests/gpu/test_multi_gpu_fp8.py), run by
dist_harness.run_ranks: one process per GPU, or W threads on one GPU in loopback
(SYNCOPATE_GPU_LOOPBACK=W). Each worker checks its cases over several launches with fresh
inputs (outputs poisoned with NaN first) and returns the list of problems.

References, on the collected inputs (every rank's shard, gathered with NCCL):

* AG: ``torch._scaled_mm`` of each rank's shard with that rank's scale (its rows of C); and
  bitwise the unfused path (NCCL all-gather of A and the per-row scales + the same kernel).
* RS: the sum over ranks of ``torch._scaled_mm`` of each rank's K slice with its scales,
  reduce-scattered; and, for 2 ranks, bitwise the unfused path (same kernel + NCCL
  reduce-scatter: one rounding of a two-term sum either way).
"""

from __future__ import annotations


def _quant(x, axis):
    """e4m3 of ``x`` scaled by its amax (whole tensor: ``axis`` None; per row: 1)."""
    from syncopate.bench.local_fp8 import quantize
    return quantize(x, axis)


def _rand(shape, seed, device):
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device)


def _rel(x, ref):
    import torch
    return float(torch.linalg.norm(x.float() - ref.float())
                 / torch.linalg.norm(ref.float()).clamp_min(1e-30))


def _gather(comm, t):
    """``all_gather_into_tensor`` along dim 0 (fp8 as bytes)."""
    import torch
    from syncopate.runtime import collectives as dist
    W = comm.world_size
    out = torch.empty((t.shape[0] * W,) + tuple(t.shape[1:]), device=t.device, dtype=t.dtype)
    if t.dtype == torch.float8_e4m3fn:
        dist.all_gather_into_tensor(out.view(torch.uint8), t.contiguous().view(torch.uint8),
                                    group=comm.group)
    else:
        dist.all_gather_into_tensor(out, t.contiguous(), group=comm.group)
    return out


def _ag_launch(comm, case, seed):
    """One launch of one AG case: problem string or None."""
    import torch
    from syncopate.ops import ag_gemm_fp8

    backend, Ms, N, K, split, kernel, mode = case
    rows = mode == "row"
    dev, W = comm.device, comm.world_size
    # each rank quantises its own shard: tensor-wise scales differ per rank
    x = _rand((Ms, K), seed * 10 + comm.rank, dev) * (1 + comm.rank)  # amax differs per rank
    a, sa = _quant(x, 1 if rows else None)
    bt, sbt = _quant(_rand((N, K), seed * 10 + 7, dev), 1 if rows else None)
    b, sb = bt.t(), (sbt.t().contiguous() if rows else sbt)
    out = torch.full((Ms * W, N), float("nan"), device=dev, dtype=torch.bfloat16)
    ag_gemm_fp8(a, b, sa, sb, comm, backend=backend, split=split, kernel=kernel, out=out)
    fb = ag_gemm_fp8(a, b, sa, sb, comm, kernel=kernel, fused=False)
    A = _gather(comm, a)
    SA = _gather(comm, sa.reshape(-1, 1) if rows else sa.reshape(1, 1))
    # each rank's scales as their own tensor: cuBLASLt refuses (NOT_SUPPORTED) a scale pointer
    # that is not 16-byte aligned, which a slice of the gathered scales at rank r > 0 is
    want = torch.cat([torch._scaled_mm(A[r * Ms:(r + 1) * Ms], b,
                                       (SA[r * Ms:(r + 1) * Ms] if rows
                                        else SA[r].reshape(())).clone(),
                                       sb, out_dtype=torch.bfloat16) for r in range(W)])
    torch.cuda.synchronize()
    comm.check()
    if not torch.isfinite(out).all():
        return f"{case}: output has NaN/Inf (a tile not written?)"
    err = _rel(out, want)
    if err > 5e-3:
        return f"{case}: relative error {err:.3g} vs torch._scaled_mm on the collected inputs"
    if not torch.equal(out, fb):
        return f"{case}: fused != unfused path ({int((out != fb).sum())} elements)"
    return None


def _rs_launch(comm, case, seed):
    import torch
    from syncopate.ops import gemm_rs_fp8
    from syncopate.runtime import collectives as dist

    backend, M, N, Kl, split, kernel, mode = case
    rows = mode == "row"
    dev, W = comm.device, comm.world_size
    a, sa = _quant(_rand((M, Kl), seed * 10 + comm.rank, dev), 1 if rows else None)
    bt, sbt = _quant(_rand((N, Kl), seed * 10 + 5 + comm.rank, dev) * (1 + comm.rank),
                     1 if rows else None)
    b, sb = bt.t(), (sbt.t().contiguous() if rows else sbt)
    out = torch.full((M // W, N), float("nan"), device=dev, dtype=torch.bfloat16)
    be, _, red = backend.partition("+")
    gemm_rs_fp8(a, b, sa, sb, comm, backend=be, split=split, kernel=kernel, out=out,
                reduce=red or "comm")
    fb = gemm_rs_fp8(a, b, sa, sb, comm, kernel=kernel, fused=False)
    partial = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16).float()
    want = torch.empty((M // W, N), device=dev, dtype=torch.float32)
    dist.reduce_scatter_tensor(want, partial, group=comm.group)
    torch.cuda.synchronize()
    comm.check()
    if not torch.isfinite(out).all():
        return f"{case}: NaN/Inf"
    err = _rel(out, want)
    if err > 5e-3:
        return f"{case}: relative error {err:.3g} vs the reduce-scatter of torch._scaled_mm"
    if W == 2 and not torch.equal(out, fb):
        return f"{case}: fused != unfused path for 2 ranks ({int((out != fb).sum())} elements)"
    return None


def _cases(launch, rank, W, cases, launches):
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for i, case in enumerate(cases):
        for e in range(launches):
            try:
                p = launch(comm, case, seed=1000 + 37 * i + e)
            except Exception as ex:  # noqa: BLE001 - report every case
                import traceback
                p = f"{case}: {type(ex).__name__}: {ex}\n{traceback.format_exc(limit=4)}"
            if p:
                problems.append(f"launch {e + 1}: {p}")
                break
    comm.close()
    return problems


def ag_gemm_fp8_cases(rank, W, cases, launches=3):
    return _cases(_ag_launch, rank, W, cases, launches)


def gemm_rs_fp8_cases(rank, W, cases, launches=3):
    return _cases(_rs_launch, rank, W, cases, launches)
