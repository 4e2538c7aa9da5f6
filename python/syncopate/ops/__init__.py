"""Fused multi-GPU operators built from a local Triton kernel, a schedule template and
:func:`syncopate.fuse` (no hand-written fused kernels)."""

from .ag_gemm import ag_gemm, ag_gemm_buffer, ag_gemm_fused_kernel, ag_gemm_reference
from .ag_gemm_fp8 import ag_gemm_fp8, ag_gemm_fp8_fused_kernel, ag_gemm_fp8_reference
from .gemm_rs import gemm_rs, gemm_rs_buffer, gemm_rs_fused_kernel, gemm_rs_reference
from .gemm_rs_fp8 import gemm_rs_fp8, gemm_rs_fp8_fused_kernel, gemm_rs_fp8_reference
from .ring_attention import ring_attention, ring_attention_fused_kernel, ring_attention_reference

__all__ = ["ag_gemm", "ag_gemm_buffer", "ag_gemm_fused_kernel", "ag_gemm_reference",
           "ag_gemm_fp8", "ag_gemm_fp8_fused_kernel", "ag_gemm_fp8_reference",
           "gemm_rs_fp8", "gemm_rs_fp8_fused_kernel", "gemm_rs_fp8_reference", "gemm_rs",
           "gemm_rs_buffer", "gemm_rs_fused_kernel", "gemm_rs_reference", "ring_attention",
           "ring_attention_fused_kernel", "ring_attention_reference"]
