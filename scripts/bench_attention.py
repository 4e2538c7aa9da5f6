"""Time our attention kernels against SDPA's flash and cuDNN backends on one GPU, forward and
backward, check every result against SDPA, and (``--sweep``) pick the best config per shape
class for the per-GPU table.

Why: issue 31 asks for the ratio of our local attention (what ``syncopate.kernels.attention``
runs, and what the fused ring / Ulysses kernels are built from) to the best local attention a
PyTorch user already has, per shape, forward and backward, with the configs that reach it
written into ``kernels/configs/attention-<gpu>.json``.  One GPU run has to decide a lot, so the
script is built to finish inside a budget and to survive any one bad config:

* every launch of ours goes through :func:`attempt`: a compile error, an out-of-shared-memory
  launch or a wrong result is recorded on the row and skipped, never fatal;
* the Triton compiles (hundreds with ``--sweep``) run first, in parallel worker processes
  that launch each kernel once on small tensors with the same specialisation (``--workers``),
  filling Triton's on-disk cache; a config that fails there is not tried again;
* rows go in priority order; a row whose estimated time (FLOPs at a pessimistic rate, times
  the calls) would pass ``--budget-s`` is skipped and listed; repetitions per measurement
  adapt to the kernel's time (about ``--reps-s`` seconds each, 3 to 20 calls);
* progress is printed (flushed) per row and the JSON (``--json``) is rewritten after every
  row, so a run cut short still leaves its rows.

Per row (``B, Hq/Hkv, S, D``, causal or not): SDPA flash and cuDNN (``enable_gqa=True``; a
backend that refuses it gets K/V expanded to Hq heads outside the timing, marked ``*``), our
fast kernel (the table's config, or every candidate with ``--sweep``), our fusable kernel (what
the fused ops compile: how much the fused paths give up locally); causal rows also time the
zigzag-layout kernels (8 segments, ring attention at W = 4) against the prefix-causal kernel on
the same work, fast and fusable (the fusable zigzag kernel pairs mirrored query blocks, each
block's loop branch-free: issue 31 asks for at most 1.05x the prefix kernel, at the same
default config).  Backward likewise (``--no-backward`` skips it): SDPA's
autograd backward against ours (preprocess, dK/dV, dQ), the sweep a coordinate search (dK/dV
candidates with the dQ default, then dQ candidates with the best dK/dV); the fusable backward
(the context-parallel backward's kernels and config, on the contiguous sequence: the ring's
non-causal layout) and, on causal rows, the same kernels in the ring's causal layout -- every
rank's zigzag shard of queries against the whole gathered K/V (``ZIGZAG_W`` ranks, one after
the other: the whole causal work once) -- against the contiguous one and cuDNN.

Correctness: forward outputs against SDPA's (flash when it runs, else cuDNN, else the default
backend), max abs error at most ``FWD_TOL``, and the log-sum-exp against ``torch.logsumexp`` of
the fp32 scores (computed in row chunks) within ``LSE_TOL`` -- the first H100 run checked only
``o`` and passed a warp-specialised forward that left half of its LSE unwritten; gradients
normwise within ``BWD_TOL`` of SDPA's autograd, the backward fed by the fusable forward (the
kernel proven on a GPU), so a wrong forward LSE cannot pass as a wrong backward.  A
candidate over the tolerance is never chosen; a row whose chosen kernel is over it is a
failure: listed after the table, and the exit status is 1.

    python scripts/bench_attention.py                       # default configs, all rows
    python scripts/bench_attention.py --sweep --budget-s 330 --json out.json --tune-out t.json
    python scripts/bench_attention.py --quick               # three rows, no sweep

Ratios are SDPA time / our time: above 1 ours is faster.  TF/s counts 4 B Hq S^2 D for the
forward and 2.5 times that for the backward, halved for causal.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "python"))

from syncopate.kernels.attention import attention, fast_config  # noqa: E402
from syncopate.kernels.attention_bwd import (attention_backward,  # noqa: E402
                                             default_backward_config)
from syncopate.kernels.attention_config import (AttentionConfig, entry_key,  # noqa: E402
                                                fast_default_config, write_table)
from syncopate.kernels.attention_zigzag import (attention_zigzag, zigzag_order,  # noqa: E402
                                                zigzag_shard, zigzag_unorder)
from syncopate.kernels.gemm_table import gpu_key  # noqa: E402

# (B, Hq, Hkv, S, D), in priority order: --budget-s drops rows from the end
SHAPES = [
    (1, 32, 8, 16384, 128),
    (2, 32, 8, 8192, 128),
    (4, 32, 8, 4096, 128),
    (2, 32, 32, 8192, 128),
    (1, 32, 8, 16384, 64),
    (4, 32, 8, 2048, 128),
    (2, 32, 8, 8192, 64),
    (4, 16, 16, 4096, 64),
]
QUICK_SHAPES = SHAPES[:3]

#: forward outputs: max |ours - SDPA| (bf16 outputs of unit-variance inputs are below 1)
FWD_TOL = 3e-2
#: forward log-sum-exp: max |ours - logsumexp(fp32 scores)| (fp32 throughout, as tests/gpu)
LSE_TOL = 1e-3
#: gradients: ||ours - SDPA|| / ||SDPA|| per gradient
BWD_TOL = 2e-2
#: the zigzag rows: ring attention at this world size (2W segments)
ZIGZAG_W = 4
#: pessimistic throughputs for the budget's estimates (TFLOP/s)
EST_TFLOPS = {"fwd": 250.0, "bwd": 150.0, "fusable_bwd": 40.0}
#: the shape of the compile warm-up's launches (same specialisation as the rows' launches)
WARM_S = 2048
#: "cuda"; "cpu" (``--device cpu``) checks the script itself under ``TRITON_INTERPRET=1``
#: on tiny shapes -- its times mean nothing
DEVICE = "cuda"


def sync() -> None:
    import torch
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _configs(*specs) -> list:
    """``(BLOCK_M, BLOCK_N, num_warps, num_stages[, WARP_SPECIALIZE])`` tuples as configs."""
    return [AttentionConfig(*spec) for spec in specs]


def fwd_candidates(D: int) -> list:
    """The fast forward's sweep: warp-specialised (12 warps from 4) and two-loop configs that
    compile for sm_90 without spills and fit in shared memory (checked on the CPU when the
    list was written; a failure on the GPU is recorded, not fatal)."""
    ws = _configs((128, 128, 4, 2, True), (128, 64, 4, 2, True))  # WS_STAGES only
    plain = _configs((128, 128, 8, 2), (128, 128, 8, 3), (128, 64, 8, 3), (128, 64, 8, 4),
                     (64, 64, 4, 3), (128, 32, 8, 4), (64, 128, 4, 3))
    if D == 64:
        ws += _configs((256, 64, 4, 2, True))
        plain += _configs((128, 64, 4, 3))
    return ws + plain


def dkdv_candidates(D: int) -> list:
    """The fast dK/dV kernel's sweep (BLOCK_M query rows per step, BLOCK_N keys per program);
    no spills on sm_90."""
    if D == 128:
        return _configs((32, 128, 8, 2), (32, 128, 8, 3), (64, 64, 8, 2), (64, 64, 8, 3),
                        (64, 64, 4, 2), (32, 64, 4, 3))
    return _configs((64, 128, 8, 2), (32, 128, 8, 2), (32, 128, 8, 3), (64, 64, 8, 3),
                    (64, 64, 4, 2), (32, 64, 4, 3))


def dq_candidates(D: int) -> list:
    """The fast dQ kernel's sweep; no spills on sm_90."""
    if D == 128:
        return _configs((128, 64, 8, 2), (128, 64, 8, 3), (128, 32, 8, 3), (64, 64, 4, 3),
                        (128, 128, 8, 2), (64, 32, 4, 4))
    return _configs((128, 64, 8, 3), (128, 64, 8, 2), (128, 128, 8, 2), (128, 32, 8, 3),
                    (64, 64, 4, 3))


