"""``python -m syncopate.bench --compile``: what fusing costs at compile time (CPU only).

Compiles the project's GEMMs (the persistent TMA kernel and the pointer kernel) fused with an
all-gather (AG+GEMM) and a reduce-scatter (GEMM+RS) at the README's first standard shapes
(M = 8192; AG+GEMM N = 14336, K = 4096; GEMM+RS N = 4096, K = 14336), for W = 2 and W = 8
and the ``sm`` and ``ce`` backends, each configured as the ops configure it (default GEMM
config, the cost model's split and comm programs, the ops' default modes; GEMM+RS on ``ce``
is the epilogue variant, the op's default there).  For each it reports, as medians of
``--runs`` runs (after one untimed run of the stage, which pays the passes' imports):

* the syncopate stage on the kernel's TTIR, by step: ``parse`` (TTIR text -> xDSL), each pass,
  ``print`` (xDSL -> TTIR text) -- the times ``run_pipeline`` records -- and ``stage``, the
  wall time of the whole ``run_pipeline`` call;
* ``compile`` (median of ``--compile-runs``, default 1: seconds each, Triton and ptxas
  dominate): the whole ``syncopate.compile`` to a cubin (Triton's stages, ours, ptxas),
  with Triton's cache bypassed (``always_compile``), and ``triton``: the same kernel compiled
  unfused, so ``compile - triton`` is what fusing adds end to end.

Both use ``keep_ir=False``, the runtime's setting (``keep_ir=True``, the default of
``syncopate.compile``, also prints the IR after every pass).

Why a benchmark and not a test: these are wall-clock times of Python on whatever machine runs
them; an assertion on them fails on a loaded machine (the test suite only checks that the
pipeline runs and reports its per-pass times).  Needs Triton and xDSL, no GPU, no torch.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass

from syncopate_mlir.pipeline import FuseRequest, run_pipeline

from .. import backends
from ..cli_args import csv_ints, csv_names, nonnegative_int, positive_int
from ..compiler import compile as syn_compile
from ..compiler import resolve_operands
from ..kernels import compile_args, compile_attrs, default_config, kernel_fn
from ..ops.driver import gemm_plan
from ..ops.gemm_rs import EPILOGUE_SPLIT, _check_epilogue_order, _epilogue_groups
from ..schedule import all_gather, reduce_scatter

M = 8192
AG_NK = (14336, 4096)    # AG+GEMM: global N, K; this rank's B is [K, N/W]
RS_KN = (14336, 4096)    # GEMM+RS: global K, N; this rank's A is [M, K/W]
DTYPE = "bf16"
TARGET = ("cuda", 90)

#: short column names of the steps (lower-sm / lower-ce / lower-nvshmem share "lower")
STEP_COLUMNS = [("parse", "parse"), ("check-accesses", "check"), ("append-abi-params", "abi"),
                ("tile-remap", "remap"), ("insert-waits", "waits"), ("insert-signals", "signals"),
                ("insert-epilogue-reduce", "epi"), ("partition-sms", "part"),
                ("resolve-chunks", "resolve"), ("lower", "lower"), ("print", "print")]


@dataclass(frozen=True)
class Case:
    kernel: str      # "tma" | "ptr"
    op: str          # "ag" | "rs"
    world_size: int
    backend: str     # "sm" | "ce"

    @property
    def label(self) -> str:
        return f"{self.kernel} {'AG+GEMM' if self.op == 'ag' else 'GEMM+RS'} W={self.world_size} {self.backend}"


def build(case: Case) -> dict:
    """Everything one compile of ``case`` needs, chosen as the ops choose it."""

    W = case.world_size
    name = kernel_fn(case.kernel).__name__
    if case.op == "ag":
        N, K = AG_NK[0] // W, AG_NK[1]
        split, cp = gemm_plan("ag", case.backend, M, N, K, W, DTYPE, None, None)
        sched = all_gather([M, K], DTYPE, W, dim=0, order="swizzle",
                           mode=backends.get(case.backend).op_modes["ag"], split=split)
        operand, reduce = "a_ptr", "comm"
    else:
        K, N = RS_KN[0] // W, RS_KN[1]
        split, cp = gemm_plan("rs", case.backend, M, N, K, W, DTYPE, None, None)
        reduce = "comm"
        if "epilogue" in backends.get(case.backend).reduce_modes:  # the op's default (ce),
            cfg = _epilogue_groups(default_config(M, N, K, DTYPE, case.kernel), M, W)
            _check_epilogue_order(case.backend, M, W, cfg)  # with the config it would use
            split, reduce = EPILOGUE_SPLIT, "epilogue"
        sched = reduce_scatter([M, N], DTYPE, W, dim=0, order="swizzle",
                               mode=backends.get(case.backend).op_modes["rs"], split=split)
        operand = "c_ptr"
    if reduce != "epilogue":
        cfg = default_config(M, N, K, DTYPE, case.kernel)
    sig, cx = compile_args(name, DTYPE, cfg)
    return dict(fn=kernel_fn(case.kernel), name=name, sig=sig, cx=cx, attrs=compile_attrs(name),
                options=cfg.options(), schedule=sched, operand=operand, reduce=reduce,
                comm_programs=cp if backends.get(case.backend).has_comm_programs else 0,
                split=split, shape=(M, N, K))


def _plain_compile(b: dict):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    return triton.compile(ASTSource(b["fn"], b["sig"], b["cx"], b["attrs"]),
                          target=GPUTarget(TARGET[0], TARGET[1], 32), options=b["options"])


def measure(case: Case, runs: int, compile_runs: int = 1) -> dict:
    """Medians over ``runs`` of the syncopate stage's steps and over ``compile_runs`` (0: skip)
    of the whole fused and unfused compiles."""
    import triton


    b = build(case)
    ttir = _plain_compile(b).asm["ttir"]
    params = tuple(n for n in b["fn"].arg_names if b["sig"][n] != "constexpr")
    operands = resolve_operands(b["fn"], b["sig"], b["cx"], b["schedule"], b["operand"])
    req = FuseRequest(kernel_name=b["name"], schedule=b["schedule"],
                      operands=dict(sorted(operands.items())),
                      backend=case.backend, comm_programs=int(b["comm_programs"]),
                      params=params, keep_ir=False, reduce=b["reduce"])
    run_pipeline(ttir, req)  # untimed: the first call in a process imports the passes' modules
    steps: dict[str, list[float]] = {}
    stage = []
    for _ in range(runs):
        t0 = time.perf_counter()
        res = run_pipeline(ttir, req)
        stage.append((time.perf_counter() - t0) * 1e3)
        for k, v in res.times_ms.items():
            steps.setdefault("lower" if k.startswith("lower-") else k, []).append(v)
    out = {"case": case.label, "kernel": case.kernel, "op": case.op, "world_size": case.world_size,
           "backend": case.backend, "reduce": b["reduce"], "split": b["split"],
           "comm_programs": b["comm_programs"], "gemm_shape_per_rank": list(b["shape"]),
           "steps_ms": {k: statistics.median(v) for k, v in steps.items()},
           "stage_ms": statistics.median(stage)}
    if compile_runs > 0:
        knobs = triton.knobs.compilation
        saved = knobs.__dict__.get("always_compile")
        knobs.always_compile = True   # bypass Triton's on-disk cache: time the real compile
        try:
            fused, plain = [], []
            for _ in range(compile_runs):
                t0 = time.perf_counter()
                syn_compile(b["fn"], signature=b["sig"], constexprs=b["cx"],
                            schedule=b["schedule"], operand=b["operand"], backend=case.backend,
                            comm_programs=b["comm_programs"] or None, target=TARGET,
                            attrs=b["attrs"], keep_ir=False, reduce=b["reduce"], **b["options"])
                fused.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                _plain_compile(b)
                plain.append((time.perf_counter() - t0) * 1e3)
        finally:
            if saved is None:
                knobs.__dict__.pop("always_compile", None)
            else:
                knobs.always_compile = saved
        out["compile_ms"] = statistics.median(fused)
        out["triton_ms"] = statistics.median(plain)
    return out


def format_table(results: list[dict]) -> str:
    cols = [c for c in STEP_COLUMNS if any(c[0] in r["steps_ms"] for r in results)]
    head = ["case"] + [short for _, short in cols] + ["stage", "compile", "triton"]
    rows = []
    for r in results:
        row = [r["case"]] + [f"{r['steps_ms'][k]:.1f}" if k in r["steps_ms"] else "-"
                             for k, _ in cols]
        row += [f"{r['stage_ms']:.1f}"] + [f"{r[k]:.0f}" if k in r else "-"
                                           for k in ("compile_ms", "triton_ms")]
        rows.append(row)
    widths = [max(len(str(x[i])) for x in [head] + rows) for i in range(len(head))]
    fmt = lambda row: "| " + " | ".join(str(v).rjust(w) if i else str(v).ljust(w)  # noqa: E731
                                        for i, (v, w) in enumerate(zip(row, widths))) + " |"
    lines = [fmt(head), "|" + "|".join("-" * (w + 2) for w in widths) + "|"] + [fmt(r) for r in rows]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--compile (compile-time benchmark, CPU only)")
    g.add_argument("--compile", action="store_true",
                   help="time the compile of the fused GEMMs instead of running them (no GPU, "
                        "no torch.distributed); writes compile.json under --out")
    g.add_argument("--runs", type=positive_int, default=5,
                   help="runs of the syncopate stage per case (medians); default 5")
    g.add_argument("--compile-runs", type=nonnegative_int, default=1,
                   help="whole compiles (fused and unfused) per case, medians; default 1 (each "
                        "takes seconds, up to a minute at W = 8: Triton and ptxas); 0 skips them")
    g.add_argument("--world-sizes", type=csv_ints, default="2,8", help="W values to compile for")
    g.add_argument("--kernels", type=csv_names(("tma", "ptr")), default="tma,ptr",
                   help="local GEMMs: tma, ptr")


def main(args, argv_text: str, git_commit: str | None = None) -> int:
    """Run the compile-time benchmark; ``git_commit`` is recorded with the results (the bench's
    entry point passes its own)."""
    backends = [b for b in args.backends.split(",") if b in ("sm", "ce")]
    ops = [o for o in args.ops.split(",") if o in ("ag", "rs")]
    todo = [Case(k, o, int(w), b) for k in args.kernels.split(",") if k for o in ops
            for w in args.world_sizes.split(",") if w for b in backends]
    results = []
    t_start = time.monotonic()
    for case in todo:
        print(f"{case.label} ...", flush=True)
        results.append(measure(case, max(1, args.runs), max(0, args.compile_runs)))
    import triton
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "git_commit": git_commit, "command": argv_text, "runs": args.runs,
            "compile_runs": args.compile_runs,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs "
                       f"(load average {', '.join(f'{x:.1f}' for x in os.getloadavg())})",
            "python": platform.python_version(), "triton": triton.__version__,
            "target": list(TARGET), "dtype": DTYPE, "M": M, "ag_N_K": list(AG_NK),
            "rs_K_N": list(RS_KN), "keep_ir": False, "seconds": round(time.monotonic() - t_start, 1)}
    table = format_table(results)
    print(table)
    print(f"ms; steps and stage: medians of {args.runs} runs (stage = the whole run_pipeline "
          f"call: parse + passes + print); compile = syncopate.compile to a cubin, triton = the "
          f"same kernel unfused, Triton's cache bypassed (median of {args.compile_runs})")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "compile.json")
        with open(path, "w") as f:
            json.dump({"meta": meta, "results": results, "table": table}, f, indent=1)
        print(f"wrote {path}")
    return 0
