"""CUDA-graph capture of fused launches, on the CPU with the device side faked
(docs/cuda-graphs.md): what a launch under capture enqueues and refuses, the epoch bookkeeping
when the host cannot count replays, and the watchdog check of FusedGraph.replay.

The fakes (tests/runtime/test_fused_launch.py's fixture) record each launch's arguments and
advance the configuration's epoch word as the device kernel would. A CUDA graph replays the
recorded arguments unchanged; "replaying" here means running the fake advance again and reading
the word through the recorded ``syn_epoch`` argument.
"""

from __future__ import annotations

import contextlib

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi, settings  # noqa: E402
from syncopate.errors import CommTimeout, GraphCaptureError, LaunchError  # noqa: E402
from syncopate.runtime import graphs  # noqa: E402
from syncopate.runtime.fused import FusedKernel  # noqa: E402
from runtime_fakes import ag_schedule, diag_words, fake_comm, fk_values, ptr_kernel  # noqa: E402
from test_fused_launch import _fast_path_fixture  # noqa: E402


@contextlib.contextmanager
def capture():
    """What FusedGraph.capture does on the host: mark this thread as capturing and collect the
    FusedKernels launched."""
    kernels: list = []
    graphs._LOCAL.active = kernels
    try:
        yield kernels
    finally:
        graphs._LOCAL.active = None


def test_capture_enqueues_the_device_advance_and_passes_the_word_not_a_value(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    assert [fk.launch((3,), vals) for _ in range(2)] == [1, 2]  # eager warm-up
    with capture() as kernels:
        assert graphs.capturing()
        assert fk.launch((3,), vals) is None  # the host does not know a replay's epoch
    assert not graphs.capturing()
    assert kernels == [fk] and fk.last_config.captured
    assert calls["advanced"] == [1, 2, 3]  # one advance enqueued per launch, captured included
    g, captured_args, e, peers, seen = calls["launched"][-1]
    assert e is None and seen == 3
    word = captured_args[-2]
    assert word is fk.last_config.epoch_word and not isinstance(word, int)
    # replays: the graph re-runs the advance node, then the kernel with the same arguments
    advance = fk._advance_epoch
    for n in range(1, 6):
        advance(fk.last_config, None)
        assert int(captured_args[-2][0]) == 3 + n
    # the host counts only the eager launches it enqueued (2); the device (mirror) says 8
    assert fk.last_config.epochs.value == 2 and fk.epoch == fk.device_epoch() == 8
    # an eager launch after the replays continues from the device word, not the host count
    assert fk.launch((3,), vals) is None and calls["launched"][-1][-1] == 9
    assert fk.epoch == 9


def test_first_launch_under_capture_is_refused_before_compiling_or_allocating(monkeypatch):
    c = fake_comm()

    def compile_fn(*a, **k):
        raise AssertionError("compiled under capture")
    fk = FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr", backend="sm",
                     comm=c, compile_fn=compile_fn, target=("cuda", 90))
    A = c.empty((64, 32), torch.bfloat16)
    allocs = dict(c._allocs)
    with capture(), pytest.raises(GraphCaptureError, match="once eagerly"):
        fk.launch((3,), fk_values(c, A))
    assert c._allocs == allocs and fk.last_config is None  # no flags, nothing launched


def test_new_operand_buffers_under_capture_are_refused(monkeypatch):
    """The peers table of new buffers is a host-to-device upload: refused under capture."""
    from syncopate.runtime import fused as fmod
    c, fk, calls = _fast_path_fixture(monkeypatch)
    monkeypatch.setattr(fk, "_peers_table", fmod.FusedKernel._peers_table.__get__(fk))
    cfg = fk._config(None, {})
    cfg.flag_addrs = [1, 2]
    A = c.empty((64, 32), torch.bfloat16)
    B = c.empty((64, 32), torch.bfloat16)
    fk._peers_table(cfg, {"a_ptr": A})  # eager: built and cached
    fk._capture_now = True
    fk._peers_table(cfg, {"a_ptr": A})  # cached: fine under capture
    with pytest.raises(GraphCaptureError, match="peer-address table"):
        fk._peers_table(cfg, {"a_ptr": B})


