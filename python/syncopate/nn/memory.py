"""What a model holds on this rank: its parameters and gradients, and its Communicator's
symmetric memory and fused kernels.

The ops cache their symmetric buffers (staging, gathered K/V, partial sums, per-source slots,
flags) and their fused kernels on the Communicator, keyed by shape and configuration
(:func:`syncopate.ops.driver.symmetric_buffer`, :func:`~syncopate.ops.driver.cached_fused`):
every layer of the same shape on one Communicator uses the same ones, so a model of 32 equal
blocks holds one set, not 32. :func:`memory_held` reports that set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class MemoryReport:
    """Bytes this rank holds: ``params`` and ``grads`` of the module (this rank's shards),
    ``symmetric``: every symmetric allocation of the Communicator (the ops' buffers, their
    fused kernels' flags and slots), with ``buffers`` the ops' named buffers by tag and
    ``fused_kernels`` the number of cached fused kernels."""

    params: int = 0
    grads: int = 0
    symmetric: int = 0
    fused_kernels: int = 0
    buffers: dict = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.params + self.grads + self.symmetric

    def __str__(self) -> str:
        mib = 1 << 20
        return (f"params {self.params / mib:.1f} MiB, grads {self.grads / mib:.1f} MiB, "
                f"symmetric {self.symmetric / mib:.1f} MiB ({len(self.buffers)} op buffers, "
                f"{self.fused_kernels} fused kernels)")


def _nbytes(t) -> int:
    return t.numel() * t.element_size()


def memory_held(module=None, comm=None) -> MemoryReport:
    """The :class:`MemoryReport` of ``module`` (a ``torch.nn.Module`` or None) and ``comm`` (a
    :class:`~syncopate.runtime.Communicator` or None)."""
    params = grads = 0
    if module is not None:
        for p in module.parameters():
            params += _nbytes(p)
            if p.grad is not None:
                grads += _nbytes(p.grad)
    symmetric, fused, buffers = 0, 0, {}
    if comm is not None:
        symmetric = sum(a.nbytes for a in getattr(comm, "_allocs", {}).values())
        for key, v in getattr(comm, "cache", {}).items():
            if isinstance(v, torch.Tensor) and isinstance(key, tuple) and key:
                buffers[str(key[0])] = buffers.get(str(key[0]), 0) + _nbytes(v)
            elif hasattr(v, "_configs"):
                fused += 1
    return MemoryReport(params, grads, symmetric, fused, buffers)


__all__ = ["MemoryReport", "memory_held"]
