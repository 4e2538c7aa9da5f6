"""The inner-loop remap on the local attention kernel, in the emulator (issue 11, section 2).

Why: ring attention is the attention kernel fused with an all-gather of K and V along the
sequence; its KV loop should visit the blocks in chunk-arrival order, local blocks first.  That
reorders the loop's softmax reductions, so it needs ``reorder_reductions=True``; these tests
check that the remap is made (and only then), that rank r's first iterations read its own
rows, that the emulator is clean under several interleavings (the fused outputs compared with
the unfused kernel within ``REORDER_ULPS``, see ``emulate/reference.py``), and that the output
is attention on the gathered K/V (numpy, fp64, tolerance below).

Layout: K and V sequence-major ``[S, B * Hkv * D]`` (SBHD flattened), strides and sizes as
constexprs (what the access analysis needs to bound the boxes), one batch and one KV head
(with more, ``b`` and ``h_kv`` land in the non-outermost dim of the box, which the analysis
cannot bound yet: a refusal, not a wrong kernel).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from syncopate.emulate import PerRank, emulate, fuse_module
from syncopate.kernels import AttentionConfig, attention_compile_args, attn_fwd_kernel
from syncopate.schedule import Schedule, all_gather
from syncopate_mlir.dialects.syncopate import RemapOp

B, HQ, HKV, S, D = 1, 2, 1, 64, 64
CFG = AttentionConfig(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)
POLICIES = ("in-order", "reverse", "late", "random:1")
#: |O - numpy attention| bound: bf16 inputs and bf16 P in the PV product (each rounds at 2^-8
#: relative), values of order 1
ATOL = 2e-2


def _schedule(W: int) -> Schedule:
    shape = [S, B * HKV * D]
    sk = all_gather(shape, "bf16", W, dim=0, tensor="K")
    sv = all_gather(shape, "bf16", W, dim=0, tensor="V")
    off = len(sk.chunks)
    vch = tuple(replace(c, id=c.id + off, after=tuple(a + off for a in c.after))
                for c in sv.chunks)
    s = Schedule(W, {"K": sk.tensors["K"], "V": sv.tensors["V"]}, sk.chunks + vch,
                 {"template": "test: all_gather K and V over the sequence"})
    s.verify()
    return s


def _compile_args(causal: bool):
    sig, cx = attention_compile_args("bf16", D, causal, CFG)
    fixed = dict(stride_qb=HQ * S * D, stride_qh=S * D, stride_qm=D,
                 stride_kb=HKV * D, stride_kh=D, stride_kn=B * HKV * D,
                 stride_vb=HKV * D, stride_vh=D, stride_vn=B * HKV * D,
                 stride_ob=HQ * S * D, stride_oh=S * D, stride_om=D,
                 H_Q=HQ, GROUP=HQ // HKV, SEQ_Q=S, SEQ_KV=S)
    for k, v in fixed.items():
        sig[k] = "constexpr"
        cx[k] = v
    return sig, cx


def _fuse(W: int, causal: bool = False, **kw):
    sig, cx = _compile_args(causal)
    module, _ = fuse_module(attn_fwd_kernel, signature=sig, constexprs=cx, schedule=_schedule(W),
                            operand={"K": "K", "V": "V"}, backend="sm", comm_programs=2,
                            options=CFG.options(), **kw)
    return module


def _remaps(module) -> list:
    return [op for op in module.walk() if isinstance(op, RemapOp)]


def _numpy_attention(q, k, v):
    k3 = k.reshape(S, B, HKV, D).transpose(1, 2, 0, 3).astype(np.float64)
    v3 = v.reshape(S, B, HKV, D).transpose(1, 2, 0, 3).astype(np.float64)
    sc = q.astype(np.float64) @ np.repeat(k3, HQ // HKV, 1).transpose(0, 1, 3, 2) / np.sqrt(D)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ np.repeat(v3, HQ // HKV, 1)


@pytest.mark.parametrize("W", [2, 4])
def test_kv_loop_visits_local_blocks_first(W):
    module = _fuse(W, reorder_reductions=True)
    remaps = _remaps(module)
    assert len(remaps) == 1, "one remap: the KV loop's block index (V follows the same loop)"
    r = remaps[0]
    assert r.tensor.data == "K" and r.dim.value.data == 0
    assert r.block.value.data == CFG.BLOCK_N
    assert r.parent_op().name == "scf.for" or any(
        p.name == "scf.for" for p in _ancestors(r)), "the remap is inside the KV loop"
    tiles = r.tiles.value.data
    table = list(r.table.get_values())
    rows = S // W
    for rank in range(W):
        row = table[rank * tiles:(rank + 1) * tiles]
        assert sorted(row) == list(range(tiles))
        local = [t for t in range(tiles) if rank * rows <= t * CFG.BLOCK_N < (rank + 1) * rows]
        assert row[:len(local)] == local, f"rank {rank} reads its own rows first: {row}"
    assert "reorder_reductions=True: its floating-point reductions" in str(module)


def _ancestors(op):
    while op is not None:
        op = op.parent_op()
        if op is not None:
            yield op


@pytest.mark.parametrize("W", [2, 4])
def test_ring_attention_emulated_matches_numpy(W):
    sig, cx = _compile_args(False)
    rng = np.random.default_rng(W)
    k = rng.standard_normal((S, B * HKV * D)).astype(np.float32)
    v = rng.standard_normal((S, B * HKV * D)).astype(np.float32)
    q = rng.standard_normal((B, HQ, S, D)).astype(np.float32)
    args = dict(Q=PerRank([q] * W), K=PerRank([k] * W), V=PerRank([v] * W),
                O=np.zeros((B, HQ, S, D), np.float32), LSE=np.zeros((B, HQ, S), np.float32),
                qk_scale=float(1 / np.sqrt(D) * 1.4426950408889634))
    grid = (S // CFG.BLOCK_M, B * HQ)
    res = emulate(attn_fwd_kernel, signature=sig, constexprs=cx, schedule=_schedule(W),
                  operand={"K": "K", "V": "V"}, grid=grid, args=args, backend="sm",
                  comm_programs=2, options=CFG.options(), launches=1, policies=POLICIES,
                  reorder_reductions=True, check=True)
    # bf16 inputs as the kernel sees them
    bf = lambda a: (a.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)  # noqa
    ref = _numpy_attention(bf(q), bf(k), bf(v))
    for policy in POLICIES:
        for rank in range(W):
            o = res.outputs[policy][rank]["O"].reshape(B, HQ, S, D).astype(np.float64)
            err = np.abs(o - ref).max()
            assert err <= ATOL, f"{policy} rank {rank}: max |O - numpy| = {err}"


def test_without_the_option_the_loop_keeps_its_order():
    module = _fuse(2)
    assert not _remaps(module)
    assert "reorder_reductions=True allows it" in str(module)


def test_causal_loop_bound_is_refused():
    """Causal attention's loop runs over a prefix of the blocks: a permutation of all blocks
    would visit blocks the row does not see and skip some it does."""
    module = _fuse(2, causal=True, reorder_reductions=True)
    assert not _remaps(module)
    assert "is not a compile-time constant" in str(module)
