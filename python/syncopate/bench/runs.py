"""What a benchmark run measures and how it starts, shared by the benchmark
(:mod:`syncopate.bench.__main__`) and the calibration run (:mod:`.calibrate`): the rows of
``--ops`` / ``--m`` / ``--quick`` (:func:`rows_for`), each row's function (:func:`row_fn`)
and the process group (:func:`init_distributed`).
"""

from __future__ import annotations

import importlib
import os

from ..ops import REGISTRY


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
