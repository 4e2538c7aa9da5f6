"""Local (single-GPU) Triton GEMM kernels: the kernels Syncopate fuses with communication.

``C[M, N] = A[M, K] @ B[K, N]`` in bf16/fp16 with fp32 accumulation, in two forms:

* :func:`matmul_ptr_kernel` -- one program per output tile, pointer arithmetic with masks.
  Works for any shape and any strides; the form the compiler's access analysis reads most
  directly (every load address is an affine function of ``pid_m``/``pid_n`` and the K-loop
  induction variable, every mask a comparison against ``M``/``N``/``K``).
* :func:`matmul_tma_persistent_kernel` -- persistent (one program per SM) with a tile loop and
  TMA (tensor-descriptor) loads and stores. The fast one on Hopper.

Both are written the way Syncopate's passes expect (docs/soundness.md; passes/tile_remap.py,
passes/insert_waits.py):

* The tile's M coordinate is computed **once** per tile (``pid_m``) and the very same SSA value
  feeds the A loads and the C store, so "which rows of A does this tile read" and "which rows of
  C does it write" are one fact for the access analysis. (Triton's tutorial 09 recomputes the
  epilogue coordinates from a second counter ``tile_id_c`` to dodge a Blackwell pipeliner bug;
  we do not, on purpose: on Hopper it is not needed, and it would hide the producer/consumer
  relation from the compiler.)
* A is ``[M, K]`` indexed by the tile's row coordinate ``pid_m * BLOCK_M``: for
  all-gather + GEMM the communicated operand is A, sharded on M, so each chunk of A rows maps
  to a set of ``pid_m`` values, and the wait is inserted before the first A load of a tile.
* Tiles are visited in *grouped* order (``GROUP_M`` row-tiles share each column sweep): the
  ``GROUP_M`` row panels of A and the current column panel of B stay in L2 while a group is
  computed, which cuts DRAM traffic versus row-major tile order. The tile-remap pass replaces
  the tile id that feeds this mapping (the program id, or the persistent loop's ``tile_id``) by a
  chunk-arrival-ordered one; the grouped mapping after it is unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

import triton
import triton.language as tl

from .. import dtypes
from ..errors import LaunchError


@triton.jit
def _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Map a linear tile id to ``(pid_m, pid_n)`` in grouped order.

    Tiles are numbered column-major inside groups of ``GROUP_M`` tile rows: ids
    ``[g * GROUP_M * num_pid_n, (g + 1) * GROUP_M * num_pid_n)`` cover tile rows
    ``[g * GROUP_M, g * GROUP_M + GROUP_M)`` (fewer in the last group) and every tile column.
    The mapping is a bijection onto the ``num_pid_m x num_pid_n`` tile grid for any sizes.
    """
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = tile_id // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    tile_in_group = tile_id % num_pid_in_group
    pid_m = first_pid_m + (tile_in_group % group_size_m)
    pid_n = tile_in_group // group_size_m
    return pid_m, pid_n


