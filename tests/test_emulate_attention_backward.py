"""The context-parallel attention backward, fused by the compiler from the unmodified local
backward kernels (issue 30), in the CPU emulator -- built with the op's own pieces
(:mod:`syncopate.ops.ring_attention_bwd`: the kernels' argument lists ``bwd_args``, the
compiled-in ``CONSTANT_ARGS``, the schedule ``backward_schedule``, the operand map), so what is
emulated is what ``syncopate.ops.ring_attention_backward`` launches.

* dK/dV (the op's fused kernel): :func:`~syncopate.kernels.attention_bwd.attn_bwd_dkdv_kernel`,
  one program per KV block of the gathered sequence (its K/V waited for), each rank's partial
  dK/dV of every block reduce-scattered to the block's owner (``kv_backward``: fp32 partials,
  the reduce after the gathers). After the launch every rank's K/V buffers hold the whole
  sequence: the op's dQ kernel reads them there, locally.
* dQ: :func:`~syncopate.kernels.attention_bwd.attn_bwd_dq_kernel` fused with the forward's
  plan (``kv_all_gather``, inner-loop remap under ``reorder_reductions``) -- the alternative
  the op does not take (it would move K/V a second time), kept to show the kernel fuses.

K/V are gathered again in the backward rather than kept from the forward: keeping them would
hold the whole sequence's K/V per layer until the backward (W times the activation memory of a
shard), which is what context parallelism exists to avoid.

Emulated at W = 2 and 4 (causal zigzag and non-causal, GQA) with the race checker on and the
fused outputs compared with the unfused kernels: 2 launches (the second stages fresh random
inputs) under two interleavings, then one launch of the problem's inputs under three, whose
every rank's dQ and owned dK/dV rows are compared with autograd through fp32 SDPA on the whole
sequence.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from syncopate.emulate import PerRank, emulate  # noqa: E402
from syncopate.kernels import AttentionConfig  # noqa: E402
from syncopate.kernels.attention_zigzag import zigzag_shard  # noqa: E402
from syncopate.ops import ring_attention_bwd as bwd  # noqa: E402
from syncopate.runtime.specialize import param_names, specialize  # noqa: E402
from syncopate.schedule.kv_gather import kv_all_gather  # noqa: E402

CFG = AttentionConfig(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)
POLICIES = ("in-order", "reverse", "random:3")
#: |grad - autograd(fp32)| / max|autograd| per gradient: bf16 inputs, P and dS rounded to bf16
TOL = 3e-2


def _problem(W, causal, B, Hq, Hkv, Sl, D, seed):
    """Inputs on the whole sequence (original order), the forward's lse and the backward's
    delta in fp32, autograd's gradients, and the rank shard function."""
    g = torch.Generator().manual_seed(seed)
    S = Sl * W
    q, k, v, do = (torch.randn(B, h, S, D, generator=g).to(torch.bfloat16)
                   for h in (Hq, Hkv, Hkv, Hq))
    group = Hq // Hkv
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    scale = 1.0 / math.sqrt(D)
    o = torch.nn.functional.scaled_dot_product_attention(
        qf, kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1), is_causal=causal)
    o.backward(do.float())
    s = (qf @ kf.repeat_interleave(group, 1).transpose(-1, -2)).detach() * scale
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    delta = (o.detach() * do.float()).sum(-1)
    if causal:
        shard = lambda x, r, dim=2: zigzag_shard(x, W, r, dim)  # noqa: E731
    else:
        shard = lambda x, r, dim=2: x.narrow(dim, r * Sl, Sl)  # noqa: E731
    return dict(q=q, k=k, v=v, do=do, lse=lse, delta=delta, dq=qf.grad, dk=kf.grad,
                dv=vf.grad, shard=shard, S=S)


def _kv_buffer(P, name, W, B, H, Sl, D):
    """The gathered ``[B*H, S, D]`` buffer in the rank-order layout the op stages (rank r's shard
    in rows [r Sl, (r+1) Sl))."""
    return torch.cat([P["shard"](P[name], r) for r in range(W)], 2).reshape(B * H, W * Sl, D) \
        .contiguous()