@pytest.mark.parametrize("backend,signals_entry,match", [
    ("ce", False, "side stream writes and waits for host-computed epochs"),
    ("sm", False, "does not publish ENTRY itself")])
def test_capture_refuses_host_epochs_before_enqueueing(monkeypatch, backend, signals_entry, match):
    """ce's side stream and the runtime's signal_entry take host epochs: refused with a
    GraphCaptureError naming the cause, and nothing (not even the advance) is enqueued."""
    from syncopate.runtime import fused as fmod
    c, fk, calls = _fast_path_fixture(monkeypatch, backend=backend)
    a = abi.FusedABI(backend, 2, 2, 4 if backend == "sm" else 0, "push", operands=["a_ptr"],
                     signals_entry=signals_entry)

    def config(spec_, options):
        cfg = fmod._Config(compiled=None, abi=a, flag_addrs=[0, 0],
                           flags=c.empty((a.layout.words,), torch.int32))
        fk._new_epoch_word(cfg)
        return cfg
    monkeypatch.setattr(fk, "_config", config)
    A = c.empty((64, 32), torch.bfloat16)
    with capture(), pytest.raises(GraphCaptureError, match=match) as ei:
        fk.launch((3,), fk_values(c, A))
    assert "backend='sm'" in str(ei.value) and isinstance(ei.value, LaunchError)
    assert calls["launched"] == [] and calls.get("advanced", []) == []


def test_nvshmem_capture_needs_its_module_init_first():
    from syncopate.runtime.launchers.nvshmem import NVSHMEMLauncher

    class Cfg:
        abi = abi.FusedABI("nvshmem", 2, 2, 4, "push", signals_entry=True)
        host: dict = {}
    L = NVSHMEMLauncher(fk=None)
    assert "module init" in L.capture_refusal(Cfg())
    Cfg.host = {"nvshmem_ready": True}
    assert L.capture_refusal(Cfg()) is None


class FakeGraph:
    def __init__(self):
        self.replays = 0

    def replay(self):
        self.replays += 1


def test_fused_graph_replay_raises_comm_timeout_then_refuses(monkeypatch):
    """A replay that timed out writes the pinned record; the next FusedGraph.replay raises
    CommTimeout naming the epoch of the failed launch (from the record) without replaying, and
    every later replay (or eager launch) of the poisoned kernel is refused."""
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    fk.launch((3,), vals)
    g = FakeGraph()
    fg = graphs.FusedGraph(g, [fk], [c])
    fg.replay()
    fg.replay()
    assert g.replays == 2
    fk.diag.copy_(torch.tensor(diag_words(state=1, rank=0, flag=1, value=4, expected=12, kind=0,
                                          program=2, epoch=3), dtype=torch.int32))
    with pytest.raises(CommTimeout, match="epoch 3"):
        fg.replay()
    assert g.replays == 2
    with pytest.raises(LaunchError, match="timed out earlier"):
        fg.replay()
    with pytest.raises(LaunchError, match="timed out earlier"):
        fk.launch((3,), vals)
    assert g.replays == 2


def test_fused_graph_capture_collects_kernels_and_refuses_an_empty_capture(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    fk.launch((3,), vals)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph",
                        lambda g, pool=None, stream=None, capture_error_mode="global":
                        contextlib.nullcontext())
    fg = graphs.FusedGraph.capture(lambda: (fk.launch((3,), vals), fk.launch((3,), vals))[0],
                                   comm=c)
    assert fg.kernels == [fk] and fg.comms == [c] and fg.output is None
    assert [d for *_, d in calls["launched"]] == [1, 2, 3]
    with pytest.raises(GraphCaptureError, match="launched no fused kernel"):
        graphs.FusedGraph.capture(lambda: None)
    assert not graphs.capturing()
    fg.replay()
    assert fg.graph.replays == 1 and fg.epochs() == [3]


