"""The grouped GEMM (syncopate.kernels.grouped_gemm) on a CPU: numerics under Triton's
interpreter against per-expert fp32 matmuls (random, skewed, empty and over-capacity counts),
an sm_90 compile (wgmma, no spills), the TTIR shape the fused dispatch relies on (the A loads
inside the count branch), and the launcher's typed errors.

Under the interpreter, outputs are NaN-poisoned first: a valid row left unwritten, or a padding
row (past the count) written, is caught. Tolerance on ``|out - ref| / (1 + |ref|)``: 2e-2 (one
bf16 rounding of the output; fp16 is tighter but shares the bound).
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

from triton.backends.compiler import GPUTarget  # noqa: E402

from interp_runner import run_interpreter_worker  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels.grouped_gemm import grouped_gemm_kernel  # noqa: E402
from syncopate.kernels.grouped_gemm_launch import (GroupedGemmConfig,  # noqa: E402
                                                   check_operands, compile_args, compile_attrs,
                                                   default_config, grouped_gemm,
                                                   grouped_gemm_reference)

SM90 = GPUTarget("cuda", 90, 32)
WORKER = Path(__file__).with_name("grouped_gemm_interp_worker.py")
SMALL = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)


def _case(name, counts, E, gpe=1, C=64, K=48, N=40, dtype="bf16", **config):
    return dict(name=name, counts=counts, E=E, gpe=gpe, C=C, K=K, N=N, dtype=dtype,
                config={**SMALL, **config}, seed=sum(map(ord, name)))


CASES = [
    _case("random", [17, 64, 33, 5], E=4),
    _case("one_hot_expert", [64, 0, 0, 0], E=4),
    _case("empty_experts", [0, 0, 31, 0], E=4, dtype="fp16"),
    _case("over_capacity_clamped", [200, 3, -5, 64], E=4),  # kernel clamps to [0, C]
    _case("two_sources_per_expert", [10, 64, 0, 40, 1, 0], E=3, gpe=2),
    _case("ragged_k_n", [30, 7], E=2, C=32, K=33, N=50),
    # 5 tile rows x 3 tile columns per group, swept 2 rows at a time (the last sweep has one)
    _case("grouped_order", [160, 77, 0, 129], E=4, C=160, N=96, GROUP_M=2),
]


@functools.lru_cache(maxsize=None)
def _interpreter_results(tmp: str) -> dict:
    return run_interpreter_worker(WORKER, CASES, tmp, timeout=600)


@pytest.fixture(scope="module")
def interp_results(tmp_path_factory):
    return _interpreter_results(str(tmp_path_factory.mktemp("gg_interp")))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_per_expert_matmuls_under_interpreter(interp_results, case):
    r = interp_results[case["name"]]
    assert "error" not in r, r.get("error")
    assert r["unwritten"] == 0, f"valid rows left unwritten: {r}"
    assert r["written_padding"] == 0, f"rows past the count were written: {r}"
    assert r["err"] <= 2e-2, f"error {r['err']:.3g} vs per-expert fp32 matmuls"


# ------------------------------------------------------------------------------------------------
# sm_90 compile (no GPU needed)
# ------------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _compile(dtype: str, config: GroupedGemmConfig):
    signature, constexprs = compile_args(dtype, config)
    src = triton.compiler.ASTSource(fn=grouped_gemm_kernel, signature=signature,
                                    constexprs=constexprs, attrs=compile_attrs())
    return triton.compile(src, target=SM90, options=config.options())


CONFIGS = [GroupedGemmConfig(), default_config(32, 4096, 4096), default_config(1152, 14336, 4096)]


@pytest.mark.parametrize("config", CONFIGS, ids=["128x128", "small_capacity", "h200_large"])
@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_compiles_to_wgmma_without_spills(dtype, config):
    k = _compile(dtype, config)
    assert k.asm["cubin"], "no cubin"
    assert 0 < k.metadata.shared <= 232448
    assert "wgmma.mma_async" in k.asm["ptx"], "the dot must lower to Hopper wgmma"
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(k.asm["ptx"])
        f.flush()
        res = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o",
                              "/dev/null"], capture_output=True, text=True, check=True)
    spills = int(re.search(r"(\d+) bytes spill stores", res.stderr).group(1))
    assert spills == 0, f"the kernel spills {spills} bytes"


def test_ttir_loads_a_inside_the_count_branch():
    """What the fused dispatch relies on (docs/moe.md): the count is loaded first, and the K
    loop with the A loads sits inside the ``scf.if`` on it, so a tile past the count reaches no
    A load (``insert-waits`` never hoists a wait above an ``scf.if``)."""
    ttir = _compile("bf16", GroupedGemmConfig()).asm["ttir"]
    body = ttir[ttir.index("tt.func public @grouped_gemm_kernel"):]
    i_count = body.index("tt.load")         # the first load: the count
    i_if = body.index("scf.if")
    i_for = body.index("scf.for")
    assert i_count < i_if < i_for, "count load, then the branch, then the K loop"
    assert body.count("scf.for") == 1 and body.count("tt.load") == 3


# ------------------------------------------------------------------------------------------------
# launcher checks (host only) and the reference on CPU
# ------------------------------------------------------------------------------------------------


def _ops(G=4, C=8, K=16, E=4, N=24, dtype=torch.bfloat16):
    return (torch.randn(G, C, K).to(dtype), torch.randn(E, K, N).to(dtype),
            torch.tensor([3, 0, 8, 5][:G] + [0] * max(0, G - 4), dtype=torch.int32))


@pytest.mark.parametrize("mutate,match", [
    (lambda a, w, c: (a[0], w, c), "a must be"),
    (lambda a, w, c: (a, w[0], c), "w must be"),
    (lambda a, w, c: (a, w.float(), c), "bfloat16 or both float16"),
    (lambda a, w, c: (a, w[:, :8], c), "K = 16"),
    (lambda a, w, c: (a, w, c.long()), "int32"),
    (lambda a, w, c: (a, w, c[:2]), r"shape \(4,\)"),
    (lambda a, w, c: (a, w[:3], c), "segments"),
    (lambda a, w, c: (a.transpose(1, 2).contiguous().transpose(1, 2), w, c), "unit inner"),
])
def test_launcher_rejects_bad_operands(mutate, match):
    a, w, c = mutate(*_ops())
    with pytest.raises(LaunchError, match=match):
        check_operands(a, w, c)


def test_launch_on_cpu_is_a_typed_error():
    with pytest.raises(LaunchError, match="CUDA"):
        grouped_gemm(*_ops())


def test_reference_matches_per_group_matmuls_and_leaves_padding():
    a, w, c = _ops()
    out = grouped_gemm_reference(a, w, c)
    for g, n in enumerate(c.tolist()):
        torch.testing.assert_close(out[g, :n], a[g, :n] @ w[g])
        assert not out[g, n:].any()


def test_bad_config_is_a_typed_error():
    with pytest.raises(LaunchError, match="power of two"):
        GroupedGemmConfig(BLOCK_M=96).check()
    with pytest.raises(LaunchError, match="shared memory"):
        GroupedGemmConfig(BLOCK_M=256, BLOCK_N=256, BLOCK_K=128, num_stages=4).check()


def test_bench_table_formats_measured_and_missing_columns():
    """``bench_grouped``'s closing table (printed after the GPU measurements, so a formatting
    bug there would lose a run): ratios, a sweep's best, and a baseline this torch lacks."""
    from syncopate.bench.grouped import SWEEP, format_table
    rows = [dict(shape="mixtral_up", routing="uniform", triton_ms=1.5, mm_loop_ms=1.45,
                 ratio_mm_loop=1.5 / 1.45, grouped_mm_error="AttributeError: no _grouped_mm",
                 sweep_ms={SWEEP[0][0]: 1.5, SWEEP[3][0]: 1.4, SWEEP[4][0]: "OutOfResources"},
                 sweep_best=SWEEP[3][0], best_ratio_mm_loop=1.4 / 1.45)]
    text = format_table(rows).splitlines()
    assert len(text) == 2 and text[0].startswith("shape")
    assert "1.500" in text[1] and "1.03x" in text[1] and " - " in text[1]
    assert f"{SWEEP[3][0]} 1.400 ms (0.97x loop, - gmm)" in text[1]
    assert all(GroupedGemmConfig(*c).check() for _, *c in SWEEP)


