"""The local flash-attention kernel (syncopate.kernels.attention) on a CPU: correct under
Triton's interpreter against SDPA in fp32, compiles for sm_90 with the KV loop the passes need,
and its launcher rejects bad input with typed errors.

Correctness runs every case in one subprocess (tests/attention_interp_worker.py) because
``TRITON_INTERPRET=1`` must be set before triton is imported.  Tolerances, on
``|o - ref| <= atol + rtol * |ref|`` with atol = rtol: 1e-2 for fp16, 2e-2 for bf16 (P is rounded
to the input dtype before the P @ V dot, as in every flash kernel); the log-sum-exp (fp32
throughout) within 1e-3 absolute of ``torch.logsumexp`` of the scaled fp32 scores.  Outputs are
NaN-poisoned before the run, so a row or column the kernel skips shows up.
"""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from interp_runner import run_interpreter_worker  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import (AttentionConfig, attention, attention_compile_args,  # noqa: E402
                               attention_compile_attrs, attention_default_config,
                               attention_fast_compile_args, attn_fwd_fast_kernel,
                               attn_fwd_kernel)
from syncopate.kernels.attention import FAST_PARAMS, check_operands  # noqa: E402
from syncopate.kernels.attention_config import (SMEM_LIMIT_SM90,  # noqa: E402
                                                fast_default_config)

SM90 = GPUTarget("cuda", 90, 32)
WORKER = Path(__file__).with_name("attention_interp_worker.py")
TOL = {"fp16": 1e-2, "bf16": 2e-2}
SMALL = dict(BLOCK_M=64, BLOCK_N=32)  # several KV blocks and ragged edges at these lengths


def _case(name, dtype="fp16", B=1, Hq=4, Hkv=2, Sq=100, Skv=150, D=64, causal=False, **kw):
    c = dict(name=name, dtype=dtype, B=B, Hq=Hq, Hkv=Hkv, Sq=Sq, Skv=Skv, D=D, causal=causal,
             tol=TOL[dtype], seed=len(name) * 7919 + sum(map(ord, name)), fusable=False)
    c.setdefault("config", SMALL)
    c.update(kw)
    return c


