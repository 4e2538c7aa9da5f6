#!/usr/bin/env bash
# One-H200 run of the local GEMM work (issue 13, section 4: "local GEMM at cuBLAS speed on any
# shape"), every step under a hard timeout, logs under $OUT, summary last; <= ~540 s in all:
#   tune    python -m syncopate.bench.local --tune: the pruned candidate space of every
#           shape of the broad set (square, tall-skinny, short-wide, K-heavy, ragged, small-M,
#           LLaMA-MLP), bf16 and fp16, compiled in parallel worker processes and measured
#           against cuBLAS under a hard budget -> $OUT/tuned.json (a config table)
#   table   python -m syncopate.bench.local --table $OUT/tuned.json: matmul's default
#           choice with that table vs cuBLAS per shape, geomean, worst shape -> $OUT/table.json
#   local   tests/gpu/test_local_gemm.py (every kernel variant: TMA ragged, split-K and its
#           determinism, staged operands, the plan cache's direct launch, the pointer kernel)
# Afterwards, on the lead's machine (no GPU needed), ship the tuning as the H200 defaults:
#   python -m syncopate.bench.local --install-tuned $OUT/tuned.json
# Carry .whl/ if the GPU machine lacks pure-Python dependencies (the README says how).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_local_gemm.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
TUNE_S=${GPU_GEMM_TUNE_S:-200}
WORKERS=${GPU_GEMM_WORKERS:-14}
step tune $((TUNE_S + 60)) python3 -m syncopate.bench.local --tune --set broad \
  --dtypes bf16 fp16 --budget-s "$TUNE_S" --workers "$WORKERS" \
  --hard-timeout-s $((TUNE_S + 50)) --out "$OUT/tuned.json"
TABLE_ARGS=()
if python3 -c "import json,sys; d=json.load(open(sys.argv[1])); \
sys.exit(0 if any(e.get('config') for e in d.get('entries', [])) else 1)" "$OUT/tuned.json" \
    2>/dev/null; then
  TABLE_ARGS=(--table "$OUT/tuned.json")
fi
step table 120 python3 -m syncopate.bench.local --set broad --dtypes bf16 fp16 \
  ${TABLE_ARGS[@]+"${TABLE_ARGS[@]}"} --workers 8 --rep-ms 60 --hard-timeout-s 110 --out "$OUT/table.json"
step local 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_local_gemm.py -rs
echo
echo "==================== gpu_local_gemm summary ($(( $(date +%s) - START ))s) ===================="
for s in install tune table local; do printf '%-8s %s\n' "$s" "${STATUS[$s]:-not run}"; done
[ -f "$OUT/local.log" ] && grep -E "passed|failed" "$OUT/local.log" | tail -n 3 | sed "s/^/  [local] /"
[ -f "$OUT/tune.log" ] && grep -E "^tune:|^tuned " "$OUT/tune.log" | sed 's/^/  /'
[ -f "$OUT/table.log" ] && sed -n '/^shape /,$p' "$OUT/table.log" | sed 's/^/  /'
echo "table used: ${TABLE_ARGS[*]:-shipped defaults}"
echo "ship it: python -m syncopate.bench.local --install-tuned $OUT/tuned.json"
