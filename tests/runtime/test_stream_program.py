"""Stream programs (``syncopate.runtime.stream_program``, ``Program`` in ``_fastlaunch.c``): the
operations a program enqueues, with the epoch filled in, through a faked driver; and the ce
launcher's programs against its Python path, operation for operation, on the fake
communicator.

CPU only: every driver entry point is a recording C-callable fake.
"""

from __future__ import annotations

import contextlib
import ctypes
import types

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from runtime_fakes import (ag_schedule, fake_ck, fake_comm, install_driver, ptr_kernel,  # noqa: E402
                           require_fastlaunch, signature)
from syncopate import abi  # noqa: E402
from syncopate.runtime import _cuda, fastlaunch, stream_program as sp  # noqa: E402
from syncopate.runtime import plan as planmod  # noqa: E402
from syncopate.runtime import sync_kernels as sk  # noqa: E402

_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p)
_MEMCPY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                           ctypes.c_void_p)
_MEMCPY2D = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_RECORD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
_WAIT_EVENT = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)
_MEMOP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32,
                          ctypes.c_uint)

I32, I64 = ctypes.c_int32, ctypes.c_int64
#: the sync kernels' parameters (sync_kernels.py), for reading what a launch passed
_SIGS = {name: signature(getattr(sk, f"_{name}_kernel"))
         for name in ("wait", "signal_all", "add", "enter", "sum")}
_SUM_FN = 0xA4
_CT = {"i32": I32, "i64": I64}


