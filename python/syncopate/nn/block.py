"""A Llama-style transformer block over W ranks, and the same block unsharded.

:class:`TransformerBlock` -- RMSNorm, QKV projection, rotary embedding, grouped-query causal
attention, output projection, RMSNorm, SwiGLU MLP (or a mixture of experts), residuals -- on
activations ``[S/W, B, dim]`` (sequence-major: rows ``(s, b)``), in one of two layouts:

* ``layout="tp"``, tensor + sequence parallel (Megatron): activations between blocks are
  sequence-sharded in contiguous blocks; inside the block the heads and the MLP's hidden units
  are split over the ranks. QKV and the MLP's gate/up projection are
  :class:`~.linear.ColumnParallelLinear` (all-gather + GEMM), the output and down projections
  :class:`~.linear.RowParallelLinear` (GEMM + reduce-scatter); attention is local over the
  whole sequence and this rank's heads (SDPA). Needs ``n_heads`` and ``n_kv_heads`` divisible
  by W.
* ``layout="cp"``, context parallel: every rank holds every weight and a shard of the
  sequence; the projections and the MLP are local GEMMs and only attention communicates
  (:class:`~.attention.ContextParallelAttention`, ``cp_method``): ``"ring"`` (the default, any
  head count) on the zigzag shards (segments ``r`` and ``2W-1-r``), ``"ulysses"`` (heads
  divisible by W) on contiguous blocks. Every weight is replicated:
  :func:`~.parallel.sync_grads` sums their gradients.

``moe=MoE(num_experts, top_k, capacity)`` replaces the MLP by a mixture of experts, expert
parallel over the same ranks (``num_experts / W`` experts each), through
:func:`syncopate.ops.moe_dispatch_gemm` and :func:`syncopate.ops.moe_gemm_combine`: inference
only (no backward).

:class:`ReferenceBlock` is the same block in plain torch on the whole sequence (``[S, B,
dim]``); :meth:`TransformerBlock.load_from` takes this rank's shards of a reference's weights,
:meth:`TransformerBlock.reference` gathers the shards back into one (a collective).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch

from ..errors import UsageError
from ..ops import moe_dispatch_gemm, moe_gemm_combine
from ..runtime import collectives
from .attention import METHODS, ContextParallelAttention, check_heads
from .functional import LAYOUTS, layout_positions, rms_norm, rope, swiglu
from .linear import ColumnParallelLinear, RowParallelLinear, init_weight
from .memory import memory_held
from .parallel import Parallel, mark_replicated


@dataclass(frozen=True)
class MoE:
    """The mixture-of-experts MLP's shape: ``num_experts`` experts of the block's ``ffn_dim``,
    each token routed to ``top_k`` of them (softmax router, the top-k weights renormalised),
    ``capacity`` rows per (source rank, expert) -- a multiple of the grouped GEMM's BLOCK_M.
    ``on_overflow``: ``"drop"`` (count the excess in :attr:`TransformerBlock.moe_dropped`: no
    host read, capturable) or ``"error"`` (one host read, a typed error)."""

    num_experts: int
    top_k: int = 2
    capacity: int = 128
    on_overflow: str = "drop"


def route(t, router, top_k: int):
    """``(weights, expert ids)`` ``[tokens, top_k]`` of the rows ``t``: the softmax router's
    top ``top_k`` (in fp32), their weights renormalised to sum to 1."""
    wts, ids = torch.softmax(t.float() @ router.float(), -1).topk(top_k, -1)
    return wts / wts.sum(-1, keepdim=True), ids


def _param(shape, dtype, device, std, seed, replicated: bool):
    p = torch.nn.Parameter(torch.empty(shape, dtype=dtype, device=device))
    if std is None:
        torch.nn.init.ones_(p)
    else:
        init_weight(p, std, seed)
    return mark_replicated(p) if replicated else p


class _Local(torch.nn.Module):
    """A replicated ``x @ W`` (context parallelism's projections), ``W`` stored ``[in, out]``."""

    def __init__(self, in_features, out_features, *, dtype, device, param_dtype, seed):
        super().__init__()
        self.dtype = dtype
        self.weight = _param((in_features, out_features), param_dtype, device,
                             in_features ** -0.5, seed, True)

    def forward(self, x):
        return x @ self.weight.to(self.dtype)

    def shard_of(self, full):
        return full

    def full_of(self, shards):
        return shards[0]


class TransformerBlock(torch.nn.Module):
    """One Llama-style block over the ranks of ``comm`` (module docstring).

    ``TransformerBlock(dim, n_heads, n_kv_heads, ffn_dim, comm, layout="tp", fused=None,
    dtype=torch.bfloat16, device=None, moe=None, *, head_dim=None, param_dtype=None,
    rope_theta=10000.0, norm_eps=1e-5, seed=None, cp_method="ring")``

    ``comm``: a :class:`~syncopate.runtime.Communicator` -- one for the whole model: its
    symmetric buffers and fused kernels are shared by every layer of the same shape -- or, on a
    CPU, any group :class:`~.parallel.Parallel` takes. ``fused`` None: the registered ops
    (``torch.ops.syncopate.*``: each chooses its path; ``SYNCOPATE=0`` takes their unfused
    ones); False: the same block as NCCL collectives + cuBLAS + SDPA. ``dtype``: compute;
    ``param_dtype``: the parameters' (e.g. fp32 master weights, cast per call; default
    ``dtype``). ``seed``: initialise deterministically (replicated weights identical on every
    rank); else from torch's global generator (call :meth:`load_from` to set weights).
    ``cp_method``: the context-parallel attention (``layout="cp"``; module docstring) -- it
    decides the sequence shards (:meth:`positions`, :meth:`shard_sequence`,
    :meth:`gather_sequence`).
    """

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, ffn_dim: int, comm,
                 layout: str = "tp", fused=None, dtype=torch.bfloat16, device=None, moe=None, *,
                 head_dim: int | None = None, param_dtype=None, rope_theta: float = 10000.0,
                 norm_eps: float = 1e-5, seed: int | None = None, cp_method: str = "ring"):
        super().__init__()
        if layout not in LAYOUTS:
            raise UsageError(f"layout={layout!r}; choose 'tp' (tensor + sequence parallel) or "
                             f"'cp' (context parallel)")
        if cp_method not in METHODS:
            raise UsageError(f"cp_method={cp_method!r}; choose one of {', '.join(METHODS)}")
        self.par = par = Parallel.of(comm)
        W = par.world_size
        D = head_dim if head_dim is not None else dim // n_heads
        if not head_dim and dim % n_heads:
            raise UsageError(f"dim {dim} is not a multiple of n_heads {n_heads}: pass head_dim")
        if n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise UsageError(f"n_heads ({n_heads}) must be a multiple of n_kv_heads "
                             f"({n_kv_heads})")
        if layout == "tp" and (n_heads % W or n_kv_heads % W):
            raise UsageError(f"layout 'tp' splits the heads over the {W} ranks: n_heads "
                             f"({n_heads}) and n_kv_heads ({n_kv_heads}) must divide by {W}; "
                             f"use layout 'cp' for fewer KV heads than ranks")
        if layout == "cp":
            check_heads(cp_method, n_heads, n_kv_heads, W)
        if moe is not None and not isinstance(moe, MoE):
            raise UsageError(f"moe must be a syncopate.nn.MoE(num_experts, top_k, capacity), "
                             f"got {type(moe).__name__}")
        self.dim, self.n_heads, self.n_kv_heads, self.ffn_dim = dim, n_heads, n_kv_heads, ffn_dim
        self.head_dim, self.layout, self.fused, self.moe = D, layout, fused, moe
        self.cp_method = cp_method
        self.dtype, self.rope_theta, self.norm_eps = dtype, rope_theta, norm_eps
        pd = param_dtype if param_dtype is not None else dtype
        s = (lambda i: None) if seed is None else (lambda i: seed * 7919 + i)  # noqa: E731
        self.attn_norm = _param((dim,), pd, device, None, None, True)
        self.ffn_norm = _param((dim,), pd, device, None, None, True)
        qkv = (n_heads * D, n_kv_heads * D, n_kv_heads * D)

        def linear(parallel, i, o, seed, **parts):  # tp: sharded over the ranks; cp: replicated
            kw = dict(seed=seed, dtype=dtype, device=device, param_dtype=pd)
            return (parallel(i, o, par, fused=fused, **parts, **kw) if layout == "tp"
                    else _Local(i, o, **kw))
        self.wqkv = linear(ColumnParallelLinear, dim, sum(qkv), s(1), parts=qkv)
        self.wo = linear(RowParallelLinear, n_heads * D, dim, s(2))
        if layout == "cp":
            self.attn = ContextParallelAttention(par, causal=True, method=cp_method,
                                                 fused=fused)
        if moe is not None:
            if moe.num_experts % W:
                raise UsageError(f"{moe.num_experts} experts do not divide over {W} ranks")
            El = moe.num_experts // W
            self.router = _param((dim, moe.num_experts), torch.float32, device, dim ** -0.5,
                                 s(3), True)
            self.w13 = _param((El, dim, 2 * ffn_dim), pd, device, dim ** -0.5,
                              None if seed is None else s(4) * 31 + par.rank, False)
            self.w2 = _param((El, ffn_dim, dim), pd, device, ffn_dim ** -0.5,
                             None if seed is None else s(5) * 31 + par.rank, False)
            #: choices the last MoE call dropped over capacity, per expert (a device tensor)
            self.moe_dropped = None
        else:
            self.w13 = linear(ColumnParallelLinear, dim, 2 * ffn_dim, s(4),
                              parts=(ffn_dim, ffn_dim))
            self.w2 = linear(RowParallelLinear, ffn_dim, dim, s(5))

    # -- layout --------------------------------------------------------------------------

    def positions(self, seq: int, device=None):
        """The original positions of this rank's rows of a ``seq``-token sequence."""
        return layout_positions(self.layout, seq, self.par.world_size, self.par.rank, device,
                                self.cp_method)

    def shard_sequence(self, x):
        """This rank's rows (dim 0) of a whole-sequence tensor ``[S, ...]``, in this layout."""
        return x[self.positions(x.shape[0], x.device)]

    def gather_sequence(self, y):
        """Every rank's rows ``[S/W, ...]`` back into the whole sequence in original order
        (a collective; for checks, not differentiable)."""
        W = self.par.world_size
        full = y.new_empty((y.shape[0] * W, *y.shape[1:]))
        collectives.all_gather_into_tensor(full, y.contiguous(), group=self.par.group)
        stored = torch.cat([layout_positions(self.layout, full.shape[0], W, r, y.device,
                                             self.cp_method) for r in range(W)])
        return full[torch.argsort(stored)]

    # -- forward -------------------------------------------------------------------------

    def forward(self, x):
        """``x`` ``[S/W, B, dim]`` (this rank's rows in the layout) -> the same shape."""
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise UsageError(f"TransformerBlock takes [S/W, B, dim={self.dim}] activations "
                             f"(sequence-major), got {tuple(x.shape)}")
        x = x + self._attention(rms_norm(x, self.attn_norm, self.norm_eps))
        h = rms_norm(x, self.ffn_norm, self.norm_eps)
        return x + (self._moe(h) if self.moe is not None else self._mlp(h))

    def _attention(self, h):
        Hq, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        qkv = self.wqkv(h)  # tp: [S, B, (Hq + 2 Hkv) D / W]; cp: [S/W, B, (Hq + 2 Hkv) D]
        S, B = qkv.shape[:2]
        W = self.par.world_size if self.layout == "tp" else 1
        hq, hkv = Hq // W, Hkv // W
        q, k, v = qkv.split((hq * D, hkv * D, hkv * D), -1)
        q, k, v = q.view(S, B, hq, D), k.view(S, B, hkv, D), v.view(S, B, hkv, D)
        pos = (torch.arange(S, device=h.device) if self.layout == "tp"
               else self.attn.positions(S, h.device))
        q, k = rope(q, pos, self.rope_theta), rope(k, pos, self.rope_theta)
        q, k, v = (t.permute(1, 2, 0, 3) for t in (q, k, v))  # [B, H, S, D]
        if self.layout == "tp":
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                 enable_gqa=True)
        else:
            o = self.attn(q.contiguous(), k.contiguous(), v.contiguous())
        o = o.permute(2, 0, 1, 3).reshape(S, B, hq * D)
        return self.wo(o)

    def _mlp(self, h):
        return self.w2(swiglu(*self.w13(h).chunk(2, -1)))

    def _moe(self, h):
        if torch.is_grad_enabled() and any(p.requires_grad for p in (self.w13, self.w2)):
            raise UsageError("the mixture-of-experts MLP is inference only (its ops have no "
                             "backward): run it under torch.no_grad() or freeze its weights")
        moe, F = self.moe, self.ffn_dim
        lead = h.shape[:-1]
        t = h.reshape(-1, self.dim)
        wts, ids = route(t, self.router, moe.top_k)
        if h.is_cuda:
            comm, fused = self.par.communicator(h.device), self.fused
        else:  # the ops' unfused paths run on CPU tensors (loopback or gloo ranks), and read
            # only a Communicator's group, rank, size and device: a CPU run has no Communicator
            par, fused = self.par, False
            comm = SimpleNamespace(group=par.group, rank=par.rank, world_size=par.world_size,
                                   device=h.device)
        validate = moe.on_overflow == "error"
        d = moe_dispatch_gemm(t.contiguous(), ids, wts, self.w13.to(self.dtype).contiguous(), comm,
                              capacity=moe.capacity, on_overflow=moe.on_overflow,
                              validate=validate, fused=fused)
        self.moe_dropped = d.dropped
        a = swiglu(d.out[..., :F], d.out[..., F:]).contiguous()
        y = moe_gemm_combine(a, self.w2.to(self.dtype).contiguous(), d, comm, validate=validate,
                             fused=fused)
        return y.view(*lead, self.dim)

    # -- weights ---------------------------------------------------------------------------

    #: each parameter of the block and the reference's tensors it is made of (concatenated
    #: along the last dim: the fused QKV projection, SwiGLU's gate and up)
    _PARTS = (("attn_norm", ("attn_norm",)), ("ffn_norm", ("ffn_norm",)),
              ("wqkv", ("wq", "wk", "wv")), ("wo", ("wo",)), ("router", ("router",)),
              ("w13", ("w1", "w3")), ("w2", ("w2",)))

    def _entries(self):
        """``(parameter, reference names, linear layer or None, per-expert)`` for each weight."""
        for name, refs in self._PARTS:
            mod = getattr(self, name, None)
            if mod is None:
                continue
            lin = mod if isinstance(mod, torch.nn.Module) else None
            p = mod.weight if lin is not None else mod
            yield p, refs, lin, self.moe is not None and name in ("w13", "w2")

    @torch.no_grad()
    def load_from(self, ref: "ReferenceBlock") -> "TransformerBlock":
        """Set this rank's weights to its shards of ``ref``'s (same shape); returns self."""
        for p, refs, lin, expert in self._entries():
            full = torch.cat([getattr(ref, a) for a in refs], -1)
            if lin is not None:
                full = lin.shard_of(full)
            elif expert:
                El = p.shape[0]
                full = full[self.par.rank * El:(self.par.rank + 1) * El]
            p.copy_(full)
        return self

    @torch.no_grad()
    def reference(self, dtype=torch.float32, device=None) -> "ReferenceBlock":
        """The unsharded block with this block's weights (a collective: every rank's shards
        are gathered; every rank gets the whole)."""
        W = self.par.world_size
        ref = ReferenceBlock(self.dim, self.n_heads, self.n_kv_heads, self.ffn_dim, moe=self.moe,
                             head_dim=self.head_dim, dtype=dtype,
                             device=device if device is not None else self.attn_norm.device,
                             rope_theta=self.rope_theta, norm_eps=self.norm_eps)

        def gathered(t):
            parts = [torch.empty_like(t) for _ in range(W)]
            collectives.all_gather(parts, t.contiguous(), group=self.par.group)
            return parts
        for p, refs, lin, expert in self._entries():
            if lin is not None:
                full = lin.full_of(gathered(p))
            elif expert:
                full = torch.cat(gathered(p), 0)
            else:
                full = p
            sizes = [getattr(ref, a).shape[-1] for a in refs]
            for a, part in zip(refs, full.split(sizes, -1)):
                getattr(ref, a).copy_(part)
        return ref

    def memory(self):
        """What this rank holds for the block: :func:`~.memory.memory_held` of its parameters,
        gradients and its Communicator (shared by every layer on it)."""
        return memory_held(self, self.par.comm)

    def extra_repr(self) -> str:
        cp = f"/{self.cp_method}" if self.layout == "cp" else ""
        return (f"layout={self.layout}{cp}, dim={self.dim}, heads={self.n_heads}/{self.n_kv_heads}"
                f", head_dim={self.head_dim}, ffn={self.ffn_dim}, W={self.par.world_size}, "
                f"fused={self.fused}, moe={self.moe}")


