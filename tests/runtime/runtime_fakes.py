"""Fakes shared by the runtime's CPU tests (tests/runtime/).

A Communicator whose symmetric memory is one CPU byte buffer per rank behind a fake
rendezvous handle (so registry, peer pointers and peer views are real code on fake memory),
the pointer GEMM kernel and its arguments, small all-gather / reduce-scatter schedules, and
the watchdog record's words.  Importing this module needs torch: test modules call
``pytest.importorskip("torch")`` first.
"""

from __future__ import annotations

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
