"""Tuning the local GEMM's config per shape on a GPU: the pruned candidate space
(:func:`candidate_configs`) and the tuning run (:func:`tune`, :func:`tune_matmul`).

A tuning run, under a hard time budget:

1. plans every ``(shape, dtype, candidate)`` on the host and groups them by what Triton would
   compile (the kernel, the config, and the specialisation of every integer argument: equal to
   1, divisible by 16), so each distinct kernel is compiled once;
2. compiles those kernels in a pool of worker processes (``--workers``; Triton compiles one
   kernel on one core, 1-3 s each, so 12 workers cut a ~100-kernel sweep from minutes to
   seconds). Workers use Triton's JIT ``warmup`` on real CUDA tensors of the same layout, so
   they write exactly the cache entries the measuring process then loads;
3. measures, shape by shape: cuBLAS, then every compiled candidate -- its output poisoned
   with NaN first, checked against an fp32 reference (relative Frobenius error < 1e-2, NaN
   never passes) before it is timed -- and keeps the fastest correct config and the fastest
   correct *fusable* one (no split-K, no warp specialisation);
4. returns a config table (:mod:`syncopate.kernels.gemm_table` format) with the measured
   times and every candidate's record, which ``python -m syncopate.bench.local
   --install-tuned`` turns into the shipped defaults and :func:`tune_matmul` merges into the
   user's cache.

Nothing here imports torch or needs a GPU at import time; the device work goes through a
backend object (:class:`.local_gpu.CudaBackend`; the tests substitute a CPU fake).
"""

from __future__ import annotations

import time
from types import SimpleNamespace

import triton

from ..errors import LaunchError
from ..kernels import gemm_table
from ..kernels.gemm_config import (H200_NUM_SMS, GemmConfig, _dtype_name, heuristic_config,
                                   split_k_for, with_split_k)
from ..kernels.gemm_launch import _padded, clear_plans, plan_layout
from .local_gpu import TOL, CudaBackend, config_str, geomean, shape_name

#: Most candidates tried per shape and dtype.
MAX_CANDIDATES = 8

def _tiles(M: int, N: int, bm: int, bn: int) -> int:
    return triton.cdiv(M, bm) * triton.cdiv(N, bn)


def candidate_configs(M: int, N: int, K: int, dtype="bf16", num_sms: int = H200_NUM_SMS,
                      limit: int = MAX_CANDIDATES) -> list[GemmConfig]:
    """The configs worth timing for this problem, most promising first, at most ``limit``.

    Always the heuristic's fusable and local choices (:func:`heuristic_config`), then by regime:

    * many tiles (a full wave of 128x128 tiles): the Hopper GEMM family -- 128x256x64 with 8
      warps and 3 stages, the same with 4 stages and a halved C staging buffer, warp-specialised
      128x256 and 128x128 (one TMA producer warp group, two wgmma consumer groups), 128x128x64
      with 4 stages, 256x128x64, and ``GROUP_M=16`` for wider L2 reuse;
    * few tiles: split-K of 128x128 and 128x256 tiles (enough work units to fill the SMs),
      64-row tiles (twice the tiles without a reduction), 128x128x128;
    * ``M <= 64`` (decode, DRAM-bound): 64-row tiles with long K steps and deep pipelines, with
      and without split-K.

    Every candidate passes :meth:`GemmConfig.check` (fits in shared memory).
    """
    _dtype_name(dtype)
    out: list[GemmConfig] = []

    def add(cfg: GemmConfig | None) -> None:
        if cfg is None or cfg in out:
            return
        try:
            out.append(cfg.check("tma"))
        except ValueError:
            pass

    def split(cfg: GemmConfig, force: int | None = None) -> GemmConfig | None:
        s = force or split_k_for(M, N, K, cfg, num_sms)
        k_tiles = triton.cdiv(K, cfg.BLOCK_K)
        if s < 2 or k_tiles < 2 * s:
            return None
        return with_split_k(cfg, s)

    add(heuristic_config(M, N, K, dtype, "tma", num_sms, fusable=True))
    add(heuristic_config(M, N, K, dtype, "tma", num_sms, fusable=False))
    G = GemmConfig
    if M <= 64:
        for c in (G(64, 64, 128, 8, 4, 5), G(64, 128, 128, 8, 4, 4), G(64, 64, 64, 8, 4, 8)):
            add(c)
        add(split(G(64, 128, 128, 8, 4, 4)))
        add(split(G(64, 64, 128, 8, 4, 5), force=2))
        add(split(G(64, 128, 64, 8, 4, 6), force=max(2, num_sms // max(1, _tiles(M, N, 64,
                                                                                     128)))))
    elif _tiles(M, N, 128, 128) <= num_sms:
        add(split(G(128, 128, 64, 8, 8, 4)))
        add(G(64, 128, 64, 8, 4, 5))
        add(split(G(128, 256, 64, 8, 8, 3)))
        add(G(128, 128, 64, 8, 8, 4))
        add(split(G(128, 128, 128, 8, 8, 3)))
        add(G(128, 256, 64, 8, 4, 3, WARP_SPECIALIZE=True, FLATTEN=False))
        add(G(128, 256, 64, 8, 8, 3))
    else:
        for c in (G(128, 256, 64, 8, 8, 3),
                  G(128, 256, 64, 8, 4, 3, WARP_SPECIALIZE=True, FLATTEN=False),
                  G(128, 256, 64, 8, 8, 4, EPILOGUE_SUBTILE=True),
                  G(128, 128, 64, 8, 8, 4),
                  G(256, 128, 64, 8, 8, 3),
                  G(128, 256, 64, 16, 8, 3)):
            add(c)
    if K <= 64:
        out = [c.replace(num_stages=min(c.num_stages, 2)) for c in out]
        out = list(dict.fromkeys(out))
    return out[:limit]


