"""The same fused kernel compiles to the same TTIR, every time.

Why: ``poly`` orders a monomial's factors by object identity (canonical within one run), and
``Builder.poly`` used to emit them in that order, so two compiles of one kernel could differ
in the operand order of a multiplication (``arith.muli %cnt_seg, %seg`` or ``%seg, %cnt_seg``):
a Triton cache miss for an unchanged kernel, and noise in every IR comparison -- the traced
and untraced MoE dispatch differed before ``insert-trace`` had run. The factors are now
emitted in program order.
"""

from __future__ import annotations

import pytest

pytest.importorskip("triton")


def test_two_compiles_of_the_moe_dispatch_print_the_same():
    from syncopate.compiler import fuse_request
    from syncopate.emulate.modules import kernel_ttir
    from syncopate.kernels.grouped_gemm import grouped_gemm_kernel
    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig, compile_args
    from syncopate.ops.moe_dispatch_gemm import OPERANDS
    from syncopate.schedule.moe import moe_dispatch
    from syncopate_mlir.pipeline import run_pipeline

    cfg = GroupedGemmConfig(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, num_warps=4, num_stages=2)
    sig, cx = compile_args("bf16", cfg)
    ttir = kernel_ttir(grouped_gemm_kernel, sig, cx, None, cfg.options())
    req = fuse_request(grouped_gemm_kernel, signature=sig, constexprs=cx,
                       schedule=moe_dispatch(2, 4, 16, 32), operand=OPERANDS, backend="sm",
                       comm_programs=2, keep_ir=False)
    texts = set()
    keep = []
    for i in range(4):
        texts.add(run_pipeline(ttir, req).text)
        keep.append([object() for _ in range(1000 * (i + 1))])  # move later objects' ids
    assert len(texts) == 1
