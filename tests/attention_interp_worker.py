"""Runs the local attention kernel under Triton's interpreter for tests/test_attention_local.py.

Why a separate process: ``TRITON_INTERPRET=1`` is read when ``@triton.jit`` decorates, so it
must be set before triton is first imported -- the test process has imported it already. Run
as ``TRITON_INTERPRET=1 python attention_interp_worker.py CASES.json RESULTS.json``.

The interpreter's repairs (a scalar's ``__index__``, bf16 dots) are
:mod:`syncopate.kernels.interpreter`'s, installed when syncopate.kernels is imported.
"""

from __future__ import annotations

import math
import os
import sys
import time

assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from syncopate.kernels.attention import attention, fast_path_reason  # noqa: E402
from interp_runner import serve_cases  # noqa: E402  (this folder: the script's own)
from syncopate.kernels.attention_bwd import attention_backward  # noqa: E402
from syncopate.kernels.attention_zigzag import (_visited_block, attention_zigzag,  # noqa: E402
                                                zigzag_order, zigzag_shard, zigzag_unorder)

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def reference(q, k, v, causal, sm_scale):
    """SDPA in fp32 on the same (rounded) inputs, and the log-sum-exp of the scaled scores."""
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = q.float(), k.float().repeat_interleave(group, 1), v.float().repeat_interleave(
        group, 1)
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal,
                                                         scale=sm_scale)
    s = (qf @ kf.transpose(-1, -2)) * (sm_scale if sm_scale is not None
                                       else 1.0 / math.sqrt(q.shape[-1]))
    if causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return o, torch.logsumexp(s, -1)


