"""The local flash-attention backward (syncopate.kernels.attention_bwd) on a CPU: dQ, dK, dV
under Triton's interpreter against autograd through fp32 SDPA on the same inputs (GQA, MHA,
causal, ragged, Sq != Skv, D = 64/128, the zigzag layout per rank shard), its bad-input
refusals, and the shape the passes need (the dQ kernel's one KV loop; the dK/dV kernel's store
at the end of a program over one KV block).

Tolerances: the normwise relative error of each gradient within 0.2% for fp16 and 1.5% for
bf16, the largest elementwise error within 0.5% (fp16) / 3% (bf16) of the gradient's largest
value (measured: 0.03% / 0.6% normwise, 0.06% / 1.1% largest): P and dS are rounded to the
input dtype before their dots, as in every flash backward.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from triton.backends.compiler import GPUTarget  # noqa: E402

from interp_runner import run_interpreter_worker  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels.attention_bwd import (attention_backward,  # noqa: E402
                                             default_backward_config, tiles)
from syncopate.kernels.attention_config import fast_default_config  # noqa: E402
from test_attention_local import ptxas_spills  # noqa: E402

WORKER = Path(__file__).with_name("attention_interp_worker.py")
TOL = {"fp16": (0.002, 0.005), "bf16": (0.015, 0.03)}
SMALL = dict(BLOCK_M=32, BLOCK_N=32)


def _case(name, dtype="fp16", B=1, Hq=4, Hkv=2, Sq=96, Skv=80, D=64, causal=False, **kw):
    c = dict(name=name, dtype=dtype, B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Skv=Skv, D=D, causal=causal,
             backward=True, seed=len(name) * 7919 + sum(map(ord, name)), config=SMALL)
    c.update(kw)
    return c


CASES = [
    # the fast kernels (attn_bwd_dkdv_fast_kernel, attn_bwd_dq_fast_kernel: what
    # attention_backward runs on a contiguous sequence): ragged both ways, GQA flattened over
    # the group's heads, the causal diagonal split, different dK/dV and dQ tiles
    _case("bwd_fp16_gqa_ragged", Sq=100, Skv=70),
    _case("bwd_fp16_gqa_ragged_causal", Sq=70, Skv=100, causal=True),
    _case("bwd_fp16_sq_gt_skv_causal", Sq=100, Skv=70, causal=True,
          config=dict(BLOCK_M=16, BLOCK_N=32), dq_config=dict(BLOCK_M=32, BLOCK_N=16)),
    _case("bwd_bf16_mha_causal", dtype="bf16", Hkv=4, Sq=96, Skv=96, causal=True),
    _case("bwd_bf16_b2_gqa4", dtype="bf16", B=2, Hq=4, Hkv=1, Sq=64, Skv=64, sm_scale=0.2),
    _case("bwd_bf16_d128_causal", dtype="bf16", D=128, Hq=2, Hkv=1, Sq=64, Skv=64, causal=True),
    _case("bwd_bf16_d128_default_configs", dtype="bf16", D=128, Hq=4, Hkv=2, Sq=160, Skv=160,
          causal=True, config=None),
    # the fusable kernels (what the context-parallel backward compiles), and the zigzag layout
    # (always the fusable kernels)
    _case("bwd_fusable_fp16_gqa_ragged_causal", Sq=70, Skv=100, causal=True, fusable=True),
    _case("bwd_fusable_bf16_b2_gqa4", dtype="bf16", B=2, Hq=4, Hkv=1, Sq=64, Skv=64,
          sm_scale=0.2, fusable=True),
    _case("bwd_fp16_zigzag_w2", Hq=2, Hkv=1, Sq=128, Skv=128, causal=True, zigzag=dict(W=2),
          config=dict(BLOCK_M=16, BLOCK_N=16)),
    _case("bwd_bf16_zigzag_w4", dtype="bf16", Hq=2, Hkv=2, Sq=128, Skv=128, causal=True,
          zigzag=dict(W=4), config=dict(BLOCK_M=16, BLOCK_N=16)),
    # the fusable kernels' computed loop bounds (no skip inside a loop): a KV block's diagonal
    # spanning two query blocks and a query block's spanning two KV blocks (non-square tiles,
    # both ways; the dQ kernel runs them transposed), GQA flattened, per zigzag rank shard and
    # on a ragged contiguous sequence (Sq > Skv and Sq < Skv), and the default config's tiles
    _case("bwd_fusable_zigzag_w2_gqa_tall", Hq=4, Hkv=2, Sq=128, Skv=128, causal=True,
          zigzag=dict(W=2), config=dict(BLOCK_M=16, BLOCK_N=32)),
    _case("bwd_fusable_zigzag_w4_wide", dtype="bf16", Hq=2, Hkv=1, Sq=256, Skv=256,
          causal=True, zigzag=dict(W=4), config=dict(BLOCK_M=32, BLOCK_N=16)),
    _case("bwd_fusable_ragged_causal_tall", Sq=100, Skv=70, causal=True, fusable=True,
          config=dict(BLOCK_M=16, BLOCK_N=32)),
    _case("bwd_fusable_ragged_causal_wide", Hq=2, Hkv=1, Sq=45, Skv=110, causal=True,
          fusable=True, config=dict(BLOCK_M=32, BLOCK_N=16)),
    _case("bwd_fusable_ragged_noncausal", Sq=70, Skv=45, fusable=True,
          config=dict(BLOCK_M=16, BLOCK_N=32)),
    # every score below -88 (lse too): a ragged last KV block's zero keys give P = exp(-lse)
    # = inf, which dQ must mask rather than multiply by their zero K (NaN before).  The keys'
    # common offset cancels in dQ = dS K (the rows of dS sum to zero) only up to dS's fp16
    # rounding, hence the wider normwise tolerance (measured 0.2%)
    _case("bwd_fusable_far_scores_ragged", Sq=40, Skv=45, shift=4.0, fusable=True,
          config=dict(BLOCK_M=16, BLOCK_N=32), tol=(0.006, 0.01)),
    _case("bwd_fusable_far_scores_ragged_causal", Sq=45, Skv=40, shift=4.0, causal=True,
          fusable=True, config=dict(BLOCK_M=16, BLOCK_N=32), tol=(0.006, 0.01)),
    # the same hazard in the fast dQ (TMA zero-fills the keys past the sequence)
    _case("bwd_fast_far_scores_ragged", Sq=40, Skv=45, shift=4.0,
          config=dict(BLOCK_M=16, BLOCK_N=32), dq_config=dict(BLOCK_M=16, BLOCK_N=32),
          tol=(0.006, 0.01)),
    _case("bwd_fast_far_scores_ragged_causal", Sq=45, Skv=40, shift=4.0, causal=True,
          config=dict(BLOCK_M=16, BLOCK_N=32), dq_config=dict(BLOCK_M=16, BLOCK_N=32),
          tol=(0.006, 0.01)),
    _case("bwd_fusable_bf16_d128_default_config", dtype="bf16", D=128, Hq=4, Hkv=2, Sq=300,
          Skv=300, causal=True, fusable=True, config=None),
]


@functools.lru_cache(maxsize=None)
def _results(tmp: str) -> dict:
    return run_interpreter_worker(WORKER, CASES, tmp, timeout=900)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return _results(str(tmp_path_factory.mktemp("attn_bwd_interp")))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_gradients_match_sdpa_autograd(results, case):
    r = results[case["name"]]
    assert "error" not in r, r.get("error")
    fast = not case.get("fusable") and not case.get("zigzag")
    assert r["path"] == ("fast" if fast else "fusable"), r
    norm_tol, max_tol = case.get("tol", TOL[case["dtype"]])
    for g in ("dq", "dk", "dv"):
        assert r[f"{g}_nan"] == 0, f"{g} has NaN: {r}"
        assert r[f"{g}_rel"] <= norm_tol, f"{g}: normwise error {r[f'{g}_rel']:.3g}: {r}"
        assert r[f"{g}_max"] <= max_tol, f"{g}: largest error {r[f'{g}_max']:.3g}: {r}"


def _inputs(dtype=torch.float16, Sq=32, Skv=32):
    q = torch.randn(1, 2, Sq, 64, dtype=dtype)
    k = torch.randn(1, 1, Skv, 64, dtype=dtype)
    v = torch.randn(1, 1, Skv, 64, dtype=dtype)
    o = torch.randn(1, 2, Sq, 64, dtype=dtype)
    lse = torch.randn(1, 2, Sq)
    return q, k, v, o, lse, torch.randn_like(o)


@pytest.mark.parametrize("change,match", [
    (dict(o="bad_shape"), "o must be a torch.float16 tensor of shape"),
    (dict(lse="bad_dtype"), "lse must be the forward's fp32"),
    (dict(segments=3), "a zigzag backward needs causal=True, an even segments"),
    (dict(q_offset=16), "q_offset is for a zigzag-stored sequence"),
])
def test_bad_input_is_refused(change, match):
    q, k, v, o, lse, do = _inputs()
    if change.get("o") == "bad_shape":
        o = o[:, :1]
    if change.get("lse") == "bad_dtype":
        lse = lse.half()
    kw = {n: change[n] for n in ("segments", "q_offset") if n in change}
    with pytest.raises(LaunchError, match=match):
        attention_backward(q, k, v, o, lse, do, causal=True, **kw)


@pytest.mark.parametrize("q_offset,Sq", [(16, 32), (0, 48)])
def test_zigzag_queries_must_be_one_rank_shard(q_offset, Sq):
    """The kernels count on the local query rows being monotone in original position: one
    rank's two segments from an even slot on, not a segment boundary in between (``q_offset``
    16 of 16-token segments) nor three segments."""
    q, k, v, o, lse, do = _inputs(Sq=Sq, Skv=64)
    with pytest.raises(LaunchError, match="the queries one rank's shard"):
        attention_backward(q, k, v, o, lse, do, causal=True, segments=4, q_offset=q_offset,
                           config=dict(BLOCK_M=16, BLOCK_N=16))


def test_cpu_tensors_without_the_interpreter_are_refused():
    with pytest.raises(LaunchError, match="TRITON_INTERPRET=1"):
        attention_backward(*_inputs())


@functools.lru_cache(maxsize=None)
def _compile_fusable(kernel_name: str, head_dim: int, causal: bool, segments: int):
    """The fusable kernel on sm_90 with the default backward config's tiles for it (the dK/dV
    kernel's fp32 partials, as the context-parallel backward stores them)."""
    from syncopate.kernels import attention_bwd as m
    fn = getattr(m, kernel_name)
    config = default_backward_config(head_dim)
    block_m, block_n = tiles("dkdv" if "dkdv" in kernel_name else "dq", config)
    tensors = {"Q", "K", "V", "DO", "DQ"}
    sig = {n: ("*bf16" if n in tensors else "*fp32" if n in ("LSE", "DELTA", "DK", "DV")
               else "fp32" if "scale" in n else "i32") for n in fn.arg_names}
    cx = dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal,
              SEGMENTS=segments)
    sig.update({n: "constexpr" for n in cx})
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if n in tensors or n in ("LSE", "DELTA", "DK", "DV") or n.startswith("stride_")}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=config.options())