def flops(B, Hq, S, D, causal, backward=False) -> float:
    f = 4.0 * B * Hq * S * S * D * (2.5 if backward else 1.0)
    return f / 2 if causal else f


def log(*a) -> None:
    print(*a, flush=True)


# ------------------------------------------------------------------------------------------------
# Timing and the guarded launch
# ------------------------------------------------------------------------------------------------


def attempt(fn):
    """``(result, None)`` or ``(None, 'Type: message')``: one failing config never stops the
    run (compile errors, out of shared memory, launch errors, our typed refusals)."""
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - recorded on the row
        msg = str(e).strip().splitlines()
        return None, f"{type(e).__name__}: {msg[0][:200] if msg else ''}"


def time_ms(fn, reps_s: float) -> float:
    """Median of CUDA-event timings; the repetitions (3-20) adapt so that one measurement takes
    about ``reps_s`` seconds after a warm-up call."""
    import torch
    fn()
    sync()
    if DEVICE == "cpu":
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    first = start.elapsed_time(end)
    reps = int(min(20, max(3, reps_s * 1e3 / max(first, 1e-3))))
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(fn, check, reps_s: float) -> dict:
    """Run ``fn`` once and ``check`` its result (``(error, ok)``), then time it; every failure
    recorded as ``error``."""
    out, err = attempt(fn)
    if err:
        return dict(ms=None, err=None, ok=False, error=err)
    e, ok = check(out)
    del out
    ms, err = attempt(lambda: time_ms(fn, reps_s))
    return dict(ms=ms, err=e, ok=ok and ms is not None, error=err)


# ------------------------------------------------------------------------------------------------
# SDPA
# ------------------------------------------------------------------------------------------------


