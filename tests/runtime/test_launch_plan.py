"""Launch plans (``syncopate.runtime.launch_plan``): a FusedKernel's launch of one argument
layout takes the general path (``FusedKernel.launch``) until the layout's direct launch
exists, then one compiled call per launch with the staging copy; it steps back to the general
path whenever anything it does not re-check could differ, and a failure poisons the kernel as
an eager launch's does.

CPU only: a real FusedKernel and sm launcher over a fake communicator; the compiled kernel,
``cuLaunchKernel``, ``cuMemcpyDtoDAsync`` and ``cuStreamIsCapturing`` are fakes that record.
"""

from __future__ import annotations

import ctypes
import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from runtime_fakes import (FakeCompiledFused, FakeDriver, bindable_sm_kernel,  # noqa: E402
                           fake_comm, install_driver, require_fastlaunch)
from syncopate import abi  # noqa: E402
from syncopate.errors import CommTimeout, LaunchError  # noqa: E402
from syncopate.runtime import _cuda, graphs, launch_plan  # noqa: E402
from syncopate.runtime import fused as fmod  # noqa: E402
from syncopate.runtime.launch_plan import LaunchPlan  # noqa: E402

STREAM = 77


@pytest.fixture
def rig(monkeypatch):
    """(fk, values, driver, ck): an sm FusedKernel whose configuration is a self-advancing,
    ENTRY-publishing one compiled to ``ck``."""
    require_fastlaunch()
    driver = FakeDriver()
    install_driver(monkeypatch, driver.symbol)
    c = fake_comm()
    monkeypatch.setattr(torch.cuda, "current_device", lambda: c.device.index)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda idx: STREAM, raising=False)
    stream = types.SimpleNamespace(cuda_stream=STREAM, device=c.device)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    monkeypatch.setattr(fmod, "_STREAMS", {})
    monkeypatch.setattr(graphs, "_PROBE", [lambda: False])
    ck = FakeCompiledFused()
    fk, vals = bindable_sm_kernel(c, ck)
    return fk, vals, driver, ck


