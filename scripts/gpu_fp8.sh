#!/usr/bin/env bash
# One-GPU check of the FP8 work (issue 13, section 3; docs/fp8.md), every step under a hard
# timeout, logs under $OUT, summary last:
#   local   tests/gpu/test_local_gemm_fp8.py (our FP8 GEMM vs torch._scaled_mm)
#   bench   python -m syncopate.bench.local --fp8 (vs torch._scaled_mm, ratio per shape)
#   ops2    SYNCOPATE_GPU_LOOPBACK=2 tests/gpu/test_multi_gpu_fp8.py (ag_gemm_fp8, gemm_rs_fp8)
#   ops4    the same with W = 4 (GPU_FP8_SKIP_W4=1 skips it)
# Carry .whl/ (the README says how to fill it).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_fp8.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
step local 240 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_local_gemm_fp8.py -rs
[ "${GPU_FP8_SKIP_BENCH:-0}" = "1" ] || \
  step bench ${GPU_FP8_BENCH_S:-300} python3 -m syncopate.bench.local --fp8 \
    --out "$OUT/bench_fp8.json"
SYNCOPATE_GPU_LOOPBACK=2 step ops2 300 python3 -m pytest -q -p no:cacheprovider \
  tests/gpu/test_multi_gpu_fp8.py -rs
[ "${GPU_FP8_SKIP_W4:-0}" = "1" ] || SYNCOPATE_GPU_LOOPBACK=4 step ops4 300 python3 -m pytest -q \
  -p no:cacheprovider tests/gpu/test_multi_gpu_fp8.py -rs
echo
echo "==================== gpu_fp8 summary ($(( $(date +%s) - START ))s) ===================="
for s in install local bench ops2 ops4; do printf '%-8s %s\n' "$s" "${STATUS[$s]:-not run}"; done
for s in local ops2 ops4; do
  [ -f "$OUT/$s.log" ] && grep -E "passed|failed" "$OUT/$s.log" | tail -n 3 | sed "s/^/  [$s] /"
done
[ -f "$OUT/bench.log" ] && sed -n '/^shape/,$p' "$OUT/bench.log" | sed 's/^/  /'
