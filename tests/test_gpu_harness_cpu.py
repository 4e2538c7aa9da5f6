"""The multi-process GPU test harness, exercised on CPU with the gloo backend: results come
back per rank, a failing rank's traceback reaches the parent, and a hung rank is killed at the
timeout (so a hang on the GPU machine can never eat the lease)."""

from __future__ import annotations

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
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"ranks \[0\]"):
        run_ranks(_hang_on_rank0, world_size=2, timeout=8, pg_backend="gloo")
    assert time.monotonic() - t0 < 30