def test_pending_consumed_wait_is_refused_under_capture_and_stays_pending(monkeypatch):
    """ce's deferred CONSUMED wait (before_staging) has a host target: under capture it is
    refused *and kept*, so the next eager staging still waits (enqueued into an aborted
    capture, it would be lost and the staging would overwrite a buffer peers still read)."""
    c, fk, calls = _fast_path_fixture(monkeypatch, backend="ce")
    waits = []
    monkeypatch.setattr(fk, "consumed_wait", lambda cfg, e, S: waits.append(e))
    cfg = fk._config(None, {})
    fk._configs["k"] = cfg
    cfg.consumed_pending = 4
    with capture(), pytest.raises(GraphCaptureError, match="CONSUMED wait"):
        fk.before_staging()
    assert cfg.consumed_pending == 4 and waits == []
    fk.before_staging()
    assert cfg.consumed_pending == 0 and waits == [4]


def test_a_failed_device_advance_takes_the_host_count_back(monkeypatch):
    """ce's host writes flags with its count of epochs and its kernel waits with the device's:
    an advance that could not be enqueued must not leave the host a launch ahead."""
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    assert fk.launch((3,), vals) == 1

    def broken(cfg, S):
        raise RuntimeError("launch failed")
    good = fk._advance_epoch
    monkeypatch.setattr(fk, "_advance_epoch", broken)
    with pytest.raises(RuntimeError, match="launch failed"):
        fk.launch((3,), vals)
    assert fk.last_config.epochs.value == 1 and len(calls["launched"]) == 1
    monkeypatch.setattr(fk, "_advance_epoch", good)
    assert fk.launch((3,), vals) == 2 and calls["launched"][-1][-1] == 2  # host == device


def test_an_explicit_stream_is_asked_whether_it_is_captured(monkeypatch):
    """A launch may name a captured stream that is not the current one: the driver is asked
    about that stream (cuStreamIsCapturing), not only torch about the current one."""
    from syncopate.runtime import _cuda
    asked = []
    monkeypatch.setattr(_cuda, "stream_is_capturing", lambda h: asked.append(h) or h == 7)

    class S:
        cuda_stream = 7
    assert graphs.capturing(S()) and graphs.capturing(7)
    assert not graphs.capturing(8) and asked == [7, 7, 8]
    monkeypatch.setattr(_cuda, "stream_is_capturing", lambda h: None)  # no driver: torch's probe
    assert graphs.capturing(S()) == graphs.capturing()


def test_symmetric_allocation_is_refused_under_capture():
    """An op's first call allocates its symmetric buffers (a collective rendezvous): under
    capture the communicator refuses before any rank enters the rendezvous."""
    c = fake_comm()
    from syncopate.runtime.communicator import Communicator
    c.empty = Communicator.empty.__get__(c)  # the real method (fake_comm replaces it)
    c._symm = None  # never reached
    with capture(), pytest.raises(GraphCaptureError, match="symmetric allocation"):
        c.empty((4,), torch.float32)


def test_the_withdrawn_memop_advance_is_refused_with_the_reason():
    """SYNCOPATE_EPOCH_ADVANCE=memop (opt-in last session, withdrawn unverified): a setting
    asking for it is refused, naming what to do; unset or ``kernel`` is fine."""
    settings.EPOCH_ADVANCE.get({})
    settings.EPOCH_ADVANCE.get({"SYNCOPATE_EPOCH_ADVANCE": "kernel"})
    with pytest.raises(LaunchError, match="memop.*withdrawn.*unset it"):
        settings.EPOCH_ADVANCE.get({"SYNCOPATE_EPOCH_ADVANCE": "memop"})
