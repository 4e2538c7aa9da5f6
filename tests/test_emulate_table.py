"""The table lowering (issue 10) under the emulator: every template x backend x GEMM cell of
``test_emulate_matrix`` fused with ``lowering="table"`` is emulated clean (or refused with the
same typed error), W = 4 and W = 8 too; and corrupting the chunk table the kernel reads
(``Emulation.table``, what ``syn_table`` points to) is caught -- as a race, a wrong result or a
deadlock -- while the runtime's ``chunk_table.validate`` refuses the same table before upload.

A mutation replaces ``Emulation.table`` (the words every rank's launch gets as ``syn_table``)
after construction; the fused module and the schedule the checker judges by stay right, as on
a GPU where only the uploaded table is wrong."""

from __future__ import annotations

import functools

import pytest

from syncopate import backends
from syncopate import chunk_table as ct
from syncopate.emulate import Emulation, emulate, emulate_module, fuse_module
from syncopate.errors import EmulationError, LaunchError, SyncopateError
from syncopate.kernels import kernel_fn
from syncopate_mlir.dialects.syncopate import TransferChunkOp, TransferOp, WaitOp
from syncopate_mlir.dialects.syncopate import schedule_of, state_of
from syncopate_mlir.passes.abi_info import lowering_of

from emulate_helpers import KERNELS, compile_kw, gemm_args, grid, schedule

PTR = "matmul_ptr_kernel"
MATRIX_POLICIES = ("in-order", "reverse", "behind:1", "random:1")
MUTATION_POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:1", "random:1")
CLEAN = {"all_gather", "reduce_scatter", "ring_pass", "all_reduce"}
#: (template, backend) -> what the refusal says (as in test_emulate_matrix)
REFUSED = {("all_reduce", "ce"): "ce backend",
           **{("all_to_all", b): "ends the schedule holding" for b in ("sm", "ce", "nvshmem")}}


@functools.lru_cache(maxsize=None)
def table_fused(kernel: str, template: str, backend: str, world_size: int = 2,
                mode: str | None = None, lowering: str = "table"):
    """(module after resolve-chunks, local TTIR), lowered through the chunk table; cached
    (nothing here mutates a module: mutations replace the emulation's table words)."""
    kw = {"mode": mode} if mode else {}
    sched, operand = schedule(template, world_size, **kw)
    return fuse_module(kernel_fn(kernel), schedule=sched, operand=operand, backend=backend,
                       comm_programs=2, lowering=lowering, **compile_kw(kernel))


def assert_table_form(module, backend: str) -> None:
    """``module`` is in table form: no per-chunk ``transfer``, one ``transfer_chunk`` (the
    body of the loop over the EXEC list) where comm programs exist, and no wait naming its
    chunk at compile time (the ids come from the table)."""
    assert lowering_of(module) == "table"
    ops = [o for o in module.walk()]
    assert not [o for o in ops if isinstance(o, TransferOp)]
    n_tc = len([o for o in ops if isinstance(o, TransferChunkOp)])
    assert n_tc == (0 if backend == "ce" else 1), n_tc
    waits = [o for o in ops if isinstance(o, WaitOp)]
    assert all(w.chunk is None for w in waits)


def writers(backend: str) -> int:
    return backends.get(backend).chunk_writers(2)


def _emulation(module, local, kernel=PTR, world_size=2) -> Emulation:
    return Emulation(module, local, grid=grid(kernel), args=gemm_args(world_size))


def test_table_form_differs_from_unrolled():
    """The form check is not vacuous: the same cell lowered unrolled has one ``transfer`` per
    chunk and waits naming their chunks; the table form has neither, and a table form's code
    does not grow with W (op counts at W = 2 and W = 8 equal)."""
    unrolled, _ = table_fused(PTR, "all_gather", "sm", lowering="unrolled")
    sched = schedule_of(unrolled)
    ops = list(unrolled.walk())
    assert len([o for o in ops if isinstance(o, TransferOp)]) == sched.num_chunks
    assert any(isinstance(o, WaitOp) and o.chunk is not None for o in ops)
    with pytest.raises(AssertionError):
        assert_table_form(unrolled, "sm")
    small, _ = table_fused(PTR, "all_gather", "sm")
    big, _ = table_fused(PTR, "all_gather", "sm", world_size=8)
    assert_table_form(small, "sm")
    assert_table_form(big, "sm")
    assert schedule_of(big).num_chunks == 28 * schedule_of(small).num_chunks
    # only the baked-in per-rank constants may differ, never the number of ops
    assert len(list(small.walk())) == len(list(big.walk()))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend", ["sm", "ce", "nvshmem"])
