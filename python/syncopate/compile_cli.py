"""``syncopate compile`` and ``syncopate demo``: the compiler from the command line (CPU only).

``syncopate demo`` is the project's main job on a fresh machine: it compiles the fused
all-gather + GEMM (our persistent TMA GEMM, A sharded on M over 2 ranks, pushed in 2 chunks per
shard) for sm_90 on this CPU and shows what each pass did to the kernel, then what reached the
PTX.  ``syncopate compile`` does the same for any kernel, schedule and backend and writes every
stage to a directory.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path

from . import backends
from .abi import launch_violations
from .cli_args import nonnegative_int, operand, positive_int, shape
from .cli_kernel import FORMS, add_kernel_options, check_comm_programs, is_gemm, load_kernel
from .errors import CompileError
from .schedule import all_gather, as_schedule, dumps
from .schedule.cost import estimate

def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "compile", help="compile a kernel fused with a schedule for sm_90 (no GPU needed)",
        description="Compile a local Triton kernel fused with a chunk schedule. KERNEL is "
                    "gemm-tma / gemm-ptr (the project's GEMMs, configured from --shape) or "
                    "module:function / path/to/file.py:function (then give --signature and "
                    "--constexpr; the current folder is on the import path).")
    p.add_argument("kernel", help=FORMS)
    p.add_argument("--schedule", required=True, help="schedule JSON file")
    p.add_argument("--operand", required=True,
                   help="kernel parameter holding the communicated tensor (param or param:tensor,...)")
    p.add_argument("--backend", default="sm", choices=backends.names())
    p.add_argument("--comm-programs", type=nonnegative_int, default=None)
    add_kernel_options(p)
    p.add_argument("-o", "--output", default=None, help="directory for every stage's IR")
    p.set_defaults(func=run_compile)

    d = subparsers.add_parser(
        "demo", help="compile a fused all-gather+GEMM for sm_90 and show what each pass did",
        description="The main job: fuse our persistent TMA GEMM with an all-gather of A "
                    "(8192x4096 bf16 over 2 ranks, 2 chunks per shard) and walk through the passes.")
    d.add_argument("--backend", default="sm", choices=backends.names())
    d.add_argument("--split", type=positive_int, default=2)
    d.add_argument("--comm-programs", type=positive_int, default=16)
    d.add_argument("-o", "--output", default=None, help="also write every stage's IR here")
    d.set_defaults(func=run_demo)


# ----------------------------------------------------------------------------------- helpers

def _write_stages(out: Path, fc) -> None:
    # the IR layer imports xDSL and Triton: not at the CLI's start
    from syncopate_mlir.hook import write_stages

    _make_dir(out)
    write_stages(out, fc.ir_after)
    for ext in ("ttir", "syncopate", "ttgir", "llir", "ptx"):
        if ext in fc.asm:
            (out / f"kernel.{ext}").write_text(fc.asm[ext])
    (out / "kernel.cubin").write_bytes(fc.asm["cubin"])
    (out / "abi.json").write_text(json.dumps(fc.abi.to_json(), indent=2))


def _make_dir(out: Path) -> None:
    """``-o DIR``: create it (and missing parents); refuse a path that is a file."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise CompileError(f"-o {out}: a file is in the way; give a directory") from None
    except OSError as e:
        raise CompileError(f"-o {out}: cannot create the directory: {e.strerror}") from None


def _known_args(args) -> dict:
    """Kernel arguments the command line fixes: the GEMM aliases' sizes and row-major strides."""
    if not is_gemm(args.kernel):
        return {}
    m, n, k = shape(args.shape)
    return {"M": m, "N": n, "K": k, "stride_am": k, "stride_bk": n, "stride_cm": n}