@triton.jit
def matmul_ptr_kernel(a_ptr, b_ptr, c_ptr,  #
                      M, N, K,  #
                      stride_am, stride_ak,  #
                      stride_bk, stride_bn,  #
                      stride_cm, stride_cn,  #
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,  #
                      GROUP_M: tl.constexpr):
    """One program per ``BLOCK_M x BLOCK_N`` tile of C; launch ``cdiv(M, BM) * cdiv(N, BN)``.

    Ragged shapes are handled with masks (no padding, no clamping of indices): rows ``>= M`` and
    columns ``>= N`` are neither read nor written, the K tail is read as zeros. Masks rather
    than the ``tl.where(offs < M, offs, 0)`` clamp of Triton's tutorials, because a masked
    load says exactly which region of A a tile reads (``rows [pid_m*BM, min(M, pid_m*BM+BM))``)
    while a clamp makes out-of-range rows alias row 0. The A address is recomputed from the
    K-loop induction variable each iteration (no loop-carried pointer), so it is an affine
    function of ``(pid_m, k)`` that the access analysis reads without chasing ``scf.for``
    iter_args; Triton hoists the loop-invariant part, so this costs nothing measurable.

    The K loop is software-pipelined by Triton (``num_stages`` cp.async stages) and the dot
    lowers to wgmma on sm_90.
    """
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pid_m, pid_n = _grouped_tile(pid, num_pid_m, num_pid_n, GROUP_M)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        offs_kk = k * BLOCK_K + offs_k
        mask_k = offs_kk < K
        a_ptrs = a_ptr + (offs_m[:, None] * stride_am + offs_kk[None, :] * stride_ak)
        b_ptrs = b_ptr + (offs_kk[:, None] * stride_bk + offs_n[None, :] * stride_bn)
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc)

    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + (offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn)
    tl.store(c_ptrs, c, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def matmul_tma_persistent_kernel(a_ptr, b_ptr, c_ptr,  #
                                 M, N, K,  #
                                 stride_am, stride_bk, stride_cm,  #
                                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                 BLOCK_K: tl.constexpr,  #
                                 GROUP_M: tl.constexpr,  #
                                 NUM_SMS: tl.constexpr,  #
                                 EPILOGUE_SUBTILE: tl.constexpr,  #
                                 FLATTEN: tl.constexpr,  #
                                 WARP_SPECIALIZE: tl.constexpr):
    """Persistent TMA GEMM: launch ``min(NUM_SMS, num_tiles)`` programs; each walks the tile ids
    ``start_pid, start_pid + NUM_SMS, ...`` in grouped order.

    Operands are row-major with unit inner stride: A ``[M, K]`` (``stride_am``), B ``[K, N]``
    (``stride_bk``), C ``[M, N]`` (``stride_cm``); leading strides must be multiples of 16 bytes
    and base pointers 16-byte aligned (TMA's rules). TMA zero-fills out-of-bounds reads and
    clips out-of-bounds writes, so ragged M, N, K need no masks.

    Why device-side descriptors (``tl.make_tensor_descriptor`` from raw pointers) instead of
    host-built ``TensorDescriptor`` arguments: the kernel keeps a plain pointer signature, so
    the fused kernel can swap a pointer for a peer's symmetric buffer (or an offset into a
    gathered buffer) without the host rebuilding 128-byte descriptors per launch, and the
    TTIR shows where each descriptor's base comes from. The descriptors live in a small
    global scratch that Triton obtains through ``triton.set_allocator`` (see
    :func:`ensure_tma_allocator`).

    Why persistent: one wave of programs, no tail-wave quantisation per launch, and with
    ``FLATTEN`` Triton fuses the tile loop and the K loop into one software-pipelined loop, so
    the TMA loads of the next tile are in flight while this tile's epilogue runs.
    ``WARP_SPECIALIZE`` asks Triton's automatic warp specialisation (producer warp for TMA,
    consumer warp groups for wgmma); on Hopper it requires ``FLATTEN=False``.
    ``EPILOGUE_SUBTILE`` stores C as two ``BLOCK_M x BLOCK_N/2`` halves, halving the shared
    memory staging buffer so that one more pipeline stage fits.

    ``offs_m = pid_m * BLOCK_M`` is computed once per tile and is the coordinate of both the A
    loads and the C stores (Syncopate's access analysis relies on it).
    """
    dtype: tl.constexpr = c_ptr.dtype.element_ty
    C_BLOCK_N: tl.constexpr = BLOCK_N // 2 if EPILOGUE_SUBTILE else BLOCK_N
    a_desc = tl.make_tensor_descriptor(a_ptr, shape=[M, K], strides=[stride_am, 1],
                                       block_shape=[BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, shape=[K, N], strides=[stride_bk, 1],
                                       block_shape=[BLOCK_K, BLOCK_N])
    c_desc = tl.make_tensor_descriptor(c_ptr, shape=[M, N], strides=[stride_cm, 1],
                                       block_shape=[BLOCK_M, C_BLOCK_N])

    start_pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n

    for tile_id in tl.range(start_pid, num_tiles, NUM_SMS, flatten=FLATTEN,
                            warp_specialize=WARP_SPECIALIZE):
        pid_m, pid_n = _grouped_tile(tile_id, num_pid_m, num_pid_n, GROUP_M)
        offs_m = pid_m * BLOCK_M
        offs_n = pid_n * BLOCK_N

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            offs_k = ki * BLOCK_K
            a = a_desc.load([offs_m, offs_k])
            b = b_desc.load([offs_k, offs_n])
            acc = tl.dot(a, b, acc)

        if EPILOGUE_SUBTILE:
            acc = tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2))
            acc = tl.permute(acc, (0, 2, 1))
            acc0, acc1 = tl.split(acc)
            c_desc.store([offs_m, offs_n], acc0.to(dtype))
            c_desc.store([offs_m, offs_n + BLOCK_N // 2], acc1.to(dtype))
        else:
            c_desc.store([offs_m, offs_n], acc.to(dtype))


# ----------------------------------------------------------------------------------------------
# Configurations
# ----------------------------------------------------------------------------------------------

#: Kernel names as the compiler API and the CORPUS spell them, with the wrapper's short aliases.
KERNELS = {"ptr": "matmul_ptr_kernel", "tma": "matmul_tma_persistent_kernel"}

#: Largest dynamic shared memory one block may use on sm_90 (H100/H200): 227 KiB.
SMEM_LIMIT_SM90 = 232448

#: Streaming multiprocessors of an H200 (and H100 SXM); the default ``NUM_SMS`` for compiles
#: that have no device to ask.
H200_NUM_SMS = 132

_SUPPORTED_DTYPES = ("bf16", "fp16")


def _kernel_name(kernel: str) -> str:
    if kernel in KERNELS:
        return KERNELS[kernel]
    if kernel in KERNELS.values():
        return kernel
    raise ValueError(f"unknown GEMM kernel {kernel!r}; choose one of "
                     f"{', '.join(sorted(KERNELS) + sorted(KERNELS.values()))}")


def _short(kernel: str) -> str:
    name = _kernel_name(kernel)
    return "ptr" if name == KERNELS["ptr"] else "tma"


def _dtype_name(dtype) -> str:
    """``'bf16'`` or ``'fp16'`` from a torch dtype, a Triton dtype or a string (any spelling
    :func:`syncopate.dtypes.canonical` takes; an unknown name raises its ``DtypeError``)."""
    s = dtypes.canonical(dtype)
    if s not in _SUPPORTED_DTYPES:
        raise ValueError(f"unsupported GEMM dtype {dtype!r}; the local GEMMs take bfloat16 or "
                         f"float16 operands (fp32 accumulation)")
    return s


@dataclass(frozen=True)
class GemmConfig:
    """Tile sizes and compile options of one GEMM launch.

    The upper-case fields are constexprs of the kernels; ``num_warps``/``num_stages`` are Triton
    compile options. ``WARP_SPECIALIZE``, ``FLATTEN`` and ``EPILOGUE_SUBTILE`` only apply to the
    TMA kernel (the pointer kernel ignores them).

    ``num_warps`` is per partition: with ``WARP_SPECIALIZE`` Triton's Hopper warp
    specialisation turns ``num_warps=4`` into one producer warp group plus two consumer warp
    groups (12 warps in all, each consumer group owning ``BLOCK_M/2`` rows); it requires
    ``num_warps == 4``, ``FLATTEN=False`` and no ``EPILOGUE_SUBTILE`` (Triton 3.6 crashes or
    silently does not specialise otherwise), which :meth:`check` enforces.
    """

    BLOCK_M: int = 128
    BLOCK_N: int = 256
    BLOCK_K: int = 64
    GROUP_M: int = 8
    num_warps: int = 8
    num_stages: int = 3
    WARP_SPECIALIZE: bool = False
    FLATTEN: bool = True
    EPILOGUE_SUBTILE: bool = False

    @classmethod
    def of(cls, config) -> "GemmConfig":
        """A config from a :class:`GemmConfig`, a dict of its fields, or None (defaults)."""
        if config is None:
            return cls()
        if isinstance(config, GemmConfig):
            return config
        if isinstance(config, dict):
            unknown = set(config) - set(cls.__dataclass_fields__)
            if unknown:
                raise LaunchError(f"unknown GEMM config keys {sorted(unknown)}; valid keys are "
                                  f"{sorted(cls.__dataclass_fields__)}")
            return cls(**config)
        raise LaunchError(f"config must be a GemmConfig, a dict or None, not {type(config).__name__}")

    def as_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes) -> "GemmConfig":
        return replace(self, **changes)

    def constexprs(self, kernel: str, num_sms: int = H200_NUM_SMS) -> dict:
        """The kernel's tile constexprs (without the unit strides :func:`compile_args` adds)."""
        c = dict(BLOCK_M=self.BLOCK_M, BLOCK_N=self.BLOCK_N, BLOCK_K=self.BLOCK_K, GROUP_M=self.GROUP_M)
        if _short(kernel) == "tma":
            c.update(NUM_SMS=int(num_sms), EPILOGUE_SUBTILE=bool(self.EPILOGUE_SUBTILE),
                     FLATTEN=bool(self.FLATTEN), WARP_SPECIALIZE=bool(self.WARP_SPECIALIZE))
        return c

    def options(self) -> dict:
        """Triton compile options (``triton.compile(..., options=...)`` or launch kwargs)."""
        return dict(num_warps=self.num_warps, num_stages=self.num_stages)

    def smem_bytes(self, kernel: str, elem_bytes: int = 2) -> int:
        """Shared memory the config needs (matches Triton 3.6's allocation within a few bytes):
        ``num_stages`` A and B buffers, plus the C staging buffer of the TMA store."""
        stage = (self.BLOCK_M * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N) * elem_bytes
        total = self.num_stages * stage
        if _short(kernel) == "tma":
            c_block_n = self.BLOCK_N // 2 if self.EPILOGUE_SUBTILE else self.BLOCK_N
            total += self.BLOCK_M * c_block_n * elem_bytes + 1024  # + barriers, descriptors
        return total

    def check(self, kernel: str, smem_limit: int = SMEM_LIMIT_SM90) -> "GemmConfig":
        """Raise :class:`LaunchError` saying what to change if ``kernel`` cannot run this config."""
        k = _short(kernel)
        problems = []
        for f in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 1 or v & (v - 1):
                problems.append(f"{f}={v!r} must be a positive power of two")
        if self.BLOCK_K < 16 or self.BLOCK_M < 16 or self.BLOCK_N < 16:
            problems.append("BLOCK_M, BLOCK_N and BLOCK_K must be >= 16 (tl.dot's minimum)")
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            problems.append(f"num_stages={self.num_stages!r} must be a positive integer")
        if k == "tma":
            if max(self.BLOCK_M, self.BLOCK_N, self.BLOCK_K) > 256:
                problems.append("TMA boxes are at most 256 elements per dimension: keep BLOCK_M, "
                                "BLOCK_N, BLOCK_K <= 256")
            if self.WARP_SPECIALIZE:
                if self.num_warps != 4:
                    problems.append("WARP_SPECIALIZE needs num_warps=4 on Hopper (Triton adds a "
                                    "producer group and splits the tile over two consumer groups)")
                if self.FLATTEN:
                    problems.append("WARP_SPECIALIZE needs FLATTEN=False on Hopper")
                if self.EPILOGUE_SUBTILE:
                    problems.append("WARP_SPECIALIZE does not support EPILOGUE_SUBTILE in Triton "
                                    "3.6: set EPILOGUE_SUBTILE=False")
        smem = self.smem_bytes(k)
        if smem > smem_limit:
            problems.append(f"needs ~{smem} bytes of shared memory, more than the {smem_limit} a "
                            f"block may use: lower num_stages" +
                            (" or set EPILOGUE_SUBTILE=True" if k == "tma" and not
                             self.EPILOGUE_SUBTILE and not self.WARP_SPECIALIZE else ""))
        if problems:
            raise LaunchError(f"GEMM config {self} is not valid for kernel {_kernel_name(k)!r}: "
                              + "; ".join(problems))
        return self


def _waves(M: int, N: int, bm: int, bn: int, num_sms: int) -> int:
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    return triton.cdiv(tiles, num_sms)


def default_config(M: int, N: int, K: int, dtype="bf16", kernel: str = "tma",
                   num_sms: int = H200_NUM_SMS) -> GemmConfig:
    """The config to use on an H200 for this problem.

    Starting point: Triton's tutorial 09 (persistent matmul) and Triton-bench Hopper settings:
    ``128x256x64`` tiles, 8 warps (two wgmma warp groups, each 64x256), 3 stages for large
    bf16/fp16 GEMMs -- 213 KiB of shared memory with the TMA kernel's C staging buffer, the most
    that fits. Smaller problems use ``128x128x64`` (4 stages) when the big tile would leave the
    last wave mostly empty: the choice minimises ``waves * tile_cost`` with a 128x128 tile
    costing ~0.55 of a 128x256 one (half the MMA work, slightly worse operand reuse).
    ``GROUP_M=8`` keeps 8 row panels of A in L2 per column sweep of B.

    The TMA kernel defaults to the flattened software pipeline (``FLATTEN=True``) without warp
    specialisation: that is the robust Hopper path in Triton 3.6 and keeps the TTIR free of
    partitioning for Syncopate's passes. ``python -m syncopate.kernels.bench_local`` sweeps the
    alternatives (warp specialisation, epilogue subtiling, 4 stages) on a GPU.
    """
    _dtype_name(dtype)
    k = _short(kernel)
    big = GemmConfig(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8, num_stages=3)
    small = GemmConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                       num_warps=8 if k == "tma" else 4, num_stages=4)
    waves_big = _waves(M, N, 128, 256, num_sms)
    waves_small = _waves(M, N, 128, 128, num_sms)
    cfg = big if waves_big * 1.0 <= waves_small * 0.55 + 1e-9 else small
    if K <= 64:  # one K step: stages beyond 2 only cost shared memory
        cfg = cfg.replace(num_stages=2)
    return cfg


