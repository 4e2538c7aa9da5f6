"""Mutation tests: a correct fused module emulates clean under every policy, and each single
bug planted in it (or in the protocol the emulator plays) is reported -- so these tests fail
the day the race checker stops catching one of them."""

from __future__ import annotations

import pytest

from syncopate.emulate import Faults, emulate_module
from syncopate.emulate import mutations as mu
from syncopate.errors import EmulationError

from emulate_helpers import fused, gemm_args, grid

PTR = "matmul_ptr_kernel"
TMA = "matmul_tma_persistent_kernel"
POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:1", "random:1", "random:2")


def run(module, local, kernel=PTR, **kw):
    return emulate_module(module, local, grid=grid(kernel), args=gemm_args(),
                          policies=POLICIES, launches=2, **kw)


@pytest.mark.parametrize("kernel", [PTR, TMA])
@pytest.mark.parametrize("template,backend,mode", [
    ("all_gather", "sm", "push"), ("all_gather", "sm", "pull"), ("all_gather", "ce", "pull"),
    ("reduce_scatter", "sm", None), ("reduce_scatter", "ce", None)])
def test_unmutated_is_clean_under_every_policy(kernel, template, backend, mode):
    mod, local = fused(kernel, template, backend, mode)
    res = run(mod, local, kernel)
    assert res.ok, res.summary()
    assert all(s["steps"] > 0 for s in res.stats.values())


@pytest.mark.parametrize("kernel", [PTR, TMA])
def test_dropped_wait_reads_before_arrival(kernel):
    mod, local = fused(kernel, "all_gather", "sm", "push")
    res = run(mu.drop_wait(mod, chunk=0), local, kernel)
    races = res.races_of("read-before-arrival")
    assert races and {r.chunk for r in races} == {0}, res.summary()
    r = races[0]
    assert r.rank == 0 and "compute program" in r.program and "gemm.py" in r.loc
    assert {r.epoch for r in races} == {1, 2}


def test_early_signal_is_reported():
    mod, local = fused(PTR, "reduce_scatter", "sm")
    res = run(mu.early_signal(mod), local)
    races = res.races_of("early-signal")
    assert races, res.summary()
    assert any("stored only 0" in r.detail for r in races)


def test_wrong_remap_table_gives_wrong_output():
    mod, local = fused(PTR, "all_gather", "sm", "push")
    res = run(mu.remap_table(mod, rank=0, duplicate=True), local)
    assert res.mismatches and all("rank 0" in m for m in res.mismatches), res.summary()
    # a different but bijective order is only a performance change: still clean
    assert run(mu.remap_table(mod, rank=0, duplicate=False), local).ok


def test_wait_interval_off_by_one_tile():
    mod, local = fused(PTR, "all_gather", "sm", "push")
    res = run(mu.shift_wait_region(mod, chunk=0, delta=64), local)
    assert {r.chunk for r in res.races_of("read-before-arrival")} == {0}, res.summary()


@pytest.mark.parametrize("backend,mode", [("sm", "push"), ("ce", "pull")])
def test_transfer_region_off_by_one_tile(backend, mode):
    mod, local = fused(PTR, "all_gather", backend, mode)
    res = run(mod, local, faults=Faults(shift_chunk={0: (0, 64)}))
    assert res.races_of("read-before-arrival") and res.mismatches, res.summary()


@pytest.mark.parametrize("backend", ["sm", "nvshmem"])
def test_missing_wait_for_pushed_chunks_on_all_reduce(backend):
    """The all-reduce's all-gather phase is pushed and no tile reads it: without the comm
    programs' wait for pushed chunks (the bug the emulator found) a launch ends before its
    output has arrived."""
    mod, local = fused(PTR, "all_reduce", backend)
    assert run(mod, local).ok
    res = run(mu.drop_push_waits(mod), local)
    assert not res.ok and (res.races or res.mismatches), res.summary()


def test_missing_drain_is_write_after_read():
    mod, local = fused(PTR, "all_gather", "sm", "pull")
    res = run(mu.drop_drain(mod), local)
    war = res.races_of("write-after-read")
    assert war and any("host (staging)" in r.program for r in war), res.summary()
    assert all(r.epoch == 2 for r in war if "staging" in r.program)


def test_missing_drain_on_reduce_scatter():
    mod, local = fused(PTR, "reduce_scatter", "sm")
    assert run(mu.drop_drain(mod), local).races_of("write-after-read")


@pytest.mark.parametrize("backend,mode,kind", [("sm", "push", "write-after-read"),
                                               ("sm", "pull", "read-before-arrival"),
                                               ("ce", "pull", "read-before-arrival")])
def test_missing_entry_wait(backend, mode, kind):
    mod, local = fused(PTR, "all_gather", backend, mode)
    res = run(mod, local, faults=Faults(skip_entry_wait=True))
    assert res.races_of(kind), res.summary()


def test_ce_missing_consumed_wait():
    mod, local = fused(PTR, "all_gather", "ce", "pull")
    res = run(mod, local, faults=Faults(skip_consumed_wait=True))
    assert res.races_of("write-after-read"), res.summary()


def test_withheld_chunk_deadlocks_and_names_it():
    from syncopate.emulate import emulate
    from syncopate.kernels import kernel_fn

    from emulate_helpers import compile_kw, schedule
    sched, operand = schedule("all_gather", mode="push")
    with pytest.raises(EmulationError) as ei:
        emulate(kernel_fn(PTR), schedule=sched, operand=operand, grid=grid(PTR),
                args=gemm_args(), backend="sm", comm_programs=2, policies=("in-order",),
                launches=1, withhold_chunks=(1,), **compile_kw(PTR))
    res = ei.value.result
    dead = res.races_of("deadlock")
    assert dead and {r.chunk for r in dead} == {1}
    assert "chunk flag" in dead[0].detail and res.stats["in-order"]["deadlocked"]


@pytest.mark.parametrize("template,mode", [("all_gather", "push"), ("all_gather", "pull"),
                                           ("reduce_scatter", None)])
def test_stale_epoch_is_the_graph_replay_hazard_and_the_device_word_removes_it(template, mode):
    """ABI 3 (docs/cuda-graphs.md): the kernel loads its epoch from the device epoch word,
    which is advanced before each launch. Leaving the advance out after launch 1 is what a
    CUDA-graph replay of a kernel taking the epoch as a baked scalar would do: launch 2's
    waits are satisfied by launch 1's flags, which the checker reports; with the advance the
    same module is clean."""
    mod, local = fused(PTR, template, "sm", mode)
    assert run(mod, local).ok
    res = run(mod, local, faults=Faults(stale_epoch=True))
    assert not res.ok, res.summary()
    kinds = {r.kind for r in res.races}
    assert kinds & {"read-before-arrival", "write-after-read"} or res.mismatches, res.summary()
