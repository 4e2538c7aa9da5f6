#!/usr/bin/env bash
# One-call loopback check on ONE GPU (docs/loopback.md): tests/gpu with W virtual ranks in one
# process (own streams and buffers, real PTX spins, flags, epochs, handshakes, watchdog), for
# the sm and ce backends (nvshmem cannot run in one process: one PE per process; its tests
# skip, saying so). Every step under a hard `timeout`; logs under $OUT; summary table last.
# Budget: < 9 minutes in all (GPU_LOOPBACK_TOTAL_S, default 520 s).
#
#   bash scripts/gpu_loopback.sh          # from the repository root, $OUT set by the runner
#
# Carry .whl/ (the README says how to fill it: xdsl & co., which the GPU machine lacks).
# Steps: install, env, lb2_runtime (sync kernels, W=2), lb2_ops (every op test, W=2: ag/rs
# correctness + bitwise, NCCL-fallback (SYNCOPATE=0 path through the loopback group), 1000
# launches, fault injection), lb4 (W=4 subset, only with the time left). Knobs:
# GPU_LOOPBACK_TESTS (pytest -k expression for lb2_ops), GPU_LOOPBACK_SKIP_W4=1.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_loopback.log
. scripts/gpu_lib.sh
TOTAL=${GPU_LOOPBACK_TOTAL_S:-520}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}   # one GPU, whatever the machine has

# 2. environment facts (and that this tree's syncopate is the one imported)
step env 60 python3 - <<'PY'
import torch, triton
print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.version.cuda)
print("gpus", torch.cuda.device_count(), torch.cuda.get_device_name(0))
p = torch.cuda.get_device_properties(0)
print("sms", p.multi_processor_count, "regs/sm", getattr(p, "regs_per_multiprocessor", "?"),
      "smem/sm", getattr(p, "shared_memory_per_multiprocessor", "?"),
      "threads/sm", getattr(p, "max_threads_per_multi_processor", "?"))
import syncopate, syncopate.runtime.loopback, syncopate.runtime.residency
print("syncopate from", syncopate.__file__)
from syncopate.runtime import _cuda
print("stream waits", _cuda.stream_wait_available())
print("stream_write_value32_", torch.ops.symm_mem.stream_write_value32_.default._schema)
PY
case ${STATUS[env]} in ok*) rm -f "$OUT/env.log";; esac

# 3. W = 2: the runtime's own PTX first (no compiler), then every op test
export SYNCOPATE_GPU_LOOPBACK=2
step lb2_runtime 120 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_multi_gpu.py \
  -k "sync_kernels" -rs
K=${GPU_LOOPBACK_TESTS:-}
LIM=$(( $(left) - 60 )); [ "$LIM" -gt 400 ] && LIM=400
step lb2_ops "$LIM" python3 -m pytest -q -p no:cacheprovider tests/gpu/test_multi_gpu.py \
  -k "not sync_kernels${K:+ and ($K)}" -rs --durations=12

# 4. W = 4 (a subset, with what is left): more ranks than SM shares of the W=2 run
if [ "${GPU_LOOPBACK_SKIP_W4:-0}" != "1" ]; then
  LIM=$(( $(left) - 15 ))
  if [ "$LIM" -gt 60 ]; then
    SYNCOPATE_GPU_LOOPBACK=4 step lb4 "$LIM" python3 -m pytest -q -p no:cacheprovider \
      tests/gpu/test_multi_gpu.py -rs \
      -k "sync_kernels or ag_gemm_correct or (1000_launches and sm) or fault_withheld"
  else
    STATUS[lb4]="skipped (only $(left)s left)"
  fi
fi

# 5. Summary (last)
echo
echo "==================== gpu_loopback summary ($(( $(date +%s) - START ))s) ===================="
for s in install env lb2_runtime lb2_ops lb4; do
  printf '%-12s %s\n' "$s" "${STATUS[$s]:-not run}"
done
for x in lb2_runtime lb2_ops lb4; do
  [ -f "$OUT/$x.log" ] && grep -E "^(FAILED|ERROR|SKIPPED)|passed|failed" "$OUT/$x.log" | tail -n 14 | sed "s/^/  [$x] /"
done
echo "logs: $OUT"
