"""The copy-engine backend's host preparation on the fake communicator: region copy geometry
(rows x contiguous bytes), prepared pull and reduce-scatter steps that really copy between
the fake ranks' buffers, and the peers table's epilogue slot rows.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.errors import CompileError  # noqa: E402
from syncopate.runtime.operands import tensor_spec  # noqa: E402
from syncopate.schedule import ce_plan as planmod  # noqa: E402
from syncopate.runtime.fused import FusedKernel  # noqa: E402
from runtime_fakes import fake_comm, ptr_kernel, ag_schedule, rs_schedule  # noqa: E402
from syncopate.runtime.launchers.ce import _rows_cols, index_runs, reduce_into  # noqa: E402


def test_rows_cols_contiguous_and_column_block():
    m = torch.empty(8, 16, dtype=torch.bfloat16)
    n = torch.empty(8, 16, dtype=torch.bfloat16)
    assert _rows_cols(m[2:4], n[4:6]) == (1, 2 * 16 * 2, 2 * 16 * 2, 2 * 16 * 2)
    assert _rows_cols(m[:, 4:8], n[:, 0:4]) == (8, 8, 32, 32)
    assert _rows_cols(m[:, 4:8], n[:, 0:5]) is None
    t = torch.empty(2, 8, 16)
    assert _rows_cols(t[:, :, 0:4], torch.empty(2, 8, 4)) is None  # two strided levels


def _ce_config(c, sched, fk, produced):
    from syncopate.runtime import fused as fmod
    a = abi.FusedABI("ce", 2, sched.num_chunks, 0, "none", operands=list(fk.operands))
    cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32))
    cfg.ce_plan = planmod.build_ce_plan(sched, c.rank,
                                        {i: 1 for i in range(a.num_chunks)} if produced else {})
    for tname in cfg.ce_plan.reduce_tensors:
        spec = tensor_spec(sched, tname)
        cfg.slots[tname] = c.empty((2,) + tuple(spec.shape), torch.float32)
    return cfg


def test_ce_prepared_pull_copies_the_peer_rows():
    c = fake_comm(rank=0)
    sched = ag_schedule(shape=(8, 4), split=2, mode="pull")
    fk = FusedKernel(ptr_kernel(), sched, operand="a_ptr", backend="ce", comm=c)
    cfg = _ce_config(c, sched, fk, produced=False)
    A = c.empty((8, 4), torch.float32)
    peer = c.allocation(A).handle.bufs[1].view(torch.float32).view(8, 4)
    peer.copy_(torch.arange(32, dtype=torch.float32).view(8, 4))
    prep = fk.launcher.prepare(cfg, {"a_ptr": A})
    assert fk.launcher.prepare(cfg, {"a_ptr": A}) is prep  # once per buffer set
    other = c.empty((4,), torch.float32)  # a new buffer cannot alias a registered one
    assert fk.launcher.prepare(cfg, {"a_ptr": A}) is prep
    c.release(other)  # a released address may come back for another buffer: prepare anew
    assert fk.launcher.prepare(cfg, {"a_ptr": A}) is not prep
    prep = fk.launcher.prepare(cfg, {"a_ptr": A})
    assert [st.src for st, _, _, _ in prep.steps] == [1, 1] and prep.reductions == []
    for st, copy, flag_view, flag_addr in prep.steps:
        assert flag_view.dtype == torch.uint32 and flag_view.numel() == cfg.abi.layout.words
        # CHUNK[c] on the destination, as the address the flag write takes
        assert flag_addr == flag_view.data_ptr() + 4 * cfg.abi.layout.chunk(st.chunk)
        copy(None)
    assert torch.equal(A[4:], peer[4:]) and torch.all(A[:4] == 0)


def test_ce_prepared_reduce_scatter_pushes_into_the_owner_slot_and_sums():
    c = fake_comm(rank=0)
    sched = rs_schedule(shape=(8, 4), split=1, mode="push")
    fk = FusedKernel(ptr_kernel(), sched, operand="c_ptr", backend="ce", comm=c)
    cfg = _ce_config(c, sched, fk, produced=True)
    C = c.empty((8, 4), torch.float32)
    C.copy_(torch.arange(32, dtype=torch.float32).view(8, 4))
    prep = fk.launcher.prepare(cfg, {"c_ptr": C})
    (st, copy, _, _), = prep.steps
    assert (st.src, st.dst) == (0, 1)
    copy(None)
    peer_slots = c.allocation(cfg.slots["C"]).handle.bufs[1].view(torch.float32).view(2, 8, 4)
    assert torch.equal(peer_slots[0][4:], C[4:])  # rank 1's slot for source 0 holds our rows
    (own, parts), = prep.reductions
    assert own.data_ptr() == C.data_ptr() and len(parts) == 1
    parts[0].fill_(1.0)  # what rank 1 pushed into our slot[1]
    reduce_into(own, parts)  # what CELauncher.launch does with each reduction after the kernel
    assert torch.equal(C[:4], torch.arange(16, dtype=torch.float32).view(4, 4) + 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("n_parts", [1, 2, 3, 7])
def test_reduce_into_gives_the_bits_of_the_fp32_sum_rounded_once(dtype, n_parts):
    """The fewer-kernel reduction equals, bit for bit, the fp32 accumulation it replaced
    (``acc = own.float(); acc += part.float() ...; own.copy_(acc)``), on values spanning many
    exponents (where a half-precision chain of adds would round differently)."""
    g = torch.Generator().manual_seed(n_parts)

    def rnd():
        return (torch.randn(64, 48, generator=g) *
                torch.exp2(torch.randint(-12, 12, (64, 48), generator=g).float())).to(dtype)
    own, parts = rnd(), [rnd() for _ in range(n_parts)]
    acc = own.float()
    for part in parts:
        acc += part.float()
    want = acc.to(dtype)
    reduce_into(own, parts)
    assert torch.equal(own.view(torch.uint8), want.view(torch.uint8))


def test_peers_table_appends_the_epilogue_slot_rows():
    """reduce='epilogue': syn_peers gets one row per slotted tensor after the operands, holding
    every rank's slot base (the kernel reads its own)."""
    c = fake_comm(rank=1)
    sched = rs_schedule(shape=(8, 4), split=1, mode="push")
    fk = FusedKernel(ptr_kernel(), sched, operand="c_ptr", backend="ce", comm=c)
    cfg = _ce_config(c, sched, fk, produced=True)
    cfg.abi.epilogue_slots = ["C"]
    cfg.flag_addrs = c.peer_ptrs(cfg.flags)
    C = c.empty((8, 4), torch.float32)
    table = fk._peers_table(cfg, {"c_ptr": C})
    assert table.shape == (3, 2)
    assert table[2].tolist() == c.peer_ptrs(cfg.slots["C"])
    assert table[1].tolist() == c.peer_ptrs(C)
    cfg.abi.epilogue_slots = ["D"]
    cfg.peers_tables.clear()
    with pytest.raises(CompileError, match="slots of 'D'"):
        fk._peers_table(cfg, {"c_ptr": C})


