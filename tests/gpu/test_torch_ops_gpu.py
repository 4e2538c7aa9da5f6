"""torch.ops.syncopate on GPUs: a tensor-parallel MLP compiled with fullgraph=True runs the fused
kernels (forward, and backward with one process per GPU), and the fusion pass rewrites plain
functional-collective code (one process per GPU). Skipped without CUDA; W virtual ranks on one
GPU with SYNCOPATE_GPU_LOOPBACK=W (docs/loopback.md).

Why the backward and the pass are not run in loopback: autograd runs a CUDA backward on the
engine's one worker thread per device, not on the rank's thread, so the W ranks' backward
collectives would queue behind each other on one thread (and that thread is no virtual rank:
it has no loopback group to resolve the group name against); the functional collectives the
pass rewrites need a group in torch's process-group registry, which loopback ranks do not have
(docs/torch.md, "Loopback").
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
                "The CPU tests of the torch ops are tests/test_torch_ops.py and "
                "tests/test_torch_compile.py", allow_module_level=True)
if not LOOPBACK and torch.cuda.device_count() < 2:
    pytest.skip(f"needs 2 CUDA GPUs, found {torch.cuda.device_count()}; on one GPU run the "
                f"forward test in loopback: SYNCOPATE_GPU_LOOPBACK=2", allow_module_level=True)
if torch.cuda.get_device_capability(0)[0] < 9:
    pytest.skip("the fused kernels' TMA GEMM needs sm_90+", allow_module_level=True)

import torch_workers as tw  # noqa: E402

pytestmark = pytest.mark.gpu
W = LOOPBACK or int(os.environ.get("SYNCOPATE_GPU_WORLD", torch.cuda.device_count()))
NOT_IN_LOOPBACK = pytest.mark.skipif(
    bool(LOOPBACK), reason="needs one process per GPU: autograd runs CUDA backward on one engine "
                           "thread per device (no loopback rank there), and functional "
                           "collectives need torch's process-group registry")
CASES = [(W * 256, 512, W * 384), (W * 512, 1024, W * 512)]


def _assert_clean(results):
    problems = [p for r in results for p in r]
    assert not problems, "\n".join(problems)


def test_compiled_tp_mlp_forward():
    _assert_clean(run_ranks(tw.compiled_tp_mlp, CASES, False, world_size=W, timeout=420))


@NOT_IN_LOOPBACK
def test_compiled_tp_mlp_forward_backward():
    _assert_clean(run_ranks(tw.compiled_tp_mlp, CASES, True, world_size=W, timeout=420))


@NOT_IN_LOOPBACK
def test_fusion_pass_on_plain_pytorch_tp_mlp():
    _assert_clean(run_ranks(tw.fusion_pass_tp_mlp, W * 256, 512, W * 384, world_size=W,
                            timeout=420))
