"""Configurations and compile arguments of the local GEMM kernels (:mod:`.gemm`).

:class:`GemmConfig` (tile sizes and compile options, with the checks that say what to change
when a kernel cannot run one), :func:`heuristic_config` (the analytical choice for a problem
size; :func:`.gemm_table.default_config` consults the tuned table first), split-K sizing
(:func:`split_k_for`, :func:`with_split_k`), and the ``(signature, constexprs)`` / ``attrs``
that ``triton.compile(ASTSource(...))`` needs (:func:`compile_args`, :func:`compile_attrs`,
:func:`splitk_compile_args`).  Split from :mod:`.gemm` so that the kernels'
module holds the ``@triton.jit`` functions only; nothing here needs a GPU or torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, replace

import triton

from .. import dtypes
from ..errors import LaunchError

#: Kernel names as the compiler API and the CORPUS spell them, with the wrapper's short aliases.
KERNELS = {"ptr": "matmul_ptr_kernel", "tma": "matmul_tma_persistent_kernel"}

#: Largest dynamic shared memory one block may use on sm_90 (H100/H200): 227 KiB.
SMEM_LIMIT_SM90 = 232448

#: Streaming multiprocessors of an H200 (and H100 SXM); the default ``NUM_SMS`` for compiles
#: that have no device to ask.
H200_NUM_SMS = 132

_SUPPORTED_DTYPES = ("bf16", "fp16")


def short_name(kernel: str, names: dict, what: str, error=ValueError) -> str:
    """The short name (a key of ``names``: 'ptr', 'tma') of ``kernel``, given short or full;
    ``error`` naming every choice otherwise (``what``: the kernels, e.g. 'FP8 GEMM')."""
    for short, full in names.items():
        if kernel == short or kernel == full:
            return short
    raise error(f"unknown {what} kernel {kernel!r}; choose one of "
                f"{', '.join(sorted(names) + sorted(names.values()))}")


def _short(kernel: str) -> str:
    return short_name(kernel, KERNELS, "GEMM")


def _kernel_name(kernel: str) -> str:
    return KERNELS[_short(kernel)]


def _dtype_name(dtype) -> str:
    """``'bf16'`` or ``'fp16'`` from a torch dtype, a Triton dtype or a string (any spelling
    :func:`syncopate.dtypes.canonical` takes; an unknown name raises its ``DtypeError``)."""
    s = dtypes.canonical(dtype)
    if s not in _SUPPORTED_DTYPES:
        raise ValueError(f"unsupported GEMM dtype {dtype!r}; the local GEMMs take bfloat16 or "
                         f"float16 operands (fp32 accumulation)")
    return s


class TileConfig:
    """What the kernels' config dataclasses share (:class:`GemmConfig`,
    :class:`~.attention_config.AttentionConfig`, :class:`~.grouped_gemm_launch.GroupedGemmConfig`):
    conversion from a dict of fields, the Triton compile options, and the checks every tile
    size and pipeline depth must pass. ``_NAMES``: how error messages name the config
    (the kernels, the class)."""

    _NAMES = ("", "")

    @classmethod
    def _of(cls, config, base=None) -> "TileConfig":
        """``config`` if it is one, ``base`` (default ``cls()``) with a dict's fields replaced,
        ``base`` for None."""
        if isinstance(config, cls):
            return config
        base = cls() if base is None else base
        if config is None:
            return base
        what, name = cls._NAMES
        if isinstance(config, dict):
            unknown = set(config) - set(cls.__dataclass_fields__)
            if unknown:
                raise LaunchError(f"unknown {what} config keys {sorted(unknown)}; valid keys are "
                                  f"{sorted(cls.__dataclass_fields__)}")
            return replace(base, **config)
        raise LaunchError(f"config must be {name}, a dict or None, not {type(config).__name__}")

    def as_dict(self) -> dict:
        return asdict(self)

    def replace(self, **changes):
        return replace(self, **changes)

    def options(self) -> dict:
        """Triton compile options (``triton.compile(..., options=...)`` or launch kwargs)."""
        return dict(num_warps=self.num_warps, num_stages=self.num_stages)

    def _pow2_problems(self, fields) -> list[str]:
        """The ``fields`` that are not positive powers of two, as messages."""
        return [f"{f}={v!r} must be a positive power of two" for f in fields
                if not isinstance(v := getattr(self, f), int) or v < 1 or v & (v - 1)]

    def _stages_problems(self) -> list[str]:
        if not isinstance(self.num_stages, int) or self.num_stages < 1:
            return [f"num_stages={self.num_stages!r} must be a positive integer"]
        return []


#: ``(BLOCK_M, BLOCK_N, BLOCK_K, num_stages)`` of the TMA kernel that ran correctly with
#: ``WARP_SPECIALIZE`` on an H200 over the broad shape set (``syncopate.bench.local --tune``,
#: bf16 and fp16, ragged sizes included; bench/results/2026-12-02-h200x1-local-gemm). Triton 3.6's
#: automatic warp specialisation produced NaN tiles with 128x128x64 / 5 stages on every shape,
#: so a warp-specialised config is refused unless its tile was verified.
WARP_SPECIALIZED_TILES = frozenset({(128, 256, 64, 3)})


@dataclass(frozen=True)
class GemmConfig(TileConfig):
    """Tile sizes and compile options of one GEMM launch.

    The upper-case fields are constexprs of the kernels; ``num_warps``/``num_stages`` are Triton
    compile options. ``WARP_SPECIALIZE``, ``FLATTEN`` and ``EPILOGUE_SUBTILE`` only apply to the
    TMA kernel (the pointer kernel ignores them).

    ``num_warps`` is per partition: with ``WARP_SPECIALIZE`` Triton's Hopper warp
    specialisation turns ``num_warps=4`` into one producer warp group plus two consumer warp
    groups (12 warps in all, each consumer group owning ``BLOCK_M/2`` rows); it requires
    ``num_warps == 4``, ``FLATTEN=False`` and no ``EPILOGUE_SUBTILE`` (Triton 3.6 crashes or
    silently does not specialise otherwise), which :meth:`check` enforces.

    ``SPLIT_K > 1`` selects the split-K variant of the TMA kernel
    (:mod:`.gemm_splitk`: ``tiles * SPLIT_K`` work units writing fp32 partials, then a
    deterministic reduction launch) for problems with too few output tiles to fill the GPU.
    The local :func:`~.gemm_launch.matmul` runs it; the fused ops cannot
    (``check(..., fusable=True)`` refuses it, as it refuses ``WARP_SPECIALIZE``).
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
    SPLIT_K: int = 1

    _NAMES = ("GEMM", "a GemmConfig")

    def __hash__(self) -> int:
        """The fields' hash, computed once: a config is part of every eager op call's key
        (``ops/driver.gemm_key``), and the generated hash of eleven fields cost ~1 us per
        call on an H200 host."""
        h = self.__dict__.get("_hash")
        if h is None:
            h = hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)))
            object.__setattr__(self, "_hash", h)
        return h

    @classmethod
    def of(cls, config) -> "GemmConfig":
        """A config from a :class:`GemmConfig`, a dict of its fields, or None (defaults)."""
        return cls._of(config)

    @property
    def fusable(self) -> bool:
        """Whether the fused ops can compile this config: no warp specialisation (the inserted
        waits synchronise the whole program, which partitions cannot) and no split-K (a second
        launch and a workspace the compiler's chunk model does not know)."""
        return not self.WARP_SPECIALIZE and self.SPLIT_K == 1

    def constexprs(self, kernel: str, num_sms: int = H200_NUM_SMS) -> dict:
        """The kernel's tile constexprs (without the unit strides :func:`compile_args` adds).
        ``kernel`` 'splitk' gives the split-K partial kernel's."""
        c = dict(BLOCK_M=self.BLOCK_M, BLOCK_N=self.BLOCK_N, BLOCK_K=self.BLOCK_K,
                 GROUP_M=self.GROUP_M)
        if kernel == "splitk":
            c.update(SPLIT_K=int(self.SPLIT_K), NUM_SMS=int(num_sms),
                     EPILOGUE_SUBTILE=bool(self.EPILOGUE_SUBTILE), FLATTEN=bool(self.FLATTEN))
            return c
        if _short(kernel) == "tma":
            c.update(NUM_SMS=int(num_sms), EPILOGUE_SUBTILE=bool(self.EPILOGUE_SUBTILE),
                     FLATTEN=bool(self.FLATTEN), WARP_SPECIALIZE=bool(self.WARP_SPECIALIZE))
        return c

    def smem_bytes(self, kernel: str, elem_bytes: int = 2, c_bytes: int | None = None) -> int:
        """Shared memory the config needs (matches Triton 3.6's allocation within a few bytes):
        ``num_stages`` A and B buffers, plus the C staging buffer of the TMA store (``c_bytes``
        per element; default fp32 partials for split-K, else ``elem_bytes``)."""
        stage = (self.BLOCK_M * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N) * elem_bytes
        total = self.num_stages * stage
        if _short(kernel) == "tma":
            c_block_n = self.BLOCK_N // 2 if self.EPILOGUE_SUBTILE else self.BLOCK_N
            if c_bytes is None:
                c_bytes = 4 if self.SPLIT_K > 1 else elem_bytes
            total += self.BLOCK_M * c_block_n * c_bytes + 1024  # + barriers, descriptors
        return total

    def check(self, kernel: str, *, fusable: bool = False) -> "GemmConfig":
        """Raise :class:`LaunchError` saying what to change if ``kernel`` cannot run this config
        (``fusable``: inside a fused op, which takes neither split-K nor warp specialisation)."""
        k = _short(kernel)
        problems = []
        if not isinstance(self.SPLIT_K, int) or isinstance(self.SPLIT_K, bool) or \
                not 1 <= self.SPLIT_K <= 16:
            problems.append(f"SPLIT_K={self.SPLIT_K!r} must be an integer from 1 to 16")
        elif self.SPLIT_K > 1:
            if k != "tma":
                problems.append("SPLIT_K > 1 runs the split-K TMA kernel: use kernel='tma' or "
                                "'auto', or set SPLIT_K=1 for kernel='ptr'")
            if self.WARP_SPECIALIZE:
                problems.append("the split-K kernel is not warp-specialised: set "
                                "WARP_SPECIALIZE=False or SPLIT_K=1")
            if fusable:
                problems.append("the fused ops cannot run split-K (a second launch and an fp32 "
                                "workspace): set SPLIT_K=1")
        if fusable and self.WARP_SPECIALIZE:
            problems.append("the fused ops cannot run a warp-specialised GEMM (the inserted waits "
                            "synchronise the whole program, which partitions cannot): set "
                            "WARP_SPECIALIZE=False")
        problems += self._pow2_problems(("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps"))
        if self.BLOCK_K < 16 or self.BLOCK_M < 16 or self.BLOCK_N < 16:
            problems.append("BLOCK_M, BLOCK_N and BLOCK_K must be >= 16 (tl.dot's minimum)")
        problems += self._stages_problems()
        if k == "tma":
            if max(self.BLOCK_M, self.BLOCK_N, self.BLOCK_K) > 256:
                problems.append("TMA boxes are at most 256 elements per dimension: keep BLOCK_M, "
                                "BLOCK_N, BLOCK_K <= 256")
            if self.WARP_SPECIALIZE:
                tile = (self.BLOCK_M, self.BLOCK_N, self.BLOCK_K, self.num_stages)
                if tile not in WARP_SPECIALIZED_TILES:
                    problems.append(
                        f"WARP_SPECIALIZE is allowed only for the tiles verified on an H200 "
                        f"(BLOCK_M, BLOCK_N, BLOCK_K, num_stages in "
                        f"{sorted(WARP_SPECIALIZED_TILES)}), not {tile}: 128x128x64 with 5 "
                        f"stages wrote wrong tiles (NaN) under Triton 3.6's warp "
                        f"specialisation; set WARP_SPECIALIZE=False")
                if self.num_warps != 4:
                    problems.append("WARP_SPECIALIZE needs num_warps=4 on Hopper (Triton adds a "
                                    "producer group and splits the tile over two consumer groups)")
                if self.FLATTEN:
                    problems.append("WARP_SPECIALIZE needs FLATTEN=False on Hopper")
                if self.EPILOGUE_SUBTILE:
                    problems.append("WARP_SPECIALIZE does not support EPILOGUE_SUBTILE in Triton "
                                    "3.6: set EPILOGUE_SUBTILE=False")
        smem = self.smem_bytes(k)
        if smem > SMEM_LIMIT_SM90:
            problems.append(f"needs ~{smem} bytes of shared memory, more than the "
                            f"{SMEM_LIMIT_SM90} a block may use: lower num_stages" +
                            (" or set EPILOGUE_SUBTILE=True" if k == "tma" and not
                             self.EPILOGUE_SUBTILE and not self.WARP_SPECIALIZE else ""))
        if problems:
            raise LaunchError(f"GEMM config {self} is not valid for kernel {_kernel_name(k)!r}: "
                              + "; ".join(problems))
        return self