class Driver:
    """Every entry point a stream program takes, recording ``log`` in enqueue order; a
    kernel's parameters are read at the call by the function's types (``types``)."""

    def __init__(self):
        self.log, self.rc, self.fail_at = [], 0, None
        self.types: dict[int, list] = {}
        self.fns = {
            "cuLaunchKernel": _LAUNCH(self._launch), "cuMemcpyDtoDAsync": _MEMCPY(self._memcpy),
            "cuMemcpy2DAsync": _MEMCPY2D(self._memcpy2d), "cuEventRecord": _RECORD(self._record),
            "cuStreamWaitEvent": _WAIT_EVENT(self._wait_event),
            "cuStreamWaitValue32": _MEMOP(lambda s, a, v, f: self._add("wait32", s, a, v, f)),
            "cuStreamWriteValue32": _MEMOP(lambda s, a, v, f: self._add("write32", s, a, v, f)),
        }

    def _add(self, *op):
        self.log.append(tuple(x or 0 if x is None else x for x in op))
        if self.fail_at is not None and len(self.log) == self.fail_at:
            return self.rc
        return 0

    def _launch(self, fn, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        cts = self.types.get(fn or 0, [])
        p = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        vals = tuple(ctypes.cast(p[k], ctypes.POINTER(ct)).contents.value
                     for k, ct in enumerate(cts))
        return self._add("kernel", fn or 0, (gx, gy, gz), bx, smem, stream or 0, vals)

    def _memcpy(self, dst, src, n, stream):
        return self._add("memcpy", dst, src, n, stream or 0)

    def _memcpy2d(self, p, stream):
        m = ctypes.cast(p, ctypes.POINTER(_cuda.CUDA_MEMCPY2D)).contents
        assert m.srcMemoryType == m.dstMemoryType == _cuda.CU_MEMORYTYPE_DEVICE
        return self._add("memcpy2d", m.dstDevice, m.dstPitch, m.srcDevice, m.srcPitch,
                         m.WidthInBytes, m.Height, stream or 0)

    def _record(self, ev, stream):
        return self._add("record", ev or 0, stream or 0)

    def _wait_event(self, stream, ev, flags):
        return self._add("wait_event", stream or 0, ev or 0)

    def symbol(self, *names):
        for n in names:
            if n in self.fns:
                return self.fns[n]
        return None


@pytest.fixture
def driver(monkeypatch):
    require_fastlaunch()
    d = Driver()
    install_driver(monkeypatch, d.symbol)
    return d


def _dl(driver, sig, function):
    """A DirectLaunch of a fake compiled kernel with ``sig`` whose launches ``driver`` reads."""
    from syncopate.runtime import direct_launch
    ck = fake_ck(sig, num_warps=1, shared=0)
    ck.function = function
    values = [0] * len(sig)
    dl = direct_launch.build(ck, values, fixed_scalars=False)
    driver.types[function] = [_CT[t] for t in sig.values() if t != "constexpr"] + [I64, I64]
    return dl


def test_a_program_enqueues_its_operations_in_order_with_the_epoch_filled_in(driver):
    E = sp.Epoch
    b = sp.Builder()
    b.call_copy(sp.MAIN)
    b.record(sp.MAIN, 0xE1)
    b.wait_event(sp.SIDE, 0xE1)
    b.kernel(sp.SIDE, _dl(driver, _SIGS["wait"], 0xA1), 2,
             (0x1000, 3, E(2, wrap32=True), 0x2000, 1, 4, E(), 77))
    b.wait_value(sp.SIDE, 0x3000, E(3))
    b.memcpy(sp.SIDE, 0x10, 0x20, 256)
    b.memcpy2d(sp.SIDE, 0x100, 64, 0x200, 128, 32, 8)
    b.write_value(sp.SIDE, 0x3004, E())
    b.kernel(sp.MAIN, _dl(driver, _SIGS["add"], 0xA2), 1, (0x4000, -1))
    prog = sp.build(b, side_stream=0x5D)
    assert prog is not None and prog.size == 9
    e = 2**31 - 1  # a target past 2^31 wraps as a 32-bit flag does (the kernel compares cyclically)
    prog.run(0x5A, e, (0x30, 0x40, 512))
    assert driver.log == [
        ("memcpy", 0x30, 0x40, 512, 0x5A),
        ("record", 0xE1, 0x5A),
        ("wait_event", 0x5D, 0xE1),
        ("kernel", 0xA1, (2, 1, 1), 32, 0, 0x5D,
         (0x1000, 3, ctypes.c_int32(2 * e).value, 0x2000, 1, 4, e, 77, 0, 0)),
        ("wait32", 0x5D, 0x3000, (3 * e) & 0xFFFFFFFF, 0),
        ("memcpy", 0x10, 0x20, 256, 0x5D),
        ("memcpy2d", 0x100, 64, 0x200, 128, 32, 8, 0x5D),
        ("write32", 0x5D, 0x3004, e, 0),
        ("kernel", 0xA2, (1, 1, 1), 32, 0, 0x5A, (0x4000, -1, 0, 0)),
    ]
    driver.log.clear()
    prog.run(0x5B, 5)  # another call: another epoch and launch stream, no copy
    assert [op[0] for op in driver.log] == ["record", "wait_event", "kernel", "wait32",
                                            "memcpy", "memcpy2d", "write32", "kernel"]
    assert driver.log[0] == ("record", 0xE1, 0x5B) and driver.log[3][3] == 15
    assert driver.log[2][-1][2] == 10 and driver.log[2][-1][6] == 5


def test_a_driver_error_names_the_operation_and_stops_the_program(driver):
    b = sp.Builder()
    for k in range(4):
        b.write_value(sp.SIDE, 0x100 + 4 * k, sp.Epoch())
    b.call_copy(sp.SIDE)
    prog = sp.build(b, side_stream=1)
    driver.rc, driver.fail_at = 700, 3
    with pytest.raises(sp.ProgramError, match="operation 2 of 5 failed with CUDA driver error 700"
                       ) as err:
        prog.run(2, 1)
    assert (err.value.index, err.value.code) == (2, 700)
    assert isinstance(err.value, _cuda.DriverError)
    assert len(driver.log) == 3  # nothing after the failing one
    driver.log.clear()
    driver.fail_at = 5
    with pytest.raises(sp.ProgramError, match="operation 4 of 5"):
        prog.run(2, 1, (8, 16, 32))
    assert driver.log[-1] == ("memcpy", 8, 16, 32, 1)
    b = sp.Builder()
    b.write_value(sp.SIDE, 0x100, sp.Epoch())
    with pytest.raises(ValueError, match="no place for a copy"):
        sp.build(b, side_stream=1).run(2, 1, (8, 16, 32))
    b.call_copy(sp.MAIN)
    b.call_copy(sp.MAIN)
    with pytest.raises(ValueError, match="a second place"):
        sp.build(b, side_stream=1)


def test_a_kernel_parameter_may_take_the_call_copys_displacement(driver):
    """``CopyShift``: a kernel that writes the call's copy itself gets ``dst - src`` (mod 2^64,
    plus its constant) and the program enqueues no copy; such a program needs the copy given,
    may not also have a copy place, and only kernels take a shift."""
    b = sp.Builder()
    b.kernel(sp.MAIN, _dl(driver, _SIGS["add"], 0xA2), 1, (sp.CopyShift(8), sp.Epoch(2)))
    prog = sp.build(b, side_stream=0x5D)
    prog.run(0x5A, 3, (0x1000, 0x3000, 64))
    assert driver.log == [("kernel", 0xA2, (1, 1, 1), 32, 0, 0x5A, (-0x2000 + 8, 6, 0, 0))]
    driver.log.clear()
    prog.run(0x5A, 4, (0x9000, 0x1000, 64))
    assert driver.log[0][-1][:2] == (0x8008, 8)
    with pytest.raises(ValueError, match="needs it"):
        prog.run(0x5A, 4)
    b.call_copy(sp.MAIN)
    with pytest.raises(ValueError, match="not both"):
        sp.build(b, side_stream=0x5D)
    b = sp.Builder()
    b.ops.append((sp.WRITE32, sp.SIDE, 0x100, sp.CopyShift().spec()))
    with pytest.raises(ValueError, match="only a kernel parameter"):
        sp.build(b, side_stream=0x5D)


def test_a_program_needs_every_entry_point_and_well_formed_operations(driver, monkeypatch):
    mod = fastlaunch.module()
    entries = sp.entry_points()
    with pytest.raises(ValueError, match="entry point is missing"):
        mod.Program(entries[:5] + (0,) + entries[6:], 1, [(sp.WAIT32, 0, 8, (1, 1, False, False))])
    with pytest.raises(ValueError, match="kind 9"):
        mod.Program(entries, 1, [(9, 0, 8)])
    with pytest.raises(ValueError, match="stream 2"):
        mod.Program(entries, 1, [(sp.RECORD, 2, 8)])
    with pytest.raises(ValueError, match="needs 7 entry points"):
        mod.Program(entries[:3], 1, [])
    with pytest.raises(TypeError, match="an int, an Epoch or a CopyShift"):
        sp.Builder().write_value(sp.MAIN, 8, 1.5)
    with pytest.raises(ValueError, match="global scratch"):
        sp.Builder().kernel(sp.MAIN, types.SimpleNamespace(scratch_size=64), 1, ())
    # a driver without one entry point: no program, the caller keeps its Python path
    fns = dict(driver.fns)
    del fns["cuStreamWaitValue32"]
    monkeypatch.setattr(_cuda, "_symbol", lambda *names: next(
        (fns[n] for n in names if n in fns), None))
    assert sp.entry_points() is None and sp.build(sp.Builder(), 1) is None
    monkeypatch.setenv("SYNCOPATE_FAST_LAUNCH", "0")
    assert sp.build(sp.Builder(), 1) is None


# -- the ce launcher: its programs enqueue what its Python path enqueues ----------------------

def _ce_launcher(driver, monkeypatch, sched, operand, produced, defer=False):
    """A ce FusedKernel on the fake communicator, set up so that its launcher's ``launch`` runs
    against ``driver``: fake compiled sync kernels, events and streams by handle, the fused
    kernel's own launch recorded as ``("fused", epoch)``."""
    from syncopate.runtime import fused as fmod
    from syncopate.runtime.fused import FusedKernel

    c = fake_comm(rank=0)
    fk = FusedKernel(ptr_kernel(), sched, operand=operand, backend="ce", comm=c,
                     defer_consumed_wait=defer)
    a = abi.FusedABI("ce", 2, planmod.num_chunks(sched), 0, "none", operands=list(fk.operands))
    cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32))
    cfg.ce_plan = planmod.build_ce_plan(
        sched, c.rank, {i: 2 for i in range(a.num_chunks)} if produced else {})
    for tname in cfg.ce_plan.reduce_tensors:
        cfg.slots[tname] = c.empty((2,) + tuple(planmod.tensor_spec(sched, tname).shape),
                                   torch.bfloat16)
    cfg.flag_addrs = [cfg.flags.data_ptr(), 0x7700000]
    handles = iter(range(0xE0, 0x100))
    monkeypatch.setattr(_cuda, "event_create", lambda: next(handles))
    monkeypatch.setattr(_cuda, "event_destroy", lambda ev: None)
    monkeypatch.setattr(fastlaunch, "current_device", lambda: 0)
    monkeypatch.setattr(c, "stream", lambda name="comm": types.SimpleNamespace(cuda_stream=0x5D))
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(sk, "_COMPILED", {})
    monkeypatch.setattr(sk, "_DIRECT", {})
    for fn, name, fid, cxs in ((sk._wait_kernel, "wait", 0xA1, ({"FLAG64": False, "TRAP": False},
                                                                 {"FLAG64": False, "TRAP": True})),
                               (sk._signal_all_kernel, "signal_all", 0xA2, ({"FLAG64": False},)),
                               (sk._add_kernel, "add", 0xA3, ({"FLAG64": False},)),
                               (sk._enter_kernel, "enter", 0xA5,
                                ({"FLAG64": False, "TRAP": False},
                                 {"FLAG64": False, "TRAP": True})),
                               (sk._sum_kernel, "sum", _SUM_FN,
                                ({"DT": triton.language.bfloat16, "BLOCK": sk.SUM_BLOCK},))):
        for k, cx in enumerate(cxs):
            ck = fake_ck(_SIGS[name], num_warps=1, shared=0)
            ck.function = fid + 0x10 * k
            driver.types[ck.function] = ([_CT[t] for t in _SIGS[name].values()
                                          if t != "constexpr"] + [I64, I64])
            sk._COMPILED[(id(fn), 0, tuple(cx.items()))] = ck
    L = fk.launcher
    monkeypatch.setattr(L, "run_kernel", lambda cfg, grid, args, S, direct: driver._add(
        "fused", S.cuda_stream))
    return fk, L, cfg


