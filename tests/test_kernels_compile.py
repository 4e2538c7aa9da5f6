"""The local GEMM kernels compile for sm_90 on a CPU, look the way Syncopate's passes expect in
TTIR, lower to TMA + wgmma in PTX, and their wrappers reject bad input before any launch."""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile

import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from triton.backends.compiler import GPUTarget  # noqa: E402

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import (CORPUS, SMEM_LIMIT_SM90, GemmConfig, compile_args,  # noqa: E402
                               compile_attrs, default_config, kernel_fn, matmul)

SM90 = GPUTarget("cuda", 90, 32)
KERNEL_NAMES = ("matmul_ptr_kernel", "matmul_tma_persistent_kernel")


@functools.lru_cache(maxsize=None)
def _compile(kernel: str, dtype: str, config: GemmConfig | None = None, aligned: bool = True):
    config = config or default_config(8192, 8192, 8192, dtype, kernel)
    signature, constexprs = compile_args(kernel, dtype, config, unit_inner_strides=aligned)
    src = triton.compiler.ASTSource(fn=kernel_fn(kernel), signature=signature,
                                    constexprs=constexprs,
                                    attrs=compile_attrs(kernel, aligned=aligned))
    return triton.compile(src, target=SM90, options=config.options())


def _strip_locs(ir: str) -> str:
    return "\n".join(re.sub(r" loc\(.*$", "", line) for line in ir.splitlines()
                     if not line.startswith("#loc"))