def _wide_tiles_win(M: int, N: int, num_sms: int) -> bool:
    """Whether 128x256 tiles beat 128x128 ones: ``waves * tile_cost`` with a 128x128 tile
    costing ~0.55 of a 128x256 one (:func:`heuristic_config`)."""
    waves = [triton.cdiv(triton.cdiv(M, 128) * triton.cdiv(N, bn), num_sms) for bn in (256, 128)]
    return waves[0] * 1.0 <= waves[1] * 0.55 + 1e-9


def split_k_for(M: int, N: int, K: int, cfg: GemmConfig, num_sms: int = H200_NUM_SMS) -> int:
    """How many K slabs make ``cfg``'s tiles fill ``num_sms`` SMs: 1 unless the problem has at
    most half as many tiles as SMs. Each split keeps at least 4 K tiles (a shorter K loop is
    mostly pipeline prologue and epilogue) and there are at most 16 splits."""
    tiles = triton.cdiv(M, cfg.BLOCK_M) * triton.cdiv(N, cfg.BLOCK_N)
    if 2 * tiles > num_sms:
        return 1
    k_tiles = triton.cdiv(K, cfg.BLOCK_K)
    return max(1, min(16, num_sms // tiles, k_tiles // 4))


def with_split_k(cfg: GemmConfig, split: int) -> GemmConfig:
    """``cfg`` with ``SPLIT_K=split``: the fp32 partial staging buffer is twice the bf16 one, so
    a split config stores C in two halves (``EPILOGUE_SUBTILE``) and drops pipeline stages
    until it fits; no warp specialisation (the split kernel has none); and the K loop is
    pipelined on its own (``FLATTEN=False``): a split problem gives each program about one work
    unit, so there is no next tile whose loads could overlap this one's epilogue."""
    if split <= 1:
        return cfg.replace(SPLIT_K=1)
    warps = cfg.num_warps
    if cfg.WARP_SPECIALIZE:  # 4 warps per partition there; one program of all of them here
        warps = 8 if cfg.BLOCK_M >= 128 else 4
    out = cfg.replace(SPLIT_K=int(split), EPILOGUE_SUBTILE=True, WARP_SPECIALIZE=False,
                      FLATTEN=False, num_warps=warps)
    while out.num_stages > 2 and out.smem_bytes("tma") > SMEM_LIMIT_SM90:
        out = out.replace(num_stages=out.num_stages - 1)
    return out


def heuristic_config(M: int, N: int, K: int, dtype="bf16", kernel: str = "tma",
                     num_sms: int = H200_NUM_SMS, *, fusable: bool = True) -> GemmConfig:
    """The analytical choice, used where no tuned table entry is near (see
    :func:`.gemm_table.default_config`).

    Starting point: Triton's tutorial 09 (persistent matmul) and Triton-bench Hopper settings:
    ``128x256x64`` tiles, 8 warps (two wgmma warp groups, each 64x256), 3 stages for large
    bf16/fp16 GEMMs -- 213 KiB of shared memory with the TMA kernel's C staging buffer, the most
    that fits. Smaller problems use ``128x128x64`` (4 stages) when the big tile would leave the
    last wave mostly empty: the choice minimises ``waves * tile_cost`` with a 128x128 tile
    costing ~0.55 of a 128x256 one (half the MMA work, slightly worse operand reuse).
    ``GROUP_M=8`` keeps 8 row panels of A in L2 per column sweep of B.

    ``M <= 64`` (decode): the GEMM streams B once and is bound by DRAM, not by the tensor
    cores, so the tile is one wgmma warp group tall (``BLOCK_M=64``, 4 warps), ``BLOCK_K=128``
    with 5 stages keeps ~160 KiB of B in flight per SM, and ``BLOCK_N`` is 64 when 128 would
    leave SMs without a column panel.

    With ``fusable=False`` (the local matmul) a problem with at most half as many tiles as SMs
    is split along K (:func:`split_k_for`, :mod:`.gemm_splitk`).

    The TMA kernel defaults to the flattened software pipeline (``FLATTEN=True``) without warp
    specialisation: the robust Hopper path in Triton 3.6, and the one the fused ops can take.
    """
    _dtype_name(dtype)
    k = _short(kernel)
    if k == "tma" and M <= 64:
        bn = 128 if triton.cdiv(N, 128) >= num_sms else 64
        cfg = GemmConfig(BLOCK_M=64, BLOCK_N=bn, BLOCK_K=128, GROUP_M=8, num_warps=4,
                         num_stages=5 if bn == 64 else 4)
    else:
        big = GemmConfig(BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_warps=8,
                         num_stages=3)
        small = GemmConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                           num_warps=8 if k == "tma" else 4, num_stages=4)
        cfg = big if _wide_tiles_win(M, N, num_sms) else small
    if K <= cfg.BLOCK_K:  # one K step: stages beyond 2 only cost shared memory
        cfg = cfg.replace(num_stages=2)
    if k == "tma" and not fusable:
        cfg = with_split_k(cfg, split_k_for(M, N, K, cfg, num_sms))
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


def signature_of(params, ptr_type, unit_strides, constexprs: dict) -> tuple[dict, dict]:
    """``(signature, constexprs)`` as Triton's JIT builds them: ``ptr_type(p)`` for the
    ``*_ptr`` parameters, the ``unit_strides`` as constexprs equal to 1 (the JIT specialises an
    integer argument equal to 1), every other parameter i32, then ``constexprs``."""
    signature, cx = {}, {}
    for p in params:
        if p.endswith("_ptr"):
            signature[p] = ptr_type(p)
        elif p in unit_strides:
            signature[p], cx[p] = "constexpr", 1
        else:
            signature[p] = "i32"
    for k, v in constexprs.items():
        signature[k], cx[k] = "constexpr", v
    return signature, cx


def divisibility(params, skip=()) -> dict:
    """``attrs`` with ``tt.divisibility = 16`` on every parameter but ``skip``."""
    return {(i,): [["tt.divisibility", 16]] for i, p in enumerate(params) if p not in skip}


def _unit(name: str, unit_inner_strides: bool) -> tuple:
    return _UNIT_STRIDES if name == KERNELS["ptr"] and unit_inner_strides else ()


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
    return signature_of(_PARAMS[name], lambda p: f"*{dt}", _unit(name, unit_inner_strides),
                        GemmConfig.of(config).constexprs(name, num_sms))


def compile_attrs(kernel_name: str, *, unit_inner_strides: bool = True,
                  aligned: bool = True) -> dict:
    """``attrs`` for ``ASTSource``: ``tt.divisibility = 16`` on the pointers, the sizes and the
    leading strides, as Triton's JIT adds them when every one of those values is a multiple of
    16 (the case for the benchmark shapes and for 16-byte aligned torch allocations). Empty
    when ``aligned`` is False."""
    if not aligned:
        return {}
    name = _kernel_name(kernel_name)
    return divisibility(_PARAMS[name], _unit(name, unit_inner_strides))


#: Block of :func:`.gemm_splitk.splitk_reduce_kernel`: 32 x 256 fp32 per program with 4 warps (64 elements,
#: i.e. 16 vectorised 16-byte loads per thread and split), enough to stream at DRAM speed.
REDUCE_BLOCK_M = 32
REDUCE_BLOCK_N = 256
REDUCE_NUM_WARPS = 4

_SPLITK_PARAMS = ("a_ptr", "b_ptr", "ws_ptr", "M", "N", "K", "stride_am", "stride_bk",
                  "stride_ws")
_REDUCE_PARAMS = ("ws_ptr", "c_ptr", "M", "N", "m_pad", "stride_ws", "stride_cm", "stride_cn")


def splitk_compile_args(dtype="bf16", config=None, *, num_sms: int = H200_NUM_SMS,
                        aligned: bool = True) -> list[tuple[str, dict, dict, dict]]:
    """``[(name, signature, constexprs, attrs), ...]`` of the split-K variant's two kernels
    (:mod:`.gemm_splitk`), as the launcher compiles them for row-major aligned operands
    (``aligned``: the divisibility hints of sizes that are multiples of 16, and C's unit inner
    stride). Options: ``config.options()`` for the partial kernel, ``num_warps=4,
    num_stages=1`` for the reduction."""
    dt = _dtype_name(dtype)
    cfg = GemmConfig.of(config)
    sig, cx = signature_of(_SPLITK_PARAMS, lambda p: "*fp32" if p == "ws_ptr" else f"*{dt}", (),
                           cfg.constexprs("splitk", num_sms))
    attrs = divisibility(_SPLITK_PARAMS) if aligned else {}
    rsig, rcx = signature_of(_REDUCE_PARAMS, lambda p: "*fp32" if p == "ws_ptr" else f"*{dt}",
                             ("stride_cn",) if aligned else (),
                             {"SPLIT_K": int(cfg.SPLIT_K), "BLOCK_M": REDUCE_BLOCK_M,
                              "BLOCK_N": REDUCE_BLOCK_N})
    rattrs = divisibility(_REDUCE_PARAMS, ("stride_cn",)) if aligned else {}
    return [("matmul_tma_splitk_kernel", sig, cx, attrs),
            ("splitk_reduce_kernel", rsig, rcx, rattrs)]
