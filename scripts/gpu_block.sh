#!/usr/bin/env bash
# One-GPU check of syncopate.nn and the ring attention backward (issue 30), in loopback: every
# step under a hard timeout bounded by what is left of GPU_BLOCK_TOTAL_S (default 470 s: under
# 8 minutes with the machine's start), logs under $OUT, summary last.
#   cp2 / tp2   tests/gpu/test_block_gpu.py at W = 2, one layout each: the block on the
#               registered ops and with fused=False against the fp32 unsharded block (output,
#               dx, every weight gradient), a second block adds no symmetric memory or fused
#               kernel, CUDA-graph capture of the fused forward (cp; tp from W = 4), 20 training
#               steps against the unsharded model's losses
#   cp4 / tp4   the same at W = 4
#   cpring2     cp2's ring attention layout alone (the workers print host times and Triton
#               kernel loads per rank: where a loopback timeout's ranks were); cpring2-align:
#               the same with SYNCOPATE_LOOPBACK_ALIGN=1 (the ranks meet before every fused
#               launch)
#   cp2-nodirect / cp2-noc   cp2 with SYNCOPATE_DIRECT_LAUNCH=0 / SYNCOPATE_FAST_LAUNCH=0, ring
#               attention only: does the ring hang of docs/loopback.md follow the launch path?
#   ring2       the ring attention op alone in loopback W = 2 (tests/gpu/test_multi_gpu.py)
#   moe2        the mixture-of-experts block's inference (fused dispatch/combine), W = 2
#   example     examples/train_block.py --loopback 2 (both layouts, forward and backward)
#   bench1      the end-to-end benchmark at W = 1 (one process, not loopback): `python -m
#               syncopate.bench --model block --quick` under torchrun, fused vs unfused vs
#               ideal, forward and forward + backward (<= 180 s; rows ->
#               $OUT/bench1/bench_block.json), after checking that --loopback 2 is refused
# Most important first (the new backward op is cp's); what the budget does not reach is
# reported "skipped". Before the run, on the development machine: ../shared/tools/gpu-wheels
# (fills .whl/), carry .whl.
#   bash scripts/gpu_block.sh                           # from the repository root, $OUT set
#   GPU_BLOCK_STEPS="cp2 cp4" bash scripts/gpu_block.sh  # a subset
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=gpu_block.log
. scripts/gpu_lib.sh
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
TOTAL=${GPU_BLOCK_TOTAL_S:-470}
STEPS=${GPU_BLOCK_STEPS:-"cp2 tp2 cp4 tp4 moe2 example bench1"}
PYT="python3 -m pytest -q -s -p no:cacheprovider -rs --durations=4"
declare -A RING_SETTING=([cpring2]="" [cpring2-align]=SYNCOPATE_LOOPBACK_ALIGN=1
                         [cp2-nodirect]=SYNCOPATE_DIRECT_LAUNCH=0 [cp2-noc]=SYNCOPATE_FAST_LAUNCH=0)
step env 60 python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', \
triton.__version__, torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
for s in $STEPS; do
  L=$(lim 200); [ "$L" -lt 40 ] && { STATUS[$s]="skipped (only $(left)s left)"; continue; }
  case $s in
    cp2|tp2|cp4|tp4)
      SYNCOPATE_GPU_LOOPBACK=${s:2:1} step "$s" "$(lim 200)" $PYT tests/gpu/test_block_gpu.py \
        -k "against_unsharded and ${s:0:2}";;
    cpring2|cpring2-align|cp2-nodirect|cp2-noc)  # the ring layout alone, one setting each
      step "$s" "$(lim 200)" env SYNCOPATE_GPU_LOOPBACK=2 ${RING_SETTING[$s]} $PYT \
        tests/gpu/test_block_gpu.py -k "against_unsharded and cp and not ulysses";;
    ring2) SYNCOPATE_GPU_LOOPBACK=2 step ring2 "$(lim 150)" $PYT tests/gpu/test_multi_gpu.py \
      -k ring_attention;;
    moe2) SYNCOPATE_GPU_LOOPBACK=2 step moe2 "$(lim 120)" $PYT tests/gpu/test_block_gpu.py -k moe;;
    example) step example "$(lim 150)" python3 examples/train_block.py --loopback 2 --steps 5;;
    bench1)  # the refusal (exit 2) first, then the table; a shape starts only if it should
      # end 25 s before the step's limit
      L=$(lim 180); [ "$L" -lt 90 ] && { STATUS[bench1]="skipped (only ${L}s left)"; continue; }
      step bench1 "$L" bash -c "python3 -m syncopate.bench --model block \
        --loopback 2; [ \$? -eq 2 ] || { echo 'loopback NOT refused'; exit 1; }; \
        echo 'loopback refused (exit 2)'; python3 -m torch.distributed.run --standalone \
        --nproc-per-node 1 -m syncopate.bench --model block --quick --budget-s $(( L - 25 )) \
        --out $OUT/bench1";;
    *) STATUS[$s]="unknown step";;
  esac
done
echo
summarize "gpu_block summary" "^(FAILED|ERROR)|passed|failed|^\[block\]|^\[rank|relative error|Error|refused" \
  env $STEPS
[ -f "$OUT/bench1.log" ] && sed -n '/^ *model  *layout/,/^wrote/p' "$OUT/bench1.log" | tee -a "$OUT/$LOG"
pack_logs