_PEERS = torch.empty(4, dtype=torch.int64)


def _launches(driver, L, cfg, tensors, programs: bool, monkeypatch, epochs=(1, 2, 3)):
    """What ``L.launch`` enqueued for ``epochs`` (with its programs, or forced onto its Python
    path), and whether the programs were used."""
    from syncopate.runtime.launchers.ce import CELauncher
    real = CELauncher.programs
    used = []

    def programs_or_none(self, *a):
        p = real(self, *a) if programs else None
        used.append(p is not None)
        return p
    monkeypatch.setattr(CELauncher, "programs", programs_or_none)
    driver.log.clear()
    for e in epochs:
        L.launch(cfg, (1, 1, 1), [], types.SimpleNamespace(cuda_stream=0x5A), e, _PEERS,
                 tensors)
    monkeypatch.setattr(CELauncher, "programs", real)
    return list(driver.log), all(used)


@pytest.mark.parametrize("case", ["ag_pull", "ag_pull_split", "rs_push_produced",
                                  "rs_push_kernel_wait", "rs_deferred", "trap_skip"])
def test_ce_programs_enqueue_what_the_python_path_enqueues(driver, monkeypatch, case):
    from syncopate.schedule.templates import reduce_scatter
    if case.startswith("ag"):
        sched = ag_schedule(shape=(8, 4), split=2 if case == "ag_pull_split" else 1, mode="pull")
        operand, name = "a_ptr", "A"
    else:
        sched = reduce_scatter((8, 4), "bf16", 2, dim=0, mode="push", split=1)
        operand, name = "c_ptr", "C"
    if case == "trap_skip":
        sched = ag_schedule(shape=(8, 16), split=2, mode="pull")
        monkeypatch.setenv("SYNCOPATE_TIMEOUT_ACTION", "trap")
    fk, L, cfg = _ce_launcher(driver, monkeypatch, sched, operand,
                              produced=case in ("rs_push_produced", "rs_deferred"),
                              defer=case == "rs_deferred")
    if case == "trap_skip":
        fk.test_skip_chunks = frozenset({cfg.ce_plan.steps[0].chunk})
        fk.test_skip_entry = True
    T = fk.comm.empty((8, 16) if case == "trap_skip" else (8, 4), torch.bfloat16)
    reduced = []
    monkeypatch.setattr("syncopate.runtime.launchers.ce.reduce_into",
                        lambda own, parts: reduced.append((own.data_ptr(), len(parts))))
    want, used = _launches(driver, L, cfg, {operand: T}, False, monkeypatch)
    assert not used
    n_reduced = len(reduced)
    got, used = _launches(driver, L, cfg, {operand: T}, True, monkeypatch)
    assert used, "the ce launcher kept its Python path"
    # the host reduction is one sum kernel per call in the program (every region in it),
    # where the Python path called reduce_into per region; everything else is the same
    # operation for operation
    sums = [op for op in got if op[0] == "kernel" and op[1] == _SUM_FN]
    assert [op for op in got if op not in sums] == want
    prep = L.prepare(cfg, {operand: T})
    assert len(reduced) == n_reduced == 3 * len(prep.reductions)
    assert len(sums) == (3 if prep.reductions else 0)
    for op in sums:
        table, n_regions, row, per_region, shift = op[-1][:5]
        assert op[5] == 0x5A and op[2] == (n_regions * per_region, 1, 1) and shift == 0
        assert n_regions == len(prep.reductions) and row == 4  # own, n, parts count, 1 part
        words = ctypes.cast(table, ctypes.POINTER(ctypes.c_int64))
        for r, (own, parts) in enumerate(prep.reductions):
            assert words[r * row: (r + 1) * row] == [own.data_ptr(), own.numel(), 1,
                                                     parts[0].data_ptr()]
    kinds = {op[0] for op in got}
    assert {"record", "wait_event", "kernel", "write32", "fused"} <= kinds
    assert ("memcpy" in kinds or "memcpy2d" in kinds)
    if case == "rs_push_produced":
        assert "wait32" in kinds  # PRODUCED by stream memory operation
    assert bool(sums) == case.startswith("rs")
    if case == "rs_deferred":
        assert cfg.consumed_pending == 3
    del name


