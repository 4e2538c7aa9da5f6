"""Where the host time of a fused op goes (GPU machine, under torchrun).

At M = 1024 a fused op's kernels take ~0.1 ms and its Python can take longer, so the host side
decides the speed of a real training step. This script measures, per op and backend, the host
time of one call (median over 200, the GPU kept busy so no call ever waits for it) at three
levels -- the whole op, the FusedKernel launch alone (fast path), the local Triton kernel's
launch as a floor -- and prints rank 0's cProfile of the op (top functions by own time).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 scripts/gpu_host_profile.py
"""

from __future__ import annotations

import cProfile
import io
import pstats
import statistics
import sys
import time


def host_us(fn, n=200, sleep_cycles=0):
    """Median host microseconds of ``fn()``; the GPU sleeps ahead so a call never waits."""
    import torch
    out = []
    for i in range(n):
        if i % 20 == 0:
            torch.cuda.synchronize()
            torch.cuda._sleep(sleep_cycles)
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    torch.cuda.synchronize()
    return statistics.median(out) * 1e6


def main() -> int:
    from syncopate.bench.__main__ import init_distributed
    init_distributed()
    import torch
    import torch.distributed as dist

    from syncopate.ops import ag_gemm, gemm_rs
    from syncopate.kernels import num_sms
    from syncopate.ops._gemm import gemm_call, resolve_config, run_local
    from syncopate.runtime import Communicator

    comm = Communicator()
    W, me = comm.world_size, comm.rank
    dev = comm.device
    dtype = torch.bfloat16
    sleep = 40_000_000  # ~20 ms of GPU time per 20 calls: the host never waits
    rows = []
    M = 1024
    # AG: 1024 x 14336 x 4096 (B per rank [K, N/W]); RS: 1024 x 4096 x 14336 (A per rank [M, K/W])
    a_ag = torch.randn(M // W, 4096, device=dev).to(dtype)
    b_ag = torch.randn(4096, 14336 // W, device=dev).to(dtype)
    a_rs = torch.randn(M, 14336 // W, device=dev).to(dtype)
    b_rs = torch.randn(14336 // W, 4096, device=dev).to(dtype)
    out_ag = torch.empty(M, 14336 // W, device=dev, dtype=dtype)
    out_rs = torch.empty(M // W, 4096, device=dev, dtype=dtype)
    cfg_ag = resolve_config("tma", M, 14336 // W, 4096, dtype)
    cfg_rs = resolve_config("tma", M, 4096, 14336 // W, dtype)
    gathered = torch.empty(M, 4096, device=dev, dtype=dtype)
    local_ag = gemm_call("tma", gathered, b_ag, out_ag, cfg_ag)
    rows.append(("local gemm launch (floor)", host_us(lambda: run_local(local_ag), sleep_cycles=sleep)))
    rows.append(("torch.matmul", host_us(lambda: torch.matmul(gathered, b_ag, out=out_ag),
                                          sleep_cycles=sleep)))
    profiles = {}
    for op, backend in (("ag", "sm"), ("ag", "ce"), ("rs", "sm"), ("rs", "ce"), ("rs", "ce+epilogue")):
        be, _, red = backend.partition("+")
        if op == "ag":
            call = lambda: ag_gemm(a_ag, b_ag, comm, backend=be, split=1, config=cfg_ag,  # noqa: E731
                                   out=out_ag)
        elif red:  # the op's default config (it may lower GROUP_M for the epilogue's tile order)
            call = lambda: gemm_rs(a_rs, b_rs, comm, backend=be, reduce=red, out=out_rs)  # noqa: E731
        else:
            call = lambda: gemm_rs(a_rs, b_rs, comm, backend=be, split=4, reduce="comm",  # noqa: E731
                                   config=cfg_rs, out=out_rs)
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        comm.check()
        rows.append((f"{op}_gemm {backend}: whole op", host_us(call, sleep_cycles=sleep)))
        fks = [v for k, v in comm.cache.items() if isinstance(k, tuple)
               and k[0] == f"{op}.fk" and backend in k]
        if fks and not red:
            fk = fks[-1]
            nprog = num_sms(dev) - (fk.comm_programs or 0)
            if op == "ag":
                A = next(v for k, v in comm.cache.items() if k[0] == "ag_gemm.A")
                c = gemm_call("tma", A, b_ag, out_ag, cfg_ag, num_programs=nprog)
            else:
                C = next(v for k, v in comm.cache.items() if k[0] == "gemm_rs.C")
                c = gemm_call("tma", a_rs, b_rs, C, cfg_rs, num_programs=nprog)
            rows.append((f"{op}_gemm {backend}: FusedKernel launch only",
                         host_us(lambda: fk[c.grid](*c.args), sleep_cycles=sleep)))
        pr = cProfile.Profile()
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep)
        pr.enable()
        for i in range(100):
            if i % 20 == 19:
                torch.cuda._sleep(sleep)
            call()
        pr.disable()
        torch.cuda.synchronize()
        comm.check()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(18)
        profiles[f"{op}_gemm {backend}"] = s.getvalue()
    dist.barrier()
    if me == 0:
        for name, text in profiles.items():
            print(f"\n===== cProfile, 100 calls of {name} (rank 0), by own time =====")
            print("\n".join(line for line in text.splitlines() if line.strip())[:6000])
        print("\nhost time per call (median of 200, us, rank 0):")
        for name, us in rows:
            print(f"  {name:45s} {us:8.1f}")
    comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