def test_index_runs_groups_consecutive_flags_for_one_wait_launch():
    """The chunk flags a rank awaits before its reduce-scatter sum, as runs: one wait kernel
    (``count`` programs) per run instead of one launch per chunk."""
    assert index_runs([5, 3, 4, 9]) == [(3, 3), (9, 1)]
    assert index_runs(iter([0, 1, 2, 3])) == [(0, 4)]
    assert index_runs([7, 7, 2]) == [(2, 1), (7, 1)]
    assert index_runs([]) == []
    for W in (2, 4):  # a reduce-scatter plan's awaited chunks, every rank: every flag once
        sched = rs_schedule(W=W, split=2)
        for me in range(W):
            p = planmod.build_ce_plan(sched, me)
            want = sorted(st.chunk for st in p.reduce_in)
            got = [s + k for s, n in index_runs(st.chunk for st in p.reduce_in) for k in range(n)]
            assert got == want and len(want) == (W - 1) * 2
            # the split's chunks from one source are consecutive: one launch per source
            assert len(index_runs(st.chunk for st in p.reduce_in)) == W - 1


def test_ce_events_go_by_handle_and_fall_back_to_torch(monkeypatch):
    """The side-stream handshake's events: a driver event recorded and waited on by handle
    (``cuEventRecord`` on the recording stream, ``cuStreamWaitEvent`` on the waiting one) and
    destroyed with its owner; a ``torch.cuda.Event`` where the driver gives none."""
    import types

    from syncopate.runtime.launchers import ce
    from syncopate.runtime import _cuda
    log = []
    monkeypatch.setattr(_cuda, "event_create", lambda: 0xE0)
    monkeypatch.setattr(_cuda, "event_record", lambda ev, s: log.append(("record", ev, s)))
    monkeypatch.setattr(_cuda, "stream_wait_event", lambda s, ev: log.append(("wait", s, ev)))
    monkeypatch.setattr(_cuda, "event_destroy", lambda ev: log.append(("destroy", ev)))
    ev = ce._Event()
    ev.record(None, 11)
    ev.wait(None, 22)
    del ev
    assert log == [("record", 0xE0, 11), ("wait", 22, 0xE0), ("destroy", 0xE0)]

    class _TorchEvent:
        def record(self, stream):
            log.append(("torch record", stream))
    monkeypatch.setattr(_cuda, "event_create", lambda: None)
    monkeypatch.setattr(torch.cuda, "Event", _TorchEvent)
    ev = ce._Event()
    stream = types.SimpleNamespace(wait_event=lambda e: log.append(("torch wait", e)))
    ev.record("S", 11)
    ev.wait(stream, 22)
    assert log[-2:] == [("torch record", "S"), ("torch wait", ev.event)]