class _FusedDL:
    """The fused kernel's direct launch, recorded in the driver's log as the launcher's
    ``run_kernel`` is (``_ce_launcher``)."""

    def __init__(self, driver, ok=True):
        self.driver, self.ok = driver, ok

    def enqueue(self, grid, values, stream, copy):
        assert copy is None
        if self.ok:
            self.driver._add("fused", stream)
        return self.ok


@pytest.mark.parametrize("after", [False, True])
def test_a_bound_ce_call_enqueues_what_the_general_path_enqueues(driver, monkeypatch, after):
    """``CELauncher.bind``'s runner against what the op's general path does for the same
    calls: the deferred CONSUMED wait (``before_staging``), the copy (``Copy.run``: one memcpy
    by handle), then ``launch``; or the launch, then the copy (a reduce-scatter's result)."""
    sched = ag_schedule(shape=(8, 4), split=2, mode="pull")
    fk, L, cfg = _ce_launcher(driver, monkeypatch, sched, "a_ptr", produced=False, defer=True)
    T = fk.comm.empty((8, 4), torch.bfloat16)
    S = types.SimpleNamespace(cuda_stream=0x5A)
    copy = (0x30, 0x40, 64)
    driver.log.clear()
    for e in (2, 3):
        fk.consumed_wait(cfg, e - 1, S)
        if not after:
            _cuda.memcpy_async(*copy, S.cuda_stream)
        L.launch(cfg, (1, 1, 1), [], S, e, _PEERS, {"a_ptr": T})
        if after:
            _cuda.memcpy_async(*copy, S.cuda_stream)
    want = list(driver.log)
    assert cfg.consumed_pending == 3
    assert [op[0] for op in want].count("memcpy") == 2 + 2 * 2  # the calls' and the chunks'
    run = L.bind(cfg, (1, 1, 1), _FusedDL(driver), _PEERS, {"a_ptr": T}, after)
    assert run is not None
    driver.log.clear()
    cfg.consumed_pending = 0
    for e in (2, 3):
        assert run(S.cuda_stream, e, [], copy + (after,))
    if after:
        # no copy between them: the ENTER kernel's program 0 makes the deferred CONSUMED wait
        # before its signal (its pre_* parameters), one launch instead of two
        want = _merge_pre_waits(want)
        assert sum(op[0] == "kernel" and op[1] == 0xA1 for op in want) == 0
    assert driver.log == want and cfg.consumed_pending == 3
    # the test switches changed since it was bound: the general path takes the call
    fk.test_skip_entry = True
    driver.log.clear()
    assert not run(S.cuda_stream, 4, [], copy + (after,)) and not driver.log


