"""The Llama-style transformer block written with torch's own tensor parallelism (DTensor):
the baseline the fused block is measured against and what the compile pass must recognise.

``parallelize_module`` with the plan TorchTitan uses for Llama (:func:`tp_plan`):
``SequenceParallel`` norms (activations ``[S/W, B, D]``, sharded on the sequence, dim 0),
one all-gather per ``PrepareModuleInput`` (the attention's and the MLP's input, each read by
several column-parallel projections), ``ColwiseParallel`` ``wq``/``wk``/``wv`` and ``w1``/``w3``
(heads and the hidden width split over ranks), ``RowwiseParallel`` ``wo`` and ``w2`` with a
sequence-sharded output (a reduce-scatter). Traced by ``torch.compile``, that is
``all_gather_into_tensor -> wait_tensor -> reshape -> mm`` and ``mm -> reshape ->
reduce_scatter_tensor -> wait_tensor``: what torch's async-TP pass
(``torch._inductor.config._micro_pipeline_tp``) and syncopate's pass
(:mod:`syncopate.torch_ops.fx_pass`) rewrite.

Why sequence-first ``[S, B, D]``: the dim-0 gather and scatter are then collectives on
contiguous rows (Megatron's layout), which both passes take; a batch-first ``[B, S, D]``
sharded on dim 1 lowers to a gather followed by chunk + cat, which neither fuses.

The block: RMSNorm, Q/K/V projections, RoPE, causal GQA attention (SDPA), output
projection, residual; RMSNorm, SwiGLU MLP, residual. ``nn.Linear`` weights (``[out, in]``),
no biases.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UsageError

__all__ = ["LlamaBlock", "dtensor_block", "tp_plan"]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5, **factory):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, **factory))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) \
            * self.weight


def rope(x, theta: float = 500000.0):
    """Rotary embedding of ``x`` ``[S, B, heads, hd]`` at positions ``0..S-1`` (the whole
    sequence: the projections read the gathered activations), rotating the two halves of
    each head (the "rotate half" form)."""
    S, hd = x.shape[0], x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, device=x.device, dtype=torch.float32) / hd)
    ang = torch.outer(torch.arange(S, device=x.device, dtype=torch.float32), inv)
    cos, sin = ang.cos()[:, None, None, :], ang.sin()[:, None, None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).type_as(x)


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, **factory):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        hd = self.head_dim
        self.wq = nn.Linear(dim, n_heads * hd, bias=False, **factory)
        self.wk = nn.Linear(dim, n_kv_heads * hd, bias=False, **factory)
        self.wv = nn.Linear(dim, n_kv_heads * hd, bias=False, **factory)
        self.wo = nn.Linear(n_heads * hd, dim, bias=False, **factory)

    def forward(self, x):
        S, B = x.shape[:2]
        hd = self.head_dim
        # -1 heads: this rank's share after ColwiseParallel (local outputs)
        q = rope(self.wq(x).view(S, B, -1, hd))
        k = rope(self.wk(x).view(S, B, -1, hd))
        v = self.wv(x).view(S, B, -1, hd)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [B, heads, S, hd]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(o.permute(2, 0, 1, 3).reshape(S, B, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, ffn_dim, **factory):
        super().__init__()
        self.w1 = nn.Linear(dim, ffn_dim, bias=False, **factory)
        self.w3 = nn.Linear(dim, ffn_dim, bias=False, **factory)
        self.w2 = nn.Linear(ffn_dim, dim, bias=False, **factory)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class LlamaBlock(nn.Module):
    """One Llama block on ``[S, B, D]`` activations (unsharded, or this rank's shard once
    :func:`tp_plan` is applied)."""

    def __init__(self, dim, n_heads, n_kv_heads, ffn_dim, **factory):
        super().__init__()
        self.attention_norm = RMSNorm(dim, **factory)
        self.attention = Attention(dim, n_heads, n_kv_heads, **factory)
        self.ffn_norm = RMSNorm(dim, **factory)
        self.feed_forward = FeedForward(dim, ffn_dim, **factory)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


def tp_plan() -> dict:
    """TorchTitan's Llama tensor + sequence parallel plan, the sequence on dim 0."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    gather = PrepareModuleInput(input_layouts=(Shard(0),), desired_input_layouts=(Replicate(),))
    return {
        "attention_norm": SequenceParallel(sequence_dim=0),
        "attention": gather,
        "attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(0)),
        "ffn_norm": SequenceParallel(sequence_dim=0),
        "feed_forward": gather,
        "feed_forward.w1": ColwiseParallel(), "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(0)),
    }


def dtensor_block(dim, n_heads, n_kv_heads, ffn_dim, mesh, *, dtype=torch.float32,
                  device="cpu", seed: int = 0) -> LlamaBlock:
    """The block with random weights from ``seed`` (the same on every rank: the unsharded
    weights agree and ``parallelize_module`` takes each rank's shard), parallelised over the
    1-D device mesh ``mesh``. Heads and KV heads must divide over its ranks."""
    W = mesh.size()
    if n_heads % W or n_kv_heads % W or ffn_dim % W:
        raise UsageError(f"tensor parallelism over {W} ranks splits heads ({n_heads}), KV heads "
                         f"({n_kv_heads}) and the MLP width ({ffn_dim}): each must divide by {W}")
    from torch.distributed.tensor.parallel import parallelize_module
    dev = torch.device(device)
    # built where it runs (a 70B block's weights initialised on the host would take seconds)
    with torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
        torch.manual_seed(seed)
        block = LlamaBlock(dim, n_heads, n_kv_heads, ffn_dim, dtype=dtype, device=dev)
        for p in block.parameters():  # random norms too: a ones weight would hide a wrong grad
            torch.nn.init.normal_(p, std=dim ** -0.5 if p.dim() == 2 else 1.0)
    return parallelize_module(block, mesh, tp_plan())
