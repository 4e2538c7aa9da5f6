#!/usr/bin/env bash
# One-call GPU check (2 x H200): install the carried wheels, run the multi-GPU tests and the
# quick benchmark, every multi-process run under `timeout`, logs under $OUT, summary last.
# Budget: < 9 minutes in all (540 s: tests take ~4-5 min, the bench gets what is left).
#
#   bash scripts/gpu_check.sh            # from the repository root, $OUT set by the runner
#
# Before a run, on the development machine: `git rev-parse HEAD > .syncopate-commit` and carry
# that file (with .whl): the GPU machine's copy of the tree reports a stale git HEAD, and the
# benchmark records the commit from this file.
#
# Env knobs: GPU_CHECK_TESTS (pytest -k expression), GPU_CHECK_SKIP_BENCH=1, GPU_CHECK_FULL_BENCH=1
# (all standard shapes instead of --quick), GPU_CHECK_BACKENDS (full bench; default sm,ce,ce+epilogue),
# GPU_CHECK_BENCH_OPS (default ag,rs), GPU_CHECK_PROFILE=1 (host-time profile of the ops,
# scripts/gpu_host_profile.py), GPU_CHECK_NVSHMEM_BENCH=1 (a quick bench of the nvshmem backend,
# its log only), GPU_CHECK_TOTAL_S (the whole script's budget, default 540), GPU_CHECK_BENCH_M
# (full bench: comma-separated M values, passed as --m), GPU_CHECK_BENCH_CAP (the bench step's
# most seconds; default 150 quick / 330 full), GPU_CHECK_RS_BREAKDOWN=1 (where the default
# GEMM+RS spends its time beyond the GEMM, scripts/gpu_rs_breakdown.py).
# It leaves at most 8 files under $OUT (what the device tool brings back): gpu_check.log, the
# tests_runtime/tests_ops/bench (and host_profile) logs, bench/bench.json and bench/bench.png
# (install and env logs only when they fail: their tails are in gpu_check.log).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_check.log
. scripts/gpu_lib.sh

# 2. environment facts
step env 60 python3 - <<'PY'
import torch, triton, os
print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)
print("gpus", torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
from torch.distributed import _symmetric_memory as sm
print("nvshmem available", sm.is_nvshmem_available())
print("stream_write_value32_", torch.ops.symm_mem.stream_write_value32_.default._schema)
print("fused_all_gather_matmul", torch.ops.symm_mem.fused_all_gather_matmul.default._schema)
try:
    from torch._C._distributed_c10d import _nvshmemx_cumodule_init; print("_nvshmemx_cumodule_init ok")
except ImportError as e:
    print("no _nvshmemx_cumodule_init:", e)
import syncopate.runtime.communicator, syncopate.runtime.fused, syncopate.ops
print("syncopate imports ok; compiler:", hasattr(__import__("syncopate"), "compile"))
PY
case ${STATUS[env]} in ok*) rm -f "$OUT/env.log";; esac

# 3. GPU tests: runtime first (no compiler needed), then the fused ops. Each multi-process
#    run also has its own hard timeout inside the harness.
K=${GPU_CHECK_TESTS:-}
step tests_runtime 150 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_multi_gpu.py \
  -k "sync_kernels"
step tests_ops 420 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_multi_gpu.py \
  -k "not sync_kernels${K:+ and ($K)}" --durations=15

# 3b. Host-time profile of the ops (optional)
if [ "${GPU_CHECK_PROFILE:-0}" = "1" ]; then
  step host_profile 120 python3 -m torch.distributed.run --nproc-per-node 2 scripts/gpu_host_profile.py
fi

# 3b'. Time breakdown of the default GEMM+RS (optional)
if [ "${GPU_CHECK_RS_BREAKDOWN:-0}" = "1" ]; then
  step rs_breakdown 150 python3 -m torch.distributed.run --nproc-per-node 2 scripts/gpu_rs_breakdown.py
fi

# 3c. Quick benchmark of the nvshmem backend (optional; a process with NVSHMEM symmetric memory)
if [ "${GPU_CHECK_NVSHMEM_BENCH:-0}" = "1" ]; then
  step nvshmem_bench 150 python3 -m torch.distributed.run --nproc-per-node 2 -m syncopate.bench \
    --symm nvshmem --backends nvshmem --quick --out /tmp/syncopate-nvshmem-bench --budget-s 100
fi

# 4. Benchmark (quick subset, or every standard shape with GPU_CHECK_FULL_BENCH=1), whatever
#    time is left but at most 150 s (quick) / 330 s (full; backends GPU_CHECK_BACKENDS, default sm,ce).
if [ "${GPU_CHECK_SKIP_BENCH:-0}" != "1" ]; then
  ELAPSED=$(( $(date +%s) - START ))
  if [ "${GPU_CHECK_FULL_BENCH:-0}" = "1" ]; then
    CAP=330; BENCH_ARGS="--backends ${GPU_CHECK_BACKENDS:-sm,ce,ce+epilogue} --ops ${GPU_CHECK_BENCH_OPS:-ag,rs}${GPU_CHECK_BENCH_M:+ --m $GPU_CHECK_BENCH_M}"
  else
    CAP=150; BENCH_ARGS="--quick"
  fi
  CAP=${GPU_CHECK_BENCH_CAP:-$CAP}
  LEFT=$(( ${GPU_CHECK_TOTAL_S:-540} - ELAPSED ))
  if [ "$LEFT" -gt "$CAP" ]; then LEFT=$CAP; fi
  if [ "$LEFT" -gt 45 ]; then
    step bench "$LEFT" python3 -m torch.distributed.run --nproc-per-node 2 -m syncopate.bench $BENCH_ARGS --out "$OUT/bench" \
      --budget-s $(( LEFT - 40 ))
  else
    STATUS[bench]="skipped (only ${LEFT}s left)"
  fi
fi

# 5. Summary (last)
echo
echo "==================== gpu_check summary ($(( $(date +%s) - START ))s) ===================="
for s in install env tests_runtime tests_ops host_profile rs_breakdown nvshmem_bench bench; do
  printf '%-14s %s\n' "$s" "${STATUS[$s]:-not run}"
done
for x in tests_runtime tests_ops; do
  [ -f "$OUT/$x.log" ] && grep -E "^(FAILED|ERROR)|passed|failed|skipped" "$OUT/$x.log" | tail -n 12 | sed "s/^/  [$x] /"
done
if [ -f "$OUT/host_profile.log" ]; then
  sed -n '/^host time per call/,$p' "$OUT/host_profile.log"
fi
if [ -f "$OUT/rs_breakdown.log" ]; then
  echo "default GEMM+RS, time breakdown:"
  sed -n '/M x N x K/,/^times in ms/p' "$OUT/rs_breakdown.log"
fi
if [ -f "$OUT/nvshmem_bench.log" ]; then
  echo "nvshmem backend (quick):"
  sed -n '/^ *op  /,/^times in ms/p' "$OUT/nvshmem_bench.log"
fi
if [ -f "$OUT/bench.log" ]; then
  sed -n '/^ *op  /,/^times in ms/p' "$OUT/bench.log"
fi
echo "logs: $OUT"
