"""The kernel's arguments for W emulated ranks: which parameters are pointers (and of what
element type), the values the caller gave checked and spread over the ranks, the inputs of
each launch, and which parameters the schedule moves (consumed inputs it delivers, produced
outputs it collects or reduces).

A plain value is the same on every rank (tensors are copied per rank); :class:`PerRank` gives
each rank its own.  Launch 1 uses the given values; later launches stage fresh random inputs.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ..errors import EmulationError
from .memory import etype_of, to_etype

__all__ = ["LaunchInputs", "ParamSpec", "PerRank", "is_consumed_operand", "is_produced_operand",
           "memory_of", "normalise_args"]


class PerRank(list):
    """An argument with one value per rank (``PerRank([a0, a1])``); a plain value is the same
    on every rank (tensors are copied per rank)."""


def memory_of(v):
    """The flat array a kernel's pointer argument sees: for a torch tensor, its memory from its
    first element to its last in address order (a column-major ``w.t()`` as the ``[N, K]``
    rows it is stored as, gaps of a strided view included), not its logical row-major
    flattening, copied to the CPU (floats as float32); any other value as
    ``np.asarray(v).reshape(-1)``."""
    try:
        import torch
        if isinstance(v, torch.Tensor):
            if not v.is_contiguous() and v.numel() > 0:
                if any(st < 0 for st in v.stride()):
                    raise EmulationError("a tensor argument with a negative stride: pass a "
                                         "contiguous copy")
                span = 1 + sum((s - 1) * st for s, st in zip(v.shape, v.stride()))
                v = torch.as_strided(v, (span,), (1,))
            v = v.detach().cpu()
            return (v.float() if v.is_floating_point() else v).numpy().reshape(-1)
    except ImportError:  # pragma: no cover - torch is a prerequisite
        pass
    return np.asarray(v).reshape(-1)


class ParamSpec:
    """The kernel's user parameters: names, which are pointers (with element types)."""

    def __init__(self, code, names: Sequence[str]):
        self.names = list(names)
        self.types = dict(zip(code.arg_names, code.arg_types))
        self.ptr = {}
        for n in self.names:
            t = self.types.get(n)
            if t is None:
                raise EmulationError(f"the kernel has no parameter {n!r} "
                                     f"(it has {', '.join(code.arg_names)})")
            if "tt.ptr" in str(t):
                self.ptr[n] = etype_of(t.pointee_type)


def normalise_args(spec: ParamSpec, args, schedule, operands: Mapping[str, str]) -> dict:
    """``param -> [value per rank]`` from ``args`` (a mapping or the values in order): pointer
    arguments as flat arrays of their element type (a communicated operand must hold the whole
    schedule tensor), scalars as ints (floats kept)."""
    W = schedule.world_size
    names = spec.names
    if isinstance(args, Mapping):
        unknown = set(args) - set(names)
        if unknown:
            raise EmulationError(f"unknown argument(s) {sorted(unknown)}; the kernel takes "
                                 f"{', '.join(names)}")
        missing = [n for n in names if n not in args]
        if missing:
            raise EmulationError(f"missing argument(s) {', '.join(missing)}")
        vals = dict(args)
    else:
        args = list(args)
        if len(args) != len(names):
            raise EmulationError(f"{len(args)} arguments for the {len(names)} non-constexpr "
                                 f"parameters {', '.join(names)}")
        vals = dict(zip(names, args))
    out = {}
    for n, v in vals.items():
        per = list(v) if isinstance(v, PerRank) else [v] * W
        if len(per) != W:
            raise EmulationError(f"argument {n}: {len(per)} per-rank values for "
                                 f"{W} ranks")
        if n in spec.ptr:
            et = spec.ptr[n]
            out[n] = [to_etype(memory_of(x), et) for x in per]
            t = operands.get(n)
            if t is not None:
                need = int(np.prod(schedule.tensors[t].shape))
                for r, a in enumerate(out[n]):
                    if a.size < need:
                        raise EmulationError(
                            f"argument {n} on rank {r} has {a.size} elements; the schedule's "
                            f"tensor {t} needs {need} (shape {schedule.tensors[t].shape})")
        else:
            out[n] = [int(x) if not isinstance(x, float) else x for x in per]
    return out


class LaunchInputs:
    """``inputs(rank, epoch, seed)``: the pointer arguments of ``rank`` for launch ``epoch``
    (cached): the given ones for launch 1, fresh random data (rounded to the element type)
    afterwards."""

    def __init__(self, spec: ParamSpec, args: dict):
        self.spec, self.args = spec, args
        self._cache: dict = {}

    def __call__(self, rank: int, epoch: int, seed: int) -> dict:
        key = (rank, epoch, seed)
        got = self._cache.get(key)
        if got is None:
            got = {}
            for i, (n, et) in enumerate(self.spec.ptr.items()):
                base = self.args[n][rank]
                if epoch == 1 or et.kind != "float":
                    got[n] = base.copy()
                else:
                    rng = np.random.default_rng([seed, epoch, rank, i])
                    got[n] = to_etype(rng.standard_normal(base.size).astype(np.float32), et)
            self._cache[key] = got
        return got


def is_consumed_operand(schedule, operands: Mapping[str, str], param: str) -> bool:
    """Whether ``param`` is bound to a schedule tensor the kernel consumes (the schedule
    delivers it: all-gather, ring pass, all-to-all)."""
    t = operands.get(param)
    return t is not None and not schedule.is_produced(t)


def is_produced_operand(schedule, operands: Mapping[str, str], param: str) -> bool:
    """Whether ``param`` is bound to a schedule tensor the kernel produces (the schedule
    reduces or collects it: reduce-scatter, all-reduce)."""
    t = operands.get(param)
    return t is not None and schedule.is_produced(t)
