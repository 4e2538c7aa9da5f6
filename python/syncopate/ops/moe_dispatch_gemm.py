"""MoE dispatch + first expert GEMM, fused: the pieces the op and the emulator tests share.

Built from parts (docs/moe.md): the grouped GEMM
(:func:`syncopate.kernels.grouped_gemm.grouped_gemm_kernel`), the ``moe_dispatch`` schedule
(:func:`syncopate.schedule.moe.moe_dispatch`: per-source capacity groups, device-side counts,
run-time extents) and :func:`syncopate.fuse`, with the kernel's ``a_ptr`` bound to the tokens
``X`` and ``count_ptr`` to the counts ``CNT``.

On rank ``d`` the kernel runs ``W * El`` groups -- group ``g = s * El + e`` is source ``s``'s
tokens for local expert ``e`` (global ``x = d*El + e``) -- reading ``X`` group ``s*E + x``
(``a_base = d*El``, ``a_seg = E``) and count ``CNT[(s*W + d)*E + x]`` (``cnt_base = d*E +
d*El``, ``cnt_seg = W*E``), and writes ``out`` ``[W * El * C, N]`` group ``g`` (rows past the
count are not written). A tile of group ``g`` loads its count (waiting for the count chunk
from ``s``), and only if it has rows waits for the one data chunk ``(s -> d, x)``.
"""

from __future__ import annotations

from ..errors import LaunchError
from ..kernels.grouped_gemm_launch import GroupedGemmConfig

#: ``fuse(operand=...)``: the kernel parameters the schedule's tensors are bound to
OPERANDS = {"a_ptr": "X", "count_ptr": "CNT"}


def check_sizes(world_size: int, num_experts: int, capacity: int, cfg: GroupedGemmConfig):
    """Typed errors for sizes the fused kernel cannot take."""
    if num_experts % world_size:
        raise LaunchError(f"{num_experts} experts do not divide over {world_size} ranks: every "
                          f"rank owns num_experts / world_size experts; use a world size that "
                          f"divides {num_experts}")
    if capacity % cfg.BLOCK_M:
        raise LaunchError(f"capacity {capacity} is not a multiple of the grouped GEMM's "
                          f"BLOCK_M={cfg.BLOCK_M}: a tile would span two groups' chunks and wait "
                          f"for both; round the capacity up to a multiple of {cfg.BLOCK_M}")


def kernel_args(X, CNT, w_local, out, rank: int, world_size: int, num_experts: int,
                capacity: int, cfg: GroupedGemmConfig):
    """``(values, grid)``: the grouped GEMM's non-constexpr arguments on ``rank`` in parameter
    order (a dict, name -> value), and its grid. ``X`` ``[W*E*C, H]``, ``CNT`` ``[W*W*E]``
    int32, ``w_local`` ``[El, H, N]``, ``out`` ``[W*El*C, N]``."""
    W, E, C = world_size, num_experts, capacity
    check_sizes(W, E, C, cfg)
    El = E // W
    H, N = X.shape[1], w_local.shape[2]
    values = dict(a_ptr=X, b_ptr=w_local, c_ptr=out, count_ptr=CNT, C=C, N=N, K=H, E=El,
                  a_base=rank * El, a_seg=E, cnt_base=rank * E + rank * El, cnt_seg=W * E,
                  stride_am=X.stride(0), stride_be=w_local.stride(0),
                  stride_bk=w_local.stride(1), stride_cm=out.stride(0))
    tiles = (C // cfg.BLOCK_M) * -(-N // cfg.BLOCK_N)
    return values, (W * El * tiles,)