WS = dict(WARP_SPECIALIZE=True)
CASES = [
    # the fusable kernel (attn_fwd_kernel: what the ops compile)
    _case("fusable_fp16_gqa_ragged", Sq=100, Skv=150, fusable=True),
    _case("fusable_bf16_gqa_ragged_causal", dtype="bf16", Sq=150, Skv=100, causal=True,
          fusable=True),
    _case("fusable_fp16_d128", D=128, Sq=130, Skv=130, fusable=True),
    _case("fusable_bf16_d128_default_config", dtype="bf16", D=128, Sq=192, Skv=192, causal=True,
          config=None, fusable=True),
    # the fast kernel (attn_fwd_fast_kernel: what attention() runs): ragged keys (EVEN_KV
    # false), Sq != Skv both ways, the two-loop causal split and the warp-specialised single loop
    _case("fp16_gqa_ragged", Sq=100, Skv=150),
    _case("fp16_gqa_ragged_ws", Sq=100, Skv=150, config=dict(SMALL, **WS)),
    _case("fp16_gqa_ragged_causal", Sq=100, Skv=150, causal=True),
    _case("fp16_sq_gt_skv_causal", Sq=150, Skv=100, causal=True),
    _case("fp16_sq_gt_skv_causal_ws", Sq=150, Skv=100, causal=True, config=dict(SMALL, **WS)),
    _case("fp16_mha_192_causal", Hkv=4, Sq=192, Skv=192, causal=True),
    _case("bf16_gqa_ragged_causal", dtype="bf16", Sq=150, Skv=100, causal=True),
    _case("bf16_b2_64", dtype="bf16", B=2, Hkv=4, Sq=64, Skv=64),
    _case("bf16_b2_64_causal_bn_gt_bm", dtype="bf16", B=2, Sq=64, Skv=64, causal=True,
          config=dict(BLOCK_M=16, BLOCK_N=32)),
    _case("bf16_d128_causal", dtype="bf16", D=128, Hkv=4, Sq=130, Skv=130, causal=True),
    _case("bf16_d128_default_config", dtype="bf16", D=128, Sq=192, Skv=192, causal=True,
          config=None),
    _case("fp16_d64_default_config", D=64, Sq=160, Skv=160, config=None),
    _case("bf16_scale_bshd", dtype="bf16", B=2, Sq=96, Skv=80, sm_scale=0.3, bshd=True),
    _case("bf16_scale_bshd_causal_ws", dtype="bf16", B=2, Sq=96, Skv=80, sm_scale=0.3,
          bshd=True, causal=True, config=dict(SMALL, **WS)),
    _case("fp16_one_query_causal", Sq=1, Skv=70, causal=True),
    # the zigzag layout (kernels/attention_zigzag.py): whole sequence, and per rank shard as
    # ring attention runs it; compared in original order with SDPA's causal mask.  The
    # fusable kernel (attn_zigzag_fwd_kernel), then the fast one (attn_fwd_fast_kernel with
    # SEGMENTS: the prefix loop over original positions with the stored rows remapped)
    _case("zigzag_fp16_w2_all", Sq=128, Skv=128, causal=True, zigzag=dict(W=2, ranks="all"),
          config=dict(BLOCK_M=16, BLOCK_N=16), fusable=True),
    _case("zigzag_bf16_w2_shards", dtype="bf16", B=2, Sq=128, Skv=128, causal=True,
          zigzag=dict(W=2), config=dict(BLOCK_M=32, BLOCK_N=16), fusable=True),
    _case("zigzag_fp16_w4_shards_d128", Hkv=1, D=128, Sq=128, Skv=128, causal=True,
          zigzag=dict(W=4), config=dict(BLOCK_M=16, BLOCK_N=16), fusable=True),
    # the paired kernel's block shapes both ways (BLOCK_N > BLOCK_M: a query block's diagonal
    # block is partly past it; BLOCK_M > BLOCK_N), an odd world size, GQA 4/2, B = 2, D = 128
    _case("zigzag_fp16_w3_all_bn_gt_bm", Sq=192, Skv=192, causal=True,
          zigzag=dict(W=3, ranks="all"), config=dict(BLOCK_M=16, BLOCK_N=32), fusable=True),
    _case("zigzag_bf16_w3_shards_bm_gt_bn_b2", dtype="bf16", B=2, Sq=192, Skv=192, causal=True,
          zigzag=dict(W=3), config=dict(BLOCK_M=32, BLOCK_N=16), fusable=True),
    _case("zigzag_bf16_w4_all_d128_scale", dtype="bf16", D=128, Sq=256, Skv=256, causal=True,
          zigzag=dict(W=4, ranks="all"), config=dict(BLOCK_M=32, BLOCK_N=32), sm_scale=0.2,
          fusable=True),
    _case("zigzag_fast_fp16_w2_all", Sq=128, Skv=128, causal=True,
          zigzag=dict(W=2, ranks="all"), config=dict(BLOCK_M=16, BLOCK_N=32)),
    _case("zigzag_fast_bf16_w2_shards", dtype="bf16", B=2, Sq=128, Skv=128, causal=True,
          zigzag=dict(W=2), config=dict(BLOCK_M=32, BLOCK_N=16)),
    _case("zigzag_fast_fp16_w4_shards_d128_ws", Hkv=1, D=128, Sq=128, Skv=128, causal=True,
          zigzag=dict(W=4), config=dict(BLOCK_M=16, BLOCK_N=16, WARP_SPECIALIZE=True)),
]


