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
    GemmConfig(128, 256, 64, 8, 8, 3),
    GemmConfig(128, 256, 64, 8, 8, 4, EPILOGUE_SUBTILE=True),
    GemmConfig(128, 128, 64, 8, 8, 4),
    GemmConfig(128, 128, 64, 8, 4, 4, FLATTEN=False),
    GemmConfig(128, 256, 64, 8, 4, 3, WARP_SPECIALIZE=True, FLATTEN=False),
    GemmConfig(128, 128, 64, 8, 4, 5, WARP_SPECIALIZE=True, FLATTEN=False),
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
