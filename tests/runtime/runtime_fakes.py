"""Fakes shared by the runtime's CPU tests (tests/runtime/).

A Communicator whose symmetric memory is one CPU byte buffer per rank behind a fake
rendezvous handle (so registry, peer pointers and peer views are real code on fake memory),
the pointer GEMM kernel and its arguments, small all-gather / reduce-scatter schedules, and
the watchdog record's words.  Importing this module needs torch: test modules call
``pytest.importorskip("torch")`` first.
"""

from __future__ import annotations

import ctypes
import types

import torch

from syncopate import abi
from syncopate.runtime import diag


def diag_words(**kw):
    w = [0] * abi.DIAG_WORDS
    for k, v in kw.items():
        w[getattr(abi, "DIAG_" + k.upper())] = v
    return w


class FakeHandle:
    """Stands in for torch's _SymmetricMemory: every rank's allocation is a CPU byte buffer."""

    def __init__(self, bufs):
        self.bufs = bufs
        self.world_size = len(bufs)

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        b = self.bufs[rank]
        n = 1
        for s in sizes:
            n *= s
        es = torch.empty((), dtype=dtype).element_size()
        return b.view(dtype)[storage_offset: storage_offset + n].view(tuple(sizes)) if es == 1 \
            else b.view(dtype)[storage_offset: storage_offset + n].view(tuple(sizes))


def fake_comm(W=2, rank=0):
    from syncopate.runtime.communicator import Communicator
    c = Communicator.__new__(Communicator)
    c.rank, c.world_size, c.device, c.loopback = rank, W, torch.device("cpu"), False
    c.group_name, c.group, c.symm_backend = "fake", None, "cuda"
    c._allocs, c._closed, c.cache, c._streams, c._fused = {}, False, {}, {}, {}
    c.diag, c.diag_addr = diag.new_record()
    c._diag_state = diag.state_word(c.diag)
    c._rebuild_probes()

    def empty(shape, dtype):
        shape = tuple(shape)
        nbytes = torch.empty(shape, dtype=dtype).numel() * torch.empty((), dtype=dtype).element_size()
        bufs = [torch.zeros(nbytes, dtype=torch.uint8) for _ in range(W)]
        t = bufs[rank].view(dtype).view(shape)
        c._register(t, FakeHandle(bufs))
        return t
    c.empty = empty
    return c


def patch_gemm_op(monkeypatch, mod, *, reference=None, fused_kernel=None):
    """Replace what the generic driver calls for the GEMM op of module ``mod``
    (``syncopate.ops.driver.gemm_op``): its unfused ``reference`` (the op's spec's) and the
    ``fused_kernel`` builder (the driver's, for every GEMM op)."""
    import dataclasses

    from syncopate.ops import driver
    if reference is not None:
        monkeypatch.setattr(mod, "SPEC", dataclasses.replace(
            mod.SPEC, gemm=dataclasses.replace(mod.SPEC.gemm, reference=reference)))
    if fused_kernel is not None:
        monkeypatch.setattr(driver, "fused_kernel", fused_kernel)


def ptr_kernel():
    from syncopate.kernels import matmul_ptr_kernel
    return matmul_ptr_kernel


def ptr_args(M=256, N=128, K=64, dtype=torch.bfloat16):
    a = torch.empty(M, K, dtype=dtype)
    b = torch.empty(K, N, dtype=dtype)
    c = torch.empty(M, N, dtype=dtype)
    return [a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1), 128, 128, 64, 8]


def ag_schedule(W=2, split=1, mode="pull", order="swizzle", shape=(64, 32)):
    from syncopate.schedule.templates import all_gather
    return all_gather(shape, "bf16", W, dim=0, order=order, mode=mode, split=split)


def rs_schedule(W=2, split=1, mode="push", order="swizzle", shape=(64, 32)):
    from syncopate.schedule.templates import reduce_scatter
    return reduce_scatter(shape, "bf16", W, dim=0, order=order, mode=mode, split=split)


def fk_values(c, A, N=32):
    b = torch.empty(A.shape[1], N, dtype=A.dtype)
    out = torch.empty(A.shape[0], N, dtype=A.dtype)
    return [A, b, out, A.shape[0], N, A.shape[1], A.stride(0), A.stride(1), b.stride(0),
            b.stride(1), out.stride(0), out.stride(1), 128, 128, 64, 8]


# -- the CUDA driver, faked (direct and bound launches) ----------------------------------------

class FakeTensor:
    """Anything with a ``data_ptr()``, as Triton's launcher accepts."""

    def __init__(self, addr):
        self.addr = addr

    def data_ptr(self):
        return self.addr


LAUNCH_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7,
                             ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
MEMCPY_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                             ctypes.c_void_p)
CAPTURING_T = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int))