def _merge_pre_waits(log):
    """``log`` with each CONSUMED wait kernel that a ENTER kernel follows folded into that
    kernel's ``pre_*`` parameters (``sync_kernels._enter_kernel``)."""
    out = []
    for op in log:
        prev = out[-1] if out else None
        if (op[0] == "kernel" and op[1] == 0xA5 and prev is not None and prev[0] == "kernel"
                and prev[1] == 0xA1 and prev[-1][5] == abi.KIND_CONSUMED):
            _, index, target, _, _, kind, epoch, _ = prev[-1][:8]
            assert op[-1][12:17] == sk.NO_PRE_WAIT
            out[-1] = op[:-1] + (op[-1][:12] + (1, index, target, kind, epoch) + op[-1][17:],)
        else:
            out.append(op)
    return out


def test_a_bound_ce_call_without_a_context_enqueues_nothing(driver, monkeypatch):
    sched = ag_schedule(shape=(8, 4), split=2, mode="pull")
    fk, L, cfg = _ce_launcher(driver, monkeypatch, sched, "a_ptr", produced=False, defer=True)
    T = fk.comm.empty((8, 4), torch.bfloat16)
    run = L.bind(cfg, (1, 1, 1), _FusedDL(driver), _PEERS, {"a_ptr": T}, False)
    driver.rc, driver.fail_at = 201, 1  # CUDA_ERROR_INVALID_CONTEXT at the first operation
    assert run(0x5A, 2, [], (0x30, 0x40, 64, False)) is False
    assert len(driver.log) == 1 and cfg.consumed_pending == 0
    driver.log.clear()
    driver.fail_at = None
    with pytest.raises(_cuda.DriverError, match="no current context"):
        L.bind(cfg, (1, 1, 1), _FusedDL(driver, ok=False), _PEERS, {"a_ptr": T}, False)(
            0x5A, 2, [], (0x30, 0x40, 64, False))


