#!/usr/bin/env bash
# Run every examples/*.py in one-GPU loopback (W = ${GPU_EXAMPLES_W:-2}), each under a hard
# timeout, logs under $OUT, the lines each example checked last.  Carry .whl/.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_examples.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
for f in examples/[a-z]*.py; do
  n=$(basename "$f" .py)
  step "ex_$n" "${GPU_EXAMPLES_S:-180}" python3 "$f" --loopback "${GPU_EXAMPLES_W:-2}"
done
echo
echo "==================== gpu_examples summary ($(( $(date +%s) - START ))s) ===================="
for f in examples/[a-z]*.py; do n=$(basename "$f" .py); printf '%-24s %s\n' "$n" "${STATUS[ex_$n]:-not run}"; done
for f in "$OUT"/ex_*.log; do grep -h "^\[rank" "$f" | head -n 8; done
