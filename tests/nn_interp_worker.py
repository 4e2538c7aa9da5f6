"""Runs the fused path of ``syncopate.ops.ring_attention_backward`` on the CPU for
tests/test_nn_attention_wiring.py: the op's own Python (its buffers, staging, argument lists,
launch order, the local dQ kernel, the copy of its rows of the reduced dK/dV) with the real
local kernels under Triton's interpreter, and only the fused dK/dV kernel stood in for by
:class:`FakeFused`. Run as ``TRITON_INTERPRET=1 python nn_interp_worker.py CASES RESULTS``
(tests/interp_runner.py: the interpreter must be on before triton is imported).
"""

from __future__ import annotations

import math
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime"))
from interp_runner import serve_cases  # noqa: E402
from runtime_fakes import fake_comm  # noqa: E402

from syncopate.kernels import AttentionConfig  # noqa: E402
from syncopate.kernels.attention_zigzag import zigzag_shard  # noqa: E402
from syncopate.ops import ring_attention_backward  # noqa: E402
from syncopate.ops import ring_attention_bwd as bwd  # noqa: E402
from syncopate.runtime.specialize import param_names  # noqa: E402

CFG = AttentionConfig(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)


class FakeFused:
    """The fused dK/dV kernel of rank ``me`` as its effect: the launch checks that the op
    staged this rank's K/V shard into its rows, fills the other rows with the peers' shards
    (the gather), runs the *unfused* kernel with the arguments the op handed over -- and, for
    each peer, the same arguments with the peer's queries, ``dO``, ``lse``, ``delta`` and query
    offset -- and leaves in this rank's rows of the dK/dV buffers the sum of every rank's
    partials (the reduce-scatter), NaN elsewhere."""

    def __init__(self, me, W, Sl, ranks, events):
        self.me, self.W, self.Sl, self.ranks, self.events = me, W, Sl, ranks, events
        self.names = param_names(bwd.kernel("dkdv"))

    def before_staging(self):
        self.events.append("before_staging")

    def __getitem__(self, grid):
        def launch(*args):
            self.events.append("fused dkdv")
            ix = {n: i for i, n in enumerate(self.names)}
            me, Sl = self.me, self.Sl
            B, Hkv, S, D = self.ranks[me]["k"].shape[0], self.ranks[me]["k"].shape[1], \
                Sl * self.W, self.ranks[me]["k"].shape[3]
            for name, key in (("K", "k"), ("V", "v")):
                buf = args[ix[name]].view(B, Hkv, S, D)
                if not torch.equal(buf[:, :, me * Sl:(me + 1) * Sl], self.ranks[me][key]):
                    raise AssertionError(f"{name}: this rank's shard was not staged in its rows")
                for r, rk in enumerate(self.ranks):
                    buf[:, :, r * Sl:(r + 1) * Sl] = rk[key]
            total = {n: torch.zeros(B * Hkv, S, D) for n in ("DK", "DV")}
            for r, rk in enumerate(self.ranks):
                a = list(args)
                if r != me:
                    for name, key in (("Q", "q"), ("DO", "do"), ("LSE", "lse"),
                                      ("DELTA", "delta")):
                        a[ix[name]] = rk[key]
                    a[ix["Q_OFFSET"]] = r * Sl if args[ix["CAUSAL"]] else 0
                for n in ("DK", "DV"):
                    a[ix[n]] = torch.full((B * Hkv, S, D), float("nan"))
                bwd.kernel("dkdv")[grid](*a, **CFG.options())
                for n in ("DK", "DV"):
                    total[n] += a[ix[n]]
            for n in ("DK", "DV"):
                out = args[ix[n]].view(B * Hkv, S, D)
                out.fill_(float("nan"))
                out[:, me * Sl:(me + 1) * Sl] = total[n][:, me * Sl:(me + 1) * Sl]
        return launch