def sdpa_call(backend_name, q, k, v, causal):
    """``(fn, expanded)``: a closure running SDPA on one backend (None when it refuses the
    shape), and whether K/V had to be expanded to Hq heads (the backend refuses GQA)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = getattr(SDPBackend, backend_name)

    def gqa(q=q, k=k, v=v):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal,
                                                  enable_gqa=k.shape[1] != q.shape[1])
    try:
        gqa()
        sync()
        return gqa, False
    except RuntimeError:
        pass
    group = q.shape[1] // k.shape[1]
    # expanded once, outside the timing; with k/v requiring grad the expansion is part of the
    # graph, so the backward's gradients still reach k and v (summed over the group)
    ke, ve = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)

    def expanded(q=q):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, ke, ve, is_causal=causal)
    try:
        expanded()
        sync()
        return expanded, True
    except RuntimeError:
        return None, False


# ------------------------------------------------------------------------------------------------
# One row
# ------------------------------------------------------------------------------------------------


def _maxabs(a, b) -> float:
    return float((a.float() - b.float()).abs().max())


def _rel(a, b) -> float:
    b = b.float()
    return float((a.float() - b).norm() / b.norm().clamp_min(1e-30))


def reference_lse(q, k, causal: bool, sm_scale: float | None = None):
    """``logsumexp`` of the scaled fp32 scores per query row (``[B, Hq, S]``), computed in
    chunks of rows so that no ``S x S`` score tensor is held whole (a 16k sequence of 32 heads
    would need 34 GB)."""
    import torch
    B, Hq, Sq, D = q.shape
    scale = sm_scale if sm_scale is not None else 1.0 / math.sqrt(D)
    kf = k.float().repeat_interleave(Hq // k.shape[1], 1).transpose(-1, -2)
    out = torch.empty(B, Hq, Sq, dtype=torch.float32, device=q.device)
    rows = max(1, (1 << 27) // (B * Hq * k.shape[2]))
    cols = torch.arange(k.shape[2], device=q.device)
    for r0 in range(0, Sq, rows):
        s = (q[:, :, r0:r0 + rows].float() @ kf) * scale
        if causal:
            i = torch.arange(r0, min(r0 + rows, Sq), device=q.device)
            s = s.masked_fill(cols[None, :] > i[:, None], float("-inf"))
        out[:, :, r0:r0 + rows] = torch.logsumexp(s, -1)
    return out


def best_of(results: list) -> dict | None:
    ok = [r for r in results if r["ok"]]
    return min(ok, key=lambda r: r["ms"]) if ok else None


def bench_forward(row, q, k, v, ref, ref_lse, args, skip: set) -> None:
    """Forward columns of ``row``: SDPA timings are filled by the caller; ours here.  ``err``
    is the output's max abs error; a result is correct when it and the LSE's are within
    ``FWD_TOL`` / ``LSE_TOL`` (``lse_err`` on the sweep entry)."""
    D, causal = row["D"], row["causal"]
    lse_errs = []

    def check(out):
        e, el = _maxabs(out[0], ref), _maxabs(out[1], ref_lse)
        lse_errs.append(el)
        return e, e <= FWD_TOL and el <= LSE_TOL

    cands = fwd_candidates(D) if args.sweep else [None]
    sweep = []
    for cfg in cands:
        label = cfg.short() if cfg else "table"
        if ("fwd", D, causal, row["group1"], label) in skip:
            sweep.append(dict(config=label, ms=None, ok=False, error="compile failed in warm-up"))
            continue
        lse_errs.clear()
        r = measure(lambda: attention(q, k, v, causal=causal, config=cfg, fusable=False), check,
                    args.reps_s)
        r["config"] = label
        r["lse_err"] = lse_errs[0] if lse_errs else None
        if cfg is None:
            r["config_used"] = _used_fwd(q, k, D, causal)
        sweep.append(r)
    row["fwd_sweep"] = sweep
    best = best_of(sweep)
    row["ours_ms"] = best["ms"] if best else None
    row["ours_err"] = best["err"] if best else max((r["err"] or 0) for r in sweep)
    row["ours_config"] = (best.get("config_used") or best["config"]) if best else None
    row["ours_lse_err"] = best["lse_err"] if best else None
    row["ours_ok"] = best is not None
    lse_errs.clear()
    r = measure(lambda: attention(q, k, v, causal=causal, fusable=True), check, args.reps_s)
    row["fusable_ms"], row["fusable_err"], row["fusable_ok"] = r["ms"], r["err"], r["ok"]
    row["fusable_lse_err"] = lse_errs[0] if lse_errs else None
    if r["error"]:
        row["fusable_error"] = r["error"]
    row["_best_fwd"] = (AttentionConfig.of(dict(_parse_short(row["ours_config"])), D)
                        if best else None)


def _used_fwd(q, k, D, causal) -> str:
    """The table's config of the fast forward for this row (what ``config=None`` runs)."""
    return fast_config(None, q, D, causal, max(q.shape[2], k.shape[2])).short()


def _parse_short(s: str) -> dict:
    """``128x64w8s3+ws`` -> the config's fields."""
    ws = s.endswith("+ws")
    core = s[:-3] if ws else s
    bm, rest = core.split("x")
    bn, rest = rest.split("w")
    w, st = rest.split("s")
    return dict(BLOCK_M=int(bm), BLOCK_N=int(bn), num_warps=int(w), num_stages=int(st),
                WARP_SPECIALIZE=ws)


def bench_zigzag(row, q, k, v, ref_lse, args) -> None:
    """Causal rows: the zigzag kernels on the whole sequence stored in 2W segments against the
    prefix-causal kernels on the same work (same config), fast and fusable; the zigzag output
    checked against the prefix kernel's, its LSE against the reference."""
    W, D, S = ZIGZAG_W, row["D"], row["S"]
    seg = S // (2 * W)
    cfg = row.get("_best_fwd") or fast_default_config(D, True)
    if seg % cfg.BLOCK_M or seg % cfg.BLOCK_N:
        cfg = fast_default_config(D, True)
    qz, kz, vz = (zigzag_order(x, W) for x in (q, k, v))
    prefix = {}

    for fusable in (False, True):
        c = None if fusable else cfg
        pre, err = attempt(lambda: attention(q, k, v, causal=True, config=c, fusable=fusable))
        if err:
            row[f"zigzag{'_fusable' if fusable else ''}_error"] = err
            continue
        prefix[fusable] = pre[0]

        def check(out, fusable=fusable):
            e = _maxabs(zigzag_unorder(out[0], W), prefix[fusable])
            el = _maxabs(zigzag_unorder(out[1], W), ref_lse)
            return e, e <= FWD_TOL and el <= LSE_TOL

        zz = measure(lambda: attention_zigzag(qz, kz, vz, 2 * W, 0, config=c, fusable=fusable),
                     check, args.reps_s)
        pm = measure(lambda: attention(q, k, v, causal=True, config=c, fusable=fusable),
                     lambda out: (0.0, True), args.reps_s)
        key = "zigzag_fusable" if fusable else "zigzag"
        row[key + "_ms"], row[key + "_err"], row[key + "_ok"] = zz["ms"], zz["err"], zz["ok"]
        row[key + "_prefix_ms"] = pm["ms"]
        row[key + "_ratio"] = zz["ms"] / pm["ms"] if zz["ms"] and pm["ms"] else None
        if zz["error"]:
            row[key + "_error"] = zz["error"]
    row["zigzag_config"] = cfg.short()


