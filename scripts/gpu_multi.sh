#!/usr/bin/env bash
# The multi-GPU runs (issue 15) on every GPU of the lent machine, one phase list per call (a
# device call has 600 s): W = the number of visible GPUs (at least 2), one process per GPU,
# every step under a hard `timeout`, logs under $OUT (more than 7 files are packed into
# $OUT/all-logs.tgz: the runner returns 8), summary last (also in $OUT/gpu_multi.log).
#
#   GPU_MULTI_PHASES="tests" bash scripts/gpu_multi.sh        # from the repository root
#   GPU_MULTI_PHASES="bench audit" bash scripts/gpu_multi.sh
#   GPU_MULTI_PHASES="calib host" bash scripts/gpu_multi.sh
#
# Phases (default "tests"):
#   tests  tests/gpu in full (not SYNCOPATE_GPU_QUICK) at W: the ops and runtime
#          (test_multi_gpu.py: correctness, bitwise where promised, 1000-launch stress, fault
#          injection), FP8, CUDA graphs, the torch.library ops, the side streams
#   bench  python -m syncopate.bench, every standard shape of GPU_MULTI_OPS (default all ops:
#          ag,rs,ar,ag_fp8,rs_fp8,ring_attn,ulysses,moe), backends GPU_MULTI_BACKENDS (default
#          sm,ce,ce+epilogue), all columns side by side, under --budget-s; $OUT/bench/
#   audit  scripts/choice_audit.py on $OUT/bench (the ops' default choice vs the measured best)
#   calib  python -m syncopate.bench --calibrate: the cost model's inputs measured at W, written
#          to $OUT/calibration/ (copy into python/syncopate/calibration after review)
#   host   scripts/gpu_host_profile.py under torchrun (host time per call, sm and ce)
# Knobs: GPU_MULTI_TOTAL_S (whole script, default 570), GPU_MULTI_TESTS_K (pytest -k of
# test_multi_gpu.py), GPU_MULTI_BENCH_M (--m of the bench).
# Before a run, on the development machine: `git rev-parse HEAD > .syncopate-commit` and carry
# it with .whl (the benchmark records the commit from it).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_multi.log
. scripts/gpu_lib.sh
TOTAL=${GPU_MULTI_TOTAL_S:-570}
PHASES=${GPU_MULTI_PHASES:-tests}
W=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
if [ "${W:-0}" -lt 2 ]; then
  echo "gpu_multi.sh: $W GPU(s) visible; the multi-GPU runs need at least 2 (one H200: use" \
       "scripts/gpu_pending.sh, loopback)" | tee -a "$OUT/$LOG"
  exit 2
fi
export SYNCOPATE_GPU_WORLD=$W
unset SYNCOPATE_GPU_LOOPBACK SYNCOPATE_GPU_QUICK
RUN="python3 -m torch.distributed.run --nproc-per-node $W"
PYT="python3 -m pytest -q -p no:cacheprovider -rs"
OPS=${GPU_MULTI_OPS:-ag,rs,ar,ag_fp8,rs_fp8,ring_attn,ulysses,moe}
for ph in $PHASES; do
  case $ph in
    tests)
      step tests_ops "$(lim 330)" $PYT tests/gpu/test_multi_gpu.py \
        ${GPU_MULTI_TESTS_K:+-k "$GPU_MULTI_TESTS_K"} --durations=10
      step tests_more "$(lim 240)" $PYT tests/gpu/test_multi_gpu_fp8.py tests/gpu/test_cuda_graphs.py \
        tests/gpu/test_torch_ops_gpu.py tests/gpu/test_streams.py --durations=10;;
    bench)
      L=$(lim 540)
      step bench "$L" $RUN -m syncopate.bench --ops "$OPS" \
        --backends "${GPU_MULTI_BACKENDS:-sm,ce,ce+epilogue}" ${GPU_MULTI_BENCH_M:+--m "$GPU_MULTI_BENCH_M"} \
        --out "$OUT/bench" --budget-s $(( L > 80 ? L - 40 : 40 ));;
    audit)
      if [ -f "$OUT/bench/bench.json" ]; then
        step audit "$(lim 60)" python3 scripts/choice_audit.py "$OUT/bench"
      else
        STATUS[audit]="skipped (no $OUT/bench/bench.json: run the bench phase in this call)"
      fi;;
    calib)
      mkdir -p "$OUT/calibration"
      step calib "$(lim 300)" $RUN -m syncopate.bench --calibrate --ops "$OPS" \
        --calibration-dir "$OUT/calibration";;
    host)
      step host "$(lim 150)" $RUN scripts/gpu_host_profile.py;;
    *) STATUS[$ph]="unknown phase (tests, bench, audit, calib, host)";;
  esac
done
echo
summarize "gpu_multi summary, W = $W" "^(FAILED|ERROR)|passed|failed|regret|ratio" \
  tests_ops tests_more bench audit calib host
pack_logs
