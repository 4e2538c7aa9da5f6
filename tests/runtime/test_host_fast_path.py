"""The eager launch's host-time shortcuts keep their meaning (CPU).

Each shortcut below replaced a slower call on every launch (scripts/gpu_host_profile.py
measured them on an H200 host); these tests pin what the slower call guaranteed: the watchdog
timeout still follows the environment at the next launch (and at the next enqueued wait), the
communicator's check still reads every live FusedKernel's record, the stream lookup by raw
handle still gives torch's stream for that handle, the ops' per-call key still tells configs
apart, and the launch key still tells apart every call the slow path would treat differently.
"""

from __future__ import annotations

import gc
import types

import pytest

torch = pytest.importorskip("torch")

from runtime_fakes import fake_comm  # noqa: E402
from syncopate import settings  # noqa: E402
from syncopate.runtime import diag, epochs  # noqa: E402
from syncopate.runtime import fused as fmod  # noqa: E402


def test_the_kernel_timeout_follows_the_environment_at_the_next_launch(monkeypatch):
    monkeypatch.delenv("SYNCOPATE_TIMEOUT_S", raising=False)
    monkeypatch.delenv("SYNCOPATE_TIMEOUT_ACTION", raising=False)
    default = epochs.kernel_timeout_ns()
    assert default > 0
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "2")
    assert epochs.kernel_timeout_ns() == 2_000_000_000
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_ACTION", "trap")
    assert epochs.kernel_timeout_ns() == -2_000_000_000  # negative: the trap action
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "3")
    assert epochs.kernel_timeout_ns() == -3_000_000_000
    assert settings.watchdog() == (3_000_000_000, "trap")  # what the enqueued waits read
    monkeypatch.delenv("SYNCOPATE_TIMEOUT_ACTION")
    monkeypatch.delenv("SYNCOPATE_TIMEOUT_S")
    assert epochs.kernel_timeout_ns() == default
    assert settings.watchdog() == (default, "exit")


def test_a_bad_watchdog_value_is_refused_at_every_launch_not_memoised(monkeypatch):
    from syncopate.errors import LaunchError
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "ten")
    for _ in range(2):
        with pytest.raises(LaunchError, match="SYNCOPATE_TIMEOUT_S='ten'"):
            epochs.kernel_timeout_ns()
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "1")
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_ACTION", "abort")
    with pytest.raises(LaunchError, match="SYNCOPATE_TIMEOUT_ACTION"):
        settings.watchdog()


def test_the_communicator_checks_every_live_kernel_registered_before_or_after(monkeypatch):
    """The check iterates a tuple of weak references rebuilt at each registration: a kernel
    registered later is checked, a collected one is skipped, none is kept alive by it."""
    c = fake_comm()
    seen = []

    class FK:
        def __init__(self, name):
            self.name = name

        def check(self):
            seen.append(self.name)

    a = FK("a")
    c.register_fused(a)
    c.check()
    assert seen == ["a"]
    b = FK("b")
    c.register_fused(b)
    seen.clear()
    c.check()
    assert sorted(seen) == ["a", "b"]
    del a
    gc.collect()
    seen.clear()
    c.check()
    assert seen == ["b"]
    assert len(c._fused) == 1  # its finalizer let it go


def test_the_current_stream_is_torchs_object_for_the_raw_handle(monkeypatch):
    """Looked up by (device, raw handle): the same handle gives the object torch gave for it
    the first time (built once), another handle another object; without the raw accessor
    (CPU builds) it is torch's call each time."""
    made = []
    handle = [11]

    def current_stream(device=None):
        s = types.SimpleNamespace(cuda_stream=handle[0], device=device)
        made.append(s)
        return s

    monkeypatch.setattr(torch.cuda, "current_stream", current_stream)
    monkeypatch.setattr(fmod, "_STREAMS", {})
    dev = torch.device("cuda", 0)
    if hasattr(torch._C, "_cuda_getCurrentRawStream"):
        monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream")
    assert fmod.current_stream(dev) is not fmod.current_stream(dev)  # torch's call each time
    made.clear()
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda idx: handle[0],
                        raising=False)
    s1 = fmod.current_stream(dev)
    assert fmod.current_stream(dev) is s1 and len(made) == 1
    handle[0] = 12  # another stream made current
    s2 = fmod.current_stream(dev)
    assert s2 is not s1 and s2.cuda_stream == 12 and len(made) == 2
    handle[0] = 11
    assert fmod.current_stream(dev) is s1


def test_the_ops_key_a_config_by_value():
    """A frozen GemmConfig keys by itself (equal configs share a prepared call, different ones
    do not); an unhashable override (a dict) by its repr, as before."""
    from syncopate.kernels import GemmConfig
    from syncopate.ops.driver import config_key
    a = GemmConfig.of({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64})
    b = GemmConfig.of({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64})
    c = GemmConfig.of({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64})
    assert config_key(a) == config_key(b) and hash(config_key(a)) == hash(config_key(b))
    assert config_key(a) != config_key(c)
    assert config_key(None) is None
    d = {"BLOCK_M": 128}
    assert config_key(d) == repr(d)


def test_the_launch_key_tells_apart_what_the_slow_path_would():
    """``specialize.launch_key`` (a plan per argument-type layout): equal for a call the fast
    path may repeat, different for anything the slow path derives differently."""
    from syncopate.runtime.specialize import launch_key
    ops = frozenset({0})
    A = torch.empty(16, 8, dtype=torch.bfloat16)
    out = torch.empty(16, 8, dtype=torch.bfloat16)

    def key(*args, grid=(3,), gen=1, kwargs=None):
        return launch_key(ops, gen, grid, args, kwargs)

    base = key(A, out, 16, 8, 1.5, "x", None)
    assert base is not None and hash(base) == hash(key(A, out, 16, 8, 1.5, "x", None))
    assert base == key(A, torch.empty(16, 8, dtype=torch.bfloat16), 16, 8, 1.5, "x", None)
    different = [
        key(A.clone(), out, 16, 8, 1.5, "x", None),          # the operand's address
        key(A[:8], out, 16, 8, 1.5, "x", None),              # its shape
        key(A.t(), out, 16, 8, 1.5, "x", None),              # its strides
        key(A, out.float(), 16, 8, 1.5, "x", None),          # another tensor's dtype
        key(A, torch.empty(40, dtype=torch.bfloat16)[1:17], 16, 8, 1.5, "x", None),  # alignment
        key(A, out, 16, 9, 1.5, "x", None),                  # a scalar's value
        key(A, out, 16, True, 1.5, "x", None),               # its type (8 vs True)
        key(A, out, 16, 8.0, 1.5, "x", None),
        key(A, out, 16, 8, 1.5, "y", None),
        key(A, out, 16, 8, 1.5, "x", 0),                     # None vs 0
        key(A, out, 16, 8, 1.5, "x", None, grid=(4,)),       # the grid
        key(A, out, 16, 8, 1.5, "x", None, gen=2),           # the registry generation
        key(A, out, 16, 8, 1.5, "x"),                        # the argument count
    ]
    assert all(d is not None and d != base for d in different)
    assert len(set(different)) == len(different)
    assert key(A, out, 16, object()) is None                 # no key for an unknown type
    assert key(A, out, kwargs={"GROUP_M": 8}) is None        # keywords: the slow path
    assert key(A, out, 16, grid=lambda m: (1,)) == key(A, out, 16, grid=lambda m: (2,))
    assert key(out, A) != key(A, out)  # the operand is a position: another address there
    assert launch_key(frozenset({1}), 1, (3,), (A, out), None) != key(A, out)
