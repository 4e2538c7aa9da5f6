"""The sync kernels (wait / signal / add, syncopate.runtime.sync_kernels): their PTX through
ptxas (acquire/release widths, watchdog, trap), and launches of the compiled kernels with
every parameter in position.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from runtime_fakes import signature  # noqa: E402


def _compile(fn, sig, cx):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1, num_stages=1))


_WAIT_SIG = {"base_addr": "i64", "first_index": "i32", "target": "i64", "diag_addr": "i64",
             "rank": "i32", "kind": "i32", "epoch": "i32", "timeout_ns": "i64",
             "FLAG64": "constexpr", "TRAP": "constexpr"}


@pytest.mark.parametrize("flag64", [False, True])
@pytest.mark.parametrize("trap", [False, True])
def test_wait_kernel_compiles_with_watchdog(flag64, trap):
    from syncopate.runtime import sync_kernels as sk
    ck = _compile(sk._wait_kernel, _WAIT_SIG, {"FLAG64": flag64, "TRAP": trap})
    ptx = ck.asm["ptx"]
    width = "b64" if flag64 else "b32"
    assert f"ld.acquire.sys.global.{width}" in ptx and "%globaltimer" in ptx
    assert f"sub.s{width[1:]}" in ptx  # serial-number compare (flags may wrap)
    assert "atom.acq_rel.sys.global.cas.b32" in ptx and "fence.sc.sys" in ptx
    # the epoch word (offset 28) is written last, with release
    assert ptx.index("fence.sc.sys") < ptx.index("st.release.sys.global.b32")
    assert ("trap;" in ptx) == trap
    assert len(ck.asm["cubin"]) > 0


@pytest.mark.parametrize("flag64", [False, True])
def test_signal_and_add_kernels_compile(flag64):
    from syncopate.runtime import sync_kernels as sk
    w = "b64" if flag64 else "b32"
    ck = _compile(sk._signal_all_kernel, {"peers_addr": "i64", "index": "i32", "value": "i64",
                                          "world_size": "i32", "FLAG64": "constexpr"},
                  {"FLAG64": flag64})
    assert f"st.release.sys.global.{w}" in ck.asm["ptx"] and "%tid.x" in ck.asm["ptx"]
    ck = _compile(sk._add_kernel, {"addr": "i64", "value": "i64", "FLAG64": "constexpr"},
                  {"FLAG64": flag64})
    assert "red.release.sys.global.add" in ck.asm["ptx"]


@pytest.mark.parametrize("trap", [False, True])
def test_the_enter_kernel_signals_from_one_program_then_every_program_spins(trap):
    """The ENTRY handshake in one launch (ce): program 0's thread 0 stores ENTRY[me] on every
    rank with release after a system fence; every program then spins with the watchdog. With
    ``pre_count``, program 0 spins first (the deferred CONSUMED wait): two spins, one before
    the signal."""
    from syncopate.runtime import sync_kernels as sk
    sig = signature(sk._enter_kernel)
    assert list(sig)[:12] == ["peers_addr", "entry_index", "value", "world_size", *[
        k for k in _WAIT_SIG if k not in ("FLAG64", "TRAP")]]
    ck = _compile(sk._enter_kernel, sig, {"FLAG64": False, "TRAP": trap})
    ptx = ck.asm["ptx"]
    assert "%ctaid.x" in ptx  # the signal is program 0's
    store = ptx.index("@sy_p st.release.sys.global.b32")
    assert ptx.index("fence.sc.sys") < store < ptx.rindex("ld.acquire.sys.global.b32")
    assert ptx.count("ld.acquire.sys.global.b32") == 2
    assert ptx.index("ld.acquire.sys.global.b32") < store  # the pre wait, before the signal
    assert "%globaltimer" in ptx and ("trap;" in ptx) == trap
    assert list(ck.src.signature) == list(sig)


def test_advance_kernel_increments_the_word_once_and_mirrors_it():
    """The device epoch advance (docs/cuda-graphs.md): one predicated thread loads the word,
    adds 1, stores it back and stores the same value to the pinned mirror at system scope; no
    atomic is needed because the advance is the word's only writer and runs alone on the
    stream, between the previous launch and the next."""
    from syncopate.runtime import sync_kernels as sk
    ck = _compile(sk._advance_kernel, {"word_addr": "i64", "mirror_addr": "i64"}, {})
    ptx = ck.asm["ptx"]
    ld = ptx.index("@sy_p ld.relaxed.gpu.global.b32")
    add = ptx.index("@sy_p add.s32 sy_e, sy_e, 1")
    st = ptx.index("@sy_p st.relaxed.gpu.global.b32")
    mirror = ptx.index("@sy_p st.relaxed.sys.global.b32")
    assert ld < add < st < mirror and "setp.eq.u32 sy_p, sy_t, 0" in ptx
    assert ptx.count("st.relaxed") == 2 and "atom." not in ptx
    assert len(ck.asm["cubin"]) > 0


def test_sync_kernels_launch_compiled_kernels_directly(monkeypatch):
    """Each sync kernel compiles once per device and constexpr set (through the JIT's warmup)
    and is then launched as a CompiledKernel with every parameter in position, on the given
    stream (no JIT binding per launch)."""
    from syncopate.runtime import sync_kernels as sk
    launches, warmups = [], []

    class FakeCompiled:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            def run(*args, stream=None):
                launches.append((self.name, grid, args, stream))
            return run

    class FakeJit:
        def __init__(self, name):
            self.name = name

        def warmup(self, *args, grid, **kw):
            warmups.append((self.name, grid, kw))
            return FakeCompiled(self.name)

    class Stream:
        cuda_stream = 1234

    monkeypatch.setattr(sk, "_COMPILED", {})
    for n in ("_wait_kernel", "_signal_all_kernel", "_add_kernel"):
        monkeypatch.setattr(sk, n, FakeJit(n))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    for e in (1, 2):
        sk.wait_flag(4096, 3, e, 8192, rank=1, kind=2, epoch=e, timeout_ns=10, count=2)
    sk.wait_flag(4096, 3, 1, 8192, rank=1, kind=2, epoch=1, timeout_ns=10, trap=True)
    sk.add_flag(1 << 40, 5, 7, flag64=True, stream=Stream())
    peers = torch.zeros(2, dtype=torch.int64)
    sk.signal_entry(peers, 4, 9, 2)
    assert [w[0] for w in warmups] == ["_wait_kernel", "_wait_kernel", "_add_kernel",
                                       "_signal_all_kernel"]  # once per constexpr set
    assert warmups[0][2] == {"num_warps": 1, "num_stages": 1, "FLAG64": False, "TRAP": False}
    name, grid, args, stream = launches[1]
    assert (name, grid, stream) == ("_wait_kernel", (2, 1, 1), 1234)
    assert args == (4096, 3, 2, 8192, 1, 2, 2, 10, False, False)  # constexprs last, in order
    assert launches[3][2] == ((1 << 40) + 5 * 8, 7, True)
    assert launches[4][2] == (peers.data_ptr(), 4, 9, 2, False) and launches[4][1] == (1, 1, 1)
    sk.wait_flag(0, 0, 1, 0, rank=0, kind=0, epoch=1, timeout_ns=1, count=0)  # nothing to wait
    assert len(launches) == 5


def test_preload_compiles_and_loads_every_variant_once(monkeypatch):
    """Loopback's preload: each sync kernel in each constexpr variant is compiled once (zeros
    for its parameters, one warp) through the cache the launches use, and loaded."""
    import contextlib

    from syncopate.runtime import sync_kernels as sk
    warmups, loads = [], []

    class CK:
        def __init__(self, name):
            self.name = name

        def _init_handles(self):
            loads.append(self.name)

    names = ("_add_kernel", "_signal_all_kernel", "_advance_kernel", "_wait_kernel",
             "_enter_kernel", "_sum_kernel")
    for n in names:
        fn = getattr(sk, n)

        def warmup(*args, grid, _n=n, _fn=fn, **kw):
            assert args == (0,) * sum(not p.is_constexpr for p in _fn.params)
            assert grid == (1,) and kw["num_warps"] == 1
            warmups.append((_n, tuple(sorted((k, str(v)) for k, v in kw.items()))))
            return CK(_n)
        monkeypatch.setattr(fn, "warmup", warmup)
    monkeypatch.setattr(sk, "_COMPILED", {})
    monkeypatch.setattr(sk, "_DIRECT", {})
    monkeypatch.setattr(sk, "_STAGERS", {0: False})  # no staging kernel on this machine
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    sk.preload("cuda:0")
    counts = {n: sum(w[0] == n for w in warmups) for n in names}
    assert counts == {"_add_kernel": 2, "_signal_all_kernel": 2, "_advance_kernel": 1,
                      "_wait_kernel": 4, "_enter_kernel": 4, "_sum_kernel": 3}
    assert len(set(warmups)) == len(warmups) and sorted(loads) == sorted(w[0] for w in warmups)
    sk.preload("cuda:0")  # compiled once; loaded again (a no-op for a loaded module)
    assert len(warmups) == 16 and len(loads) == 32
