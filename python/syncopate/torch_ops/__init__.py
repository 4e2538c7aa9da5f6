"""PyTorch integration: the registered ops with a ``torch.library`` schema (``OpSpec.torch``)
as ``torch.ops.syncopate.*`` custom ops with fake implementations and autograd, and an opt-in
``torch.compile`` pass that rewrites plain all-gather + matmul / matmul + reduce-scatter into
them (docs/torch.md).

Importing this package registers the ops (it imports torch; :mod:`syncopate` itself does not).

* :func:`ag_gemm`, :func:`gemm_rs`, ... -- one function per such op for model code
  (``TorchOp.model``): a group (or its name) in, one tensor out, differentiable.
* ``torch.ops.syncopate.ag_gemm(a_shard, b, group_name, return_a=False) -> (out, a_gathered?)``,
  ``torch.ops.syncopate.gemm_rs(a, b_shard, group_name)``, ...: the registered ops themselves.
* :func:`group_name`, :func:`register_communicator`: how a group is named, and which
  Communicator (symmetric memory) the fused path uses for it.
* :func:`enable_fusion_pass` / :func:`disable_fusion_pass` (or ``SYNCOPATE_TORCH_FUSION=1``):
  the compile pass, off by default.
"""

from __future__ import annotations

import functools

from ..ops import REGISTRY
from .fx_pass import (FusionReport, disable_fusion_pass, enable_from_env, enable_fusion_pass,
                      fuse_collective_matmuls, fusion_pass_enabled, last_report)
from .groups import (TorchOpError, forget_communicator, group_name, register_communicator,
                     resolve)


def _model(spec):
    """``syncopate.torch_ops.<name>(x, y, group, ...)``: the op's ``TorchOp.model`` on the
    group's name (``group``, after the op's ``TorchOp.tensors`` tensors: a group name, a torch
    process group, a Communicator or None -- the default group)."""
    n = spec.torch.tensors

    @functools.wraps(spec.torch.model)
    def fn(*args, **kwargs):
        if "group" in kwargs:
            args = (*args, kwargs.pop("group"))
        if len(args) <= n:
            raise TorchOpError(f"syncopate.torch_ops.{spec.name} takes {n} tensors and then "
                               f"the group (a group name, process group, Communicator or None)")
        return spec.torch.model(*args[:n], group_name(args[n]), *args[n + 1:], **kwargs)
    fn.__name__ = fn.__qualname__ = spec.name
    fn.__module__ = __name__
    return fn


_OPS = {name: _model(spec) for name, spec in REGISTRY.items() if spec.torch is not None}
globals().update(_OPS)

__all__ = ["FusionReport", "TorchOpError", "disable_fusion_pass", "enable_fusion_pass",
           "forget_communicator", "fuse_collective_matmuls", "fusion_pass_enabled",
           "group_name", "last_report", "register_communicator", "resolve", *_OPS]


enable_from_env()
