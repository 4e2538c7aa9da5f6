"""``syncopate emulate``: the CPU emulator from the command line.

Three ways to name what to emulate:

* the project's GEMMs (``gemm-tma`` / ``gemm-ptr``, ``--shape M,N,K``): the arguments (random
  matrices, sizes, strides) are built from the shape;
* any ``@triton.jit`` kernel, ``module:function`` with ``--signature`` and ``--constexpr`` as
  for ``syncopate compile``, plus ``--grid`` and one ``--arg`` per parameter:
  ``name=RxC`` or ``name=randn:SHAPE`` (a random tensor of that shape, ``randn:32`` for a
  vector; the schedule's operand gets one per rank), ``name=zeros:SHAPE``, ``name=perm:N``
  (a random permutation of ``0..N-1``, e.g. gather indices) for a pointer, a number for a
  scalar;
* a directory written by ``syncopate compile -o``: its ``request.json`` records the kernel,
  schedule, operand, backend and shape, and the emulator fuses the same request again
  (``--arg``/``--grid`` are needed for a ``module:function`` kernel).

Exit status: 0 clean, 1 a race, a mismatch or a refused combination (typed message), 2 bad
usage.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from . import backends
from .cli_args import nonnegative_int, positive_int, shape
from .cli_kernel import (KERNEL_ALIASES, add_kernel_options, check_comm_programs, gemm_name,
                         gemm_shape, is_gemm, load_kernel)
from .errors import CompileError, EmulationError, UsageError
from .schedule import as_schedule


#: comm programs emulated when ``--comm-programs`` is not given: each is a coroutine per rank,
#: and two already interleave their copies of one chunk
EMULATED_COMM_PROGRAMS = 2


def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "emulate", help="run a fused kernel on W emulated ranks (numpy) and check it for races",
        description="Fuse a GEMM with a schedule (passes through resolve-chunks), emulate every "
                    "rank on this CPU under several interleavings and launches, report races "
                    "and mismatches against the unfused kernel.")
    p.add_argument("kernel", help="gemm-tma, gemm-ptr, module:function, or a directory written "
                                  "by `syncopate compile -o`")
    p.add_argument("--schedule", default=None, help="schedule JSON file")
    p.add_argument("--operand", default=None, help="kernel parameter holding the tensor")
    add_kernel_options(p)
    p.add_argument("--arg", action="append", default=[],
                   help="module:function kernels: NAME=RxC | randn:SHAPE (random) | "
                        "zeros:SHAPE | perm:N | a number")
    p.add_argument("--grid", default=None, help="module:function kernels: the launch grid")
    p.add_argument("--backend", default="sm", choices=backends.names())
    p.add_argument("--comm-programs", type=nonnegative_int, default=None,
                   help=f"sm/nvshmem: comm programs (default {EMULATED_COMM_PROGRAMS})")
    p.add_argument("--block", type=_block, default=(64, 64, 32),
                   help="BLOCK_M,BLOCK_N,BLOCK_K, powers of two (default 64,64,32)")
    p.add_argument("--world-size", type=positive_int, default=None,
                   help="must equal the schedule's world size (a check)")
    p.add_argument("--policies", default=None,
                   help="comma-separated: in-order, reverse, late, behind:R, random:S "
                        "(default: the standard set)")
    p.add_argument("--launches", type=positive_int, default=2)
    p.add_argument("--seed", type=nonnegative_int, default=0)
    p.add_argument("--fine", action="store_true",
                   help="also interleave at every load/store of the communicated tensor")
    p.set_defaults(func=run_emulate)


def _block(text: str) -> tuple[int, int, int]:
    """``--block BLOCK_M,BLOCK_N,BLOCK_K``: three powers of two (Triton's tl.arange needs them)."""
    try:
        dims = tuple(int(x) for x in text.split(","))
    except ValueError:
        dims = ()
    if len(dims) != 3 or any(d < 1 or d & (d - 1) for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: give BLOCK_M,BLOCK_N,BLOCK_K as three "
                                         f"powers of two, e.g. 64,64,32")
    return dims


_block.__name__ = "block"


def run_emulate(args) -> int:
    if os.path.isdir(args.kernel):
        _from_directory(args)
    if args.schedule is None or args.operand is None:
        raise UsageError("the arguments --schedule and --operand are required (or name a "
                         "directory written by `syncopate compile -o`)")
    if args.kernel in KERNEL_ALIASES:
        return _run_gemm(args)
    if ":" not in args.kernel:
        raise CompileError(f"unknown kernel {args.kernel!r}: use gemm-tma, gemm-ptr, "
                           f"module:function, path/to/file.py:function or a directory written "
                           f"by `syncopate compile -o`")
    return _run_kernel(args)


def _from_directory(args) -> None:
    """Fill ``args`` from ``DIR/request.json`` (what ``syncopate compile -o`` recorded)."""
    path = os.path.join(args.kernel, "request.json")
    if not os.path.exists(path):
        raise CompileError(f"{args.kernel} has no request.json: it was not written by "
                           f"`syncopate compile -o` (or by an older version); compile again")
    try:
        req = json.loads(open(path).read())
    except ValueError as e:
        raise CompileError(f"{path} is not valid JSON: {e}") from None
    missing = [k for k in ("kernel", "schedule", "operand") if not isinstance(req, dict)
               or not isinstance(req.get(k), str)]
    if missing:
        raise CompileError(f"{path} lacks {', '.join(missing)}: it was not written by "
                           f"`syncopate compile -o`; compile again")
    sched_path = os.path.join(args.kernel, "schedule.json")
    with open(sched_path, "w") as f:
        f.write(req["schedule"])
    args.kernel = req["kernel"]
    args.schedule = sched_path
    args.operand = args.operand or req["operand"]
    args.backend = req.get("backend", args.backend)
    args.shape = args.shape or req.get("shape")
    if is_gemm(req["kernel"]):  # a user kernel's types are in its signature
        args.dtype = args.dtype or req.get("dtype")
    if args.comm_programs is None:
        args.comm_programs = req.get("comm_programs")
    args.signature = args.signature or req.get("signature", "")
    args.constexpr = args.constexpr or list(req.get("constexpr", []))


def _policies(args, world_size: int, emu):
    """``--policies``, each checked against the schedule's world size before anything is
    fused (``behind:7`` at W = 2 names no rank: it used to run as ``in-order``, exit 0)."""
    policies = [p.strip() for p in args.policies.split(",")] if args.policies \
        else list(emu.DEFAULT_POLICIES)
    for p in policies:
        emu.scheduler.parse_policy(p, world_size)
    return policies


def _comm_programs(args, options) -> int | None:
    """``--comm-programs`` checked as ``syncopate compile`` checks it, else the emulator's
    small default (None for a backend without comm programs)."""
    check_comm_programs(args.comm_programs, args.backend,
                        num_warps=int((options or {}).get("num_warps", 4)))
    if args.comm_programs is not None:
        return args.comm_programs
    return EMULATED_COMM_PROGRAMS if backends.get(args.backend).has_comm_programs else None


def _emulate(args, emu, fn, sched, grid, vals, policies, *, sig, cx, attrs, options) -> int:
    """Emulate the fused ``fn`` with the command line's launches, seed and ``--fine``, print
    the result and the time it took; 1 when it found a race or a mismatch."""
    t0 = time.perf_counter()
    res = emu.emulate(fn, signature=sig, constexprs=cx, attrs=attrs, schedule=sched,
                      operand=args.operand, grid=grid, args=vals, backend=args.backend,
                      comm_programs=_comm_programs(args, options), policies=policies,
                      launches=args.launches, seed=args.seed, fine=args.fine, check=False,
                      options=options or None)
    print(res.summary())
    steps = sum(s["steps"] for s in res.stats.values())
    print(f"{len(res.policies)} interleavings, {steps} scheduling steps, "
          f"{time.perf_counter() - t0:.2f} s in all (fuse + emulate + reference)")
    return 0 if res.ok else 1


def _run_kernel(args) -> int:
    """A ``module:function`` kernel with ``--arg``s and ``--grid``."""
    import numpy as np

    # the emulator imports numpy, xDSL and Triton: not at the CLI's start
    from . import emulate as emu

    fn, sig, cx, attrs, options = load_kernel(args.kernel, args)
    if not args.grid:
        raise UsageError(f"kernel {args.kernel} needs --grid (the grid it is launched with, "
                         f"e.g. --grid 64 or --grid 8,4)")
    try:
        grid = tuple(int(x) for x in args.grid.split(","))
    except ValueError:
        grid = ()
    if not grid or len(grid) > 3 or any(g < 1 for g in grid):
        raise UsageError(f"--grid {args.grid!r}: give 1 to 3 positive integers, e.g. 64 or 8,4")
    sched = as_schedule(args.schedule)
    policies = _policies(args, sched.world_size, emu)
    rng = np.random.default_rng(args.seed)
    vals = {}
    for item in args.arg:
        name, eq, spec = item.partition("=")
        if not eq or not name or not spec:
            raise UsageError(f"--arg {item!r}: write NAME=RxC, NAME=randn:SHAPE, "
                             f"NAME=zeros:SHAPE, NAME=perm:N or NAME=NUMBER")
        if name in vals:
            raise UsageError(f"--arg {name} is given twice")
        vals[name] = _arg_value(name, spec, sig.get(name), rng, sched.world_size,
                                per_rank=(name == args.operand), np=np, PerRank=emu.PerRank)
    missing = [n for n in fn.arg_names if n not in cx and sig.get(n) != "constexpr"
               and n not in vals]
    if missing:
        raise CompileError(f"give a value for every parameter with --arg: missing "
                           f"{', '.join(missing)}")
    return _emulate(args, emu, fn, sched, grid, vals, policies, sig=sig, cx=cx, attrs=attrs,
                    options=options)


def _arg_value(name, spec, ty, rng, world_size, *, per_rank, np, PerRank):
    """The value ``--arg name=spec`` gives a parameter of signature type ``ty``: a tensor for a
    pointer (``*bf16``), a number for a scalar.  The two are never converted into each other:
    an integer given to a pointer used to become a one-element tensor holding it, which the
    emulator then reported as an out-of-bounds access of the kernel."""
    tensor = spec.startswith(("perm:", "zeros:", "randn:")) or "x" in spec.lower()
    if ty is not None and ty.startswith("*") and not tensor:
        raise UsageError(f"--arg {name}={spec}: {name} is a pointer ({ty}); give it a tensor: "
                         f"{name}=RxC or {name}=randn:N (random values), {name}=zeros:RxC or "
                         f"{name}=perm:N")
    if ty is not None and not ty.startswith("*") and tensor:
        raise UsageError(f"--arg {name}={spec}: {name} is a scalar ({ty}); give it a number")

    def shape_of(text):
        try:
            return shape(text)
        except argparse.ArgumentTypeError:
            raise UsageError(f"--arg {name}={spec}: {text!r} is not a shape like 512x64") \
                from None

    if spec.startswith("perm:"):
        return rng.permutation(shape_of(spec[5:])[0]).astype(np.int32)
    if spec.startswith("zeros:"):
        return np.zeros(shape_of(spec[6:]), np.float32)
    if tensor:  # RxC or randn:SHAPE
        dims = shape_of(spec.removeprefix("randn:"))
        if per_rank:
            return PerRank([rng.standard_normal(dims).astype(np.float32)
                            for _ in range(world_size)])
        return rng.standard_normal(dims).astype(np.float32)
    try:
        return int(spec)
    except ValueError:
        try:
            return float(spec)
        except ValueError:
            raise UsageError(f"--arg {name}={spec}: write RxC, randn:SHAPE, zeros:SHAPE, "
                             f"perm:N, an integer or a float") from None


def _run_gemm(args) -> int:
    import numpy as np

    # the emulator and the local kernels import numpy, xDSL, Triton and torch: not at the
    # CLI's start
    from . import emulate as emu
    from .kernels import GemmConfig, compile_args, compile_attrs, kernel_fn

    m, n, k = gemm_shape(args.kernel, args, "its parameters come from --shape, --dtype and "
                                            "--block")
    name = gemm_name(args.kernel)
    bm, bn, bk = args.block
    sched = as_schedule(args.schedule)
    if args.world_size is not None and args.world_size != sched.world_size:
        raise EmulationError(f"--world-size {args.world_size} but the schedule is for "
                             f"{sched.world_size} ranks")
    W = sched.world_size
    cfg = GemmConfig(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=2, num_warps=4, num_stages=2)
    sms = 4
    sig, cx = compile_args(name, args.dtype or "bf16", cfg, num_sms=sms)
    rng = np.random.default_rng(args.seed)
    a = emu.PerRank([rng.standard_normal((m, k)).astype(np.float32) for _ in range(W)])
    b = rng.standard_normal((k, n)).astype(np.float32)
    vals = dict(a_ptr=a, b_ptr=b, c_ptr=np.zeros((m, n), np.float32), M=m, N=n, K=k,
                stride_am=k, stride_bk=n, stride_cm=n)
    tiles = -(-m // bm) * -(-n // bn)
    grid = (tiles,) if name == "matmul_ptr_kernel" else (min(sms, tiles),)  # tma: persistent
    return _emulate(args, emu, kernel_fn(name), sched, grid, vals, _policies(args, W, emu),
                    sig=sig, cx=cx, attrs=compile_attrs(name), options=cfg.options())
