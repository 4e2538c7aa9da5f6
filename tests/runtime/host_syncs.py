"""A CPU probe for host reads of device values: what CUDA-graph capture refuses.

A captured region may not synchronise the host with the device: ``.item()``/``bool()``/
``int()`` of a tensor, ``.tolist()``, a boolean-mask index (its result's size is read back),
``nonzero``, ``bincount`` (CUDA sizes its result from the largest value), ``unique``,
``masked_select``, ``repeat_interleave`` by a tensor without ``output_size``, or
``torch.cuda.synchronize``. On a CPU none of them fails, so :func:`host_syncs` records them
instead (a ``TorchDispatchMode`` for the aten ops, patches for ``tolist`` and
``torch.cuda.synchronize``, which do not dispatch): a test runs an op's path under it and
asserts the record is empty -- the CPU half of "this path is capturable"; the GPU half is
tests/gpu/test_cuda_graphs.py.
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

#: aten ops that read a device value back to the host (their packet names)
_SYNCING = {"_local_scalar_dense", "nonzero", "nonzero_static_unknown", "bincount", "unique",
            "_unique", "_unique2", "unique_consecutive", "unique_dim", "masked_select",
            "argwhere"}


def _bool_index(indices) -> bool:
    return any(isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)
               for t in (indices or ()))


class _Probe(TorchDispatchMode):
    def __init__(self, seen: list):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if name in _SYNCING:
            self.seen.append(str(func))
        elif name in ("index", "index_put", "index_put_", "_index_put_impl_") \
                and len(args) > 1 and _bool_index(args[1]):
            self.seen.append(f"{func} with a boolean mask")
        elif name == "repeat_interleave" and isinstance(args[0], torch.Tensor) \
                and len(args) > 1 and isinstance(args[1], torch.Tensor) \
                and (kwargs or {}).get("output_size") is None:
            self.seen.append(f"{func} without output_size")
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def host_syncs():
    """Yield a list that collects every host read of a device value inside the block."""
    seen: list = []
    real_tolist, real_sync = torch.Tensor.tolist, torch.cuda.synchronize

    def tolist(self):
        seen.append("Tensor.tolist")
        return real_tolist(self)

    def synchronize(*a, **k):
        seen.append("torch.cuda.synchronize")
        return real_sync(*a, **k)
    torch.Tensor.tolist = tolist
    torch.cuda.synchronize = synchronize
    try:
        with _Probe(seen):
            yield seen
    finally:
        torch.Tensor.tolist = real_tolist
        torch.cuda.synchronize = real_sync
