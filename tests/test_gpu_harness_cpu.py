"""The multi-process GPU test harness, exercised on CPU with the gloo backend: results come
back per rank, a failing rank's traceback reaches the parent, and a hung rank is killed at the
timeout (so a hang on the GPU machine can never eat the lease).

No assertion here depends on how fast the machine is: the harness's deadline counts from the
start of the rank processes (torch's import and the process group's set-up included), so a
loaded machine may still be starting the rank that does not hang when the deadline passes.
The tests assert what must hold either way -- the hung rank is named, every rank process is
gone afterwards -- and the timeouts of the other tests only guard against a hang."""

from __future__ import annotations

import multiprocessing
import os
import sys
import time

import pytest

pytest.importorskip("torch")
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "gpu"))

from dist_harness import run_ranks  # noqa: E402


def _sum_ranks(rank, world_size, base):
    import torch
    import torch.distributed as dist
    x = torch.tensor([float(rank + base)])
    dist.all_reduce(x)
    return (rank, float(x), os.environ.get("NCCL_NVLS_ENABLE"), os.environ.get("EXTRA"))


def _fail_on_rank1(rank, world_size):
    if rank == 1:
        raise ValueError("rank one is broken")
    return rank


def _hang_on_rank0(rank, world_size):
    if rank == 0:
        time.sleep(600)
    return rank


def test_results_per_rank_and_env():
    res = run_ranks(_sum_ranks, 10, world_size=2, timeout=60, pg_backend="gloo",
                    env={"EXTRA": "x"})
    assert res == [(0, 21.0, "0", "x"), (1, 21.0, "0", "x")]


def test_child_error_reaches_parent():
    with pytest.raises(AssertionError, match="rank one is broken"):
        run_ranks(_fail_on_rank1, world_size=2, timeout=60, pg_backend="gloo")


def test_hang_is_killed_at_timeout():
    # rank 1 is named too when it was still starting up at the deadline (a loaded machine)
    with pytest.raises(TimeoutError, match=r"ranks \[0(, 1)?\] still running after 8 s \(killed\)"):
        run_ranks(_hang_on_rank0, world_size=2, timeout=8, pg_backend="gloo")
    assert multiprocessing.active_children() == []  # the hung rank was killed, not left behind


# ---------------------------------------------------------------------------- loopback mode

def _sum_ranks_loopback(rank, world_size, base):
    """The same body in loopback: collectives through syncopate.runtime.collectives."""
    import threading

    import torch

    from syncopate.runtime import collectives as dist
    x = torch.tensor([float(rank + base)])
    dist.all_reduce(x)
    return (rank, float(x), os.environ.get("EXTRA"), os.getpid(), threading.current_thread().name)


def test_loopback_mode_selection():
    from dist_harness import loopback_world
    assert loopback_world({}) == 0 and loopback_world({"SYNCOPATE_GPU_LOOPBACK": "0"}) == 0
    assert loopback_world({"SYNCOPATE_GPU_LOOPBACK": "4"}) == 4
    for bad in ("1", "two", "-2"):
        with pytest.raises(ValueError, match="number of virtual ranks"):
            loopback_world({"SYNCOPATE_GPU_LOOPBACK": bad})


def test_loopback_runs_the_ranks_as_threads_of_one_process():
    res = run_ranks(_sum_ranks_loopback, 10, world_size=2, timeout=60, pg_backend="gloo",
                    env={"EXTRA": "x"}, loopback=2)
    assert [r[:3] for r in res] == [(0, 21.0, "x"), (1, 21.0, "x")]
    assert res[0][3] == res[1][3] != os.getpid()  # one child process, not this one
    assert res[0][4] != res[1][4]


def test_loopback_child_error_and_hang():
    with pytest.raises(AssertionError, match=r"(?s)loopback.*rank one is broken"):
        run_ranks(_fail_on_rank1, world_size=2, timeout=60, pg_backend="gloo", loopback=2)
    with pytest.raises(TimeoutError, match=r"loopback ranks \[0, 1\].*killed"):
        run_ranks(_hang_on_rank0, world_size=2, timeout=8, pg_backend="gloo", loopback=2)
    assert multiprocessing.active_children() == []  # the one process of both ranks is gone
