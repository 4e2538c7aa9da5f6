#!/usr/bin/env bash
# The end-to-end block benchmark (issue 30) on the lent GPU(s), every step under a hard
# timeout, logs under $OUT, the summary and the table last.  Budget: GPU_E2E_TOTAL_S seconds
# for the whole script (default 240; the W = 1 table itself at most 180 s):
#   env      torch / triton / the GPU
#   refusal  `python -m syncopate.bench --model block --loopback 2` must refuse (exit 2)
#   blockW   torchrun --nproc-per-node W -m syncopate.bench --model block --quick: fused vs
#            unfused vs torch async-TP vs ideal, forward and forward + backward, Llama-3 8B /
#            70B (tp) and 8B long-context (cp); rows -> $OUT/blockW/bench_block.json. W from
#            GPU_E2E_WS (default 1: the harness on one GPU; "2 4 8" on a multi-GPU machine).
# Before the run, on the development machine: ../shared/tools/gpu-wheels (fills .whl/) and
# `git rev-parse HEAD > .syncopate-commit`; carry .whl and .syncopate-commit.
# Knobs: GPU_E2E_TOTAL_S, GPU_E2E_WS, GPU_E2E_BLOCK_S (one table's limit, default 180),
# GPU_E2E_ARGS (default --quick; "" for the full sequence lengths).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_e2e.log
. scripts/gpu_lib.sh
TOTAL=${GPU_E2E_TOTAL_S:-240}

step env 60 python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, torch.cuda.get_device_name(), torch.cuda.device_count(), 'GPU(s)')"

# the benchmark refuses loopback: the exit status 2 and its message are the check
step refusal 60 bash -c 'python3 -m syncopate.bench --model block --loopback 2; rc=$?; \
  echo "exit status $rc (2 expected)"; [ "$rc" -eq 2 ]'

STEPS=""
for W in ${GPU_E2E_WS:-1}; do
  LIMIT=$(lim "${GPU_E2E_BLOCK_S:-180}")
  if [ "$LIMIT" -lt 60 ]; then STATUS[block$W]="skipped (only ${LIMIT}s left)"; continue; fi
  # the benchmark starts a shape only if it should end 25 s before the step's limit
  step block$W "$LIMIT" python3 -m torch.distributed.run --standalone --nproc-per-node "$W" \
    -m syncopate.bench --model block ${GPU_E2E_ARGS---quick} --budget-s $(( LIMIT - 25 )) \
    --out "$OUT/block$W"
  STEPS="$STEPS block$W"
done

summarize "gpu_e2e summary" "error|skipped|Traceback|exit status" env refusal $STEPS
for s in $STEPS; do
  [ -f "$OUT/$s.log" ] && sed -n '/^ *model  *layout/,/^wrote/p' "$OUT/$s.log" | tee -a "$OUT/$LOG"
done
pack_logs
