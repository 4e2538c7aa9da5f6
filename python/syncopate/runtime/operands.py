"""What a call of a fused kernel must satisfy: operands bound to schedule tensors, operands in
this communicator's symmetric memory with the schedule's shape and dtype.  (The compiler's
launch-time requirements are checked by :func:`syncopate.abi.check_launch`, the one check the
emulator calls too.)"""

from __future__ import annotations

import weakref

from .. import dtypes
from ..errors import LaunchError


def tensor_spec(schedule, name: str | None = None):
    """The schedule's tensor ``name`` (or its only tensor when ``name`` is None)."""
    ts = schedule.tensors
    if name is None:
        if len(ts) != 1:
            raise LaunchError(f"the schedule moves {len(ts)} tensors ({', '.join(ts)}); say which "
                              f"one each operand is: operand={{'param_name': 'tensor_name'}}")
        return next(iter(ts.values()))
    if name not in ts:
        raise LaunchError(f"the schedule has no tensor {name!r}; it has {', '.join(ts)}")
    return ts[name]


def operand_map(schedule, operand) -> dict[str, str]:
    """``{kernel parameter: schedule tensor}``."""
    names = list(schedule.tensors)
    if isinstance(operand, str):
        if len(names) != 1:
            raise LaunchError(f"the schedule moves tensors {names}; map each operand: "
                              f"operand={{'{operand}': '<tensor name>'}}")
        return {operand: names[0]}
    if isinstance(operand, dict):
        for p, t in operand.items():
            tensor_spec(schedule, t)
        return dict(operand)
    if isinstance(operand, (list, tuple)) and len(operand) == len(names):
        return dict(zip(operand, names))
    raise LaunchError("operand must be a parameter name, a list of them (one per schedule "
                      "tensor, in order) or a {parameter: tensor} dict")


def validate_operands(schedule, operands: dict, names: list, comm, values) -> dict:
    """Check a call's operands against the schedule (``operands``: ``{param: tensor name}``,
    ``names``: the kernel's parameters); returns ``{param: tensor}``."""
    import torch

    out = {}
    for p, tname in operands.items():
        t = values[names.index(p)]
        spec = tensor_spec(schedule, tname)
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"operand {p} must be a torch.Tensor (the symmetric buffer of "
                              f"schedule tensor {tname!r}), got {type(t).__name__}")
        if tuple(t.shape) != tuple(spec.shape):
            raise LaunchError(f"operand {p} has shape {tuple(t.shape)} but schedule tensor "
                              f"{tname!r} is {tuple(spec.shape)}: pass the whole (global-shape) "
                              f"symmetric buffer, or build the schedule for shape {tuple(t.shape)}")
        if dtypes.torch_name(t.dtype) != dtypes.torch_name(spec.dtype):
            raise LaunchError(f"operand {p} is {t.dtype} but schedule tensor {tname!r} is "
                              f"{spec.dtype}: cast the operand or rebuild the schedule")
        if t.device != comm.device:
            raise LaunchError(f"operand {p} is on {t.device}, the communicator on {comm.device}")
        if comm.allocation(t) is None:
            other = next((o for o in list(_LIVE_COMMS) if o is not comm and not o._closed
                          and o.allocation(t) is not None), None)
            if other is not None:
                raise LaunchError(
                    f"operand {p} lives in symmetric memory of another Communicator (group "
                    f"{other.group_name!r}, {other.world_size} ranks) but this fused kernel "
                    f"communicates over group {comm.group_name!r}: use the same Communicator for "
                    f"the buffer and fuse(..., comm=...)")
        comm.require_symmetric(t, f"operand {p}", contiguous=True)
        out[p] = t
    return out


_LIVE_COMMS: "weakref.WeakSet" = weakref.WeakSet()


def register_comm(comm) -> None:
    _LIVE_COMMS.add(comm)
