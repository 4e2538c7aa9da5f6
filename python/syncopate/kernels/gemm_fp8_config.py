"""Configurations and compile arguments of the FP8 GEMM kernels (:mod:`.gemm_fp8`).

:class:`Fp8GemmConfig` is :class:`~.gemm_config.GemmConfig` plus ``FAST_ACCUM``, with the shared
memory counted at one byte per A/B element (two for the bf16 C staging buffer); its defaults
are the 128x256x128 tile of Triton's FP8 persistent-matmul tutorial (one 128-byte K row per
TMA box: the widest swizzle, and the same bytes per stage as the bf16 kernels' 128x256x64).
Nothing here needs a GPU or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LaunchError
from .gemm_config import (H200_NUM_SMS, GemmConfig, _wide_tiles_win, divisibility, short_name,
                          signature_of)
from .gemm_fp8 import FP8_KERNELS


def fp8_short(kernel: str) -> str:
    """'ptr' or 'tma' from a short or full FP8 kernel name (LaunchError otherwise)."""
    return short_name(kernel, FP8_KERNELS, "FP8 GEMM", LaunchError)


@dataclass(frozen=True)
class Fp8GemmConfig(GemmConfig):
    """A :class:`GemmConfig` for the FP8 kernels. ``FAST_ACCUM`` (default False, as
    ``torch._scaled_mm``) keeps the whole K loop in Hopper's reduced-precision FP8 wgmma
    accumulator instead of promoting to fp32 after every ``BLOCK_K`` step. The field defaults
    are :func:`default_fp8_config`'s precise tile (128x128x128, 4 stages): the bf16 default
    128x256 spills with the promoted accumulator."""

    BLOCK_N: int = 128
    BLOCK_K: int = 128
    num_stages: int = 4
    FAST_ACCUM: bool = False

    @classmethod
    def of(cls, config) -> "Fp8GemmConfig":
        if isinstance(config, GemmConfig) and not isinstance(config, Fp8GemmConfig):
            config = config.as_dict()
        return super().of(config)

    def constexprs(self, kernel: str, num_sms: int = H200_NUM_SMS, *, sa_rows: bool = False,
                   sb_cols: bool = False) -> dict:
        """The kernel's constexprs: tiles (as the bf16 kernels), the scale modes, and
        ``IMPRECISE_ACC`` (``tl.dot``'s ``max_num_imprecise_acc``): ``BLOCK_K`` -- the wgmma
        chain of one K step, then an fp32 add into the accumulator -- or, with ``FAST_ACCUM``,
        None (Triton's sm_90 default: never promote). Not 0: Triton 3.6 then lowers the fp8
        dot to fp16 ``mma.sync`` (no wgmma), a fallback the compile test guards against."""
        k = fp8_short(kernel)
        c = super().constexprs(k, num_sms)
        c.update(SA_ROWS=bool(sa_rows), SB_COLS=bool(sb_cols),
                 IMPRECISE_ACC=None if self.FAST_ACCUM else int(self.BLOCK_K))
        return c

    def smem_bytes(self, kernel: str, elem_bytes: int = 1, c_bytes: int | None = 2) -> int:
        """Shared memory: one-byte A and B elements and (TMA) the bf16 C staging buffer."""
        return super().smem_bytes(fp8_short(kernel), elem_bytes, c_bytes)

    def check(self, kernel: str) -> "Fp8GemmConfig":
        """The bf16 checks (powers of two, TMA box limits, warp specialisation, shared memory
        at one byte per element), plus FP8 wgmma's K granularity."""
        k = fp8_short(kernel)
        super().check(k)
        if self.BLOCK_K < 32:
            raise LaunchError(f"FP8 config {self} is not valid: BLOCK_K={self.BLOCK_K} must be "
                              f">= 32 (FP8 wgmma consumes K in steps of 32)")
        return self


def default_fp8_config(M: int, N: int, K: int, kernel: str = "tma", num_sms: int = H200_NUM_SMS,
                       *, fast_accum: bool = False) -> Fp8GemmConfig:
    """The FP8 config for this problem on an H200.

    Default (``FAST_ACCUM=False``): 128x128x128 tiles, 8 warps (two consumer warp groups of
    64x128), 4 stages. Why not the bf16 kernels' 128x256: promoting the wgmma chain once per K
    step keeps a second fp32 accumulator live, and at 128x256 the two need 256 registers per
    thread -- ptxas spills 148-160 bytes (tests/test_kernels_fp8.py checks the chosen configs
    spill nothing). With ``fast_accum`` there is one accumulator and the bf16 rule of
    :func:`~.gemm_config.default_config` applies: 128x256x128 (3 stages, 207 KiB of shared
    memory with the C staging buffer, the tile of Triton's FP8 persistent-matmul tutorial) when
    it does not leave the last wave mostly empty, else 128x128x128. A BLOCK_K of 128 one-byte
    elements is one 128-byte row per TMA box (the widest swizzle) and the bf16 kernels' bytes
    per stage. ``python -m syncopate.bench.local --fp8`` times it against
    ``torch._scaled_mm``."""
    fp8_short(kernel)
    small = Fp8GemmConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, num_warps=8,
                          num_stages=4, FAST_ACCUM=bool(fast_accum))
    cfg = small
    if fast_accum and _wide_tiles_win(M, N, num_sms):
        cfg = small.replace(BLOCK_N=256, num_stages=3)
    if K <= 128:  # one K step: stages beyond 2 only cost shared memory
        cfg = cfg.replace(num_stages=2)
    return cfg


# ----------------------------------------------------------------------------------------------
# Compile arguments
# ----------------------------------------------------------------------------------------------

_PARAMS = {
    "ptr": ("a_ptr", "b_ptr", "c_ptr", "scale_a_ptr", "scale_b_ptr", "M", "N", "K", "stride_am",
            "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"),
    "tma": ("a_ptr", "b_ptr", "c_ptr", "scale_a_ptr", "scale_b_ptr", "M", "N", "K", "stride_am",
            "stride_bn", "stride_cm"),
}
#: unit inner strides of the pointer kernel's fast layout: A row-major, B column-major, C
#: row-major (``stride_bk == 1``: B^T contiguous, as ``torch._scaled_mm`` takes it)
_UNIT_STRIDES = ("stride_ak", "stride_bk", "stride_cn")
_PTR_TYPES = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e4nv", "c_ptr": "*bf16", "scale_a_ptr": "*fp32",
              "scale_b_ptr": "*fp32"}


