"""Tensor-parallel linear layers over sequence-sharded activations (Megatron's sequence
parallelism), thin modules over ``torch.ops.syncopate.*``.

* :class:`ColumnParallelLinear`: ``all_gather(x) @ W[:, my columns]`` -- ``[T/W, in]`` in,
  ``[T, out/W]`` out: ``torch.ops.syncopate.ag_gemm`` (its backward ``gemm_rs`` for ``dx`` and
  the gathered ``x`` the forward kept for ``dW``).
* :class:`RowParallelLinear`: ``reduce_scatter(x @ W[my rows, :])`` -- ``[T, in/W]`` in,
  ``[T/W, out]`` out: ``torch.ops.syncopate.gemm_rs`` (its backward ``ag_gemm``); or with
  ``reduce="all"`` the all-reduce, ``[T, out]`` out: :func:`syncopate.ops.gemm_ar` (a backward
  without communication: the output gradient is replicated).

Weights are stored ``[in, out]`` (the GEMMs' ``B`` operand, row-major), this rank's shard.
``fused=False`` runs the same layer as NCCL (or gloo, or loopback) collectives + cuBLAS
(:func:`~.parallel.all_gather_seq`, :func:`~.parallel.reduce_scatter_seq`): the comparison the
benchmark measures. A weight made of parts (a fused QKV projection, SwiGLU's gate and up) is
sharded part by part: ``parts`` are the parts' full widths, and a rank's shard is its columns
of each part, concatenated.
"""

from __future__ import annotations

import torch

from .. import torch_ops as sto
from ..errors import UsageError
from ..ops import gemm_ar
from ..runtime import collectives
from .parallel import Parallel, all_gather_seq, reduce_scatter_seq


def init_weight(t, std: float, seed: int | None) -> None:
    """``t ~ N(0, std^2)``: from a generator seeded ``seed`` on ``t``'s device (the same
    numbers on every rank for the same seed), else torch's global one."""
    with torch.no_grad():
        if seed is None:
            t.normal_(0.0, std)
            return
        g = torch.Generator(device=t.device)
        g.manual_seed(int(seed))
        t.copy_(torch.empty(t.shape, dtype=torch.float32, device=t.device).normal_(
            0.0, std, generator=g))


def _split(n: int, W: int, what: str) -> int:
    if n % W:
        raise UsageError(f"{what} ({n}) does not divide over {W} ranks: each rank holds "
                         f"{what} / W; pick sizes that divide by the world size")
    return n // W


class _ParallelLinear(torch.nn.Module):
    """The parts common to both layers: the group, the weight shard, the dtypes."""

    def __init__(self, in_features, out_features, comm, shard_shape, *, fused, dtype, device,
                 param_dtype, seed):
        super().__init__()
        self.par = Parallel.of(comm)
        self.in_features, self.out_features = int(in_features), int(out_features)
        self.fused = fused
        self.dtype = dtype
        pd = param_dtype if param_dtype is not None else dtype
        self.weight = torch.nn.Parameter(torch.empty(shard_shape, dtype=pd, device=device))
        init_weight(self.weight, self.in_features ** -0.5,
                    None if seed is None else seed * 1000003 + self.par.rank)

    def extra_repr(self) -> str:
        return (f"in={self.in_features}, out={self.out_features}, shard={tuple(self.weight.shape)}"
                f", W={self.par.world_size}, fused={self.fused}")