def bench_backward(row, q, k, v, do, args, skip: set) -> None:
    """Backward columns: SDPA flash / cuDNN autograd against ours; gradients checked against
    the reference backend's."""
    import torch
    D, causal = row["D"], row["causal"]
    Hq, Hkv = q.shape[1], k.shape[1]
    qg, kg, vg = (x.detach().requires_grad_() for x in (q, k, v))
    ref_grads = None
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
        key = "flash" if name == "FLASH_ATTENTION" else "cudnn"
        fn, expanded = sdpa_call(name, qg, kg, vg, causal)
        row[f"{key}_bwd_ms"] = None
        if fn is None:
            continue
        out = fn()

        def grads(out=out):
            return torch.autograd.grad(out, (qg, kg, vg), do, retain_graph=True)
        g, err = attempt(grads)
        if err:
            row[f"{key}_bwd_error"] = err
            continue
        if ref_grads is None:
            ref_grads = g
        ms, err = attempt(lambda: time_ms(grads, args.reps_s))
        row[f"{key}_bwd_ms"] = ms
        row[f"{key}_bwd_expanded"] = expanded
        del out
    if ref_grads is None:  # the check still needs a reference: the default backend, untimed
        g = Hq // Hkv
        ref = torch.nn.functional.scaled_dot_product_attention(
            qg, kg.repeat_interleave(g, 1), vg.repeat_interleave(g, 1), is_causal=causal)
        ref_grads = torch.autograd.grad(ref, (qg, kg, vg), do)
    # the fusable forward feeds every backward: proven on the GPU, so a wrong forward LSE (the
    # first H100 run's) cannot show up as a wrong backward
    fwd, err = attempt(lambda: attention(q, k, v, causal=causal, fusable=True))
    if err:
        row["bwd_error"] = f"our forward failed: {err}"
        return
    o, lse = fwd

    def check(out):
        errs = [_rel(a, b) for a, b in zip(out, ref_grads)]
        return max(errs), max(errs) <= BWD_TOL

    def run(dkdv, dq):
        return attention_backward(q, k, v, o, lse, do, causal, config=dkdv, dq_config=dq,
                                  fusable=False)

    sweep = []
    if args.sweep:
        for c in dkdv_candidates(D):
            if ("bwd_dkdv", D, causal, row["group1"], c.short()) in skip:
                continue
            r = measure(lambda: run(c, None), check, args.reps_s)
            r.update(dkdv=c.short(), dq="table")
            sweep.append(r)
        best = best_of(sweep)
        best_dkdv = _parse_short(best["dkdv"]) if best else None
        row["bwd_best_dkdv"] = best["dkdv"] if best else None
        n_dkdv = len(sweep)
        for c in dq_candidates(D):
            if ("bwd_dq", D, causal, row["group1"], c.short()) in skip:
                continue
            r = measure(lambda: run(best_dkdv, c), check, args.reps_s)
            r.update(dkdv=best["dkdv"] if best else "table", dq=c.short())
            sweep.append(r)
        best = best_of(sweep[n_dkdv:])
        row["bwd_best_dq"] = best["dq"] if best else None
    else:
        r = measure(lambda: run(None, None), check, args.reps_s)
        r.update(dkdv="table", dq="table")
        sweep.append(r)
    row["bwd_sweep"] = sweep
    best = best_of(sweep)
    row["ours_bwd_ok"] = best is not None
    row["ours_bwd_ms"] = best["ms"] if best else None
    row["ours_bwd_err"] = best["err"] if best else max((r["err"] or 0) for r in sweep)
    row["ours_bwd_config"] = dict(dkdv=best["dkdv"], dq=best["dq"]) if best else None
    r = measure(lambda: attention_backward(q, k, v, o, lse, do, causal, fusable=True), check,
                args.reps_s)
    row["fusable_bwd_ms"], row["fusable_bwd_err"], row["fusable_bwd_ok"] = \
        r["ms"], r["err"], r["ok"]
    if r["error"]:
        row["fusable_bwd_error"] = r["error"]
    if causal:
        bench_zigzag_backward(row, q, k, v, o, lse, do, check, args)


def zigzag_backward_shards(q, k, v, o, lse, do, W: int):
    """The inputs of the causal ring attention backward's kernels at world size ``W``, on
    one GPU: the gathered K/V in zigzag order and every rank's shard of ``q``, ``o``, ``do``,
    ``lse``."""
    kz, vz = (zigzag_order(x, W) for x in (k, v))
    shards = [tuple(zigzag_shard(x, W, r).contiguous() for x in (q, o, do, lse))
              for r in range(W)]
    return kz, vz, shards


def zigzag_backward(kz, vz, shards, W: int):
    """What the ranks' backward kernels compute, one rank after the other: per rank the
    fusable dK/dV and dQ kernels with the default backward config (what
    ``ring_attention_backward`` launches, its zigzag layout and query offset) on the rank's
    queries against the whole gathered K/V.  Returns the per-rank ``(dq, dk, dv)``."""
    Sl = shards[0][0].shape[2]
    return [attention_backward(qs, kz, vz, os_, ls, dos, True, segments=2 * W,
                               q_offset=r * Sl, fusable=True)
            for r, (qs, os_, dos, ls) in enumerate(shards)]


def bench_zigzag_backward(row, q, k, v, o, lse, do, check, args) -> None:
    """Causal rows: the context-parallel backward's kernels (zigzag, ``ZIGZAG_W`` ranks'
    shards in sequence: the whole causal work once) against the fusable backward on the
    contiguous sequence; the gradients, put back in original order and dK/dV summed over the
    ranks, checked as every backward's."""
    import torch
    W = ZIGZAG_W
    seg, cfg = row["S"] // (2 * W), default_backward_config(row["D"])
    if row["S"] % (2 * W) or seg % cfg.BLOCK_M or seg % cfg.BLOCK_N:
        row["zigzag_bwd_error"] = f"segment {seg} is not a multiple of {cfg.short()}'s tiles"
        return
    kz, vz, shards = zigzag_backward_shards(q, k, v, o, lse, do, W)

    def check_zz(outs):
        dq = zigzag_unorder(torch.cat([g[0] for g in outs], 2), W)
        dk, dv = (zigzag_unorder(sum(g[i].float() for g in outs), W) for i in (1, 2))
        return check((dq, dk, dv))

    r = measure(lambda: zigzag_backward(kz, vz, shards, W), check_zz, args.reps_s)
    row["zigzag_bwd_ms"], row["zigzag_bwd_err"], row["zigzag_bwd_ok"] = \
        r["ms"], r["err"], r["ok"]
    fus = row.get("fusable_bwd_ms")
    row["zigzag_bwd_ratio"] = r["ms"] / fus if r["ms"] and fus else None
    if r["error"]:
        row["zigzag_bwd_error"] = r["error"]


