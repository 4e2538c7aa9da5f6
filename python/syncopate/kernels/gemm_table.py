"""The local GEMM's config table: which :class:`~.gemm_config.GemmConfig` to run for a shape, per
GPU type, from measurements (``python -m syncopate.bench.local --tune``).

Why a table and not a formula: on an H200 the best tile, pipeline depth, warp specialisation
and split-K depend on the shape in ways that a wave-count model only approximates (it said
128x256 for shapes where cuBLAS was 6-17% faster). Tuning once per GPU type and shape, and
shipping the result, gives every user the measured choice without a tuning run.

Where entries come from, in the order :func:`lookup` consults them:

1. ``$SYNCOPATE_GEMM_TABLE`` when set: a table file to use *instead* of 2 and 3 (``off``: no
   table, :func:`~.gemm_config.heuristic_config` only). For experiments and for checking a
   fresh tuning before installing it.
2. The user's tuning cache, ``$SYNCOPATE_CACHE_DIR/gemm/<gpu>.json`` (default
   ``~/.cache/syncopate``, or ``$XDG_CACHE_HOME/syncopate``), written by
   ``syncopate.bench.tuning.tune_matmul`` and ``python -m syncopate.bench.local --tune
   --save-cache``.
3. The defaults shipped with the package, ``syncopate/kernels/configs/<gpu>.json``
   (``python -m syncopate.bench.local --install-tuned`` writes them from a tuning run's JSON).

An entry is one tuned shape: ``dtype``, ``M``, ``N``, ``K``, the best ``config`` and the best
``fusable_config`` (no split-K, no warp specialisation: what the fused ops can compile), with
the measured times when it was measured (``"measured": false`` marks a seed entry: the
heuristic's choice written down before any tuning run, which decides its own shape only). A
query takes the entry of its dtype that is nearest
in ``log2`` distance ``|log2 M/M'| + |log2 N/N'| + |log2 K/K'|`` (each tuned shape is the centre
of a bucket), provided the distance is at most :data:`MAX_DISTANCE`; farther than that the
heuristic is the better guess. A split-K config taken from a neighbouring shape is re-split
for the query's tile count (:func:`~.gemm_config.split_k_for`).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from pathlib import Path

from .. import settings
from ..errors import LaunchError
from .gemm_config import (H200_NUM_SMS, GemmConfig, _dtype_name, _short, heuristic_config,
                          split_k_for, with_split_k)

#: Table file format version (``"format"`` in the JSON).
FORMAT = 1

#: Farthest ``log2`` distance at which a table entry still decides a query's config.
MAX_DISTANCE = 2.0

SHIPPED_DIR = Path(__file__).with_name("configs")

_LOADED: dict[tuple, list] = {}


def gpu_key(name: str) -> str:
    """File key of a GPU from its device name: ``'NVIDIA H200'`` -> ``'h200'``, ``'NVIDIA H100
    80GB HBM3'`` -> ``'h100'``; anything else its name in lower case with ``-`` for other
    characters (a table can be tuned for it; none is shipped)."""
    n = name.lower()
    for key in ("h200", "h100", "h800", "h20", "b200"):
        if re.search(rf"\b{key}\b", n):
            return key
    return re.sub(r"[^a-z0-9]+", "-", n.replace("nvidia", "")).strip("-") or "unknown"


def cache_dir() -> Path:
    """``$SYNCOPATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/syncopate``, else
    ``~/.cache/syncopate``."""
    if settings.CACHE_DIR.get():
        return Path(settings.CACHE_DIR.get())
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "syncopate"


def cache_path(gpu: str) -> Path:
    """The user's tuning cache file for ``gpu``."""
    return cache_dir() / "gemm" / f"{gpu}.json"


def shipped_path(gpu: str) -> Path:
    """The shipped defaults file for ``gpu`` (it may not exist)."""
    return SHIPPED_DIR / f"{gpu}.json"


