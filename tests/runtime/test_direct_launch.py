"""Direct launches (``syncopate.runtime.direct_launch``): the parameter packing against Triton's
own launcher source for real compiled kernels (a fused kernel, the local TMA and pointer GEMMs,
the sync kernels), and the launch call itself with the driver faked.

CPU only: the kernels are compiled for sm_90 here; ``cuLaunchKernel`` is a recording fake.
"""

from __future__ import annotations

import ctypes
import re
import types

import pytest

torch = pytest.importorskip("torch")
triton = pytest.importorskip("triton")

from runtime_fakes import (LAUNCH_T, FakeDriver as _FakeDriver,  # noqa: E402
                           FakeTensor as _FakeTensor, fake_ck as _fake_ck,
                           install_driver, require_fastlaunch, signature)
from syncopate.runtime import _cuda, direct_launch  # noqa: E402

_C_TYPES = {"CUdeviceptr": ctypes.c_uint64, "int8_t": ctypes.c_int8, "int16_t": ctypes.c_int16,
            "int32_t": ctypes.c_int32, "int64_t": ctypes.c_int64, "uint8_t": ctypes.c_uint8,
            "uint16_t": ctypes.c_uint16, "uint32_t": ctypes.c_uint32,
            "uint64_t": ctypes.c_uint64}


def _triton_params(ck) -> list[tuple[type, int | str]]:
    """What Triton's generated launcher passes to ``cuLaunchKernelEx`` for ``ck``, read from
    the C source Triton builds for it: ``[(ctype, argument index or scratch name)]``."""
    from triton.backends.nvidia.driver import make_launcher
    src = ck.src
    constants = {(src.fn.arg_names.index(k),) if isinstance(k, str) else k: v
                 for k, v in getattr(src, "constants", {}).items()}
    c = make_launcher(constants, dict(src.signature), getattr(ck.metadata, "tensordesc_meta", None))
    decl = re.search(r"static void _launch\(([^)]*)\)", c).group(1)
    ctype_of = {m.group(2): _C_TYPES[m.group(1)]
                for m in re.finditer(r"(\w+) (arg\d+)", decl)}
    params = re.search(r"void \*params\[\] = \{([^}]*)\}", c).group(1)
    out = []
    for p in (x.strip().lstrip("&") for x in params.split(",")):
        if p.startswith("arg"):
            out.append((ctype_of[p], int(p[3:])))
        else:
            out.append((ctypes.c_uint64, p))
    return out


def _values(ck):
    """One call's positional arguments for ``ck``: a fake tensor per pointer, distinct ints."""
    vals = []
    for i, ty in enumerate(ck.src.signature.values()):
        if ty == "constexpr":
            vals.append(None)  # not passed to the kernel: its value does not matter here
        elif ty.startswith("*"):
            vals.append(_FakeTensor(0x7f0000000000 + 256 * i))
        else:
            vals.append(i + 3)
    return vals