# ----------------------------------------------------------------------------------------------
# Compile deduplication
# ----------------------------------------------------------------------------------------------


def _spec(v) -> tuple:
    """How Triton's JIT specialises an integer argument (3.6): equal to 1, divisible by 16."""
    if isinstance(v, int):
        return (v == 1, v % 16 == 0)
    return ("ptr",)


def compile_key(M: int, N: int, K: int, dtype, config: GemmConfig,
                num_sms: int = H200_NUM_SMS) -> tuple:
    """What Triton compiles for this problem and config on fresh row-major allocations (the
    kernel variant, the config, which operands are staged and the specialisation of every
    integer argument): problems with equal keys share every kernel, so a sweep compiles each
    key once. Host only."""
    def aligned(cols: int) -> bool:  # row-major rows of `cols` 2-byte elements
        return cols == 1 or (cols * 2) % 16 == 0

    plan = plan_layout(M, N, K, dtype, config, num_sms, kernel="auto",
                       tma_ok=(M == 1 or aligned(K), K == 1 or aligned(N), M == 1 or aligned(N)),
                       row_strides=(K if M > 1 else _padded(K, 2), N if K > 1 else _padded(N, 2),
                                    N if M > 1 else _padded(N, 2)))
    ptr = object()
    # C stands in as its strides only: all that GemmPlan.args reads of it
    args = plan.args(ptr, ptr, SimpleNamespace(stride=(N, 1).__getitem__), ptr)
    return (_dtype_name(dtype), plan.kind, config, plan.stage_a, plan.stage_b, plan.stage_c,
            tuple(tuple(_spec(v) for v in launch_args) for launch_args in args))


# ----------------------------------------------------------------------------------------------
# The tuning run
# ----------------------------------------------------------------------------------------------


