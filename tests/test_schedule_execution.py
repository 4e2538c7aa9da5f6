"""One definition of who runs a chunk and in which order (``syncopate.schedule.execution``),
and a check that the verifier, the compiler passes, the emulator and the runtime agree with it
for every template and backend (issue 9: "who executes a chunk" used to have two answers, so
the verifier's deadlock proof was about another program than the sm backend ran)."""

from __future__ import annotations

import pytest

from syncopate.errors import LaunchError, ScheduleError
from syncopate.runtime.plan import build_ce_plan
from syncopate.schedule import (Chunk, Placement, Region, Schedule, TensorSpec, all_gather,
                                all_reduce, all_to_all, reduce_scatter, ring_pass, verify)
from syncopate.schedule.execution import executor, program_order
from syncopate_mlir.passes import partition_sms

SHAPE = [24, 16]


def _templates(W):
    yield "all_gather pull", all_gather(SHAPE, "bf16", W, mode="pull", split=2)
    yield "all_gather push", all_gather(SHAPE, "bf16", W, mode="push", split=2)
    yield "all_gather ring", all_gather(SHAPE, "bf16", W, order="ring", split=1)
    yield "reduce_scatter", reduce_scatter(SHAPE, "bf16", W, split=2)
    yield "reduce_scatter pull", reduce_scatter(SHAPE, "bf16", W, mode="pull")
    yield "all_reduce", all_reduce(SHAPE, "bf16", W)
    yield "all_to_all", all_to_all([8 * W, 4 * W], "bf16", W, split_dim=0, concat_dim=1)
    yield "ring_pass", ring_pass(SHAPE, "bf16", W)


CASES = [(W, name, s) for W in (2, 3, 4) for name, s in _templates(W)]


@pytest.mark.parametrize("W,name,sched", CASES, ids=[f"W{w}-{n}" for w, n, _ in CASES])
def test_passes_emulator_and_runtime_agree_with_the_definition(W, name, sched):
    verify(sched)  # proves program order deadlock-free for every execution model
    for c in sched.chunks:
        sm = executor(c, "sm")
        # the comm programs (partition-sms emits, lower-sm runs; the emulator's transfers ask
        # execution.side of their own backend)
        side = partition_sms.executor(c)
        assert (c.src if side == "src" else c.dst) == sm, c.describe()
        assert executor(c, "nvshmem") == sm
        # a copy runs on the side its mode names, on every backend
        if c.reduce == "none":
            assert executor(c, "ce") == sm == (c.src if c.mode == "push" else c.dst)
    for r in range(W):
        try:
            plan = build_ce_plan(sched, r)
        except LaunchError:
            continue  # the ce backend refuses this plan (forwarding), typed and named
        assert [st.chunk for st in plan.steps] == [c.id for c in program_order(sched, "ce")[r]]


def test_sum_chunks_run_on_the_destination_on_sm_and_on_their_mode_side_on_ce():
    s = reduce_scatter(SHAPE, "bf16", 2)
    push_sums = [c for c in s.chunks if c.reduce == "sum" and c.mode == "push"]
    assert push_sums
    for c in push_sums:
        assert executor(c, "sm") == c.dst and executor(c, "ce") == c.src


def test_verifier_checks_the_sm_program_order():
    """A schedule that deadlocks only where the comm programs run ``sum`` chunks on their
    destination: rank 1 would run chunk 1 (step 0) before chunk 0 (step 1) although chunk 1
    waits for chunk 0. The model's mode-based executor saw no cycle (rank 0 pushes chunk 0)."""
    T = TensorSpec("T", (1, 4), "fp32",
                   initial=(Placement(0, Region((0, 0), (1, 4)), partial=True),
                            Placement(1, Region((0, 0), (1, 4)), partial=True)),
                   final=(Placement(1, Region((0, 0), (1, 4))),))
    U = TensorSpec("U", (1, 4), "fp32", initial=(Placement(1, Region((0, 0), (1, 4))),),
                   final=(Placement(0, Region((0, 0), (1, 4))),
                          Placement(1, Region((0, 0), (1, 4)))))
    a = Chunk(0, "T", Region((0, 0), (1, 4)), src=0, dst=1, mode="push", step=1, reduce="sum")
    b = Chunk(1, "U", Region((0, 0), (1, 4)), src=1, dst=0, mode="push", step=0, after=(0,))
    sched = Schedule(2, {"T": T, "U": U}, (a, b))
    with pytest.raises(ScheduleError, match="on the sm backend rank 1 runs chunk 1"):
        verify(sched)


def test_unknown_backend_is_a_typed_error():
    c = all_gather(SHAPE, "bf16", 2).chunks[0]
    with pytest.raises(ScheduleError, match="unknown backend 'tma'"):
        executor(c, "tma")
