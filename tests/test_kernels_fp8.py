"""The local FP8 GEMM kernels (``syncopate.kernels.gemm_fp8``) on a CPU: they compile for sm_90
to FP8 wgmma without spills, the accumulation mode is what the config says, the numerics match
``(A @ B) * scale_a * scale_b`` under Triton's interpreter (tests/fp8_interp_worker.py), and the
host checks refuse bad operands with the fix in the message. Speed and the comparison with
``torch._scaled_mm`` on a GPU: tests/gpu/test_local_gemm_fp8.py and
``python -m syncopate.bench.local --fp8``."""

from __future__ import annotations

import functools
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

triton = pytest.importorskip("triton")
torch = pytest.importorskip("torch")

from triton.backends.compiler import GPUTarget  # noqa: E402

from interp_runner import run_interpreter_worker  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.kernels import SMEM_LIMIT_SM90  # noqa: E402
from syncopate.kernels.gemm_fp8 import fp8_kernel_fn  # noqa: E402
from syncopate.kernels.gemm_fp8_config import (Fp8GemmConfig, default_fp8_config,  # noqa: E402
                                               fp8_compile_args, fp8_compile_attrs)
from syncopate.kernels.gemm_fp8_launch import check_fp8_operands  # noqa: E402

SM90 = GPUTarget("cuda", 90, 32)
WORKER = Path(__file__).with_name("fp8_interp_worker.py")


@functools.lru_cache(maxsize=None)
def _compile(kernel: str, rows: bool, fast: bool = False):
    cfg = default_fp8_config(8192, 8192, 8192, kernel, fast_accum=fast)
    sig, cx = fp8_compile_args(kernel, cfg, sa_rows=rows, sb_cols=rows)
    src = triton.compiler.ASTSource(fn=fp8_kernel_fn(kernel), signature=sig, constexprs=cx,
                                    attrs=fp8_compile_attrs(kernel))
    return triton.compile(src, target=SM90, options=cfg.options())


