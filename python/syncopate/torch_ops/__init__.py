"""PyTorch integration: the fused ops as ``torch.ops.syncopate.*`` custom ops with fake
implementations and autograd, and an opt-in ``torch.compile`` pass that rewrites plain
all-gather + matmul / matmul + reduce-scatter into them (docs/torch.md).

Importing this package registers the ops (it imports torch; :mod:`syncopate` itself does not).

* :func:`ag_gemm`, :func:`gemm_rs` -- the ops for model code: a group (or its name) in, one
  tensor out, differentiable (each op's backward is the other fused op).
* ``torch.ops.syncopate.ag_gemm(a_shard, b, group_name, return_a=False) -> (out, a_gathered?)``,
  ``torch.ops.syncopate.gemm_rs(a, b_shard, group_name)``: the registered ops themselves.
* :func:`group_name`, :func:`register_communicator`: how a group is named, and which
  Communicator (symmetric memory) the fused path uses for it.
* :func:`enable_fusion_pass` / :func:`disable_fusion_pass` (or ``SYNCOPATE_TORCH_FUSION=1``):
  the compile pass, off by default.
"""

from __future__ import annotations

import torch

from . import autograd as _autograd  # noqa: F401  (attaches the backward formulas)
from .fx_pass import (FusionReport, disable_fusion_pass, enable_from_env, enable_fusion_pass,
                      fuse_collective_matmuls, fusion_pass_enabled, last_report)
from .groups import (TorchOpError, forget_communicator, group_name, register_communicator,
                     resolve)

__all__ = ["FusionReport", "TorchOpError", "ag_gemm", "disable_fusion_pass", "enable_fusion_pass",
           "forget_communicator", "fuse_collective_matmuls", "fusion_pass_enabled", "gemm_rs",
           "group_name", "last_report", "register_communicator", "resolve"]


def ag_gemm(a_shard: torch.Tensor, b: torch.Tensor, group) -> torch.Tensor:
    """``all_gather(a_shard, dim=0) @ b`` (``[M/W, K]`` x ``[K, N]`` -> ``[M, N]``): the column-
    parallel linear of tensor parallelism with sequence-sharded input. ``group``: a group name,
    a torch process group, a Communicator or None (the default group). Under ``torch.compile``
    a name, a torch process group or None becomes a constant of the graph; a loopback rank
    passes the name (computed with :func:`group_name` outside the compiled code).

    The gathered ``A`` is kept for the backward (``return_a=True``) only when ``b`` needs a
    gradient: inference pays no copy."""
    name = group_name(group)
    keep = torch.is_grad_enabled() and b.requires_grad
    out, _ = torch.ops.syncopate.ag_gemm(a_shard, b, name, keep)
    return out


def gemm_rs(a: torch.Tensor, b_shard: torch.Tensor, group) -> torch.Tensor:
    """This rank's ``[M/W, N]`` rows of ``reduce_scatter(a @ b_shard, dim=0)`` (sum over
    ranks; ``[M, K/W]`` x ``[K/W, N]``): the row-parallel linear of tensor parallelism.
    ``group`` as in :func:`ag_gemm`."""
    return torch.ops.syncopate.gemm_rs(a, b_shard, group_name(group))


enable_from_env()