class ReferenceBlock(torch.nn.Module):
    """The block unsharded, in plain torch: ``x`` ``[S, B, dim]`` (the whole sequence, original
    order) -> the same. Weights ``[in, out]``: ``wq``, ``wk``, ``wv``, ``wo``, ``w1`` (gate),
    ``w3`` (up), ``w2`` (down) -- per expert (``[E, in, out]``) with ``moe`` -- and the norms'
    ``attn_norm``, ``ffn_norm``; ``router`` ``[dim, E]``."""

    def __init__(self, dim: int, n_heads: int, n_kv_heads: int, ffn_dim: int, moe=None, *,
                 head_dim: int | None = None, dtype=torch.float32, device=None,
                 rope_theta: float = 10000.0, norm_eps: float = 1e-5, seed: int | None = None):
        super().__init__()
        D = head_dim if head_dim is not None else dim // n_heads
        self.dim, self.n_heads, self.n_kv_heads, self.ffn_dim = dim, n_heads, n_kv_heads, ffn_dim
        self.head_dim, self.moe, self.rope_theta, self.norm_eps = D, moe, rope_theta, norm_eps
        s = (lambda i: None) if seed is None else (lambda i: seed * 7919 + i)  # noqa: E731

        def p(shape, std, i):
            return _param(shape, dtype, device, std, s(i), False)
        self.attn_norm, self.ffn_norm = p((dim,), None, 0), p((dim,), None, 0)
        self.wq = p((dim, n_heads * D), dim ** -0.5, 10)
        self.wk = p((dim, n_kv_heads * D), dim ** -0.5, 11)
        self.wv = p((dim, n_kv_heads * D), dim ** -0.5, 12)
        self.wo = p((n_heads * D, dim), (n_heads * D) ** -0.5, 2)
        E = () if moe is None else (moe.num_experts,)
        if moe is not None:
            self.router = _param((dim, moe.num_experts), torch.float32, device, dim ** -0.5,
                                 s(3), False)
        self.w1 = p((*E, dim, ffn_dim), dim ** -0.5, 40)
        self.w3 = p((*E, dim, ffn_dim), dim ** -0.5, 41)
        self.w2 = p((*E, ffn_dim, dim), ffn_dim ** -0.5, 5)

    def forward(self, x):
        S, B, _ = x.shape
        Hq, Hkv, D = self.n_heads, self.n_kv_heads, self.head_dim
        h = rms_norm(x, self.attn_norm, self.norm_eps)
        pos = torch.arange(S, device=x.device)
        q = rope((h @ self.wq).view(S, B, Hq, D), pos, self.rope_theta)
        k = rope((h @ self.wk).view(S, B, Hkv, D), pos, self.rope_theta)
        v = (h @ self.wv).view(S, B, Hkv, D)
        o = torch.nn.functional.scaled_dot_product_attention(
            q.permute(1, 2, 0, 3), k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3), is_causal=True,
            enable_gqa=True)
        x = x + o.permute(2, 0, 1, 3).reshape(S, B, Hq * D) @ self.wo
        h = rms_norm(x, self.ffn_norm, self.norm_eps)
        if self.moe is None:
            return x + swiglu(h @ self.w1, h @ self.w3) @ self.w2
        t = h.reshape(-1, self.dim)
        wts, ids = route(t, self.router, self.moe.top_k)
        wts = wts.to(t.dtype)
        out = torch.zeros_like(t)
        for e in range(self.moe.num_experts):  # every expert on every token, weighted by its
            w_e = (wts * (ids == e)).sum(-1)    # routing weight (0 where not chosen)
            out = out + w_e[:, None] * (swiglu(t @ self.w1[e], t @ self.w3[e]) @ self.w2[e])
        return x + out.view_as(x)


__all__ = ["MoE", "ReferenceBlock", "TransformerBlock"]
