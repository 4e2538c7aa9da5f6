"""Blocks in sequence: a model body of :class:`~.block.TransformerBlock` s over one group, and
the same unsharded (what the examples and the tests train side by side)."""

from __future__ import annotations

import torch

from .block import ReferenceBlock, TransformerBlock
from .memory import memory_held
from .parallel import Parallel, sync_grads


class TransformerStack(torch.nn.Module):
    """``n_layers`` equal blocks on one Communicator (``TransformerBlock``'s arguments; a
    ``seed`` gives layer ``i`` the seed ``seed + i``)."""

    def __init__(self, n_layers: int, dim: int, n_heads: int, n_kv_heads: int, ffn_dim: int,
                 comm, layout: str = "tp", fused=None, dtype=torch.bfloat16, device=None,
                 moe=None, *, seed: int | None = None, **kw):
        super().__init__()
        self.par = Parallel.of(comm)
        self.blocks = torch.nn.ModuleList(
            TransformerBlock(dim, n_heads, n_kv_heads, ffn_dim, self.par, layout, fused, dtype,
                             device, moe, seed=None if seed is None else seed + i, **kw)
            for i in range(n_layers))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x

    def shard_sequence(self, x):
        return self.blocks[0].shard_sequence(x)

    def gather_sequence(self, y):
        return self.blocks[0].gather_sequence(y)

    def load_from(self, ref: "ReferenceStack") -> "TransformerStack":
        for b, r in zip(self.blocks, ref.blocks):
            b.load_from(r)
        return self

    def sync_grads(self) -> int:
        """:func:`~.parallel.sync_grads` of every block (one all-reduce per dtype)."""
        return sync_grads(self, self.par)

    def memory(self):
        return memory_held(self, self.par.comm)


class ReferenceStack(torch.nn.Module):
    """``n_layers`` :class:`~.block.ReferenceBlock` s (the same ``seed`` convention)."""

    def __init__(self, n_layers: int, dim: int, n_heads: int, n_kv_heads: int, ffn_dim: int,
                 moe=None, *, seed: int | None = None, **kw):
        super().__init__()
        self.blocks = torch.nn.ModuleList(
            ReferenceBlock(dim, n_heads, n_kv_heads, ffn_dim, moe,
                           seed=None if seed is None else seed + i, **kw)
            for i in range(n_layers))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


__all__ = ["ReferenceStack", "TransformerStack"]