def run_compile(args) -> int:
    # the compiler imports xDSL and Triton: not at the CLI's start
    from .compiler import compile as syncopate_compile

    fn, sig, cx, attrs, options = load_kernel(args.kernel, args)
    op = operand(args.operand)
    check_comm_programs(args.comm_programs, args.backend,
                        num_warps=int(options.get("num_warps", 4)))  # fail fast; again below
    if args.output:
        _make_dir(Path(args.output))  # before the compile: a bad -o fails fast
    t0 = time.perf_counter()
    fc = syncopate_compile(fn, signature=sig, constexprs=cx, schedule=args.schedule,
                           operand=op, backend=args.backend,
                           comm_programs=args.comm_programs, attrs=attrs, **options)
    dt = time.perf_counter() - t0
    check_comm_programs(args.comm_programs, args.backend,
                        num_warps=int(getattr(fc.metadata, "num_warps", 4)),
                        shared=int(getattr(fc.metadata, "shared", 0)))
    known = _known_args(args)
    bad = [str(v) for v in launch_violations(known, fc.abi.requirements, fc.abi.upper_bounds)]
    if bad:
        raise CompileError("--shape contradicts the schedule: " + "; ".join(bad) + ". Give the "
                           "schedule the shape of the tensor the kernel indexes")
    print(f"compiled {fn.__name__} fused ({args.backend}) for sm_90 in {dt:.2f} s; "
          f"syncopate passes {sum(fc.times_ms.values()):.1f} ms")
    print(f"ABI: {fc.abi.num_chunks} chunks, world size {fc.abi.world_size}, "
          f"{fc.abi.comm_programs} comm programs, mode {mode_text(args.schedule, fc.abi)}; "
          f"launch requirements {fc.abi.requirements}")
    if args.output:
        _write_stages(Path(args.output), fc)
        _write_request(Path(args.output), args, sig, op)
        print(f"wrote every stage to {args.output}/")
    return 0


def mode_text(schedule, abi) -> str:
    """The schedule's mode (``push``, ``pull`` or ``mixed``), and how the kernel runs it where
    that differs: the ABI's ``mode`` says which side the comm programs copy from, and the
    ``sm``/``nvshmem`` comm programs run every ``sum`` chunk on its destination
    (``schedule/execution.py``), so a push reduce-scatter runs as pull.  Printing the ABI's
    word alone told the user their push schedule had been compiled as another one."""
    modes = sorted({c.mode for c in as_schedule(schedule).chunks})
    if not modes:  # nothing moves (one rank)
        return abi.mode
    text = modes[0] if len(modes) == 1 else "mixed"
    if abi.mode not in (text, "none"):
        text += (f" (run as {abi.mode}: the {abi.backend} comm programs run each sum chunk on "
                 f"its destination, which reads the peers' partials and adds them)")
    return text


def _write_request(out: Path, args, sig: dict, op) -> None:
    """``request.json``: what was fused, so that ``syncopate emulate DIR`` can run it again.

    ``dtype`` is the communicated tensor's element type as the kernel's signature has it
    (``--dtype`` configures only the gemm-* kernels; a user kernel's types are its
    ``--signature``), or ``{param: dtype}`` when several operands differ."""
    params = [op] if isinstance(op, str) else list(op)
    types = {p: sig[p].lstrip("*") for p in params if p in sig}
    dtype = next(iter(types.values())) if len(set(types.values())) == 1 else types
    req = {"kernel": args.kernel, "schedule": dumps(as_schedule(args.schedule)),
           "operand": args.operand, "backend": args.backend, "shape": args.shape,
           "dtype": dtype, "comm_programs": args.comm_programs,
           "signature": args.signature or "", "constexpr": list(args.constexpr or [])}
    (out / "request.json").write_text(json.dumps(req, indent=2))


# ----------------------------------------------------------------------------------- demo

_OP_AT_LINE = re.compile(r"^\s*(?:%[\w#:]+(?:, %[\w#:]+)* = )?([a-z_]+\.[a-z_.]+)\b")


def _count_ops(text: str) -> Counter:
    """Ops per name (the op that starts each line; module attributes and types not counted)."""
    ops = (m.group(1) for m in map(_OP_AT_LINE.match, text.splitlines()) if m)
    return Counter(op for op in ops if op.split(".")[0] in ("tt", "scf", "syncopate", "gpu",
                                                           "arith"))


def _func_params(text: str) -> list[str]:
    """Parameter names of the public kernel function (``tt.func public @k(%a_ptr: ...``)."""
    for line in text.splitlines():
        if "tt.func public" in line:
            return re.findall(r"%([\w#]+)\s*:", line.split("->")[0])
    return []


def _pass_changes(prev: str | None, text: str, prev_counts: dict, counts: dict) -> str:
    """What a pass changed: parameters it added to the kernel, then ops added or removed.

    Parameters count as a change: ``append-abi-params`` adds only parameters, and a demo that
    said "no change" for it would tell the reader the pass did nothing."""
    parts = []
    if prev is not None:
        before, after = _func_params(prev), _func_params(text)
        added = [p for p in after if p not in before]
        if added:
            parts.append(f"+{len(added)} parameters ({', '.join(added)})")
    delta = {k: counts.get(k, 0) - prev_counts.get(k, 0) for k in set(counts) | set(prev_counts)}
    parts += [f"{k} {v:+d}" for k, v in sorted(delta.items()) if v]
    return ", ".join(parts) or "no change"


