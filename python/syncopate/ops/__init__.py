"""Fused multi-GPU operators built from a local Triton kernel, a schedule template and
:func:`syncopate.fuse` (no hand-written fused kernels).

Each op is a module with its :class:`~.spec.OpSpec` (``SPEC``), registered below: the registry
(:data:`REGISTRY`) is what the generic code reads -- the path decision
(:mod:`syncopate.ops.choice`), the driver (:mod:`syncopate.ops.driver`), ``syncopate
explain``, calibration fitting, the benchmark and ``torch.ops.syncopate``.
"""

from . import (ag_gemm as _ag_gemm, ag_gemm_fp8 as _ag_gemm_fp8,
               ag_weight_gemm as _ag_weight_gemm, gemm_ar as _gemm_ar,
               gemm_rs as _gemm_rs, gemm_rs_fp8 as _gemm_rs_fp8,
               moe_dispatch_gemm as _moe_dispatch_gemm, moe_gemm_combine as _moe_gemm_combine,
               ring_attention as _ring_attention, ulysses as _ulysses)
from .ag_gemm import ag_gemm, ag_gemm_buffer, ag_gemm_fused_kernel, ag_gemm_reference
from .ag_gemm_fp8 import ag_gemm_fp8, ag_gemm_fp8_fused_kernel, ag_gemm_fp8_reference
from .ag_weight_gemm import ag_weight_gemm, ag_weight_gemm_buffer, ag_weight_gemm_reference
from .choice import decide, decide_shape  # noqa: F401  (the path decision)
from .gemm_ar import gemm_ar, gemm_ar_buffer, gemm_ar_fused_kernel, gemm_ar_reference
from .gemm_rs import gemm_rs, gemm_rs_buffer, gemm_rs_fused_kernel, gemm_rs_reference
from .gemm_rs_fp8 import gemm_rs_fp8, gemm_rs_fp8_fused_kernel, gemm_rs_fp8_reference
from .moe_dispatch_gemm import (MoEDispatch, moe_dispatch_gemm, moe_dispatch_gemm_fused_kernel,
                                moe_dispatch_gemm_reference)
from .moe_gemm_combine import (moe_gemm_combine, moe_gemm_combine_fused_kernel,
                               moe_gemm_combine_reference)
from .ring_attention import (ring_attention, ring_attention_backward, ring_attention_fused_kernel,
                             ring_attention_reference)
from .spec import REGISTRY, OpSpec, register  # noqa: F401  (the registry, for generic readers)
from .ulysses import (ulysses_attention, ulysses_attention_reference, ulysses_buffers,
                      ulysses_fused_kernel)

register(_ag_gemm.SPEC, _gemm_rs.SPEC, _gemm_ar.SPEC, _ag_gemm_fp8.SPEC, _gemm_rs_fp8.SPEC,
         _ring_attention.SPEC, _ulysses.SPEC, _moe_dispatch_gemm.SPEC, _moe_gemm_combine.SPEC,
         _ag_weight_gemm.SPEC)

__all__ = ["ag_gemm", "ag_gemm_buffer", "ag_gemm_fused_kernel", "ag_gemm_reference",
           "ag_gemm_fp8", "ag_gemm_fp8_fused_kernel", "ag_gemm_fp8_reference", "ag_weight_gemm",
           "ag_weight_gemm_buffer", "ag_weight_gemm_reference", "gemm_ar",
           "gemm_ar_buffer", "gemm_ar_fused_kernel", "gemm_ar_reference", "gemm_rs",
           "gemm_rs_buffer", "gemm_rs_fused_kernel", "gemm_rs_reference", "gemm_rs_fp8",
           "gemm_rs_fp8_fused_kernel", "gemm_rs_fp8_reference", "MoEDispatch",
           "moe_dispatch_gemm", "moe_dispatch_gemm_fused_kernel", "moe_dispatch_gemm_reference",
           "moe_gemm_combine", "moe_gemm_combine_fused_kernel", "moe_gemm_combine_reference",
           "ring_attention", "ring_attention_backward",
           "ring_attention_fused_kernel", "ring_attention_reference", "ulysses_attention",
           "ulysses_attention_reference", "ulysses_buffers", "ulysses_fused_kernel"]