def fp8_compile_args(kernel: str, config=None, *, sa_rows: bool = False, sb_cols: bool = False,
                     num_sms: int = H200_NUM_SMS, unit_inner_strides: bool = True):
    """``(signature, constexprs)`` for ``triton.compile(ASTSource(...))``: fp8e4nv A and B, bf16
    C, fp32 scales; the scale modes and tiles as constexprs; for the pointer kernel the unit
    strides of the fast layout as constexpr 1 (what the JIT specialises; see
    :func:`~.gemm_config.compile_args`)."""
    k = fp8_short(kernel)
    cx = Fp8GemmConfig.of(config).constexprs(k, num_sms, sa_rows=sa_rows, sb_cols=sb_cols)
    unit = _UNIT_STRIDES if k == "ptr" and unit_inner_strides else ()
    return signature_of(_PARAMS[k], _PTR_TYPES.get, unit, cx)


def fp8_compile_attrs(kernel: str, *, unit_inner_strides: bool = True, aligned: bool = True,
                      scalar_scales: tuple[str, ...] = ()) -> dict:
    """``tt.divisibility = 16`` on the pointers, sizes and leading strides (as the JIT adds for
    aligned shapes); ``scalar_scales`` names scale pointers left without the hint (a one-element
    tensor-wise scale may be a view at any 4-byte offset)."""
    if not aligned:
        return {}
    k = fp8_short(kernel)
    unit = _UNIT_STRIDES if k == "ptr" and unit_inner_strides else ()
    return divisibility(_PARAMS[k], unit + tuple(scalar_scales))


__all__ = ["Fp8GemmConfig", "default_fp8_config", "fp8_compile_args", "fp8_compile_attrs",
           "fp8_short"]