def _strip_locs(line: str) -> str:
    return re.sub(r"\s*loc\([^)]*\)\)*", "", line).rstrip()


def run_demo(args) -> int:
    # the compiler and the local kernels import xDSL, Triton and torch: not at the CLI's start
    from .compiler import compile as syncopate_compile
    from .kernels import compile_args, compile_attrs, default_config, kernel_fn

    if args.output:
        _make_dir(Path(args.output))  # before the compile: a bad -o fails fast
    M, N, K, W = 8192, 7168, 4096, 2
    name = "matmul_tma_persistent_kernel"
    cfg = default_config(M, N, K, "bf16", "tma")
    sig, cx = compile_args(name, "bf16", cfg)
    be = backends.get(args.backend)
    comm = args.comm_programs if be.has_comm_programs else None  # ce: the copy engine copies
    check_comm_programs(comm, args.backend, num_warps=int(cfg.options().get("num_warps", 4)))
    mode = be.op_modes["ag"]
    sched = all_gather([M, K], "bf16", W, mode=mode, split=args.split)
    print(f"Fusing {name} (C[{M},{N}] = A[{M},{K}] @ B[{K},{N}], bf16) with an all-gather of A")
    print(f"  schedule: {W} ranks, A sharded on M, {args.split} chunk(s) per shard, {mode}, "
          f"{len(sched.chunks)} chunks; backend {args.backend}, {comm or 0} comm programs")
    try:
        est = estimate(sched, backend=args.backend, comm_programs=args.comm_programs)
        print(f"  cost model: communication {est.comm_s * 1e6:.0f} us per rank")
    except Exception:  # the cost model is advisory
        pass
    t0 = time.perf_counter()
    fc = syncopate_compile(kernel_fn(name), signature=sig, constexprs=cx, schedule=sched,
                           operand="a_ptr", backend=args.backend,
                           comm_programs=comm, attrs=compile_attrs(name), **cfg.options())
    dt = time.perf_counter() - t0
    print(f"\nCompiled to cubin for sm_90 on this CPU in {dt:.2f} s "
          f"(the syncopate passes: {sum(fc.times_ms.values()):.0f} ms)\n")

    before = _count_ops(fc.asm["ttir"])
    show = {
        "append-abi-params": lambda l: "syn_" in l and "tt.func public" in l,
        "tile-remap": lambda l: "syncopate.remap" in l,
        "insert-waits": lambda l: "syncopate.wait_region" in l or ("scf.for" in l and "%ki" in l),
        "insert-signals": lambda l: "syncopate.signal_region" in l,
        "partition-sms": lambda l: any(s in l for s in ("syncopate.comm", "syncopate.enter",
                                                        "syncopate.transfer", "syncopate.drain")),
        "resolve-chunks": lambda l: "syncopate.wait " in l or "syncopate.signal " in l,
    }
    prev, prev_text = before, fc.asm["ttir"]
    for pass_name, text in fc.ir_after.items():
        counts = _count_ops(text)
        print(f"== {pass_name}: {_pass_changes(prev_text, text, prev, counts)}")
        pick = show.get(pass_name)
        if pick is None and pass_name.startswith("lower-"):
            pick = lambda l: ("ld.acquire" in l or "atomic_rmw" in l or "tt.call @syncopate_wait" in l)
        if pick:
            lines = [_strip_locs(l).strip() for l in text.splitlines() if pick(l)]
            for line in lines[:4]:
                print("   " + line[:150] + (" ..." if len(line) > 150 else ""))
            if len(lines) > 4:
                print(f"   ... ({len(lines) - 4} more)")
        prev, prev_text = counts, text

    ptx = fc.asm["ptx"]
    releases = len(re.findall(r"atom[.\w]*release", ptx))
    print("\n== PTX")
    print(f"   ld.acquire.sys loads: {ptx.count('ld.acquire.sys')}, release atomics: {releases}, "
          f"%globaltimer reads: {ptx.count('%globaltimer')}, wgmma: {ptx.count('wgmma.mma_async')}, "
          f"TMA loads: {ptx.count('cp.async.bulk.tensor.2d.shared')}")
    print(f"   shared memory: {fc.metadata.shared} B")
    print(f"\nABI for the runtime: {fc.abi.num_chunks} chunk flags, {fc.abi.comm_programs} comm "
          f"programs (grid[0] + {fc.abi.comm_programs if be.has_comm_programs else 0}), launch checks "
          f"{fc.abi.requirements}")
    if args.output:
        _write_stages(Path(args.output), fc)
        print(f"wrote every stage to {args.output}/")
    return 0
