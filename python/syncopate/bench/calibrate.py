"""``python -m syncopate.bench --calibrate``: measure what the ops' cost model needs on the GPUs
present and write the GPU type's calibration file (:mod:`syncopate.calibration`).

Under torchrun, one process per GPU (W >= 2)::

    torchrun --nproc-per-node 2 -m syncopate.bench --calibrate [--out python/syncopate/calibration]

``--ops`` picks what is measured (default ``ag,rs``, which every file needs: the local GEMM
table and the NCCL fits); ``--ops ag,rs,ar,ag_fp8,rs_fp8,ring_attn,ulysses,moe`` also measures
every other op's candidates at the benchmark's shapes into the file's ``ops`` section
(:mod:`syncopate.bench.fit`: which column is which candidate), so their decisions
become calibrated instead of model only. ``gemm_ar``'s rows also add decode-sized local GEMMs
(M = 1 ... 512) to the local table and an NCCL all-reduce fit.

It runs the benchmark's own rows (:mod:`syncopate.bench.rows`: per shape, the NCCL collective
alone, our local GEMM and cuBLAS alone, each fused variant at the op's own plan -- the
``fused[<backend>] auto`` column -- checked against the reference before it is timed), a
sweep of NCCL all-gather / reduce-scatter sizes for the latency/bandwidth fit, and the host
time of one call per path (the GPU kept busy ahead so no call waits for it), then fits and
writes the file with :func:`syncopate.bench.fit.from_bench_rows` -- merged with the
file already there, so a calibration at another world size is kept. The same fit seeds a file
from a past run without a GPU::

    python -m syncopate.bench --calibrate --from-results bench/results/2026-11-30-h200x2-run6

Nothing here runs in the user's process: the ops only read the file.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from .. import calibration, runtime
from ..calibration import CalibrationError, gpu_type, parse
from ..ops import ag_gemm, gemm_rs
from ..ops.driver import gemm_call, resolve_config, run_local
from ..runtime import _cuda
from .fit import from_bench_rows, merge, parse_host_profile, relpath
from .runs import TABLES, init_distributed, row_fn, rows_for
from .timer import Timer

__all__ = ["add_arguments", "from_results", "main", "write", "COLLECTIVE_SIZES_MIB"]

#: the benchmark's tables of the ops with rows of their own (ring attention, Ulysses, MoE): a
#: ``--from-results`` directory's are fitted into the ``ops`` section where present
OP_TABLES = tuple(f"bench_{name}.json" for name in TABLES)
#: sizes of the NCCL sweep (MiB of the whole gathered / reduced tensor)
COLLECTIVE_SIZES_MIB = (1, 4, 16, 64, 256)
#: a collective launch's host time is not in a benchmark run's logs: the seed takes one
#: torch.matmul launch for it (both are one C++ call enqueueing one kernel), and says so
NCCL_HOST_ASSUMPTION = ("not measured in this run: assumed equal to one torch.matmul launch "
                        "(one C++ call enqueueing one kernel); --calibrate measures it")


def add_arguments(p) -> None:
    p.add_argument("--calibrate", action="store_true",
                   help="measure the cost model's inputs on the GPUs present and write the GPU "
                        "type's calibration file (under torchrun; with --from-results: fit a "
                        "past run's bench.json instead, no GPU)")
    p.add_argument("--from-results", default=None, metavar="DIR",
                   help="with --calibrate: a benchmark result directory (bench.json, "
                        "host_profile.log) to fit instead of measuring")
    p.add_argument("--calibration-dir", default=None, metavar="DIR",
                   help="with --calibrate: where to write <gpu>.json (default: the package's "
                        "syncopate/calibration directory)")


def write(content: dict, directory: str | None = None) -> str:
    """Write (merged with the file already there) and re-read the file through the ops'
    parser, so a file that the ops would refuse is never left behind."""
    directory = directory or calibration.calibration_dir()
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{content['gpu']}.json")
    old = None
    if os.path.exists(path):
        with open(path) as f:
            old = json.load(f)
    raw = (json.dumps(merge(old, content), indent=1, sort_keys=True) + "\n").encode()
    parse(raw, path)
    with open(path + ".tmp", "wb") as f:
        f.write(raw)
    os.replace(path + ".tmp", path)
    return path


def from_results(directory: str, out_dir: str | None = None) -> str:
    """Fit a past benchmark run (``bench.json`` + ``host_profile.log``) into a calibration file.
    The run's README says how it was made; every number's ``source`` names the row and column."""
    bench = os.path.join(directory, "bench.json")
    prof = os.path.join(directory, "host_profile.log")
    for f in (bench, prof):
        if not os.path.exists(f):
            raise CalibrationError(f"{f} is missing: --from-results needs a benchmark run with "
                                   f"bench.json and host_profile.log (scripts/gpu_check.sh with "
                                   f"GPU_CHECK_PROFILE=1 GPU_CHECK_FULL_BENCH=1)")
    with open(bench) as f:
        data = json.load(f)
    meta = data["meta"]
    with open(prof) as f:
        host = parse_host_profile(f.read(), relpath(prof))
    if "local:cublas" in host and "nccl" not in host:
        host["nccl"] = {"seconds": host["local:cublas"]["seconds"],
                        "source": NCCL_HOST_ASSUMPTION}
    has_epilogue = any(r.get("fused[ce+epilogue] auto") for r in data["results"])
    stream_wait = (has_epilogue,
                   f"{relpath(bench)}: the ce+epilogue variant (which needs "
                   f"cuStreamWaitValue32) ran and passed its check" if has_epilogue else
                   f"{relpath(bench)}: no ce+epilogue measurement")
    op_rows = []
    for name in OP_TABLES:  # the other ops' tables, where the run has them
        path = os.path.join(directory, name)
        if os.path.exists(path):
            with open(path) as f:
                op_rows += json.load(f)["rows"]
    content = from_bench_rows(data["results"], meta, relpath(bench), host=host,
                              stream_wait=stream_wait, gpu=gpu_type(meta["gpu"]),
                              extra_meta={"fitted_by": "python -m syncopate.bench --calibrate "
                                                       f"--from-results {relpath(directory)}"},
                              op_rows=op_rows)
    return write(content, out_dir)


def host_time_s(fn, sleep_cycles: int, n: int = 100) -> float:
    """Median host seconds of ``fn()`` over ``n`` calls; every 20 calls the GPU is given
    ``sleep_cycles`` of sleep ahead, so no call waits for it (the launch queue never fills).
    Also what scripts/gpu_host_profile.py and scripts/gpu_launch_paths.py time with."""
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
    return statistics.median(out)


def _measure_host(comm, timer, dtype) -> dict:
    """Host time of one call per path at M = 1024 (where it matters: short GEMMs), every rank
    taking part in every call; rank 0's medians."""
    import torch
    import torch.distributed as dist

    W, dev = comm.world_size, comm.device
    sleep = timer.sleep_cycles * 20
    M, N, K = 1024, 4096, 4096
    a = torch.randn(M // W, K, device=dev).to(dtype)
    b = torch.randn(K, N // W, device=dev).to(dtype)
    gathered = torch.empty(M, K, device=dev, dtype=dtype)
    out = torch.empty(M, N // W, device=dev, dtype=dtype)
    call = gemm_call("tma", gathered, b, out, resolve_config("tma", M, N // W, K, dtype))
    rows = {"local:triton": host_time_s(lambda: run_local(call), sleep),
            "local:cublas": host_time_s(lambda: torch.matmul(gathered, b, out=out), sleep),
            "nccl": host_time_s(lambda: dist.all_gather_into_tensor(gathered, a), sleep)}
    for be in ("sm", "ce"):
        rows[f"ag_gemm:{be}"] = host_time_s(lambda: ag_gemm(a, b, comm, backend=be, out=out), sleep)
    a2 = torch.randn(M, K // W, device=dev).to(dtype)
    b2 = torch.randn(K // W, N, device=dev).to(dtype)
    o2 = torch.empty(M // W, N, device=dev, dtype=dtype)
    for label in ("sm", "ce", "ce+epilogue"):
        be, _, red = label.partition("+")
        try:
            rows[f"gemm_rs:{label}"] = host_time_s(
                lambda: gemm_rs(a2, b2, comm, backend=be, reduce=red or "comm", out=o2), sleep)
        except Exception as e:  # noqa: BLE001 - e.g. no stream waits: the variant is left out
            rows[f"gemm_rs:{label}"] = float("nan")
            print(f"calibrate: host time of gemm_rs {label} not measured: {e}", file=sys.stderr)
    comm.clear_cache()
    return {k: {"seconds": v, "source": f"--calibrate: median host time of 100 calls at M=1024 "
                                         f"(N=K=4096, W={W}), rank 0"}
            for k, v in rows.items() if v == v}


def _collective_sweep(comm, timer, dtype) -> dict:
    import torch
    import torch.distributed as dist
    W, dev = comm.world_size, comm.device
    esize = torch.empty((), dtype=dtype).element_size()
    pts = {"all_gather": [], "reduce_scatter": []}
    for mib in COLLECTIVE_SIZES_MIB:
        n = mib * 2**20 // esize // W * W
        full = torch.empty(n, device=dev, dtype=dtype)
        part = torch.empty(n // W, device=dev, dtype=dtype)
        nbytes = n * esize
        src = f"--calibrate: NCCL sweep, {mib} MiB, W={W}"
        pts["all_gather"].append(
            (nbytes, timer(lambda: dist.all_gather_into_tensor(full, part)) * 1e-3, src))
        pts["reduce_scatter"].append(
            (nbytes, timer(lambda: dist.reduce_scatter_tensor(part, full)) * 1e-3, src))
    return pts


def _op_tables(comm, timer, args, rank0) -> list[dict]:
    """Rows of the ops with tables of their own (``--ops ring_attn,ulysses,moe``), measured
    with the benchmark's own row functions (fused and serial columns side by side)."""
    log = (lambda m: print(m, flush=True)) if rank0 else (lambda m: None)
    return [row for name, table in TABLES.items() if name in args.ops.split(",")
            for row in table.run(comm, args, log, check_only=False, timer=timer)]


def main(args, argv_text: str, commit: str | None) -> int:
    """The ``--calibrate`` run (see the module docstring)."""
    if args.from_results:
        path = from_results(args.from_results, args.calibration_dir)
        print(f"wrote {path}")
        return 0
    if "RANK" not in os.environ:
        print("--calibrate measures collectives: run it under torchrun, one process per GPU "
              "(torchrun --nproc-per-node <GPUs> -m syncopate.bench --calibrate), or fit a past "
              "run with --from-results DIR", file=sys.stderr)
        return 2
    import datetime

    import torch
    import torch.distributed as dist

    init_distributed()
    comm = runtime.Communicator(symm_backend=args.symm)
    if comm.world_size < 2:
        print("--calibrate needs >= 2 GPUs (the collectives and the fused variants); the local "
              "GEMM alone is in every calibration made with more", file=sys.stderr)
        return 2
    rank0 = comm.rank == 0
    dtype = getattr(torch, args.dtype)
    timer = Timer(comm.device, args.iters or 20, args.warmup)
    backends = ["sm", "ce"] + (["ce+epilogue"] if _cuda.stream_wait_available() else [])
    results = []
    for op, M, N, K in rows_for(args, comm.world_size):
        fn = row_fn(op)
        results.append(fn(comm, timer, M, N, K, args, backends, lambda m: None))
        comm.clear_cache()
        if rank0:
            print(f"calibrate: {op} {M}x{N}x{K} done", flush=True)
    op_rows = _op_tables(comm, timer, args, rank0)
    coll = _collective_sweep(comm, timer, dtype)
    host = _measure_host(comm, timer, dtype)
    name = torch.cuda.get_device_name(comm.device)
    meta = {"world_size": comm.world_size, "dtype": args.dtype, "gpu": name, "backends": backends,
            "git_commit": commit, "command": argv_text, "torch": torch.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat()}
    if rank0:
        import triton
        meta["triton"] = triton.__version__
        content = from_bench_rows(
            results, meta, "--calibrate run", host=host, gpu=gpu_type(name),
            stream_wait=(_cuda.stream_wait_available(), "--calibrate: the driver's "
                         "cuStreamWaitValue32 entry point on the calibrating machine"),
            collective_points=coll, op_rows=op_rows)
        print(f"wrote {write(content, args.calibration_dir)}")
    comm.close()
    dist.destroy_process_group()
    return 0
