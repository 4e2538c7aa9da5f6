"""Ring attention as the op builds it, in the CPU emulator (issue 11, section 2).

Why these tests: ``syncopate.ops.ring_attention`` runs on GPUs only, but everything it hands
the compiler -- the local kernel (non-causal, or the zigzag causal kernel), its arguments in
parameter order (``ring_attention._args``), the specialisation with the K/V strides and the
sequence length compiled in (``CONSTANT_ARGS``), the ``kv_all_gather`` schedule over
``[B*Hkv, S, D]`` buffers -- is built here exactly as the op builds it and emulated for W = 2
and 4 under several interleavings with the race checker on (``check=True``: the fused outputs
are also compared with the unfused kernel within ``REORDER_ULPS``).  Each rank's output is then
compared with SDPA (fp32) on the whole sequence: causal with the zigzag layout, GQA, B = 2.
"""

from __future__ import annotations

import numpy as np
import pytest
from xdsl.dialects import scf

torch = pytest.importorskip("torch")

from emulate_helpers import empty_first_cell  # noqa: E402
from syncopate import chunk_table as ct  # noqa: E402
from syncopate.emulate import Emulation, PerRank, emulate, fuse_module  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import AttentionConfig  # noqa: E402
from syncopate.kernels.attention_zigzag import zigzag_shard  # noqa: E402
from syncopate.ops.ring_attention import CONSTANT_ARGS, _args, _kernel  # noqa: E402
from syncopate.runtime.specialize import param_names, specialize  # noqa: E402
from syncopate.schedule.kv_gather import kv_all_gather  # noqa: E402
from syncopate_mlir.dialects.syncopate import RemapOp, WaitOp, state_of  # noqa: E402

CFG = AttentionConfig(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)
POLICIES = ("in-order", "reverse", "late", "random:3")
#: |O - SDPA(fp32)| bound: bf16 inputs, P rounded to bf16 before the PV product, values O(1)
ATOL = 3e-2


