"""Routings and torch references shared by the MoE tests (emulator, loopback, GPU workers).

The references are computed from the routing alone -- which (token, choice) pairs each expert
keeps (the first ``C`` in token order, then choice order: the capacity semantics), times the
experts' weights in fp32 -- never from the packing under test."""

from __future__ import annotations


def routing(kind, W, T, k, E, g):
    """``topk_ids`` per rank: ``random`` (uniform, distinct experts per token), ``hot`` (every
    token's first choice is expert 0: it overflows its capacity), ``empty`` (only the even
    experts: the odd ones, on every rank, get no token)."""
    import torch
    out = []
    for _ in range(W):
        if kind == "random":
            ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
        elif kind == "hot":
            ids = torch.stack([torch.randperm(E, generator=g)[:k] for _ in range(T)])
            ids[:, 0] = 0
            ids[:, 1:] = torch.where(ids[:, 1:] == 0, torch.ones_like(ids[:, 1:]), ids[:, 1:])
        elif kind == "empty":
            ids = torch.stack([torch.randperm(E // 2, generator=g)[:k] * 2 for _ in range(T)])
        else:
            raise ValueError(kind)
        out.append(ids)
    return out


def kept(ids, x: int, C: int) -> list[tuple[int, int]]:
    """The (token, choice) pairs of one rank's ``ids`` that expert ``x`` keeps, in row order
    (row ``j`` of the expert's group is the ``j``-th pair)."""
    T, k = ids.shape
    return [(t, i) for t in range(T) for i in range(k) if int(ids[t, i]) == x][:C]


def layer_reference(x, ids, wts, w1, w2, C, act):
    """One rank's MoE layer output ``[T, H]`` in fp32: for every kept choice ``(t, i)`` of
    expert ``x``, ``wts[t, i] * act(x[t] @ w1[x]) @ w2[x]``, summed over the choices; dropped
    choices contribute nothing."""
    import torch
    T = x.shape[0]
    out = torch.zeros(T, w2.shape[2])
    for e in range(w1.shape[0]):
        pairs = kept(ids, e, C)
        if not pairs:
            continue
        toks = torch.tensor([t for t, _ in pairs])
        y = act(x[toks].float() @ w1[e].float()) @ w2[e].float()
        for (t, i), row in zip(pairs, y):
            out[t] += float(wts[t, i]) * row
    return out


def silu(v):
    import torch
    return torch.nn.functional.silu(v)


def merge_rank_args(per_rank):
    """One emulator ``args`` dict from per-rank ``kernel_args(...)`` results ``(args, grid)``:
    a value shared where every rank has the same (the same tensor, or equal scalars), else a
    :class:`syncopate.emulate.PerRank` of the ranks' values."""
    import torch

    from syncopate.emulate import PerRank
    args = {}
    for name in per_rank[0][0]:
        vals = [pr[0][name] for pr in per_rank]
        same = all(v is vals[0] for v in vals) or (
            not isinstance(vals[0], torch.Tensor) and len({repr(v) for v in vals}) == 1)
        args[name] = vals[0] if same else PerRank(vals)
    return args