def _ptxas(ptx: str) -> tuple[int, int]:
    """(registers, spill-store bytes) from Triton's bundled ptxas."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        res = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"],
                             capture_output=True, text=True, check=True)
    return (int(re.search(r"Used (\d+) registers", res.stderr).group(1)),
            int(re.search(r"(\d+) bytes spill stores", res.stderr).group(1)))


@pytest.mark.parametrize("fast", [False, True], ids=["precise", "fast"])
@pytest.mark.parametrize("rows", [False, True], ids=["tensorwise", "rowwise"])
@pytest.mark.parametrize("kernel", ["ptr", "tma"])
def test_compiles_to_fp8_wgmma_without_spills(kernel, rows, fast):
    """The default configs (128x128 precise, 128x256 fast at this size) for both scale modes."""
    k = _compile(kernel, rows, fast)
    ptx = k.asm["ptx"]
    assert k.asm["cubin"]
    assert 0 < k.metadata.shared <= SMEM_LIMIT_SM90
    wgmma = set(re.findall(r"wgmma\.mma_async\S*", ptx))
    assert wgmma and all(w.endswith(".e4m3.e4m3") for w in wgmma), \
        f"the dot must be FP8 wgmma on sm_90, got {wgmma or 'none'}"
    assert "mma.sync" not in ptx, "no fallback to fp16 mma.sync"
    regs, spills = _ptxas(ptx)
    assert spills == 0, f"{kernel} spills {spills} bytes with {regs} registers"
    if kernel == "tma":
        assert "cp.async.bulk.tensor" in ptx
    assert re.search(r"tt\.dot .*xf8E4M3FN>.*xf8E4M3FN>", k.asm["ttir"]), "fp8 operands"


def test_accumulation_mode_follows_fast_accum():
    """``FAST_ACCUM=False`` promotes the wgmma chain into the fp32 accumulator once per K step:
    one extra fp32 add per accumulator register (64 per thread on a 128x128 tile with 8
    warps), none with ``FAST_ACCUM=True`` (same tile here)."""
    def adds(fast):
        cfg = Fp8GemmConfig(FAST_ACCUM=fast)
        sig, cx = fp8_compile_args("tma", cfg, sa_rows=True, sb_cols=True)
        src = triton.compiler.ASTSource(fn=fp8_kernel_fn("tma"), signature=sig, constexprs=cx,
                                        attrs=fp8_compile_attrs("tma"))
        return triton.compile(src, target=SM90, options=cfg.options()).asm["ptx"].count("add.f32")
    precise, fast = adds(False), adds(True)
    assert precise - fast == 128 * 128 // 256, (precise, fast)


def test_constexprs_never_ask_for_the_mma_sync_fallback():
    """``max_num_imprecise_acc=0`` lowers an fp8 dot to fp16 mma.sync in Triton 3.6."""
    for fast in (False, True):
        for k in ("ptr", "tma"):
            cx = Fp8GemmConfig(FAST_ACCUM=fast).constexprs(k)
            assert cx["IMPRECISE_ACC"] == (None if fast else 128)


def test_default_fp8_configs_fit_and_check():
    for M, N, K in ((8192, 8192, 8192), (1024, 1024, 128), (640, 4096, 4096)):
        for k in ("ptr", "tma"):
            for fast in (False, True):
                cfg = default_fp8_config(M, N, K, k, fast_accum=fast)
                assert cfg.BLOCK_K == 128 and cfg.smem_bytes(k) <= SMEM_LIMIT_SM90
                assert cfg.FAST_ACCUM == fast and (fast or cfg.BLOCK_N == 128)
                cfg.check(k)
    assert default_fp8_config(8192, 8192, 8192, fast_accum=True).BLOCK_N == 256
    with pytest.raises(LaunchError, match="BLOCK_K=16 must be >= 32"):
        Fp8GemmConfig(BLOCK_K=16).check("tma")
    with pytest.raises(LaunchError, match="lower num_stages"):
        Fp8GemmConfig(num_stages=7).check("tma")


def test_signature_matches_the_kernels():
    for k in ("ptr", "tma"):
        sig, _ = fp8_compile_args(k)
        assert list(sig) == list(fp8_kernel_fn(k).arg_names)
        assert sig["a_ptr"] == sig["b_ptr"] == "*fp8e4nv" and sig["c_ptr"] == "*bf16"
        assert sig["scale_a_ptr"] == sig["scale_b_ptr"] == "*fp32"


# ---------------------------------------------------------------------------------------------
# Numerics under Triton's interpreter
# ---------------------------------------------------------------------------------------------

_SMALL = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=32, GROUP_M=2)
CASES = [dict(kernel=k, M=M, N=N, K=K, seed=i, rows=rows, config=_SMALL)
         for i, (k, M, N, K, rows) in enumerate([
             ("ptr", 40, 48, 80, True), ("ptr", 64, 64, 64, False),
             ("tma", 40, 48, 80, True), ("tma", 48, 64, 96, False)])]


@functools.lru_cache(maxsize=None)
def _interpreter_results(tmp: str):
    return run_interpreter_worker(WORKER, CASES, tmp, timeout=300)


@pytest.mark.parametrize("i", range(len(CASES)),
                         ids=[f"{c['kernel']}-{'rows' if c['rows'] else 'tensor'}-{c['M']}x"
                              f"{c['N']}x{c['K']}" for c in CASES])
def test_interpreter_matches_scaled_reference(tmp_path_factory, i):
    """Ragged sizes (not multiples of the tiles), both scale modes, both kernels: within one
    bf16 rounding of ``torch._scaled_mm`` (CPU) on the same operands (the two fp32 sums differ
    only in order)."""
    r = _interpreter_results(str(tmp_path_factory.getbasetemp()))[i]
    out, ref, mag = (np.asarray(r[k]) for k in ("out", "ref", "acc_abs"))
    assert not np.isnan(out).any(), "every element must be written"
    bound = 2.0 ** -7 * np.abs(ref) + 2.0 ** -20 * mag
    assert (np.abs(out - ref) <= bound).all(), float(np.abs(out - ref).max())
    assert np.abs(ref).max() > 10  # the case is not trivially zero


# ---------------------------------------------------------------------------------------------
# Host checks (CPU tensors; device is checked last)
# ---------------------------------------------------------------------------------------------

def _ops(M=64, N=32, K=48):
    a = torch.zeros(M, K).to(torch.float8_e4m3fn)
    b = torch.zeros(N, K).to(torch.float8_e4m3fn).t()
    return a, b, torch.ones(M, 1), torch.ones(1, N)


def test_checks_say_what_to_change():
    a, b, sa, sb = _ops()
    with pytest.raises(LaunchError, match="b must be column-major.*w.t()"):
        check_fp8_operands(a, b.contiguous(), sa, sb)
    with pytest.raises(LaunchError, match="must be torch.float8_e4m3fn.*e5m2"):
        check_fp8_operands(a.to(torch.float8_e5m2), b, sa, sb)
    with pytest.raises(LaunchError, match=r"scale_a has shape \(64,\).*\(64, 1\)"):
        check_fp8_operands(a, b, sa.reshape(64), sb)
    with pytest.raises(LaunchError, match=r"scale_b has shape \(32, 1\).*\(1, 32\)"):
        check_fp8_operands(a, b, sa, sb.reshape(32, 1))
    with pytest.raises(LaunchError, match="scale_a must be torch.float32"):
        check_fp8_operands(a, b, sa.to(torch.bfloat16), sb)
    with pytest.raises(LaunchError, match="must be contiguous"):
        check_fp8_operands(a, b, torch.ones(64, 2)[:, :1], sb)
    with pytest.raises(LaunchError, match=r"b.shape\[0\] must be 48"):
        check_fp8_operands(a, b[:40], sa, sb)
    with pytest.raises(LaunchError, match="torch.bfloat16"):
        check_fp8_operands(a, b, sa, sb, out=torch.empty(64, 32, dtype=torch.float16))
    with pytest.raises(LaunchError, match="multiple of 16 bytes"):
        a2, b2, _, _ = _ops(K=40)
        check_fp8_operands(a2, b2, sa, sb)
    # well-formed operands only fail on the device (CPU tensors here): modes are found first
    with pytest.raises(LaunchError, match="CUDA device"):
        check_fp8_operands(a, b, sa, sb)
    with pytest.raises(LaunchError, match="CUDA device"):
        check_fp8_operands(a, b, torch.tensor(2.0), torch.tensor([3.0]))
    # the pointer kernel takes a row-major b (correct, not fast)
    with pytest.raises(LaunchError, match="CUDA device"):
        check_fp8_operands(a, b.contiguous(), sa, sb, kernel="ptr")


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("kernel", ["ptr", "tma"])
def test_launch_arguments_specialise_to_the_compiled_signature(kernel, fast):
    """What the ops launch (``fp8_args``, specialised as the fused runtime and Triton's JIT do:
    the e4m3 tensors as ``*fp8e4nv``, unit strides and None as constexprs) is the kernel these
    CPU tests compile and emulate (``fp8_compile_args``)."""
    from syncopate.kernels.gemm_fp8_launch import Fp8Problem, fp8_args
    from syncopate.runtime.specialize import specialize
    M, N, K = 256, 128, 128
    cfg = default_fp8_config(M, N, K, kernel, fast_accum=fast)
    a = torch.zeros(M, K).to(torch.float8_e4m3fn)
    b = torch.zeros(N, K).to(torch.float8_e4m3fn).t()
    out = torch.zeros(M, N, dtype=torch.bfloat16)
    vals, _ = fp8_args(kernel, a, b, out, torch.ones(M, 1), torch.tensor(1.0),
                       Fp8Problem(M, N, K, True, False), cfg, programs=4)
    spec = specialize(fp8_kernel_fn(kernel), vals, frozenset())
    sig, cx = fp8_compile_args(kernel, cfg, sa_rows=True, sb_cols=False, num_sms=4)
    assert spec.signature_dict() == sig
    assert spec.constexpr_dict() == cx