def estimate_s(shape, causal: bool, args) -> float:
    """A pessimistic wall-time estimate of one row (the budget's unit)."""
    B, Hq, Hkv, S, D = shape
    n_fwd = len(fwd_candidates(D)) if args.sweep else 1
    calls = lambda ms: max(3, min(20, args.reps_s * 1e3 / ms)) + 2  # noqa: E731
    f_ms = flops(B, Hq, S, D, causal) / (EST_TFLOPS["fwd"] * 1e12) * 1e3
    t = (n_fwd + 3 + (4 if causal else 0)) * calls(f_ms) * f_ms
    if args.backward:
        b_ms = flops(B, Hq, S, D, causal, True) / (EST_TFLOPS["bwd"] * 1e12) * 1e3
        n_bwd = len(dkdv_candidates(D)) + len(dq_candidates(D)) if args.sweep else 1
        t += (n_bwd + 2) * calls(b_ms) * b_ms
        fb_ms = flops(B, Hq, S, D, causal, True) / (EST_TFLOPS["fusable_bwd"] * 1e12) * 1e3
        t += (2 if causal else 1) * calls(fb_ms) * fb_ms  # causal: and the zigzag backward
    return t / 1e3 + 1.0 + 0.3 * (n_fwd + 6)


def bench_row(shape, causal, args, skip: set) -> dict:
    import torch
    B, Hq, Hkv, S, D = shape
    torch.manual_seed(S * 7 + D + Hkv + int(causal))
    dt = torch.bfloat16
    q = torch.randn(B, Hq, S, D, device=DEVICE, dtype=dt)
    k = torch.randn(B, Hkv, S, D, device=DEVICE, dtype=dt)
    v = torch.randn(B, Hkv, S, D, device=DEVICE, dtype=dt)
    row = dict(B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, causal=causal, dtype="bf16", group1=Hq == Hkv)
    ref = None
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION"):
        key = "flash" if name == "FLASH_ATTENTION" else "cudnn"
        fn, expanded = sdpa_call(name, q, k, v, causal)
        row[key + "_expanded"] = expanded
        row[key + "_ms"] = None
        if fn is None:
            continue
        if ref is None:
            ref = fn()
        row[key + "_ms"], err = attempt(lambda: time_ms(fn, args.reps_s))
        if err:
            row[key + "_error"] = err
    if ref is None:
        ref = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(Hq // Hkv, 1), v.repeat_interleave(Hq // Hkv, 1),
            is_causal=causal)
    ref_lse = reference_lse(q, k, causal)
    bench_forward(row, q, k, v, ref, ref_lse, args, skip)
    del ref
    if causal:
        bench_zigzag(row, q, k, v, ref_lse, args)
    del ref_lse
    if args.backward:
        do = torch.randn_like(q)
        bench_backward(row, q, k, v, do, args, skip)
    fl, flb = flops(B, Hq, S, D, causal), flops(B, Hq, S, D, causal, True)
    for key in ("ours", "fusable", "flash", "cudnn"):
        ms = row.get(key + "_ms")
        row[key + "_tflops"] = fl / (ms * 1e-3) / 1e12 if ms else None
        ms = row.get(key + "_bwd_ms")
        row[key + "_bwd_tflops"] = flb / (ms * 1e-3) / 1e12 if ms else None
    for sfx in ("", "_bwd"):
        for key in ("flash", "cudnn"):
            a, b = row.get(f"{key}{sfx}_ms"), row.get(f"ours{sfx}_ms")
            row[f"{key}_over_ours{sfx}"] = a / b if a and b else None
    row.pop("_best_fwd", None)
    return row


# ------------------------------------------------------------------------------------------------
# Compile warm-up (worker processes)
# ------------------------------------------------------------------------------------------------


def warm_jobs(plan, args) -> list:
    """One job per (kernel, config, specialisation class): the launches the rows will make."""
    jobs, seen = [], set()
    for (B, Hq, Hkv, S, D), causal in plan:
        cls = (D, causal, Hq, Hkv)
        if cls in seen:
            continue
        seen.add(cls)
        base = dict(D=D, causal=causal, Hq=Hq, Hkv=Hkv)
        fwd = fwd_candidates(D) if args.sweep else [None]
        for c in fwd:
            jobs.append(dict(base, op="fwd", config=c.as_dict() if c else None))
        jobs.append(dict(base, op="fwd", fusable=True))
        if causal:
            jobs.append(dict(base, op="zigzag"))
            jobs.append(dict(base, op="zigzag", fusable=True))
        if args.backward:
            if args.sweep:
                for c in dkdv_candidates(D):
                    jobs.append(dict(base, op="bwd", config=c.as_dict(), kernel="bwd_dkdv"))
                for c in dq_candidates(D):
                    jobs.append(dict(base, op="bwd", dq_config=c.as_dict(), kernel="bwd_dq"))
            else:
                jobs.append(dict(base, op="bwd"))
            jobs.append(dict(base, op="bwd", fusable=True))
            if causal:
                jobs.append(dict(base, op="zigzag_bwd"))
    return jobs


def run_warm_job(job) -> None:
    import torch
    D, Hq, Hkv, causal = job["D"], job["Hq"], job["Hkv"], job["causal"]
    q = torch.randn(1, Hq, WARM_S, D, device=DEVICE, dtype=torch.bfloat16)
    k = torch.randn(1, Hkv, WARM_S, D, device=DEVICE, dtype=torch.bfloat16)
    v = torch.randn_like(k)
    fus = job.get("fusable", False)
    if job["op"] == "fwd":
        attention(q, k, v, causal=causal, config=job.get("config"), fusable=fus)
    elif job["op"] == "zigzag":
        attention_zigzag(q, k, v, 2 * ZIGZAG_W, 0, fusable=fus)
    elif job["op"] == "zigzag_bwd":
        o, lse = attention(q, k, v, causal=True, fusable=True)
        zigzag_backward(*zigzag_backward_shards(q, k, v, o, lse, torch.randn_like(q), ZIGZAG_W),
                        ZIGZAG_W)
    else:
        o, lse = attention(q, k, v, causal=causal, fusable=True)
        attention_backward(q, k, v, o, lse, torch.randn_like(q), causal, config=job.get("config"),
                           dq_config=job.get("dq_config"), fusable=fus)
    sync()


