"""Per-rank bodies of the gemm_ar GPU tests (run by dist_harness.run_ranks, one process per
GPU or W virtual ranks on one GPU with SYNCOPATE_GPU_LOOPBACK=W). Kept beside gpu_workers.py
(already past 700 lines) rather than in it; same conventions: each worker checks many cases
in one process group and returns the list of problems.
"""

from __future__ import annotations

from gpu_workers import _rand, _rel


def _same_on_every_rank(out, comm) -> int:
    """Elements where some rank's ``out`` differs bitwise from rank 0's (NaN-safe: compares
    the raw 16-bit patterns)."""
    import torch

    from syncopate.runtime import collectives as dist
    bits = out.contiguous().view(torch.int16)
    every = torch.empty((comm.world_size,) + tuple(bits.shape), device=bits.device,
                        dtype=bits.dtype)
    dist.all_gather_into_tensor(every, bits, group=comm.group)
    return int((every != every[0:1]).any(dim=0).sum())


def gemm_ar_cases(rank, W, cases, symm_backend="cuda", launches=3):
    """Each case over ``launches`` launches: the weight fixed (the prepared fast path after the
    first launch), a fresh ``a`` each launch and then a new weight, outputs poisoned with NaN.
    Checked against torch (fp32 matmul + all_reduce), bitwise across ranks, bitwise against a
    repeat of the same call (the sum order is fixed), and for 2 ranks bitwise against the
    NCCL fallback (one rounding of a two-term sum either way)."""
    import torch

    from syncopate.ops import gemm_ar
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist
    comm = Communicator(symm_backend=symm_backend)
    problems = []
    for i, (backend, dtype_name, M, N, Kl, split, order, kernel) in enumerate(cases):
        case = (backend, dtype_name, M, N, Kl, split, order, kernel)
        try:
            dtype = getattr(torch, dtype_name)
            # "default": the fused path at the op's own plan (fused=None would let the op choose
            # the NCCL path, which the fallback comparison below already covers)
            kw = dict(fused=True) if backend == "default" else dict(backend=backend, split=split,
                                                                    order=order)
            b = _rand((Kl, N), dtype, 2000 + i * 100 + rank, comm.device)
            for launch in range(launches + 1):
                if launch == launches:  # a new weight: prepared anew
                    b = _rand((Kl, N), dtype, 2050 + i * 100 + rank, comm.device)
                a = _rand((M, Kl), dtype, 3000 + i * 100 + launch * 10 + rank, comm.device)
                out = torch.full((M, N), float("nan"), device=comm.device, dtype=dtype)
                gemm_ar(a, b, comm, kernel=kernel, out=out, **kw)
                again = gemm_ar(a, b, comm, kernel=kernel, **kw)
                fb = gemm_ar(a, b, comm, kernel=kernel, fused=False)
                ref = a.float() @ b.float()
                dist.all_reduce(ref, group=comm.group)
                torch.cuda.synchronize()
                comm.check()
                where = f"{case} launch {launch}"
                err = _rel(out, ref)
                if not torch.isfinite(out).all():
                    problems.append(f"{where}: NaN/Inf (C incomplete)")
                elif err > 2e-2:
                    problems.append(f"{where}: relative error {err:.3g} vs torch")
                elif not torch.equal(out, again):
                    problems.append(f"{where}: a repeat of the call differs "
                                    f"({int((out != again).sum())} elements)")
                elif W == 2 and not torch.equal(out, fb):
                    problems.append(f"{where}: fused != NCCL fallback for 2 ranks "
                                    f"({int((out != fb).sum())} elements)")
                differ = _same_on_every_rank(out, comm)
                if differ:
                    problems.append(f"{where}: {differ} elements differ between ranks")
        except Exception as e:  # noqa: BLE001
            import traceback
            problems.append(f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
    comm.close()
    return problems


def gemm_ar_stress(rank, W, iters, shape=(256, 320, 192), kernel="tma"):
    """``iters`` back-to-back launches with new inputs each time (no host sync inside the
    loop); every output compared bitwise with the next rank's, mismatches counted on the
    device: a launch that returned before its pieces arrived, or a late push into the next
    launch's partials, shows up as ranks that disagree."""
    import torch

    from syncopate.ops import gemm_ar
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist
    comm = Communicator()
    M, N, Kl = shape
    b = _rand((Kl, N), torch.bfloat16, 77 + rank, comm.device)
    bad = torch.zeros((), device=comm.device, dtype=torch.int64)
    nan = torch.zeros((), device=comm.device, dtype=torch.int64)
    every = torch.empty((W, M, N), device=comm.device, dtype=torch.int16)
    for it in range(iters):
        a = _rand((M, Kl), torch.bfloat16, 10_000 + it * W + rank, comm.device)
        out = gemm_ar(a, b, comm, kernel=kernel, split=2, order="swizzle")
        nan += (~torch.isfinite(out)).sum()
        dist.all_gather_into_tensor(every, out.view(torch.int16), group=comm.group)
        bad += (every != every[0:1]).any(dim=0).sum()
    torch.cuda.synchronize()
    comm.check()
    comm.close()
    problems = []
    if int(nan):
        problems.append(f"rank {rank}: {int(nan)} non-finite elements over {iters} launches")
    if int(bad):
        problems.append(f"rank {rank}: {int(bad)} elements differed between ranks over "
                        f"{iters} launches")
    return problems