def _loops(ir: str, kernel_name: str) -> list[str]:
    """The bodies of the kernel's ``scf.for`` loops (none is nested in these kernels)."""
    body = ir[ir.index(f"tt.func public @{kernel_name}"):]
    return [loop[:loop.index("scf.yield")] for loop in body.split("scf.for")[1:]]


@pytest.mark.parametrize("causal,segments", [(True, 8), (True, 0), (False, 0)])
def test_dq_kernel_loads_kv_in_each_loop(causal, segments):
    """Two KV loops (the blocks seen whole, then the diagonal or ragged ones); K and V are
    loaded in each, their addresses built from the loop counter, and no loop is nested."""
    ttir = _compile_fusable("attn_bwd_dq_kernel", 128, causal, segments).asm["ttir"]
    loops = _loops(ttir, "attn_bwd_dq_kernel")
    assert len(loops) == 2
    for loop in loops:
        assert len([line for line in loop.splitlines() if "tt.load" in line]) == 2


def test_dkdv_kernel_loads_kv_once_and_stores_at_the_end():
    """What the fused dK/dV kernel needs: K and V loaded before the loops (the programs' chunk
    waits go to their start), dK and dV stored after them (the reduce-scatter's tiles)."""
    ttir = _compile_fusable("attn_bwd_dkdv_kernel", 128, True, 8).asm["ttir"]
    body = ttir[ttir.index("tt.func public @attn_bwd_dkdv_kernel"):]
    head = body.split("scf.for", 1)[0]
    tail = body.rsplit("scf.yield", 1)[1]
    assert len([line for line in head.splitlines() if "tt.load" in line]) == 2   # K and V
    assert len([line for line in tail.splitlines() if "tt.store" in line]) == 2  # dK and dV


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("kernel", ["attn_bwd_dkdv_kernel", "attn_bwd_dq_kernel"])
@pytest.mark.parametrize("causal,segments", [(True, 8), (False, 0)])
def test_fusable_kernels_pipeline_their_loops_without_spills(kernel, head_dim, causal,
                                                             segments):
    """The context-parallel backward's kernels with the default config on Hopper: no branch
    inside any loop and every load in a loop software-pipelined (an asynchronous copy into
    shared memory; the old in-loop causal skip left them synchronous), wgmma, and no register
    spills -- causal zigzag (the split loops, the position map) and non-causal."""
    k = _compile_fusable(kernel, head_dim, causal, segments)
    assert "wgmma.mma_async" in k.asm["ptx"]
    assert ptxas_spills(k.asm["ptx"]) == 0
    loops = _loops(k.asm["ttgir"], kernel)
    assert len(loops) == (2 if causal or "dq" in kernel else 1)
    for loop in loops:
        assert "scf.if" not in loop, "a branch inside a loop"
        assert re.search(r"tt\.load ", loop) is None, "a load the pipeliner left synchronous"
        copies = loop.count("ttg.async_copy_global_to_local")
        assert copies == (4 if "dkdv" in kernel else 2), f"{copies} pipelined loads"


