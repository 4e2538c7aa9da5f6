"""Ulysses attention through the compiler, in the emulator (issue 11, section 3).

Why: Ulysses sequence parallelism is the local attention kernel between two all-to-alls --
Q, K, V from sequence-sharded to head-sharded, the output back.  Syncopate fuses both into the
one kernel, unmodified (``attn_fwd_kernel``), from the ``ulysses_all_to_all`` plan: every rank
runs the kernel over its own heads (``view="rank"``: the compiler offsets the operands by the
rank's part), a tile waits only for the chunks of its own head, and the output tiles signal
the chunks that go back to their owners as they finish (``O`` is ``produced``).  These tests
run the fused TTIR on W emulated ranks under several interleavings with the race checker, and
compare

* with the unfused kernel (the emulator's reference, bit for bit: the same tiles in the same
  interpreter, on the collected inputs; the output on each rank's final rows against what the
  ranks that computed them produced), and
* with attention in numpy fp64 on the gathered inputs (bf16-rounded as the kernel reads them),
  within ``ATOL``.

Layout: the global tensors ``[B, H, S, D]`` with constexpr strides (the access analysis needs
constant strides to split an address into dims), ``H_Q`` the heads of one rank.
"""

from __future__ import annotations

import numpy as np
import pytest

from xdsl.dialects import scf

from emulate_helpers import empty_first_cell
from syncopate import chunk_table as ct
from syncopate.emulate import Emulation, PerRank, emulate, fuse_module
from syncopate.emulate.modules import kernel_ttir
from syncopate.errors import CompileError, LaunchError
from syncopate.kernels import AttentionConfig, attention_compile_args, attn_fwd_kernel
from syncopate.schedule import ulysses_all_to_all
from syncopate_mlir.dialects.syncopate import SignalRegionOp, WaitOp, WaitRegionOp
from syncopate_mlir.passes.access_eval import Evaluator
from syncopate_mlir.passes.poly import Poly

D = 64
CFG = AttentionConfig(BLOCK_M=16, BLOCK_N=16, num_warps=4, num_stages=2)
POLICIES = ("in-order", "reverse", "late", "random:1")
OPERANDS = {"Q": "Q", "K": "K", "V": "V", "O": "O"}
#: |O - numpy attention| bound: the kernel rounds P to bf16 for the PV product and O to bf16
#: (2^-9 relative each) on outputs of magnitude up to ~3 (unit normal inputs, short rows)
ATOL = 4e-2
LOG2E = 1.4426950408889634


