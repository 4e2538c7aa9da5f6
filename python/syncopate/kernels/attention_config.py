"""Configurations of the attention kernels and the per-GPU table of the fast ones.

Why a module of its own: the forward (:mod:`.attention`), the zigzag forward
(:mod:`.attention_zigzag`) and the backward (:mod:`.attention_bwd`) all take an
:class:`AttentionConfig`, and their fast variants pick theirs from a table measured per GPU, as
the GEMMs do (:mod:`.gemm_table`): on Hopper the best tile, pipeline depth and warp
specialisation depend on the head dim, the mask and the GPU in ways no formula captures, and a
table tuned once (``scripts/bench_attention.py --sweep --tune-out``) gives every user the
measured choice without a tuning run.

Two kinds of kernel take these configs, and the difference is the point of the split:

* the **fusable** kernels (``attn_fwd_kernel``, ``attn_zigzag_fwd_kernel``, the backward's
  ``attn_bwd_dq_kernel`` / ``attn_bwd_dkdv_kernel``): pointer loads and one plain KV loop, the
  shape the compiler fuses with communication (ring attention, Ulysses, the context-parallel
  backward).  Their configs never warp-specialise (``insert-waits`` refuses a wait inside a
  ``tl.range(..., warp_specialize=True)`` loop) and come from :func:`default_config` /
  the backward's default, never from the table (an op's fused and unfused paths must run the
  same config to agree bit for bit);
* the **fast** kernels (``attn_fwd_fast_kernel``, ``attn_bwd_*_fast_kernel``): TMA tensor
  descriptors, a causal loop split so no mask sits in the unmasked blocks, Hopper warp
  specialisation where Triton applies it.  What ``syncopate.kernels.attention(...)`` runs.

Where a fast config comes from, in the order :func:`lookup` consults them:

1. ``$SYNCOPATE_ATTENTION_TABLE`` when set: a table file used *instead* of 2 and 3 (``off``: no
   table, :func:`fast_default_config` only);
2. the user's tuning cache ``<cache dir>/attention/<gpu>.json`` (the cache dir of
   :func:`~.gemm_table.cache_dir`);
3. the defaults shipped in ``configs/attention-<gpu>.json``.

An entry is one measured shape class: ``kernel`` (``fwd``, ``bwd_dq``, ``bwd_dkdv``),
``dtype``, ``D``, ``causal``, a representative sequence length ``S`` and the best ``config``
(with the times it was measured at; ``"measured": false`` marks a seed -- the heuristic's
choice written down before any GPU run).  A query takes the entry of its kernel, dtype, head
dim and mask nearest in ``|log2 S/S'|``; none: :func:`fast_default_config`.
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path

from .. import settings
from ..errors import LaunchError
from .gemm_config import SMEM_LIMIT_SM90, TileConfig
from .gemm_table import (FORMAT, SHIPPED_DIR, cache_dir, first_entries, read_table_file,
                         table_files, write_table_file)

SUPPORTED_DTYPES = ("bf16", "fp16")
SUPPORTED_HEAD_DIMS = (64, 128)

#: The kernels a table entry can be for.
TABLE_KERNELS = ("fwd", "bwd_dq", "bwd_dkdv")

#: The only pipeline depth the warp-specialised forward runs with.  The first GPU run (one
#: H100, Triton 3.6, 2026-12-07) measured every warp-specialised config: with 2 stages the
#: output was right on every shape; with 3 (``128x64w4s3+ws``, ``128x128w4s3+ws``) it was NaN
#: in every query block that visits three or more KV blocks -- the first use of the third K/V
#: buffer -- while blocks with one or two KV blocks were right.  The sm_90 TTGIR and PTX
#: compiled here show consistent barrier indices and phases for 3 buffers, so the cause is
#: below what the CPU can show; until a GPU run shows a depth correct, only 2 is allowed.
WS_STAGES = 2

#: Why a table entry whose config sets ``PEEL_DIAGONAL`` is refused: the option (the
#: warp-specialised forward's diagonal blocks masked after its loop) was removed on 2026-12-07.
#: A table tuned while it existed names the field in every config (``write_table`` writes all
#: fields); ``false`` is the kernel that remains and is read as such.
_PEEL_REMOVED = ("PEEL_DIAGONAL was removed (2026-12-07): on an H100 with Triton 3.6 the "
                 "peeled warp-specialised forward gave NaN in every causal case it ran, so the "
                 "entry's measurement is of a kernel that no longer exists")


@dataclass(frozen=True)
class AttentionConfig(TileConfig):
    """Tile sizes (constexprs) and compile options of one attention launch.

    ``WARP_SPECIALIZE``: the fast kernels' KV loop as ``tl.range(..., warp_specialize=True)``.
    On Hopper Triton 3.6 then splits the program into a TMA producer warp group and two
    consumer warp groups of ``BLOCK_M / 2`` rows each (``num_warps=4`` becomes 12 warps); it
    does so only for one loop per kernel, so the warp-specialised forward runs its KV loop
    once with the mask applied where the shape needs it (see :mod:`.attention`).  The fusable
    kernels refuse it.
    """

    BLOCK_M: int = 128
    BLOCK_N: int = 64
    num_warps: int = 8
    num_stages: int = 3
    WARP_SPECIALIZE: bool = False

    _NAMES = ("attention", "an AttentionConfig")

    @classmethod
    def of(cls, config, head_dim: int = 128, base: "AttentionConfig | None" = None
           ) -> "AttentionConfig":
        """A config from an :class:`AttentionConfig`, a dict of its fields (the others from
        ``base``, default :func:`default_config` of ``head_dim``), or None (``base``)."""
        if base is None and not isinstance(config, AttentionConfig):
            base = default_config(head_dim)
        return cls._of(config, base)

    def smem_bytes(self, head_dim: int, elem_bytes: int = 2) -> int:
        """Rough shared memory of the forward: Q once, K and V per stage (plus, warp
        specialised, one more K/V buffer the producer fills ahead)."""
        stages = self.num_stages + (1 if self.WARP_SPECIALIZE else 0)
        return (self.BLOCK_M + 2 * stages * self.BLOCK_N) * head_dim * elem_bytes

    def short(self) -> str:
        """``128x64w8s3`` (``+ws`` when warp specialised): for tables and logs."""
        return (f"{self.BLOCK_M}x{self.BLOCK_N}w{self.num_warps}s{self.num_stages}"
                + ("+ws" if self.WARP_SPECIALIZE else ""))

    def check(self, head_dim: int, fusable: bool = False, kernel: str = "fwd"
              ) -> "AttentionConfig":
        """Raise :class:`LaunchError` saying what to change if the kernel cannot run this
        (``fusable``: the kernel the compiler fuses, which cannot be warp specialised;
        ``kernel``: one of :data:`TABLE_KERNELS` -- the backward kernels refuse warp
        specialisation themselves, the forward takes it with :data:`WS_STAGES` stages only)."""
        problems = self._pow2_problems(("BLOCK_M", "BLOCK_N", "num_warps"))
        if not problems and min(self.BLOCK_M, self.BLOCK_N) < 16:
            problems.append("BLOCK_M and BLOCK_N must be >= 16 (tl.dot's minimum)")
        problems += self._stages_problems()
        if not isinstance(self.WARP_SPECIALIZE, bool):
            problems.append(f"WARP_SPECIALIZE={self.WARP_SPECIALIZE!r} must be a bool")
        elif self.WARP_SPECIALIZE and fusable:
            problems.append("WARP_SPECIALIZE=True: the fusable kernel (what ring attention, "
                            "Ulysses and the context-parallel backward compile) cannot be warp "
                            "specialised -- chunk waits cannot sit inside a warp-specialised "
                            "loop; drop it or call the fast kernel (fusable=False)")
        elif self.WARP_SPECIALIZE and kernel == "fwd" and self.num_stages != WS_STAGES:
            problems.append(f"WARP_SPECIALIZE=True with num_stages={self.num_stages}: the "
                            f"warp-specialised forward is only correct with num_stages="
                            f"{WS_STAGES} (on an H100 with Triton 3.6, 3 stages gave NaN from "
                            f"the third KV block on; other depths were never run); use "
                            f"num_stages={WS_STAGES} or drop WARP_SPECIALIZE")
        if problems:
            raise LaunchError(f"attention config {self} is not valid: " + "; ".join(problems))
        return self


def check_head_dim(head_dim: int) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise LaunchError(f"head dim {head_dim} is not supported; the attention kernel takes "
                          f"D in {SUPPORTED_HEAD_DIMS}")


def default_config(head_dim: int) -> AttentionConfig:
    """The fusable forward's config per head dim (Triton's fused-attention tutorial's Hopper
    choices and FlashAttention-2's Triton settings): 128 query rows per program over two
    wgmma warp groups (8 warps), KV blocks of 128 for ``D = 64`` and 64 for ``D = 128`` (the
    S and P tiles plus the accumulator stay in registers), 3 stages of K/V in shared memory
    (~128 KiB for ``D = 128``).  The ops compile the fusable kernel with this config unless
    given one; ``scripts/bench_attention.py`` measures alternatives on a GPU."""
    check_head_dim(head_dim)
    if head_dim == 64:
        return AttentionConfig(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3)
    return AttentionConfig(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3)


def fast_default_config(head_dim: int, causal: bool = False, kernel: str = "fwd"
                        ) -> AttentionConfig:
    """The fast kernels' heuristic when the table has no entry (the table's seeds).

    Forward: 128 x 128 tiles, warp specialised (one TMA producer and two consumer warp
    groups of 64 rows: FlashAttention-3's split, as Triton 3.6 builds it from ``num_warps=4``),
    2 stages of K/V (~193 KiB of shared memory at ``D = 128``; the only depth the
    warp-specialised forward is correct with, :data:`WS_STAGES`).  Backward: dK/dV over 128
    keys per program, 32 query rows per step at ``D = 128`` (64 at ``D = 64``; 64 x 128
    spills at ``D = 128``), dQ over 128 queries x 64 keys, 8 warps.  All compile for sm_90
    without spills (``tests/test_attention_local.py``); the GPU sweep replaces them per shape
    class."""
    check_head_dim(head_dim)
    if kernel == "fwd":
        return AttentionConfig(BLOCK_M=128, BLOCK_N=128, num_warps=4, num_stages=WS_STAGES,
                               WARP_SPECIALIZE=True)
    if kernel == "bwd_dkdv":
        return AttentionConfig(BLOCK_M=32 if head_dim == 128 else 64, BLOCK_N=128, num_warps=8,
                               num_stages=2)
    if kernel == "bwd_dq":
        return AttentionConfig(BLOCK_M=128, BLOCK_N=64, num_warps=8,
                               num_stages=2 if head_dim == 128 else 3)
    raise LaunchError(f"unknown attention kernel {kernel!r}; one of {TABLE_KERNELS}")


# ----------------------------------------------------------------------------------------------
# The per-GPU table of the fast kernels' configs
# ----------------------------------------------------------------------------------------------


def shipped_path(gpu: str) -> Path:
    """The shipped table of ``gpu`` (it may not exist)."""
    return SHIPPED_DIR / f"attention-{gpu}.json"


def cache_path(gpu: str) -> Path:
    """The user's tuning cache of ``gpu``."""
    return cache_dir() / "attention" / f"{gpu}.json"


def _entry(raw, where: str) -> dict:
    try:
        kernel = raw["kernel"]
        if kernel not in TABLE_KERNELS:
            raise ValueError(f"kernel {kernel!r} is not one of {TABLE_KERNELS}")
        dtype = raw["dtype"]
        if dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {SUPPORTED_DTYPES}")
        D, S = int(raw["D"]), int(raw["S"])
        check_head_dim(D)
        if S < 1:
            raise ValueError(f"S must be positive, got {S}")
        config = dict(raw["config"])
        if config.pop("PEEL_DIAGONAL", False):
            raise ValueError(_PEEL_REMOVED)
        cfg = AttentionConfig.of(config, D).check(D, kernel=kernel)
    except (KeyError, TypeError, ValueError, LaunchError) as e:
        raise LaunchError(f"attention config table {where}: bad entry {raw!r}: "
                          f"{type(e).__name__}: {e}. Each entry needs kernel, dtype, D, causal, "
                          f"S and config; fix or delete the file, or re-run "
                          f"scripts/bench_attention.py --sweep --tune-out") from None
    return dict(raw, kernel=kernel, dtype=dtype, D=D, S=S, causal=bool(raw["causal"]),
                config=cfg)


def read_table(path) -> dict:
    """Read and validate a table file; :class:`LaunchError` names the file and the problem."""
    return read_table_file(path, "attention", _entry,
                           "scripts/bench_attention.py --sweep --tune-out")


def entry_key(e: dict) -> tuple:
    return (e["kernel"], e["dtype"], int(e["D"]), bool(e["causal"]), int(e["S"]))


def write_table(path, entries: list, *, gpu: str, source: str, note: str = "") -> Path:
    """Write a table (:func:`~.gemm_table.write_table_file`), entries sorted by class."""
    out = [dict(e, config=AttentionConfig.of(e["config"], int(e["D"])).as_dict())
           for e in sorted(entries, key=entry_key)]
    path = write_table_file(path, out, gpu=gpu, source=source, note=note)
    reload_tables()
    return path


_SOURCES: dict = {}


def _sources(gpu: str) -> tuple:
    """The table files that apply to ``gpu`` (as strings; looked up once per override value and
    cache dir -- a launch does not stat files)."""
    override = settings.ATTENTION_TABLE.get()
    key = (gpu, override, settings.CACHE_DIR.get(), os.environ.get("XDG_CACHE_HOME"))
    if key not in _SOURCES:
        found = table_files(override, cache_path(gpu), shipped_path(gpu))
        _SOURCES[key] = tuple(str(p) for p in found)
    return _SOURCES[key]


@functools.lru_cache(maxsize=None)
def _entries(gpu: str, sources: tuple) -> tuple:
    return tuple(first_entries(sources, read_table, entry_key))


def entries(gpu: str) -> tuple:
    """Every entry for ``gpu``, the user's cache before the shipped defaults."""
    return _entries(gpu, _sources(gpu))


def reload_tables() -> None:
    """Forget the loaded tables (after a tuning run wrote one, or the environment changed)."""
    _SOURCES.clear()
    _entries.cache_clear()
    _lookup.cache_clear()


@functools.lru_cache(maxsize=4096)
def _lookup(gpu: str, kernel: str, dtype: str, D: int, causal: bool, S: int,
            sources: tuple) -> AttentionConfig:
    same = [e for e in _entries(gpu, sources)
            if (e["kernel"], e["dtype"], e["D"], e["causal"]) == (kernel, dtype, D, causal)]
    if not same:
        return fast_default_config(D, causal, kernel)
    return min(same, key=lambda e: abs(math.log2(max(S, 1) / e["S"])))["config"]


def lookup(kernel: str, dtype: str, D: int, causal: bool, S: int,
           gpu: str | None) -> AttentionConfig:
    """The fast ``kernel``'s config for this shape class on ``gpu`` (a
    :func:`~.gemm_table.gpu_key`; None: no GPU, e.g. the interpreter -- the heuristic)."""
    if gpu is None:
        return fast_default_config(D, causal, kernel)
    return _lookup(gpu, kernel, dtype, int(D), bool(causal), int(S), _sources(gpu))


__all__ = ["AttentionConfig", "FORMAT", "SMEM_LIMIT_SM90", "SUPPORTED_DTYPES",
           "SUPPORTED_HEAD_DIMS", "TABLE_KERNELS", "WS_STAGES", "cache_path", "check_head_dim",
           "default_config", "entries", "entry_key", "fast_default_config",
           "lookup", "read_table", "reload_tables", "shipped_path", "write_table"]
