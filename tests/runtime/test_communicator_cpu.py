"""The Communicator's symmetric-memory registry on a fake rendezvous handle (CPU byte
buffers per rank): symmetric views, peer pointers and peer views with offsets, the errors that
say what to do, a closed communicator, release and clear_cache.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from runtime_fakes import fake_comm  # noqa: E402


def test_registry_views_are_symmetric():
    c = fake_comm()
    A = c.empty((8, 4), torch.float32)
    assert c.is_symmetric(A) and c.is_symmetric(A[2:4]) and c.is_symmetric(A[:, 1])
    assert not c.is_symmetric(torch.zeros(8, 4))


def test_peer_ptrs_and_views_translate_offsets():
    c = fake_comm(rank=0)
    A = c.empty((8, 4), torch.float32)
    a = c.allocation(A)
    rows = A[2:4]
    assert c.peer_ptrs(rows)[1] == a.origins[1] + 2 * 4 * 4
    assert c.peer_bases(rows) == a.origins
    peer = c.peer_view(rows, 1)
    peer.fill_(7.0)
    other = a.handle.bufs[1].view(torch.float32).view(8, 4)
    assert torch.all(other[2:4] == 7.0) and torch.all(other[:2] == 0) and torch.all(A == 0)
    col = c.peer_view(A[:, 1:3], 1)
    assert col.shape == (8, 2) and col.stride() == (4, 1)
    col.fill_(1.0)
    assert torch.all(other[:, 1:3][4:] == 1.0)


def test_require_symmetric_errors_say_what_to_do():
    c = fake_comm()
    with pytest.raises(LaunchError, match=r"comm.empty\(\(3, 3\)"):
        c.require_symmetric(torch.zeros(3, 3), "operand a_ptr")
    A = c.empty((4, 4), torch.float32)
    with pytest.raises(LaunchError, match="must be contiguous"):
        c.require_symmetric(A.t(), "operand a_ptr")
    with pytest.raises(LaunchError, match="out of range"):
        c.peer_view(A, 5)


def test_closed_communicator_refuses():
    c = fake_comm()
    c._closed = True
    with pytest.raises(LaunchError, match="closed"):
        c._check_open()


def test_release_and_clear_cache_drop_registrations():
    c = fake_comm()
    A = c.empty((4, 4), torch.float32)
    c.cache["buf"] = A
    B = c.empty((2, 2), torch.float32)
    c.release(B[1:])
    assert not c.is_symmetric(B)
    c.clear_cache()
    assert not c.is_symmetric(A) and c.cache == {}