def _entry(raw, where: str) -> dict:
    """Validate one entry; LaunchError naming the file and the entry otherwise."""
    try:
        dtype = _dtype_name(raw["dtype"])
        M, N, K = (int(raw[d]) for d in ("M", "N", "K"))
        if min(M, N, K) < 1:
            raise ValueError(f"sizes must be positive, got {M}x{N}x{K}")
        cfg = GemmConfig.of(raw["config"]).check("tma")
        fus = GemmConfig.of(raw.get("fusable_config") or raw["config"]).check("tma",
                                                                              fusable=True)
    except (KeyError, TypeError, ValueError) as e:
        raise LaunchError(f"GEMM config table {where}: bad entry {raw!r}: "
                          f"{type(e).__name__}: {e}. Each entry needs dtype, M, N, K, config "
                          f"(and fusable_config: no SPLIT_K, no WARP_SPECIALIZE); fix or delete "
                          f"the file, or re-run python -m syncopate.bench.local "
                          f"--tune") from None
    return dict(raw, dtype=dtype, M=M, N=N, K=K, config=cfg, fusable_config=fus)


def read_table_file(path, what: str, entry, retune: str) -> dict:
    """Read and validate a config table file: ``{"format", "gpu", "entries": [...], ...}`` with
    every entry through ``entry(raw, where)``.  LaunchError names the file and the problem
    (``what``: the kernels' name; ``retune``: the command that writes such a table)."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except OSError as e:
        raise LaunchError(f"cannot read {what} config table {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise LaunchError(f"{what} config table {path} is not JSON ({e}); delete it or re-run "
                          f"the tuning") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        raise LaunchError(f"{what} config table {path} has no 'entries' list; it is not a table "
                          f"written by {retune}")
    if raw.get("format", FORMAT) != FORMAT:
        raise LaunchError(f"{what} config table {path} has format {raw.get('format')!r}, this "
                          f"version reads format {FORMAT}: re-run the tuning")
    raw["entries"] = [entry(e, str(path)) for e in raw["entries"]]
    return raw


def write_table_file(path, entries: list, *, gpu: str, source: str, note: str = "") -> Path:
    """Write a config table file atomically (``path.tmp`` then rename); ``entries`` as JSON,
    sorted by the caller so that re-tuning gives a readable diff."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"format": FORMAT, "gpu": gpu, "source": source, "note": note,
           "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "entries": entries}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def table_files(override: str | None, cache: Path, shipped: Path) -> list[Path]:
    """The table files that apply: ``override`` alone when set (``off``: none), else the user's
    cache and the shipped defaults that exist, in that order."""
    if override:
        return [] if override.lower() in ("off", "0", "none") else [Path(override)]
    return [p for p in (cache, shipped) if p.is_file()]


def first_entries(paths, read, key) -> list[dict]:
    """The entries of the files ``paths`` (each read by ``read``), the first of each ``key``."""
    seen, out = set(), []
    for p in paths:
        for e in read(p)["entries"]:
            if key(e) not in seen:
                seen.add(key(e))
                out.append(e)
    return out


def read_table(path) -> dict:
    """Read and validate a GEMM table file, each entry's configs as :class:`GemmConfig`."""
    return read_table_file(path, "GEMM", _entry, "python -m syncopate.bench.local --tune")


def entry_json(e: dict) -> dict:
    """An entry as JSON (configs as dicts)."""
    out = dict(e)
    out["config"] = GemmConfig.of(e["config"]).as_dict()
    out["fusable_config"] = GemmConfig.of(e.get("fusable_config") or e["config"]).as_dict()
    return out


def write_table(path, entries: list, *, gpu: str, source: str, note: str = "") -> Path:
    """Write a GEMM table file (:func:`write_table_file`), entries sorted by dtype and shape."""
    ents = sorted((entry_json(e) for e in entries),
                  key=lambda e: (e["dtype"], e["M"], e["N"], e["K"]))
    path = write_table_file(path, ents, gpu=gpu, source=source, note=note)
    reload_tables()
    return path


def merge_entries(old: list, new: list) -> list:
    """``old`` with ``new``'s entries replacing those of the same dtype and shape."""
    key = lambda e: (_dtype_name(e["dtype"]), int(e["M"]), int(e["N"]), int(e["K"]))  # noqa: E731
    return list({key(e): e for e in [*old, *new]}.values())