def _compiled_kernels():
    """(name, CompiledKernel) for kernels of different styles, compiled for sm_90."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
    from syncopate.runtime import sync_kernels as sk
    target = GPUTarget("cuda", 90, 32)
    out = []
    for name in ("matmul_tma_persistent_kernel", "matmul_ptr_kernel"):
        cfg = default_config(1024, 1024, 1024, "bf16", "tma" if "tma" in name else "ptr")
        sig, cx = compile_args(name, "bf16", cfg)
        src = ASTSource(fn=kernel_fn(name), signature=sig, constexprs=cx,
                        attrs=compile_attrs(name))
        out.append((name, triton.compile(src, target=target, options=cfg.options())))
    wait_sig = {"base_addr": "i64", "first_index": "i32", "target": "i64", "diag_addr": "i64",
                "rank": "i32", "kind": "i32", "epoch": "i32", "timeout_ns": "i64",
                "FLAG64": "constexpr", "TRAP": "constexpr"}
    out.append(("wait", triton.compile(
        ASTSource(fn=sk._wait_kernel, signature=wait_sig, constexprs={"FLAG64": False,
                                                                      "TRAP": True}),
        target=target, options=dict(num_warps=1, num_stages=1))))
    out.append(("sum", triton.compile(
        ASTSource(fn=sk._sum_kernel, signature=signature(sk._sum_kernel),
                  constexprs={"DT": triton.language.bfloat16, "BLOCK": sk.SUM_BLOCK}),
        target=target, options=dict(num_warps=1, num_stages=1))))
    return out


def _fused_ag_gemm():
    """The fused sm AG+GEMM (TMA kernel, W = 2): the user's parameters, then the ABI's."""
    import syncopate
    from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
    from syncopate.schedule import all_gather
    name = "matmul_tma_persistent_kernel"
    cfg = default_config(2048, 1024, 1024, "bf16", "tma")
    sig, cx = compile_args(name, "bf16", cfg)
    fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx,
                           schedule=all_gather([2048, 1024], "bf16", 2, split=2),
                           operand="a_ptr", backend="sm", comm_programs=8,
                           attrs=compile_attrs(name), **cfg.options())
    return fc.kernel


@pytest.fixture(scope="module")
def kernels():
    return _compiled_kernels() + [("fused sm ag", _fused_ag_gemm())]


def test_packing_matches_tritons_launcher_for_real_kernels(kernels):
    """Slot for slot -- order, width and the argument each one carries -- the plan is what
    Triton's generated launcher passes, plus its two scratch pointers."""
    for name, ck in kernels:
        plan = direct_launch.plan_params(ck.src.signature, _values(ck))
        mine = [(ct, i) for ct, i, _ in plan] + [(ctypes.c_uint64, "global_scratch"),
                                                  (ctypes.c_uint64, "profile_scratch")]
        assert mine == _triton_params(ck), name
        # constexprs are skipped; a fused kernel keeps its ABI parameters last
        assert len(plan) == sum(t != "constexpr" for t in ck.src.signature.values()), name


@pytest.fixture(params=["ctypes", "compiled"])
def driver(monkeypatch, request):
    """The fake driver, with direct launches on; each test runs on both launch paths: the
    ctypes one and the compiled one (``fastlaunch``)."""
    fake = _FakeDriver()
    install_driver(monkeypatch, fake.symbol, compiled=request.param == "compiled")
    if request.param == "compiled":
        require_fastlaunch()
    fake.path = request.param
    return fake


_SIG = {"a": "*bf16", "M": "i32", "BLOCK": "constexpr", "flag": "i1", "addr": "i64",
        "c": "*bf16", "u": "u32"}


def _read(call, plan_types):
    """The parameter values a launch passed, read through its ``void*[]`` as the GPU would
    (the slots are reused: read them right after the launch)."""
    p = call["params"]
    return [ctypes.cast(p[k], ctypes.POINTER(ct)).contents.value
            for k, ct in enumerate(plan_types)]


def test_a_launch_passes_every_parameter_through_one_driver_call(driver):
    ck = _fake_ck(_SIG)
    a, c = _FakeTensor(0x1000), _FakeTensor(0x2000)
    dl = direct_launch.build(ck, [a, 7, 64, True, -5, c, 2**32 - 1], fixed_scalars=True)
    assert dl is not None and ck.inits  # the module is loaded at build
    assert dl((3, 2, 1), [a, 7, 64, True, -5, c, 2**32 - 1], 77)
    (call,) = driver.calls
    assert call["function"] == 0xF00 and call["grid"] == (3, 2, 1)
    assert call["block"] == (128, 1, 1) and call["smem"] == 2048 and call["stream"] == 77
    assert call["extra"] is None
    cts = [ctypes.c_uint64, ctypes.c_int32, ctypes.c_int8, ctypes.c_int64, ctypes.c_uint64,
           ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint64]
    assert _read(call, cts) == [0x1000, 7, 1, -5, 0x2000, 2**32 - 1, 0, 0]


