"""Where the host time of a fused op goes (GPU machine, under torchrun).

At M = 1024 a fused op's kernels take ~0.1 ms and its Python can take longer, so the host side
decides the speed of a real training step. This script measures, per op and backend, the host
time of one call (median over 200, the GPU kept busy so no call ever waits for it) at three
levels -- the whole op, the FusedKernel launch alone (fast path), the local Triton kernel's
launch as a floor -- plus ag_gemm sm with its input already in the symmetric buffer (no
staging copy), and prints rank 0's cProfile of the op (top functions by own time).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 scripts/gpu_host_profile.py
    python scripts/gpu_host_profile.py --loopback 2    # one GPU: W virtual ranks in turn
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time


def host_us(fn, n=200, sleep_cycles=0):
    """Median host microseconds of ``fn()``; the GPU sleeps ahead so a call never waits."""
    from syncopate.bench.calibrate import host_time_s
    return host_time_s(fn, sleep_cycles, n) * 1e6


def cases(comm, backends=("sm", "ce"), shape=(1024, 4096, 14336)):
    """``[(name, call, launch_only)]``: the measured calls of this rank (``launch_only``: a
    function returning the FusedKernel-launch-alone call once the op has run, or None)."""
    import torch

    from syncopate.ops import ag_gemm, gemm_rs
    from syncopate.ops.driver import compute_programs, gemm_call, resolve_config, run_local
    W, dev = comm.world_size, comm.device
    dtype = torch.bfloat16
    M, H, F = shape
    # AG: M x F x H (B per rank [H, F/W]); RS: M x H x F (A per rank [M, F/W])
    a_ag = torch.randn(M // W, H, device=dev).to(dtype)
    b_ag = torch.randn(H, F // W, device=dev).to(dtype)
    a_rs = torch.randn(M, F // W, device=dev).to(dtype)
    b_rs = torch.randn(F // W, H, device=dev).to(dtype)
    out_ag = torch.empty(M, F // W, device=dev, dtype=dtype)
    out_rs = torch.empty(M // W, H, device=dev, dtype=dtype)
    cfg_ag = resolve_config("tma", M, F // W, H, dtype)
    cfg_rs = resolve_config("tma", M, H, F // W, dtype)
    gathered = torch.empty(M, H, device=dev, dtype=dtype)
    local_ag = gemm_call("tma", gathered, b_ag, out_ag, cfg_ag)
    from syncopate.kernels import matmul
    out = [("local gemm, Triton's JIT launch", lambda: run_local(local_ag), None),
           ("local gemm, syncopate.kernels.matmul (floor)",
            lambda: matmul(gathered, b_ag, out=out_ag), None),
           ("torch.matmul", lambda: torch.matmul(gathered, b_ag, out=out_ag), None)]
    for op, backend in (("ag", "sm"), ("ag", "ce"), ("rs", "sm"), ("rs", "ce"), ("rs", "ce+epilogue")):
        be, _, red = backend.partition("+")
        if be not in backends:
            continue
        if op == "ag":
            call = lambda be=be: ag_gemm(a_ag, b_ag, comm, backend=be, split=1,  # noqa: E731
                                         config=cfg_ag, out=out_ag, fused=True)
        elif red:  # the op's default config (it may lower GROUP_M for the epilogue's tile order)
            call = lambda be=be, red=red: gemm_rs(a_rs, b_rs, comm, backend=be,  # noqa: E731
                                                  reduce=red, out=out_rs, fused=True)
        else:
            call = lambda be=be: gemm_rs(a_rs, b_rs, comm, backend=be, split=4,  # noqa: E731
                                         reduce="comm", config=cfg_rs, out=out_rs, fused=True)

        def launch_only(op=op, backend=backend, red=red):
            fks = [v for k, v in comm.cache.items() if isinstance(k, tuple)
                   and k[0] == f"{op}.fk" and backend in k]
            if not fks or red:
                return None
            fk = fks[-1]
            nprog = compute_programs(comm, fk.comm_programs or 0)
            if op == "ag":
                A = next(v for k, v in comm.cache.items() if k[0] == "ag_gemm.A")
                c = gemm_call("tma", A, b_ag, out_ag, cfg_ag, num_programs=nprog)
            else:
                C = next(v for k, v in comm.cache.items() if k[0] == "gemm_rs.C")
                c = gemm_call("tma", a_rs, b_rs, C, cfg_rs, num_programs=nprog)
            return lambda: fk[c.grid](*c.args)
        out.append((f"{op}_gemm {backend}", call, launch_only))
    if "sm" in backends:
        # the op's documented zero-copy input: this rank's rows of the symmetric A, written
        # once, passed as a_shard -- no staging copy per call (ag_gemm_buffer's docstring)
        from syncopate.ops import ag_gemm_buffer
        Ms = M // W
        slot = ag_gemm_buffer(comm, Ms, H, dtype)[comm.rank * Ms:(comm.rank + 1) * Ms]
        slot.copy_(a_ag)
        out.append(("ag_gemm sm, input in place",
                    lambda: ag_gemm(slot, b_ag, comm, backend="sm", split=1, config=cfg_ag,
                                    out=out_ag, fused=True),
                    lambda: None))
    return out


def _profile(call, n=100, sleep=0):
    """rank's cProfile of ``n`` calls as a table in microseconds per op call (pstats prints
    milliseconds over all calls, which rounds a 2 us function to 0.000)."""
    import torch
    pr = cProfile.Profile()
    pr.enable()
    for i in range(n):
        if sleep and i % 20 == 19:
            torch.cuda._sleep(sleep)
        call()
    pr.disable()
    return _us_table(pstats.Stats(pr), n)


def _us_table(stats, n, top=24) -> str:
    """The ``top`` functions by own time: calls, own and cumulative microseconds per op call
    (under the profiler, whose overhead inflates every row; compare rows, not totals)."""
    rows = []
    for (path, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():
        where = f"{os.path.basename(path)}:{line}({func})" if line else func
        rows.append((tt, ct, nc, where))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    out = [f"{'own us':>8} {'cum us':>8} {'calls':>6}  function   (per op call; total own "
           f"{total / n * 1e6:.1f} us)"]
    for tt, ct, nc, where in rows[:top]:
        out.append(f"{tt / n * 1e6:8.2f} {ct / n * 1e6:8.2f} {nc / n:6.1f}  {where}")
    return "\n".join(out)


def _report(rows, profiles, rank, extra=""):
    """The profiles, then one line per case: the median host time and its ratio to
    ``torch.matmul``'s in the same run. The ratio is the steadier figure: from one host to the
    next, ``torch.matmul`` itself took 11-18 us (bench/results/2026-12-02-h200x1-session11)."""
    for name, text in profiles.items():
        print(f"\n===== cProfile of {name} (rank {rank}), by own time =====")
        print(text)
    ref = next((us for name, us in rows if name == "torch.matmul"), None)
    print(f"\nhost time per call (median, us, rank {rank}{extra}):")
    for name, us in rows:
        ratio = f"  {us / ref:5.2f}x torch.matmul" if ref else ""
        print(f"  {name:45s} {us:8.1f}{ratio}")


def main_torchrun(backends, shape) -> int:
    from syncopate.bench.__main__ import init_distributed
    init_distributed()
    import torch
    import torch.distributed as dist

    from syncopate.runtime import Communicator

    comm = Communicator()
    sleep = 40_000_000  # ~20 ms of GPU time per 20 calls: the host never waits
    rows, profiles = [], {}
    for name, call, launch_only in cases(comm, backends, shape):
        if launch_only is None and not name.startswith(("ag_", "rs_")):
            rows.append((name, host_us(call, sleep_cycles=sleep)))
            continue
        for _ in range(10):
            call()
        torch.cuda.synchronize()
        comm.check()
        rows.append((f"{name}: whole op", host_us(call, sleep_cycles=sleep)))
        lo = launch_only()
        if lo is not None:
            rows.append((f"{name}: FusedKernel launch only", host_us(lo, sleep_cycles=sleep)))
        torch.cuda.synchronize()
        torch.cuda._sleep(sleep)
        profiles[name] = _profile(call, sleep=sleep)
        torch.cuda.synchronize()
        comm.check()
    dist.barrier()
    if comm.rank == 0:
        _report(rows, profiles, 0)
    comm.close()
    dist.destroy_process_group()
    return 0


def _in_turns(comm, fn):
    """``fn()`` on each rank in turn (host barriers only), this rank's result. In loopback the
    ranks are threads of one process: timing them at once would time the GIL they share. The
    fused kernels of the ranks that went first wait on the device for the later ranks' launches
    (nothing on the host waits for them, and a host-only barrier adds no stream dependency)."""
    from syncopate.runtime import collectives
    mine = None
    for turn in range(comm.world_size):
        collectives.barrier()
        if turn == comm.rank:
            mine = fn()
    collectives.barrier()
    return mine


def _loopback_rank(rank, W, calls, backends, shape):
    import torch

    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives
    comm = Communicator()
    stream = torch.cuda.current_stream()
    rows, profiles = [], {}
    n_sm, n_ce = (calls, calls) if calls else (60, 15)
    for name, call, launch_only in cases(comm, backends, shape):
        n = n_sm
        if launch_only is None and not name.startswith(("ag_", "rs_")):  # local floors
            for _ in range(10):
                call()
            stream.synchronize()
            rows.append((name, _in_turns(comm, lambda: timed_us(call, n))))
            continue
        # a ce call enqueues ~30 stream operations: a turn's calls must fit the launch queue
        # (they cannot run before the next rank's turn)
        n = n_ce if " ce" in name else n_sm
        for _ in range(10):  # every rank at once: compile, allocate, warm the fast path
            call()
        stream.synchronize()  # this rank's stream only: a device-wide sync could wait on a peer
        comm.check()
        collectives.barrier()
        rows.append((f"{name}: whole op", _in_turns(comm, lambda: timed_us(call, n))))
        stream.synchronize()
        lo = launch_only()
        if lo is not None:
            rows.append((f"{name}: FusedKernel launch only",
                         _in_turns(comm, lambda: timed_us(lo, n))))
            stream.synchronize()
        profiles[name] = _in_turns(comm, lambda: _profile(call, n))
        stream.synchronize()
        comm.check()
    collectives.barrier()
    comm.close()
    return rows, profiles


def timed_us(fn, n):
    """Median host microseconds of ``fn()`` over ``n`` calls, no synchronisation between them
    (loopback: a call's kernels may not run before the other ranks' turn)."""
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e6


def main_loopback(W: int, n: int | None, backends, shape) -> int:
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    import torch

    from syncopate.runtime.loopback import run_loopback
    res = run_loopback(_loopback_rank, W, n, backends, shape, device=torch.device("cuda", 0), timeout_s=500)
    bad = [(r, v) for r, (st, v) in enumerate(res) if st != "ok"]
    if bad:
        for r, v in bad:  # every rank's: the first may only be a consequence of another's
            print(f"rank {r}: {v}", file=sys.stderr)
        return 1
    rows, profiles = res[0][1]
    each = f"{n} calls" if n else "60 calls (ce: 15)"
    _report(rows, profiles, 0, f", {W} loopback ranks on one GPU taking turns, {each} each, "
                               f"M, H, F = {shape}")
    # the last rank's turn too: rank 0's kernels queue behind its first one, which spins until
    # the other ranks launch (a loopback artefact: on W GPUs every rank's kernels run as they
    # are launched); the last rank's launches meet their peers' kernels already queued
    last_rows = res[-1][1][0]
    _report(last_rows, {}, W - 1, f", its kernels running as launched, {each}")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--loopback", type=int, default=0, metavar="W",
                   help="W virtual ranks on one GPU (ranks time their calls in turn)")
    p.add_argument("--calls", type=int, default=None,
                   help="loopback: calls timed per rank and case (default 60, ce 15: each call's "
                        "work waits in the launch queue until the next rank's turn)")
    p.add_argument("--backends", default="sm,ce", help="comma-separated (default sm,ce)")
    p.add_argument("--shape", default="1024,4096,14336", metavar="M,H,F",
                   help="AG+GEMM M x F x H and GEMM+RS M x H x F (default the issue's "
                        "1024,4096,14336); host time hardly depends on it")
    args = p.parse_args(argv)
    try:
        shape = tuple(int(x) for x in args.shape.split(","))
        assert len(shape) == 3
    except (ValueError, AssertionError):
        p.error(f"--shape {args.shape!r}: give M,H,F")
    if args.loopback:
        return main_loopback(args.loopback, args.calls, tuple(args.backends.split(",")), shape)
    return main_torchrun(tuple(args.backends.split(",")), shape)


if __name__ == "__main__":
    sys.exit(main())
