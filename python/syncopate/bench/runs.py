"""What a benchmark run measures and how it starts, shared by the benchmark
(:mod:`syncopate.bench.__main__`) and the calibration run (:mod:`.calibrate`): the rows of
``--ops`` / ``--m`` / ``--quick`` (:func:`rows_for`) and the process group
(:func:`init_distributed`).
"""

from __future__ import annotations

import os

from .gemm_ar import AR_M, AR_M_QUICK, AR_SHAPES

AG_SHAPES = [(14336, 4096), (28672, 8192), (29568, 8192)]  # (N, K), B per rank [K, N/W]
RS_SHAPES = [(14336, 4096), (28672, 8192)]  # (K, N), A per rank [M, K/W]
M_MAIN = 8192
M_EXTRA = (1024, 4096)


def rows_for(args, W):
    rows = []
    ms = (M_MAIN,) if args.quick else (M_MAIN,) + M_EXTRA
    if args.m:
        ms = tuple(int(x) for x in args.m.split(",") if x)
    ops = args.ops.split(",")
    for M in ms:
        if "ag" in ops:
            for N, K in (AG_SHAPES[:1] if args.quick else AG_SHAPES):
                rows.append(("ag_gemm", M, N, K))
        if "rs" in ops:
            for K, N in (RS_SHAPES[:1] if args.quick else RS_SHAPES):
                rows.append(("gemm_rs", M, N, K))
        if "ag_fp8" in ops:  # FP8 (e4m3 in, bf16 out; --scales): bench/fp8.py
            for N, K in (AG_SHAPES[:1] if args.quick else AG_SHAPES):
                rows.append(("ag_gemm_fp8", M, N, K))
        if "rs_fp8" in ops:
            for K, N in (RS_SHAPES[:1] if args.quick else RS_SHAPES):
                rows.append(("gemm_rs_fp8", M, N, K))
    if args.quick and "ag" in ops and not args.m:
        rows.append(("ag_gemm", 1024, AG_SHAPES[0][0], AG_SHAPES[0][1]))
    if "ar" in ops or "gemm_ar" in ops:  # decode and small prefill, then M = 8192 (issue 12)
        ar_ms = ms if args.m else (AR_M_QUICK if args.quick else AR_M)
        rows += [("gemm_ar", M, N, K) for M in ar_ms for N, K in AR_SHAPES]
    return rows


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