class FakeDriver:
    """``cuLaunchKernel`` and ``cuMemcpyDtoDAsync`` as C-callable fakes (``fn``, ``memcpy``):
    the ctypes path calls them through ctypes, the compiled path (``fastlaunch``) through their
    addresses. ``events`` is the order of what was enqueued."""

    def __init__(self, rc=0):
        self.calls, self.copies, self.events, self.rc, self.copy_rc = [], [], [], rc, 0
        self.capture_status, self.capture_rc = 0, 0
        self.fn = LAUNCH_T(self._launch)
        self.memcpy = MEMCPY_T(self._copy)
        self.capturing = CAPTURING_T(self._capturing)

    def _launch(self, function, gx, gy, gz, bx, by, bz, smem, stream, params, extra):
        self.calls.append(dict(function=function, grid=(gx, gy, gz), block=(bx, by, bz),
                               smem=smem, stream=stream or 0,
                               params=ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p)),
                               extra=extra))
        self.events.append("launch")
        return self.rc

    def _copy(self, dst, src, nbytes, stream):
        self.copies.append((dst, src, nbytes, stream or 0))
        self.events.append("copy")
        return self.copy_rc

    def _capturing(self, stream, status):
        status[0] = self.capture_status
        return self.capture_rc

    def symbol(self, *names):
        """``_cuda._symbol``'s stand-in."""
        return (self.fn if "cuLaunchKernel" in names
                else self.memcpy if "cuMemcpyDtoDAsync" in names
                else self.capturing if "cuStreamIsCapturing" in names else None)


def fake_ck(signature, *, scratch=0, **md):
    meta = dict(num_ctas=1, num_warps=4, shared=2048, global_scratch_size=scratch,
                global_scratch_align=128, profile_scratch_size=0, launch_cooperative_grid=False,
                launch_pdl=False, tensordesc_meta=None)
    meta.update(md)
    inits = []
    return types.SimpleNamespace(metadata=types.SimpleNamespace(**meta),
                                 packed_metadata=(meta["num_warps"], meta["num_ctas"],
                                                  meta["shared"]),
                                 src=types.SimpleNamespace(signature=signature),
                                 function=0xF00, _init_handles=lambda: inits.append(1),
                                 inits=inits)


def signature(fn) -> dict:
    """A ``@triton.jit`` function's Triton signature (parameter -> ``"i64"``, ``"constexpr"``
    ...), as ``ASTSource`` and a compiled kernel's ``src.signature`` hold it: from its
    annotations (the runtime's sync kernels annotate every parameter)."""
    return {p.name: p.annotation for p in fn.params}


def install_driver(monkeypatch, symbol, *, compiled: bool = True) -> None:
    """Make ``symbol`` (a fake driver's ``_cuda._symbol`` stand-in) the driver library, bound
    afresh, with direct launches on and the compiled launch path on or off."""
    from syncopate.runtime import _cuda
    monkeypatch.setattr(_cuda, "available", lambda: True)
    monkeypatch.setattr(_cuda, "_BOUND", {})  # bound afresh to the fake
    monkeypatch.setattr(_cuda, "_symbol", symbol)
    monkeypatch.setenv("SYNCOPATE_DIRECT_LAUNCH", "1")
    monkeypatch.setenv("SYNCOPATE_FAST_LAUNCH", "1" if compiled else "0")


def require_fastlaunch():
    """Fail when the compiled launch path did not build on a machine with a C compiler (a
    real defect); skip, saying why, on one without (Triton needs one to launch anything, so
    a GPU machine has it)."""
    import shutil

    import pytest

    from syncopate.runtime import fastlaunch
    if fastlaunch.module() is not None:
        return
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler on this machine: the compiled launch path cannot be built")
    pytest.fail(f"the compiled launch path did not build: {fastlaunch.why_unavailable()}")


class FakeCompiledFused:
    """A compiled fused kernel of the ptr GEMM (its parameters, then the ABI's) whose Triton
    launcher (``ck[grid](*args, stream=...)``) records into ``triton``."""

    def __init__(self):
        sig = {n: ("*bf16" if n.endswith("_ptr") else "constexpr" if n.isupper() else "i32")
               for n in ptr_kernel().arg_names}
        sig.update(abi.EXTRA_PARAMS)
        base = fake_ck(sig)
        self.metadata, self.packed_metadata, self.src = base.metadata, base.packed_metadata, base.src
        self.function = 0xF00
        self.triton = []

    def _init_handles(self):
        pass

    def __getitem__(self, grid):
        return lambda *args, stream: self.triton.append((grid, args, stream))


def bindable_sm_kernel(c, ck):
    """An sm AG FusedKernel over the fake communicator ``c`` whose every configuration is a
    self-advancing, ENTRY-publishing one compiled to ``ck`` (what the bound path takes), its
    peers table a fake address; with its arguments (:func:`fk_values`)."""
    import types

    from syncopate.runtime import fused as fmod
    fk = fmod.FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr",
                          backend="sm", comm=c)
    a = abi.FusedABI("sm", 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True,
                     self_advance=True)

    def config(spec, options):
        cfg = fmod._Config(compiled=types.SimpleNamespace(kernel=ck), abi=a,
                           flags=c.empty((a.layout.words,), torch.int32), flag_addrs=[0, 0])
        fk._new_epoch_word(cfg)
        return cfg
    fk._config = config
    fk._peers_table = lambda cfg, ops: FakeTensor(0xBEEF00)
    return fk, fk_values(c, c.empty((64, 32), torch.bfloat16))