def test_tensor_addresses_are_read_each_call_and_fixed_scalars_are_not(driver):
    ck = _fake_ck(_SIG)
    vals = [_FakeTensor(0x1000), 7, 64, False, 1, _FakeTensor(0x2000), 0]
    dl = direct_launch.build(ck, vals, fixed_scalars=True)
    # a fresh output tensor each call (the fast path's key allows it); the scalars are the
    # key's, so a different one here must not be read
    dl((1, 1, 1), [_FakeTensor(0x1000), 999, 64, False, 1, _FakeTensor(0x3000), 0], 5)
    cts = [ctypes.c_uint64, ctypes.c_int32]
    got = _read(driver.calls[0], cts + [ctypes.c_int8, ctypes.c_int64, ctypes.c_uint64])
    assert got == [0x1000, 7, 0, 1, 0x3000]
    # without fixed scalars every parameter is read again, range-checked like Triton's parser
    dl2 = direct_launch.build(ck, vals, fixed_scalars=False)
    dl2((1, 1, 1), [None, 999, 64, True, 1 << 40, 0x4000, 5], 5)
    assert _read(driver.calls[1], [ctypes.c_uint64, ctypes.c_int32, ctypes.c_int8,
                                   ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint32]) == \
        [0, 999, 1, 1 << 40, 0x4000, 5]
    with pytest.raises(OverflowError, match="argument 1"):
        dl2((1, 1, 1), [None, 1 << 31, 64, True, 1, 0, 0], 5)
    with pytest.raises(TypeError, match="argument 4"):
        dl2((1, 1, 1), [None, 1, 64, True, 1.5, 0, 0], 5)
    assert len(driver.calls) == 2


def test_empty_grid_enqueues_nothing_and_driver_errors_are_typed(driver):
    ck = _fake_ck(_SIG)
    vals = [None, 1, 64, False, 1, None, 0]
    dl = direct_launch.build(ck, vals, fixed_scalars=True)
    assert dl((0, 1, 1), vals, 5) and not driver.calls
    driver.rc = 201  # no current context on this thread: the caller launches through Triton
    assert dl((1, 1, 1), vals, 5) is False
    driver.rc = 700
    with pytest.raises(_cuda.DriverError, match="700"):
        dl((1, 1, 1), vals, 5)


def test_global_scratch_is_one_buffer_per_stream_grown_for_the_grid(driver, monkeypatch):
    """Device-side TMA descriptors: each launch gets ``programs x size`` bytes of scratch,
    reused by later launches on the same stream (they run after it), separate per stream."""
    allocs = []

    class Buf:
        def __init__(self, n):
            self.n, self.addr = n, 0x9000 + 0x1000 * len(allocs)
            allocs.append(n)

        def numel(self):
            return self.n

        def data_ptr(self):
            return self.addr

    monkeypatch.setattr(direct_launch, "_allocate_scratch", lambda stream, n, device: Buf(n))
    ck = _fake_ck(_SIG, scratch=128)
    vals = [None, 1, 64, False, 1, None, 0]
    dl = direct_launch.build(ck, vals, fixed_scalars=True)
    scratch = []
    for programs, stream in ((4, 5), (4, 5), (2, 5), (8, 5), (4, 6)):
        dl((programs, 1, 1), vals, stream)
        scratch.append(_read(driver.calls[-1], [ctypes.c_uint64] * 7)[-1])  # as launched
    assert allocs == [512, 1024, 512]
    assert scratch == [0x9000, 0x9000, 0x9000, 0xA000, 0xB000]


def test_scratch_is_allocated_on_the_launch_device_and_stream(monkeypatch):
    """No device given (the local GEMM's launches): the current CUDA device, never torch's
    default device (the CPU: a host address handed to the kernel faults)."""
    seen = {}

    class Ext:
        def __init__(self, stream, device=None):
            seen["stream"], seen["stream_device"] = stream, device

    monkeypatch.setattr(torch.cuda, "ExternalStream", Ext)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: __import__("contextlib").nullcontext())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 3)
    monkeypatch.setattr(torch, "empty", lambda n, dtype, device: seen.setdefault("empty",
                                                                                 (n, device)))
    direct_launch._allocate_scratch(77, 4096, None)
    assert seen["empty"] == (4096, torch.device("cuda", 3))
    assert (seen["stream"], seen["stream_device"]) == (77, torch.device("cuda", 3))


@pytest.mark.parametrize("what, kw, sig", [
    ("clusters", dict(num_ctas=2), _SIG),
    ("cooperative", dict(launch_cooperative_grid=True), _SIG),
    ("pdl", dict(launch_pdl=True), _SIG),
    ("profiler", dict(profile_scratch_size=64), _SIG),
    ("descriptors", dict(tensordesc_meta=[{}]), _SIG),
    ("float scalar", {}, {**_SIG, "u": "fp32"}),
    ("tensordesc", {}, {**_SIG, "u": "tensordesc<bf16[64, 64]>"}),
    ("tuple", {}, {**_SIG, "u": ("i32", "i32")}),
])
def test_what_it_cannot_pack_stays_on_tritons_launcher(driver, what, kw, sig):
    ck = _fake_ck(sig, **kw)
    assert direct_launch.build(ck, [None, 1, 64, False, 1, None, 0], fixed_scalars=True) is None


