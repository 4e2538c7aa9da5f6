"""CUDA-graph capture and replay of the fused ops (docs/cuda-graphs.md), on >= 2 GPUs or W
virtual ranks on one GPU (SYNCOPATE_GPU_LOOPBACK=W, docs/loopback.md); skipped without a GPU.

* 1000 replays of a captured ag_gemm / gemm_rs (sm) with new inputs copied into the static
  input before each, every output checked against the reference, the device epoch checked
  after the replays, and an eager call after them (it must continue from the device epoch);
* a replay after a fault (a withheld chunk) raises CommTimeout at the next replay, as an eager
  launch does at the next call, and the poisoned graph is refused;
* the ce backend's capture is refused with a typed error and the op stays usable.
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
                "The CPU side of capture is tests/runtime/test_graph_capture.py",
                allow_module_level=True)
if not LOOPBACK and torch.cuda.device_count() < 2:
    pytest.skip(f"needs 2 CUDA GPUs, found {torch.cuda.device_count()}; on one GPU run the same "
                f"tests in loopback: SYNCOPATE_GPU_LOOPBACK=2 (docs/loopback.md)",
                allow_module_level=True)

import graph_workers as gw  # noqa: E402

pytestmark = pytest.mark.gpu
W = LOOPBACK or int(os.environ.get("SYNCOPATE_GPU_WORLD", torch.cuda.device_count()))
HOPPER = torch.cuda.get_device_capability(0)[0] >= 9
ITERS = int(os.environ.get("SYNCOPATE_GPU_GRAPH_REPLAYS", "1000"))


def _assert_clean(results):
    problems = [p for r in results for p in r]
    assert not problems, "\n".join(problems)


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
@pytest.mark.parametrize("op,shape", [("ag_gemm", (192, 320, 256)), ("gemm_rs", (256, 320, 192))])
def test_graph_replays_with_changing_inputs(op, shape):
    _assert_clean(run_ranks(gw.graph_replays, op, ITERS, shape, world_size=W, timeout=240))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_graph_replay_after_fault_raises_comm_timeout():
    t = 2.0
    _assert_clean(run_ranks(gw.graph_fault_withheld_chunk, t, world_size=W, timeout=120,
                            env={"SYNCOPATE_TIMEOUT_S": str(t)}))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_graph_capture_of_ce_is_refused():
    _assert_clean(run_ranks(gw.graph_refuses_ce, world_size=W, timeout=120))