def _run(which, W, causal, B, Hq, Hkv, Sl, D, P, launches, policies=POLICIES):
    S = Sl * W
    kbuf = _kv_buffer(P, "k", W, B, Hkv, Sl, D)
    vbuf = _kv_buffer(P, "v", W, B, Hkv, Sl, D)
    per_rank = []
    for r in range(W):
        q, do = (P["shard"](P[n], r).contiguous() for n in ("q", "do"))
        lse, delta = (P["shard"](P[n], r).contiguous() for n in ("lse", "delta"))
        if which == "dkdv":
            outs = (torch.full((B * Hkv, S, D), float("nan")),
                    torch.full((B * Hkv, S, D), float("nan")))
        else:
            outs = (torch.full((B, Hq, Sl, D), float("nan"), dtype=torch.bfloat16),)
        per_rank.append(bwd.bwd_args(which, q, kbuf, vbuf, do, lse, delta, outs, 1 / math.sqrt(D),
                                     causal, r, W, Hkv, D, CFG))
    kernel = bwd.kernel(which)
    grid = per_rank[0][1]
    spec = specialize(kernel, per_rank[0][0], frozenset(bwd.CONSTANT_ARGS))
    sig, cx = spec.signature_dict(), spec.constexpr_dict()
    names = param_names(kernel)
    values = {}
    for i, name in enumerate(names):
        if sig[name] == "constexpr":
            continue
        vals = [a[0][i] for a in per_rank]
        if name in ("K", "V"):
            values[name] = vals[0]
        elif all(isinstance(x, torch.Tensor) for x in vals) or len({repr(x) for x in vals}) > 1:
            values[name] = PerRank(vals)
        else:
            values[name] = vals[0]
    if which == "dkdv":
        sched = bwd.backward_schedule(B, Hkv, S, D, torch.bfloat16, W)
        operand, reorder = bwd.OPERANDS, False
    else:
        sched = kv_all_gather((B * Hkv, S, D), "bf16", W, dim=1)
        operand, reorder = {"K": "K", "V": "V"}, True
    return emulate(kernel, signature=sig, constexprs=cx, schedule=sched, operand=operand,
                   grid=grid, args=values, backend="sm", comm_programs=2,
                   options=CFG.options(), launches=launches, policies=policies,
                   reorder_reductions=reorder, check=True)


def _rel(got, want) -> float:
    return float(np.abs(got - want).max() / max(float(np.abs(want).max()), 1e-30))


@pytest.mark.parametrize("W,causal", [(2, True), (4, True), (2, False)])
def test_fused_dq_matches_autograd(W, causal):
    B, Hq, Hkv, Sl, D = 1, 4, 2, 32, 64
    P = _problem(W, causal, B, Hq, Hkv, Sl, D, seed=W * 10 + causal)
    twice = _run("dq", W, causal, B, Hq, Hkv, Sl, D, P, launches=2,
                 policies=("reverse", "random:5"))
    assert twice.ok, twice.summary()
    res = _run("dq", W, causal, B, Hq, Hkv, Sl, D, P, launches=1)
    assert res.ok, res.summary()
    for policy in POLICIES:
        for r in range(W):
            dq = np.asarray(res.outputs[policy][r]["DQ"], np.float64).reshape(B, Hq, Sl, D)
            err = _rel(dq, P["shard"](P["dq"], r).double().numpy())
            assert err <= TOL, f"{policy} rank {r}: dq error {err:.3g}"


@pytest.mark.parametrize("W,causal", [(2, True), (4, True), (2, False)])
def test_fused_dkdv_reduce_scattered_to_owners_matches_autograd(W, causal):
    B, Hq, Hkv, Sl, D = 1, 4, 2, 32, 64
    P = _problem(W, causal, B, Hq, Hkv, Sl, D, seed=W * 10 + causal + 1)
    twice = _run("dkdv", W, causal, B, Hq, Hkv, Sl, D, P, launches=2,
                 policies=("reverse", "random:5"))
    assert twice.ok, twice.summary()
    res = _run("dkdv", W, causal, B, Hq, Hkv, Sl, D, P, launches=1)
    assert res.ok, res.summary()
    S = Sl * W
    kv = {n: _kv_buffer(P, n.lower(), W, B, Hkv, Sl, D).float().numpy() for n in ("K", "V")}
    for policy in POLICIES:
        for r in range(W):
            for n in ("K", "V"):  # the whole sequence, where the op's local dQ kernel reads it
                got = np.asarray(res.outputs[policy][r][n], np.float32).reshape(kv[n].shape)
                assert np.array_equal(got, kv[n]), f"{policy} rank {r}: {n} not fully gathered"
            for name, ref in (("DK", P["dk"]), ("DV", P["dv"])):
                buf = np.asarray(res.outputs[policy][r][name], np.float64).reshape(B, Hkv, S, D)
                mine = buf[:, :, r * Sl:(r + 1) * Sl]   # rank r owns its rows of the buffer
                err = _rel(mine, P["shard"](ref, r).double().numpy())
                assert err <= TOL, f"{policy} rank {r}: {name} error {err:.3g}"