def test_arguments_triton_would_refuse_stay_on_tritons_launcher(driver):
    """A value the packing cannot carry is left to Triton's launcher, which raises its own
    error: never packed wrongly."""
    ck = _fake_ck(_SIG)
    assert direct_launch.build(ck, [None, 1 << 31, 64, False, 1, None, 0],
                               fixed_scalars=True) is None
    assert direct_launch.build(ck, [None, 1.0, 64, False, 1, None, 0], fixed_scalars=True) is None
    assert direct_launch.build(ck, [object(), 1, 64, False, 1, None, 0],
                               fixed_scalars=True) is None
    assert direct_launch.build(ck, [None, 1], fixed_scalars=True) is None  # wrong arity


def test_switched_off_by_environment_or_without_a_driver(driver, monkeypatch):
    ck = _fake_ck(_SIG)
    vals = [None, 1, 64, False, 1, None, 0]
    monkeypatch.setenv("SYNCOPATE_DIRECT_LAUNCH", "0")
    assert direct_launch.build(ck, vals, fixed_scalars=True) is None
    monkeypatch.delenv("SYNCOPATE_DIRECT_LAUNCH")  # on by default
    assert direct_launch.build(ck, vals, fixed_scalars=True) is not None
    monkeypatch.setenv("SYNCOPATE_DIRECT_LAUNCH", "1")
    monkeypatch.setattr(_cuda, "available", lambda: False)
    assert direct_launch.build(ck, vals, fixed_scalars=True) is None


def test_the_fused_kernel_launches_directly_from_its_second_launch_of_a_layout(driver,
                                                                               monkeypatch):
    """``Launcher.run_kernel``: the layout's first launch (``direct`` None) goes through
    Triton's launcher; later ones through one driver call; launch hooks or a thread without a
    context step back to Triton's launcher for that launch."""
    from triton import knobs

    from syncopate.runtime.launchers.base import Launcher
    triton_launches = []

    class CK:
        metadata = _fake_ck(_SIG).metadata
        packed_metadata = _fake_ck(_SIG).packed_metadata
        src = types.SimpleNamespace(signature=_SIG)
        function = 0xF00

        def _init_handles(self):
            pass

        def __getitem__(self, grid):
            return lambda *a, stream: triton_launches.append((grid, a, stream))

    cfg = types.SimpleNamespace(compiled=types.SimpleNamespace(kernel=CK()))
    stream = types.SimpleNamespace(cuda_stream=42, device=None)
    L = Launcher(fk=None)
    args = [_FakeTensor(0x1000), 7, 64, False, 1, _FakeTensor(0x2000), 10_000]
    L.run_kernel(cfg, (2, 1, 1), args, stream, None)
    assert len(triton_launches) == 1 and not driver.calls
    direct = {}
    L.run_kernel(cfg, (2, 1, 1), args, stream, direct)
    L.run_kernel(cfg, (2, 1, 1), args, stream, direct)
    assert len(driver.calls) == 2 and len(triton_launches) == 1
    assert list(direct) == [((2, 1, 1), 10_000)]  # per grid and watchdog timeout
    hook = lambda md: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)  # a profiler's hook (a HookChain in 3.6)
    try:
        L.run_kernel(cfg, (2, 1, 1), args, stream, direct)
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert len(triton_launches) == 2 and len(driver.calls) == 2
    driver.rc = 201
    L.run_kernel(cfg, (2, 1, 1), args, stream, direct)
    assert len(triton_launches) == 3 and len(driver.calls) == 3


