#!/usr/bin/env bash
# Nightly-style compiler fuzzing (docs/fuzzing.md): thousands of generated kernel x schedule
# cases, in chunks of CHUNK seeds (one process each, so a leak or a hang in one chunk cannot
# take the rest down), under an overall time budget.  Failing cases land in OUT/seed-<S>/ with
# their source, schedule, case.json and the emulator's report; replay one with
#   python -m syncopate.fuzz --replay S
# Usage: scripts/fuzz_nightly.sh [COUNT=5000] [FIRST_SEED=100000] [BUDGET_S=3600] [OUT=fuzz-out]
# Exit 1 if any chunk found a failure (or crashed), 0 otherwise.
set -u
COUNT=${1:-5000}
FIRST=${2:-100000}
BUDGET=${3:-3600}
OUT=${4:-fuzz-out}
CHUNK=${CHUNK:-250}
CHUNK_TIMEOUT=${CHUNK_TIMEOUT:-1800}
mkdir -p "$OUT"
start=$(date +%s)
status=0
seed=$FIRST
end_seed=$((FIRST + COUNT))
while [ "$seed" -lt "$end_seed" ]; do
  now=$(date +%s); left=$((BUDGET - (now - start)))
  if [ "$left" -le 0 ]; then echo "time budget spent at seed $seed"; break; fi
  n=$CHUNK; [ $((seed + n)) -gt "$end_seed" ] && n=$((end_seed - seed))
  echo "== seeds $seed..$((seed + n - 1)) ($left s left)"
  timeout "$CHUNK_TIMEOUT" python -m syncopate.fuzz --count "$n" --seed "$seed" \
      --out "$OUT/chunk-$seed" --time-budget "$left" > "$OUT/chunk-$seed.log" 2>&1
  rc=$?
  grep -E "^[0-9]+ cases in|^time budget" "$OUT/chunk-$seed.log" || tail -n 3 "$OUT/chunk-$seed.log"
  if [ "$rc" -ne 0 ]; then
    status=1
    echo "   chunk $seed: exit $rc (see $OUT/chunk-$seed.log)"
    grep -E "^seed [0-9]+: failure" "$OUT/chunk-$seed.log" || true
  fi
  seed=$((seed + n))
done
python - "$OUT" <<'PY'
import json, sys, glob, os
from collections import Counter
tot, cases, secs, fails = Counter(), 0, 0.0, []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "chunk-*", "summary.json"))):
    s = json.load(open(f))
    cases += s["cases"]; secs += s["seconds"]; tot.update(s["counts"])
    fails += [n["seed"] for n in s["notable"].get("failure", [])]
print(f"TOTAL {cases} cases in {secs:.0f} s: " + ", ".join(f"{k} {v}" for k, v in tot.items()))
print("failing seeds:", fails or "none")
PY
exit $status
