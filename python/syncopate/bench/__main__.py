"""``python -m syncopate.bench``: fused AG+GEMM, GEMM+RS and GEMM+AR against the alternatives.

Run under torchrun, one process per GPU::

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 -m syncopate.bench --out bench_out [--quick]

Columns, measured side by side in one run (medians of CUDA-event times over ``--iters``
iterations, the L2 flushed before each, the max over ranks since an op is as slow as its
slowest rank):

* ``fused[<backend>]`` -- the best (split, comm programs) of a small sweep, per backend;
* ``serial cuBLAS`` -- NCCL collective then ``torch.matmul``;
* ``serial triton`` -- NCCL collective then our local Triton kernel (the unfused path);
* ``torch async-TP`` -- ``torch.ops.symm_mem.fused_all_gather_matmul`` /
  ``fused_matmul_reduce_scatter``;
* ``torch symm one-shot`` / ``two-shot`` (GEMM+AR, ``--ops ar``) -- cuBLAS, then
  ``torch.ops.symm_mem.one_shot_all_reduce`` / ``two_shot_all_reduce_`` where torch has them
  (``bench/rows.py``);
* ``gemm`` (our local kernel alone), ``gemm cuBLAS``, ``comm`` (the NCCL collective alone),
  ``ideal = max(gemm, comm)``; ratios ``fused/ideal`` and ``serial/fused``.

``--calibrate`` instead measures what the ops' cost model needs and writes the GPU type's
calibration file (:mod:`syncopate.bench.calibrate`; ``--from-results DIR`` fits a past run).
``--ops ag_fp8,rs_fp8`` adds FP8 rows (e4m3 in, bf16 out, ``--scales tensor|row``) with the
same columns holding the scaled operations: ``torch._scaled_mm`` for cuBLAS and async-TP's
``fused_all_gather_scaled_matmul`` / ``fused_scaled_matmul_reduce_scatter`` (:mod:`.rows`).

``--ops ring_attn`` and ``--ops ulysses`` add the sequence-parallel attention rows (their own
columns and tables: :mod:`.attention`, :mod:`.ulysses`); ``--ops moe`` adds the MoE layer's
rows (dispatch + expert GEMMs + combine, fused and unfused; :mod:`.moe`). ``--check`` runs
them for correctness only, also in one-GPU loopback (``--loopback W``), which the timed
benchmark refuses.

``--model block`` instead times a whole transformer block (``syncopate.nn.TransformerBlock``
at Llama-3 8B / 70B and a long-context shape, forward and forward + backward): fused, unfused,
torch's async-TP on the same block written with DTensor, and ideal (:mod:`.block`). Under
torchrun like the op rows; it runs at W = 1 (``--nproc-per-node 1``) too.

``--compile`` instead times the *compile* of the fused GEMMs on the CPU (no GPU, no torchrun):
the syncopate stage pass by pass and the whole compile, as a table and ``compile.json``
(:mod:`syncopate.bench.compile_time`).

Every fused configuration is checked against the reference before it is timed (AG+GEMM:
bitwise equal to the local kernel on the gathered A; GEMM+RS: relative error vs the NCCL
path); a configuration that fails its check is reported and not timed. Writes
``bench.json`` (with date, GPU, git commit, command) and ``bench.png`` under ``--out``.

The parts: one row's columns in ``rows.py`` (the fused ones, checked then timed, in
``fused.py``), the timer in ``timer.py``, the table, chart and ``bench.json`` in ``report.py``;
this module is the command line and the run (rows, time budget, process group).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from .. import runtime, settings
from ..cli import run_handler
from ..cli_args import csv_ints, csv_names, nonnegative_int, positive_float, positive_int
from ..ops import REGISTRY
from ..runtime import collectives
from ..runtime.loopback import run_loopback
from . import block, calibrate, compile_time, rows
from .fused import sweep_for
from .report import columns, derive, format_table, git_commit, plot, write_json, write_results
from .runs import TABLES, init_distributed, row_fn, rows_for, start_row, within_budget
from .timer import Timer

# the benchmark's functions as tests and scripts use them, from here (most are defined beside)
__all__ = ["Timer", "build_parser", "check_row_line", "columns", "derive", "format_table",
           "git_commit", "init_distributed", "loopback_refusal", "main", "model_problem",
           "parse_args", "plot", "report_check_rows", "rows_for", "row_fn", "start_row",
           "sweep_for", "write_results"]

#: ``--check``'s ops, by their rows' ``op``: the module that checks them (``run`` with
#: ``check_only`` for a table's op, else ``check_rows``), prints a row (``summary``) and judges
#: the rows (``check_problems``)
CHECKS = {**TABLES, "gemm_ar": rows}


PROG = "python -m syncopate.bench"

#: values of ``--backends``: the backends, and ce with GEMM+RS's sum in the owner's epilogue
BACKEND_CHOICES = ("sm", "ce", "nvshmem", "ce+epilogue")


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's arguments, every value checked here (a typo in ``--m`` must not surface
    as a traceback on every rank after torchrun started the GPUs)."""
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    p.add_argument("--out", default="bench_out", help="directory for bench.json and bench.png")
    p.add_argument("--quick", action="store_true", help="a small subset (for CI-style checks)")
    p.add_argument("--iters", type=positive_int, default=None, help="timed iterations per column")
    p.add_argument("--warmup", type=nonnegative_int, default=3)
    p.add_argument("--backends", type=csv_names(BACKEND_CHOICES), default="sm,ce",
                   help="fused backends (nvshmem needs --symm nvshmem; ce+epilogue: GEMM+RS with "
                        "the sum in the owner's epilogue)")
    p.add_argument("--symm", default="cuda", choices=("cuda", "nvshmem"),
                   help="torch symmetric-memory backend of the process")
    tokens = [t for s in REGISTRY.values() if s.bench for t in s.bench.tokens]
    p.add_argument("--ops", type=csv_names((*tokens, *TABLES)),
                   default="ag,rs",
                   help="comma-separated: ag (AG+GEMM), rs (GEMM+RS), ar (GEMM+all-reduce: "
                        "M = 1..512 and 8192 unless --m), ag_fp8 / rs_fp8 (the same in FP8, "
                        "--scales), ring_attn (ring attention), ulysses (Ulysses attention), "
                        "moe (MoE dispatch + expert GEMMs + combine)")
    p.add_argument("--check", action="store_true",
                   help="correctness only (fused vs unfused, no timing); with --loopback W (or "
                        "SYNCOPATE_GPU_LOOPBACK=W) on one GPU, no torchrun. Ops: ring_attn, "
                        "ulysses, ar, moe")
    p.add_argument("--loopback", type=int, default=None,
                   help="W virtual ranks on one GPU, for --check only (the benchmark refuses "
                        "to time loopback)")
    p.add_argument("--kernel", default="tma", choices=("tma", "ptr"))
    p.add_argument("--scales", default="row", choices=("tensor", "row"),
                   help="FP8 rows (--ops ag_fp8,rs_fp8): tensor-wise or row-wise scales")
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16"))
    p.add_argument("--budget-s", type=positive_float, default=None,
                   help="start a row only if it should end within this many seconds, judged by "
                        "the slowest row so far (default 150, quick 60)")
    p.add_argument("--m", type=csv_ints, default=None,
                   help="comma-separated M values to run (default: 8192, 1024, 4096; quick: 8192)")
    p.add_argument("--model", choices=("block",), default=None,
                   help="time a model component end to end instead of the op rows: block (a "
                        "Llama-style transformer block, syncopate.nn.TransformerBlock, fused vs "
                        "unfused vs torch's async-TP vs ideal, forward and forward + backward; "
                        "writes bench_block.json)")
    p.add_argument("--blocks", type=csv_names(block.NAMES), default=None,
                   help=f"with --model block: the shapes (default all: {', '.join(block.NAMES)})")
    compile_time.add_arguments(p)
    calibrate.add_arguments(p)
    return p