def test_a_bound_reduce_scatter_keeps_its_sum_tables_alive(driver, monkeypatch):
    """The sum kernels read device tables of part addresses: the runner holds them, so a
    prepared-buffer cache that drops its programs cannot free what a bound call still reads."""
    from syncopate.schedule.templates import reduce_scatter
    sched = reduce_scatter((8, 4), "bf16", 2, dim=0, mode="push", split=2)
    fk, L, cfg = _ce_launcher(driver, monkeypatch, sched, "c_ptr", produced=True)
    T = fk.comm.empty((8, 4), torch.bfloat16)
    run = L.bind(cfg, (1, 1, 1), _FusedDL(driver), _PEERS, {"c_ptr": T}, True)
    (table,) = run.programs.keep
    L.prepare(cfg, {"c_ptr": T}).programs.clear()
    cfg.host["prepared"].clear()
    assert run.programs.keep[0] is table and table.tolist()[0][2] == 1
    assert run(0x5A, 1, [], (0x30, 0x40, 64, True))
    sums = [op for op in driver.log if op[0] == "kernel" and op[1] == _SUM_FN]
    assert len(sums) == 1 and sums[0][-1][0] == table.data_ptr() and sums[0][-1][1] == 2


def test_a_bound_reduce_scatter_sums_into_the_callers_output(driver, monkeypatch):
    """A result copy whose source is exactly the reduced rows: the sum kernel writes the sums at
    the copy's destination (its ``shift`` parameter is ``dst - src``) and the program enqueues no
    copy; otherwise -- another source, a destination over the parts the sums read -- the sums
    stay in place and the copy follows, as on the general path."""
    from syncopate.schedule.templates import reduce_scatter
    sched = reduce_scatter((8, 4), "bf16", 2, dim=0, mode="push", split=2)
    fk, L, cfg = _ce_launcher(driver, monkeypatch, sched, "c_ptr", produced=True)
    T = fk.comm.empty((8, 4), torch.bfloat16)
    prep = L.prepare(cfg, {"c_ptr": T})
    assert [own.data_ptr() for own, _ in prep.reductions] == [T.data_ptr(), T[2:].data_ptr()]
    run = L.bind(cfg, (1, 1, 1), _FusedDL(driver), _PEERS, {"c_ptr": T}, True)
    into = run.programs.into
    assert (into.src, into.nbytes) == (T.data_ptr(), 4 * 4 * 2)
    out = torch.empty(4, 4, dtype=torch.bfloat16)

    def call(dst, src):
        driver.log.clear()
        assert run(0x5A, 1, [], (dst, src, into.nbytes, True))
        return list(driver.log)

    general = call(out.data_ptr(), T.data_ptr() + 64)  # another source: the copy stays
    assert general[-1] == ("memcpy", out.data_ptr(), T.data_ptr() + 64, 32, 0x5A)
    fused = call(out.data_ptr(), T.data_ptr())
    (s_gen,) = [op for op in general if op[0] == "kernel" and op[1] == _SUM_FN]
    (s_into,) = [op for op in fused if op[0] == "kernel" and op[1] == _SUM_FN]
    assert s_gen[-1][4] == 0 and s_into[-1][4] == out.data_ptr() - T.data_ptr()
    assert s_into[-1][:4] == s_gen[-1][:4]
    # everything else is the same, less the copy
    assert [op if op is not s_into else s_gen for op in fused] == general[:-1]
    # a destination over the parts the sums read: the copy stays
    part = prep.reductions[0][1][0]
    assert call(part.data_ptr(), T.data_ptr())[-1][0] == "memcpy"
    # the regions do not tile one range: no such program
    from syncopate.runtime.launchers import ce_programs
    gap = types.SimpleNamespace(reductions=[(T[0:2], [part]), (T[3:4], [part])])
    assert ce_programs._span(gap) is None


