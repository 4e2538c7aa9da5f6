"""ring_attention's argument checks and plan on CPU (no GPU, no process group): typed errors
that say what to change, the zigzag divisibilities, and fuse(constant_args=...) naming a
parameter the kernel does not have."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.ops.ring_attention import _check  # noqa: E402
from syncopate.schedule.attention_cost import choose_ring_plan, ring_kv_bytes  # noqa: E402


def _comm(W=2, rank=0):
    return types.SimpleNamespace(world_size=W, rank=rank, device=torch.device("cpu"))


def _qkv(B=1, Hq=4, Hkv=2, S=256, D=64, dtype=torch.bfloat16):
    return (torch.empty(B, Hq, S, D, dtype=dtype), torch.empty(B, Hkv, S, D, dtype=dtype),
            torch.empty(B, Hkv, S, D, dtype=dtype))


def test_valid_shards_pass():
    q, k, v = _qkv()
    assert _check(q, k, v, _comm(), False, None)[:5] == (1, 4, 2, 256, 64)
    assert _check(q, k, v, _comm(4, 3), True, None)[:5] == (1, 4, 2, 256, 64)


@pytest.mark.parametrize("make,causal,match", [
    (lambda: _qkv(Hq=3, Hkv=2), False, "multiple of KV heads"),
    (lambda: _qkv(dtype=torch.float32), False, "bfloat16 or torch.float16"),
    (lambda: (_qkv()[0], *_qkv(S=128)[1:]), False, "same number of tokens"),
    (lambda: _qkv(S=100), False, "not a multiple of the kernel's KV block"),
    (lambda: _qkv(S=130), True, "zigzag segment length"),
    (lambda: _qkv(S=129), True, "is odd"),
    (lambda: _qkv(D=96), False, "head_dim 96 is not supported"),
])
def test_bad_layouts_are_typed_errors(make, causal, match):
    q, k, v = make()
    with pytest.raises(LaunchError, match=match):
        _check(q, k, v, _comm(), causal, dict(BLOCK_M=64, BLOCK_N=64))


def test_plan_uses_few_comm_programs_for_long_sequences():
    """At 128k tokens the K/V stream is small against the quadratic compute: the fewest comm
    programs; the modelled fused time is the compute's."""
    p = choose_ring_plan(1, 32, 8, 131072, 128, 8, causal=True)
    assert p["comm_programs"] == 2
    assert p["fused_s"] == pytest.approx(p["compute_s"])
    assert p["serial_s"] > p["fused_s"]
    assert ring_kv_bytes(1, 8, 131072, 128, 8) == 2 * 8 * (131072 // 8) * 128 * 2 * 7


def test_constant_args_must_name_kernel_parameters():
    from syncopate.kernels.attention import attn_fwd_kernel
    from syncopate.runtime.fused import FusedKernel
    from syncopate.schedule.kv_gather import kv_all_gather
    sched = kv_all_gather((2, 256, 64), "bf16", 2, dim=1)
    comm = types.SimpleNamespace(world_size=2, register_fused=lambda fk: None)
    with pytest.raises(LaunchError, match="constant_args names 'stride_zz'"):
        FusedKernel(attn_fwd_kernel, sched, operand={"K": "K", "V": "V"}, comm=comm,
                    constant_args=("stride_kn", "stride_zz"))


def test_world_size_one_runs_the_local_kernel(monkeypatch):
    """W = 1: the whole sequence on one rank -- the local kernel alone (causal: the zigzag
    shard of one rank is the sequence in order), no fused machinery."""
    import importlib
    ra = importlib.import_module("syncopate.ops.ring_attention")
    calls = []
    monkeypatch.setattr(ra, "attention",  # the local kernel, as the op module imports it
                        lambda q, k, v, causal, sm_scale, config, out=None: calls.append(causal)
                        or "local")
    monkeypatch.setattr(ra, "ring_attention_fused_kernel",
                        lambda *a, **k: pytest.fail("no fused kernel at world size 1"))
    q, k, v = _qkv(S=256)
    for causal in (False, True):
        assert ra.ring_attention(q, k, v, _comm(1), causal=causal) == "local"
    assert calls == [False, True]
