"""Process groups by name, and the Communicator behind each one.

Why by name: a ``torch.library`` custom op's schema takes tensors, numbers and strings, not
Python objects, so the ops take ``group_name: str`` -- the convention of torch's own
``torch.ops._c10d_functional`` and ``torch.ops.symm_mem`` ops (``ProcessGroup.group_name``,
resolved by ``torch.distributed.distributed_c10d._resolve_process_group``). A name is also what
``torch.compile`` can bake into a graph as a constant and what the graph pass finds in a traced
``all_gather_into_tensor`` / ``reduce_scatter_tensor`` node.

Two kinds of group answer to a name:

* a torch.distributed process group (NCCL, gloo, the fake group of
  ``torch.testing._internal.distributed.fake_pg``): resolved through torch's registry;
* a loopback group (:mod:`syncopate.runtime.loopback`, W virtual ranks as threads of one
  process): torch's registry is process-wide and cannot hold one group per thread, so the name
  is matched against the calling thread's loopback group. Every virtual rank of a world shares
  the name; each thread resolves it to its own rank.

The fused path needs a :class:`~syncopate.runtime.Communicator` (symmetric memory, flags) for
the group. :func:`register_communicator` sets the one to use (e.g. one made with
``symm_backend='nvshmem'``); without it the first CUDA call creates one for the group on the
tensors' device. Creating it is local (symmetric buffers are allocated, collectively, at the
first launch), and every rank makes its first call at the same point of the same program.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from ..errors import TorchOpError
from ..runtime import collectives
from ..runtime.communicator import Communicator
from ..runtime.loopback import current_loopback

#: Communicators by group: the LoopbackGroup object for a virtual rank (one per thread), the
#: group name for a torch process group (one per process)
_COMMS: dict = {}
_LOCK = threading.Lock()


@dataclass
class GroupRef:
    """What a ``group_name`` resolves to on the calling rank: the group object the
    collectives take (:mod:`syncopate.runtime.collectives` dispatches on it), this rank and the
    world size."""

    name: str
    group: object  # torch ProcessGroup or LoopbackGroup
    rank: int
    world_size: int
    loopback: bool

    @property
    def key(self):
        return self.group if self.loopback else self.name


def group_name(group=None) -> str:
    """The name the ops take for ``group``: a torch ``ProcessGroup``, a loopback group, a
    :class:`~syncopate.runtime.Communicator`, a name (returned as is) or None (the calling
    rank's default group: its loopback group in a virtual rank's thread, else WORLD)."""
    if isinstance(group, str):
        return group
    if group is None:
        if not collectives.is_initialized():
            raise TorchOpError("group=None but torch.distributed is not initialized: call "
                               "torch.distributed.init_process_group(...) first, or pass the "
                               "group (or its group_name) explicitly")
        group = collectives.default_group()
    name = getattr(group, "group_name", None)
    if not isinstance(name, str) or not name:
        raise TorchOpError(f"cannot name the process group {group!r}: pass a "
                           f"torch.distributed ProcessGroup, a syncopate Communicator, a loopback "
                           f"group or the group's name (ProcessGroup.group_name)")
    return name


def resolve(name: str) -> GroupRef:
    """The calling rank's group called ``name``: its loopback group when the name is the
    thread's loopback group's, else torch's registered process group of that name."""
    if not isinstance(name, str):
        raise TorchOpError(f"group_name must be a str, got {type(name).__name__}: pass "
                           f"syncopate.torch_ops.group_name(group)")
    lb = current_loopback()
    if lb is not None and lb.group_name == name:
        return GroupRef(name, lb, lb.rank, lb.size(), True)
    pg = _torch_group(name)
    if pg is None:
        where = (f"this thread's loopback group is {lb.group_name!r}" if lb is not None
                 else "no loopback group is bound to this thread")
        raise TorchOpError(f"group_name={name!r} names no process group here ({where}, and "
                           f"torch.distributed has no group of that name): pass "
                           f"syncopate.torch_ops.group_name(group) of a group this rank is in")
    import torch.distributed as dist
    return GroupRef(name, pg, dist.get_rank(pg), dist.get_world_size(pg), False)


def _torch_group(name: str):
    import torch.distributed as dist
    if not (dist.is_available() and dist.is_initialized()):
        return None
    from torch.distributed.distributed_c10d import _resolve_process_group
    try:
        return _resolve_process_group(name)
    except (ValueError, RuntimeError, KeyError):
        return None


def register_communicator(comm) -> str:
    """Make ``comm`` the Communicator the ops use for its group on this rank; returns the
    group's name (what to pass as ``group_name``)."""
    if not isinstance(comm, Communicator):
        raise TorchOpError(f"register_communicator takes a syncopate.runtime.Communicator, got "
                           f"{type(comm).__name__}")
    ref = resolve(comm.group_name)
    with _LOCK:
        _COMMS[ref.key] = comm
    return ref.name


def forget_communicator(name: str) -> None:
    """Drop this rank's Communicator for group ``name`` (the caller closes it); the next
    fused call creates a new one."""
    ref = resolve(name)
    with _LOCK:
        _COMMS.pop(ref.key, None)


def communicator(ref: GroupRef, device):
    """This rank's Communicator for ``ref`` on ``device``: the registered one, else a new one
    (kept for the next calls). A registered Communicator on another device is an error, not a
    silent second one: its symmetric buffers live on its device."""
    import torch
    with _LOCK:
        comm = _COMMS.get(ref.key)
    if comm is not None and not getattr(comm, "_closed", False):
        if comm.device != torch.device(device):
            raise TorchOpError(f"the tensors are on {device} but the Communicator of group "
                               f"{ref.name!r} uses {comm.device}: move them with "
                               f".to({str(comm.device)!r}) or register a Communicator for "
                               f"{device}")
        return comm
    comm = Communicator(ref.group, device=device)
    with _LOCK:
        _COMMS[ref.key] = comm
    return comm
