"""The FP8 ops' fused kernels compile for sm_90 on this CPU, through the whole pipeline (the
emulator, tests/test_emulate_fp8.py, stops at ``resolve-chunks``): FP8 wgmma, no spills, the
waits as system-scope acquire loads outside the K loop -- for AG+GEMM the waits of A's chunks
and of its scales' chunks alike -- and release signals after the stores for GEMM+RS."""

from __future__ import annotations

import re
import subprocess
import tempfile

import pytest

import syncopate
from syncopate.kernels.gemm_fp8 import fp8_kernel_fn
from syncopate.kernels.gemm_fp8_config import (default_fp8_config, fp8_compile_args,
                                               fp8_compile_attrs)
from syncopate.ops.ag_gemm_fp8 import OPERAND, ag_gemm_fp8_schedule
from syncopate.schedule import reduce_scatter

from test_compile_fused import innermost_mma_loops, lines_with

M, N, K = 8192, 7168, 4096
_cache: dict = {}


def fused(kernel, op, backend, reduce="comm"):
    key = (kernel, op, backend, reduce)
    if key not in _cache:
        cfg = default_fp8_config(M, N, K, kernel)
        if op == "ag":  # row-wise A scales (always, in the op), tensor-wise B scale
            sig, cx = fp8_compile_args(kernel, cfg, sa_rows=True, sb_cols=False)
            sched = ag_gemm_fp8_schedule(M, K, 2, split=2,
                                         mode="pull" if backend == "ce" else "push")
            operand, attrs = OPERAND, fp8_compile_attrs(kernel, scalar_scales=("scale_b_ptr",))
        else:
            sig, cx = fp8_compile_args(kernel, cfg, sa_rows=True, sb_cols=True)
            sched = reduce_scatter([M, N // 2], "bf16", 2, split=2)
            operand, attrs = "c_ptr", fp8_compile_attrs(kernel)
        _cache[key] = syncopate.compile(fp8_kernel_fn(kernel), signature=sig, constexprs=cx,
                                        schedule=sched, operand=operand, backend=backend,
                                        comm_programs=8, attrs=attrs, reduce=reduce,
                                        **cfg.options())
    return _cache[key]


def _spills(ptx):
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ptx)
        f.flush()
        res = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", f.name, "-o", "/dev/null"],
                             capture_output=True, text=True, check=True)
    return int(re.search(r"(\d+) bytes spill stores", res.stderr).group(1))


def _common(fc):
    ptx = fc.asm["ptx"]
    assert fc.asm["cubin"]
    wgmma = set(re.findall(r"wgmma\.mma_async\S*", ptx))
    assert wgmma and all(w.endswith(".e4m3.e4m3") for w in wgmma), wgmma
    assert _spills(ptx) == 0
    return ptx


@pytest.mark.parametrize("kernel,backend", [("tma", "sm"), ("tma", "ce"), ("ptr", "sm")])
def test_ag_gemm_fp8_compiles_with_waits_outside_the_k_loop(kernel, backend):
    fc = fused(kernel, "ag", backend)
    ptx = _common(fc)
    acquires = lines_with(ptx, "ld.acquire.sys.global")
    loops = innermost_mma_loops(ptx)
    assert acquires and loops
    for lo, hi in loops:
        assert not [i for i in acquires if lo <= i <= hi], "a wait inside the K loop"
    # A and its scales: 2 x 2 chunks each on two ranks, both tensors' peers in the ABI
    assert fc.abi.num_chunks == 8
    assert fc.abi.tensors == {"a_ptr": "A", "scale_a_ptr": "SA"}
    assert fc.abi.operands == ["a_ptr", "scale_a_ptr"]


@pytest.mark.parametrize("kernel,backend,reduce", [("tma", "sm", "comm"),
                                                   ("tma", "ce", "epilogue")])
def test_gemm_rs_fp8_compiles_with_release_signals(kernel, backend, reduce):
    ptx = _common(fused(kernel, "rs", backend, reduce))
    assert "st.release.sys.global" in ptx, "no system-scope release signal"
    assert "%globaltimer" in ptx, "the waits have no watchdog"
