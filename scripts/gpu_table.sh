#!/usr/bin/env bash
# One-GPU check of the table lowering (issue 10), every step under a hard timeout, logs under
# $OUT, summary last:
#   timing   unrolled vs table: kernel time, registers, shared memory (W = 2 loopback)
#   lb8/lb4  W = 8 / 4 virtual ranks, SYNCOPATE_LOWERING=table: sync kernels, AG+GEMM correct
#            and bitwise, 1000 launches (sm), withheld-chunk fault
#   lb2      W = 2, SYNCOPATE_LOWERING=table: every op test (GPU_TABLE_SKIP_W2=1 skips it)
# Carry .whl/ (the README says how to fill it).  Budget: GPU_TABLE_TOTAL_S (default 540).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_table.log
. scripts/gpu_lib.sh
TOTAL=${GPU_TABLE_TOTAL_S:-540}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
T=tests/gpu/test_multi_gpu.py
SUB="sync_kernels or ag_gemm_correct or (1000_launches and sm) or (fault_withheld and sm)"

if [ "${GPU_TABLE_SKIP_TIMING:-0}" != "1" ]; then
  SYNCOPATE_GPU_LOOPBACK=2 step timing 200 python3 scripts/gpu_lowering_timing.py
fi
if [ "${GPU_TABLE_CE_W8:-0}" = "1" ]; then
  SYNCOPATE_GPU_LOOPBACK=8 SYNCOPATE_TIMEOUT_S=${GPU_TABLE_CE_TIMEOUT_S:-10} step cew8 300 \
    python3 scripts/gpu_lowering_timing.py --ce-w8
fi
export SYNCOPATE_LOWERING=table
for W in ${GPU_TABLE_WS:-8 4}; do
  LIM=$(( $(left) - 20 )); [ "$LIM" -gt 240 ] && LIM=240
  if [ "$LIM" -gt 60 ]; then
    SYNCOPATE_GPU_LOOPBACK=$W step lb$W "$LIM" python3 -m pytest -q -p no:cacheprovider $T -rs \
      -k "$SUB"
  else
    STATUS[lb$W]="skipped (only $(left)s left)"
  fi
done
if [ "${GPU_TABLE_SKIP_W2:-0}" != "1" ]; then
  LIM=$(( $(left) - 15 ))
  if [ "$LIM" -gt 60 ]; then
    SYNCOPATE_GPU_LOOPBACK=2 step lb2 "$LIM" python3 -m pytest -q -p no:cacheprovider $T -rs \
      -k "${GPU_TABLE_W2_TESTS:-not sync_kernels}" --durations=8
  else
    STATUS[lb2]="skipped (only $(left)s left)"
  fi
fi

echo
echo "==================== gpu_table summary ($(( $(date +%s) - START ))s) ===================="
for s in install timing cew8 lb8 lb4 lb2; do printf '%-8s %s\n' "$s" "${STATUS[$s]:-not run}"; done
[ -f "$OUT/timing.log" ] && grep TIMING "$OUT/timing.log" | sed 's/^/  /'
[ -f "$OUT/cew8.log" ] && grep -A4 "^CE " "$OUT/cew8.log" | sed 's/^/  /'
for x in lb8 lb4 lb2; do
  [ -f "$OUT/$x.log" ] && grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/$x.log" | tail -n 8 | sed "s/^/  [$x] /"
done