def _innermost_loops(ir: str) -> list[str]:
    """The bodies of the ``scf.for`` loops of ``ir`` that hold no other loop (by indentation:
    MLIR's printer indents a region one level deeper than its op)."""
    lines, out = ir.splitlines(), []
    for i, line in enumerate(lines):
        if "scf.for" not in line:
            continue
        indent = len(line) - len(line.lstrip())
        j = i + 1
        while len(lines[j]) - len(lines[j].lstrip()) > indent:
            j += 1
        body = "\n".join(lines[i + 1:j])
        if "scf.for" not in body:
            out.append(body)
    return out


@pytest.mark.parametrize("head_dim", [64, 128])
def test_fused_dkdv_kernel_keeps_its_loops_pipelined_and_wait_free(head_dim):
    """The dK/dV kernel fused with ``kv_backward`` exactly as the op builds it (its argument
    list, compiled-in constants, schedule; causal zigzag, W = 4, GQA 32/8, 4096 tokens per
    rank, the default config) compiles for sm_90: no register spills, and its two compute
    loops (the ones with wgmma) hold no chunk wait and no branch and keep their four
    pipelined loads -- the waits for K/V sit at the program's start."""
    import math

    import syncopate
    from syncopate.ops import ring_attention_bwd as bwd
    from syncopate.runtime.specialize import specialize

    W, B, Hq, Hkv, Sl, D = 4, 1, 32, 8, 4096, head_dim
    S, cfg = Sl * W, default_backward_config(head_dim)
    q = torch.empty(B, Hq, Sl, D, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(B * Hkv, S, D, dtype=torch.bfloat16, device="meta")
    stat = torch.empty(B, Hq, Sl, device="meta")
    parts = tuple(torch.empty(B * Hkv, S, D, device="meta") for _ in range(2))
    args, _ = bwd.bwd_args("dkdv", q, kv, kv, q, stat, stat, parts, 1 / math.sqrt(D), True, 1,
                           W, Hkv, D, cfg)
    spec = specialize(bwd.kernel("dkdv"), args, frozenset(bwd.CONSTANT_ARGS))
    fc = syncopate.compile(bwd.kernel("dkdv"), signature=spec.signature_dict(),
                           constexprs=spec.constexpr_dict(), attrs=spec.attrs_dict(),
                           schedule=bwd.backward_schedule(B, Hkv, S, D, torch.bfloat16, W),
                           operand=bwd.OPERANDS, backend="sm", comm_programs=4, **cfg.options())
    assert ptxas_spills(fc.asm["ptx"]) == 0
    compute = [loop for loop in _innermost_loops(fc.asm["ttgir"])
               if "ttng.warp_group_dot " in loop]
    assert len(compute) == 2, "the diagonal loop and the unmasked loop"
    for loop in compute:
        assert "syncopate_wait" not in loop and "scf.if" not in loop
        assert loop.count("ttg.async_copy_global_to_local") == 4  # Q, dO, lse, delta


@functools.lru_cache(maxsize=None)
def _compile_fast(kernel_name: str, head_dim: int, causal: bool):
    from syncopate.kernels import attention_bwd as m
    fn = getattr(m, kernel_name)
    config = fast_default_config(head_dim, causal,
                                 "bwd_dkdv" if "dkdv" in kernel_name else "bwd_dq")
    tensors = {"Q", "K", "V", "DO", "DQ", "DK", "DV"}
    sig = {n: ("*bf16" if n in tensors else "*fp32" if n in ("LSE", "DELTA")
               else "fp32" if "scale" in n else "i32") for n in fn.arg_names}
    cx = dict(HEAD_DIM=head_dim, BLOCK_M=config.BLOCK_M, BLOCK_N=config.BLOCK_N, CAUSAL=causal)
    sig.update({n: "constexpr" for n in cx})
    attrs = {(i,): [["tt.divisibility", 16]] for i, n in enumerate(fn.arg_names)
             if n in tensors or n in ("LSE", "DELTA") or n.startswith("stride_")}
    src = triton.compiler.ASTSource(fn=fn, signature=sig, constexprs=cx, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=config.options())


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("kernel", ["attn_bwd_dkdv_fast_kernel", "attn_bwd_dq_fast_kernel"])
def test_fast_kernels_compile_for_sm90_without_spills_or_branches(kernel, head_dim):
    """The fast backward's defaults (causal: the heavier masks) on Hopper: wgmma fed by TMA,
    no register spills, and no ``if`` inside any loop (the fusable kernels' in-loop skip keeps
    Triton from pipelining their loads)."""
    k = _compile_fast(kernel, head_dim, True)
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert ptxas_spills(ptx) == 0
    ttir = k.asm["ttir"]
    loops = ttir[ttir.index(f"tt.func public @{kernel}"):].split("scf.for")[1:]
    assert len(loops) == 2, "causal: the unmasked and the diagonal loops"
    for loop in loops:
        assert "scf.if" not in loop[:loop.index("scf.yield")]
