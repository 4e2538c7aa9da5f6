"""Local (single-GPU) Triton kernels that Syncopate fuses with communication: the GEMMs and the
flash-attention forward (:mod:`.attention`, exported as ``attention`` and ``attention_*``: a
fast kernel for local use and the fusable one the ops compile, see
:mod:`.attention_config`) and backward (:mod:`.attention_bwd`, ``attention_backward``), and
the FP8 GEMMs (:mod:`.gemm_fp8`; ``scaled_mm`` with ``torch._scaled_mm``'s contract).

``matmul`` picks its config from a per-GPU table (:mod:`.gemm_table`: the user's tuning cache,
then the defaults shipped in ``configs/<gpu>.json``), tuned by
``python -m syncopate.bench.local --tune`` or ``syncopate.bench.tuning.tune_matmul``.

``CORPUS`` lists concrete compiles of them -- ``{"name", "fn", "signature", "constexprs"}``
plus ``"attrs"`` (divisibility hints the JIT adds for aligned shapes) and ``"options"``
(``num_warps``/``num_stages``) -- for the IR round-trip tests and the compiler::

    src = triton.compiler.ASTSource(fn=e["fn"], signature=e["signature"],
                                    constexprs=e["constexprs"], attrs=e["attrs"])
    triton.compile(src, target=GPUTarget("cuda", 90, 32), options=e["options"])
"""

import triton

from . import interpreter
from .attention import AttentionConfig, attention, attn_fwd_fast_kernel, attn_fwd_kernel
from .attention import compile_args as attention_compile_args
from .attention import fast_compile_args as attention_fast_compile_args
from .attention import compile_attrs as attention_compile_attrs
from .attention import default_config as attention_default_config
from .attention_bwd import attention_backward
from .gemm import kernel_fn, matmul_ptr_kernel, matmul_tma_persistent_kernel
from .gemm_config import (H200_NUM_SMS, KERNELS, SMEM_LIMIT_SM90, GemmConfig, compile_args,
                          compile_attrs, heuristic_config)
from .gemm_fp8 import fp8_kernel_fn, matmul_fp8_ptr_kernel, matmul_fp8_tma_persistent_kernel
from .gemm_fp8_config import Fp8GemmConfig, default_fp8_config, fp8_compile_args, fp8_compile_attrs
from .gemm_fp8_launch import check_fp8_operands, make_fp8_launcher, scaled_mm
from .gemm_launch import (GemmPlan, check_operands, ensure_tma_allocator, make_launcher,
                          make_plan, matmul, num_sms)
from .gemm_splitk import matmul_tma_splitk_kernel, splitk_reduce_kernel
from .gemm_table import default_config

if triton.knobs.runtime.interpret:  # Triton 3.6's interpreter: see .interpreter
    interpreter.install()


def _entry(kernel: str, dtype: str) -> dict:
    config = default_config(8192, 8192, 8192, dtype, kernel)
    signature, constexprs = compile_args(kernel, dtype, config)
    return {"name": f"{kernel}_{dtype}", "fn": kernel_fn(kernel), "signature": signature,
            "constexprs": constexprs, "attrs": compile_attrs(kernel), "options": config.options()}


#: Both GEMM kernels in bf16 and fp16 at the H200 default config for a large problem.
CORPUS = [_entry(kernel, dtype) for kernel in ("matmul_ptr_kernel", "matmul_tma_persistent_kernel")
          for dtype in ("bf16", "fp16")]

__all__ = [
    "AttentionConfig", "attention", "attention_backward", "attention_compile_args", "attention_compile_attrs",
    "attention_default_config", "attention_fast_compile_args", "attn_fwd_fast_kernel", "attn_fwd_kernel",
    "CORPUS", "GemmConfig", "GemmPlan", "H200_NUM_SMS", "KERNELS", "SMEM_LIMIT_SM90",
    "check_operands", "compile_args", "compile_attrs", "default_config",
    "ensure_tma_allocator", "heuristic_config", "kernel_fn", "make_launcher", "make_plan",
    "matmul", "matmul_ptr_kernel", "matmul_tma_persistent_kernel", "matmul_tma_splitk_kernel",
    "num_sms", "splitk_reduce_kernel",
    "Fp8GemmConfig", "check_fp8_operands", "default_fp8_config", "fp8_compile_args",
    "fp8_compile_attrs", "fp8_kernel_fn", "make_fp8_launcher", "matmul_fp8_ptr_kernel",
    "matmul_fp8_tma_persistent_kernel", "scaled_mm",
]
