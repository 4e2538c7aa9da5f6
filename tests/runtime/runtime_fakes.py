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
    c.rank, c.world_size, c.device = rank, W, torch.device("cpu")
    c.group_name, c.group, c.symm_backend = "fake", None, "cuda"
    c._allocs, c._closed, c.cache, c._streams = {}, False, {}, {}
    import weakref
    c._fused = weakref.WeakSet()
    c.diag, c.diag_addr = diag.new_record()

    def empty(shape, dtype):
        shape = tuple(shape)
        nbytes = torch.empty(shape, dtype=dtype).numel() * torch.empty((), dtype=dtype).element_size()
        bufs = [torch.zeros(nbytes, dtype=torch.uint8) for _ in range(W)]
        t = bufs[rank].view(dtype).view(shape)
        c._register(t, FakeHandle(bufs))
        return t
    c.empty = empty
    return c


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
        self.capture_status = 0
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
        return 0

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