@pytest.mark.parametrize("template", ["all_gather", "reduce_scatter", "all_reduce",
                                      "all_to_all", "ring_pass"])
def test_table_matrix(template, backend, kernel):
    """Each cell of the emulator matrix in table form at W = 2: refused with the unrolled
    form's typed error, or emulated clean under several policies with transfers done; the
    table the kernel reads is the one the runtime's validate accepts."""
    if (template, backend) in REFUSED:
        sched, operand = schedule(template)
        with pytest.raises(SyncopateError, match=REFUSED[(template, backend)]):
            emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                    args=gemm_args(), backend=backend, comm_programs=2,
                    policies=MATRIX_POLICIES, launches=2, check=False, lowering="table",
                    **compile_kw(kernel))
        return
    assert template in CLEAN
    module, local = table_fused(kernel, template, backend)
    assert_table_form(module, backend)
    em = _emulation(module, local, kernel)
    ct.validate(em.table, em.schedule, backend, writers(backend),
                state_of(module).table_remaps)
    res = em.run(MATRIX_POLICIES, 2)
    assert res.ok, res.summary()
    assert set(res.stats) == set(MATRIX_POLICIES)
    assert all(not s["deadlocked"] for s in res.stats.values())
    assert all(s["transfers"] > 0 for s in res.stats.values())


@pytest.mark.parametrize("world_size", [4, 8])
@pytest.mark.parametrize("template", ["all_gather", "reduce_scatter"])
def test_table_large_world(template, world_size):
    """All-gather and reduce-scatter (split 2) at W = 4 (24 chunks) and W = 8 (112 chunks) on
    sm with the pointer GEMM: table form, clean, every chunk moved in each launch by each of
    the two comm programs (each copies its share of the chunk's tiles)."""
    module, local = table_fused(PTR, template, "sm", world_size)
    assert_table_form(module, "sm")
    sched = schedule_of(module)
    assert sched.num_chunks == world_size * (world_size - 1) * 2
    res = emulate_module(module, local, grid=grid(PTR), args=gemm_args(world_size),
                         policies=("in-order", "random:1"), launches=2)
    assert res.ok, res.summary()
    assert all(s["transfers"] == 2 * 2 * sched.num_chunks for s in res.stats.values())


def test_emulate_api_table_check_true():
    """``syncopate.emulate.emulate(..., lowering="table", check=True)`` returns a clean result
    for a W = 4 all-gather (pull: the drain's CONSUMED target is read from the table)."""
    sched, operand = schedule("all_gather", 4, mode="pull")
    res = emulate(kernel_fn(PTR), schedule=sched, operand=operand, grid=grid(PTR),
                  args=gemm_args(4), backend="sm", comm_programs=2,
                  policies=("in-order", "behind:0"), launches=2, lowering="table",
                  **compile_kw(PTR))
    assert res.ok and all(s["transfers"] > 0 for s in res.stats.values())


def test_withheld_chunk_deadlock_names_it_in_table_form():
    """A withheld chunk in table form deadlocks and the report names the chunk (the table's
    waits carry no chunk attribute; the emulator names it by its flag index)."""
    sched, operand = schedule("all_gather", mode="push")
    with pytest.raises(EmulationError) as ei:
        emulate(kernel_fn(PTR), schedule=sched, operand=operand, grid=grid(PTR),
                args=gemm_args(), backend="sm", comm_programs=2, policies=("in-order",),
                launches=1, withhold_chunks=(1,), lowering="table", **compile_kw(PTR))
    dead = ei.value.result.races_of("deadlock")
    assert dead and {r.chunk for r in dead} == {1}, ei.value.result.summary()


