"""``syncopate emulate``: the CPU emulator from the command line.

Takes what ``syncopate compile`` takes for the project's GEMMs (``gemm-tma`` / ``gemm-ptr``,
``--shape M,N,K``, ``--schedule``, ``--operand``, ``--backend``) plus the emulation's knobs;
the arguments (random bf16/fp16 matrices, shapes and strides) are built from the shape.
Exit status: 0 clean, 1 a race, a mismatch or a refused combination (typed message), 2 bad
usage.
"""

from __future__ import annotations

import time


def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "emulate", help="run a fused kernel on W emulated ranks (numpy) and check it for races",
        description="Fuse a GEMM with a schedule (passes through resolve-chunks), emulate every "
                    "rank on this CPU under several interleavings and launches, report races "
                    "and mismatches against the unfused kernel.")
    p.add_argument("kernel", choices=["gemm-tma", "gemm-ptr"])
    p.add_argument("--schedule", required=True, help="schedule JSON file")
    p.add_argument("--operand", required=True, help="kernel parameter holding the tensor")
    p.add_argument("--shape", required=True, help="M,N,K of the local GEMM")
    p.add_argument("--backend", default="sm", choices=["sm", "ce", "nvshmem"])
    p.add_argument("--comm-programs", type=int, default=2)
    p.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    p.add_argument("--block", default="64,64,32", help="BLOCK_M,BLOCK_N,BLOCK_K (default 64,64,32)")
    p.add_argument("--world-size", type=int, default=None,
                   help="must equal the schedule's world size (a check)")
    p.add_argument("--policies", default=None,
                   help="comma-separated: in-order, reverse, late, behind:R, random:S "
                        "(default: the standard set)")
    p.add_argument("--launches", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fine", action="store_true",
                   help="also interleave at every load/store of the communicated tensor")
    p.set_defaults(func=run_emulate)


def run_emulate(args) -> int:
    import numpy as np

    from ..errors import CompileError, EmulationError
    from ..kernels import GemmConfig, compile_args, compile_attrs, kernel_fn
    from ..schedule import as_schedule
    from .api import DEFAULT_POLICIES, PerRank, emulate

    name = {"gemm-tma": "matmul_tma_persistent_kernel", "gemm-ptr": "matmul_ptr_kernel"}[args.kernel]
    try:
        m, n, k = (int(x) for x in args.shape.split(","))
        bm, bn, bk = (int(x) for x in args.block.split(","))
    except ValueError:
        raise CompileError(f"--shape and --block take three integers (got {args.shape!r}, "
                           f"{args.block!r})") from None
    sched = as_schedule(args.schedule)
    if args.world_size is not None and args.world_size != sched.world_size:
        raise EmulationError(f"--world-size {args.world_size} but the schedule is for "
                             f"{sched.world_size} ranks")
    W = sched.world_size
    cfg = GemmConfig(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=2, num_warps=4, num_stages=2)
    sms = 4
    sig, cx = compile_args(name, args.dtype, cfg, num_sms=sms)
    rng = np.random.default_rng(args.seed)
    a = PerRank([rng.standard_normal((m, k)).astype(np.float32) for _ in range(W)])
    b = rng.standard_normal((k, n)).astype(np.float32)
    vals = dict(a_ptr=a, b_ptr=b, c_ptr=np.zeros((m, n), np.float32), M=m, N=n, K=k,
                stride_am=k, stride_bk=n, stride_cm=n)
    if name == "matmul_ptr_kernel":
        grid = (-(-m // bm) * -(-n // bn),)
    else:
        grid = (min(sms, -(-m // bm) * -(-n // bn)),)
    policies = [p.strip() for p in args.policies.split(",")] if args.policies else DEFAULT_POLICIES
    t0 = time.perf_counter()
    res = emulate(kernel_fn(name), signature=sig, constexprs=cx, attrs=compile_attrs(name),
                  schedule=sched, operand=args.operand, grid=grid, args=vals,
                  backend=args.backend, comm_programs=args.comm_programs, policies=policies,
                  launches=args.launches, seed=args.seed, fine=args.fine, check=False,
                  options=cfg.options())
    print(res.summary())
    steps = sum(s["steps"] for s in res.stats.values())
    print(f"{len(res.policies)} interleavings, {steps} scheduling steps, "
          f"{time.perf_counter() - t0:.2f} s in all (fuse + emulate + reference)")
    return 0 if res.ok else 1
