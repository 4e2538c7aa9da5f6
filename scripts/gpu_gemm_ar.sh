#!/usr/bin/env bash
# One-GPU check of GEMM + all-reduce (issue 12, docs/gemm_ar.md), every step under a hard
# timeout, logs under $OUT, summary last:
#   lb2, lb4   SYNCOPATE_GPU_LOOPBACK=W tests/gpu/test_multi_gpu.py -k gemm_ar (W virtual ranks
#              on one GPU: against torch, bitwise across ranks / repeats / the NCCL fallback
#              for W = 2, 500 launches; nvshmem skips in loopback, saying why)
#   check4     python -m syncopate.bench --check --ops ar --loopback 4 (decode M = 1, 64, 512
#              at N = 8192, K = 28672 / 4: fused vs NCCL path, ranks bitwise equal; no timing)
# With several GPUs (one process per GPU) the timed bench is:
#   torchrun --nproc-per-node <GPUs> -m syncopate.bench --ops ar --backends sm
# Carry .whl/ (the README says how to fill it). Knobs: GPU_AR_WS (default "2 4").
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_gemm_ar.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
for W in ${GPU_AR_WS:-2 4}; do
  SYNCOPATE_GPU_LOOPBACK=$W step lb$W 240 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_multi_gpu.py -rs -k gemm_ar
done
step check4 180 python3 -m syncopate.bench --check --ops ar --loopback 4 --quick
echo
echo "==================== gpu_gemm_ar summary ($(( $(date +%s) - START ))s) ===================="
for s in install lb2 lb4 check4; do printf '%-8s %s\n' "$s" "${STATUS[$s]:-not run}"; done
[ -f "$OUT/check4.log" ] && grep -E "^gemm_ar|--check" "$OUT/check4.log" | sed 's/^/  [check4] /'