def _compile_args(B, Hq, Hkv, S, W, causal=False):
    sig, cx = attention_compile_args("bf16", D, causal, CFG)
    fixed = dict(stride_qb=Hq * S * D, stride_qh=S * D, stride_qm=D,
                 stride_kb=Hkv * S * D, stride_kh=S * D, stride_kn=D,
                 stride_vb=Hkv * S * D, stride_vh=S * D, stride_vn=D,
                 stride_ob=Hq * S * D, stride_oh=S * D, stride_om=D,
                 H_Q=Hq // W, GROUP=Hq // Hkv, SEQ_Q=S, SEQ_KV=S)
    for k, v in fixed.items():
        sig[k] = "constexpr"
        cx[k] = v
    return sig, cx


def _bf16(a):
    return (a.astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32)


def _numpy_attention(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    k = np.repeat(k.astype(np.float64), g, 1)
    v = np.repeat(v.astype(np.float64), g, 1)
    sc = q.astype(np.float64) @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    if causal:
        s = q.shape[2]
        sc = np.where(np.tril(np.ones((s, s), bool)), sc, -np.inf)
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return p @ v


def _run(B, Hq, Hkv, S, W, mode="pull", causal=False, lowering="auto", launches=1,
         self_advance=False, table_edit=None, policies=POLICIES):
    """Emulate the fused kernel; ``table_edit(words)`` (given: ``lowering="table"``) edits the
    chunk table every rank's launch reads, as on a GPU where only the uploaded table is wrong,
    and the result comes back unchecked."""
    sig, cx = _compile_args(B, Hq, Hkv, S, W, causal)
    rng = np.random.default_rng(B * 100 + Hq * 10 + W)
    q = rng.standard_normal((B, Hq, S, D)).astype(np.float32)
    k = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    v = rng.standard_normal((B, Hkv, S, D)).astype(np.float32)
    # every rank holds the whole global buffer; the schedule says which part is staged
    args = dict(Q=PerRank([q] * W), K=PerRank([k] * W), V=PerRank([v] * W),
                O=np.zeros((B, Hq, S, D), np.float32),
                LSE=np.zeros((B, Hq // W, S), np.float32), qk_scale=float(LOG2E / np.sqrt(D)))
    sched = ulysses_all_to_all(B, Hq, Hkv, S, D, "bf16", W, mode=mode)
    grid = (S // CFG.BLOCK_M, B * Hq // W)
    if table_edit is not None:
        module, local = fuse_module(attn_fwd_kernel, signature=sig, constexprs=cx,
                                    schedule=sched, operand=OPERANDS, backend="sm",
                                    comm_programs=2, options=CFG.options(), lowering="table")
        em = Emulation(module, local, grid=grid, args=args)
        em.table = ct.seal(table_edit(list(em.table)))
        return em.run(policies, launches), (q, k, v)
    res = emulate(attn_fwd_kernel, signature=sig, constexprs=cx, schedule=sched,
                  operand=OPERANDS, grid=grid, args=args, backend="sm", comm_programs=2,
                  options=CFG.options(), launches=launches, policies=policies,
                  lowering=lowering, check=True, self_advance=self_advance)
    return res, (q, k, v)


@pytest.mark.parametrize("B, Hq, Hkv, S, W, mode, lowering", [
    (1, 4, 2, 32, 2, "pull", "unrolled"),
    (2, 8, 2, 32, 2, "push", "table"),
    (1, 8, 4, 32, 4, "pull", "table"),
    (2, 8, 4, 32, 4, "push", "table"),
    (1, 8, 4, 32, 4, "push", "unrolled"),
])
def test_fused_ulysses_matches_attention_on_the_gathered_inputs(B, Hq, Hkv, S, W, mode,
                                                                  lowering):
    res, (q, k, v) = _run(B, Hq, Hkv, S, W, mode, lowering=lowering)
    assert res.ok, res.summary()
    assert not res.races and not res.mismatches
    ref = _numpy_attention(_bf16(q), _bf16(k), _bf16(v), causal=False)
    rows = S // W
    for policy in POLICIES:
        for r in range(W):
            o = res.outputs[policy][r]["O"].reshape(B, Hq, S, D)[:, :, r * rows:(r + 1) * rows]
            err = np.abs(o.astype(np.float64) - ref[:, :, r * rows:(r + 1) * rows]).max()
            assert err <= ATOL, f"{policy} rank {r}: max |O - numpy| = {err}"
    # each of the 2 comm programs ran its share of every chunk once; the output tiles signalled
    stats = res.stats[POLICIES[0]]
    assert stats["transfers"] == 2 * (W - 1) * (2 * Hq + 2 * Hkv) and stats["signals"] > 0


@pytest.mark.parametrize("mode", ["pull", "push"])
def test_three_self_advancing_launches(mode):
    """The runtime's default, ``self_advance="auto"`` (passes/self_advance_epoch.py): three
    launches with no host advance between them, every launch's outputs equal the unfused
    kernel's on its collected inputs, no race, and the epoch word, counter and mirror at
    3, 0, 3 on every rank (``check=True`` raises otherwise)."""
    res, _ = _run(1, 4, 2, 32, 2, mode, launches=3, self_advance="auto")
    assert res.ok, res.summary()


def test_causal_and_two_launches():
    """Causal attention (the KV loop runs over a prefix, so a tile waits for fewer blocks) and
    a second launch with fresh inputs (epochs: flags only grow, no reset between launches),
    checked against the unfused kernel on the collected inputs of each launch."""
    res, (q, k, v) = _run(1, 4, 2, 32, 2, "pull", causal=True, launches=2)
    assert res.ok, res.summary()


def _pipeline_until(B, Hq, Hkv, S, W, until, lowering="auto"):
    from syncopate.compiler import fuse_request
    from syncopate_mlir.pipeline import run_pipeline_until
    sig, cx = _compile_args(B, Hq, Hkv, S, W)
    sched = ulysses_all_to_all(B, Hq, Hkv, S, D, "bf16", W)
    req = fuse_request(attn_fwd_kernel, signature=sig, constexprs=cx, schedule=sched,
                       operand=OPERANDS, backend="sm", comm_programs=2, keep_ir=False,
                       lowering=lowering)
    module, _ = run_pipeline_until(kernel_ttir(attn_fwd_kernel, sig, cx, None, CFG.options()),
                                   req, until)
    return module, sched


def _leaf(poly: Poly, name: str):
    """The one opaque SSA leaf of ``poly`` besides ``syn_rank``, checked to be an op
    ``name``."""
    leaves = [v for v in poly.vars() if getattr(v, "name_hint", None) != "syn_rank"]
    assert len(leaves) == 1, poly
    assert leaves[0].op.name == name, (poly, leaves[0].op.name)
    return leaves[0]


def test_a_tile_waits_only_for_its_own_head():
    """Every wait of a Q, K or V tile names a box one head wide along dim 1, at the tile's own
    head moved to its rank's part: ``h + rank * Hq / W`` for Q (``h = pid % H_Q``), ``h // GROUP
    + rank * Hkv / W`` for K and V.  Since every chunk carries one head, the chunks a tile
    waits for are exactly those of its head (and KV head); the output tiles signal boxes one
    head wide the same way."""
    B, Hq, Hkv, S, W = 2, 8, 4, 32, 4
    module, sched = _pipeline_until(B, Hq, Hkv, S, W, "insert-signals")
    ev = Evaluator()
    waits = [op for op in module.walk() if isinstance(op, WaitRegionOp)]
    signals = [op for op in module.walk() if isinstance(op, SignalRegionOp)]
    assert {op.tensor.data for op in waits} == {"Q", "K", "V"}
    assert {op.tensor.data for op in signals} == {"O"}
    for op in waits + signals:
        t = op.tensor.data
        lo, hi = ev.value(op.lo[1]), ev.value(op.hi[1])
        assert hi - lo == Poly.const(1), f"{t}: a box {hi - lo} heads wide"
        per_rank = (Hq if t in ("Q", "O") else Hkv) // W
        rank = next(v for v in lo.vars() if getattr(v, "name_hint", None) == "syn_rank")
        head = _leaf(lo, "arith.remsi" if t in ("Q", "O") else "arith.divsi")
        assert lo == Poly.var(head) + Poly.var(rank) * Poly.const(per_rank)
        if t in ("K", "V"):  # h_kv = h // GROUP, h = pid % H_Q
            assert head.op.lhs.op.name == "arith.remsi"
    # and the schedule's side: every chunk of Q, K and V is one head wide
    assert all(c.region.sizes[1] == 1 for c in sched.chunks)


def test_the_waits_of_k_and_v_are_inside_the_kv_loop():
    module, _ = _pipeline_until(1, 4, 2, 32, 2, "insert-waits")
    for op in module.walk():
        if isinstance(op, WaitRegionOp) and op.tensor.data in ("K", "V"):
            parents = []
            cur = op.parent_op()
            while cur is not None:
                parents.append(cur.name)
                cur = cur.parent_op()
            assert "scf.for" in parents, "K/V waits are per KV block, in the loop"


@pytest.mark.parametrize("W, Hq, Hkv", [(2, 4, 2), (4, 8, 4)])
def test_table_waits_in_the_kv_loop_are_grid_lookups(W, Hq, Hkv):
    """With ``lowering="table"`` the K and V waits inside the KV loop read their chunks from
    the table's two-dim cell map (heads x sequence blocks; resolve-chunks' ``TableCellWait``)
    instead of scanning the RECV list: no loop inside the KV loop (which would stop Triton
    from pipelining its K/V loads; test_attention_local.py checks the sm_90 result).  A block
    of 16 rows at a multiple of 16 meets one sequence cell at W = 2 (cells of 16 rows) and two
    at W = 4 (cells of 8): one or two waits each for K and V.  The Q wait, outside any loop,
    keeps the scan."""
    module, _ = _pipeline_until(1, Hq, Hkv, 32, W, "resolve-chunks", lowering="table")
    kv_loops = [op for op in module.walk() if isinstance(op, scf.ForOp)
                and any(x.name == "tt.dot" for x in op.walk())]
    assert len(kv_loops) == 1, len(kv_loops)
    inner = [x for x in kv_loops[0].walk() if isinstance(x, scf.ForOp) and x is not kv_loops[0]]
    assert not inner, "a loop inside the KV loop (the RECV scan)"
    per_block = 1 if W == 2 else 2
    waits = [x for x in kv_loops[0].walk() if isinstance(x, WaitOp)]
    assert len(waits) == 2 * per_block, "K and V, one wait per sequence cell a block meets"


def test_grid_mutation_skips_the_wait_and_is_caught():
    """The grid is what the table form's K/V waits trust: rank 0's cell of one K chunk (one
    head, one sequence block) emptied (``-1``, as if those rows were local) makes the tiles of
    that head read the block without waiting -- the emulator reports read-before-arrival of
    exactly that chunk on rank 0 -- and the runtime's ``chunk_table.validate`` refuses the
    edited table before any upload."""
    W = 2
    sched = ulysses_all_to_all(1, 4, 2, 32, D, "bf16", W)
    edit, victim, grid = empty_first_cell(sched, "K")
    assert grid.dims == (1, 2)
    with pytest.raises(LaunchError, match="disagrees"):
        ct.validate(ct.seal(edit(ct.build(sched, "sm", 2))), sched, "sm", 2)
    res, _ = _run(1, 4, 2, 32, W, table_edit=edit, policies=("late", "random:3"))
    races = res.races_of("read-before-arrival")
    assert races and {(r.chunk, r.rank) for r in races} == {(victim, 0)}, res.summary()


def test_a_global_view_of_a_head_sharded_tensor_is_refused():
    """Without ``view="rank"`` the kernel would read the same boxes on every rank, but each
    rank ends holding only its heads: refused (the coverage check), not miscompiled."""
    from dataclasses import replace
    from syncopate.schedule import Schedule
    s = ulysses_all_to_all(1, 4, 2, 32, D, "bf16", 2)
    tensors = {n: replace(t, view="global") for n, t in s.tensors.items()}
    sched = Schedule(2, tensors, s.chunks, s.meta)
    sig, cx = _compile_args(1, 4, 2, 32, 2)
    from syncopate.emulate import fuse_module
    with pytest.raises(CompileError, match="with the same boxes on every rank"):
        fuse_module(attn_fwd_kernel, signature=sig, constexprs=cx, schedule=sched,
                    operand=OPERANDS, backend="sm", comm_programs=2, options=CFG.options())


def test_nvshmem_lowering_is_clean_too():
    """The nvshmem lowering copies the 4-d chunks through the same 2-d view (its row puts only
    take chunks of whole trailing dims, which these are not)."""
    sig, cx = _compile_args(1, 4, 2, 32, 2)
    rng = np.random.default_rng(5)
    args = dict(Q=PerRank([rng.standard_normal((1, 4, 32, D)).astype(np.float32)] * 2),
                K=PerRank([rng.standard_normal((1, 2, 32, D)).astype(np.float32)] * 2),
                V=PerRank([rng.standard_normal((1, 2, 32, D)).astype(np.float32)] * 2),
                O=np.zeros((1, 4, 32, D), np.float32), LSE=np.zeros((1, 2, 32), np.float32),
                qk_scale=float(LOG2E / np.sqrt(D)))
    res = emulate(attn_fwd_kernel, signature=sig, constexprs=cx,
                  schedule=ulysses_all_to_all(1, 4, 2, 32, D, "bf16", 2, mode="push"),
                  operand=OPERANDS, grid=(32 // CFG.BLOCK_M, 2), args=args, backend="nvshmem",
                  comm_programs=2, options=CFG.options(), launches=2, policies=POLICIES[:2],
                  check=True)
    assert res.ok, res.summary()


def test_ce_backend_refuses_copied_outputs():
    """On ce, nothing holds a rank's launch until a produced chunk copied *into* it arrived
    (only reduce-scatter sums are awaited): the emulator showed the output read before the
    copies landed; the plan now refuses such a schedule."""
    sig, cx = _compile_args(1, 4, 2, 32, 2)
    z = np.zeros
    args = dict(Q=z((1, 4, 32, D), np.float32), K=z((1, 2, 32, D), np.float32),
                V=z((1, 2, 32, D), np.float32), O=z((1, 4, 32, D), np.float32),
                LSE=z((1, 2, 32), np.float32), qk_scale=1.0)
    with pytest.raises(LaunchError, match="awaits chunks arriving on a rank only for"):
        emulate(attn_fwd_kernel, signature=sig, constexprs=cx,
                schedule=ulysses_all_to_all(1, 4, 2, 32, D, "bf16", 2, mode="push"),
                operand=OPERANDS, grid=(2, 2), args=args, backend="ce", comm_programs=0,
                options=CFG.options(), launches=1, policies=POLICIES[:1])


def _fuse_with(sched):
    from syncopate.emulate import fuse_module
    sig, cx = _compile_args(1, 4, 2, 32, 2)
    return fuse_module(attn_fwd_kernel, signature=sig, constexprs=cx, schedule=sched,
                       operand=OPERANDS, backend="sm", comm_programs=2, options=CFG.options())


def _with_tensor(s, name, **changes):
    from dataclasses import replace
    from syncopate.schedule import Schedule
    tensors = dict(s.tensors)
    tensors[name] = replace(tensors[name], **changes)
    return Schedule(s.world_size, tensors, s.chunks, s.meta)


def test_a_produced_output_in_global_view_is_refused():
    """The output written with the same boxes on every rank, but each rank computes only its
    heads: its stores elsewhere would race with the chunks delivered there."""
    s = _with_tensor(ulysses_all_to_all(1, 4, 2, 32, D, "bf16", 2), "O", view="global")
    with pytest.raises(CompileError, match="computes only 4096 of its 8192 elements"):
        _fuse_with(s)


def test_a_kernel_reading_past_its_part_is_refused():
    """A plan whose Q parts are sequence blocks (each rank would hold half the rows of every
    head) while the kernel reads every row: the reads leave the part."""
    from dataclasses import replace
    from syncopate.schedule import Schedule
    s = ulysses_all_to_all(1, 4, 2, 32, D, "bf16", 2)
    q = s.tensors["Q"]
    kept = [c for c in s.chunks if c.tensor != "Q"]   # Q stays where it is staged
    chunks = [replace(c, id=i) for i, c in enumerate(kept)]
    assert all(not c.after for c in chunks)
    s = Schedule(2, {**s.tensors, "Q": replace(q, final=q.initial)}, chunks, s.meta)
    s.verify()
    with pytest.raises(CompileError, match=r"tensor 'Q', dim 2 of size 16 in the part each "
                                           r"rank addresses\) is masked to indices < 32"):
        _fuse_with(s)