def _visit_cases():
    """Every loop of the paired zigzag kernel -- B (segment ``2W-1-s``, block ``nbm-1-x``) and
    A (segment ``s``, block ``x``) of every pair -- for W = 2..4, both block orders and both
    visiting orders, with the loop's bounds as the kernel computes them."""
    out = []
    for W, BM, BN, seg in ((2, 16, 16, 32), (3, 16, 32, 64), (4, 32, 16, 32)):
        nb, nbm = seg // BN, seg // BM
        for s in range(W):
            for x in range(nbm):
                for which, first, n_own, up_runs in (
                        ("B", (2 * W - 1 - s) * seg + (nbm - 1 - x) * BM,
                         nb + -(-((nbm - x) * BM) // BN), 2 * (W - 1 - s)),
                        ("A", s * seg + x * BM, -(-((x + 1) * BM) // BN), 0)):
                    for desc in (False, True):
                        order = "desc" if desc else "asc"
                        out.append(dict(
                            name=f"visits_w{W}_{BM}x{BN}_s{s}_x{x}_{which}_{order}",
                            visits=dict(s=s, n_own=n_own, up_runs=up_runs, NB=nb,
                                        SEGMENTS=2 * W,
                                        DESCENDING=desc),
                            expect=dict(W=W, BM=BM, BN=BN, seg=seg, s=s, first=first)))
    return out


VISIT_CASES = _visit_cases()


@functools.lru_cache(maxsize=None)
def _interpreter_results(tmp: str) -> dict:
    return run_interpreter_worker(WORKER, CASES + VISIT_CASES, tmp, timeout=300)


@pytest.fixture(scope="module")
def interp_results(tmp_path_factory):
    return _interpreter_results(str(tmp_path_factory.mktemp("attn_interp")))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_sdpa_under_interpreter(interp_results, case):
    r = interp_results[case["name"]]
    assert "error" not in r, r.get("error")
    assert r["path"] == ("fusable" if case["fusable"] else "fast"), r
    assert r["nan_o"] == 0 and r["nan_lse"] == 0, f"outputs left unwritten (NaN): {r}"
    assert r["o_excess"] <= case["tol"], (
        f"|o - sdpa| = {r['o_err']:.3g} exceeds {case['tol']} + {case['tol']} * |sdpa|: {r}")
    assert r["lse_err"] <= 1e-3, f"lse differs from logsumexp by {r['lse_err']:.3g}: {r}"


@pytest.mark.parametrize("case", VISIT_CASES, ids=[c["name"] for c in VISIT_CASES])
def test_paired_zigzag_loop_visits_each_visible_block_once_in_arrival_order(interp_results,
                                                                           case):
    """The paired kernel's loop (``_visited_block``, run under the interpreter) visits exactly
    the stored KV blocks its query block sees -- each once, none it does not see -- first its
    own shard's (stored order), then the other shards in the order a fused kernel receives
    them: ascending ``s+1, ..., W-1, 0, ...`` (all-gather) or descending ``s-1, ..., 0, W-1,
    ...`` (neighbour-hop ring), each shard's blocks in stored order."""
    r = interp_results[case["name"]]
    assert "error" not in r, r.get("error")
    e, desc = case["expect"], case["visits"]["DESCENDING"]
    W, BN, seg, s = e["W"], e["BN"], e["seg"], e["s"]
    nb = seg // BN

    def stored(o):  # original KV block -> stored block
        k, y = divmod(o, nb)
        return (2 * k if k < W else 2 * (2 * W - 1 - k) + 1) * nb + y

    visible = [stored(o) for o in range(-(-(e["first"] + e["BM"]) // BN))]
    dist = lambda blk: ((s - blk // (2 * nb)) if desc else (blk // (2 * nb) - s)) % W  # noqa
    assert r["blocks"] == sorted(visible, key=lambda blk: (dist(blk), blk))


# ------------------------------------------------------------------------------------------------
# Compile for sm_90 (no GPU needed)
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _compile(dtype: str, head_dim: int, causal: bool):
    config = attention_default_config(head_dim)
    signature, constexprs = attention_compile_args(dtype, head_dim, causal, config)
    src = triton.compiler.ASTSource(fn=attn_fwd_kernel, signature=signature,
                                    constexprs=constexprs, attrs=attention_compile_attrs())
    return triton.compile(src, target=SM90, options=config.options())


def ptxas_spills(ptx: str) -> int:
    """Bytes of register spill stores ptxas reports for sm_90a."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        res = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"],
                             capture_output=True, text=True, check=True)
    return sum(int(n) for n in re.findall(r"(\d+) bytes spill stores", res.stderr))


@pytest.mark.parametrize("dtype,head_dim,causal", [("bf16", 128, True), ("fp16", 64, False)])
def test_compiles_to_cubin_for_sm90(dtype, head_dim, causal):
    k = _compile(dtype, head_dim, causal)
    assert k.asm["cubin"], "no cubin"
    assert 0 < k.metadata.shared <= 232448
    assert "wgmma.mma_async" in k.asm["ptx"], "QK^T and PV must lower to Hopper wgmma"
    spills = ptxas_spills(k.asm["ptx"])
    assert spills == 0, f"the kernel spills {spills} bytes"


@functools.lru_cache(maxsize=None)
def _compile_fast(head_dim: int, causal: bool, segments: int = 0, even_kv: bool = True,
                  ws: bool | None = None):
    config = fast_default_config(head_dim, causal)
    if ws is not None:  # the two-loop form: the warp-specialised default's tiles, 8 warps
        config = config.replace(WARP_SPECIALIZE=ws, num_warps=4 if ws else 8)
    signature, constexprs = attention_fast_compile_args("bf16", head_dim, causal, config,
                                                        segments, even_kv)
    src = triton.compiler.ASTSource(fn=attn_fwd_fast_kernel, signature=signature,
                                    constexprs=constexprs,
                                    attrs=attention_compile_attrs(True, FAST_PARAMS))
    return config, triton.compile(src, target=SM90, options=config.options())


@pytest.mark.parametrize("head_dim,causal,segments", [(128, False, 0), (128, True, 0),
                                                      (64, False, 0), (64, True, 0),
                                                      (128, True, 8)])
def test_fast_kernel_is_warp_specialised_on_sm90(head_dim, causal, segments):
    """The fast default compiles for sm_90 without spills, on wgmma, and Triton really split it
    into a producer and two consumer warp groups (12 warps from ``num_warps=4``, register
    reallocation with ``setmaxnreg``): Triton 3.6 drops ``warp_specialize=True`` silently when
    the loop is not one it can partition (a second loop, a branch in the loop, 8 warps)."""
    config, k = _compile_fast(head_dim, causal, segments)
    assert config.WARP_SPECIALIZE
    ptx = k.asm["ptx"]
    assert k.asm["cubin"] and 0 < k.metadata.shared <= SMEM_LIMIT_SM90
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx, "wgmma fed by TMA"
    assert k.metadata.num_warps == 3 * config.num_warps and "setmaxnreg" in ptx
    assert ptxas_spills(ptx) == 0


def _partitions(ttgir: str) -> dict:
    """``{"partition1": body, ...}``: the consumer regions of the warp-specialised kernel."""
    out = {}
    for m in re.finditer(r"^\s*(partition\d+)\(", ttgir, re.M):
        body = ttgir[m.end():]
        out[m.group(1)] = body[:body.index("ttg.warp_return")]
    return out


@pytest.mark.parametrize("head_dim,causal,segments", [(128, False, 0), (128, True, 0),
                                                      (64, False, 0), (128, True, 8)])
def test_warp_specialised_lse_rows_are_not_shifted_twice(head_dim, causal, segments):
    """The first H100 run: the second consumer's LSE went to rows ``m0 + BLOCK_M + i``.
    Triton 3.6's data partitioning gives consumer ``k`` the O store at ``m0 + k BLOCK_M/2``
    by mapping the value ``m0`` to that sum for every op it clones into the consumer, and
    also shifts ``arange`` to start at ``k BLOCK_M/2``; an LSE address ``m0 + arange`` got
    both.  The shifted coordinate must feed the O store and nothing else."""
    _, k = _compile_fast(head_dim, causal, segments)
    parts = _partitions(k.asm["ttgir"])
    shifted = 0
    for name, body in parts.items():
        coord = re.search(r"async_tma_copy_local_to_global %[\w.]+\[(%[\w.]+),", body)
        assert coord, f"{name}: no O store"
        c = coord.group(1)
        if not re.search(rf"{re.escape(c)} = arith\.addi %m0, %c64", body):
            continue  # the first consumer stores at m0 itself
        shifted += 1
        uses = re.findall(rf"{re.escape(c)}\b(?! =)", body)
        assert len(uses) == 1, (f"{name}: the O store's coordinate {c} also feeds "
                                f"{len(uses) - 1} other ops")
    assert shifted == 1, f"expected one consumer storing at m0 + 64, found {shifted}"


def test_fast_two_loop_form_compiles_without_spills():
    config, k = _compile_fast(128, True, 0, ws=False)
    assert not config.WARP_SPECIALIZE and k.metadata.num_warps == 8
    assert "wgmma.mma_async" in k.asm["ptx"] and ptxas_spills(k.asm["ptx"]) == 0


@pytest.mark.parametrize("ws", [False, True])
@pytest.mark.parametrize("segments", [0, 8])
def test_fast_kernel_loops_have_no_branch(ws, segments):
    """The point of the fast causal (and zigzag) forward: no ``if`` inside a KV loop, so every
    loop software-pipelines its loads -- the zigzag kernel's in-loop skip cost 1.28-1.33x.
    Without warp specialisation the causal blocks split into two loops (unmasked, diagonal)."""
    _, k = _compile_fast(128, True, segments, ws=ws)
    ttir = k.asm["ttir"]
    body = ttir[ttir.index("tt.func public @attn_fwd_fast_kernel"):]
    loops = body.split("scf.for")[1:]
    assert len(loops) == (1 if ws else 2), f"{len(loops)} KV loops"
    for loop in loops:
        inner = loop[:loop.index("scf.yield")]
        assert "scf.if" not in inner, "a branch inside the KV loop"
        assert len(re.findall(r"tt\.descriptor_load", inner)) == 2, "K and V by TMA"


def _loop_stats(ttgir: str, fn: str) -> list[dict]:
    """Per ``scf.for`` of ``fn`` in sm_90 TTGIR: what software pipelining leaves in the loop
    (cp.async copies into a multi-buffer and their waits) and what stops it (a branch, a plain
    ``tt.load``)."""
    body = ttgir[ttgir.index(f"tt.func public @{fn}"):]
    out = []
    for loop in body.split("scf.for")[1:]:
        inner = loop[:loop.index("scf.yield")]
        out.append(dict(async_copies=len(re.findall(r"ttg\.async_copy_global_to_local", inner)),
                        async_waits=len(re.findall(r"ttg\.async_wait", inner)),
                        loads=len(re.findall(r"tt\.load ", inner)),
                        branches=inner.count("scf.if")))
    return out


@functools.lru_cache(maxsize=None)
def _compile_zigzag(head_dim: int, config: AttentionConfig | None = None, segments: int = 8):
    from syncopate.kernels import attention_zigzag as zz
    config = config or zz.default_config(head_dim)
    signature, constexprs = zz.compile_args("bf16", head_dim, segments, config)
    src = triton.compiler.ASTSource(fn=zz.attn_zigzag_fwd_kernel, signature=signature,
                                    constexprs=constexprs,
                                    attrs=attention_compile_attrs(True, zz._PARAMS))
    return config, triton.compile(src, target=SM90, options=config.options())


@pytest.mark.parametrize("head_dim,config", [
    (128, None), (64, None),
    (128, AttentionConfig(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3)),
    (128, AttentionConfig(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=2))])
def test_paired_zigzag_kernel_pipelines_its_kv_loads_on_sm90(head_dim, config):
    """Issue 31: the zigzag kernel skipped later segments with an ``if`` in its KV loop, and
    Triton did not pipeline the loads under it (1.28-1.50x the prefix-causal kernel's time).
    The paired kernel's two KV loops have no branch: in the sm_90 TTGIR each copies K and V
    asynchronously into ``num_stages`` buffers and waits for them -- and, with two query
    blocks' state live one after the other, still without register spills."""
    config, k = _compile_zigzag(head_dim, config)
    loops = _loop_stats(k.asm["ttgir"], "attn_zigzag_fwd_kernel")
    assert len(loops) == 2, loops
    for loop in loops:
        assert loop["branches"] == 0 and loop["loads"] == 0, loop
        assert loop["async_copies"] == 2 and loop["async_waits"] >= 1, loop
    buffers = re.findall(rf"!ttg\.memdesc<{config.num_stages}x\d+x\d+xbf16", k.asm["ttgir"])
    assert len(buffers) >= 2, f"K and V not in {config.num_stages}-deep buffers"
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx and ptxas_spills(ptx) == 0
    assert 0 < k.metadata.shared <= SMEM_LIMIT_SM90


def _fused_ring_attention(causal: bool, W: int, lowering: str):
    """The ring attention's local kernel as the op fuses it (``kv_all_gather`` of K and V, the
    op's specialisation and options), compiled for sm_90 with ``lowering``: ``(config, the
    compiled kernel)``.  Causal: the paired zigzag kernel; else ``attn_fwd_kernel``."""
    import syncopate
    from syncopate.kernels import attention_zigzag as zz
    from syncopate.ops.ring_attention import CONSTANT_ARGS, _args, _kernel
    from syncopate.runtime.specialize import specialize
    from syncopate.schedule.kv_gather import kv_all_gather
    B, Hq, Hkv, Sl, D = 1, 32, 8, 2048, 128
    cfg = zz.default_config(D) if causal else attention_default_config(D)
    q = torch.empty(B, Hq, Sl, D, dtype=torch.bfloat16)
    kv = torch.empty(B * Hkv, Sl * W, D, dtype=torch.bfloat16)
    values, _ = _args(q, kv, kv, torch.empty_like(q), torch.empty(B, Hq, Sl), 0.1, causal, 0, W,
                      Hkv, D, cfg)
    spec = specialize(_kernel(causal), values, frozenset(CONSTANT_ARGS))
    attrs = attention_compile_attrs(True, zz._PARAMS) if causal else attention_compile_attrs()
    fc = syncopate.compile(_kernel(causal), signature=spec.signature_dict(),
                           constexprs=spec.constexpr_dict(),
                           schedule=kv_all_gather((B * Hkv, Sl * W, D), "bf16", W, dim=1),
                           operand={"K": "K", "V": "V"}, backend="sm", comm_programs=4,
                           attrs=attrs, reorder_reductions=True, lowering=lowering,
                           **cfg.options())
    assert fc.abi.lowering == lowering
    return cfg, fc


def _assert_kv_pipelined(cfg, fc, D: int = 128) -> None:
    """The K^T and V tiles are copied asynchronously into ``num_stages``-deep buffers (none
    left a plain ``tt.load``), and ptxas spills nothing."""
    ttgir = fc.asm["ttgir"]
    kv_tiles = (f"{D}x{cfg.BLOCK_N}", f"{cfg.BLOCK_N}x{D}")  # K^T and V tiles
    plain = [t for t in kv_tiles if re.search(rf"tt\.load [^\n]*tensor<{t}x!tt\.ptr<bf16>", ttgir)]
    assert not plain, f"K/V tiles {plain} loaded without pipelining"
    for t in kv_tiles:
        assert re.search(rf"ttg\.async_copy_global_to_local [^\n]*tensor<{t}x!tt\.ptr<bf16>",
                         ttgir), f"no async copy of the {t} tiles"
        assert f"!ttg.memdesc<{cfg.num_stages}x{t}xbf16" in ttgir, f"{t} not multi-buffered"
    assert ptxas_spills(fc.asm["ptx"]) == 0


def test_fused_paired_zigzag_kernel_pipelines_with_unrolled_waits():
    """The causal ring attention as the op fuses it at W = 2 (``kv_all_gather``'s 4 chunks: the
    unrolled lowering, one branch per chunk wait in each KV loop), compiled for sm_90: the
    waits do not stop Triton from pipelining either loop's K and V loads."""
    _assert_kv_pipelined(*_fused_ring_attention(True, 2, "unrolled"))


@pytest.mark.parametrize("W", [4, 8])
@pytest.mark.parametrize("causal", [True, False])
def test_fused_ring_attention_pipelines_with_table_waits(causal, W):
    """The world sizes ``auto`` lowers through the chunk table (W = 4, 8): each K/V wait in a
    KV loop is a cell-map lookup (resolve-chunks' ``TableCellWait``: one table load under a
    branch, no loop), so Triton still pipelines the K and V loads of the paired zigzag kernel's
    two loops and of the non-causal kernel's loop, ``num_stages`` deep, without spills.  (With
    the RECV scan inside the KV loop there was no async copy at all.)"""
    _assert_kv_pipelined(*_fused_ring_attention(causal, W, "table"))


def _fused_ulysses(W: int, lowering: str):
    """The Ulysses attention's local kernel as the op fuses it (``ulysses_all_to_all``, the
    op's constant args, default config and comm programs, push), compiled for sm_90 with
    ``lowering``: ``(config, the compiled kernel)``."""
    import syncopate
    from syncopate.ops.ulysses import _CONSTANTS, _OPERANDS
    from syncopate.runtime.specialize import specialize
    from syncopate.schedule import ulysses_all_to_all
    from syncopate.schedule.ulysses_cost import OP_DEFAULT_PROGRAMS
    B, Hq, Hkv, Sl, D = 1, 32, 8, 2048, 128
    S = Sl * W
    cfg = attention_default_config(D)
    Q, K, V, O = (torch.empty(B, h, S, D, dtype=torch.bfloat16) for h in (Hq, Hkv, Hkv, Hq))
    values = (Q, K, V, O, torch.empty(B, Hq // W, S), 0.1,
              *Q.stride()[:3], *K.stride()[:3], *V.stride()[:3], *O.stride()[:3],
              Hq // W, Hq // Hkv, S, S, D, cfg.BLOCK_M, cfg.BLOCK_N, False)
    spec = specialize(attn_fwd_kernel, values, frozenset(_CONSTANTS))
    fc = syncopate.compile(attn_fwd_kernel, signature=spec.signature_dict(),
                           constexprs=spec.constexpr_dict(), attrs=spec.attrs_dict(),
                           schedule=ulysses_all_to_all(B, Hq, Hkv, S, D, "bf16", W, mode="push"),
                           operand=dict(_OPERANDS), backend="sm",
                           comm_programs=OP_DEFAULT_PROGRAMS, lowering=lowering,
                           **cfg.options())
    assert fc.abi.lowering == lowering
    return cfg, fc


@pytest.mark.parametrize("W", [4, 8])
def test_fused_ulysses_pipelines_with_table_waits(W):
    """The fused Ulysses attention at W = 4 and 8 with the table lowering: each K/V wait in the
    KV loop is a lookup of the table's two-dim cell map (heads x sequence blocks; one table
    load under a branch, no loop), so Triton pipelines the K and V loads ``num_stages`` deep
    without spills.  (With the RECV scan inside the KV loop, as before the grid, there was no
    async copy of K or V.)"""
    _assert_kv_pipelined(*_fused_ulysses(W, "table"))


@triton.jit
def _skip_in_loop_kernel(X, Y, N, SKIP: tl.constexpr, BLOCK: tl.constexpr):
    """The old zigzag kernel's loop in miniature: loads under an in-loop ``if`` (``SKIP``) or
    not -- the control for :func:`_loop_stats`."""
    offs = tl.arange(0, BLOCK)
    w = tl.load(X + offs[:, None] * BLOCK + offs[None, :])
    acc = tl.zeros([BLOCK, BLOCK], dtype=tl.float32)
    for i in tl.range(0, N):
        if not SKIP or i % 2 == 0:
            x = tl.load(X + (i * BLOCK + offs)[:, None] * BLOCK + offs[None, :])
            acc = tl.dot(w, x, acc)
    tl.store(Y + offs[:, None] * BLOCK + offs[None, :], acc)


@pytest.mark.parametrize("skip", [False, True])
def test_pipelining_check_sees_loads_under_a_branch(skip):
    """The check above is not vacuous: Triton 3.6 pipelines the plain loop's load (an async
    copy, no ``tt.load``) and leaves the one under an in-loop ``if`` a plain ``tt.load``."""
    src = triton.compiler.ASTSource(
        fn=_skip_in_loop_kernel, signature={"X": "*bf16", "Y": "*fp32", "N": "i32",
                                            "SKIP": "constexpr", "BLOCK": "constexpr"},
        constexprs={"SKIP": skip, "BLOCK": 64},
        attrs={(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]]})
    k = triton.compile(src, target=SM90, options=dict(num_warps=4, num_stages=3))
    (loop,) = _loop_stats(k.asm["ttgir"], "_skip_in_loop_kernel")
    if skip:
        assert loop["branches"] == 1 and loop["loads"] == 1 and loop["async_copies"] == 0, loop
    else:
        assert loop["branches"] == 0 and loop["loads"] == 0 and loop["async_copies"] == 1, loop


def test_ttir_has_one_kv_loop_with_the_kv_loads():
    """What the passes rely on: one scf.for (the KV loop) holding both K and V loads, their
    addresses built from the loop counter; Q is loaded once before it."""
    ttir = _compile("bf16", 128, True).asm["ttir"]
    body = ttir[ttir.index("tt.func public @attn_fwd_kernel"):]
    fors = re.findall(r"scf\.for (%[\w.]+) = ", body)
    assert len(fors) == 1, f"expected one KV loop, got {fors}"
    head, loop = body.split("scf.for", 1)
    assert len(re.findall(r"tt\.load ", head)) == 1, "Q must be loaded once, before the KV loop"
    assert len(re.findall(r"tt\.load ", loop)) == 2, "K and V must be loaded inside the KV loop"
    assert len(re.findall(r"tt\.dot ", loop)) == 2


_FLOAT_OPS = re.compile(r"\b(fma\.rn\.f32|mul(?:\.rn)?\.f32|add(?:\.rn)?\.f32|sub(?:\.rn)?\.f32|"
                        r"ex2\.approx(?:\.ftz)?\.f32|max\.f32|div\.\w+\.f32|lg2\.\w+\.f32)\b")


@pytest.mark.parametrize("causal", [False, True])
def test_rounding_does_not_depend_on_compiled_in_sizes(causal):
    """The fused kernels compile the sizes and strides in (``fuse(constant_args=...)``), the
    local launch does not; with a constant SEQ_KV the key mask folds away and LLVM used to
    contract ``qk * scale - m`` into an fma the runtime-size build did not have, so fused and
    unfused Ulysses differed in the last bit (seen on an H200).  The kernel now writes that fma
    itself: both builds must do the same float arithmetic, op for op."""
    config = attention_default_config(128)
    signature, constexprs = attention_compile_args("bf16", 128, causal, config)
    sizes = dict(stride_qb=8 * 1024 * 128, stride_qh=1024 * 128, stride_qm=128,
                 stride_kb=4 * 1024 * 128, stride_kh=1024 * 128, stride_kn=128,
                 stride_vb=4 * 1024 * 128, stride_vh=1024 * 128, stride_vn=128,
                 stride_ob=8 * 1024 * 128, stride_oh=1024 * 128, stride_om=128,
                 H_Q=4, GROUP=2, SEQ_Q=1024, SEQ_KV=1024)
    ops = []
    for extra in ({}, sizes):
        consts = {**constexprs, **extra}
        sig = {k: ("constexpr" if k in consts else v) for k, v in signature.items()}
        src = triton.compiler.ASTSource(fn=attn_fwd_kernel, signature=sig, constexprs=consts)
        ptx = triton.compile(src, target=SM90, options=config.options()).asm["ptx"]
        found = sorted(_FLOAT_OPS.findall(ptx))
        ops.append({op: found.count(op) for op in set(found)})
    assert ops[0] == ops[1], f"runtime sizes {ops[0]} != compiled-in sizes {ops[1]}"
    assert ops[0].get("fma.rn.f32", 0) >= 32, ops[0]


# ------------------------------------------------------------------------------------------------
# Typed errors (host only)
# ------------------------------------------------------------------------------------------------


def _qkv(B=1, Hq=4, Hkv=2, Sq=8, Skv=8, D=64, dtype=torch.bfloat16):
    return (torch.zeros(B, Hq, Sq, D, dtype=dtype), torch.zeros(B, Hkv, Skv, D, dtype=dtype),
            torch.zeros(B, Hkv, Skv, D, dtype=dtype))


@pytest.mark.parametrize("change,match", [
    (lambda q, k, v: (q.float(), k.float(), v.float()), "bfloat16 or torch.float16"),
    (lambda q, k, v: (q, k.half(), v), "one dtype"),
    (lambda q, k, v: (q[0], k, v), "4-D"),
    (lambda q, k, v: (q, k[:, :, :4], v), "same shape"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head_dim 32"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of KV heads"),
    (lambda q, k, v: (q, k[:, :, :0], v[:, :, :0]), "empty sequence"),
    (lambda q, k, v: (q, torch.cat([k, k]), torch.cat([v, v])), "batch and head_dim"),
])
def test_bad_operands_raise_launch_error(change, match):
    q, k, v = change(*_qkv())
    with pytest.raises(LaunchError, match=match):
        check_operands(q, k, v)


def test_bad_config_and_out_raise_launch_error():
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match="power of two"):
        attention(q, k, v, config=AttentionConfig(BLOCK_M=96))
    with pytest.raises(LaunchError, match="unknown attention config keys"):
        attention(q, k, v, config={"BLOCK_K": 64})
    with pytest.raises(LaunchError, match="out lse"):
        attention(q, k, v, out=(torch.empty(1, 4, 8, 64, dtype=q.dtype), torch.empty(1, 4, 8)
                                .half()))


@pytest.mark.skipif(triton.knobs.runtime.interpret, reason="this process runs the interpreter")
def test_cpu_launch_without_interpreter_says_what_to_do():
    with pytest.raises(LaunchError, match="TRITON_INTERPRET=1"):
        attention(*_qkv())


def test_default_configs_per_head_dim():
    assert attention_default_config(64).BLOCK_N == 128
    assert attention_default_config(128).BLOCK_N == 64
    with pytest.raises(LaunchError, match="head dim 96"):
        attention_default_config(96)
    assert AttentionConfig.of({"BLOCK_N": 32}, 128) == attention_default_config(128).replace(
        BLOCK_N=32)
