#!/usr/bin/env bash
# One-GPU run of the attention work (issues 11 and 31), every step under a hard timeout, logs
# under $OUT, the summary and the benchmark's tables last.  Budget: GPU_ATTN_TOTAL_S seconds
# for the whole script (default 470, i.e. under 8 minutes with the machine's start):
#   env     torch / triton / the GPU
#   tests   tests/gpu/test_attention_gpu.py (fast and fusable kernels, zigzag, backward vs SDPA
#           in fp32) and tests/gpu/test_local_attention.py (attention() vs SDPA), in the
#           background while the bench compiles
#   bench   scripts/bench_attention.py --sweep: forward and backward, ours vs SDPA flash and
#           cuDNN, zigzag vs prefix causal, every row checked against SDPA, whatever time is
#           left; it times nothing before the tests end; rows -> $OUT/bench_attention.json,
#           best configs -> $OUT/attention-tuned.json (install as
#           python/syncopate/kernels/configs/attention-<gpu>.json)
#   ring    only with GPU_ATTN_RING_WS="2 4": ring attention in one-GPU loopback
# Before the run, on the development machine: ../shared/tools/gpu-wheels (fills .whl/) and
# `git rev-parse HEAD > .syncopate-commit`; carry .whl and .syncopate-commit.
# Knobs: GPU_ATTN_TOTAL_S, GPU_ATTN_TESTS_S (tests' limit, default 200), GPU_ATTN_SKIP_TESTS=1,
# GPU_ATTN_SKIP_BENCH=1, GPU_ATTN_BENCH_ARGS (default --sweep), GPU_ATTN_RING_WS, GPU_ATTN_RING_K,
# GPU_ATTN_TESTS_ONLY=1: the verification run -- the GPU tests alone (no benchmark, no ring),
# with the whole budget (default 240 s) as their limit; about 3 minutes with the machine's start.
# GPU_ATTN_TESTS_K: a pytest -k expression for the tests (e.g. "fast" for the fast kernels only).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_attention.log
. scripts/gpu_lib.sh
if [ "${GPU_ATTN_TESTS_ONLY:-0}" = "1" ]; then
  GPU_ATTN_SKIP_BENCH=1 GPU_ATTN_SKIP_TESTS=0 GPU_ATTN_RING_WS=
  TOTAL=${GPU_ATTN_TOTAL_S:-240}
  GPU_ATTN_TESTS_S=${GPU_ATTN_TESTS_S:-$(( TOTAL - 20 ))}
else
  TOTAL=${GPU_ATTN_TOTAL_S:-470}
fi
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}

step env 60 python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"

# The tests and the benchmark's compile warm-up both spend their time in Triton's compiler (on
# the CPU): the tests run in the background while the warm-up compiles, and the benchmark
# waits for them (--wait-pid) before it times anything.
TESTS_PID=
if [ "${GPU_ATTN_SKIP_TESTS:-0}" != "1" ]; then
  TESTS_S=$(lim "${GPU_ATTN_TESTS_S:-200}")
  echo "=== tests (limit ${TESTS_S}s, background): pytest tests/gpu/test_attention_gpu.py" \
    "tests/gpu/test_local_attention.py" | tee -a "$OUT/$LOG"
  TESTS_T0=$(date +%s)
  timeout --kill-after=10 "$TESTS_S" python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_attention_gpu.py tests/gpu/test_local_attention.py -rfEs --durations=5 \
    ${GPU_ATTN_TESTS_K:+-k "$GPU_ATTN_TESTS_K"} > "$OUT/tests.log" 2>&1 &
  TESTS_PID=$!
fi

if [ "${GPU_ATTN_SKIP_BENCH:-0}" != "1" ]; then
  RING_S=0
  for W in ${GPU_ATTN_RING_WS:-}; do RING_S=$(( RING_S + 120 )); done
  BENCH_S=$(( $(left) - 15 - RING_S ))
  if [ "$BENCH_S" -gt 90 ]; then
    # the bench stops starting rows 30 s before its limit; warm-up compiles get at most 40%
    step bench "$BENCH_S" python3 scripts/bench_attention.py ${GPU_ATTN_BENCH_ARGS:---sweep} \
      --budget-s $(( BENCH_S - 30 )) --warm-timeout-s $(( (BENCH_S - 30) * 2 / 5 )) \
      ${TESTS_PID:+--wait-pid $TESTS_PID} \
      --json "$OUT/bench_attention.json" --tune-out "$OUT/attention-tuned.json"
  else
    STATUS[bench]="skipped (only ${BENCH_S}s left)"
  fi
fi

if [ -n "$TESTS_PID" ]; then
  wait "$TESTS_PID"
  rc=$?
  dt=$(( $(date +%s) - TESTS_T0 ))
  case $rc in
    0) STATUS[tests]="ok (${dt}s)";;
    124|137) STATUS[tests]="TIMEOUT after ${dt}s";;
    5) STATUS[tests]="NO TESTS RAN (all skipped? see tests.log) (${dt}s)";;
    *) STATUS[tests]="FAILED rc=$rc (${dt}s)";;
  esac
  tail -n 25 "$OUT/tests.log" | tee -a "$OUT/$LOG"
  echo "--- tests: ${STATUS[tests]}" | tee -a "$OUT/$LOG"
fi

for W in ${GPU_ATTN_RING_WS:-}; do
  SYNCOPATE_GPU_LOOPBACK=$W step ring$W "$(lim 120)" python3 -m pytest -q -p no:cacheprovider \
    tests/gpu/test_multi_gpu.py -rs -k "${GPU_ATTN_RING_K:-attention}"
done

{
  echo
  echo "==================== gpu_attention summary ($(( $(date +%s) - START ))s) ===================="
  for s in install env tests bench ring2 ring4 ring8; do
    printf '%-8s %s\n' "$s" "${STATUS[$s]:-not run}"
  done
  [ -f "$OUT/env.log" ] && tail -n 1 "$OUT/env.log" | sed 's/^/  [env] /'
  [ -f "$OUT/tests.log" ] && grep -E "^(FAILED|ERROR)|passed|failed|skipped" "$OUT/tests.log" \
    | tail -n 12 | sed 's/^/  [tests] /'
  if [ -f "$OUT/bench.log" ]; then
    grep -E "^warm-up|skipped|row failed" "$OUT/bench.log" | sed 's/^/  [bench] /'
    sed -n '/^forward (ms/,$p' "$OUT/bench.log"
  fi
  echo "logs: $OUT"
} | tee -a "$OUT/$LOG"