def run_world_size_one(c):
    """World size 1 with a gradient into ``lse``: the op's own path (``world_size_one``: the
    fusable kernels on the arguments ``bwd_args`` builds, ``delta - dlse``) on one rank's whole
    sequence, whose length need not split into whole-block segments; against autograd of
    ``sum(o * do) + sum(lse * dlse)`` in fp32."""
    B, Hq, Hkv, S, D, causal = (c[k] for k in ("B", "Hq", "Hkv", "Sl", "D", "causal"))
    g = torch.Generator().manual_seed(c["seed"])
    q, k, v, do = (torch.randn(B, h, S, D, generator=g).to(torch.bfloat16)
                   for h in (Hq, Hkv, Hkv, Hq))
    dlse = torch.randn(B, Hq, S, generator=g)
    G = Hq // Hkv
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    s = (qf @ kf.repeat_interleave(G, 1).transpose(-1, -2)) / math.sqrt(D)
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ vf.repeat_interleave(G, 1)
    ((o * do.float()).sum() + (lse * dlse).sum()).backward()
    dq, dk, dv = ring_attention_backward(q, k, v, o.detach().to(torch.bfloat16), lse.detach(),
                                         do, fake_comm(W=1, rank=0), causal=causal, dlse=dlse,
                                         config=CFG)
    out = {"name": c["name"]}
    for name, got, want in (("dq", dq, qf.grad), ("dk", dk, kf.grad), ("dv", dv, vf.grad)):
        out[f"{name}0_dtype"] = str(got.dtype)
        out[f"{name}0_rel"] = float((got.float() - want).norm() / want.norm())
    return out


def run_case(c):
    if c["W"] == 1:
        return run_world_size_one(c)
    W, causal, B, Hq, Hkv, Sl, D = (c[k] for k in ("W", "causal", "B", "Hq", "Hkv", "Sl", "D"))
    S = Sl * W
    g = torch.Generator().manual_seed(c["seed"])
    q, k, v, do = (torch.randn(B, h, S, D, generator=g).to(torch.bfloat16)
                   for h in (Hq, Hkv, Hkv, Hq))
    G = Hq // Hkv
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    s = (qf @ kf.repeat_interleave(G, 1).transpose(-1, -2)) / math.sqrt(D)
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool).tril(), float("-inf"))
    o = torch.softmax(s, -1) @ vf.repeat_interleave(G, 1)
    o.backward(do.float())
    lse = torch.logsumexp(s.detach(), -1)

    def shard(x, r):
        return (zigzag_shard(x, W, r) if causal else x[:, :, r * Sl:(r + 1) * Sl]).contiguous()
    ob = o.detach().to(torch.bfloat16)
    ranks = [dict(q=shard(q, r), k=shard(k, r), v=shard(v, r), do=shard(do, r),
                  lse=shard(lse, r), o=shard(ob, r)) for r in range(W)]
    for rk in ranks:
        rk["delta"] = (rk["o"].float() * rk["do"].float()).sum(-1)
    out = {"name": c["name"]}
    real_local, real_preload = bwd._launch_local, bwd._preload
    for me, rk in enumerate(ranks):
        events = []
        bwd.dkdv_fused_kernel = lambda *a, **kw: FakeFused(me, W, Sl, ranks, events)
        bwd._preload = lambda comm, which, args, grid, cfg: events.append(f"preload {which}")
        bwd._launch_local = lambda which, args, grid, cfg: (events.append(f"local {which}"),
                                                            real_local(which, args, grid, cfg))
        comm = fake_comm(W=W, rank=me)
        dq, dk, dv = ring_attention_backward(rk["q"], rk["k"], rk["v"], rk["o"], rk["lse"],
                                             rk["do"], comm, causal=causal, fused=True,
                                             config=CFG)
        out[f"events{me}"] = events
        for name, got, want in (("dq", dq, qf.grad), ("dk", dk, kf.grad), ("dv", dv, vf.grad)):
            want = shard(want, me)
            out[f"{name}{me}_dtype"] = str(got.dtype)
            out[f"{name}{me}_rel"] = float((got.float() - want).norm() / want.norm())
    bwd._launch_local, bwd._preload = real_local, real_preload
    return out


if __name__ == "__main__":
    serve_cases(run_case, sys.argv[1], sys.argv[2])
