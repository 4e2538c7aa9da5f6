"""GEMM + all-reduce compiles fused for sm_90 on this CPU (the emulator stops before the
lowering; this is the rest of the pipeline down to PTX): both GEMM kernels, the unrolled form
at W = 2 and the chunk-table form at W = 4, with the ABI facts the runtime relies on."""

from __future__ import annotations

import re

import pytest

import syncopate
from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
from syncopate.schedule import all_reduce

M, N, K = 1024, 1024, 512


@pytest.mark.parametrize("name,W,lowering", [("matmul_tma_persistent_kernel", 2, "unrolled"),
                                             ("matmul_ptr_kernel", 4, "table")])
def test_gemm_ar_compiles_to_ptx_with_waits_and_system_releases(name, W, lowering):
    cfg = default_config(M, N, K, "bf16", "tma" if "tma" in name else "ptr")
    sig, cx = compile_args(name, "bf16", cfg)
    sched = all_reduce([M, N], "bf16", W, split=2)
    fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx, schedule=sched,
                           operand="c_ptr", backend="sm", comm_programs=8,
                           attrs=compile_attrs(name), **cfg.options())
    assert fc.abi.lowering == lowering and fc.abi.comm_programs == 8
    # every chunk (reduce-scatter and all-gather) has its producers' element count: the
    # all-gather's source rows are written by the owner's GEMM tiles too
    piece = (M // W // 2) * N
    assert fc.abi.produced_count == {c.id: piece for c in sched.chunks}
    # the reduce-scatter reads each source's partial from the destination: 2 (W - 1) pieces
    # per source, counted once per comm program; the all-gather is pushed (no reads)
    assert fc.abi.reads_per_src == {r: 2 * (W - 1) * 8 for r in range(W)}
    ptx = fc.asm["ptx"]
    assert "ld.acquire.sys" in ptx  # the spins (ENTRY, CHUNK of the `after` sums, PRODUCED)
    ops = re.findall(r"\b(?:atom|red)\.[\w.:]+", ptx)
    assert any(".sys" in t and ".release" in t and ".add" in t for t in ops), ops
    assert fc.asm["cubin"]