def model_problem(args) -> str | None:
    """Why ``--model`` cannot go with the other options given, or None (one mode per run)."""
    if args.blocks and args.model is None:
        return "--blocks picks the shapes of --model block: add --model block"
    if args.model is None:
        return None
    for flag, on in (("--check", args.check), ("--calibrate", args.calibrate),
                     ("--compile", args.compile)):
        if on:
            return (f"--model {args.model} times the model; it does not combine with {flag} "
                    f"(the block's correctness is the test suite: tests/test_torch_compile_block"
                    f".py, tests/gpu)")
    return None


def parse_args(argv=None):
    return build_parser().parse_args(argv)


def loopback_refusal(env=None, *, in_loopback: bool | None = None,
                     device_count: int | None = None) -> str | None:
    """Why the benchmark must not run here, or None. It refuses loopback (W virtual ranks on
    one GPU, docs/loopback.md) and, likewise, more ranks on this node than GPUs: the ranks
    then share SMs, copy engines and (loopback) the host's GIL, so every time it would print
    measures the sharing, not the kernels. Correctness runs there; timings do not."""
    env = os.environ if env is None else env
    if in_loopback is None:
        in_loopback = collectives.current_loopback() is not None
    if in_loopback or settings.GPU_LOOPBACK.get(env):
        return ("the benchmark refuses loopback (W virtual ranks sharing one GPU): its timings "
                "would measure the ranks competing for the same SMs and copy engines, not the "
                "kernels. Loopback is for correctness (tests/gpu with SYNCOPATE_GPU_LOOPBACK=W); "
                "benchmark with one process per GPU: torchrun --nproc-per-node <GPUs> -m "
                "syncopate.bench (unset SYNCOPATE_GPU_LOOPBACK)")
    local = env.get("LOCAL_WORLD_SIZE")
    if local and device_count is None:
        import torch
        device_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if local and device_count is not None and int(local) > device_count:
        return (f"{local} ranks on this node but {device_count} GPU(s): ranks would share a GPU "
                f"and the timings would be meaningless; run with --nproc-per-node "
                f"{max(1, device_count)} (one process per GPU)")
    return None