def reload_tables() -> None:
    """Forget the loaded tables (after a tuning run wrote one, or the environment changed)."""
    _LOADED.clear()


def entries(gpu: str) -> list[dict]:
    """Every entry that applies to ``gpu``, the user's cache before the shipped defaults."""
    srcs = table_files(settings.GEMM_TABLE.get(), cache_path(gpu), shipped_path(gpu))
    key = (gpu, tuple(str(p) for p in srcs))
    if key not in _LOADED:
        _LOADED[key] = first_entries(srcs, read_table,
                                     lambda e: (e["dtype"], e["M"], e["N"], e["K"]))
    return _LOADED[key]


def distance(M: int, N: int, K: int, e: dict) -> float:
    """``log2`` distance between a shape and an entry's."""
    return (abs(math.log2(M / e["M"])) + abs(math.log2(N / e["N"]))
            + abs(math.log2(K / e["K"])))


def nearest(M: int, N: int, K: int, dtype, gpu: str = "h200") -> tuple[dict, float] | None:
    """``(entry, distance)`` of the nearest entry of ``dtype`` within :data:`MAX_DISTANCE`,
    or None."""
    dt = _dtype_name(dtype)
    near = ((e, distance(M, N, K, e)) for e in entries(gpu) if e["dtype"] == dt)
    # a seed entry is the heuristic's choice for its own shape only
    best = min(((e, d) for e, d in near if d == 0 or e.get("measured", True)),
               key=lambda ed: ed[1], default=None)
    return best if best is not None and best[1] <= MAX_DISTANCE else None


def lookup(M: int, N: int, K: int, dtype, *, gpu: str = "h200", fusable: bool = True,
           num_sms: int = H200_NUM_SMS) -> GemmConfig | None:
    """The table's config for this problem, or None when no entry is near enough.

    ``fusable``: the entry's ``fusable_config``. Otherwise its ``config``; when that is split-K
    and the entry is another shape, the split is recomputed for this one's tile count; when
    its tiles fill the GPU unsplit, the entry's ``fusable_config`` (its best unsplit one)."""
    if min(M, N, K) < 1:
        return None
    hit = nearest(M, N, K, dtype, gpu)
    if hit is None:
        return None
    e, d = hit
    if fusable:
        return e["fusable_config"]
    cfg = e["config"]
    if cfg.SPLIT_K > 1 and d > 0:
        split = split_k_for(M, N, K, cfg, num_sms)
        # enough tiles to fill the GPU: the entry's measured unsplit choice
        cfg = with_split_k(cfg, split) if split > 1 else e["fusable_config"]
    return cfg


def default_config(M: int, N: int, K: int, dtype="bf16", kernel: str = "tma",
                   num_sms: int = H200_NUM_SMS, *, fusable: bool = True,
                   gpu: str | None = None) -> GemmConfig:
    """The config to use for this problem on ``gpu`` (a key of :mod:`.gemm_table`, e.g.
    ``'h200'``; None: the H200, the GPU the shipped defaults and ``num_sms`` describe).

    For the TMA kernel: the nearest entry of the config table (the user's tuning cache, then
    the defaults shipped for this GPU type; :func:`lookup`), else
    :func:`heuristic_config`. The pointer kernel always takes the heuristic.

    ``fusable=True`` (the default, what the compiler and the fused ops need) never returns
    split-K or warp specialisation; the local :func:`~.gemm_launch.matmul` asks with
    ``fusable=False`` and may get either.
    """
    _dtype_name(dtype)
    k = _short(kernel)
    if k == "tma":
        cfg = lookup(M, N, K, dtype, gpu=gpu or "h200", fusable=fusable, num_sms=num_sms)
        if cfg is not None:
            return cfg
    return heuristic_config(M, N, K, dtype, k, num_sms, fusable=fusable)


__all__ = ["FORMAT", "MAX_DISTANCE", "SHIPPED_DIR", "cache_dir", "cache_path", "default_config",
           "distance", "entries", "entry_json", "first_entries", "gpu_key", "lookup",
           "merge_entries", "nearest", "read_table", "read_table_file", "reload_tables",
           "shipped_path", "table_files", "write_table", "write_table_file"]
