"""Timing on the GPU for the benchmark: :class:`Timer`, the median device time of a call
(CUDA events, the L2 flushed and the GPU kept busy ahead of the host before each iteration),
the max over ranks.  Every column of the benchmark is timed by one Timer, so they compare; the
GPU scripts (``scripts/gpu_rs_breakdown.py``) use it too.
"""

from __future__ import annotations

import statistics
import time

__all__ = ["Timer"]


class Timer:
    """Median **device** time of ``fn`` (CUDA events), the L2 flushed before each iteration,
    plus the median **host** time of one call (``last_host_ms``, after each timing).

    Why a sleep kernel before each iteration: at M = 1024 an op's Python (argument checks,
    launches) can take longer than its kernels, and with the events right behind the flush the
    GPU would sit idle waiting for the host inside the timed window -- the column would measure
    Python, not the op. ``torch.cuda._sleep`` (calibrated to ``run_ahead_ms``, more than one
    call's host time) keeps the GPU busy while the host enqueues the iteration, so the events
    bracket only GPU work and the host runs further ahead each iteration; the host time is
    reported beside it. The iterations are queued back to back (no synchronisation between
    them), so the collectives keep the ranks' GPUs aligned. Every column is timed the same way."""

    def __init__(self, device, iters, warmup, run_ahead_ms: float = 1.0):
        import torch
        self.iters, self.warmup = iters, warmup
        self.flush = torch.empty(256 * 1024 * 1024, dtype=torch.uint8, device=device)
        #: median host time (ms) of one call in the last timing
        self.last_host_ms: float | None = None
        self.sleep_cycles = self._calibrate(run_ahead_ms)

    @staticmethod
    def _calibrate(ms: float) -> int:
        import torch
        cycles = 1_000_000
        torch.cuda._sleep(cycles)  # warm up
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        torch.cuda.synchronize()
        per_ms = cycles / max(s.elapsed_time(e), 1e-3)
        return int(per_ms * ms)

    def __call__(self, fn):
        import torch
        import torch.distributed as dist
        for _ in range(self.warmup):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(self.iters)]
        host = []
        for s, e in zip(starts, ends):
            self.flush.zero_()
            torch.cuda._sleep(self.sleep_cycles)
            s.record()
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
            e.record()
        torch.cuda.synchronize()  # every event complete before elapsed_time
        ms = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))
        t = torch.tensor([ms, statistics.median(host) * 1e3], device=self.flush.device,
                         dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        self.last_host_ms = float(t[1])
        return float(t[0])
