#!/usr/bin/env bash
# One-GPU check of the attention work (issue 11), every step under a hard timeout, logs under
# $OUT, summary last:
#   local   tests/gpu/test_local_attention.py (our flash-attention vs SDPA in fp32)
#   bench   scripts/bench_attention.py --sweep (ours vs SDPA flash / cuDNN, ratio per shape)
#   ring    SYNCOPATE_GPU_LOOPBACK=W tests/gpu/test_multi_gpu.py -k attention (when built)
# Carry .whl/ (the README says how to fill it).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_attention.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
[ "${GPU_ATTN_SKIP_LOCAL:-0}" = "1" ] || \
  step local 180 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_local_attention.py -rs
[ "${GPU_ATTN_SKIP_BENCH:-0}" = "1" ] || \
  step bench ${GPU_ATTN_BENCH_S:-240} python3 scripts/bench_attention.py ${GPU_ATTN_BENCH_ARGS:---sweep} \
    --json "$OUT/bench_attention.json"
for W in ${GPU_ATTN_RING_WS:-}; do
  SYNCOPATE_GPU_LOOPBACK=$W step ring$W 200 python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_multi_gpu.py -rs -k "${GPU_ATTN_RING_K:-attention}"
done
echo
echo "==================== gpu_attention summary ($(( $(date +%s) - START ))s) ===================="
for s in install local bench ring2 ring4 ring8; do printf '%-8s %s\n' "$s" "${STATUS[$s]:-not run}"; done
[ -f "$OUT/local.log" ] && grep -E "passed|failed" "$OUT/local.log" | tail -n 3 | sed 's/^/  [local] /'
[ -f "$OUT/bench.log" ] && sed -n '/^device:/,$p' "$OUT/bench.log" | sed 's/^/  /'
