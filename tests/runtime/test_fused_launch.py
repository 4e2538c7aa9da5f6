"""FusedKernel.launch with its device side recorded instead of run: the fast path for a
repeated call and what makes it miss, epochs per configuration, warmup, and withheld chunks
(compiled into sm kernels, skipped at run time on ce).

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.runtime.fused import FusedKernel  # noqa: E402
from runtime_fakes import fake_comm, ptr_kernel, ag_schedule, fk_values  # noqa: E402


def fake_device_advance(calls):
    """Stands in for the device epoch advance (sync_kernels.advance_epoch): what the one-thread
    kernel does to the configuration's epoch word and pinned mirror, done at once."""
    def advance(cfg, S):
        cfg.epoch_word[0] += 1
        cfg.epoch_mirror[0] = cfg.epoch_word[0]
        calls.setdefault("advanced", []).append(int(cfg.epoch_word[0]))
    return advance


def _fast_path_fixture(monkeypatch, backend="sm"):
    """A FusedKernel on the fake communicator whose device side is recorded instead of run;
    counts how often the slow path (validate, specialize) runs. The epoch word is a CPU
    tensor advanced by a fake of the device kernel; each recorded launch keeps the epoch the
    kernel would load from it."""
    import contextlib

    from syncopate.runtime import fused as fmod
    c = fake_comm()
    fk = FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr", backend=backend,
                     comm=c)
    a = abi.FusedABI(backend, 2, 2, 4 if backend == "sm" else 0, "push", operands=["a_ptr"],
                     signals_entry=True)
    calls = {"validate": 0, "specialize": 0, "config": 0, "launched": []}
    real_validate, real_specialize = fk.validate, fmod.specialize

    def validate(values):
        calls["validate"] += 1
        return real_validate(values)

    def spec(kernel, values, constants=frozenset()):
        calls["specialize"] += 1
        return real_specialize(kernel, values)

    def config(spec_, options):
        calls["config"] += 1
        # like the real one: the first launch of a configuration allocates symmetric flags
        cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32),
                           flag_addrs=[0, 0])
        fk._new_epoch_word(cfg)
        return cfg
    monkeypatch.setattr(fk, "validate", validate)
    monkeypatch.setattr(fmod, "specialize", spec)
    monkeypatch.setattr(fk, "_config", config)
    monkeypatch.setattr(fk, "_peers_table", lambda cfg, ops: ("peers", ops["a_ptr"].data_ptr()))
    monkeypatch.setattr(fk, "_advance_epoch", fake_device_advance(calls))
    monkeypatch.setattr(fk.launcher, "launch", lambda cfg, g, args, S, e, peers, ops, direct=None:
                        calls["launched"].append((g, args, e, peers, int(args[-2][0]))))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "S")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: c.device.index)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    return c, fk, calls


