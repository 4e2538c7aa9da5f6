"""The copy-engine plan (syncopate.schedule.ce_plan) built from real schedules: which copies each
rank issues, what they wait for, what the plan refuses, the schedule key, and when the
epilogue variant's plan can wait on PRODUCED flags.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.schedule import ce_plan as planmod  # noqa: E402
from runtime_fakes import ag_schedule, rs_schedule  # noqa: E402


@pytest.mark.parametrize("split", [1, 2, 4])
def test_ce_plan_all_gather_pull(split):
    s = ag_schedule(split=split)
    for me in range(2):
        p = planmod.build_ce_plan(s, me)
        assert [st.dst for st in p.steps] == [me] * split
        assert all(st.mode == "pull" and st.src == 1 - me and not st.reduce for st in p.steps)
        assert p.consumed_adds == {1 - me: split} and p.reads_of_me == split
        # the pieces tile the peer's shard, in step order
        rows = [(st.slices[0].start, st.slices[0].stop) for st in p.steps]
        assert rows[0][0] == (1 - me) * 32 and rows[-1][1] == (2 - me) * 32
        assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))


def test_ce_plan_all_gather_push():
    p = planmod.build_ce_plan(ag_schedule(mode="push", split=2), 0)
    assert [st.src for st in p.steps] == [0, 0] and p.consumed_adds == {} and p.reads_of_me == 0
    assert not any(st.wait_kernel for st in p.steps)  # staged input, not kernel output


def test_ce_plan_reduce_scatter_waits_for_produced():
    s = rs_schedule(split=2)
    p = planmod.build_ce_plan(s, 1, produced_count={c.id: 3 for c in s.chunks})
    assert all(st.src == 1 and st.reduce for st in p.steps)
    assert all(st.wait_produced == 3 for st in p.steps)
    assert [st.src for st in p.reduce_in] == [0, 0] and p.reduce_tensors == ("C",)


def test_ce_plan_reduce_scatter_without_produced_waits_for_kernel():
    p = planmod.build_ce_plan(rs_schedule(), 0)
    assert all(st.wait_kernel and not st.wait_produced for st in p.steps)


def test_ce_plan_refuses_forwarding():
    with pytest.raises(LaunchError, match="backend='sm'"):
        for me in range(4):
            planmod.build_ce_plan(ag_schedule(W=4, order="ring"), me)


def test_ce_plan_refuses_pulling_peer_produced_data():
    s = rs_schedule(mode="pull")
    with pytest.raises(LaunchError, match="mode='push'"):
        planmod.build_ce_plan(s, 0, produced_count={c.id: 1 for c in s.chunks})


def test_ce_plan_rank_out_of_range():
    with pytest.raises(LaunchError, match="outside"):
        planmod.build_ce_plan(ag_schedule(), 2)


def test_schedule_key_is_stable_and_distinguishes():
    assert ag_schedule().content_hash() == ag_schedule().content_hash()
    assert ag_schedule(split=2).content_hash() != ag_schedule().content_hash()


def test_epilogue_plan_needs_stream_waits_on_produced_flags():
    from syncopate.runtime.launchers.ce import check_epilogue_plan
    ok = planmod.build_ce_plan(rs_schedule(split=2), 0, {i: 64 for i in range(4)})
    check_epilogue_plan(ok, True)
    with pytest.raises(LaunchError, match="cuStreamWaitValue32"):
        check_epilogue_plan(ok, False)
    late = planmod.build_ce_plan(rs_schedule(split=2), 0, {})  # no PRODUCED counts: wait for the kernel
    with pytest.raises(LaunchError, match="only after the kernel ends"):
        check_epilogue_plan(late, True)
