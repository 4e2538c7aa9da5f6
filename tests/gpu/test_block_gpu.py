"""syncopate.nn on GPUs (issue 30): the tensor+sequence-parallel and the context-parallel block
on the registered ops and on the plain composition (``fused=False``) against the fp32
unsharded block -- output, input gradient and every weight gradient --, the memory a second
block of the same shape adds (none), CUDA-graph capture of the fused forward, 20 training
steps against the unsharded model's losses, and the mixture-of-experts block's inference.

Skipped without CUDA. In one-GPU loopback (``SYNCOPATE_GPU_LOOPBACK=W``) the backward runs on
each rank's thread (``run_loopback`` disables autograd's device threads there), so every op's
backward is checked on one GPU; ``scripts/gpu_block.sh`` runs W = 2 and W = 4. Tolerances
(tests/gpu/block_workers.py): normwise relative 3e-2 for bf16 against fp32, 1e-2 per step for
the losses. Run with ``-s``: each case prints what it measured (``[block]`` lines).
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(__file__))
from dist_harness import loopback_world, run_ranks  # noqa: E402

LOOPBACK = loopback_world()

if not torch.cuda.is_available():
    pytest.skip("needs 2 CUDA GPUs (or 1 with SYNCOPATE_GPU_LOOPBACK=2); this torch sees none. "
                "The CPU tests of syncopate.nn are tests/test_nn_*.py", allow_module_level=True)
if not LOOPBACK and torch.cuda.device_count() < 2:
    pytest.skip(f"needs 2 CUDA GPUs, found {torch.cuda.device_count()}; on one GPU run in "
                f"loopback: SYNCOPATE_GPU_LOOPBACK=2", allow_module_level=True)
if torch.cuda.get_device_capability(0)[0] < 9:
    pytest.skip("the fused kernels' TMA GEMM needs sm_90+", allow_module_level=True)

import block_workers as bw  # noqa: E402

pytestmark = pytest.mark.gpu
W = LOOPBACK or int(os.environ.get("SYNCOPATE_GPU_WORLD", torch.cuda.device_count()))


def _report(results):
    for line in results[0]["lines"]:  # rank 0's numbers; every rank's problems are asserted
        print(f"[block] {line}", flush=True)
    problems = [p for r in results for p in r["problems"]]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("layout", ["tp", "cp"])
def test_block_against_unsharded_memory_graph_and_training(layout):
    # graph capture needs every op on its fused path: at W = 2 the calibrated decision takes
    # the unfused path for the tp block's GEMMs on an H200 (loopback collectives cannot be
    # captured), so the tp capture runs from W = 4
    graph = W >= 4 or layout == "cp"
    _report(run_ranks(bw.block_checks, layout, graph, world_size=W, timeout=400))


def test_moe_block_inference():
    _report(run_ranks(bw.moe_checks, world_size=W, timeout=300))
