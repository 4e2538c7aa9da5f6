"""The collectives the runtime, the ops and the GPU tests use, for either kind of group.

``from syncopate.runtime import collectives as dist`` gives torch.distributed's names and
signatures for the few collectives Syncopate needs (``barrier``, ``all_reduce``,
``all_gather_into_tensor``, ``reduce_scatter_tensor``, ``all_to_all_single`` (equal splits),
``broadcast``, ``get_rank``,
``get_world_size``, ``is_initialized``, ``ReduceOp``). Each call goes to the loopback group
(:mod:`.loopback`) when ``group`` is one, or when ``group`` is None and the calling thread is a
virtual rank; otherwise to ``torch.distributed`` unchanged. Why a dispatcher and not torch's
process-group machinery: torch keeps the default group and group names process-wide, so W
threads of one process cannot each own a default group (docs/loopback.md); dispatching here keeps
one code path -- the NCCL fallback (``SYNCOPATE=0``), the flags' barrier, the tests' references
-- for both modes.
"""

from __future__ import annotations

from .loopback import LoopbackGroup, bind, current_loopback, unbind  # noqa: F401  (re-exported)


def _lb(group):
    if isinstance(group, LoopbackGroup):
        return group
    if group is None:
        return current_loopback()
    return None


def _dist():
    import torch.distributed as dist
    return dist


class _ReduceOpProxy:
    def __getattr__(self, name):
        return getattr(_dist().ReduceOp, name)


#: ``torch.distributed.ReduceOp`` (resolved lazily: importing this module needs no torch)
ReduceOp = _ReduceOpProxy()


def is_loopback(group=None) -> bool:
    return _lb(group) is not None


def is_initialized() -> bool:
    if current_loopback() is not None:
        return True
    d = _dist()
    return d.is_available() and d.is_initialized()


def default_group():
    """The calling thread's loopback group, else ``torch.distributed.group.WORLD``."""
    lb = current_loopback()
    return lb if lb is not None else _dist().group.WORLD


def get_rank(group=None) -> int:
    lb = _lb(group)
    return lb.rank if lb is not None else _dist().get_rank(group)


def get_world_size(group=None) -> int:
    lb = _lb(group)
    return lb.size() if lb is not None else _dist().get_world_size(group)


def barrier(group=None, async_op=False, device_ids=None):
    lb = _lb(group)
    if lb is None:
        kw = {} if device_ids is None else {"device_ids": device_ids}
        return _dist().barrier(group=group, async_op=async_op, **kw)
    lb.barrier(None if not device_ids else f"cuda:{device_ids[0]}")
    return None


def _run(name: str, *args, group, async_op, **kw):
    """``name`` on the loopback group (``args`` and ``kw``'s values positionally; None: the
    op's default) or on torch.distributed (a reduction's ``op`` None: ``ReduceOp.SUM``)."""
    lb = _lb(group)
    if lb is None:
        d = _dist()
        if "op" in kw and kw["op"] is None:
            kw["op"] = d.ReduceOp.SUM
        return getattr(d, name)(*args, group=group, async_op=async_op, **kw)
    getattr(lb, name)(*args, *kw.values())
    return None


def all_reduce(tensor, op=None, group=None, async_op=False):
    return _run("all_reduce", tensor, op=op, group=group, async_op=async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
    return _run("all_gather_into_tensor", output_tensor, input_tensor, group=group,
                async_op=async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    return _run("all_gather", tensor_list, tensor, group=group, async_op=async_op)


def reduce_scatter_tensor(output, input, op=None, group=None, async_op=False):
    return _run("reduce_scatter_tensor", output, input, op=op, group=group, async_op=async_op)


def all_to_all_single(output, input, group=None, async_op=False):
    """``torch.distributed.all_to_all_single`` with equal splits along dim 0."""
    return _run("all_to_all_single", output, input, group=group, async_op=async_op)


def broadcast(tensor, src, group=None, async_op=False):
    return _run("broadcast", tensor, src, group=group, async_op=async_op)
