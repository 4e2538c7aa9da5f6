"""The local GEMM wrappers against torch on one GPU: random ragged shapes, strided operands,
both dtypes, every config family the benchmark sweeps. Output buffers are poisoned with NaN
first, so a tile that is never written fails the check."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
    pytest.skip("needs 1 CUDA GPU (none visible to torch); the CPU compile tests are "
                "tests/test_kernels_compile.py", allow_module_level=True)

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import GemmConfig, default_config, matmul  # noqa: E402

pytestmark = pytest.mark.gpu

HOPPER = torch.cuda.get_device_capability()[0] >= 9
needs_hopper = pytest.mark.skipif(not HOPPER, reason="TMA/wgmma kernels need sm_90+ "
                                  f"(this GPU is sm_{''.join(map(str, torch.cuda.get_device_capability()))})")
DTYPES = [torch.bfloat16, torch.float16]


def _rel_err(c, a, b) -> float:
    ref = torch.matmul(a.float(), b.float())
    err = torch.linalg.norm(c.float() - ref) / torch.linalg.norm(ref).clamp_min(1e-30)
    return float(err)


def _check(c, a, b, tol=1e-2):
    assert torch.isfinite(c).all(), "output has NaN/Inf (a tile was not written?)"
    err = _rel_err(c, a, b)
    assert err < tol, f"relative Frobenius error {err:.3g} >= {tol}"


def _rand(*shape, dtype, gen):
    return torch.randn(*shape, device="cuda", dtype=torch.float32, generator=gen).to(dtype)


def _poisoned(M, N, dtype):
    return torch.full((M, N), float("nan"), device="cuda", dtype=dtype)


@pytest.fixture
def gen():
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    return g


PTR_SHAPES = [(1000, 777, 333), (1, 1, 1), (129, 257, 65), (17, 4000, 100), (2048, 2048, 1024)]
PTR_CONFIGS = [None, GemmConfig(128, 128, 64, 8, 4, 4), GemmConfig(64, 64, 32, 4, 4, 2),
               GemmConfig(128, 256, 64, 8, 8, 3)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", PTR_SHAPES)
def test_ptr_ragged(shape, dtype, gen):
    M, N, K = shape
    a, b = _rand(M, K, dtype=dtype, gen=gen), _rand(K, N, dtype=dtype, gen=gen)
    out = _poisoned(M, N, dtype)
    c = matmul(a, b, out, kernel="ptr")
    assert c is out and c.dtype == dtype
    _check(c, a, b)


@pytest.mark.parametrize("config", PTR_CONFIGS, ids=str)
def test_ptr_configs(config, gen):
    M, N, K = 1000, 777, 333
    a, b = _rand(M, K, dtype=torch.bfloat16, gen=gen), _rand(K, N, dtype=torch.bfloat16, gen=gen)
    _check(matmul(a, b, _poisoned(M, N, torch.bfloat16), kernel="ptr", config=config), a, b)


def test_ptr_arbitrary_strides(gen):
    M, N, K = 300, 200, 150
    a = _rand(K, M, dtype=torch.float16, gen=gen).T           # column-major A
    b = _rand(N, 2 * K, dtype=torch.float16, gen=gen).T[::2]  # strided, transposed B
    out = _poisoned(N, M, torch.float16).T                    # column-major C
    c = matmul(a, b, out, kernel="ptr")
    _check(c, a, b)


# TMA: inner stride 1 and 16-byte aligned rows, so K and N multiples of 8 for 2-byte types;
# M and the K tail are arbitrary (TMA zero-fills and clips).
TMA_SHAPES = [(1000, 776, 336), (1, 8, 8), (129, 264, 72), (4097, 1032, 40), (2048, 2048, 1024)]
TMA_CONFIGS = [
    GemmConfig(64, 128, 128, 8, 4, 4),
    GemmConfig(128, 256, 64, 16, 8, 3),
    GemmConfig(128, 256, 64, 8, 8, 3),
    GemmConfig(128, 256, 64, 8, 8, 4, EPILOGUE_SUBTILE=True),
    GemmConfig(128, 128, 64, 8, 8, 4),
    GemmConfig(128, 128, 64, 8, 4, 4, FLATTEN=False),
    GemmConfig(128, 256, 64, 8, 4, 3, WARP_SPECIALIZE=True, FLATTEN=False),
]


@needs_hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", TMA_SHAPES)
def test_tma_ragged(shape, dtype, gen):
    M, N, K = shape
    a, b = _rand(M, K, dtype=dtype, gen=gen), _rand(K, N, dtype=dtype, gen=gen)
    out = _poisoned(M, N, dtype)
    c = matmul(a, b, out, kernel="tma")
    assert c is out and c.dtype == dtype
    _check(c, a, b)


@needs_hopper
@pytest.mark.parametrize("config", TMA_CONFIGS, ids=str)
@pytest.mark.parametrize("shape", [(1000, 776, 336), (2048, 4096, 1024)])
def test_tma_configs(config, shape, gen):
    M, N, K = shape
    a, b = _rand(M, K, dtype=torch.bfloat16, gen=gen), _rand(K, N, dtype=torch.bfloat16, gen=gen)
    _check(matmul(a, b, _poisoned(M, N, torch.bfloat16), kernel="tma", config=config), a, b)


@needs_hopper
def test_tma_row_stride_larger_than_k(gen):
    """A slice of a wider buffer: row stride != K, still 16-byte aligned."""
    M, N, K = 512, 384, 200
    a = _rand(M, K + 56, dtype=torch.bfloat16, gen=gen)[:, :K]
    b = _rand(K, N + 64, dtype=torch.bfloat16, gen=gen)[:, :N]
    out = _poisoned(M, N + 8, torch.bfloat16)[:, :N]
    _check(matmul(a, b, out, kernel="tma"), a, b)


@needs_hopper
def test_tma_allocator_installed_in_new_thread(gen):
    """Triton keeps the allocator in a ContextVar: a fresh thread must still get one."""
    import threading
    a = _rand(256, 128, dtype=torch.bfloat16, gen=gen)
    b = _rand(128, 256, dtype=torch.bfloat16, gen=gen)
    result = {}

    def run():
        try:
            result["c"] = matmul(a, b, kernel="tma")
            torch.cuda.synchronize()
        except Exception as e:  # pragma: no cover - reported below
            result["e"] = e

    t = threading.Thread(target=run)
    t.start()
    t.join(timeout=120)
    assert "e" not in result, result.get("e")
    _check(result["c"], a, b)


@pytest.mark.parametrize("kernel", ["ptr", pytest.param("tma", marks=needs_hopper)])
def test_degenerate_sizes(kernel):
    a = torch.randn(64, 0, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(0, 32, device="cuda", dtype=torch.bfloat16)
    assert torch.count_nonzero(matmul(a, b, kernel=kernel)) == 0
    assert matmul(a[:0], b, kernel=kernel).shape == (0, 32)


def test_default_config_is_used_and_valid():
    for kernel in ("ptr", "tma"):
        default_config(8192, 8192, 8192, torch.bfloat16, kernel).check(kernel)


def test_wrong_device_mix_is_a_launch_error():
    a = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(LaunchError, match="same CUDA device"):
        matmul(a, a.cpu(), kernel="ptr")


# ------------------------------------------------------------------------------------------------
# kernel='auto' (the default): ragged shapes on TMA, staged operands, split-K, the plan cache
# ------------------------------------------------------------------------------------------------

AUTO_SHAPES = [(1000, 3000, 1500),   # K = 1500: A's rows are 3000 bytes -> A staged
               (77, 8192, 4096),     # few tiles -> split-K by default
               (333, 777, 1001),     # odd N and K: A, B and C staged
               (16, 4096, 4096),     # decode
               (4097, 1032, 40)]     # ragged M, one K step


@needs_hopper
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", AUTO_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_auto_default_choice(shape, dtype, gen):
    from syncopate.kernels.gemm_launch import _plan_for
    M, N, K = shape
    a, b = _rand(M, K, dtype=dtype, gen=gen), _rand(K, N, dtype=dtype, gen=gen)
    out = _poisoned(M, N, dtype)
    c = matmul(a, b, out)
    assert c is out
    _check(c, a, b)
    plan = _plan_for(a, b, out, "auto", None)[0]
    assert plan.kind in ("tma", "splitk")
    assert plan.stage_a == ((K * 2) % 16 != 0)
    # same layout again, other tensors: the cached plan and the direct launch
    a2, b2 = _rand(M, K, dtype=dtype, gen=gen), _rand(K, N, dtype=dtype, gen=gen)
    matmul(a2, b2)  # the first launch of this layout goes through Triton's JIT
    assert _plan_for(a2, b2, None, "auto", None)[0].launches[0].kernel is not None
    out2 = _poisoned(M, N, dtype)
    c2 = matmul(a2, b2, out2)  # the first call's layout: launched directly, poisoned out
    c3 = matmul(a2, b2)  # the cached plan, launched directly
    _check(c2, a2, b2)
    _check(c3, a2, b2)


# the first two as the tuning generates them (FLATTEN=False), the others flattened
SPLIT_CONFIGS = [GemmConfig(128, 128, 64, 8, 8, 4, EPILOGUE_SUBTILE=True, SPLIT_K=2,
                            FLATTEN=False),
                 GemmConfig(128, 256, 64, 8, 8, 3, EPILOGUE_SUBTILE=True, SPLIT_K=4,
                            FLATTEN=False),
                 GemmConfig(64, 128, 128, 8, 4, 4, EPILOGUE_SUBTILE=True, SPLIT_K=3),
                 GemmConfig(128, 128, 64, 8, 8, 4, SPLIT_K=5)]


@needs_hopper
@pytest.mark.parametrize("config", SPLIT_CONFIGS, ids=str)
@pytest.mark.parametrize("shape", [(512, 1024, 8192), (200, 300, 1000)])
def test_split_k_is_correct_and_deterministic(config, shape, gen):
    M, N, K = shape
    a, b = _rand(M, K, dtype=torch.bfloat16, gen=gen), _rand(K, N, dtype=torch.bfloat16, gen=gen)
    c1 = matmul(a, b, _poisoned(M, N, torch.bfloat16), config=config)
    _check(c1, a, b)
    c2 = matmul(a, b, _poisoned(M, N, torch.bfloat16), config=config)
    assert torch.equal(c1, c2), "split-K must give the same bits on every run"


@needs_hopper
def test_split_k_is_the_heuristic_default_for_k_heavy(monkeypatch):
    from syncopate.kernels import gemm_table
    from syncopate.kernels.gemm_launch import _plan_for, clear_plans
    monkeypatch.setenv("SYNCOPATE_GEMM_TABLE", "off")
    gemm_table.reload_tables()
    clear_plans()
    a = torch.randn(1024, 32768, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(32768, 1024, device="cuda", dtype=torch.bfloat16)
    c = matmul(a, b)
    assert _plan_for(a, b, None, "auto", None)[0].kind == "splitk"
    _check(c, a, b)
    monkeypatch.delenv("SYNCOPATE_GEMM_TABLE")
    gemm_table.reload_tables()
    clear_plans()


@needs_hopper
@pytest.mark.parametrize("layout", ["a_transposed", "b_sliced", "a_offset", "out_transposed"])
def test_auto_stages_what_tma_cannot_read(layout, gen):
    M, N, K = 300, 264, 200
    dt = torch.float16
    a, b = _rand(M, K, dtype=dt, gen=gen), _rand(K, N, dtype=dt, gen=gen)
    out = _poisoned(M, N, dt)
    if layout == "a_transposed":
        a = a.t().contiguous().t()
    elif layout == "b_sliced":
        b = _rand(K, N + 3, dtype=dt, gen=gen)[:, :N]
    elif layout == "a_offset":
        flat = _rand(M * K + 1, dtype=dt, gen=gen)
        a = flat[1:].view(M, K)
    else:
        out = _poisoned(N, M, dt).t()
    c = matmul(a, b, out)
    _check(c, a, b)
    with pytest.raises(LaunchError, match="kernel='auto'"):
        matmul(a, b, out, kernel="tma")


@needs_hopper
def test_direct_launch_runs_on_the_current_stream(gen):
    M, N, K = 512, 512, 512
    a, b = _rand(M, K, dtype=torch.bfloat16, gen=gen), _rand(K, N, dtype=torch.bfloat16, gen=gen)
    matmul(a, b)  # first launch: through the JIT
    s = torch.cuda.Stream()
    out = _poisoned(M, N, torch.bfloat16)
    torch.cuda.current_stream().synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(20_000_000)  # the side stream is busy; the GEMM must queue behind it
        matmul(a, b, out)
    s.synchronize()
    _check(out, a, b)
