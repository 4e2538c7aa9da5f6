"""Autograd of the tensor-parallel pair: each op's backward is the other fused op.

With ``A`` sharded on rows and ``B`` a column shard (``ag_gemm``), or ``A`` a column shard and
``B`` a row shard (``gemm_rs``), the gradients are (``W`` ranks, sums over ranks implied by
the collectives):

* ``C = AG(A) @ B``: ``dA = RS(dC @ B^T)`` -- a GEMM + reduce-scatter, i.e. ``gemm_rs(dC, B^T)``
  -- and ``dB = AG(A)^T @ dC`` with the gathered ``A`` the forward returned
  (``return_a=True``), so the backward needs no second all-gather.
* ``C = RS(A @ B)``: ``dA = AG(dC) @ B^T`` -- ``ag_gemm(dC, B^T)`` -- and ``dB = A^T @ AG(dC)``
  with the gathered ``dC`` that same ``ag_gemm`` returns.

So a tensor-parallel MLP (``ag_gemm`` -> activation -> ``gemm_rs``) runs fused kernels in both
directions. A gradient flowing into the gathered ``A`` that ``ag_gemm`` returned (a user
who reads it) reaches ``a_shard`` through :func:`torch.ops.syncopate.reduce_scatter`.
"""

from __future__ import annotations

import torch

from .groups import TorchOpError
from .library import ag_gemm, gemm_rs


def _ag_gemm_setup(ctx, inputs, output):
    _, b, group_name = inputs[:3]
    _, full = output
    if b.requires_grad and full is None:
        raise TorchOpError("torch.ops.syncopate.ag_gemm: b requires grad but return_a=False, so "
                           "the backward has no gathered A for b's gradient: call it with "
                           "return_a=True (syncopate.torch_ops.ag_gemm does so when b requires "
                           "grad)")
    ctx.group_name = group_name
    ctx.save_for_backward(b, full)


def _ag_gemm_backward(ctx, grad_out, grad_full):
    b, full = ctx.saved_tensors
    grad_a = grad_b = None
    if ctx.needs_input_grad[0]:
        grad_a = torch.ops.syncopate.gemm_rs(grad_out, b.t(), ctx.group_name)
        if grad_full is not None:
            grad_a = grad_a + torch.ops.syncopate.reduce_scatter(grad_full, ctx.group_name)
    if ctx.needs_input_grad[1]:
        grad_b = torch.mm(full.t(), grad_out)
    return grad_a, grad_b, None, None


def _gemm_rs_setup(ctx, inputs, output):
    a, b_shard, group_name = inputs
    ctx.group_name = group_name
    ctx.save_for_backward(a, b_shard)


def _gemm_rs_backward(ctx, grad_out):
    a, b_shard = ctx.saved_tensors
    need_a, need_b = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    if not (need_a or need_b):
        return None, None, None
    grad_a, grad_full = torch.ops.syncopate.ag_gemm(grad_out, b_shard.t(), ctx.group_name,
                                                    need_b)
    grad_b = torch.mm(a.t(), grad_full) if need_b else None
    return (grad_a if need_a else None), grad_b, None


def register() -> None:
    """Attach the backward formulas to the ops (idempotent: torch keeps the last one)."""
    ag_gemm.register_autograd(_ag_gemm_backward, setup_context=_ag_gemm_setup)
    gemm_rs.register_autograd(_gemm_rs_backward, setup_context=_gemm_rs_setup)


register()