# ----------------------------------------------------------------------------------------------
# Compile arguments (the compiler API compiles these kernels with triton.compile(ASTSource(...)))
# ----------------------------------------------------------------------------------------------

_PARAMS = {
    "matmul_ptr_kernel": ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am", "stride_ak",
                          "stride_bk", "stride_bn", "stride_cm", "stride_cn"),
    "matmul_tma_persistent_kernel": ("a_ptr", "b_ptr", "c_ptr", "M", "N", "K", "stride_am",
                                     "stride_bk", "stride_cm"),
}
_UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn")


def kernel_fn(kernel: str):
    """The ``@triton.jit`` function of ``kernel`` ('ptr', 'tma' or the full name)."""
    return {"matmul_ptr_kernel": matmul_ptr_kernel,
            "matmul_tma_persistent_kernel": matmul_tma_persistent_kernel}[_kernel_name(kernel)]


def compile_args(kernel_name: str, dtype="bf16", config=None, *, num_sms: int = H200_NUM_SMS,
                 unit_inner_strides: bool = True) -> tuple[dict, dict]:
    """``(signature, constexprs)`` for ``triton.compile(ASTSource(fn, signature, constexprs))``.

    The signature lists every parameter, constexprs included (typed ``"constexpr"``), exactly as
    Triton's JIT builds it at launch. For the pointer kernel, ``unit_inner_strides`` makes
    ``stride_ak``, ``stride_bn`` and ``stride_cn`` constexprs equal to 1 -- what the JIT does
    for row-major operands (it specialises integer arguments equal to 1), and what makes the
    loads contiguous and vectorisable; pass False for the fully general kernel. ``num_sms`` is
    the persistent kernel's program count (``NUM_SMS``, the tile-loop step).

    Pair with :func:`compile_attrs` (divisibility hints the JIT would add for aligned shapes)
    and ``GemmConfig.options()`` (``num_warps``/``num_stages``) to get the kernel the launch
    wrapper runs.
    """
    name = _kernel_name(kernel_name)
    dt = _dtype_name(dtype)
    cfg = GemmConfig.of(config)
    signature = {}
    constexprs = {}
    for p in _PARAMS[name]:
        if p.endswith("_ptr"):
            signature[p] = f"*{dt}"
        elif name == KERNELS["ptr"] and unit_inner_strides and p in _UNIT_STRIDES:
            signature[p] = "constexpr"
            constexprs[p] = 1
        else:
            signature[p] = "i32"
    for k, v in cfg.constexprs(name, num_sms).items():
        signature[k] = "constexpr"
        constexprs[k] = v
    return signature, constexprs


