"""The backend registry (python/syncopate/backends, docs/backends.md): each backend object owns
its flag type, grid, pipeline tail, defaults and option checks, and a new backend is one
module plus a registry line. CPU only, no torch needed."""

from __future__ import annotations

import pytest

from syncopate import abi, backends
from syncopate.backends import base
from syncopate.errors import CompileError, LaunchError


def test_registry_lists_the_backends_and_abi_derives_from_it():
    assert backends.names() == ("sm", "ce", "nvshmem") == abi.BACKENDS
    assert backends.get("ce") is backends.get(backends.get("ce"))
    with pytest.raises(CompileError, match="unknown backend 'tpu'; choose one of sm, ce, nvshmem"):
        backends.get("tpu")
    with pytest.raises(LaunchError, match="x: unknown backend"):
        backends.get("tpu", LaunchError, context="x: ")


def test_each_backend_owns_its_abi_facts():
    sm, ce, nv = (backends.get(n) for n in ("sm", "ce", "nvshmem"))
    assert (sm.flag_type, ce.flag_type, nv.flag_type) == ("*i32", "*i32", "*i64")
    assert dict(abi.extra_params("nvshmem"))["syn_flags"] == "*i64"
    assert sm.launch_grid((10, 2, 1), 4) == (14, 2, 1) and ce.launch_grid((10, 2, 1), 4) == (10, 2, 1)
    assert (sm.chunk_writers(4), ce.chunk_writers(4), sm.chunk_writers(0)) == (4, 1, 1)
    assert (sm.signals_entry, ce.signals_entry, nv.signals_entry) == (True, False, True)


def test_pipeline_asks_the_backend_for_its_tail():
    from syncopate_mlir.pipeline import pass_names
    # structurize-returns first (the later passes take the kernel as one block)
    head = ["structurize-returns", "check-accesses", "append-abi-params", "tile-remap",
            "insert-waits", "insert-signals"]
    # insert-trace (a no-op unless trace=True), then load-epoch (ABI 3: the epoch is read from
    # device memory) and self-advance-epoch (a no-op when self_advance is off) close every
    # pipeline
    tail = ["insert-trace", "load-epoch", "self-advance-epoch"]
    assert pass_names("sm") == head + ["partition-sms", "resolve-chunks", "lower-sm"] + tail
    assert pass_names("nvshmem") == (head + ["partition-sms", "resolve-chunks", "lower-nvshmem"]
                                     + tail)
    assert pass_names("ce", "epilogue") == head + ["insert-epilogue-reduce", "resolve-chunks",
                                                   "lower-ce"] + tail


def test_option_checks_and_defaults():
    from syncopate.compiler import DEFAULT_COMM_PROGRAMS
    assert DEFAULT_COMM_PROGRAMS == {"sm": 16, "ce": 0, "nvshmem": 16}
    sm, ce = backends.get("sm"), backends.get("ce")
    assert (sm.check_options(), sm.check_options(comm_programs=3), ce.check_options(comm_programs=9)) \
        == (16, 3, 0)
    with pytest.raises(CompileError, match="needs comm_programs >= 1"):
        sm.check_options(comm_programs=0)
    with pytest.raises(CompileError, match="reduce='epilogue' is implemented for backend='ce'"):
        sm.check_options(reduce="epilogue")
    with pytest.raises(CompileError, match="choose 'comm' or 'epilogue'"):
        ce.check_options(reduce="sum")
    with pytest.raises(CompileError, match="ce backend withholds at run time"):
        ce.check_options(withhold_chunks=(1,))
    assert sm.check_options(withhold_chunks=(1,)) == 16


def test_a_new_backend_is_one_class_and_a_registry_line(monkeypatch):
    """What docs/backends.md promises: a TMA-copy backend (say) registered next to the others is
    known to the ABI's helpers, the pipeline and the option checks without touching them."""
    from syncopate_mlir.pipeline import pass_names

    class TmaCopy(base.Backend):
        name = "tma"
        has_comm_programs = True
        default_comm_programs = 4
        pre_resolve_passes = ("partition-sms",)

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    backends.register(TmaCopy())
    assert "tma" in backends.names()
    assert abi.extra_params("tma")[0] == ("syn_flags", "*i32")
    assert abi.FusedABI("tma", 2, 4, 4, "push").grid((8,)) == (12, 1, 1)
    assert pass_names("tma")[-4:] == ["lower-tma", "insert-trace", "load-epoch",
                                      "self-advance-epoch"]
    assert backends.get("tma").check_options() == 4
    with pytest.raises(ValueError, match="taken"):
        backends.register(TmaCopy())


def test_importing_the_abi_and_the_registry_stays_light():
    import subprocess
    import sys
    code = ("import sys, syncopate.abi, syncopate.backends; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'triton'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_sm_and_nvshmem_launchers(monkeypatch):
    """sm: ENTRY from the host only when the kernel does not publish it, then the kernel on the
    given stream; nvshmem: the same after NVSHMEM's module init, once per configuration."""
    pytest.importorskip("triton")
    from types import SimpleNamespace

    from syncopate.backends import nvshmem
    from syncopate.runtime import sync_kernels as sk
    seen = []
    monkeypatch.setattr(sk, "signal_entry", lambda peers, idx, e, W, flag64, stream:
                        seen.append(("entry", peers, idx, e, W, flag64)))
    monkeypatch.setattr(nvshmem, "nvshmem_module_init", lambda ck: seen.append(("init",)))

    class Ck:
        metadata = SimpleNamespace()

        def __getitem__(self, grid):
            return lambda *args, stream: seen.append(("kernel", grid, args, stream))
    fk = SimpleNamespace(comm=SimpleNamespace(rank=1, world_size=2), test_skip_entry=False)
    S = SimpleNamespace(cuda_stream=7)
    for name, signals in (("sm", False), ("sm", True), ("nvshmem", False)):
        a = abi.FusedABI(name, 2, 4, 4, "push", signals_entry=signals)
        cfg = SimpleNamespace(abi=a, compiled=SimpleNamespace(kernel=Ck()), host={})
        launcher = backends.get(name).launcher(fk)
        for e in (1, 2):
            launcher.launch(cfg, (12, 1, 1), ["x"], S, e, "peers", None)
    assert seen == [("entry", "peers", 5, 1, 2, False), ("kernel", (12, 1, 1), ("x",), 7),
                    ("entry", "peers", 5, 2, 2, False), ("kernel", (12, 1, 1), ("x",), 7),
                    ("kernel", (12, 1, 1), ("x",), 7), ("kernel", (12, 1, 1), ("x",), 7),
                    ("entry", "peers", 5, 1, 2, True), ("init",), ("kernel", (12, 1, 1), ("x",), 7),
                    ("entry", "peers", 5, 2, 2, True), ("kernel", (12, 1, 1), ("x",), 7)]
