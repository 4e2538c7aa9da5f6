"""Context-parallel attention: each rank holds a shard of the sequence and attends its queries
over the whole sequence.

:class:`ContextParallelAttention` is the attention core (no parameters): ``q`` ``[B, Hq, S/W,
D]``, ``k``/``v`` ``[B, Hkv, S/W, D]`` (GQA) of this rank's rows in, ``o`` like ``q`` out;
:meth:`ContextParallelAttention.positions` gives the original positions of a rank's rows (what
its rotary embedding must use). Two methods:

``method="ring"`` (any head count): K/V gathered along the sequence. Causal attention takes the
zigzag layout (rank ``r`` holds segments ``r`` and ``2W-1-r`` of ``2W``: every rank has the
same causal work), non-causal contiguous blocks.

* fused (default): ``torch.ops.syncopate.ring_attention`` -- K/V all-gathered inside the
  attention kernel; its backward gathers K/V again inside the dK/dV kernel and reduce-scatters
  the fp32 dK/dV partials to their owners (:mod:`syncopate.ops.ring_attention_bwd`).
* ``fused=False``: the plain composition -- an all-gather of K and V (NCCL, gloo or loopback;
  its backward the reduce-scatter), the gathered sequence put back in original order, and
  SDPA (flash where it can) per zigzag segment with the lower-right causal mask over the keys
  before the segment's end.

``method="ulysses"`` (DeepSpeed-Ulysses; query and KV heads divisible by W): an all-to-all
makes every rank hold whole heads (``H/W`` of them) of the whole sequence, attention is local,
a second all-to-all brings the output back. Contiguous blocks, causal or not: each rank
attends over the whole sequence, so no layout balances the causal work (it is balanced
already).

* fused (default): ``torch.ops.syncopate.ulysses_attention`` -- forward: both all-to-alls
  inside the attention kernel; backward: **not fused**, an all-to-all of Q, K, V, O, dO, the
  local flash-attention backward kernels, an all-to-all of dQ, dK, dV
  (:func:`syncopate.ops.ulysses_attention_backward` says why).
* ``fused=False``: all-to-alls (:func:`~.parallel.heads_of` / :func:`~.parallel.sequence_of`,
  each the other's backward) around SDPA.
"""

from __future__ import annotations

import torch
from torch.nn.attention.bias import causal_lower_right

from .. import torch_ops as sto
from ..errors import UsageError
from ..ops.ring_attention import shard_positions
from .parallel import Parallel, all_gather_seq, heads_of, sequence_of

#: the context-parallel attention methods
METHODS = ("ring", "ulysses")


def check_heads(method: str, n_heads: int, n_kv_heads: int, world_size: int) -> None:
    """Ulysses gives each rank whole heads: a :class:`UsageError` saying to use ring attention
    when ``n_heads`` or ``n_kv_heads`` does not divide by ``world_size``."""
    if method == "ulysses" and (n_heads % world_size or n_kv_heads % world_size):
        raise UsageError(f"Ulysses attention splits the heads over the {world_size} ranks: query "
                         f"heads ({n_heads}) and KV heads ({n_kv_heads}) must divide by "
                         f"{world_size}; use method='ring' (cp_method='ring' for a "
                         f"TransformerBlock), which takes any head count")


class ContextParallelAttention(torch.nn.Module):
    """Ring or Ulysses attention over sequence shards (module docstring).

    ``ContextParallelAttention(comm, *, causal=True, method="ring", fused=None,
    sm_scale=None)``: ``comm`` a Communicator or any group :class:`~.parallel.Parallel`
    takes; ``fused`` None: the registered op (which chooses its path; ``SYNCOPATE=0`` its
    unfused one), False: the plain composition."""

    def __init__(self, comm, *, causal: bool = True, method: str = "ring", fused=None,
                 sm_scale=None):
        super().__init__()
        if method not in METHODS:
            raise UsageError(f"method={method!r}; context-parallel attention offers "
                             f"{', '.join(METHODS)} (docs/model.md)")
        self.par = Parallel.of(comm)
        self.causal, self.method, self.fused = bool(causal), method, fused
        self.sm_scale = sm_scale

    def positions(self, local_len: int, device=None):
        """The original sequence positions (``torch.long`` on ``device``) of this rank's
        ``local_len`` rows (zigzag for causal ring attention, else contiguous blocks)."""
        return shard_positions(local_len, self.par.world_size, self.par.rank,
                               self.method == "ring" and self.causal, device)

    def forward(self, q, k, v):
        if self.method == "ulysses":
            check_heads(self.method, q.shape[1], k.shape[1], self.par.world_size)
            if self.fused is not False:
                return sto.ulysses_attention(q, k, v, self.par.name, causal=self.causal,
                                             sm_scale=self.sm_scale)
            qh, kh, vh = (heads_of(t, self.par) for t in (q, k, v))
            return sequence_of(torch.nn.functional.scaled_dot_product_attention(
                qh, kh, vh, is_causal=self.causal, scale=self.sm_scale, enable_gqa=True),
                self.par)
        if self.fused is not False:
            return sto.ring_attention(q, k, v, self.par.name, causal=self.causal,
                                      sm_scale=self.sm_scale)
        return self._unfused(q, k, v)

    def _unfused(self, q, k, v):
        sdpa = torch.nn.functional.scaled_dot_product_attention
        par = self.par
        W, Sl = par.world_size, q.shape[2]
        # every rank's K/V shards in rank order, [B, Hkv, W*Sl, D] (differentiable)
        kg, vg = (all_gather_seq(t.unsqueeze(0), par).permute(1, 2, 0, 3, 4)
                  .reshape(*t.shape[:2], W * t.shape[2], t.shape[3]) for t in (k, v))
        if not self.causal:
            return sdpa(q, kg, vg, scale=self.sm_scale, enable_gqa=True)
        # the gathered sequence is in rank (zigzag) order: back to the original order, then
        # each of this rank's two segments sees the keys up to its own end
        stored = torch.cat([shard_positions(Sl, W, r, True, q.device) for r in range(W)])
        order = torch.argsort(stored)
        kg, vg = kg.index_select(2, order), vg.index_select(2, order)
        seg = Sl // 2
        # the lower-right mask calls the flash / efficient kernels directly, which do not all
        # take fewer KV heads: the KV heads are expanded here
        G = q.shape[1] // k.shape[1]
        if G > 1:
            kg, vg = kg.repeat_interleave(G, 1), vg.repeat_interleave(G, 1)
        outs = []
        for i, s in enumerate((par.rank, 2 * W - 1 - par.rank)):
            end = (s + 1) * seg
            outs.append(sdpa(q[:, :, i * seg:(i + 1) * seg], kg[:, :, :end], vg[:, :, :end],
                             attn_mask=causal_lower_right(seg, end), scale=self.sm_scale))
        return torch.cat(outs, 2)

    def extra_repr(self) -> str:
        return (f"method={self.method}, causal={self.causal}, W={self.par.world_size}, "
                f"fused={self.fused}")


__all__ = ["ContextParallelAttention", "METHODS", "check_heads"]
