#!/usr/bin/env bash
# One-call GPU check of the ops that landed without a GPU (one H200, loopback): Ulysses, GEMM+AR,
# MoE dispatch and the whole MoE layer (dispatch + combine), ring attention over launches (W = 2),
# CUDA-graph capture/replay of every op (graphs: up to 400 s; run it alone first), world size 1,
# the torch.library ops, FP8 (local vs torch._scaled_mm and the fused FP8 ops), the grouped
# GEMM bench, the tensor-parallel MLP example and the bench's --check mode in loopback (ring
# attention and GEMM+AR; Ulysses with its baselines).
# Every step under a hard `timeout` bounded by what is left of GPU_PENDING_TOTAL_S (default
# 560 s); logs under $OUT; summary last (also appended to $OUT/gpu_pending.log; more than 7
# files under $OUT are packed into $OUT/all-logs.tgz).
#
#   bash scripts/gpu_pending.sh                     # from the repository root, $OUT set
#   GPU_PENDING_STEPS="graphs w1" bash scripts/gpu_pending.sh   # a subset
#   GPU_PENDING_STEPS="moe2 moecheck" bash scripts/gpu_pending.sh  # the MoE ops alone
# GPU_PENDING_K: the pytest -k of ops2/ops4 (GPU_PENDING_K4: of ops4 alone; GPU_PENDING_GRAPHS_K:
# of graphs). Steps not in the
# default list: ops4 (the new ops' tests at W = 4), local (the local GEMM, grouped GEMM and
# world-size-1 tests), moefirst (scripts/gpu_moe_first_launch.py: why the traced MoE dispatch's
# first launch timed out), moe2 / moecheck (the MoE tests and the bench's MoE check, W = 2), sweep (the
# grouped GEMM's config sweep, all shapes), trace (one real timeline per op,
# scripts/gpu_trace.py; the ops in GPU_PENDING_TRACE_OPS, comma-separated, default all;
# written to $OUT/traces.tgz), hostsm / hostce (host time per call of the AG/RS ops on one
# backend, scripts/gpu_host_profile.py --loopback 2: the ranks time their calls in turn; ce with
# GPU_PENDING_HOST_CALLS calls per turn, default 15: a ce call enqueues ~15 stream operations and
# the launch queue must hold a turn's worth; GPU_PENDING_HOST_SHAPE=M,H,F), cestress (the ce
# backend's 1000-launch tests, W = 2), launchpaths (host time of one launch by path: Triton's
# JIT, its launcher, the direct launch, the epoch advance's variants; scripts/gpu_launch_paths.py).
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_pending.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
TOTAL=${GPU_PENDING_TOTAL_S:-560}
STEPS=${GPU_PENDING_STEPS:-"ops2 graphs w1 torch fp8local fp8ops grouped tpmlp check2 ulysses2"}
PYT="python3 -m pytest -q -p no:cacheprovider -rs"
for s in $STEPS; do
  L=$(lim 150); [ "$L" -lt 30 ] && { STATUS[$s]="skipped (only $(left)s left)"; continue; }
  case $s in
    ops2) SYNCOPATE_GPU_LOOPBACK=2 step ops2 "$(lim 200)" $PYT tests/gpu/test_multi_gpu.py \
            -k "${GPU_PENDING_K:-ulysses or gemm_ar or moe or ring_attention}" --durations=8;;
    moe2) SYNCOPATE_GPU_LOOPBACK=2 step moe2 "$(lim 200)" $PYT tests/gpu/test_multi_gpu.py -k moe \
            --durations=8;;
    moecheck) step moecheck "$(lim 120)" python3 -m syncopate.bench --check --quick --ops moe \
            --loopback 2;;
    graphs) SYNCOPATE_GPU_LOOPBACK=2 step graphs "$(lim 400)" $PYT tests/gpu/test_cuda_graphs.py \
            -k "${GPU_PENDING_GRAPHS_K:-}" --durations=16;;
    w1) step w1 "$(lim 90)" $PYT tests/gpu/test_world_size_one.py;;
    torch) SYNCOPATE_GPU_LOOPBACK=2 step torch "$(lim 90)" $PYT tests/gpu/test_torch_ops_gpu.py;;
    fp8local) step fp8local "$(lim 120)" python3 -m syncopate.bench.local --fp8 --kernels tma --hard-timeout-s 110 \
            --out "$OUT/bench_fp8.json";;
    fp8ops) SYNCOPATE_GPU_LOOPBACK=2 step fp8ops "$(lim 120)" $PYT tests/gpu/test_multi_gpu_fp8.py;;
    grouped) step grouped "$(lim 120)" python3 -m syncopate.bench.grouped --quick \
            --out "$OUT/grouped.json";;
    ops4) SYNCOPATE_GPU_LOOPBACK=4 step ops4 "$(lim 200)" $PYT tests/gpu/test_multi_gpu.py \
            -k "${GPU_PENDING_K4:-${GPU_PENDING_K:-ulysses or gemm_ar or moe or ring_attention}}" \
            --durations=8;;
    moefirst) step moefirst "$(lim 300)" python3 scripts/gpu_moe_first_launch.py --case-timeout 55;;
    local) step local "$(lim 150)" $PYT tests/gpu/test_local_gemm.py \
            tests/gpu/test_grouped_gemm_gpu.py tests/gpu/test_world_size_one.py;;
    sweep) step sweep "$(lim 200)" python3 -m syncopate.bench.grouped --sweep \
            --out "$OUT/grouped_sweep.json";;
    trace) SYNCOPATE_TRACE=1 step trace "$(lim 150)" python3 scripts/gpu_trace.py "$OUT/traces" 2 \
             ${GPU_PENDING_TRACE_OPS:-}
           # one file back instead of two per op (the runner returns a limited number of files)
           [ -d "$OUT/traces" ] && tar czf "$OUT/traces.tgz" -C "$OUT" traces && rm -rf "$OUT/traces";;
    hostsm) step hostsm "$(lim 150)" python3 scripts/gpu_host_profile.py --loopback 2 --backends sm;;
    launchpaths) step launchpaths "$(lim 90)" python3 scripts/gpu_launch_paths.py;;
    hostce) step hostce "$(lim 100)" python3 scripts/gpu_host_profile.py --loopback 2 --backends ce \
            --shape "${GPU_PENDING_HOST_SHAPE:-1024,4096,14336}" \
            --calls "${GPU_PENDING_HOST_CALLS:-15}";;
    cestress) SYNCOPATE_GPU_LOOPBACK=2 step cestress "$(lim 150)" $PYT tests/gpu/test_multi_gpu.py \
            -k "1000_launches and ce" --tb=long;;
    tpmlp) step tpmlp "$(lim 90)" python3 examples/tp_mlp.py --loopback 2;;
    check2) step check2 "$(lim 120)" python3 -m syncopate.bench --check --quick \
            --ops ring_attn,ar,moe --loopback 2;;
    ulysses2) step ulysses2 "$(lim 120)" python3 -m syncopate.bench --check --quick \
            --ops ulysses --loopback 2;;
    *) STATUS[$s]="unknown step";;
  esac
done
echo
summarize "gpu_pending summary" "^(FAILED|ERROR)|passed|failed|^\[rank|ratio|geomean" $STEPS
pack_logs