class ColumnParallelLinear(_ParallelLinear):
    """``y = all_gather(x, dim 0) @ W[:, my columns]`` (module docstring).

    ``ColumnParallelLinear(in_features, out_features, comm, *, parts=None, fused=None,
    dtype=torch.bfloat16, device=None, param_dtype=None, seed=None)``: ``comm`` a Communicator
    (or any group :class:`~.parallel.Parallel` takes); ``fused`` None: the registered op (which
    chooses its path; ``SYNCOPATE=0`` its unfused one), False: the plain composition;
    ``param_dtype``: the parameters' dtype when wider than the compute ``dtype`` (fp32 master
    weights, cast per call)."""

    def __init__(self, in_features: int, out_features: int, comm, *, parts=None, fused=None,
                 dtype=torch.bfloat16, device=None, param_dtype=None, seed=None):
        par = Parallel.of(comm)
        W = par.world_size
        parts = tuple(int(p) for p in (parts or (out_features,)))
        if sum(parts) != out_features:
            raise UsageError(f"parts {parts} must add up to out_features ({out_features})")
        shard = sum(_split(p, W, "a column part's width") for p in parts)
        super().__init__(in_features, out_features, par, (in_features, shard), fused=fused,
                         dtype=dtype, device=device, param_dtype=param_dtype, seed=seed)
        self.parts = parts

    def forward(self, x):
        """``x`` ``[T/W, ..., in]`` -> ``[T, ..., out/W]`` (rows gathered in rank order)."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.in_features)
        w = self.weight.to(self.dtype)  # a cast when the parameters are kept wider
        y = (all_gather_seq(x2, self.par) @ w if self.fused is False
             else sto.ag_gemm(x2, w, self.par.name))
        return y.view(lead[0] * self.par.world_size, *lead[1:], w.shape[1])

    def shard_of(self, full):
        """This rank's shard of the full ``[in, out]`` weight (its columns of every part)."""
        W, r = self.par.world_size, self.par.rank
        return torch.cat([part[:, r * (p // W):(r + 1) * (p // W)]
                          for p, part in zip(self.parts, full.split(self.parts, 1))], 1)

    def full_of(self, shards):
        """The full ``[in, out]`` weight from every rank's shard (rank order)."""
        W = self.par.world_size
        pieces = [s.split([p // W for p in self.parts], 1) for s in shards]  # [rank][part]
        return torch.cat([torch.cat(by_part, 1) for by_part in zip(*pieces)], 1)


class RowParallelLinear(_ParallelLinear):
    """``y = reduce_scatter(x @ W[my rows, :], dim 0)`` or, ``reduce="all"``, its all-reduce
    (module docstring). Arguments as :class:`ColumnParallelLinear`'s."""

    def __init__(self, in_features: int, out_features: int, comm, *, reduce: str = "scatter",
                 fused=None, dtype=torch.bfloat16, device=None, param_dtype=None, seed=None):
        if reduce not in ("scatter", "all"):
            raise UsageError(f"reduce={reduce!r}; choose 'scatter' (sequence-sharded output) or "
                             f"'all' (replicated output)")
        par = Parallel.of(comm)
        shard = _split(int(in_features), par.world_size, "in_features")
        super().__init__(in_features, out_features, par, (shard, out_features), fused=fused,
                         dtype=dtype, device=device, param_dtype=param_dtype, seed=seed)
        self.reduce = reduce

    def forward(self, x):
        """``x`` ``[T, ..., in/W]`` -> ``[T/W, ..., out]`` (``reduce="all"``: ``[T, ..., out]``)."""
        lead = x.shape[:-1]
        x2 = x.reshape(-1, self.weight.shape[0])
        w = self.weight.to(self.dtype)  # a cast when the parameters are kept wider
        W = self.par.world_size
        if self.reduce == "all":
            return _GemmAllReduce.apply(x2, w, self.par, self.fused).view(*lead, w.shape[1])
        if lead[0] % W:
            raise UsageError(f"RowParallelLinear: {lead[0]} rows do not divide over {W} ranks")
        y = (reduce_scatter_seq(x2 @ w, self.par) if self.fused is False
             else sto.gemm_rs(x2, w, self.par.name))
        return y.view(lead[0] // W, *lead[1:], w.shape[1])

    def shard_of(self, full):
        """This rank's rows of the full ``[in, out]`` weight."""
        n = self.weight.shape[0]
        return full[self.par.rank * n:(self.par.rank + 1) * n]

    def full_of(self, shards):
        return torch.cat(list(shards), 0)


class _GemmAllReduce(torch.autograd.Function):
    """``all_reduce(x @ w)``: :func:`syncopate.ops.gemm_ar` on CUDA (fused; ``fused=False``:
    its unfused path), elsewhere ``torch.mm`` and the group's all-reduce. Backward: the output
    gradient is the same on every rank, so ``dx = dy @ w^T`` and ``dw = x^T @ dy`` need no
    communication."""

    @staticmethod
    def forward(ctx, x, w, par, fused):
        ctx.save_for_backward(x, w)
        if x.is_cuda:
            return gemm_ar(x.contiguous(), w.contiguous(), par.communicator(x.device),
                           fused=None if fused is None else bool(fused))
        y = x @ w
        collectives.all_reduce(y, group=par.group)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy @ w.t(), x.t() @ dy, None, None


__all__ = ["ColumnParallelLinear", "RowParallelLinear", "init_weight"]
