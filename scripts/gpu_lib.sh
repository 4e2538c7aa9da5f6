# Shared by the GPU scripts (gpu_check.sh, gpu_loopback.sh): sourced, not run.
# Sets the lent machine's environment, defines `step` (a command under a hard timeout, its log
# under $OUT, its status in STATUS[name]) and installs the carried wheels (.whl/).
# The caller sets LOG (the combined log's name) before sourcing.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
START=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 SYNCOPATE_TIMEOUT_S=${SYNCOPATE_TIMEOUT_S:-10}
# a GPU run cannot be repeated at will: keep the traceback of an internal error in the logs
export SYNCOPATE_TRACEBACK=${SYNCOPATE_TRACEBACK:-1}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/syncopate-triton-cache}
LOG=${LOG:-gpu.log}

declare -A STATUS
step() {  # step NAME TIMEOUT_S CMD... : run with a hard timeout, log to $OUT/NAME.log
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s): $*" | tee -a "$OUT/$LOG"
  timeout --kill-after=10 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  case $rc in
    0) STATUS[$name]="ok (${dt}s)";;
    124|137) STATUS[$name]="TIMEOUT after ${dt}s";;
    5) STATUS[$name]="NO TESTS RAN (all skipped? see $name.log) (${dt}s)";;
    *) STATUS[$name]="FAILED rc=$rc (${dt}s)";;
  esac
  tail -n 25 "$OUT/$name.log" | tee -a "$OUT/$LOG"
  echo "--- $name: ${STATUS[$name]}" | tee -a "$OUT/$LOG"
}

# the wheels of the pure-Python dependencies the GPU machine lacks (xdsl, ...)
if ls .whl/*.whl >/dev/null 2>&1; then
  step install 120 python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .whl/*.whl
  case ${STATUS[install]} in ok*) rm -f "$OUT/install.log";; esac
else
  STATUS[install]="no .whl/ carried (skipped)"
fi
export PYTHONPATH=/tmp/site:$PWD/python:$PWD${PYTHONPATH:+:$PYTHONPATH}

summarize() {  # summarize TITLE PATTERN STEP...: each step's status, then the lines of its log
  # that match PATTERN (last 8), into $OUT/$LOG too; the caller prints it last
  local title=$1 pat=$2; shift 2
  {
    echo "==================== $title ($(( $(date +%s) - START ))s) ===================="
    for s in install "$@"; do printf '%-10s %s\n' "$s" "${STATUS[$s]:-not run}"; done
    for s in "$@"; do
      [ -f "$OUT/$s.log" ] && grep -E "$pat" "$OUT/$s.log" | tail -n 8 | sed "s/^/  [$s] /"
    done
    echo "logs: $OUT"
  } | tee -a "$OUT/$LOG"
}

pack_logs() {  # the runner brings back 8 files: past 7, everything but the combined log (which
  # ends with the summary) goes back as one archive, all-logs.tgz
  if [ "$(find "$OUT" -type f | wc -l)" -gt 7 ]; then
    (cd "$OUT" && tar czf all-logs.tgz --exclude="$LOG" --exclude=all-logs.tgz -- * \
       && find . -mindepth 1 -maxdepth 1 ! -name "$LOG" ! -name all-logs.tgz -exec rm -rf {} +)
  fi
}

# The caller's time budget: set TOTAL (seconds for the whole script) before calling these.
left() { echo $(( TOTAL - ($(date +%s) - START) )); }  # seconds of TOTAL still left
lim() {  # lim WANT: WANT seconds, or what is left minus a margin
  local l=$(( $(left) - 10 )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
