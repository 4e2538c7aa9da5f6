"""Why did the traced MoE dispatch's first launch time out in loopback? Tell the causes apart.

    python scripts/gpu_moe_first_launch.py [--cases all|NAME,NAME] [--W 2] [--case-timeout 240]

What it settles (the helper report of branch tracemoe says more). ``SYNCOPATE_TRACE=1 python
scripts/gpu_trace.py OUT 2 moe_dispatch_gemm,gemm_rs`` timed out on rank 0's first MoE launch
(``CHUNK[0]`` never arrived) while the same op passes the GPU tests and the bench untraced. On
a CPU the traced kernel is the untraced one plus trace-buffer writes (``insert-trace``'s
transparency check), which leaves the launch's surroundings: ``gpu_trace.py`` did not set
``CUDA_MODULE_LOADING=EAGER`` (the GPU test harness does), and its first MoE call is fused, so
the op's strided copy of the counts right after the launch is the first of its kind in the
process -- lazily loaded, which may synchronise the context the ranks share and so wait for
the peer's spinning kernel (docs/loopback.md, "Module loading"). The bench runs the unfused
reference first, which runs that copy before any fused launch.

Each case runs in its own process (``CUDA_MODULE_LOADING`` is read when CUDA starts) under a
hard timeout, loopback W ranks on GPU 0, with the watchdog at 10 s: gemm_rs fused twice (as
gpu_trace.py), ``comm.clear_cache()``, then ``moe_dispatch_gemm`` fused twice with
gpu_trace.py's shapes and config. Cases:

* ``trace-eager`` / ``plain-eager``: tracing on / off, modules loaded eagerly;
* ``trace-lazy`` / ``plain-lazy``: the same with lazy loading (what gpu_trace.py had);
* ``trace-lazy-warm``: lazy, but each rank runs the strided int32 copy once before its first
  MoE call (loads that one kernel early).

Reading the result:

* eager cases pass, lazy ones time out, ``trace-lazy-warm`` passes: lazy loading of the
  post-launch copy was the cause; tracing is not involved. ``gpu_trace.py`` and
  ``run_loopback`` now make loading eager.
* ``trace-eager`` times out and ``plain-eager`` passes: a traced-kernel effect the CPU check
  cannot see (resources, the relaxed counter atomics): report the case's output.
* every case passes: the hazard did not fire this time (it needs the ranks' launches to
  interleave); rerun with ``--repeat 3``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = {"trace-eager": ("1", "EAGER", False), "plain-eager": ("0", "EAGER", False),
         "trace-lazy": ("1", "LAZY", False), "plain-lazy": ("0", "LAZY", False),
         "trace-lazy-warm": ("1", "LAZY", True)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cases", default="all", help="comma-separated of " + ", ".join(CASES))
    p.add_argument("--W", type=int, default=2, help="virtual ranks (default 2)")
    p.add_argument("--case-timeout", type=float, default=240.0,
                   help="seconds per case before its process is killed (default 240)")
    p.add_argument("--repeat", type=int, default=1, help="runs per case (default 1)")
    p.add_argument("--child", nargs=2, metavar=("W", "WARM"), help=argparse.SUPPRESS)
    return p


def worker(rank, W, warm):
    import torch

    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import gemm_rs, moe_dispatch_gemm
    from syncopate.runtime import Communicator
    comm = Communicator()
    dev = comm.device
    b = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    for _ in range(2):  # gpu_trace.py's op before the MoE one
        gemm_rs(torch.randn(512 * W, 1024, device=dev, dtype=torch.bfloat16), b, comm, fused=True)
        torch.cuda.current_stream().synchronize()
    comm.clear_cache()
    E, T, C = 4 * W, 256, 128
    g = torch.Generator(device="cpu").manual_seed(7)
    ids = torch.stack([torch.randperm(E)[:2] for _ in range(T)]).to(dev)
    x = torch.randn(T, 1024, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(E, 1024, 256, generator=g) / 32).to(torch.bfloat16)[rank * 4:rank * 4 + 4]
    w = w.contiguous().to(dev)
    if warm:  # the op's post-launch copy, once, before any MoE launch
        torch.zeros(W * W * E, dtype=torch.int32, device=dev).view(W, W, E)[:, rank, :4].clone()
        torch.cuda.current_stream().synchronize()
    stamps = []
    for i in range(2):
        t0 = time.perf_counter()
        moe_dispatch_gemm(x, ids, torch.rand(T, 2, device=dev), w, comm, capacity=C,
                          config=GroupedGemmConfig(64, 64, 64, 4, 3), fused=True)
        torch.cuda.current_stream().synchronize()
        stamps.append(f"launch {i + 1} {time.perf_counter() - t0:.2f} s")
    comm.check()  # a spin that timed out in the last launch raises here
    comm.close()
    return "; ".join(stamps)


def child(W: int, warm: bool) -> int:
    import torch

    sys.path.insert(0, os.path.join(ROOT, "python"))
    from syncopate.runtime.loopback import run_loopback
    res = run_loopback(worker, W, warm, device=torch.device("cuda", 0), timeout_s=200)
    bad = 0
    for r, (status, value) in enumerate(res):
        first = value.strip().splitlines()[-1] if status != "ok" else value
        print(f"  rank {r}: {status}: {first}")
        bad |= status != "ok"
    return 1 if bad else 0


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.child:
        return child(int(args.child[0]), args.child[1] == "1")
    names = list(CASES) if args.cases == "all" else args.cases.split(",")
    unknown = [n for n in names if n not in CASES]
    if unknown:
        print(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}",
              file=sys.stderr)
        return 2
    verdicts = []
    for name in names:
        trace, loading, warm = CASES[name]
        env = dict(os.environ, SYNCOPATE_TRACE=trace, CUDA_MODULE_LOADING=loading,
                   SYNCOPATE_TIMEOUT_S="10")
        for rep in range(args.repeat):
            print(f"== {name} (run {rep + 1})", flush=True)
            t0 = time.perf_counter()
            try:
                rc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                     str(args.W), "1" if warm else "0"], env=env,
                                    timeout=args.case_timeout).returncode
                verdict = "pass" if rc == 0 else "FAIL"
            except subprocess.TimeoutExpired:
                verdict = "HANG (killed)"
            verdicts.append(f"{name:16s} run {rep + 1}: {verdict} "
                            f"({time.perf_counter() - t0:.0f} s)")
            print(verdicts[-1], flush=True)
    print("\n".join(["", "summary:"] + verdicts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