@pytest.mark.parametrize("driver_ok", [True, False])
def test_region_copier_takes_the_copy_engine_or_falls_back_to_torch(monkeypatch, driver_ok):
    """A chunk's region copy by its geometry: a contiguous block is one ``cuMemcpyAsync``, a
    column block one ``cuMemcpy2DAsync``, anything
    else ``Tensor.copy_``; a driver call that is unavailable falls back to ``Tensor.copy_`` on
    the same stream, and then the data lands."""
    pytest.importorskip("triton")  # region_geometry asks runtime.launch_plan for the byte count
    import types

    from syncopate.runtime import _cuda
    from syncopate.runtime.launchers import ce
    log = []
    monkeypatch.setattr(_cuda, "memcpy_async",
                        lambda d, s, n, h: log.append(("1d", n, h)) or driver_ok)
    monkeypatch.setattr(_cuda, "memcpy2d_async",
                        lambda d, dp, s, sp, w, r, h: log.append(("2d", w, r, h)) or driver_ok)
    real = ce._copy_on
    monkeypatch.setattr(ce, "_copy_on", lambda stream, dst, src: (log.append(("torch", stream)),
                                                                  real(None, dst, src)))
    monkeypatch.setattr(ce, "_COPY_WARNED", True)
    S = types.SimpleNamespace(cuda_stream=7)
    m, n = torch.randn(8, 16), torch.randn(8, 16)
    fail = [] if driver_ok else [("torch", S)]
    for dst, src, want in ((m[2:4], n[4:6], [("1d", 128, 7)] + fail),
                           (m[:, 4:8], n[:, 0:4], [("2d", 16, 8, 7)] + fail),
                           (m[:, ::2], n[:, 8:16], [("torch", S)])):
        log.clear()
        ce.region_copier(dst, src)(S)
        assert log == want
        if log[-1][0] == "torch":
            assert torch.equal(dst, src)
