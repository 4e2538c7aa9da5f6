"""Host side of the grouped GEMM (:mod:`.grouped_gemm`): config, checks, launch, reference.

``grouped_gemm(a, w, count)`` computes, for every group ``g`` of the capacity layout
``a`` ``[G, C, K]``, ``out[g, :count[g]] = a[g, :count[g]] @ w[g % E]``;
rows past the count are left as they were in ``out`` (undefined in a fresh tensor).
``count`` stays on the device: nothing here reads it on the host, so a launch never
synchronises with the GPU (the counts are only clamped to ``C`` inside the kernel).

The checks run on the host and work on CPU tensors (tested without a GPU); they raise
:class:`~syncopate.errors.LaunchError` saying what to change. :func:`grouped_gemm_reference`
is the cuBLAS-based baseline (one ``torch.mm`` per group) the tests and the timing script
compare against.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LaunchError
from .gemm_config import SMEM_LIMIT_SM90, TileConfig, _dtype_name, divisibility, signature_of
from .grouped_gemm import grouped_gemm_kernel


@dataclass(frozen=True)
class GroupedGemmConfig(TileConfig):
    """Tile sizes and compile options. The default is the pointer GEMM's H200 choice for
    mid-size problems (128x128x64, 4 warps, 4 stages: 128 KiB of shared memory, wgmma
    64xN per warp group); ``C`` must be a multiple of ``BLOCK_M`` when the kernel is fused with
    a dispatch schedule (a tile then never spans two groups' chunks, docs/moe.md)."""

    BLOCK_M: int = 128
    BLOCK_N: int = 128
    BLOCK_K: int = 64
    num_warps: int = 4
    num_stages: int = 4
    #: tile rows swept together inside a group (the GEMM's grouped order, for L2 reuse)
    GROUP_M: int = 8

    def constexprs(self) -> dict:
        return dict(BLOCK_M=self.BLOCK_M, BLOCK_N=self.BLOCK_N, BLOCK_K=self.BLOCK_K,
                    GROUP_M=self.GROUP_M)

    def check(self) -> "GroupedGemmConfig":
        problems = self._pow2_problems(("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps"))
        if min(self.BLOCK_M, self.BLOCK_N, self.BLOCK_K) < 16:
            problems.append("BLOCK_M, BLOCK_N and BLOCK_K must be >= 16 (tl.dot's minimum)")
        problems += self._stages_problems()
        if not isinstance(self.GROUP_M, int) or self.GROUP_M < 1:
            problems.append(f"GROUP_M={self.GROUP_M!r} must be a positive integer")
        smem = self.num_stages * (self.BLOCK_M + self.BLOCK_N) * self.BLOCK_K * 2
        if smem > SMEM_LIMIT_SM90:
            problems.append(f"needs ~{smem} bytes of shared memory (> 227 KiB): lower num_stages")
        if problems:
            raise LaunchError(f"grouped GEMM config {self} is not valid: " + "; ".join(problems))
        return self


def default_config(C: int, N: int, K: int) -> GroupedGemmConfig:
    """The H200 choice for a capacity ``C`` and expert GEMM ``N x K``.

    Measured (``python -m syncopate.bench.grouped --sweep``, one H200, Mixtral- and
    DeepSeek-like shapes, uniform and skewed routings; bench/results/2026-12-02-h200x1-pending):
    128x256x64 tiles, 8 warps, 3 stages, grouped order of 8 tile rows was the fastest of the
    sweep on 5 of 6 cases (and within 1.5% on the sixth), 1.17-1.23x faster than 128x128x64 /
    4 warps. Narrow experts (``N < 1024``) keep 128-column tiles (fewer wasted columns);
    64-row tiles when the capacity is small (decode-like: fewer wasted rows in each group's
    last tile); 2 stages when K fits in one or two K steps."""
    if C <= 64:
        cfg = GroupedGemmConfig(BLOCK_M=64, BLOCK_N=128, BLOCK_K=64, num_warps=4, num_stages=4)
    elif N >= 1024:
        cfg = GroupedGemmConfig(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, num_warps=8, num_stages=3)
    else:
        cfg = GroupedGemmConfig()
    if K <= 128:
        cfg = cfg.replace(num_stages=2)
    return cfg


#: Parameter names of the kernel, in order (the compiler and the compile tests use them).
PARAMS = ("a_ptr", "b_ptr", "c_ptr", "count_ptr", "C", "N", "K", "E", "M_out", "a_base",
          "a_seg", "cnt_base", "cnt_seg",
          "stride_am", "stride_ak", "stride_be", "stride_bk", "stride_bn", "stride_cm",
          "stride_cn")
_UNIT = ("stride_ak", "stride_bn", "stride_cn")


def compile_args(dtype="bf16", config=None, *, unit_inner_strides: bool = True) -> tuple[dict, dict]:
    """``(signature, constexprs)`` for ``triton.compile(ASTSource(grouped_gemm_kernel, ...))``,
    as the JIT builds them for row-major operands (inner strides specialised to 1)."""
    dt = _dtype_name(dtype)
    return signature_of(PARAMS, lambda p: "*i32" if p == "count_ptr" else f"*{dt}",
                        _UNIT if unit_inner_strides else (),
                        (config or GroupedGemmConfig()).constexprs())


def compile_attrs(unit_inner_strides: bool = True) -> dict:
    """``tt.divisibility = 16`` on pointers, sizes and leading strides (aligned shapes)."""
    return divisibility(PARAMS, (_UNIT if unit_inner_strides else ())
                        + ("a_base", "a_seg", "cnt_base", "cnt_seg", "M_out"))


#: The kernel's element offsets are 32-bit: no operand of one launch may span 2**31 elements.
OFFSET_LIMIT = 2 ** 31


def check_operands(a, w, count, out=None, *, segments: int = 1, split: bool = False):
    """Validate; return ``(G, C, K, E, N)``. Host-only (works on CPU tensors).

    ``split``: the caller launches the groups in slices (:func:`group_slices`), so only one
    group's rows and one expert's weight need to fit the kernel's 32-bit offsets."""
    import torch
    for name, t in (("a", a), ("w", w), ("count", count)) + ((("out", out),) if out is not None
                                                            else ()):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if a.dim() != 3:
        raise LaunchError(f"a must be [G, C, K] (groups x capacity x hidden), got shape "
                          f"{tuple(a.shape)}")
    if w.dim() != 3:
        raise LaunchError(f"w must be [E, K, N] (experts x hidden x out), got shape "
                          f"{tuple(w.shape)}; a weight stored [E, N, K] is w.transpose(1, 2)")
    if a.dtype != w.dtype or a.dtype not in (torch.bfloat16, torch.float16):
        raise LaunchError(f"a and w must both be bfloat16 or both float16, got {a.dtype} and "
                          f"{w.dtype}")
    G, C, K = a.shape
    E, K2, N = w.shape
    if K != K2:
        raise LaunchError(f"a is [G, C, K] = {tuple(a.shape)} and w must be [E, K, N] with "
                          f"K = {K}, got {tuple(w.shape)}")
    seg = segments
    if isinstance(seg, bool) or not isinstance(seg, int) or seg < 1 or G != E * seg:
        raise LaunchError(f"a has {G} groups and w {E} experts: segments must be a "
                          f"positive integer with G == E * segments, got {seg!r}")
    if count.dtype != torch.int32 or tuple(count.shape) != (G,):
        raise LaunchError(f"count must be an int32 tensor of shape ({G},) (valid rows per "
                          f"group), got {count.dtype} {tuple(count.shape)}")
    if out is not None:
        if tuple(out.shape) != (G, C, N) or out.dtype != a.dtype:
            raise LaunchError(f"out must be {a.dtype} [G, C, N] = {(G, C, N)}, got {out.dtype} "
                              f"{tuple(out.shape)}")
    tensors = (("a", a), ("w", w)) + ((("out", out),) if out is not None else ())
    for name, t in tensors:
        if t.stride(-1) != 1 and t.shape[-1] > 1:
            raise LaunchError(f"{name} must have a unit inner stride: pass {name}.contiguous()")
        if name != "w" and t.shape[0] > 1 and t.shape[1] > 1 \
                and t.stride(0) != t.shape[1] * t.stride(1):
            raise LaunchError(f"{name}'s groups must be stacked rows ([G, C, *] viewable as "
                              f"[G * C, *]): pass {name}.contiguous()")
        shape = (1,) + tuple(t.shape[1:]) if split else tuple(t.shape)
        span = sum((n - 1) * st for n, st in zip(shape, t.stride()))
        if span >= OFFSET_LIMIT or any(st < 0 for st in t.stride()):
            raise LaunchError(f"the grouped GEMM uses 32-bit element offsets: {name} (shape "
                              f"{tuple(t.shape)}) is too large" + (
                                  "; one group or one expert alone spans 2**31 elements"
                                  if split else "; split the groups over launches"))
    for name, t in tensors[1:] + (("count", count),):
        if t.device != a.device:
            raise LaunchError(f"{name} is on {t.device} but a is on {a.device}")
    return G, C, K, E, N


def group_slices(G: int, C: int, K: int, E: int, N: int, segments: int = 1):
    """``[(g0, e0, n)]``: launches of ``n`` consecutive groups ``g0 ..`` (experts ``e0 ..`` of
    one segment) whose operands each span fewer than 2**31 elements; one launch when the whole
    problem fits. (DeepSeek-like skew -- 32 experts x 11136 rows x 7168 -- does not.)"""
    whole = max(G * C * K, G * C * N, E * K * N)
    if whole < OFFSET_LIMIT:
        return [(0, 0, G)]
    per = max(1, (OFFSET_LIMIT - 1) // max(C * K, C * N, K * N))
    return [(s * E + e0, e0, min(per, E - e0)) for s in range(segments)
            for e0 in range(0, E, per)]


def grouped_gemm(a, w, count, out=None, *, segments: int = 1, config=None):
    """``out[g, :count[g]] = a[g, :count[g]] @ w[g % E]`` on the GPU (groups numbered
    ``segment * E + expert``; ``segments`` = the number of segments).

    ``a`` ``[G, C, K]``, ``w`` ``[E, K, N]``, ``count`` int32 ``[G]`` on the device (values are
    clamped to ``C`` in the kernel; a negative count means an empty group). Returns ``out``
    ``[G, C, N]``; rows past a group's count are not written.
    """
    import torch

    G, C, K, E, N = check_operands(a, w, count, out, segments=segments, split=True)
    if a.device.type != "cuda":
        raise LaunchError(f"the grouped GEMM runs on a CUDA device; operands are on {a.device} "
                          f"(use grouped_gemm_reference on CPU)")
    if out is None:
        out = torch.empty((G, C, N), device=a.device, dtype=a.dtype)
    if G == 0 or C == 0 or N == 0:
        return out
    cfg = (config or default_config(C, N, K)).check()
    with torch.cuda.device(a.device):
        for g0, e0, n in group_slices(G, C, K, E, N, segments):
            # a slice of whole groups of one segment is itself a one-segment problem
            sub = (slice(g0, g0 + n),)
            if n == G:
                ga, gw, gc, go, ge = a, w, count, out, E
            else:
                ga, gw, gc, go, ge = a[sub], w[e0:e0 + n], count[sub], out[sub], n
            grid = (n * -(-C // cfg.BLOCK_M) * -(-N // cfg.BLOCK_N),)
            grouped_gemm_kernel[grid](ga, gw, go, gc, C, N, K, ge, n * C, 0, ge, 0, ge,
                                      a.stride(1), a.stride(2), w.stride(0), w.stride(1),
                                      w.stride(2), out.stride(1), out.stride(2),
                                      **cfg.constexprs(),
                                      **cfg.options())
    return out


def grouped_gemm_reference(a, w, count, out=None, *, segments: int = 1,
                           counts_host=None):
    """The cuBLAS baseline: one ``torch.mm`` per non-empty group on its valid rows.

    ``counts_host`` (a list of ints) avoids reading ``count`` back; without it the counts are
    copied to the host once (a synchronisation the Triton kernel does not need)."""
    import torch
    G, C, K, E, N = check_operands(a, w, count, out, segments=segments, split=True)
    if out is None:
        out = torch.zeros((G, C, N), device=a.device, dtype=a.dtype)
    counts = counts_host if counts_host is not None else count.tolist()
    for g in range(G):
        n = max(0, min(int(counts[g]), C))
        if n:
            torch.mm(a[g, :n], w[g % E], out=out[g, :n])
    return out
