"""The local flash-attention kernel against SDPA (fp32) on one GPU: GQA and MHA, ragged
lengths, Sq != Skv, both head dims and dtypes, causal and not, strided [B, S, H, D] inputs.
Outputs are poisoned with NaN first, so a tile that is never written fails the check. The CPU
counterpart (interpreter, sm_90 compile) is tests/test_attention_local.py."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
    pytest.skip("needs 1 CUDA GPU (none visible to torch); the CPU tests are "
                "tests/test_attention_local.py", allow_module_level=True)

from syncopate.kernels import AttentionConfig, attention  # noqa: E402

pytestmark = pytest.mark.gpu

TOL = {torch.float16: 1e-2, torch.bfloat16: 2e-2}  # atol = rtol, as on the CPU


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


@pytest.mark.parametrize("fusable", [True, False], ids=["fusable", "fast"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("B,Hq,Hkv,Sq,Skv", [(1, 8, 2, 1000, 1000), (2, 4, 4, 257, 513),
                                             (1, 4, 1, 700, 300), (1, 2, 2, 1, 129)])
def test_matches_sdpa(dtype, D, causal, B, Hq, Hkv, Sq, Skv, fusable):
    """Both forwards: the fusable one (the default) and the fast one (``fusable=False``)."""
    torch.manual_seed(Sq * 31 + Skv)
    q = torch.randn(B, Hq, Sq, D, device="cuda", dtype=dtype)
    k = torch.randn(B, Hkv, Skv, D, device="cuda", dtype=dtype)
    v = torch.randn(B, Hkv, Skv, D, device="cuda", dtype=dtype)
    o = torch.full((B, Hq, Sq, D), float("nan"), device="cuda", dtype=dtype)
    lse = torch.full((B, Hq, Sq), float("nan"), device="cuda")
    attention(q, k, v, causal=causal, out=(o, lse), fusable=fusable)
    ref_o, ref_lse = _reference(q, k, v, causal, None)
    torch.testing.assert_close(o.float(), ref_o, atol=TOL[dtype], rtol=TOL[dtype])
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=0)


@pytest.mark.parametrize("config", [AttentionConfig(64, 64, 4, 2), AttentionConfig(128, 128, 8, 2),
                                    AttentionConfig(128, 32, 8, 4)])
def test_strided_bshd_and_configs(config):
    torch.manual_seed(1)
    B, S, Hq, Hkv, D = 2, 777, 8, 2, 128
    q = torch.randn(B, S, Hq, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    v = torch.randn(B, S, Hkv, D, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    o, lse = attention(q, k, v, causal=True, sm_scale=0.07, config=config)
    ref_o, ref_lse = _reference(q, k, v, True, 0.07)
    torch.testing.assert_close(o.float(), ref_o, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-3, rtol=0)


@pytest.mark.parametrize("fusable", [True, False], ids=["fusable", "fast"])
def test_lse_merges_partial_results(fusable):
    """The contract ring attention relies on: attention over two halves of the keys, merged
    with the LSEs, equals attention over all keys."""
    torch.manual_seed(2)
    q = torch.randn(1, 8, 512, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 2, 1024, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn(1, 2, 1024, 128, device="cuda", dtype=torch.bfloat16)
    o1, l1 = attention(q, k[:, :, :512], v[:, :, :512], fusable=fusable)
    o2, l2 = attention(q, k[:, :, 512:], v[:, :, 512:], fusable=fusable)
    lse = torch.logaddexp(l1, l2)
    o = o1.float() * (l1 - lse).exp()[..., None] + o2.float() * (l2 - lse).exp()[..., None]
    ref_o, ref_lse = attention(q, k, v, fusable=fusable)
    torch.testing.assert_close(o, ref_o.float(), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse, ref_lse, atol=1e-4, rtol=0)