def _problem(W, causal, B, Hq, Hkv, Sl, D, seed):
    """Full-sequence q/k/v (original order), each rank's shards as the op receives them, and the
    SDPA reference of each rank's query rows."""
    g = torch.Generator().manual_seed(seed)
    S = Sl * W
    q, k, v = (torch.randn(B, h, S, D, generator=g).to(torch.bfloat16) for h in (Hq, Hkv, Hkv))
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.float(), k.float().repeat_interleave(Hq // Hkv, 1),
        v.float().repeat_interleave(Hq // Hkv, 1), is_causal=causal)
    if causal:
        shard = lambda x, r: zigzag_shard(x, W, r)  # noqa: E731
    else:
        shard = lambda x, r: x[:, :, r * Sl:(r + 1) * Sl]  # noqa: E731
    return [(shard(q, r), shard(k, r), shard(v, r), shard(ref, r)) for r in range(W)]


def _emulate(W, causal, B=1, Hq=2, Hkv=1, Sl=32, D=64, seed=0, order="swizzle", policies=POLICIES,
             lowering="auto", launches=1, self_advance=False, table_edit=None):
    """Emulate the fused ring attention; ``table_edit(words)`` (given: ``lowering="table"``)
    edits the chunk table every rank's launch reads, as on a GPU where only the uploaded table
    is wrong, and the result comes back unchecked."""
    shards = _problem(W, causal, B, Hq, Hkv, Sl, D, seed)
    S = Sl * W
    # the gathered K/V buffers [B*Hkv, S, D]: rank r's shard in its rows (what the op stages)
    kbuf = torch.cat([s[1] for s in shards], 2).reshape(B * Hkv, S, D).contiguous()
    vbuf = torch.cat([s[2] for s in shards], 2).reshape(B * Hkv, S, D).contiguous()
    per_rank = []
    for r, (q, _, _, _) in enumerate(shards):
        o = torch.empty((B, Hq, Sl, D), dtype=torch.bfloat16)
        lse = torch.empty((B, Hq, Sl), dtype=torch.float32)
        per_rank.append(_args(q.contiguous(), kbuf, vbuf, o, lse, 1 / np.sqrt(D), causal, r, W,
                              Hkv, D, CFG, order))
    kernel = _kernel(causal)
    values, grid = per_rank[0]
    spec = specialize(kernel, values, frozenset(CONSTANT_ARGS))
    sig, cx = spec.signature_dict(), spec.constexpr_dict()
    names = param_names(kernel)
    args = {}
    for i, name in enumerate(names):
        if sig[name] == "constexpr":
            continue
        vals = [pr[0][i] for pr in per_rank]
        if name in ("K", "V"):
            args[name] = vals[0]
        elif name in ("O", "LSE"):
            args[name] = vals[0]
        elif all(isinstance(x, torch.Tensor) for x in vals) or len({repr(x) for x in vals}) > 1:
            args[name] = PerRank(vals)
        else:
            args[name] = vals[0]
    sched = kv_all_gather((B * Hkv, S, D), "bf16", W, dim=1, order=order)
    if table_edit is not None:
        module, local = fuse_module(kernel, signature=sig, constexprs=cx, schedule=sched,
                                    operand={"K": "K", "V": "V"}, backend="sm",
                                    comm_programs=2, options=CFG.options(),
                                    reorder_reductions=True, lowering="table")
        em = Emulation(module, local, grid=grid, args=args)
        em.table = ct.seal(table_edit(list(em.table)))
        return em.run(policies, launches), shards, sig
    res = emulate(kernel, signature=sig, constexprs=cx, schedule=sched,
                  operand={"K": "K", "V": "V"}, grid=grid, args=args, backend="sm",
                  comm_programs=2, options=CFG.options(), launches=launches, policies=policies,
                  reorder_reductions=True, check=True, lowering=lowering,
                  self_advance=self_advance)
    return res, shards, sig


def _check_against_sdpa(res, shards, policies=POLICIES):
    for policy in policies:
        for r, (_, _, _, ref) in enumerate(shards):
            o = np.asarray(res.outputs[policy][r]["O"], dtype=np.float64).reshape(ref.shape)
            err = np.abs(o - ref.double().numpy()).max()
            assert err <= ATOL, f"{policy} rank {r}: max |O - SDPA| = {err}"


@pytest.mark.parametrize("W,lowering", [(2, "unrolled"), (2, "table"), (4, "table")])
def test_ring_attention_noncausal_gqa_b2(W, lowering):
    res, shards, sig = _emulate(W, False, B=2, Hq=4, Hkv=2, Sl=32, lowering=lowering)
    assert all(sig[p] == "constexpr" for p in CONSTANT_ARGS), "strides and SEQ_KV compiled in"
    _check_against_sdpa(res, shards)


@pytest.mark.parametrize("W,lowering", [(2, "unrolled"), (2, "table"), (4, "unrolled"),
                                        (4, "table")])
def test_ring_attention_causal_zigzag(W, lowering):
    """Both lowerings: per-chunk code, and the chunk table (3-d K/V boxes read from records and
    copied in the 2-d copy view)."""
    res, shards, _ = _emulate(W, True, B=1, Hq=4, Hkv=2, Sl=32, lowering=lowering)
    _check_against_sdpa(res, shards)


def test_ring_order_schedule():
    """The neighbour-hop plan (every block forwarded around the ring) gives the same result;
    the zigzag kernel then visits the other shards in descending order (``DESCENDING``)."""
    res, shards, _ = _emulate(4, True, B=2, Hq=2, Hkv=1, Sl=32, order="ring",
                              policies=("in-order", "random:5"))
    _check_against_sdpa(res, shards, ("in-order", "random:5"))


def _fused_module(W, causal, lowering="auto"):
    """Rank 0's fused ring attention module as the op builds it (B = 1, Hq = 2, Hkv = 1,
    32 rows per rank, D = 64), for the tests that read its IR: only the arguments' types and
    shapes matter to the compile, not their values."""
    B, Hq, Hkv, Sl, D = 1, 2, 1, 32, 64
    S = Sl * W
    kbuf = torch.randn((B * Hkv, S, D)).to(torch.bfloat16)
    q = torch.randn((B, Hq, Sl, D)).to(torch.bfloat16)
    o = torch.empty((B, Hq, Sl, D), dtype=torch.bfloat16)
    lse = torch.empty((B, Hq, Sl), dtype=torch.float32)
    values, _ = _args(q, kbuf, kbuf.clone(), o, lse, 0.125, causal, 0, W, Hkv, D, CFG)
    kernel = _kernel(causal)
    spec = specialize(kernel, values, frozenset(CONSTANT_ARGS))
    module, _ = fuse_module(kernel, signature=spec.signature_dict(),
                            constexprs=spec.constexpr_dict(),
                            schedule=kv_all_gather((B * Hkv, S, D), "bf16", W, dim=1),
                            operand={"K": "K", "V": "V"}, backend="sm", comm_programs=2,
                            options=CFG.options(), reorder_reductions=True, lowering=lowering)
    return module


def test_causal_kernel_waits_in_both_loops_and_keeps_the_unfused_bits():
    """The paired zigzag kernel (two branch-free KV loops, one per query block of a mirrored
    pair, each starting at the shard's own segment) fuses with a wait for K and one for V
    inside each loop, and no remap: its loops visit a block per iteration through a computed
    row, not ``iv / step``, and their trip counts are not the number of KV blocks, so
    ``tile-remap`` leaves them as written (the kernel orders its own visits) and the fused
    kernel sums in the unfused kernel's order -- not ``reordered``, so the emulator compares
    the fused outputs with the unfused kernel's bit for bit (the causal tests above)."""
    module = _fused_module(2, True)
    assert not [op for op in module.walk() if isinstance(op, RemapOp)]
    state = state_of(module)
    assert not state.reordered
    assert state.waits == 4, "one wait for K and one for V in each of the two KV loops"

    def loop_of(op):
        p = op.parent_op()
        while p is not None and p.name != "scf.for":
            p = p.parent_op()
        return p
    loops = [loop_of(w) for w in module.walk() if isinstance(w, WaitOp)]
    assert loops and None not in loops, "every chunk wait inside a KV loop"
    assert len({id(x) for x in loops}) == 2, "waits in both KV loops"


@pytest.mark.parametrize("causal", [False, True])
def test_ring_attention_with_a_self_advancing_epoch(causal):
    """``self_advance=True`` (passes/self_advance_epoch.py): three launches with no host
    advance, each equal to the unfused kernel on its inputs, race-free (``check=True``), and
    the epoch word, done-counter and mirror at 3, 0, 3 on every rank afterwards."""
    res, _, _ = _emulate(2, causal, B=1, Hq=2, Hkv=1, Sl=32, launches=3, self_advance=True,
                         policies=("in-order", "reverse", "random:1"))
    assert res.ok


@pytest.mark.parametrize("causal", [False, True])
def test_table_waits_in_the_kv_loops_are_lookups(causal):
    """With ``lowering="table"`` (W = 4) the K/V waits inside the KV loops read their chunk
    from the table's cell map (resolve-chunks' ``TableCellWait``) instead of scanning the RECV
    list: no loop inside a KV loop (a loop holding a ``tt.dot``), which would stop Triton from
    pipelining its loads (test_attention_local.py checks the sm_90 result); the tests above
    emulate the same kernels race-free and equal to SDPA."""
    module = _fused_module(4, causal, lowering="table")
    kv_loops = [op for op in module.walk() if isinstance(op, scf.ForOp)
                and any(x.name == "tt.dot" for x in op.walk())]
    assert len(kv_loops) == (2 if causal else 1), len(kv_loops)
    for loop in kv_loops:
        inner = [x for x in loop.walk() if isinstance(x, scf.ForOp) and x is not loop]
        assert not inner, "a loop inside the KV loop (the RECV scan)"
        assert len([x for x in loop.walk() if isinstance(x, WaitOp)]) == 2, "K and V"


def test_cell_map_mutation_skips_the_wait_and_is_caught():
    """The cell map is what the table form's K/V waits trust: rank 0's cell of one K block
    emptied (``-1``, as if the block were local) makes its tiles read that block without
    waiting -- the emulator reports read-before-arrival of exactly that chunk on rank 0 -- and
    the runtime's ``chunk_table.validate`` refuses the edited table before any upload."""
    W = 2
    sched = kv_all_gather((2, 32 * W, 64), "bf16", W, dim=1)
    edit, victim, _ = empty_first_cell(sched, "K")
    with pytest.raises(LaunchError, match="disagrees"):
        ct.validate(ct.seal(edit(ct.build(sched, "sm", 2))), sched, "sm", 2)
    res, _, _ = _emulate(W, False, B=1, Hq=4, Hkv=2, Sl=32, table_edit=edit,
                         policies=("late", "random:3"))
    races = res.races_of("read-before-arrival")
    assert races and {(r.chunk, r.rank) for r in races} == {(victim, 0)}, res.summary()