def compile_attrs(kernel_name: str, *, unit_inner_strides: bool = True,
                  aligned: bool = True) -> dict:
    """``attrs`` for ``ASTSource``: ``tt.divisibility = 16`` on the pointers, the sizes and the
    leading strides, as Triton's JIT adds them when every one of those values is a multiple of
    16 (the case for the benchmark shapes and for 16-byte aligned torch allocations). Empty
    when ``aligned`` is False."""
    if not aligned:
        return {}
    name = _kernel_name(kernel_name)
    params = [p for p in _PARAMS[name]
              if not (name == KERNELS["ptr"] and unit_inner_strides and p in _UNIT_STRIDES)]
    return {(_PARAMS[name].index(p),): [["tt.divisibility", 16]] for p in params}


# ----------------------------------------------------------------------------------------------
# Launch
# ----------------------------------------------------------------------------------------------

def _torch_dtype_name(t) -> str | None:
    """``'bf16'``/``'fp16'`` for a tensor the local GEMMs take, None for any other dtype."""
    name = dtypes.canonical(t.dtype) if dtypes.is_known(t.dtype) else None
    return name if name in _SUPPORTED_DTYPES else None


def _tma_alloc(size: int, alignment: int, stream):
    import torch
    return torch.empty(size, device="cuda", dtype=torch.int8)


