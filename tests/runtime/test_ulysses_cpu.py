"""``ulysses_attention`` on the CPU: its refusals, the fallback selection, the unfused path's
all-to-alls (loopback threads, the local kernel stood in for by SDPA), and what the fused path
launches (a recording FusedKernel: the buffers staged, the constants the compiler needs, the
grid, the rows returned).  The fused kernel itself is checked in the emulator
(tests/test_emulate_ulysses.py) and on a GPU (tests/gpu/test_multi_gpu.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from runtime_fakes import fake_comm  # noqa: E402

BF = torch.bfloat16


def _qkv(B=1, Hq=4, Hkv=2, Sl=8, D=64, dtype=BF):
    return (torch.randn(B, Hq, Sl, D).to(dtype), torch.randn(B, Hkv, Sl, D).to(dtype),
            torch.randn(B, Hkv, Sl, D).to(dtype))


@pytest.mark.parametrize("shapes, match", [
    (dict(Hq=6, Hkv=2), r"query heads \(6\) must be divisible by the world size \(4\)"),
    (dict(Hq=8, Hkv=2), r"KV heads \(2\) must be divisible by the world size \(4\)"),
    (dict(Hq=12, Hkv=8), r"query heads \(12\) must be a multiple of KV heads \(8\)"),
    (dict(D=96), "head_dim 96 is not supported"),
])
def test_bad_layouts_are_refused(shapes, match):
    q, k, v = _qkv(**shapes)
    from syncopate.ops import ulysses_attention
    with pytest.raises(LaunchError, match=match):
        ulysses_attention(q, k, v, fake_comm(W=4), fused=False)


def test_sequence_and_size_checks():
    from syncopate.ops.ulysses import check_plan
    with pytest.raises(LaunchError, match=r"the sequence \(30\) must be divisible by the world "
                                          r"size \(4\)"):
        check_plan(1, 8, 4, 30, 64, 4)
    with pytest.raises(LaunchError, match="32-bit offsets"):
        check_plan(64, 32, 8, 2 ** 17, 128, 8)
    check_plan(2, 32, 8, 2 ** 15, 128, 8)  # the shapes per batch fit


def test_operand_errors():
    from syncopate.ops import ulysses_attention
    c = fake_comm(W=2)
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match="same block of all three"):
        ulysses_attention(q, k[:, :, :4], v[:, :, :4], c, fused=False)
    with pytest.raises(LaunchError, match="torch.bfloat16 or torch.float16"):
        ulysses_attention(q.float(), k.float(), v.float(), c, fused=False)
    with pytest.raises(LaunchError, match="4-D torch.Tensor"):
        ulysses_attention(q[0], k, v, c, fused=False)
    with pytest.raises(LaunchError, match="fuses with the sm backend"):
        ulysses_attention(q, k, v, c, backend="ce", fused=True)


def test_fallback_selection(monkeypatch):
    import importlib
    mod = importlib.import_module("syncopate.ops.ulysses")
    calls = []
    monkeypatch.setattr(mod, "ulysses_attention_reference",
                        lambda *a, **kw: calls.append(kw) or "ref")
    q, k, v = _qkv()
    monkeypatch.setenv("SYNCOPATE", "0")
    assert mod.ulysses_attention(q, k, v, fake_comm(), causal=True) == "ref"
    assert calls[-1]["causal"] is True
    monkeypatch.setenv("SYNCOPATE", "1")
    assert mod.ulysses_attention(q, k, v, fake_comm(), fused=False) == "ref"


def _sdpa(q, k, v, causal, sm_scale, config, fusable=True):
    g = q.shape[1] // k.shape[1]
    return torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(g, 1), v.float().repeat_interleave(g, 1),
        is_causal=causal, scale=sm_scale).to(q.dtype)


def _reference_body(rank, W, causal):
    from syncopate.ops.ulysses import ulysses_attention_reference
    from syncopate.runtime import collectives
    gen = torch.Generator().manual_seed(0)  # the same global tensors on every rank (a
    B, Hq, Hkv, S, D = 2, 8, 4, 8 * W, 64   # generator per thread: the global one is shared)
    q, k, v = (torch.randn(B, h, S, D, generator=gen) for h in (Hq, Hkv, Hkv))
    comm = type("Comm", (), dict(rank=rank, world_size=W, group=collectives.current_loopback(),
                                 device=torch.device("cpu")))()
    rows = slice(rank * S // W, (rank + 1) * S // W)
    o = ulysses_attention_reference(q[:, :, rows].to(BF), k[:, :, rows].to(BF),
                                    v[:, :, rows].to(BF), comm, causal=causal)
    want = _sdpa(q.to(BF), k.to(BF), v.to(BF), causal, None, None)[:, :, rows]
    return float((o.float() - want.float()).abs().max())


@pytest.mark.parametrize("W", [2, 4])
@pytest.mark.parametrize("causal", [False, True])
def test_reference_all_to_alls(monkeypatch, W, causal):
    """The unfused path's two all-to-alls put every head's whole sequence on its rank and the
    output rows back: with SDPA standing in for the local kernel, rank r's result is exactly
    rows r of SDPA on the gathered inputs (same bf16 inputs, same fp32 math)."""
    import importlib

    from syncopate.runtime.loopback import run_loopback
    mod = importlib.import_module("syncopate.ops.ulysses")
    monkeypatch.setattr(mod, "_local_attention", _sdpa)
    res = run_loopback(_reference_body, W, causal, timeout_s=60)
    for status, err in res:
        assert status == "ok", err
        assert err == 0.0


class _RecordingKernel:
    def __init__(self):
        self.launches = []

    def __getitem__(self, grid):
        def run(*args):
            self.launches.append((grid, args))
            O = args[3]
            O.fill_(7.0)  # what the "kernel" produced
        return run


def test_fused_path_stages_and_launches(monkeypatch):
    import importlib

    from syncopate.kernels.attention import attn_fwd_kernel
    mod = importlib.import_module("syncopate.ops.ulysses")
    fk = _RecordingKernel()
    got = {}
    monkeypatch.setattr(mod, "ulysses_fused_kernel",
                        lambda *a, **kw: got.update(args=a, kw=kw) or fk)
    W, rank = 4, 2
    c = fake_comm(W=W, rank=rank)
    B, Hq, Hkv, Sl, D = 2, 8, 4, 16, 64
    q, k, v = _qkv(B, Hq, Hkv, Sl, D)
    out = mod.ulysses_attention(q, k, v, c, fused=True, config=dict(BLOCK_M=32, BLOCK_N=16))
    S = W * Sl
    assert got["args"][1:7] == (B, Hq, Hkv, S, D, BF) and got["kw"]["backend"] == "sm"
    (grid, args), = fk.launches
    assert grid == (S // 32, B * Hq // W)
    named = dict(zip(attn_fwd_kernel.arg_names, args))
    assert (named["H_Q"], named["GROUP"], named["SEQ_Q"], named["SEQ_KV"]) == (2, 2, S, S)
    assert (named["stride_qb"], named["stride_qh"], named["stride_qm"]) == (Hq * S * D, S * D, D)
    assert (named["stride_kb"], named["stride_kh"], named["stride_kn"]) == (Hkv * S * D, S * D, D)
    rows = slice(rank * Sl, (rank + 1) * Sl)
    bufs = mod.ulysses_buffers(c, B, Hq, Hkv, S, D, BF)
    for name, t in (("Q", q), ("K", k), ("V", v)):
        assert named[name] is bufs[name] and torch.equal(bufs[name][:, :, rows], t)
    assert out.shape == (B, Hq, Sl, D) and bool((out == 7).all())
    assert out.data_ptr() != bufs["O"].data_ptr()  # a copy: the buffer is reused next launch


def test_the_compiler_constants_are_specialised():
    """The sizes and strides the op names as constants become constexprs of their value (the
    access analysis bounds ``h = pid % H_Q`` only by a constant)."""
    from syncopate.kernels.attention import attn_fwd_kernel
    from syncopate.ops.ulysses import _CONSTANTS
    from syncopate.runtime.specialize import specialize
    q = torch.empty(1, 2, 16, 64, dtype=BF)
    vals = [q, q, q, q, torch.empty(1, dtype=torch.float32), 0.5] + list(range(100, 112)) + \
        [2, 2, 64, 64, 64, 32, 16, False]
    spec = specialize(attn_fwd_kernel, vals, frozenset(_CONSTANTS))
    sig, cx = spec.signature_dict(), spec.constexpr_dict()
    for name in _CONSTANTS:
        assert sig[name] == "constexpr", name
    assert cx["H_Q"] == 2 and cx["SEQ_KV"] == 64 and cx["stride_qb"] == 100
    assert sig["qk_scale"] == "fp32" and sig["Q"].startswith("*")