# ------------------------------------------------------------------------------ mutations

def layout(words) -> ct.TableLayout:
    """The layout a table's header describes."""
    return ct.TableLayout(words[ct.H_CHUNKS], words[ct.H_TENSORS], words[ct.H_WORLD])


def list_span(words, rank: int, lst: int) -> tuple[int, int]:
    """(index of the ``[start, count]`` entry, ``start``) of list ``lst`` of ``rank``."""
    e = layout(words).entry(rank, lst)
    return e, words[e]


def run_mutated(template, backend, edit, world_size=2, mode=None):
    """Emulate the cell with its table edited by ``edit(words)`` (in place; the header is
    resealed after), after checking that ``validate`` refuses the edited table and that the
    unedited run is clean.  Returns (result, schedule, original words)."""
    module, local = table_fused(PTR, template, backend, world_size, mode)
    em = _emulation(module, local, PTR, world_size)
    words = list(em.table)
    assert em.run(MUTATION_POLICIES, 2).ok
    bad = list(words)
    edit(bad)
    bad = ct.seal(bad)
    assert bad != words
    with pytest.raises(LaunchError):
        ct.validate(bad, em.schedule, backend, writers(backend))
    em.table = bad
    return em.run(MUTATION_POLICIES, 2), em.schedule, words


def test_recv_list_duplicate_skips_a_wait():
    """Rank 0's RECV list of A names its first chunk twice instead of [c0, c1]: tiles reading
    c1's rows no longer wait for it -- read-before-arrival of c1 on rank 0, wrong output on
    rank 0 only."""
    def edit(w):
        e, start = list_span(w, 0, layout(w).recv(0))
        assert w[e + 1] == 2
        w[start + 1] = w[start]
    res, sched, words = run_mutated("all_gather", "sm", edit, mode="push")
    c1 = ct.rank_list(words, 0, layout(words).recv(0))[1]
    races = res.races_of("read-before-arrival")
    assert races and {(r.chunk, r.rank) for r in races} == {(c1, 0)}, res.summary()
    assert {r.epoch for r in races} == {1, 2}
    assert res.mismatches and all("rank 0" in m for m in res.mismatches)


def test_recv_list_order_is_not_a_bug():
    """Swapping two ids within a RECV list changes nothing a tile computes (each tile scans
    the whole list): the emulation stays clean -- the table is still not the schedule's, so
    the runtime refuses it."""
    def edit(w):
        _, start = list_span(w, 0, layout(w).recv(0))
        w[start], w[start + 1] = w[start + 1], w[start]
    res, _, _ = run_mutated("all_gather", "sm", edit, mode="push")
    assert res.ok, res.summary()


@pytest.mark.parametrize("delta", [64, -64])
def test_record_rows_shifted(delta):
    """Chunk 0's record says rows one 64-row band off: the transfer moves the wrong rows and
    the tiles' interval tests guard the wrong band -- read-before-arrival of chunk 0 and
    wrong output."""
    def edit(w):
        r = layout(w).record(0)
        w[r + ct.R_LO] += delta
        w[r + ct.R_HI] += delta
    res, _, _ = run_mutated("all_gather", "sm", edit, mode="push")
    races = res.races_of("read-before-arrival")
    assert races and 0 in {r.chunk for r in races}, res.summary()
    assert res.mismatches


def test_exec_list_short_deadlocks():
    """Rank 1's EXEC list loses its last chunk: that chunk is never sent, and rank 0
    deadlocks waiting for it (the report names it)."""
    dropped = []

    def edit(w):
        e, start = list_span(w, 1, layout(w).exec)
        dropped.append(w[start + w[e + 1] - 1])
        w[e + 1] -= 1
    res, _, _ = run_mutated("all_gather", "sm", edit, mode="push")
    dead = res.races_of("deadlock")
    assert dead and all(s["deadlocked"] for s in res.stats.values()), res.summary()
    assert any(r.chunk == dropped[0] and r.rank == 0 for r in dead), res.summary()