def ensure_tma_allocator() -> None:
    """Install a torch-backed ``triton.set_allocator`` unless one is already set.

    Device-side tensor descriptors (``tl.make_tensor_descriptor``) are written by the kernel
    into a global scratch buffer (128 bytes per descriptor per program) that Triton requests
    from this allocator at every launch. Triton keeps the allocator in a ``ContextVar``, so
    this checks the current context each time (cheap) rather than a process-wide flag: a new
    thread starts without one. An allocator the user installed is left alone. The torch
    caching allocator makes the per-launch request free and stream-ordered.
    """
    try:
        from triton.runtime._allocation import NullAllocator, _allocator
        installed = not isinstance(_allocator.get(), NullAllocator)
    except ImportError:  # private API moved: install unconditionally
        installed = False
    if not installed:
        triton.set_allocator(_tma_alloc)


_NUM_SMS_CACHE: dict[int, int] = {}


def num_sms(device=None) -> int:
    """Multiprocessor count of a CUDA device (cached)."""
    import torch
    idx = torch.device(device if device is not None else "cuda").index
    if idx is None:
        idx = torch.cuda.current_device()
    if idx not in _NUM_SMS_CACHE:
        _NUM_SMS_CACHE[idx] = torch.cuda.get_device_properties(idx).multi_processor_count
    return _NUM_SMS_CACHE[idx]