@triton.jit
def _visits_kernel(OUT, s, n_own, up_runs, NB, SEGMENTS: tl.constexpr,
                   DESCENDING: tl.constexpr):
    for i in tl.range(0, n_own + (up_runs + s) * NB):
        slot, y = _visited_block(i, s, n_own, up_runs, NB, SEGMENTS // 2, DESCENDING)
        tl.store(OUT + i, slot * NB + y)


def run_visits_case(c):
    """The stored KV blocks the paired zigzag kernel's loop visits, in order."""
    v = c["visits"]
    n = v["n_own"] + (v["up_runs"] + v["s"]) * v["NB"]
    out = torch.full((n,), -1, dtype=torch.int32)
    _visits_kernel[(1,)](out, v["s"], v["n_own"], v["up_runs"], v["NB"],
                         SEGMENTS=v["SEGMENTS"], DESCENDING=v["DESCENDING"])
    return dict(name=c["name"], blocks=out.tolist())


def run_case(c):
    if c.get("visits"):
        return run_visits_case(c)
    if c.get("backward"):
        return run_backward_case(c)
    torch.manual_seed(c["seed"])
    dt = DTYPES[c["dtype"]]
    B, Hq, Hkv, Sq, Skv, D = c["B"], c["Hq"], c["Hkv"], c["Sq"], c["Skv"], c["D"]
    if c.get("bshd"):  # stored [B, S, H, D], passed as a strided [B, H, S, D] view
        q = torch.randn(B, Sq, Hq, D, dtype=dt).transpose(1, 2)
        k = torch.randn(B, Skv, Hkv, D, dtype=dt).transpose(1, 2)
        v = torch.randn(B, Skv, Hkv, D, dtype=dt).transpose(1, 2)
    else:
        q = torch.randn(B, Hq, Sq, D, dtype=dt)
        k = torch.randn(B, Hkv, Skv, D, dtype=dt)
        v = torch.randn(B, Hkv, Skv, D, dtype=dt)
    o = torch.full((B, Hq, Sq, D), float("nan"), dtype=dt)
    lse = torch.full((B, Hq, Sq), float("nan"), dtype=torch.float32)
    t0 = time.perf_counter()
    if c.get("zigzag"):
        _run_zigzag(c, q, k, v, o, lse)
    else:
        attention(q, k, v, causal=c["causal"], sm_scale=c.get("sm_scale"),
                  config=c.get("config"), out=(o, lse), fusable=c.get("fusable", False))
    secs = time.perf_counter() - t0
    scale = c.get("sm_scale") or 1.0 / math.sqrt(D)
    ref_o, ref_lse = reference(q, k, v, c["causal"], c.get("sm_scale"))
    of = o.float()
    return dict(name=c["name"], secs=secs, path=_path(c, q, k, v, o, scale),
                nan_o=int(torch.isnan(of).sum()),
                nan_lse=int(torch.isnan(lse).sum()),
                o_err=float((of - ref_o).abs().max()),
                o_excess=float(((of - ref_o).abs() - c["tol"] * ref_o.abs()).max()),
                ref_max=float(ref_o.abs().max()),
                lse_err=float((lse - ref_lse).abs().max()))


def _path(c, q, k, v, o, sm_scale):
    """Which kernel :func:`attention` (or the zigzag / backward launcher) took for the case."""
    if c.get("fusable") or fast_path_reason(q, k, v, o, sm_scale) is not None:
        return "fusable"
    return "fast"


def _run_zigzag(c, q, k, v, o, lse):
    """The zigzag kernel (causal) on the zigzag-stored sequence, the queries either all at once
    (``zigzag["ranks"] == "all"``) or per rank shard as ring attention runs them; the results
    are put back in original order into ``o``/``lse`` so they compare with SDPA."""
    W = c["zigzag"]["W"]
    kz, vz = zigzag_order(k, W), zigzag_order(v, W)
    if c["zigzag"].get("ranks") == "all":
        oz, lz = attention_zigzag(zigzag_order(q, W), kz, vz, 2 * W, 0, c.get("sm_scale"),
                                  c.get("config"), fusable=c.get("fusable", False))
    else:
        shard = q.shape[2] // W
        outs = [attention_zigzag(zigzag_shard(q, W, r), kz, vz, 2 * W, r * shard,
                                 c.get("sm_scale"), c.get("config"),
                                 fusable=c.get("fusable", False)) for r in range(W)]
        oz = torch.cat([x[0] for x in outs], 2)
        lz = torch.cat([x[1] for x in outs], 2)
    o.copy_(zigzag_unorder(oz, W))
    lse.copy_(zigzag_unorder(lz, W))


def run_backward_case(c):
    """The backward kernels against autograd through fp32 SDPA on the same (rounded) inputs:
    the forward's ``(o, lse)`` come from our forward kernel (what training feeds the backward),
    the gradients are compared as normwise and elementwise relative errors. Zigzag cases run
    the kernels on the zigzag-stored sequence, per rank shard of queries against the whole K/V
    (dK/dV summed over the ranks, as the context-parallel reduce-scatter does), and put the
    results back in original order."""
    torch.manual_seed(c["seed"])
    dt = DTYPES[c["dtype"]]
    B, Hq, Hkv, Sq, Skv, D = c["B"], c["Hq"], c["Hkv"], c["Sq"], c["Skv"], c["D"]
    # shift: q and k pulled apart, every score far below zero (lse < -88)
    shift = c.get("shift", 0.0)
    q = (torch.randn(B, Hq, Sq, D) - shift).to(dt)
    k = (torch.randn(B, Hkv, Skv, D) + shift).to(dt)
    v = torch.randn(B, Hkv, Skv, D, dtype=dt)
    do = torch.randn(B, Hq, Sq, D, dtype=dt)
    causal, scale, cfg = c["causal"], c.get("sm_scale"), c.get("config")
    fusable = c.get("fusable", False)
    t0 = time.perf_counter()
    zz = c.get("zigzag")
    if zz:
        W = zz["W"]
        qz, kz, vz, doz = (zigzag_order(t, W) for t in (q, k, v, do))
        shard = Sq // W
        dq_parts, dk, dv = [], torch.zeros(k.shape), torch.zeros(v.shape)
        for r in range(W):
            qs, dos = qz[:, :, r * shard:(r + 1) * shard], doz[:, :, r * shard:(r + 1) * shard]
            o, lse = attention_zigzag(qs.contiguous(), kz, vz, 2 * W, r * shard, scale, cfg,
                                      fusable=True)
            dq_r, dk_r, dv_r = attention_backward(qs.contiguous(), kz, vz, o, lse,
                                                  dos.contiguous(), True, scale, cfg,
                                                  segments=2 * W, q_offset=r * shard)
            dq_parts.append(dq_r)
            dk += dk_r.float()
            dv += dv_r.float()
        dq = zigzag_unorder(torch.cat(dq_parts, 2), W)
        dk, dv = zigzag_unorder(dk, W), zigzag_unorder(dv, W)
    else:
        o, lse = attention(q, k, v, causal=causal, sm_scale=scale, config=c.get("fwd_config"),
                           fusable=fusable)
        dq, dk, dv = attention_backward(q, k, v, o, lse, do, causal, scale, cfg,
                                        fusable=fusable, dq_config=c.get("dq_config"))
    secs = time.perf_counter() - t0
    group = Hq // Hkv
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        qf, kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1), is_causal=causal,
        scale=scale)
    ref.backward(do.float())
    out = dict(name=c["name"], secs=secs, path="fusable" if zz or fusable else _path(
        c, q, k, v, do, scale if scale is not None else 1.0 / math.sqrt(D)))
    for name, got, want in (("dq", dq, qf.grad), ("dk", dk, kf.grad), ("dv", dv, vf.grad)):
        got = got.float()
        out[f"{name}_nan"] = int(torch.isnan(got).sum())
        out[f"{name}_rel"] = float((got - want).norm() / want.norm().clamp_min(1e-30))
        out[f"{name}_max"] = float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))
    return out


def main(cases_path, results_path):
    serve_cases(run_case, cases_path, results_path)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