def warm_worker(jobs_path: str, index: int, count: int, out_path: str) -> int:
    with open(jobs_path) as f:
        jobs = json.load(f)[index::count]
    failed = []
    for job in jobs:
        _, err = attempt(lambda: run_warm_job(job))
        if err:
            failed.append(dict(job, error=err))
    with open(out_path, "w") as f:
        json.dump(failed, f)
    return 0


def warm_up(plan, args) -> tuple[set, list]:
    """Compile every kernel the rows will launch in ``args.workers`` processes; returns the
    configs that failed (skipped later) and the failure records."""
    jobs = warm_jobs(plan, args)
    if args.workers < 1 or not jobs:
        return set(), []
    tmp = Path(tempfile.mkdtemp(prefix="bench_attention_"))
    (tmp / "jobs.json").write_text(json.dumps(jobs))
    n = min(args.workers, len(jobs))
    log(f"warm-up: compiling {len(jobs)} kernel launches in {n} processes "
        f"(limit {args.warm_timeout_s:.0f} s)")
    t0 = time.time()
    procs = []
    for i in range(n):
        errf = open(tmp / f"worker{i}.err", "w")
        procs.append((subprocess.Popen(
            [sys.executable, __file__, "--device", DEVICE, "--warm-worker", str(tmp / "jobs.json"),
             str(i), str(n), str(tmp / f"failed{i}.json")], stdout=errf,
            stderr=subprocess.STDOUT), errf))
    failed = []
    for i, (p, errf) in enumerate(procs):
        left = max(1.0, args.warm_timeout_s - (time.time() - t0))
        try:
            p.wait(timeout=left)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            log(f"  warm-up worker {i} killed at the time limit")
        errf.close()
        fp = tmp / f"failed{i}.json"
        if fp.exists():
            failed += json.loads(fp.read_text())
    skip = set()
    for f in failed:
        cfg = f.get("config") or f.get("dq_config")
        label = AttentionConfig(**cfg).short() if cfg else "table"
        kernel = ("fusable_" if f.get("fusable") else "") + f.get("kernel", f["op"])
        skip.add((kernel, f["D"], f["causal"], f["Hq"] == f["Hkv"], label))
        log(f"  warm-up failure: {kernel} D={f['D']} causal={f['causal']} {label}"
            f"{' fusable' if f.get('fusable') else ''}: {f['error']}")
    log(f"warm-up done in {time.time() - t0:.0f} s, {len(failed)} failures")
    return skip, failed


# ------------------------------------------------------------------------------------------------
# Output
# ------------------------------------------------------------------------------------------------