def tune(backend, shapes, dtypes=("bf16",), *, budget_s: float = 240.0,
         compile_share: float = 0.45, workers: int = 8, warmup_ms: float = 10.0,
         rep_ms: float = 40.0, seed: int = 0, log=print, on_progress=None) -> dict:
    """Tune every ``(shape, dtype)`` on ``backend``'s GPU within ``budget_s`` seconds; return
    a config table (``{"format", "gpu", "entries", ...}``, ``gemm_table``'s format) whose
    entries also carry every candidate's record; shapes with no correct candidate are listed
    under ``"failed"`` (with their records), not in ``"entries"``.

    ``compile_share`` of the budget goes to the parallel compile (what is not compiled by then
    is not timed); the rest to measuring, shape by shape in the order given (a shape reached
    after the budget is spent keeps the heuristic: no entry). ``on_progress(report)`` is
    called after each shape (the caller writes partial results)."""
    t0 = time.monotonic()
    num_sms = backend.info()["sms"]
    plan = []
    for shape in shapes:
        for dt in dtypes:
            cands = candidate_configs(*shape, dt, num_sms)
            plan.append((tuple(shape), _dtype_name(dt), cands))
    # 1. one compile per distinct kernel
    tasks = {}
    for shape, dt, cands in plan:
        for cfg in cands:
            key = compile_key(*shape, dt, cfg, num_sms)
            tasks.setdefault(key, (shape, dt, cfg))
    deadline = t0 + budget_s * compile_share
    log(f"tune: {sum(len(c) for _, _, c in plan)} candidates over {len(plan)} shape/dtype pairs, "
        f"{len(tasks)} distinct compiles on {workers} workers")
    compiled = backend.precompile(list(tasks.values()), workers=workers, deadline=deadline)
    failed_compile = {}
    for key, task in tasks.items():
        res = compiled.get(task)
        if res is not True:
            failed_compile[key] = res or "not compiled within the compile budget"
    t_compiled = time.monotonic()
    log(f"tune: compiled in {t_compiled - t0:.1f} s; {len(failed_compile)} failed or not reached")

    report = {"format": 1, "gpu": backend.info()["gpu"], "source": "tuned",
              "device": backend.info(), "budget_s": budget_s, "tol": TOL, "entries": [],
              "compile_s": t_compiled - t0, "distinct_compiles": len(tasks),
              "compile_failures": len(failed_compile), "skipped_for_budget": [],
              "failed": []}
    for shape, dt, cands in plan:
        if time.monotonic() - t0 > budget_s:
            report["skipped_for_budget"].append({"shape": list(shape), "dtype": dt})
            continue
        M, N, K = shape
        prob = backend.problem(M, N, K, dt, seed)
        cub_ms = prob.cublas_ms(warmup_ms, rep_ms)
        records = []
        for cfg in cands:
            key = compile_key(M, N, K, dt, cfg, num_sms)
            rec = {"config": cfg.as_dict(), "fusable": cfg.fusable}
            if key in failed_compile:
                rec.update(correct=False, error=str(failed_compile[key])[:300])
            elif time.monotonic() - t0 > budget_s:
                rec.update(correct=False, error="budget spent")
            else:
                rec.update(prob.run(cfg, warmup_ms, rep_ms))
            records.append(rec)
        ok = [r for r in records if r.get("correct") and r.get("ms")]
        fus = [r for r in ok if r["fusable"]]
        entry = {"dtype": dt, "M": M, "N": N, "K": K, "name": shape_name(shape),
                 "cublas_ms": cub_ms, "candidates": records, "measured": True}
        if ok and fus:
            best = min(ok, key=lambda r: r["ms"])
            bestf = min(fus, key=lambda r: r["ms"])
            entry.update(config=best["config"], ms=best["ms"], vs_cublas=best["ms"] / cub_ms,
                         fusable_config=bestf["config"], fusable_ms=bestf["ms"])
            log(f"tune: {shape_name(shape):<22} {dt}  best {config_str(best['config']):<34} "
                f"{best['ms']:.4f} ms = {best['ms'] / cub_ms:.3f}x cuBLAS "
                f"({len(ok)}/{len(records)} correct)")
            report["entries"].append(entry)
        else:  # kept apart: "entries" must stay a valid table (--table, --install-tuned)
            entry["error"] = "no correct candidate"
            log(f"tune: {shape_name(shape):<22} {dt}  NO correct candidate")
            report["failed"].append(entry)
        prob.free()
        if on_progress:
            on_progress(report)
    report["elapsed_s"] = time.monotonic() - t0
    report["geomean_vs_cublas"] = geomean(e.get("vs_cublas") for e in report["entries"])
    return report


def table_entries(report: dict) -> list[dict]:
    """The entries of a tuning report that can go into a table (those with a correct config)."""
    return [e for e in report["entries"] if e.get("config") and e.get("fusable_config")]


def save_to_cache(report: dict, note: str = "") -> str:
    """Merge a tuning report's entries into the user's tuning cache for its GPU
    (:func:`syncopate.kernels.gemm_table.cache_path`, which ``matmul`` consults before the
    shipped defaults); the file written."""
    path = gemm_table.cache_path(report["gpu"])
    old = gemm_table.read_table(path)["entries"] if path.is_file() else []
    gemm_table.write_table(path, gemm_table.merge_entries(old, table_entries(report)),
                           gpu=report["gpu"], source="tuned (user cache)", note=note)
    clear_plans()
    return str(path)


def tune_matmul(shapes, dtypes=("bf16",), *, budget_s: float = 240.0, workers: int = 8,
                save: bool = True, log=print) -> dict:
    """Tune the local GEMM for ``shapes`` (``(M, N, K)`` tuples) on the current CUDA GPU and,
    with ``save``, merge the result into the user's tuning cache (:func:`save_to_cache`),
    which ``default_config`` and ``matmul`` consult before the shipped defaults. Returns the
    report."""
    backend = CudaBackend()
    why = backend.available()
    if why:
        raise LaunchError(f"tune_matmul needs a CUDA GPU: {why}")
    rep = tune(backend, shapes, dtypes, budget_s=budget_s, workers=workers, log=log)
    if save:
        rep["saved_to"] = save_to_cache(rep, f"tune_matmul on {rep['device'].get('device')}")
    return rep


__all__ = ["MAX_CANDIDATES", "candidate_configs", "compile_key", "save_to_cache",
           "table_entries", "tune", "tune_matmul"]
