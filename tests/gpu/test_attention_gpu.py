"""The fast and the fusable attention kernels on one GPU against SDPA in fp32: forward
(``o`` and ``lse``) and backward (dQ, dK, dV against autograd), the warp-specialised and the
two-loop fast forward, the zigzag layout (fast and fusable), GQA and MHA, ragged lengths,
``Sq != Skv``, strided ``[B, S, H, D]`` inputs.  Outputs are NaN-poisoned first, so a tile
that is never written fails.  Each case also asserts which kernel ran (the fast path on a
Hopper GPU), so a silent fallback to the fusable kernel cannot pass as the fast one.

The CPU counterparts (interpreter, sm_90 compiles) are tests/test_attention_local.py and
tests/test_attention_backward.py.  Skipped without a CUDA GPU.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
    pytest.skip("needs 1 CUDA GPU (none visible to torch); the CPU tests are "
                "tests/test_attention_local.py and tests/test_attention_backward.py",
                allow_module_level=True)

from syncopate.kernels.attention import attention, fast_path_reason  # noqa: E402
from syncopate.kernels.attention_bwd import attention_backward  # noqa: E402
from syncopate.kernels.attention_config import AttentionConfig  # noqa: E402
from syncopate.kernels.attention_zigzag import (attention_zigzag, zigzag_order,  # noqa: E402
                                                zigzag_shard, zigzag_unorder)

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2}
HOPPER = torch.cuda.get_device_capability()[0] >= 9
#: the backward's gradients: normwise, and the largest error relative to the largest value
BWD_TOL = {torch.float16: (0.003, 0.01), torch.bfloat16: (0.015, 0.04)}


def _reference(q, k, v, causal, sm_scale):
    group = q.shape[1] // k.shape[1]
    qf = q.float()
    kf, vf = (x.float().repeat_interleave(group, 1) for x in (k, v))
    o = torch.nn.functional.scaled_dot_product_attention(qf, kf, vf, is_causal=causal,
                                                         scale=sm_scale)
    s = (qf @ kf.transpose(-1, -2)) * (sm_scale or 1.0 / math.sqrt(q.shape[-1]))
    if causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool, device=q.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return o, torch.logsumexp(s, -1)


def _qkv(B, Hq, Hkv, Sq, Skv, D, dtype, seed, bshd=False):
    torch.manual_seed(seed)
    if bshd:
        mk = lambda H, S: torch.randn(B, S, H, D, device="cuda", dtype=dtype).transpose(1, 2)  # noqa: E731
    else:
        mk = lambda H, S: torch.randn(B, H, S, D, device="cuda", dtype=dtype)  # noqa: E731
    return mk(Hq, Sq), mk(Hkv, Skv), mk(Hkv, Skv)


def _poisoned(q):
    B, Hq, Sq, D = q.shape
    return (torch.full((B, Hq, Sq, D), float("nan"), device="cuda", dtype=q.dtype),
            torch.full((B, Hq, Sq), float("nan"), device="cuda"))


def _assert_fast_ran(q, k, v, o, fusable, sm_scale=None):
    if not fusable and HOPPER:
        scale = sm_scale or 1.0 / math.sqrt(q.shape[-1])
        assert fast_path_reason(q, k, v, o, scale) is None, "the fast kernel did not run"


WS = AttentionConfig(128, 64, 4, 2, True)
TWO_LOOP = AttentionConfig(128, 128, 8, 2)
FWD_CASES = [  # (dtype, D, causal, B, Hq, Hkv, Sq, Skv, config, fusable, bshd)
    (torch.bfloat16, 128, False, 1, 8, 2, 1000, 1000, None, False, False),
    (torch.bfloat16, 128, True, 1, 8, 2, 1024, 1024, None, False, False),
    (torch.bfloat16, 128, True, 2, 4, 4, 700, 300, None, False, False),
    (torch.float16, 64, False, 2, 4, 1, 257, 513, None, False, False),
    (torch.bfloat16, 64, True, 1, 8, 2, 1000, 1000, None, False, False),
    (torch.bfloat16, 128, True, 1, 8, 2, 1000, 1000, TWO_LOOP, False, False),
    (torch.bfloat16, 128, False, 1, 8, 2, 777, 777, WS, False, True),
    # the sweep's warp-specialised D = 64 candidate with 256-row query blocks (two consumers)
    (torch.bfloat16, 64, True, 2, 4, 4, 700, 300, AttentionConfig(256, 64, 4, 2, True), False,
     False),
    (torch.bfloat16, 128, True, 1, 8, 2, 1000, 1000, None, True, False),
    (torch.bfloat16, 128, True, 2, 4, 4, 700, 300, None, True, False),
]


@pytest.mark.parametrize("dtype,D,causal,B,Hq,Hkv,Sq,Skv,config,fusable,bshd", FWD_CASES)
def test_forward_matches_sdpa(dtype, D, causal, B, Hq, Hkv, Sq, Skv, config, fusable, bshd):
    q, k, v = _qkv(B, Hq, Hkv, Sq, Skv, D, dtype, Sq * 31 + Skv + D, bshd)
    o, lse = _poisoned(q)
    attention(q, k, v, causal=causal, config=config, out=(o, lse), fusable=fusable)
    _assert_fast_ran(q, k, v, o, fusable)
    ref_o, ref_lse = _reference(q, k, v, causal, None)
    torch.testing.assert_close(o.float(), ref_o, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=0)


def test_fast_forward_is_deterministic():
    """Two launches of the warp-specialised kernel give the same bits (its producer and
    consumers synchronise through barriers; a race would show as a differing run)."""
    q, k, v = _qkv(2, 8, 2, 2048, 2048, 128, torch.bfloat16, 5)
    a = attention(q, k, v, causal=True, fusable=False)
    b = attention(q, k, v, causal=True, fusable=False)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("fusable", [False, True])
@pytest.mark.parametrize("W", [2, 4])
def test_zigzag_matches_sdpa(W, fusable):
    """The zigzag layout, whole sequence and per rank shard (what ring attention runs), in
    original order against SDPA's causal attention; the fast kernel must equal the fast
    prefix-causal kernel bit for bit on the whole sequence (same blocks, same order)."""
    S = 2 * W * 256
    q, k, v = _qkv(1, 8, 2, S, S, 128, torch.bfloat16, W)
    ref_o, ref_lse = _reference(q, k, v, True, None)
    qz, kz, vz = (zigzag_order(x, W) for x in (q, k, v))
    oz, lz = _poisoned(qz)
    attention_zigzag(qz, kz, vz, 2 * W, 0, out=(oz, lz), fusable=fusable)
    _assert_fast_ran(qz, kz, vz, oz, fusable)
    o, lse = zigzag_unorder(oz, W), zigzag_unorder(lz, W)
    torch.testing.assert_close(o.float(), ref_o, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=0)
    if not fusable:
        prefix = attention(q, k, v, causal=True, fusable=False)
        assert torch.equal(o, prefix[0])
    shard = S // W
    for r in range(W):
        qs = zigzag_shard(q, W, r)
        os_, ls = _poisoned(qs)
        attention_zigzag(qs, kz, vz, 2 * W, r * shard, out=(os_, ls), fusable=fusable)
        torch.testing.assert_close(os_, oz[:, :, r * shard:(r + 1) * shard], atol=0, rtol=0)
        torch.testing.assert_close(ls, lz[:, :, r * shard:(r + 1) * shard], atol=0, rtol=0)


BWD_CASES = [  # (dtype, D, causal, B, Hq, Hkv, Sq, Skv, config, dq_config, fusable)
    (torch.bfloat16, 128, True, 1, 8, 2, 1000, 1000, None, None, False),
    (torch.bfloat16, 128, False, 2, 4, 4, 512, 700, None, None, False),
    (torch.float16, 64, True, 1, 8, 2, 700, 300, None, None, False),
    (torch.bfloat16, 64, False, 1, 8, 1, 1024, 1024, AttentionConfig(64, 64, 4, 2),
     AttentionConfig(64, 64, 4, 3), False),
    (torch.bfloat16, 128, True, 1, 8, 2, 512, 512, None, None, True),
    # the context-parallel backward's kernels (default config): ragged both ways, causal
    (torch.float16, 64, True, 1, 8, 2, 700, 300, None, None, True),
    (torch.bfloat16, 128, False, 2, 4, 4, 512, 700, None, None, True),
]


def _grads_against_sdpa(q, k, v, do, causal, got):
    group = q.shape[1] // k.shape[1]
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(
        qf, kf.repeat_interleave(group, 1), vf.repeat_interleave(group, 1), is_causal=causal)
    ref.backward(do.float())
    norm_tol, max_tol = BWD_TOL[q.dtype]
    for name, g, want in zip(("dq", "dk", "dv"), got, (qf.grad, kf.grad, vf.grad)):
        g = g.float()
        assert not torch.isnan(g).any(), name
        rel = float((g - want).norm() / want.norm())
        worst = float((g - want).abs().max() / want.abs().max())
        assert rel <= norm_tol and worst <= max_tol, f"{name}: normwise {rel:.3g}, max {worst:.3g}"


@pytest.mark.parametrize("D", [64, 128])
def test_zigzag_backward_per_rank_shard_matches_sdpa_autograd(D):
    """The causal ring attention backward's kernel work on one GPU (W = 4, GQA 8/2, the
    default config): every rank's zigzag shard of queries against the whole gathered K/V, dK/dV
    summed over the ranks -- the loops bounded by each rank's rows."""
    W, S = 4, 2048
    q, k, v = _qkv(1, 8, 2, S, S, D, torch.bfloat16, S + D)
    do = torch.randn_like(q)
    o, lse = attention(q, k, v, causal=True, fusable=True)
    kz, vz = zigzag_order(k, W), zigzag_order(v, W)
    shard = S // W
    dqs, dk, dv = [], torch.zeros(k.shape, device="cuda"), torch.zeros(v.shape, device="cuda")
    for r in range(W):
        qs, os_, dos, ls = (zigzag_shard(x, W, r).contiguous() for x in (q, o, do, lse))
        dq_r, dk_r, dv_r = attention_backward(qs, kz, vz, os_, ls, dos, True, segments=2 * W,
                                              q_offset=r * shard)
        dqs.append(dq_r)
        dk += dk_r.float()
        dv += dv_r.float()
    got = (zigzag_unorder(torch.cat(dqs, 2), W), zigzag_unorder(dk, W), zigzag_unorder(dv, W))
    _grads_against_sdpa(q, k, v, do, True, got)


@pytest.mark.parametrize("dtype,D,causal,B,Hq,Hkv,Sq,Skv,config,dq_config,fusable", BWD_CASES)
def test_backward_matches_sdpa_autograd(dtype, D, causal, B, Hq, Hkv, Sq, Skv, config,
                                        dq_config, fusable):
    q, k, v = _qkv(B, Hq, Hkv, Sq, Skv, D, dtype, Sq + 3 * Skv + D)
    do = torch.randn_like(q)
    o, lse = attention(q, k, v, causal=causal, fusable=fusable)
    dq, dk, dv = attention_backward(q, k, v, o, lse, do, causal, config=config,
                                    dq_config=dq_config, fusable=fusable)
    _assert_fast_ran(q, k, v, do, fusable)
    _grads_against_sdpa(q, k, v, do, causal, (dq, dk, dv))
