"""What a benchmark run measures and how it starts, shared by the benchmark
(:mod:`syncopate.bench.__main__`) and the calibration run (:mod:`.calibrate`): the rows of
``--ops`` / ``--m`` / ``--quick`` (:func:`rows_for`), each row's function (:func:`row_fn`),
the ops with tables of their own (:data:`TABLES`), the time budget (:func:`within_budget`) and
the process group (:func:`init_distributed`).
"""

from __future__ import annotations

import importlib
import os
import time

from ..ops import REGISTRY
from . import attention, moe, ulysses

#: the ops with tables of their own, by their ``--ops`` name (also their rows' ``op``): the
#: module that measures them (``run``), prints its table (``format_rows``) and, for
#: ``--check``, a row (``summary``) and what is wrong (``check_problems``); each run writes
#: ``bench_<name>.json`` beside ``bench.json``
TABLES = {"ring_attn": attention, "ulysses": ulysses, "moe": moe}


def rows_for(args, W):
    """``(op, M, N, K)`` of every row the run measures: each registered op with benchmark rows
    (``OpSpec.bench``) named in ``--ops``, at its standard shapes, M by M."""
    ops = set(args.ops.split(","))
    given = tuple(int(x) for x in args.m.split(",") if x) if args.m else None
    picked = [(s.name, given or s.bench.ms[bool(args.quick)],
               s.bench.shapes[:1] if args.quick else s.bench.shapes)
              for s in REGISTRY.values() if s.bench and ops & set(s.bench.tokens)]
    rows = []
    for M in dict.fromkeys(M for _, ms, _ in picked for M in ms):
        rows += [(name, M, N, K) for name, ms, shapes in picked if M in ms for N, K in shapes]
    return rows


def row_fn(op: str):
    """The benchmark's row function of op ``op`` (``OpSpec.bench.row``)."""
    module, _, fn = REGISTRY[op].bench.row.partition(":")
    return getattr(importlib.import_module(f"{__package__}.{module}"), fn)


def init_distributed() -> None:
    """One process per GPU under torchrun: the lent machine's settings (no NVLink multicast)
    unless the caller set them, this rank's GPU, the NCCL process group."""
    for k, v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                 ("NVSHMEM_DISABLE_NVLS", "1")):
        os.environ.setdefault(k, v)
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))


def start_row(elapsed: float, slowest: float, budget: float) -> bool:
    """Whether a row may start: it should end within the budget if it takes as long as the
    slowest row so far (rows differ by up to ~2x; a killed row loses its whole sweep)."""
    return elapsed + slowest <= budget


def within_budget(comm, items, budget: float, skipped: list, key=lambda item: item):
    """The ``items`` a run gets to, in order: each starts only if it should end within
    ``budget`` seconds (:func:`start_row`), else ``key(item)`` goes to ``skipped``. Rank 0
    decides for all (each rank's clock differs a little: a rank that skipped a row its peers
    started would hang them in the row's first collective); after each item the
    communicator's cache (the row's symmetric buffers) is freed before the next shape."""
    import torch
    import torch.distributed as dist
    t_start, slowest = time.monotonic(), 0.0
    for item in items:
        go = torch.tensor([int(start_row(time.monotonic() - t_start, slowest, budget))],
                          device=comm.device)
        if comm.world_size > 1:
            dist.broadcast(go, 0, group=comm.group)
        if not int(go):
            skipped.append(key(item))
            continue
        t0 = time.monotonic()
        yield item
        comm.clear_cache()
        slowest = max(slowest, time.monotonic() - t0)