def _slot_copy(vals):
    """An all-gather's staging, ``(dst, src)``: a fresh shard into rank 0's rows of the
    symmetric A."""
    A = vals[0]
    shard = torch.randn(A.shape[0] // 2, A.shape[1]).to(A.dtype)
    return A[: A.shape[0] // 2], shard


def _warm(fk, vals):
    """Two general launches: Triton's launcher, then the layout's direct launch."""
    b = LaunchPlan(fk, (3,))
    for _ in range(2):
        b.launch(list(vals), *_slot_copy(vals))
    return b


def test_the_third_launch_of_a_layout_is_one_compiled_call_with_its_copy(rig, monkeypatch):
    fk, vals, driver, ck = rig
    b = LaunchPlan(fk, (3,))
    keys = []
    real_key = fk._launch_key
    monkeypatch.setattr(fk, "_launch_key", lambda *a: keys.append(1) or real_key(*a))
    slot, shard = _slot_copy(vals)
    b.launch(list(vals), slot, shard)  # general: Triton's launcher; the copy by torch
    assert len(ck.triton) == 1 and not driver.events and not b.ready
    assert torch.equal(vals[0][:32], shard)
    b.launch(list(vals), *_slot_copy(vals))  # general: the direct launch is built (compiled)
    assert driver.events == ["launch"] and b.ready
    n_keys = len(keys)
    out = torch.empty_like(vals[2])
    args = list(vals)
    args[2] = out
    slot, shard = _slot_copy(vals)
    b.launch(args, slot, shard)  # bound: no launch key, copy then kernel, one call
    assert len(keys) == n_keys
    assert driver.events == ["launch", "copy", "launch"] and len(ck.triton) == 1
    dst, src, nbytes, stream = driver.copies[-1]
    assert (dst, src, nbytes, stream) == (vals[0].data_ptr(), shard.data_ptr(),
                                          shard.numel() * 2, STREAM)
    call = driver.calls[-1]
    assert call["grid"] == tuple(ck.triton[0][0])  # the ABI's grid, as Triton was given
    addr = [call["params"][k] for k in range(3)]
    got = [ctypes.cast(p, ctypes.POINTER(ctypes.c_uint64)).contents.value for p in addr]
    assert got == [vals[0].data_ptr(), vals[1].data_ptr(), out.data_ptr()]
    cfg = fk.last_config
    assert cfg.epochs.value == 3 and cfg is b.cfg


_CHANGES = ["poisoned", "generation", "hook", "timeout", "consumed_pending", "device", "operand",
            "capturing", "capture_unknown", "fused_capture", "strided_copy", "overlapping_copy",
            "timed_out"]


# "locked": another thread holds the kernel's lock. The Gate declines rather than wait (the
# general path waits); Python's checks would wait for it, so that case is the Gate's alone.
@pytest.mark.parametrize("change,gate", [(c, g) for c in _CHANGES for g in (True, False)]
                         + [("locked", True)])
def test_the_bound_path_steps_back_when_anything_could_differ(rig, monkeypatch, change, gate):
    """Each condition sends the call to the general path with nothing done on the bound one:
    no epoch counted, nothing enqueued -- with the checks in C (the Gate of ``_fastlaunch.c``)
    and in Python (``LaunchPlan.fast``'s own, where there is no Gate). Each change is one a
    caller can make: what both implementations read."""
    from triton import knobs
    fk, vals, driver, ck = rig
    r = _warm(fk, vals)
    assert r.gate is not None  # the rig has everything a Gate needs
    if not gate:
        r.gate = None
    args = list(vals)
    dst, src = _slot_copy(vals)
    if change == "poisoned":
        fk._poisoned = "it timed out earlier"
    elif change == "generation":
        monkeypatch.setattr(type(fk.comm), "generation", property(lambda self: -1))
    elif change == "hook":
        hook = lambda md: None  # noqa: E731
        knobs.runtime.launch_enter_hook.add(hook)  # a profiler's (removed below)
    elif change == "timeout":  # another watchdog setting than the layout was bound with
        monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "123")
        assert launch_plan.kernel_timeout_ns() != r.timeout
    elif change == "consumed_pending":
        r.cfg.consumed_pending = 2
    elif change == "device":  # the thread's current device (what fastlaunch.current_device reads)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 5)
    elif change == "operand":
        args[0] = torch.empty_like(vals[0])
    elif change == "capturing":
        driver.capture_status = 1
    elif change == "capture_unknown":  # the driver does not answer
        driver.capture_rc = 1
    elif change == "fused_capture":
        monkeypatch.setattr(graphs._LOCAL, "active", [fk], raising=False)
    elif change == "strided_copy":
        dst, src = vals[0][:32], torch.randn(32, 64).to(vals[0].dtype)[:, ::2]
        assert launch_plan.memcpy_bytes(dst, src) == 0
    elif change == "overlapping_copy":  # a shard that is a shifted view of the slot itself
        flat = vals[0].view(-1)
        dst, src = flat[:1024].view(32, 32), flat[16:1040].view(32, 32)
        assert launch_plan.memcpy_bytes(dst, src) == 2048
    elif change == "timed_out":  # a spin of an earlier launch recorded a timeout
        fk.diag[abi.DIAG_STATE] = 1
    elif change == "locked":  # another thread is launching this kernel
        assert fk._lock.acquire(False)
    events, epoch = list(driver.events), r.cfg.epochs.value
    if change == "strided_copy":  # a layout whose copy is never a memcpy: Tensor.copy_, and
        p = LaunchPlan(fk, (3,))    # never the bound path
        for _ in range(3):
            p.launch(args, dst, src)
        assert not p.ready and "copy" not in driver.events[len(events):]
        assert torch.equal(dst, src)
        return
    try:
        c = (dst.data_ptr(), src.data_ptr(), launch_plan.memcpy_bytes(dst, src), False)
        if change == "timed_out":  # declined (Gate) or raised (Python) before anything is done;
            # the call raises what happened either way
            with pytest.raises(CommTimeout):
                r.launch(args, dst, src)
        else:
            assert r.fast(args, c) is False
    finally:
        if change == "hook":
            knobs.runtime.launch_enter_hook.remove(hook)
        if change == "locked":
            fk._lock.release()
    assert driver.events == events and r.cfg.epochs.value == epoch


def test_the_gate_probes_every_live_kernels_record(rig):
    """The records a Gate reads in place of ``Communicator.check``: the communicator's and each
    registered kernel's state word, a kernel's dropped (and its record let go) once it is
    gone."""
    import gc

    from syncopate.runtime import fused as fmod
    fk, vals, driver, ck = rig
    comm = fk.comm
    before = comm.probe_addrs()
    assert before[0] == comm.diag.data_ptr() + 4 * abi.DIAG_STATE
    assert fk.diag.data_ptr() + 4 * abi.DIAG_STATE in before
    other = fmod.FusedKernel(fk.kernel, fk.schedule, operand="a_ptr", backend="sm", comm=comm)
    addr = other.diag.data_ptr() + 4 * abi.DIAG_STATE
    assert comm.probe_addrs() == before + (addr,)
    del other
    gc.collect()
    assert comm.probe_addrs() == before


def test_a_failed_bound_launch_poisons_the_kernel(rig):
    fk, vals, driver, ck = rig
    b = _warm(fk, vals)
    driver.rc = 700
    with pytest.raises(_cuda.DriverError, match="700"):
        b.launch(list(vals), *_slot_copy(vals))
    driver.rc = 0
    with pytest.raises(LaunchError, match="cannot be reused"):
        b.launch(list(vals), *_slot_copy(vals))


def test_without_a_context_the_bound_call_takes_the_general_path(rig):
    """The first driver call reports no current context (a thread that never touched CUDA):
    nothing was enqueued, so the bound path gives the epoch back and the general path launches
    (through Triton's launcher, which sets a context, on a real GPU); the copy is torch's, the
    epoch counted once."""
    fk, vals, driver, ck = rig
    b = _warm(fk, vals)
    epoch = b.cfg.epochs.value
    driver.copy_rc = 201
    slot, shard = _slot_copy(vals)
    launches = driver.events.count("launch") + len(ck.triton)
    b.launch(list(vals), slot, shard)
    assert driver.events.count("launch") + len(ck.triton) == launches + 1
    assert b.cfg.epochs.value == epoch + 1 and not fk._poisoned
    assert torch.equal(vals[0][:32], shard)


def test_a_copy_after_the_kernel_is_enqueued_after_it(rig):
    """A reduce-scatter's result copy: kernel, then the copy, on the launch stream."""
    fk, vals, driver, ck = rig
    b = _warm(fk, vals)
    res = torch.empty(32, 32, dtype=torch.bfloat16)
    out = torch.empty_like(res)
    b.launch(list(vals), out, res, after=True)
    assert driver.events[-2:] == ["launch", "copy"]
    assert driver.copies[-1] == (out.data_ptr(), res.data_ptr(), res.numel() * 2, STREAM)


def test_configurations_the_bound_path_does_not_cover_stay_general(rig, monkeypatch):
    """No ENTRY published by the kernel (the launcher signals it), no self-advance (an advance
    kernel first), or the compiled path off: every call is ``FusedKernel.launch``."""
    fk, vals, driver, ck = rig
    monkeypatch.setenv("SYNCOPATE_FAST_LAUNCH", "0")
    b = _warm(fk, vals)
    b.launch(list(vals), *_slot_copy(vals))
    assert not b.ready and "copy" not in driver.events
    monkeypatch.setenv("SYNCOPATE_FAST_LAUNCH", "1")
    fk._fast.clear()
    monkeypatch.setattr(fk.launcher, "kernel_only", lambda cfg: False)
    b = _warm(fk, vals)
    assert not b.ready


class _DevTensor:
    """What enqueue_copy reads of a CUDA tensor: its address and device; ``copy_`` recorded."""

    def __init__(self, ptr, index=0):
        self.ptr, self.device, self.copied = ptr, torch.device("cuda", index), []

    def data_ptr(self):
        return self.ptr

    def copy_(self, src):
        self.copied.append(src)


def test_the_general_paths_copy_is_one_memcpy_by_handle_where_it_can(monkeypatch):
    """``enqueue_copy`` (the general path's staging, every ce call): a plain copy between disjoint
    buffers of the current device is one ``cuMemcpyDtoDAsync`` on the current stream; an
    overlapping one, one for another device, a conversion (``nbytes`` 0) or a driver refusal
    (no context) is ``Tensor.copy_``."""
    from syncopate.runtime import fastlaunch
    calls = []

    def memcpy(dst, src, n, stream):
        calls.append((dst, src, n, stream))
        if stream == 666:
            raise _cuda.DriverError("cuMemcpyDtoDAsync failed with CUDA driver error 201")
        return True
    monkeypatch.setattr(_cuda, "memcpy_async", memcpy)
    monkeypatch.setattr(fastlaunch, "current_device", lambda: 0)
    monkeypatch.setattr(fastlaunch, "current_raw_stream", lambda idx: STREAM)
    dst, src = _DevTensor(0x10000), _DevTensor(0x20000)
    launch_plan.enqueue_copy(dst, src, 4096)
    assert calls == [(0x10000, 0x20000, 4096, STREAM)] and not dst.copied
    for d, s, n in ((_DevTensor(0x10000), _DevTensor(0x10800), 4096),  # overlapping
                    (_DevTensor(0x10000, index=1), _DevTensor(0x20000, index=1), 4096),
                    (_DevTensor(0x10000), _DevTensor(0x20000), 0)):
        launch_plan.enqueue_copy(d, s, n)
        assert d.copied == [s] and len(calls) == 1
    monkeypatch.setattr(fastlaunch, "current_raw_stream", lambda idx: 666)
    d = _DevTensor(0x10000)
    launch_plan.enqueue_copy(d, src, 4096)
    assert d.copied == [src] and len(calls) == 2


def test_a_launcher_that_binds_its_whole_launch_takes_the_bound_path(rig, monkeypatch):
    """ce's way (``Launcher.bind``): the bound path hands the call, its epoch and its copy to the
    launcher's runner, even with a CONSUMED wait pending (the runner enqueues it); a runner
    that answers False sends the call to the general path with its epoch given back."""
    fk, vals, driver, ck = rig
    runs, answer = [], [True]

    def bind(cfg, grid, dl, peers, operand_tensors, copy_after):
        assert copy_after is False and set(operand_tensors) == {"a_ptr"}

        def run(stream, e, values, copy):
            runs.append((stream, e, copy))
            return answer[0]
        return run
    monkeypatch.setattr(fk.launcher, "kernel_only", lambda cfg: False)
    monkeypatch.setattr(fk.launcher, "bind", bind)
    b = _warm(fk, vals)
    assert b.ready and b.run is not None
    cfg = b.cfg
    cfg.consumed_pending = 2  # the runner's to wait for
    slot, shard = _slot_copy(vals)
    n_events = len(driver.events)
    b.launch(list(vals), slot, shard)
    assert runs == [(STREAM, 3, (vals[0].data_ptr(), shard.data_ptr(), shard.numel() * 2, False))]
    assert len(driver.events) == n_events  # nothing of its own: the runner enqueues
    answer[0] = False
    cfg.consumed_pending = 0  # (an sm launcher has no CONSUMED wait of its own)
    launches = driver.events.count("launch")
    b.launch(list(vals), *_slot_copy(vals))
    assert len(runs) == 2 and runs[-1][1] == 4
    assert cfg.epochs.value == 4  # 4 given back, then counted again by the general launch
    assert driver.events.count("launch") == launches + 1  # the general path's direct launch
