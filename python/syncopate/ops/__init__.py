"""Fused multi-GPU operators built from a local Triton kernel, a schedule template and
:func:`syncopate.fuse` (no hand-written fused kernels)."""

from .ag_gemm import ag_gemm, ag_gemm_buffer, ag_gemm_fused_kernel, ag_gemm_reference
from .gemm_rs import gemm_rs, gemm_rs_buffer, gemm_rs_fused_kernel, gemm_rs_reference
from .ring_attention import ring_attention, ring_attention_fused_kernel, ring_attention_reference
from .ulysses import (ulysses_attention, ulysses_attention_reference, ulysses_buffers,
                      ulysses_fused_kernel)

__all__ = ["ag_gemm", "ag_gemm_buffer", "ag_gemm_fused_kernel", "ag_gemm_reference", "gemm_rs",
           "gemm_rs_buffer", "gemm_rs_fused_kernel", "gemm_rs_reference", "ring_attention",
           "ring_attention_fused_kernel", "ring_attention_reference", "ulysses_attention",
           "ulysses_attention_reference", "ulysses_buffers", "ulysses_fused_kernel"]