def _f(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def _div(a, b):
    return a / b if a and b else None


def geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def print_table(rows, backward: bool) -> None:
    log("")
    log("forward (ms; ratio = SDPA time / ours, > 1: ours faster; * = K/V expanded)")
    log(f"{'B':>2} {'Hq/Hkv':>6} {'S':>6} {'D':>4} {'c':>1} | {'ours':>7} {'TF/s':>5} "
        f"{'config':>13} | {'cudnn':>7} {'flash':>7} | {'/cudnn':>6} {'/flash':>6} | "
        f"{'fusable':>7} {'fus/ours':>8} | {'err':>7} {'lse err':>7}")
    for r in rows:
        fus = r["fusable_ms"] / r["ours_ms"] if r.get("fusable_ms") and r.get("ours_ms") else None
        log(f"{r['B']:>2} {str(r['Hq']) + '/' + str(r['Hkv']):>6} {r['S']:>6} {r['D']:>4} "
            f"{int(r['causal']):>1} | {_f(r.get('ours_ms'), '.3f'):>7} "
            f"{_f(r.get('ours_tflops'), '.0f'):>5} {str(r.get('ours_config')):>13} | "
            f"{_f(r.get('cudnn_ms'), '.3f'):>7}{'*' if r.get('cudnn_expanded') else ' '}"
            f"{_f(r.get('flash_ms'), '.3f'):>7}{'*' if r.get('flash_expanded') else ' '}| "
            f"{_f(r.get('cudnn_over_ours')):>6} {_f(r.get('flash_over_ours')):>6} | "
            f"{_f(r.get('fusable_ms'), '.3f'):>7} {_f(fus):>8} | "
            f"{_f(r.get('ours_err'), '.1e'):>7} {_f(r.get('ours_lse_err'), '.1e'):>7}"
            f"{'' if r.get('ours_ok') else ' FAIL'}")
    zz = [r for r in rows if r.get("zigzag_ms") or r.get("zigzag_fusable_ms")]
    if zz:
        log("")
        log("zigzag causal (8 segments, whole sequence) / prefix causal, same work "
            "(target <= 1.05)")
        for r in zz:
            log(f"  B={r['B']} {r['Hq']}/{r['Hkv']} S={r['S']} D={r['D']}: fast "
                f"{_f(r.get('zigzag_ms'), '.3f')} / {_f(r.get('zigzag_prefix_ms'), '.3f')} ms = "
                f"{_f(r.get('zigzag_ratio'))}x ({r.get('zigzag_config')}, err "
                f"{_f(r.get('zigzag_err'), '.1e')}{'' if r.get('zigzag_ok') else ' FAIL'}); "
                f"fusable (paired) {_f(r.get('zigzag_fusable_ms'), '.3f')} / "
                f"{_f(r.get('zigzag_fusable_prefix_ms'), '.3f')} ms = "
                f"{_f(r.get('zigzag_fusable_ratio'))}x")
    if backward:
        log("")
        log("backward (ms; ratio = SDPA time / ours)")
        log(f"{'B':>2} {'Hq/Hkv':>6} {'S':>6} {'D':>4} {'c':>1} | {'ours':>7} {'TF/s':>5} "
            f"{'dkdv / dq':>22} | {'cudnn':>7} {'flash':>7} | {'/cudnn':>6} {'/flash':>6} | "
            f"{'fusable':>8} | {'err':>7}")
        for r in rows:
            c = r.get("ours_bwd_config") or {}
            log(f"{r['B']:>2} {str(r['Hq']) + '/' + str(r['Hkv']):>6} {r['S']:>6} {r['D']:>4} "
                f"{int(r['causal']):>1} | {_f(r.get('ours_bwd_ms'), '.3f'):>7} "
                f"{_f(r.get('ours_bwd_tflops'), '.0f'):>5} "
                f"{(c.get('dkdv', '-') + ' / ' + c.get('dq', '-')):>22} | "
                f"{_f(r.get('cudnn_bwd_ms'), '.3f'):>7}"
                f"{'*' if r.get('cudnn_bwd_expanded') else ' '}"
                f"{_f(r.get('flash_bwd_ms'), '.3f'):>7}"
                f"{'*' if r.get('flash_bwd_expanded') else ' '}| "
                f"{_f(r.get('cudnn_over_ours_bwd')):>6} {_f(r.get('flash_over_ours_bwd')):>6} | "
                f"{_f(r.get('fusable_bwd_ms'), '.3f'):>8} | "
                f"{_f(r.get('ours_bwd_err'), '.1e'):>7}"
                f"{'' if r.get('ours_bwd_ok', not backward) else ' FAIL'}")
        zz = [r for r in rows if r.get("zigzag_bwd_ms") or r.get("zigzag_bwd_error")]
        if zz:
            cfg = default_backward_config(128).short()
            log("")
            log(f"context-parallel backward kernels (fusable, {cfg}): zigzag, {ZIGZAG_W} ranks' "
                f"shards in sequence / the contiguous causal backward, same work")
            for r in zz:
                bad = "" if r.get("zigzag_bwd_ok") else f" FAIL {r.get('zigzag_bwd_error')}"
                log(f"  B={r['B']} {r['Hq']}/{r['Hkv']} S={r['S']} D={r['D']}: "
                    f"{_f(r.get('zigzag_bwd_ms'), '.3f')} / {_f(r.get('fusable_bwd_ms'), '.3f')}"
                    f" ms = {_f(r.get('zigzag_bwd_ratio'))}x, /cudnn "
                    f"{_f(_div(r.get('cudnn_bwd_ms'), r.get('zigzag_bwd_ms')))}, err "
                    f"{_f(r.get('zigzag_bwd_err'), '.1e')}{bad}")
    log("")
    for d in sorted({r["D"] for r in rows}):
        sub = [r for r in rows if r["D"] == d]
        line = (f"D={d}: fwd vs cuDNN geomean {_f(geomean([r.get('cudnn_over_ours') for r in sub]))}"
                f" (min {_f(min((r['cudnn_over_ours'] for r in sub if r.get('cudnn_over_ours')), default=None))})"
                f", vs flash {_f(geomean([r.get('flash_over_ours') for r in sub]))}")
        if backward:
            fus = {key: geomean([_div(r.get(f"{key}_bwd_ms"), r.get("fusable_bwd_ms"))
                                 for r in sub]) for key in ("cudnn", "flash")}
            line += (f"; bwd vs cuDNN {_f(geomean([r.get('cudnn_over_ours_bwd') for r in sub]))}"
                     f", vs flash {_f(geomean([r.get('flash_over_ours_bwd') for r in sub]))}"
                     f"; fusable bwd vs cuDNN {_f(fus['cudnn'])}, vs flash {_f(fus['flash'])}")
        log(line)


def failures(rows, backward: bool) -> list:
    out = []
    for r in rows:
        name = f"B={r['B']} {r['Hq']}/{r['Hkv']} S={r['S']} D={r['D']} causal={r['causal']}"
        if not r.get("ours_ok"):
            out.append(f"{name}: forward failed or wrong (err {r.get('ours_err')}; sweep "
                       f"{[x.get('error') for x in r.get('fwd_sweep', [])][:3]})")
        if r.get("fusable_ok") is False:
            out.append(f"{name}: fusable forward failed or wrong (err {r.get('fusable_err')}, "
                       f"{r.get('fusable_error')})")
        for key in ("zigzag", "zigzag_fusable"):
            if r["causal"] and r.get(key + "_ok") is False:
                out.append(f"{name}: {key} failed or wrong (err {r.get(key + '_err')}, "
                           f"{r.get(key + '_error')})")
        for key in ("fusable_bwd", "zigzag_bwd"):
            if backward and r.get(key + "_ok") is False:
                out.append(f"{name}: {key} failed or wrong (err {r.get(key + '_err')}, "
                           f"{r.get(key + '_error')})")
        if backward and not r.get("ours_bwd_ok"):
            out.append(f"{name}: backward failed or wrong (err {r.get('ours_bwd_err')}, "
                       f"{r.get('bwd_error')})")
    return out


def tune_entries(rows, gpu: str) -> list:
    """The best config per (kernel, D, causal, S) class, for the per-GPU table (the first row
    of a class wins: rows are in priority order)."""
    out, seen = [], set()
    for r in rows:
        base = dict(dtype="bf16", D=r["D"], causal=r["causal"], S=r["S"], measured=True,
                    B=r["B"], Hq=r["Hq"], Hkv=r["Hkv"], cudnn_ms=r.get("cudnn_ms"),
                    flash_ms=r.get("flash_ms"))
        picks = []
        if r.get("ours_ok") and r.get("ours_config"):
            picks.append(("fwd", r["ours_config"], r["ours_ms"]))
        # each backward kernel's best of its own sweep phase (the dK/dV phase ran with the
        # table's dQ, the dQ phase with the best dK/dV)
        for kernel in ("bwd_dkdv", "bwd_dq"):
            label = r.get("bwd_best_" + kernel[4:])
            if label and label != "table":
                picks.append((kernel, label, r.get("ours_bwd_ms")))
        for kernel, label, ms in picks:
            e = dict(base, kernel=kernel,
                     config=AttentionConfig.of(_parse_short(label), r["D"]), ms=ms)
            if kernel != "fwd":
                e.update(cudnn_ms=r.get("cudnn_bwd_ms"), flash_ms=r.get("flash_bwd_ms"))
            if entry_key(e) not in seen:
                seen.add(entry_key(e))
                out.append(e)
    return out


def commit() -> str | None:
    p = ROOT / ".syncopate-commit"
    if p.exists():
        return p.read_text().strip()
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True,
                       text=True)
    return r.stdout.strip() or None


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweep", action="store_true", help="time every config candidate")
    p.add_argument("--quick", action="store_true", help=f"only the first {len(QUICK_SHAPES)} rows")
    p.add_argument("--no-backward", dest="backward", action="store_false")
    p.add_argument("--causal", type=int, nargs="*", default=[0, 1], help="0 and/or 1")
    p.add_argument("--shapes", nargs="*", help="rows as B,Hq,Hkv,S,D (default: the standard set)")
    p.add_argument("--budget-s", type=float, default=330.0,
                   help="skip rows whose estimate would pass this many seconds (incl. warm-up)")
    p.add_argument("--reps-s", type=float, default=0.15, help="seconds per measurement")
    p.add_argument("--workers", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                   help="compile warm-up processes (0: compile inline)")
    p.add_argument("--warm-timeout-s", type=float, default=150.0)
    p.add_argument("--json", help="write the rows here (rewritten after every row)")
    p.add_argument("--tune-out", help="write the best config per shape class here (a table "
                   "for kernels/configs/attention-<gpu>.json)")
    p.add_argument("--wait-pid", type=int, help="after the warm-up, wait for this process to "
                   "end before timing anything (a GPU job running beside the compiles)")
    p.add_argument("--warm-worker", nargs=4, help=argparse.SUPPRESS)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: check the script under TRITON_INTERPRET=1 (tiny --shapes; the "
                   "times mean nothing)")
    args = p.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    if args.warm_worker:
        jobs, i, n, out = args.warm_worker
        return warm_worker(jobs, int(i), int(n), out)
    import torch
    if DEVICE == "cuda" and not torch.cuda.is_available():
        print("bench_attention: needs a CUDA GPU (none visible to torch)", file=sys.stderr)
        return 2
    import triton

    t_start = time.time()
    if args.shapes:
        shapes = [tuple(int(x) for x in s.split(",")) for s in args.shapes]
    else:
        shapes = QUICK_SHAPES if args.quick else SHAPES
    plan = [(s, bool(c)) for s in shapes for c in args.causal]
    device = torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu (interpreter)"
    gpu = gpu_key(device)
    log(f"device: {device}  torch {torch.__version__}  triton {triton.__version__}  "
        f"commit {commit()}  sweep={args.sweep} backward={args.backward} "
        f"budget {args.budget_s:.0f} s, {len(plan)} rows planned")
    skip, warm_failed = warm_up(plan, args)
    if args.wait_pid:  # e.g. the GPU tests, compiling beside the warm-up: time on an idle GPU
        t0 = time.time()
        while Path(f"/proc/{args.wait_pid}").exists() and time.time() - t_start < args.budget_s:
            time.sleep(0.5)
        log(f"waited {time.time() - t0:.0f} s for process {args.wait_pid} before timing")
    doc = dict(device=device, gpu=gpu, torch=torch.__version__, triton=triton.__version__,
               commit=commit(), args={k: v for k, v in vars(args).items() if k != "warm_worker"},
               warm_failures=warm_failed, rows=[], skipped=[], partial=True)

    def save():
        doc["elapsed_s"] = time.time() - t_start
        if args.json:
            Path(args.json).write_text(json.dumps(doc, indent=1, default=str))

    rows = doc["rows"]
    ratios, slow = [], 1.0  # actual / estimated row times so far; estimates scale by the median
    for i, (shape, causal) in enumerate(plan):
        est = estimate_s(shape, causal, args) * slow
        elapsed = time.time() - t_start
        if elapsed + est > args.budget_s:
            log(f"[{i + 1}/{len(plan)}] {shape} causal={causal}: skipped (estimate {est:.0f} s, "
                f"{elapsed:.0f} s used of {args.budget_s:.0f})")
            doc["skipped"].append(dict(shape=shape, causal=causal, estimate_s=est))
            continue
        t0 = time.time()
        row, err = attempt(lambda: bench_row(shape, causal, args, skip))
        if err:
            log(f"[{i + 1}/{len(plan)}] {shape} causal={causal}: row failed: {err}")
            B, Hq, Hkv, S, D = shape
            row = dict(B=B, Hq=Hq, Hkv=Hkv, S=S, D=D, causal=causal, error=err, ours_ok=False)
        row["row_s"] = time.time() - t0
        ratios.append(row["row_s"] / (est / slow))
        slow = max(1.0, statistics.median(ratios))
        rows.append(row)
        log(f"[{i + 1}/{len(plan)}] {shape} causal={causal}: {row['row_s']:.1f} s (est "
            f"{est:.0f}) ours {_f(row.get('ours_ms'), '.3f')} ms {row.get('ours_config')} "
            f"cudnn/ours {_f(row.get('cudnn_over_ours'))}"
            + (f" | bwd ours {_f(row.get('ours_bwd_ms'), '.3f')} ms cudnn/ours "
               f"{_f(row.get('cudnn_over_ours_bwd'))}" if args.backward else ""))
        save()
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    doc["partial"] = False
    doc["failures"] = failures(rows, args.backward)
    save()
    if args.tune_out:
        ents = tune_entries(rows, gpu)
        write_table(args.tune_out, ents, gpu=gpu, source="tuned",
                    note=f"{len(ents)} entries measured by scripts/bench_attention.py --sweep on "
                         f"{device} (torch {torch.__version__}, triton {triton.__version__}, "
                         f"commit {commit()})")
        log(f"tuned table ({len(ents)} entries) -> {args.tune_out}")
    print_table(rows, args.backward)
    if doc["skipped"]:
        log(f"skipped for the budget: {[(s['shape'], s['causal']) for s in doc['skipped']]}")
    if doc["failures"]:
        log("CORRECTNESS FAILURES:")
        for f in doc["failures"]:
            log("  " + f)
        return 1
    log(f"all {len(rows)} rows correct; total {time.time() - t_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