def test_launch_fast_path_skips_validation_for_a_repeated_call(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    assert fk.launch((3,), vals) == 1
    assert fk.launch((3,), vals) == 2
    vals2 = fk_values(c, A)  # new b/out tensors, same dtype and alignment: still a hit
    assert fk.launch((3,), vals2) == 3
    assert calls["validate"] == 1 and calls["specialize"] == 1
    vals3 = list(vals2)
    vals3[2] = torch.empty(vals2[2].numel() + 8, dtype=vals2[2].dtype)[1:1 + vals2[2].numel()]
    fk.launch((3,), vals3)  # an output 2 bytes off 16-byte alignment: Triton specialises on it
    assert calls["validate"] == 2 and calls["specialize"] == 2
    (g1, args1, e1, p1, d1), (g2, args2, e2, p2, d2), (_, args3, *_), _ = calls["launched"]
    assert g1 == g2 == (3 + 4, 1, 1) and (e1, e2) == (1, 2) and p1 == p2
    # syn_epoch is the configuration's device word (ABI 3), advanced to 2 before launch 2
    assert args2[:len(vals)] == vals and args2[-2] is args1[-2] and (d1, d2) == (1, 2)
    assert args3[1] is vals2[1]  # the call's own tensors are launched, not cached ones


def test_launch_fast_path_misses_on_any_change(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    fk.launch((3,), vals)
    fk.launch((4,), vals)  # grid
    v = list(vals)
    v[-1] = 4  # GROUP_M constexpr
    fk.launch((3,), v)
    fk.launch((3,), vals[:-1], {"GROUP_M": 8})  # keywords: always the slow path
    fk.launch((3,), vals[:-1], {"GROUP_M": 8})
    assert calls["validate"] == 5
    other = c.empty((8,), torch.float32)  # a new buffer cannot alias a registered one: a hit
    fk.launch((3,), vals)
    assert calls["validate"] == 5
    c.release(other)  # a released address may come back for another buffer: revalidate
    fk.launch((3,), vals)
    assert calls["validate"] == 6
    fk.launch(lambda meta: (meta["M"] // 32,), vals)  # callable grid: evaluated per call
    fk.launch(lambda meta: (meta["M"] // 16,), vals)
    assert calls["validate"] == 7  # one miss for the first callable grid, then hits
    assert [g for g, *_ in calls["launched"]][-2:] == [(2 + 4, 1, 1), (4 + 4, 1, 1)]


def test_epochs_count_launches_per_configuration(monkeypatch):
    """Each configuration has its own flags, whose chunk counts grow by one launch's worth per
    launch *of that configuration*: alternating two specialisations must give each 1, 2, ...
    (a shared counter made the second configuration wait for a count its flags never reach --
    found on the GPU by the sm withheld-chunk test, which adds a configuration mid-run)."""
    from syncopate.runtime import fused as fmod
    c, fk, calls = _fast_path_fixture(monkeypatch)
    made = {}
    a = abi.FusedABI("sm", 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True)

    def config(spec_, options):
        if spec_ not in made:
            made[spec_] = fmod._Config(compiled=None, abi=a, flag_addrs=[0, 0],
                                       flags=c.empty((a.layout.words,), torch.int32))
            fk._new_epoch_word(made[spec_])
        return made[spec_]
    monkeypatch.setattr(fk, "_config", config)
    A = c.empty((64, 32), torch.bfloat16)
    v1 = fk_values(c, A)
    v2 = list(v1)
    v2[-1] = 4  # another GROUP_M: another specialisation
    epochs = [fk.launch((3,), v) for v in (v1, v2, v1, v2, v1)]
    assert epochs == [1, 1, 2, 2, 3] and fk.epoch == 3 and len(made) == 2
    # each configuration's own device word, advanced once per launch of it
    assert [d for *_, d in calls["launched"]] == epochs
    assert len({id(args[-2]) for _, args, *_ in calls["launched"]}) == 2


def test_launch_fast_path_still_refuses_a_non_symmetric_operand(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    fk.launch((3,), fk_values(c, A))
    c.release(A)
    with pytest.raises(LaunchError, match="not in symmetric memory"):
        fk.launch((3,), fk_values(c, A))


def test_warmup_prepares_without_launching_and_the_launch_then_hits(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    fk.warmup((3,), *vals)
    assert calls["config"] == 1 and calls["launched"] == [] and fk.epoch == 0
    fk.launch((3,), vals)
    assert calls["validate"] == 1 and calls["config"] == 1 and fk.epoch == 1


def test_withheld_chunks_are_compiled_into_sm_kernels_and_skipped_at_run_time_on_ce(monkeypatch):
    """sm: test_skip_chunks is a compile option (withhold_chunks), part of the configuration
    key, and setting it drops the fast path; ce: nothing is compiled differently."""
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    fk.launch((3,), vals)
    fk.test_skip_chunks = {1}
    assert fk.test_skip_chunks == frozenset({1})
    fk.launch((3,), vals)
    assert calls["validate"] == 2  # the fast path of the unwithheld configuration was dropped
    seen = []
    fk._compile_fn = lambda kernel, **kw: seen.append(kw) or "compiled"
    fk.target = ("cuda", 90)
    from syncopate.runtime import fused as fmod
    spec = fmod.specialize(fk.kernel, vals)
    for backend, want in (("sm", (1,)), ("nvshmem", (1,)), ("ce", None)):
        fk.backend = backend
        assert fk._compile(spec, {}) == "compiled"
        assert seen[-1].get("withhold_chunks") == want


def _with_self_advance(monkeypatch, fk, on: bool) -> None:
    """Make ``fk``'s configurations compile with ``abi.self_advance = on`` (the fixture's
    fake compile), their epoch word laid out accordingly."""
    import dataclasses
    inner = fk._config

    def config(spec_, options):
        cfg = inner(spec_, options)
        cfg.abi = dataclasses.replace(cfg.abi, self_advance=on)
        fk._new_epoch_word(cfg)
        return cfg
    monkeypatch.setattr(fk, "_config", config)


def test_a_self_advancing_configuration_enqueues_no_advance(monkeypatch):
    """``abi.self_advance`` (``fuse(..., self_advance=True)``): the kernel advances its own
    epoch word, so a launch enqueues nothing before it (eager, host count still kept), and the
    word carries the mirror's address in words 2 and 3 for the kernel's last program."""
    c, fk, calls = _fast_path_fixture(monkeypatch)
    _with_self_advance(monkeypatch, fk, True)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    assert fk.launch((3,), vals) == 1 and fk.launch((3,), vals) == 2
    assert calls.get("advanced", []) == [] and len(calls["launched"]) == 2
    w = fk.last_config.epoch_word
    addr = (int(w[3]) & 0xFFFFFFFF) << 32 | (int(w[2]) & 0xFFFFFFFF)
    assert addr == fk.last_config.epoch_mirror_addr != 0
    assert int(w[0]) == 0  # nothing on the host side touched the epoch itself


def test_a_self_advancing_launch_that_fails_part_way_poisons_the_kernel(monkeypatch):
    """The host counted the launch but the kernel may not have run (device word behind): the
    kernel refuses further launches with a LaunchError that says why, instead of launching
    with host flags ahead of the device's epoch. Without self-advance the same failure leaves
    the kernel usable (the advance kernel moved the device word with the host's count)."""
    from syncopate.errors import LaunchError
    for self_adv in (True, False):
        c, fk, calls = _fast_path_fixture(monkeypatch)
        _with_self_advance(monkeypatch, fk, self_adv)
        A = c.empty((64, 32), torch.bfloat16)
        vals = fk_values(c, A)
        assert fk.launch((3,), vals) == 1
        ok = fk.launcher.launch

        def fail(*a, **k):
            raise RuntimeError("driver said no")
        monkeypatch.setattr(fk.launcher, "launch", fail)
        with pytest.raises(RuntimeError, match="driver said no"):
            fk.launch((3,), vals)
        monkeypatch.setattr(fk.launcher, "launch", ok)
        if self_adv:
            with pytest.raises(LaunchError, match="launch 2 failed part-way.*create a new"):
                fk.launch((3,), vals)
        else:
            assert fk.launch((3,), vals) == 3


def test_self_advance_is_a_compile_option_or_the_environment(monkeypatch):
    """``auto`` by default (self-advancing wherever the kernel allows it), ``True`` requires
    it, ``False`` keeps the advance kernel; SYNCOPATE_SELF_ADVANCE=1/0/auto sets the default
    and anything else is a typed error."""
    from syncopate.errors import CompileError, LaunchError
    c = fake_comm()

    def opts(**kw):
        return FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr", comm=c,
                           **kw).compile_options

    monkeypatch.delenv("SYNCOPATE_SELF_ADVANCE", raising=False)
    assert opts()["self_advance"] == "auto"
    assert opts(self_advance=True)["self_advance"] is True
    assert "self_advance" not in opts(self_advance=False)
    monkeypatch.setenv("SYNCOPATE_SELF_ADVANCE", "1")
    assert opts()["self_advance"] is True
    assert "self_advance" not in opts(self_advance=False)
    monkeypatch.setenv("SYNCOPATE_SELF_ADVANCE", "0")
    assert "self_advance" not in opts()
    assert opts(self_advance="auto")["self_advance"] == "auto"
    monkeypatch.setenv("SYNCOPATE_SELF_ADVANCE", "auto")
    assert opts()["self_advance"] == "auto"
    monkeypatch.setenv("SYNCOPATE_SELF_ADVANCE", "yes")
    with pytest.raises(LaunchError, match="SYNCOPATE_SELF_ADVANCE='yes'"):
        opts()
    monkeypatch.delenv("SYNCOPATE_SELF_ADVANCE")
    with pytest.raises(CompileError, match="self_advance='sometimes'"):
        opts(self_advance="sometimes")