def test_after_list_dropped_forwards_too_early():
    """A W = 4 ring pass forwards what a rank received; chunk 8's record loses its ``after``
    list, so rank 3 forwards its block before it has arrived -- read-before-arrival of chunk
    8 by rank 3's transfer."""
    module, _ = table_fused(PTR, "ring_pass", "sm", 4)
    assert schedule_of(module).chunk(8).after

    def edit(w):
        r = layout(w).record(8)
        assert w[r + ct.R_AFTER_COUNT] == 1
        w[r + ct.R_AFTER_COUNT] = 0
    res, sched, _ = run_mutated("ring_pass", "sm", edit, world_size=4)
    assert sched.chunk(8).src == 3
    races = res.races_of("read-before-arrival")
    assert races and {(r.chunk, r.rank) for r in races} == {(8, 3)}, res.summary()
    assert "comm program" in races[0].program


def test_send_list_short_deadlocks():
    """A reduce-scatter rank's SEND list loses a chunk: its tiles never count that chunk's
    PRODUCED elements and the transfer waiting for them never starts."""
    def edit(w):
        e, _ = list_span(w, 0, layout(w).send(0))
        w[e + 1] -= 1
    res, _, _ = run_mutated("reduce_scatter", "sm", edit)
    assert res.races_of("deadlock"), res.summary()


def test_send_list_duplicate_signals_early():
    """A SEND list naming a chunk twice signals its PRODUCED elements twice: the checker
    reports the early signal (and the run deadlocks on the chunk never counted)."""
    def edit(w):
        _, start = list_span(w, 0, layout(w).send(0))
        w[start + 1] = w[start]
    res, _, words = run_mutated("reduce_scatter", "sm", edit)
    first = ct.rank_list(words, 0, layout(words).send(0))[0]
    early = res.races_of("early-signal")
    assert early and first in {r.chunk for r in early}, res.summary()


def test_pushed_list_empty_ends_launch_early():
    """An all-reduce's PUSHED lists emptied: comm program 0 no longer waits for the pushed
    all-gather phase, so a launch can end before its output arrived (the table form of
    ``mutations.drop_push_waits``)."""
    def edit(w):
        lay = layout(w)
        for rank in range(w[ct.H_WORLD]):
            e, _ = list_span(w, rank, lay.pushed)
            assert w[e + 1] > 0
            w[e + 1] = 0
    res, _, _ = run_mutated("all_reduce", "sm", edit)
    assert not res.ok and res.races and res.mismatches, res.summary()


def test_reads_section_too_low_is_write_after_read():
    """A pull all-gather's reads word of rank 0 says 1 instead of 4: rank 0's drain waits for
    one peer read, so it restages A while rank 1 still reads it -- write-after-read (the
    drain's target comes from the table in table form)."""
    def edit(w):
        at = layout(w).reads
        assert w[at] == 4
        w[at] = 1
    res, _, _ = run_mutated("all_gather", "sm", edit, mode="pull")
    war = res.races_of("write-after-read")
    assert war and any("rank 0 host (staging)" in r.program for r in war), res.summary()


def test_reads_section_too_high_deadlocks():
    """A reads word one above the real count: the drain waits for a read that never comes."""
    def edit(w):
        w[layout(w).reads] += 1
    res, _, _ = run_mutated("all_gather", "sm", edit, mode="pull")
    dead = res.races_of("deadlock")
    assert dead and any("consumed" in r.detail and r.rank == 0 for r in dead), res.summary()


def test_record_of_unknown_kind_is_refused():
    """A record whose kind bits name no kind of the schedule (the ON_DST bit flipped on a
    push all-gather): the emulator stops with an EmulationError naming the chunk (the kernel
    has no branch for it and would skip the chunk: a deadlock)."""
    module, local = table_fused(PTR, "all_gather", "sm", mode="push")
    em = _emulation(module, local)
    bad = list(em.table)
    bad[layout(bad).record(0) + ct.R_FLAGS] ^= ct.FLAG_ON_DST
    em.table = ct.seal(bad)
    with pytest.raises(EmulationError, match="record of chunk 0 has a kind no chunk"):
        em.run(("in-order",), 1)
