"""What the local GEMM benchmarks and the tuning run share: the named shape sets, the
correctness tolerance, the watchdog that keeps a hung kernel from hanging a job, the device
side (:class:`CudaBackend`: compile in worker processes, check, time; the tests substitute a
CPU fake with the same methods) and the command-line checks.

One module below :mod:`.local` (the table and ``--tune`` command), :mod:`.local_fp8` (the FP8
GEMM against ``torch._scaled_mm``) and :mod:`.tuning` (the tuning run), so that each imports
it and none imports another's command line.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

import triton
from triton.testing import do_bench

from .. import dtypes
from ..cli_args import shape as shape_arg
from ..kernels.gemm_config import GemmConfig
from ..kernels.gemm_launch import _plan_for, device_info, make_launcher, make_plan, matmul

#: Named shapes ``(M, N, K)`` of the benchmark's broad set: every regime the local GEMM meets.
BROAD = {
    "square-4096": (4096, 4096, 4096),
    "square-8192": (8192, 8192, 8192),
    "tall-skinny": (16384, 1024, 4096),
    "short-wide": (256, 16384, 8192),
    "k-heavy": (1024, 1024, 32768),
    "ragged-small": (1000, 3000, 1500),
    "ragged-large": (4097, 5000, 3001),
    "ragged-m77": (77, 8192, 4096),
    "decode-m16": (16, 8192, 8192),
    "llama-mlp": (8192, 28672, 8192),
}

#: The fused ops' benchmark shapes (``python -m syncopate.bench``): what the fused GEMMs run.
FUSED = {
    "bench-8192x8192x8192": (8192, 8192, 8192),
    "bench-8192x14336x4096": (8192, 14336, 4096),
    "bench-8192x7168x4096": (8192, 7168, 4096),
    "bench-8192x14336x8192": (8192, 14336, 8192),
    "bench-4096x14336x8192": (4096, 14336, 8192),
    "bench-1024x14336x4096": (1024, 14336, 4096),
}

SHAPE_SETS = {"broad": BROAD, "fused": FUSED, "all": {**BROAD, **FUSED}}

#: Relative Frobenius error a candidate must stay below to count as correct.
TOL = 1e-2


def shape_name(shape) -> str:
    """The set name of a shape (``'k-heavy'``), else ``'MxNxK'``."""
    for name, s in SHAPE_SETS["all"].items():
        if tuple(s) == tuple(shape):
            return name
    return "x".join(map(str, shape))


def geomean(xs) -> float:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def config_str(c) -> str:
    """``128x256x64 w8 s3 g8`` plus ``ws``/``sub``/``noflat``/``splitK`` markers."""
    c = GemmConfig.of(c)
    s = f"{c.BLOCK_M}x{c.BLOCK_N}x{c.BLOCK_K} w{c.num_warps} s{c.num_stages} g{c.GROUP_M}"
    if c.WARP_SPECIALIZE:
        s += " ws"
    if c.EPILOGUE_SUBTILE:
        s += " sub"
    if not c.FLATTEN:
        s += " noflat"
    if c.SPLIT_K > 1:
        s += f" split{c.SPLIT_K}"
    return s


class Report(dict):
    """A run's JSON report (``complete`` False until the end), written to ``path`` (if any)
    after every step and by the :class:`Watchdog` when it aborts -- hence the lock, and a
    temporary file renamed over the old one, so a reader never sees half a report."""

    def __init__(self, path: str | None, **fields):
        super().__init__(fields, complete=False)
        self.path, self._lock = path, threading.Lock()

    def write(self, reason: str | None = None) -> None:
        """Write the report; ``reason``: why the run is aborted (recorded as ``aborted``)."""
        with self._lock:
            if reason:
                self["aborted"] = reason
            if self.path:
                with open(self.path + ".tmp", "w") as f:
                    json.dump(self, f, indent=1)
                os.replace(self.path + ".tmp", self.path)

    def refuse(self, backend, prog: str) -> bool:
        """Whether ``backend`` cannot run here; then the reason is written and printed."""
        why = backend.available()
        if why:
            self["error"] = why
            print(f"{prog}: error: {why}; nothing to run", file=sys.stderr)
            self.write()
        return bool(why)


class Watchdog:
    """Aborts the process (after writing what was measured) if a step or the run overruns."""

    def __init__(self, step_timeout_s: float, hard_timeout_s: float, on_abort):
        self.t0 = time.monotonic()
        self.step = "start"
        self.step_t0 = self.t0
        self.step_timeout_s = step_timeout_s
        self.hard_timeout_s = hard_timeout_s
        self.on_abort = on_abort
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-watchdog")
        self._thread.start()

    def enter(self, step: str, timeout_s: float | None = None) -> None:
        """Start a step; ``timeout_s`` overrides the per-step limit for this one."""
        self.step, self.step_t0 = step, time.monotonic()
        self._limit = timeout_s

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            now = time.monotonic()
            reason = None
            limit = getattr(self, "_limit", None) or self.step_timeout_s
            if now - self.step_t0 > limit:
                reason = f"step '{self.step}' exceeded {limit:g} s"
            elif now - self.t0 > self.hard_timeout_s:
                reason = f"run exceeded {self.hard_timeout_s:g} s (during '{self.step}')"
            if reason:
                try:
                    self.on_abort(reason)
                finally:
                    sys.stderr.write(f"local GEMM benchmark: ABORT: {reason}\n")
                    sys.stderr.flush()
                    os._exit(3)


def _compile_task(M: int, N: int, K: int, dtype: str, config: dict) -> str | bool:
    """Worker process: compile every kernel of the plan of ``(M, N, K, dtype, config)`` on fresh
    CUDA tensors (Triton's JIT warmup, no launch); True, or the error as text."""
    try:
        import torch
        dt = dtypes.torch_dtype(dtype)
        a = torch.empty((M, K), dtype=dt, device="cuda")
        b = torch.empty((K, N), dtype=dt, device="cuda")
        c = torch.empty((M, N), dtype=dt, device="cuda")
        make_plan(a, b, c, kernel="auto", config=config).warmup(a, b, c)
        return True
    except Exception as e:  # compile error, out of resources: the candidate is not timed
        return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def _worker_init() -> None:
    """Import torch and start CUDA once per worker (not per task). A failure here is left to
    the tasks to report: an initializer that raises would break the whole pool."""
    try:
        import torch
        torch.cuda.init()
    except Exception:
        pass


class CudaProblem:
    """One shape and dtype on the GPU: operands, fp32 reference, and the timed runs."""

    def __init__(self, backend, M, N, K, dtype: str, seed: int):
        import torch
        self.backend = backend
        self.M, self.N, self.K = M, N, K
        self.dtype = dtypes.torch_dtype(dtype)
        g = torch.Generator(device="cuda")
        g.manual_seed(seed + M * 7 + N * 13 + K * 17)
        self.a = torch.randn(M, K, device="cuda", generator=g).to(self.dtype)
        self.b = torch.randn(K, N, device="cuda", generator=g).to(self.dtype)
        self.ref = torch.matmul(self.a.float(), self.b.float())
        self.ref_norm = torch.linalg.norm(self.ref)

    def rel_err(self, c) -> float:
        import torch
        return float(torch.linalg.norm(c.float() - self.ref) / self.ref_norm)

    def cublas_ms(self, warmup_ms, rep_ms) -> float:
        import torch
        c = torch.empty(self.M, self.N, device="cuda", dtype=self.dtype)
        self.cublas_err = None
        ms = self.backend.time_ms(lambda: torch.matmul(self.a, self.b, out=c), warmup_ms, rep_ms)
        self.cublas_err = self.rel_err(c)
        self._cublas_ms = ms
        return ms

    def run(self, config, warmup_ms, rep_ms, kernel: str = "auto") -> dict:
        """Check, then time, the local GEMM with ``config`` (None: the default choice)."""
        import torch
        rec = {}
        try:
            out = torch.full((self.M, self.N), float("nan"), device="cuda", dtype=self.dtype)
            launch, out = make_launcher(self.a, self.b, out, kernel=kernel, config=config)
            plan = _plan_for(self.a, self.b, out, kernel, config)[0]
            rec["plan"] = repr(plan)
            rec["config"] = plan.config.as_dict()
            launch()
            torch.cuda.synchronize()
            err = self.rel_err(out)
            rec["rel_err"] = err
            rec["correct"] = bool(err < TOL)  # NaN compares False: never passes
            if rec["correct"]:
                rec["ms"] = self.backend.time_ms(launch, warmup_ms, rep_ms)
        except Exception as e:  # compile failure, out of resources, ...
            rec["correct"] = False
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        return rec

    def e2e_ms(self, warmup_ms, rep_ms) -> tuple[float, float]:
        """``(matmul(a, b), torch.matmul(a, b))`` timed whole by the wall clock: calls back to
        back, then one synchronisation, divided by the count (median of 3). Allocation and the
        host's work are included: when the host takes longer per call than the GPU, this is the
        host's time -- what a caller of small GEMMs sees."""
        import torch
        est = getattr(self, "_cublas_ms", None) or 0.05
        n = max(10, min(5000, int(rep_ms / max(est, 0.002))))

        def wall(fn) -> float:
            fn()
            torch.cuda.synchronize()
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                torch.cuda.synchronize()
                runs.append((time.perf_counter() - t0) * 1e3 / n)
            return sorted(runs)[1]
        return wall(lambda: matmul(self.a, self.b)), wall(lambda: torch.matmul(self.a, self.b))

    def free(self) -> None:
        self.a = self.b = self.ref = None


class CudaBackend:
    """Everything the driver asks of the device, in one place (tests substitute a CPU fake)."""

    device = "cuda"

    def available(self) -> str | None:
        """None when usable, else the reason it is not."""
        import torch
        if not torch.cuda.is_available():
            return "no CUDA device visible to torch"
        return None

    def info(self) -> dict:
        import torch
        props = torch.cuda.get_device_properties(0)
        sms, cap, gpu = device_info(0)
        return dict(device=props.name, sms=sms, capability=list(cap), gpu=gpu,
                    torch=torch.__version__, triton=triton.__version__)

    def sync(self) -> None:
        import torch
        torch.cuda.synchronize()

    def time_ms(self, fn, warmup_ms: float, rep_ms: float) -> float:
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    def problem(self, M, N, K, dtype, seed) -> CudaProblem:
        return CudaProblem(self, M, N, K, dtype, seed)

    def precompile(self, tasks, *, workers: int, deadline: float) -> dict:
        """Compile ``tasks`` (``(shape, dtype, config)``) in ``workers`` spawned processes until
        ``deadline`` (``time.monotonic()``); ``{task: True or error text}`` for those that
        finished. Workers still busy at the deadline are terminated."""
        results = {}
        if not tasks:
            return results
        if workers <= 0:  # in this process, one by one
            for t in tasks:
                if time.monotonic() > deadline:
                    break
                results[t] = _compile_task(*t[0], t[1], t[2].as_dict())
            return results
        ex = ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                 initializer=_worker_init)
        futs = {ex.submit(_compile_task, *t[0], t[1], t[2].as_dict()): t for t in tasks}
        pending = set(futs)
        try:
            while pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                done, pending = wait(pending, timeout=left, return_when=FIRST_COMPLETED)
                for f in done:
                    try:
                        results[futs[f]] = f.result()
                    except Exception as e:  # a worker died
                        results[futs[f]] = f"{type(e).__name__}: {e}"
        finally:
            procs = list((getattr(ex, "_processes", None) or {}).values())
            ex.shutdown(wait=not pending, cancel_futures=True)
            if pending:
                for p in procs:
                    if p.is_alive():
                        p.terminate()
        return results


def gemm_shape(text: str) -> tuple[int, int, int]:
    """``--shapes MxNxK`` or a shape's name in the sets (``k-heavy``)."""
    if text in SHAPE_SETS["all"]:
        return SHAPE_SETS["all"][text]
    try:
        dims = shape_arg(text)
    except argparse.ArgumentTypeError as e:
        raise argparse.ArgumentTypeError(f"{e}; or a shape name: "
                                         f"{', '.join(SHAPE_SETS['all'])}") from None
    if len(dims) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give M, N and K, e.g. 8192x8192x8192")
    return dims


def check_out(path: str, prog: str) -> None:
    """``--out``: its folder must exist and the path must not be a folder; checked before the
    run, whose partial results (watchdog, no GPU) are written there."""
    folder = os.path.dirname(path) or "."
    if os.path.isdir(path) or not os.path.isdir(folder):
        print(f"{prog}: error: --out {path}: "
              + ("is a directory; give a file name" if os.path.isdir(path)
                 else f"no folder {folder}; create it first"), file=sys.stderr)
        raise SystemExit(2)