def _ptxas_spills(ptx: str) -> tuple[int, int]:
    """(registers, spill-store bytes) of the kernel, from Triton's bundled ptxas."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        res = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"],
                             capture_output=True, text=True, check=True)
    regs = int(re.search(r"Used (\d+) registers", res.stderr).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", res.stderr).group(1))
    return regs, spills


# ------------------------------------------------------------------------------------------------
# Compile for sm_90
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("kernel", KERNEL_NAMES)
def test_compiles_to_cubin_for_sm90(kernel, dtype):
    k = _compile(kernel, dtype)
    assert k.asm["cubin"], "no cubin"
    assert 0 < k.metadata.shared <= SMEM_LIMIT_SM90
    ptx = k.asm["ptx"]
    assert "wgmma.mma_async" in ptx, "the dot must lower to Hopper wgmma"
    regs, spills = _ptxas_spills(ptx)
    assert spills == 0, f"{kernel} spills {spills} bytes with {regs} registers"
    if kernel == "matmul_tma_persistent_kernel":
        assert "cp.async.bulk.tensor" in ptx, "A/B loads and the C store must go through TMA"
        assert "tensormap" in ptx, "device-side descriptors are built in the kernel"
    else:
        assert "cp.async" in ptx, "the K loop must be pipelined with cp.async"


def test_ptr_kernel_ttir_has_ragged_masks():
    ttir = _strip_locs(_compile("matmul_ptr_kernel", "bf16").asm["ttir"])
    loads = re.findall(r"tt\.load (%[\w.]+), (%[\w.]+), (%[\w.]+) :", ttir)
    assert len(loads) == 2, f"expected masked A and B loads (ptr, mask, other), got {loads}"
    assert re.search(r"tt\.store %[\w.]+, %[\w.]+, %[\w.]+ :", ttir), "C store must be masked"
    # Bounds of all three dimensions appear as comparisons against splats of M, N and K.
    for dim in ("M", "N", "K"):
        splat = re.search(rf"(%[\w.]+) = tt\.splat %{dim} : i32 -> tensor<\d+xi32>", ttir)
        assert splat, f"no splat of %{dim}"
        assert re.search(rf"arith\.cmpi slt, %[\w.]+, {re.escape(splat.group(1))} :", ttir), \
            f"no `offs < {dim}` mask"
    # The loads are not clamped with tl.where (a clamp would alias out-of-range rows to row 0).
    assert "arith.select" not in ttir


def test_ptr_kernel_a_rows_come_from_pid_m():
    ttir = _strip_locs(_compile("matmul_ptr_kernel", "bf16").asm["ttir"])
    # offs_m = pid_m * BLOCK_M + arange: the same value indexes the A rows and the C rows.
    m = re.search(r"(%offs_m\w*) = arith\.muli (%pid_m\w*), %c128_i32", ttir)
    assert m, "A-row offset must be pid_m * BLOCK_M"
    row = re.search(r"(%offs_m\w*) = arith\.addi %offs_m\w*, %offs_m\w* : tensor<128xi32>", ttir)
    uses = re.findall(rf"tt\.expand_dims {re.escape(row.group(1))} {{axis = 1", ttir)
    assert len(uses) >= 2, "A addresses and C addresses must share the row offsets"


def _tma_coords(ttir: str):
    descs = dict((base, d) for d, base in re.findall(
        r"(%[\w.]+) = tt\.make_tensor_descriptor (%\w+),", ttir))
    loads = re.findall(r"tt\.descriptor_load (%[\w.]+)\[(%[\w.]+), (%[\w.]+)\]", ttir)
    stores = re.findall(r"tt\.descriptor_store (%[\w.]+)\[(%[\w.]+), (%[\w.]+)\]", ttir)
    return descs, loads, stores


@pytest.mark.parametrize("subtile", [False, True])
def test_tma_kernel_same_ssa_row_for_a_load_and_c_store(subtile):
    cfg = default_config(8192, 8192, 8192, "bf16", "tma").replace(EPILOGUE_SUBTILE=subtile)
    ttir = _strip_locs(_compile("matmul_tma_persistent_kernel", "bf16", cfg).asm["ttir"])
    descs, loads, stores = _tma_coords(ttir)
    assert set(descs) == {"%a_ptr", "%b_ptr", "%c_ptr"}, "descriptors must be made in-kernel"
    a_rows = {m for d, m, _ in loads if d == descs["%a_ptr"]}
    c_rows = {m for d, m, _ in stores if d == descs["%c_ptr"]}
    assert len(a_rows) == 1 and a_rows == c_rows, (a_rows, c_rows)
    row = a_rows.pop()
    assert re.search(rf"{re.escape(row)} = arith\.muli %pid_m\w*, %c128_i32", ttir), \
        "A-row coordinate must be pid_m * BLOCK_M directly"
    assert len(stores) == (2 if subtile else 1)
    # The persistent tile loop steps by NUM_SMS and is flattened for Triton's pipeliner.
    assert re.search(r"scf\.for %tile_id = %start_pid to %num_tiles step %c132_i32", ttir)
    assert "tt.flatten" in ttir


def test_tma_kernel_warp_specialized_variant_compiles():
    cfg = GemmConfig(128, 256, 64, 8, num_warps=4, num_stages=3, WARP_SPECIALIZE=True,
                     FLATTEN=False).check("tma")
    k = _compile("matmul_tma_persistent_kernel", "bf16", cfg)
    assert "ttg.warp_specialize" in k.asm["ttgir"], "Triton did not warp-specialise the loop"
    assert "cp.async.bulk.tensor" in k.asm["ptx"] and "wgmma.mma_async" in k.asm["ptx"]
    assert k.metadata.shared <= SMEM_LIMIT_SM90


def test_ptr_kernel_general_strides_compile():
    """Arbitrary strides and unaligned sizes (no specialisation) still compile to wgmma."""
    k = _compile("matmul_ptr_kernel", "fp16",
                 GemmConfig(128, 128, 64, 8, num_warps=4, num_stages=3), aligned=False)
    assert "wgmma.mma_async" in k.asm["ptx"]
    ttir = k.asm["ttir"]
    assert "%stride_ak" in ttir and "%stride_bn" in ttir and "%stride_cn" in ttir


@pytest.mark.parametrize("kernel,subtile,stages", [("ptr", False, 3), ("ptr", False, 4),
                                                   ("tma", False, 3), ("tma", True, 4)])
def test_smem_estimate_matches_triton(kernel, subtile, stages):
    cfg = GemmConfig(128, 256, 64, 8, 8, stages, EPILOGUE_SUBTILE=subtile)
    k = _compile(kernel, "bf16", cfg)
    assert abs(cfg.smem_bytes(kernel) - k.metadata.shared) <= 1024, (cfg.smem_bytes(kernel),
                                                                      k.metadata.shared)


# ------------------------------------------------------------------------------------------------
# Compile arguments, corpus, configs
# ------------------------------------------------------------------------------------------------


def test_compile_args_match_the_kernel_signature():
    for kernel in KERNEL_NAMES:
        fn = kernel_fn(kernel)
        sig, cx = compile_args(kernel, torch.bfloat16, None)
        assert list(sig) == fn.arg_names
        assert {k for k, v in sig.items() if v == "constexpr"} == set(cx)
        assert sig["a_ptr"] == sig["b_ptr"] == sig["c_ptr"] == "*bf16"
    sig, cx = compile_args("ptr", "fp16", None, unit_inner_strides=False)
    assert sig["stride_ak"] == "i32" and "stride_ak" not in cx and sig["a_ptr"] == "*fp16"
    _, cx = compile_args("tma", "bf16", None, num_sms=120)
    assert cx["NUM_SMS"] == 120
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        compile_args("ptr", "fp32", None)
    with pytest.raises(ValueError, match="unknown GEMM kernel"):
        compile_args("cublas", "bf16", None)


def test_corpus_lists_both_kernels_in_both_dtypes():
    names = {e["name"] for e in CORPUS}
    assert names == {f"{k}_{d}" for k in KERNEL_NAMES for d in ("bf16", "fp16")}
    for e in CORPUS:
        assert set(e) >= {"name", "fn", "signature", "constexprs"}
        assert list(e["signature"]) == e["fn"].arg_names


def test_default_configs():
    from syncopate.kernels import heuristic_config
    big = heuristic_config(8192, 8192, 8192, "bf16", "tma")
    assert (big.BLOCK_M, big.BLOCK_N, big.BLOCK_K, big.num_warps) == (128, 256, 64, 8)
    small = heuristic_config(1024, 14336, 4096, "bf16", "tma")
    assert (small.BLOCK_M, small.BLOCK_N) == (128, 128)
    for shape in [(8192, 8192, 8192), (8192, 14336, 4096), (8192, 7168, 4096),
                  (8192, 14336, 8192), (4096, 14336, 8192), (1024, 14336, 4096), (1000, 777, 33)]:
        for kernel in ("ptr", "tma"):
            default_config(*shape, "bf16", kernel).check(kernel)


def test_warp_specialisation_only_on_tiles_verified_on_an_h200():
    """128x128x64 / 5 stages wrote NaN tiles under Triton 3.6's warp specialisation on an
    H200 (bench/results/2026-12-02-h200x1-local-gemm): refused, naming the verified tiles."""
    with pytest.raises(LaunchError, match=r"verified on an H200.*\(128, 128, 64, 5\)"):
        GemmConfig(128, 128, 64, 8, 4, 5, WARP_SPECIALIZE=True, FLATTEN=False).check("tma")
    GemmConfig(128, 256, 64, 8, 4, 3, WARP_SPECIALIZE=True, FLATTEN=False).check("tma")


def test_config_check_says_what_to_change():
    with pytest.raises(LaunchError, match="FLATTEN=False"):
        GemmConfig(num_warps=4, WARP_SPECIALIZE=True).check("tma")
    with pytest.raises(LaunchError, match="num_warps=4"):
        GemmConfig(FLATTEN=False, WARP_SPECIALIZE=True).check("tma")
    with pytest.raises(LaunchError, match="lower num_stages or set EPILOGUE_SUBTILE"):
        GemmConfig(num_stages=4).check("tma")
    GemmConfig(num_stages=4, EPILOGUE_SUBTILE=True).check("tma")
    with pytest.raises(LaunchError, match="power of two"):
        GemmConfig(BLOCK_N=96).check("ptr")
    with pytest.raises(LaunchError, match="unknown GEMM config keys"):
        GemmConfig.of({"BLOCK_SIZE_M": 128})


# ------------------------------------------------------------------------------------------------
# Wrapper validation (CPU tensors: every check runs before the device check)
# ------------------------------------------------------------------------------------------------


def _t(*shape, dtype=torch.bfloat16):
    return torch.zeros(*shape, dtype=dtype)


@pytest.mark.parametrize("kernel", ["ptr", "tma", "auto"])
def test_wrapper_rejects_shape_mismatch(kernel):
    with pytest.raises(LaunchError, match=r"shape mismatch.*b\.shape\[0\] must equal"):
        matmul(_t(64, 32), _t(48, 16), kernel=kernel)
    with pytest.raises(LaunchError, match="must be 2-D"):
        matmul(_t(2, 64, 32), _t(32, 16), kernel=kernel)
    with pytest.raises(LaunchError, match=r"out must have shape \(M, N\) = \(64, 16\)"):
        matmul(_t(64, 32), _t(32, 16), out=_t(16, 64), kernel=kernel)


@pytest.mark.parametrize("kernel", ["ptr", "tma", "auto"])
def test_wrapper_rejects_dtype_mismatch(kernel):
    with pytest.raises(LaunchError, match="same dtype"):
        matmul(_t(64, 32), _t(32, 16, dtype=torch.float16), kernel=kernel)
    with pytest.raises(LaunchError, match="bfloat16 or torch.float16"):
        matmul(_t(64, 32, dtype=torch.float32), _t(32, 16, dtype=torch.float32), kernel=kernel)
    with pytest.raises(LaunchError, match="out must have the operands' dtype"):
        matmul(_t(64, 32), _t(32, 16), out=_t(64, 16, dtype=torch.float16), kernel=kernel)


def test_wrapper_rejects_non_contiguous_for_tma():
    a_t = _t(32, 64).T  # [64, 32] column-major view
    with pytest.raises(LaunchError, match=r"non-contiguous.*\.contiguous\(\).*kernel='ptr'"):
        matmul(a_t, _t(32, 16), kernel="tma")
    with pytest.raises(LaunchError, match=r"non-contiguous"):
        matmul(_t(64, 32), _t(16, 32).T, kernel="tma")
    with pytest.raises(LaunchError, match=r"non-contiguous"):
        matmul(_t(64, 32), _t(32, 16), out=_t(16, 64).T, kernel="tma")
    # Row length of 7 bf16 = 14 bytes: not a TMA-legal stride.
    with pytest.raises(LaunchError, match="multiple of 16 bytes"):
        matmul(_t(64, 7), _t(7, 16), kernel="tma")


def test_auto_takes_any_layout_until_the_device_check():
    """kernel='auto' (the default) stages what TMA cannot read: odd row lengths, transposed
    views and strided slices are not errors; only the device check objects."""
    for a, b in [(_t(64, 7), _t(7, 16)), (_t(32, 64).T, _t(32, 16)), (_t(64, 32)[:, ::2],
                                                                     _t(16, 3))]:
        with pytest.raises(LaunchError, match="CUDA device") as err:
            matmul(a, b)
        assert "contiguous" not in str(err.value) and "16 bytes" not in str(err.value)
    with pytest.raises(LaunchError, match="unknown GEMM kernel 'cublas'.*'auto'"):
        matmul(_t(64, 32), _t(32, 16), kernel="cublas")


def test_ptr_kernel_accepts_any_strides_until_the_device_check():
    """Only the device check objects to strided operands for kernel='ptr'."""
    a_t = _t(32, 64).T
    b_strided = _t(32, 32)[:, ::2]
    with pytest.raises(LaunchError, match="CUDA device") as err:
        matmul(a_t, b_strided, out=_t(16, 64).T, kernel="ptr")
    assert "contiguous" not in str(err.value)


def test_wrapper_rejects_aliasing_and_cpu_tensors():
    a, b = _t(64, 64), _t(64, 64)
    with pytest.raises(LaunchError, match="overlaps"):
        matmul(a, b, out=a, kernel="ptr")
    with pytest.raises(LaunchError, match="zero stride"):
        matmul(a, b, out=_t(1, 64).expand(64, 64), kernel="ptr")
    with pytest.raises(LaunchError, match=r"CUDA device.*\.cuda\(\)"):
        matmul(a, b, kernel="tma")
    with pytest.raises(LaunchError, match="torch.Tensor"):
        matmul([[1.0]], b)


def _sweep_configs():
    from syncopate.bench.local_gpu import SHAPE_SETS
    from syncopate.bench.tuning import candidate_configs
    seen = []
    for shape in SHAPE_SETS["all"].values():
        for dtype in ("bf16", "fp16"):
            for c in candidate_configs(*shape, dtype):
                if c not in seen:
                    seen.append(c)
    return seen


@functools.lru_cache(maxsize=None)
def _compile_splitk(dtype: str, config: GemmConfig):
    from syncopate.kernels.gemm_config import splitk_compile_args
    from syncopate.kernels.gemm_splitk import matmul_tma_splitk_kernel, splitk_reduce_kernel
    (_, sig, cx, at), (_, rsig, rcx, rat) = splitk_compile_args(dtype, config)
    part = triton.compile(triton.compiler.ASTSource(fn=matmul_tma_splitk_kernel, signature=sig,
                                                    constexprs=cx, attrs=at),
                          target=SM90, options=config.options())
    red = triton.compile(triton.compiler.ASTSource(fn=splitk_reduce_kernel, signature=rsig,
                                                   constexprs=rcx, attrs=rat),
                         target=SM90, options=dict(num_warps=4, num_stages=1))
    return part, red


@pytest.mark.parametrize("config", _sweep_configs(), ids=str)
def test_every_tuning_candidate_compiles_without_spills(config):
    """The GPU sweep must not waste its budget on configs that cannot run: every candidate of
    every benchmark shape fits in shared memory (as estimated) and does not spill."""
    if config.SPLIT_K > 1:
        k, _ = _compile_splitk("bf16", config)
    else:
        k = _compile("matmul_tma_persistent_kernel", "bf16", config)
    assert k.metadata.shared <= config.smem_bytes("tma") <= SMEM_LIMIT_SM90
    _, spills = _ptxas_spills(k.asm["ptx"])
    assert spills == 0
    if config.WARP_SPECIALIZE:
        assert "ttg.warp_specialize" in k.asm["ttgir"]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_split_k_compiles_to_tma_wgmma_without_spills(dtype):
    """The split-K kernel: TMA loads, wgmma, fp32 partials stored through TMA; its reduction
    reads the partials with 16-byte vector loads and spills nothing."""
    from syncopate.kernels import heuristic_config
    cfg = heuristic_config(1024, 1024, 32768, dtype, "tma", fusable=False)
    assert cfg.SPLIT_K > 1
    part, red = _compile_splitk(dtype, cfg)
    ptx = part.asm["ptx"]
    assert "wgmma.mma_async" in ptx and "cp.async.bulk.tensor" in ptx
    assert 0 < part.metadata.shared <= SMEM_LIMIT_SM90
    assert _ptxas_spills(ptx)[1] == 0
    rptx = red.asm["ptx"]
    assert "ld.global.v4" in rptx, "the reduction must vectorise its fp32 loads"
    assert _ptxas_spills(rptx)[1] == 0
    assert "atom" not in rptx and "atom" not in ptx, "no atomics: the reduction is ordered"
