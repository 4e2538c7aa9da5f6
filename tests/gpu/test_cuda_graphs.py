"""CUDA-graph capture and replay of the fused ops (docs/cuda-graphs.md), on >= 2 GPUs or W
virtual ranks on one GPU (SYNCOPATE_GPU_LOOPBACK=W, docs/loopback.md); skipped without a GPU.

* 1000 replays of a captured ag_gemm / gemm_rs (sm) with new inputs copied into the static
  input before each, every output checked against the reference, the device epoch checked
  after the replays, and an eager call after them (it must continue from the device epoch);
* a replay after a fault (a withheld chunk) raises CommTimeout at the next replay, as an eager
  launch does at the next call, and the poisoned graph is refused;
* the ce backend's capture is refused with a typed error and the op stays usable;
* every other op (graph_op_cases.py): gemm_ar, ag_gemm_fp8, gemm_rs_fp8, ring_attention
  (contiguous and zigzag-causal), ulysses_attention and the MoE layer (dispatch, SiLU, combine
  in one graph) -- captured after an eager warm-up, replayed with new inputs copied into the
  static inputs before each replay, every output checked against the op's unfused path run
  eagerly on the same inputs (bitwise where the op promises it); a replay of gemm_ar after a
  fault raises CommTimeout; the ops' typed refusals (MoE host reads, loopback collectives) on
  a real capture;
* world size 1 (one process, no loopback): every op's local path in one graph, the path
  chosen at the warm-up and fixed in the graph.

Replays: ``SYNCOPATE_GPU_GRAPH_REPLAYS`` (default 1000) for the GEMM ops,
``SYNCOPATE_GPU_GRAPH_REPLAYS_HEAVY`` (default 200, at most the former) for attention, MoE and
world size 1, whose references cost more per replay.
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
HEAVY = min(ITERS, int(os.environ.get("SYNCOPATE_GPU_GRAPH_REPLAYS_HEAVY", "200")))


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


@pytest.mark.skipif(not HOPPER, reason="the TMA kernels need sm_90+")
@pytest.mark.parametrize("name,iters", [("gemm_ar", ITERS), ("ag_gemm_fp8", ITERS),
                                        ("gemm_rs_fp8", ITERS), ("ring_attention", HEAVY),
                                        ("ring_attention_causal", HEAVY),
                                        ("ulysses_attention", HEAVY), ("moe_layer", HEAVY)])
def test_every_op_replays_with_changing_inputs(name, iters):
    _assert_clean(run_ranks(gw.graph_op_replays, name, iters, world_size=W, timeout=300))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_gemm_ar_replay_after_fault_raises_comm_timeout():
    t = 2.0
    _assert_clean(run_ranks(gw.graph_fault_gemm_ar, t, world_size=W, timeout=120,
                            env={"SYNCOPATE_TIMEOUT_S": str(t)}))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_ops_refuse_what_cannot_be_captured():
    _assert_clean(run_ranks(gw.graph_refusals, world_size=W, timeout=120))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_world_size_one_replays_every_op():
    """One process, one rank (no loopback: nothing to share): the ops' local paths."""
    _assert_clean(run_ranks(gw.graph_op_replays, "world_size_one", HEAVY, False, world_size=1,
                            timeout=300, loopback=0))