def _refuse(why: str) -> int:
    """A usage error: one line on stderr, exit status 2."""
    print(f"{PROG}: error: {why}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    args = parse_args(argv)
    command = " ".join([sys.executable, "-m", "syncopate.bench"]
                       + (argv if argv is not None else sys.argv[1:]))
    why = model_problem(args)
    if why is not None:
        return _refuse(why)
    if args.compile:  # CPU only: no torchrun, no GPU, no loopback question
        return run_handler(lambda a: compile_time.main(a, command, git_commit()), args, PROG)
    if args.check:
        return check_main(args)
    if args.loopback:  # asked for loopback without --check: the timings would be meaningless
        hint = ("the block's forward and backward are checked in loopback by the test suite "
                "(tests/gpu)" if args.model else "for correctness in loopback add --check")
        return _refuse(f"{loopback_refusal(in_loopback=True)}; {hint}")
    if args.calibrate and args.from_results:  # CPU only: fit a past run's measurements
        return run_handler(lambda a: calibrate.main(a, command, git_commit()), args, PROG)
    why = loopback_refusal()
    if why is not None:
        return _refuse(why)
    if args.calibrate:
        return calibrate.main(args, command, git_commit())
    if "RANK" not in os.environ:
        return _refuse("run under torchrun: torchrun --nproc-per-node <GPUs> -m syncopate.bench "
                       "... (or --compile, CPU only)")
    import torch.distributed as dist

    init_distributed()
    comm = runtime.Communicator(symm_backend=args.symm)
    rank0 = comm.rank == 0
    log = (lambda m: print(m, flush=True)) if rank0 else (lambda m: None)
    backends = [b for b in args.backends.split(",") if b]
    if "nvshmem" in backends and args.symm != "nvshmem":
        log("nvshmem backend needs --symm nvshmem; dropping it")
        backends.remove("nvshmem")
    if args.model == "block":
        iters = args.iters or (5 if args.quick else 10)
        # at least one warm-up: the compiled columns compile in their first call
        block.run(comm, args, log, Timer(comm.device, iters, max(1, args.warmup)), command)
        comm.close()
        dist.destroy_process_group()
        return 0
    iters = args.iters or (10 if args.quick else 20)
    timer = Timer(comm.device, iters, args.warmup)
    budget = args.budget_s if args.budget_s is not None else (60.0 if args.quick else 150.0)
    results, skipped = [], []
    for op, M, N, K in within_budget(comm, rows_for(args, comm.world_size), budget, skipped):
        log(f"{op} M={M} N={N} K={K} ...")
        t0 = time.monotonic()
        r = row_fn(op)(comm, timer, M, N, K, args, backends, log)
        results.append(derive(r, backends))
        log("  sweep: " + ", ".join(f"{k} {v:.3f}" for k, v in (r.get("sweep") or {}).items()))
        log(f"  done in {time.monotonic() - t0:.1f} s")
        if rank0:  # after every row: a run killed by its time limit keeps the rows it finished
            write_results(args, results, backends, skipped, budget, iters, command, comm)
    for name, table in TABLES.items():
        if name in args.ops.split(","):
            t_rows = table.run(comm, args, log, check_only=False, timer=timer)
            if rank0:
                print(table.format_rows(t_rows))
                write_json(os.path.join(args.out, f"bench_{name}.json"),
                           {"command": command, "commit": git_commit(), "rows": t_rows})
    if rank0:
        note = write_results(args, results, backends, skipped, budget, iters, command, comm,
                             final=True)
        print(format_table(results, backends))
        for r in results:
            for name, err in (r.get("errors") or {}).items():
                print(f"  [{r['op']} {r['M']}x{r['N']}x{r['K']}] {name}: {err}")
        for r in results:
            if r.get("fused default is"):
                print(f"  [{r['op']} {r['M']}x{r['N']}x{r['K']}] fused default = "
                      f"{r['fused default is']}")
        if skipped:
            print(f"skipped (would end past the {budget:g} s budget): {skipped}")
        if note:
            print(note)
        print(f"wrote {os.path.join(args.out, 'bench.json')}")
    comm.close()
    dist.destroy_process_group()
    return 0


def _check_worker(rank, W, args):
    """One rank of a ``--check`` run: the fused ops once each against their unfused path."""
    comm = runtime.Communicator()
    log = (lambda m: print(m, flush=True)) if rank == 0 else (lambda m: None)
    ops = _check_ops(args)
    try:
        return [row for op, mod in CHECKS.items() if op in ops
                for row in (mod.run(comm, args, log, check_only=True) if op in TABLES
                            else mod.check_rows(comm, args, log))]
    finally:
        comm.close()


def _check_ops(args) -> set[str]:
    """The ops of a ``--check`` run by their rows' ``op`` (``ar`` is ``gemm_ar``: an op's
    ``--ops`` names are its ``OpSpec.bench.tokens``)."""
    op = {t: s.name for s in REGISTRY.values() if s.bench for t in s.bench.tokens}
    return {op.get(o, o) for o in args.ops.split(",") if o}


def check_main(args) -> int:
    """``--check``: correctness only, in loopback (``--loopback W``) or under torchrun."""
    ops = _check_ops(args)
    if not ops or not ops <= set(CHECKS):
        print(f"syncopate.bench --check runs --ops ring_attn, ulysses, ar and/or moe (got "
              f"{args.ops}); the other GEMM ops are checked by tests/gpu", file=sys.stderr)
        return 2
    lb = args.loopback or settings.GPU_LOOPBACK.get()
    if lb:
        import torch

        if not torch.cuda.is_available():
            print(f"syncopate.bench --check --loopback {lb}: needs a CUDA GPU (the W virtual "
                  f"ranks share it); this torch sees none. The CPU-side checks are the test "
                  f"suite (docs/loopback.md)", file=sys.stderr)
            return 1
        args.quick = True  # W kernels share one GPU: the small shapes stay co-resident
        results = run_loopback(_check_worker, lb, args, device=torch.device("cuda", 0),
                               timeout_s=settings.BENCH_CHECK_S.get())
        failed = [v for status, v in results if status != "ok"]
        if failed:
            print(f"syncopate.bench --check failed: {failed[0].strip().splitlines()[-1]}",
                  file=sys.stderr)
            return 1
        rows = results[0][1]
    elif "RANK" in os.environ:
        import torch.distributed as dist
        init_distributed()
        rank = dist.get_rank()
        rows = _check_worker(rank, dist.get_world_size(), args)
        dist.destroy_process_group()
        if rank != 0:
            return 0
    else:
        print("syncopate.bench --check: give --loopback W (one GPU) or run under torchrun",
              file=sys.stderr)
        return 2
    # the GPU work is done: a bug in the report is one line, not a traceback after it
    # (SYNCOPATE_TRACEBACK=1 shows it)
    return run_handler(lambda _: report_check_rows(rows), args, f"{PROG} --check")


def check_row_line(r: dict) -> str:
    """One line per ``--check`` row, whatever op produced it (each op's row has its own keys;
    a row without ``op`` is ring attention's, as its older rows were)."""
    return CHECKS[r.get("op", "ring_attn")].summary(r)


def report_check_rows(rows: list[dict]) -> int:
    """Print every ``--check`` row and the problems found; the exit status (1 on a problem)."""
    for r in rows:
        print(check_row_line(r))
    problems = [p for op, mod in CHECKS.items()
                for p in mod.check_problems([r for r in rows if r.get("op", "ring_attn") == op])]
    for p in problems:
        print(f"syncopate.bench --check: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