@pytest.mark.parametrize("G,C,K,E,N,segments", [
    (8, 1152, 4096, 8, 14336, 1),          # Mixtral-like: fits, one launch
    (32, 11136, 7168, 32, 2048, 1),        # DeepSeek-like skew: 2.55e9 elements of a
    (64, 4096, 7168, 32, 7168, 2),         # two segments (groups of two sources): fits
    (64, 8192, 7168, 32, 7168, 2),         # two segments that do not
    (5, 3, 4, 5, 6, 1),
])
def test_group_slices_cover_every_group_once_within_32_bit_offsets(G, C, K, E, N, segments):
    """Launches of whole groups of one segment, each operand under 2**31 elements, every
    group exactly once with its own expert (what lets the DeepSeek-like skewed routing run:
    it was refused by the 32-bit offsets)."""
    from syncopate.kernels.grouped_gemm_launch import OFFSET_LIMIT, group_slices
    seen = []
    for g0, e0, n in group_slices(G, C, K, E, N, segments):
        assert n >= 1 and g0 % E == e0
        if n < G:  # a slice: experts e0 .. e0 + n of one segment
            assert e0 + n <= E and max(n * C * K, n * C * N, n * K * N) < OFFSET_LIMIT
        seen += [(g, (e0 + g - g0) % E) for g in range(g0, g0 + n)]
    assert [g for g, _ in seen] == list(range(G))
    assert all(e == g % E for g, e in seen)
    whole = max(G * C * K, G * C * N, E * K * N) < OFFSET_LIMIT
    assert (len(group_slices(G, C, K, E, N, segments)) == 1) == whole


def test_one_group_past_32_bit_offsets_is_a_typed_error():
    a = torch.empty((1, 2 ** 16, 2 ** 15 + 16), dtype=torch.bfloat16, device="meta")
    w = torch.empty((1, 2 ** 15 + 16, 8), dtype=torch.bfloat16, device="meta")
    count = torch.empty((1,), dtype=torch.int32, device="meta")
    with pytest.raises(LaunchError, match="one group or one expert alone"):
        check_operands(a, w, count, split=True)