def test_sync_kernels_launch_directly(driver, monkeypatch):
    """The wait / signal / add / advance kernels: one DirectLaunch per compiled variant, every
    argument read at each launch (they change: targets, epochs)."""
    from syncopate.runtime import sync_kernels as sk
    wait_sig = {"base_addr": "i64", "first_index": "i32", "target": "i64", "diag_addr": "i64",
                "rank": "i32", "kind": "i32", "epoch": "i32", "timeout_ns": "i64",
                "FLAG64": "constexpr", "TRAP": "constexpr"}
    ck = _fake_ck(wait_sig, num_warps=1)

    class Jit:
        def warmup(self, *a, **kw):
            return ck

    class Stream:
        cuda_stream = 1234

    monkeypatch.setattr(sk, "_COMPILED", {})
    monkeypatch.setattr(sk, "_DIRECT", {})
    monkeypatch.setattr(sk, "_wait_kernel", Jit())
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    for e in (1, 2):
        sk.wait_flag(4096, 3, e, 8192, rank=1, kind=2, epoch=e, timeout_ns=10, count=2)
    assert len(driver.calls) == 2 and len(sk._DIRECT) == 1
    c = driver.calls[1]
    assert c["grid"] == (2, 1, 1) and c["block"] == (32, 1, 1) and c["stream"] == 1234
    i64, i32 = ctypes.c_int64, ctypes.c_int32
    assert _read(c, [i64, i32, i64, i64, i32, i32, i32, i64]) == [4096, 3, 2, 8192, 1, 2, 2, 10]


def test_launch_hooks_count_only_when_a_chain_holds_one():
    """Triton 3.6's hooks are chains that are never None; an older-style callable counts."""
    from triton.knobs import HookChain
    assert not direct_launch._hook_set(None)
    chain = HookChain()
    assert not direct_launch._hook_set(chain)
    chain.add(print)
    assert direct_launch._hook_set(chain)
    assert direct_launch._hook_set(lambda md: None)