def test_a_reduction_the_sum_kernel_cannot_make_stays_on_the_python_path(driver, monkeypatch):
    """A region that is not contiguous (a column block): no programs, no bound call; the
    Python path adds it with torch."""
    from syncopate.schedule.templates import reduce_scatter
    sched = reduce_scatter((8, 4), "bf16", 2, dim=1, mode="push", split=1)
    fk, L, cfg = _ce_launcher(driver, monkeypatch, sched, "c_ptr", produced=True)
    T = fk.comm.empty((8, 4), torch.bfloat16)
    assert L.bind(cfg, (1, 1, 1), _FusedDL(driver), _PEERS, {"c_ptr": T}, True) is None
    reduced = []
    monkeypatch.setattr("syncopate.runtime.launchers.ce.reduce_into",
                        lambda own, parts: reduced.append(own.is_contiguous()))
    log, used = _launches(driver, L, cfg, {"c_ptr": T}, True, monkeypatch, epochs=(1,))
    assert not used and reduced == [False]
    assert not any(op[0] == "kernel" and op[1] == _SUM_FN for op in log)


def test_a_running_program_refuses_a_second_run_and_a_rebuild(driver):
    """The driver calls run with the GIL released; another thread reaching the same program
    meanwhile (here: the driver's own callback) is refused instead of sharing its slots."""
    b = sp.Builder()
    b.write_value(sp.SIDE, 0x100, sp.Epoch())
    refused, prog = [], None

    def reenter(s, a, v, f):
        for attempt in (lambda: prog._c.run(1, 1, 0, 0, 0),
                        lambda: prog._c.__init__(sp.entry_points(), 1, [])):
            try:
                attempt()
            except RuntimeError as e:
                refused.append(str(e))
        return 0
    driver.fns["cuStreamWriteValue32"] = _MEMOP(reenter)  # (a program binds it when built)
    prog = sp.build(b, side_stream=1)
    prog.run(1, 1)
    assert refused == ["Program.run is already running (not reentrant)",
                       "Program.__init__ during a run()"]
    prog.run(1, 2)  # usable again once the first run returned (and refusing again within)
    assert len(refused) == 4