def _max_offset(t) -> int:
    return sum((s - 1) * abs(st) for s, st in zip(t.shape, t.stride()))


def _overlaps(x, y) -> bool:
    if x.numel() == 0 or y.numel() == 0:
        return False
    xs, ys = x.element_size(), y.element_size()
    x0, y0 = x.data_ptr(), y.data_ptr()
    x1 = x0 + (_max_offset(x) + 1) * xs
    y1 = y0 + (_max_offset(y) + 1) * ys
    return x0 < y1 and y0 < x1


def check_operands(a, b, out=None, kernel: str = "tma") -> tuple[int, int, int]:
    """Validate ``matmul``'s operands; return ``(M, N, K)``. Raises :class:`LaunchError`.

    Runs entirely on the host (works on CPU tensors), device last, so the checks are testable
    without a GPU.
    """
    import torch
    k = _short(kernel)
    for name, t in (("a", a), ("b", b)) + ((("out", out),) if out is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise LaunchError(f"{name} must be 2-D, got shape {tuple(t.shape)}: reshape it to a "
                              f"matrix (e.g. x.flatten(0, -2) for a batch of rows)")
    if a.dtype != b.dtype:
        raise LaunchError(f"a and b must have the same dtype, got a: {a.dtype}, b: {b.dtype}; "
                          f"cast one of them (e.g. b.to({a.dtype}))")
    if _torch_dtype_name(a) is None:
        raise LaunchError(f"a and b must be torch.bfloat16 or torch.float16, got {a.dtype}; "
                          f"cast them (e.g. a.to(torch.bfloat16))")
    M, K = a.shape
    K2, N = b.shape
    if K != K2:
        raise LaunchError(f"shape mismatch: a is {tuple(a.shape)} ([M, K]) and b is "
                          f"{tuple(b.shape)} ([K, N]); b.shape[0] must equal a.shape[1] = {K} "
                          f"(pass b, not b.T, if b is stored [N, K])")
    if out is not None:
        if tuple(out.shape) != (M, N):
            raise LaunchError(f"out must have shape (M, N) = {(M, N)}, got {tuple(out.shape)}")
        if out.dtype != a.dtype:
            raise LaunchError(f"out must have the operands' dtype {a.dtype}, got {out.dtype}")
        if out.numel() > 1 and any(st == 0 for s, st in zip(out.shape, out.stride()) if s > 1):
            raise LaunchError("out has a zero stride (an expanded view): tiles would race on the "
                              "same elements; pass a dense tensor")
        if _overlaps(out, a) or _overlaps(out, b):
            raise LaunchError("out overlaps a or b in memory; pass a separate output buffer")
    tensors = (("a", a), ("b", b)) + ((("out", out),) if out is not None else ())
    if M == 0 or N == 0 or K == 0:
        pass  # nothing is launched (empty result, or zeros for K == 0): layouts do not matter
    elif k == "tma":
        for name, t in tensors:
            rows, cols = t.shape
            if t.stride(1) != 1 and cols > 1:
                raise LaunchError(
                    f"kernel='tma' needs {name} row-major with unit inner stride, got strides "
                    f"{tuple(t.stride())} (non-contiguous): pass {name}.contiguous(), or use "
                    f"kernel='ptr' which takes any strides")
            if rows > 1 and (t.stride(0) * t.element_size()) % 16:
                raise LaunchError(
                    f"kernel='tma' needs {name}'s row stride to be a multiple of 16 bytes (TMA), "
                    f"got {t.stride(0)} elements of {t.element_size()} bytes: pad the row length "
                    f"to a multiple of {16 // t.element_size()}, or use kernel='ptr'")
            if t.data_ptr() % 16:
                raise LaunchError(f"kernel='tma' needs {name} 16-byte aligned (TMA), got address "
                                  f"{t.data_ptr():#x}: pass a fresh tensor or {name}.clone(), or "
                                  f"use kernel='ptr'")
    else:
        for name, t in tensors:
            if _max_offset(t) >= 2**31 or any(st < 0 for st in t.stride()):
                raise LaunchError(f"kernel='ptr' uses 32-bit element offsets and non-negative "
                                  f"strides; {name} (shape {tuple(t.shape)}, strides "
                                  f"{tuple(t.stride())}) exceeds that: use kernel='tma'")
    for name, t in tensors[1:]:
        if t.device != a.device:
            raise LaunchError(f"{name} is on {t.device} but a is on {a.device}; put all operands "
                              f"on the same CUDA device")
    if a.device.type != "cuda":
        raise LaunchError(f"the GEMM kernels run on a CUDA device; operands are on {a.device}: "
                          f"move them with .cuda()")
    return M, N, K


def _tma_row_stride(t) -> int:
    """The row stride to put in a TMA descriptor: a single-row tensor's stride is arbitrary in
    torch but must still be a multiple of 16 bytes for TMA, so use the padded row length."""
    if t.shape[0] > 1:
        return t.stride(0)
    per16 = 16 // t.element_size()
    return triton.cdiv(max(t.shape[1], 1), per16) * per16


def make_launcher(a, b, out=None, *, kernel: str = "tma", config=None):
    """Validate once and return ``(launch, out)``: ``launch()`` enqueues ``out = a @ b`` on the
    current stream with no host-side checks (what the benchmark times). Same arguments and
    errors as :func:`matmul`."""
    import torch
    k = _short(kernel)
    M, N, K = check_operands(a, b, out, k)
    if out is None:
        out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    if M == 0 or N == 0:
        return (lambda: None), out
    if K == 0:
        return out.zero_, out
    cfg = GemmConfig.of(config) if config is not None else default_config(M, N, K, a.dtype, k)
    cfg.check(k)
    device = a.device
    if k == "ptr":
        grid = (triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N),)
        args = (a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                out.stride(0), out.stride(1))
        kwargs = dict(**cfg.constexprs(k), **cfg.options())

        def launch():
            with torch.cuda.device(device):
                matmul_ptr_kernel[grid](*args, **kwargs)
    else:
        sms = num_sms(device)
        tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
        grid = (min(sms, tiles),)
        args = (a, b, out, M, N, K, _tma_row_stride(a), _tma_row_stride(b), _tma_row_stride(out))
        kwargs = dict(**cfg.constexprs(k, sms), **cfg.options())

        def launch():
            ensure_tma_allocator()
            with torch.cuda.device(device):
                matmul_tma_persistent_kernel[grid](*args, **kwargs)
    return launch, out


def matmul(a, b, out=None, *, kernel: str = "tma", config=None):
    """``out = a @ b`` with a local Triton GEMM: ``a`` ``[M, K]``, ``b`` ``[K, N]``, bf16 or fp16,
    fp32 accumulation, result in the operands' dtype (written into ``out`` when given).

    ``kernel='tma'`` (persistent, TMA; needs row-major operands with 16-byte aligned rows) or
    ``'ptr'`` (one program per tile; any strides). ``config``: a :class:`GemmConfig`, a dict of
    its fields or None for :func:`default_config`. Bad input raises :class:`LaunchError`
    before anything is launched.
    """
    launch, out = make_launcher(a, b, out, kernel=kernel, config=config)
    launch()
    return out