@pytest.mark.parametrize("path", ["ctypes", "compiled"])
def test_threads_sharing_a_direct_launch_never_launch_each_others_arguments(monkeypatch, path):
    """One DirectLaunch serves every thread of the process (the sync kernels' and the local
    GEMM's caches are per process; loopback ranks are threads): its slots are shared, so the
    refresh and the driver call must be one critical section. The fake driver reads the
    parameters as the driver would, and yields the GIL in between (as ctypes does around a
    foreign call; the real driver called from the compiled path would not)."""
    import sys
    import threading
    import time
    seen = []

    def launch(function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        time.sleep(0)
        p = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        got = [ctypes.cast(p[k], ctypes.POINTER(ctypes.c_int64)).contents.value
               for k in range(2)]
        seen.append((stream, got))
        return 0

    drv = LAUNCH_T(launch)
    monkeypatch.setattr(_cuda, "available", lambda: True)
    monkeypatch.setattr(_cuda, "_BOUND", {})
    monkeypatch.setattr(_cuda, "_symbol", lambda *names: drv if "cuLaunchKernel" in names
                        else None)
    monkeypatch.setenv("SYNCOPATE_FAST_LAUNCH", "1" if path == "compiled" else "0")
    monkeypatch.setenv("SYNCOPATE_DIRECT_LAUNCH", "1")
    ck = _fake_ck({"a": "i64", "b": "i64"}, num_warps=1)
    dl = direct_launch.build(ck, [0, 0], fixed_scalars=False)
    assert (dl._c is not None) == (path == "compiled")
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        def rank(r):
            for i in range(300):
                dl((1, 1, 1), [r, r * 1000 + i], r)
        threads = [threading.Thread(target=rank, args=(r,)) for r in (1, 2, 3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert len(seen) == 900
    wrong = [(s, got) for s, got in seen if got[0] != s or got[1] // 1000 != s]
    assert not wrong, f"{len(wrong)} launches carried another thread's arguments: {wrong[:3]}"


def test_the_compiled_path_enqueues_a_staging_copy_with_the_launch(driver):
    """``copy=(dst, src, nbytes, after)``: one ``cuMemcpyDtoDAsync`` on the launch's stream,
    before the kernel (an all-gather's staging) or after it (a reduce-scatter's result); its
    errors are typed and say which call failed; with no context nothing is enqueued."""
    ck = _fake_ck(_SIG)
    vals = [_FakeTensor(0x1000), 7, 64, False, 1, _FakeTensor(0x2000), 0]
    dl = direct_launch.build(ck, vals, fixed_scalars=True)
    if driver.path == "ctypes":
        assert not dl.copies
        with pytest.raises(ValueError, match="compiled launch path"):
            dl((1, 1, 1), vals, 5, copy=(0x5000, _FakeTensor(0x6000), 64, False))
        assert not driver.calls
        return
    assert dl.copies
    assert dl((2, 1, 1), vals, 5, copy=(0x5000, _FakeTensor(0x6000), 64, False))
    assert dl((2, 1, 1), vals, 9, copy=(_FakeTensor(0x7000), 0x8000, 32, True))
    assert driver.events == ["copy", "launch", "launch", "copy"]
    assert driver.copies == [(0x5000, 0x6000, 64, 5), (0x7000, 0x8000, 32, 9)]
    driver.copy_rc = 700
    with pytest.raises(_cuda.DriverError, match="cuMemcpyDtoDAsync failed .* 700"):
        dl((2, 1, 1), vals, 5, copy=(0x5000, 0x6000, 64, False))
    assert driver.events[-1] == "copy"  # the kernel was not launched after a failed copy
    driver.copy_rc = 201
    assert dl((2, 1, 1), vals, 5, copy=(0x5000, 0x6000, 64, False)) is False
    driver.copy_rc, driver.rc = 0, 700
    with pytest.raises(_cuda.DriverError, match="cuLaunchKernel failed .* 700"):
        dl((2, 1, 1), vals, 5, copy=(0x5000, 0x6000, 64, False))
    driver.rc = 201  # the copy went in first: a launch without context is an error then
    with pytest.raises(_cuda.DriverError, match="cuLaunchKernel failed .* 201"):
        dl((2, 1, 1), vals, 5, copy=(0x5000, 0x6000, 64, False))
    assert dl((2, 1, 1), vals, 5, copy=(0x5000, 0x6000, 64, True)) is False  # copy after


def test_the_compiled_path_refuses_what_ctypes_refuses(driver):
    """Range and type checks of refreshed scalars, and addresses, raise before anything is
    enqueued; an unsigned 64-bit parameter takes its whole range and the signed negatives."""
    ck = _fake_ck({"a": "*bf16", "u": "u64", "s": "i16"})
    dl = direct_launch.build(ck, [None, 0, 0], fixed_scalars=False)
    assert dl((1, 1, 1), [None, 2**64 - 1, -(2**15)], 3)
    assert _read(driver.calls[-1], [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int16]) == \
        [0, 2**64 - 1, -(2**15)]
    assert dl((1, 1, 1), [None, -1, 2**15 - 1], 3)
    assert _read(driver.calls[-1], [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int16]) == \
        [0, 2**64 - 1, 2**15 - 1]
    for bad, err in (([None, 2**64, 0], OverflowError), ([None, 0, 2**15], OverflowError),
                     ([None, -(2**63) - 1, 0], OverflowError), ([None, 1.0, 0], TypeError),
                     ([object(), 0, 0], AttributeError), ([-1, 0, 0], OverflowError)):
        n = len(driver.calls)
        with pytest.raises(err):
            dl((1, 1, 1), bad, 3)
        assert len(driver.calls) == n, bad


def _stager_ck(n_type="i32"):
    """What sync_kernels._stage_kernel compiles to: (dst, src, n, BLOCK), function 0x57A6."""
    ck = _fake_ck({"dst": "*i64", "src": "*i64", "n": n_type, "BLOCK": "constexpr"})
    ck.function = 0x57A6
    return ck


def test_the_compiled_path_stages_through_a_copy_kernel_where_it_fits(driver):
    """``Launch.set_stager``: a copy that is 16-byte aligned and a multiple of 128 bytes is the
    staging kernel's launch (dst, src, word count; grid = the words' steps, at most the
    programs), before the kernel or after it; any other copy stays a ``cuMemcpyDtoDAsync``;
    the stager's launch errors are the copy's."""
    ck = _fake_ck(_SIG)
    vals = [_FakeTensor(0x1000), 7, 64, False, 1, _FakeTensor(0x2000), 0]
    dl = direct_launch.build(ck, vals, fixed_scalars=True)
    st = direct_launch.build(_stager_ck(), [0, 0, 16, 2048], fixed_scalars=False)
    dl.use_stager((st._c, 8, 2048))
    if driver.path == "ctypes":  # no compiled path: no stager, and copies stay refused
        with pytest.raises(ValueError, match="compiled launch path"):
            dl((2, 1, 1), vals, 5, copy=(0x10000, 0x90000, 4096, False))
        assert not driver.calls
        return
    nbytes = 2048 * 8 * 3 + 128  # 3 steps and a bit: 4 programs
    assert dl((2, 1, 1), vals, 5, copy=(0x10000, _FakeTensor(0x90000), nbytes, False))
    assert driver.events == ["launch", "launch"] and not driver.copies
    first, main = driver.calls[-2:]
    assert first["function"] == 0x57A6 and first["grid"] == (4, 1, 1) and first["stream"] == 5
    assert _read(first, [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int32]) == \
        [0x10000, 0x90000, nbytes // 8]
    assert main["function"] == 0xF00
    big = 2048 * 8 * 100  # more steps than programs: the grid stops at the programs
    assert dl((2, 1, 1), vals, 9, copy=(0x10000, 0x90000, big, True))
    assert [c["function"] for c in driver.calls[-2:]] == [0xF00, 0x57A6]
    assert driver.calls[-1]["grid"] == (8, 1, 1)
    for dst, src, n in ((0x10008, 0x90000, 4096), (0x10000, 0x90004, 4096),
                        (0x10000, 0x90000, 4096 + 64)):  # misaligned, or not 128-byte whole
        assert dl((2, 1, 1), vals, 5, copy=(dst, src, n, False))
        assert driver.copies[-1] == (dst, src, n, 5) and driver.events[-2:] == ["copy", "launch"]
    # an i32 word count with no room for a step past the copy: a memcpy
    huge = (2**31 - 1 - 8 * 2048 + 16) * 8
    assert dl((2, 1, 1), vals, 5, copy=(0x10000, 0x90000, huge - huge % 128, False))
    assert driver.events[-2:] == ["copy", "launch"]
    driver.rc = 700  # the stager's launch failing is the copy failing: nothing else enqueued
    n = len(driver.calls)
    with pytest.raises(_cuda.DriverError, match="cuMemcpyDtoDAsync failed .* 700"):
        dl((2, 1, 1), vals, 5, copy=(0x10000, 0x90000, 4096, False))
    assert len(driver.calls) == n + 1
    driver.rc = 0
    dl.use_stager(None)
    assert dl((2, 1, 1), vals, 5, copy=(0x10000, 0x90000, 4096, False))
    assert driver.events[-2:] == ["copy", "launch"]


def test_a_stager_must_take_dst_src_and_a_count(driver):
    dl = direct_launch.build(_fake_ck(_SIG), [_FakeTensor(0x1000), 7, 64, False, 1,
                                              _FakeTensor(0x2000), 0], fixed_scalars=True)
    if driver.path == "ctypes":  # nothing to set a stager on: use_stager does nothing
        assert dl._c is None
        dl.use_stager(None)
        return
    bad = direct_launch.build(_fake_ck({"a": "*i64", "n": "i32"}), [0, 16], fixed_scalars=False)
    with pytest.raises(ValueError, match="dst pointer, src pointer"):
        dl.use_stager((bad._c, 8, 2048))
    st = direct_launch.build(_stager_ck(), [0, 0, 16, 2048], fixed_scalars=False)
    with pytest.raises(ValueError, match="multiple of 16"):
        dl.use_stager((st._c, 8, 100))
    with pytest.raises(TypeError, match="must be a Launch"):
        dl._c.set_stager(object(), 8, 2048)


def test_the_device_getter_is_torchs_builtin_where_there_is_one(monkeypatch):
    """The bound path keeps ``fastlaunch.device_getter()`` and calls it per launch: torch's
    builtin itself on a CUDA build (no Python frame in between), else ``current_device``,
    which asks ``torch.cuda.current_device`` at every call (a patch made later still counts)."""
    import os

    import torch

    from syncopate.runtime import fastlaunch
    monkeypatch.setattr(fastlaunch, "_RAW", [None, None])
    monkeypatch.setattr(torch._C, "_cuda_getDevice", os.getpid, raising=False)
    assert fastlaunch.device_getter() is os.getpid
    monkeypatch.setattr(fastlaunch, "_RAW", [None, None])
    monkeypatch.setattr(torch._C, "_cuda_getDevice", lambda: 9)  # not a builtin: a stand-in
    get = fastlaunch.device_getter()
    assert get is fastlaunch.current_device
    monkeypatch.delattr(torch._C, "_cuda_getDevice")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 4)
    assert get() == 4
