"""The local pieces of a Llama-style block, in plain torch: RMSNorm, rotary embeddings, SwiGLU,
and the original positions of a rank's rows in each layout.

Shared by the sharded modules and the unsharded reference (:class:`~.block.ReferenceBlock`),
so both compute them identically; none communicates.
"""

from __future__ import annotations

import torch

from ..errors import UsageError
from ..ops.ring_attention import shard_positions


def rms_norm(x, weight, eps: float = 1e-5):
    """``x / rms(x) * weight`` over the last dim, in fp32, returned in ``x``'s dtype."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.float()).to(x.dtype)


def rope(x, positions, theta: float = 10000.0):
    """Rotary embedding (Llama/NeoX "rotate half") of ``x`` ``[S, B, H, D]`` at the original
    sequence ``positions`` ``[S]`` (on ``x``'s device) of its rows; in fp32, returned in
    ``x``'s dtype."""
    D = x.shape[-1]
    if D % 2:
        raise UsageError(f"rotary embedding needs an even head_dim, got {D}")
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, device=x.device, dtype=torch.float32) / D))
    ang = positions.to(torch.float32)[:, None] * inv[None, :]  # [S, D/2]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[:, None, None, :]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[:, None, None, :]
    xf = x.float()
    half = D // 2
    rot = torch.cat([-xf[..., half:], xf[..., :half]], -1)
    return (xf * cos + rot * sin).to(x.dtype)


def swiglu(gate, up):
    """``silu(gate) * up``: the Llama MLP's activation."""
    return torch.nn.functional.silu(gate) * up


#: the layouts of :class:`~.block.TransformerBlock`
LAYOUTS = ("tp", "cp")


def layout_positions(layout: str, seq: int, world_size: int, rank: int, device=None):
    """The original positions (``torch.long``) of the rows ``rank`` holds of a ``seq``-long
    sequence: ``"tp"`` contiguous blocks of ``seq / W`` (Megatron's sequence parallelism),
    ``"cp"`` the zigzag shards of causal context parallelism (segments ``r`` and
    ``2W - 1 - r`` of ``2W``)."""
    if layout not in LAYOUTS:
        raise UsageError(f"layout={layout!r}; choose one of {', '.join(LAYOUTS)}")
    if seq % (2 * world_size if layout == "cp" else world_size):
        raise UsageError(f"a {seq}-token sequence does not divide into the {layout!r} layout's "
                         f"shards over {world_size} ranks: pad it to a multiple of "
                         f"{2 * world_size if layout == 'cp' else world_size}")
    return shard_positions(seq // world_size, world_size, rank, layout == "cp", device)


__all__ = ["LAYOUTS", "layout_positions", "rms_norm", "rope", "swiglu"]
