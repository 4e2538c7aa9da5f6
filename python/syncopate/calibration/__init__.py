"""Calibration files: what one GPU type measured, read by the ops' cost model at run time.

One JSON file per GPU type beside this module (``h200.json``), written by
``python -m syncopate.bench --calibrate`` on the GPUs present (or, for the shipped seed, from a
benchmark run's ``bench.json``: ``--calibrate --from-results DIR``). The ops read it; they never
measure anything in the user's process.

Why a file and no measurement at run time: the op's choice between its fused variants and the
unfused path must be the same on every rank, or the ranks would launch different collectives
and hang (a fused kernel waiting on flags its peer never sets, an NCCL call its peer never
makes). A per-rank measurement differs from rank to rank (clocks, noise, a neighbour's load);
a file's content does not. The choice is a pure function of (op, shape, dtype, world size, GPU
type, this file's content): :mod:`syncopate.ops.choice`.

What a file holds (``format`` 1), each section with the ``source`` it came from:

* ``local_gemm``: per shape class (a measured per-rank GEMM ``m x n x k``), seconds of our
  local Triton kernel (``triton_s``) and of cuBLAS (``cublas_s``); a query interpolates time
  per FLOP between the classes in log-shape space.
* ``collectives``: NCCL ``all_gather`` / ``reduce_scatter`` per world size: ``alpha_s +
  bytes / beta_bps`` (bytes of the whole gathered / reduced tensor) fitted to measured points,
  kept beside the fit.
* ``fused``: per op, world size and fused variant, measured device times of the op's own plan
  at calibrated shapes; the model (:func:`syncopate.schedule.cost.estimate` with the calibrated
  local GEMM time as compute) is scaled by ``measured / model`` interpolated between the classes.
* ``ops`` (optional): per op beyond ``ag_gemm``/``gemm_rs``, world size and candidate
  (``sm``, ``ce``, ``ce+epilogue``: a fused variant; ``unfused:triton`` / ``unfused:cublas``:
  NCCL + that local kernel), measured device times at the op's shapes (the dims of its
  ``OpSpec.shape``); the op's analytic model is scaled by ``measured / model`` interpolated
  between them (:mod:`syncopate.ops.choice`). Without it those ops decide on the model alone
  ("model only (not calibrated)").
* ``collectives`` may also hold ``all_reduce`` and ``all_to_all`` fits; without them the ops
  derive them from the reduce-scatter and all-gather fits.
* ``host_s``: host time of one call per path (a loop of calls cannot run faster than its host).
* ``stream_wait``: whether the calibrated machine's driver had stream memory operations
  (``cuStreamWaitValue32``), which the ``ce`` + epilogue variant of ``gemm_rs`` needs.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from dataclasses import dataclass

from ..errors import SyncopateError

__all__ = ["CalibrationError", "Calibration", "FORMAT", "calibration_dir", "calibration_path",
           "gpu_type", "device_gpu_type", "load", "parse", "known_gpus"]

FORMAT = 1


class CalibrationError(SyncopateError, ValueError):
    """A calibration file is missing a field, has a bad value or the wrong format; the message
    names the file, the field and how to regenerate the file."""


def calibration_dir() -> str:
    """The directory of the shipped calibration files (this package)."""
    return os.path.dirname(os.path.abspath(__file__))


def gpu_type(device_name: str) -> str:
    """The GPU type of a device name, the calibration file's stem: ``"NVIDIA H200"`` -> ``h200``,
    ``"NVIDIA H100 80GB HBM3"`` -> ``h100``, ``"NVIDIA A100-SXM4-80GB"`` -> ``a100``."""
    words = [w for w in re.split(r"[\s_]+", device_name.strip().lower()) if w]
    if words and words[0] == "nvidia":
        words = words[1:]
    if words and words[0] in ("geforce", "tesla", "quadro") and len(words) > 1:
        words = words[1:]
    head = re.split(r"[^a-z0-9]+", words[0])[0] if words else ""
    if not head:
        raise CalibrationError(f"cannot derive a GPU type from the device name {device_name!r}: "
                               f"pass gpu= explicitly (a calibration file stem such as 'h200')")
    return head


@functools.lru_cache(maxsize=16)
def _device_name(index: int) -> str:
    import torch
    return torch.cuda.get_device_name(index)


def device_gpu_type(device) -> str | None:
    """The GPU type of a torch device, or None for a device that is not a CUDA GPU (a CPU
    tensor in the CPU tests): the ops then take the uncalibrated defaults. The device *name*
    (not a measurement) decides, so every rank of a homogeneous node derives the same type."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch
    if not torch.cuda.is_available():
        return None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return gpu_type(_device_name(index))


def calibration_path(gpu: str) -> str:
    return os.path.join(calibration_dir(), f"{gpu}.json")


def known_gpus() -> list[str]:
    """GPU types with a shipped calibration file."""
    return sorted(f[:-5] for f in os.listdir(calibration_dir()) if f.endswith(".json"))


@dataclass(frozen=True)
class Calibration:
    """A parsed calibration file. ``digest``: SHA-256 of the file's bytes (what ``explain``
    prints and what the decision is keyed on: the same bytes give the same decision)."""

    gpu: str
    data: dict
    digest: str
    path: str | None = None

    def local_points(self, dtype: str) -> tuple[str, list[dict]]:
        """``(calibrated dtype, points)`` for a query in ``dtype`` (the dtype's own points when
        measured, else the first measured dtype's, scaled by the caller by peak FLOPs)."""
        by_dtype = self.data["local_gemm"]["points"]
        if dtype in by_dtype:
            return dtype, by_dtype[dtype]
        first = sorted(by_dtype)[0]
        return first, by_dtype[first]

    def collective(self, name: str, world_size: int) -> tuple[int, dict]:
        """``(calibrated world size, entry)`` nearest to ``world_size`` (ties: the smaller)."""
        return _nearest(self.data["collectives"][name], world_size)

    def fused(self, op: str, world_size: int) -> tuple[int | None, dict]:
        """``(calibrated world size, {variant: [points]})`` nearest to ``world_size``."""
        return _nearest(self.data["fused"].get(op), world_size)

    def ops(self, op: str, world_size: int) -> tuple[int | None, dict]:
        """``(measured world size, {candidate: [points]})`` of an op's ``ops`` section nearest
        to ``world_size`` (ties: the smaller); ``(None, {})`` when it has none."""
        return _nearest((self.data.get("ops") or {}).get(op), world_size)

    def host_s_any(self, *keys: str) -> float:
        """The host time of the first of ``keys`` the file has (an op without its own
        measurement takes the nearest measured kind of call, named by the caller)."""
        host = self.data["host_s"]
        for k in keys:
            if k in host:
                return float(host[k]["seconds"])
        return self.host_s(keys[0])

    def host_s(self, key: str) -> float:
        host = self.data["host_s"]
        if key not in host:
            raise CalibrationError(f"{self.path or self.gpu}: host_s has no {key!r}; regenerate "
                                   f"the file with python -m syncopate.bench --calibrate")
        return float(host[key]["seconds"])

    @property
    def stream_wait(self) -> bool:
        return bool(self.data["stream_wait"]["available"])


def _nearest(table: dict | None, world_size: int) -> tuple[int | None, dict]:
    """``(world size, entry)`` of the entry of ``table`` (keyed by world sizes as text) nearest
    to ``world_size``, ties: the smaller; ``(None, {})`` for no table."""
    if not table:
        return None, {}
    w = min((int(k) for k in table), key=lambda x: (abs(x - world_size), x))
    return w, table[str(w)]


def _need(cond: bool, where: str, what: str) -> None:
    if not cond:
        raise CalibrationError(f"{where}: {what}; regenerate it with python -m syncopate.bench "
                               f"--calibrate (docs in syncopate/calibration/__init__.py)")


def _number(v, zero_ok: bool = False) -> bool:
    """Whether ``v`` is a JSON number > 0 (>= 0 with ``zero_ok``)."""
    return isinstance(v, (int, float)) and (v >= 0 if zero_ok else v > 0)


def parse(raw: bytes, where: str = "<calibration>") -> Calibration:
    """Parse and check a calibration file's bytes. Deterministic: the same bytes give an equal
    :class:`Calibration` in every process (no clock, no environment, no device query)."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CalibrationError(f"{where}: not valid JSON ({e}); regenerate it with python -m "
                               f"syncopate.bench --calibrate") from None
    _need(isinstance(data, dict), where, "the top level must be an object")
    _need(data.get("format") == FORMAT, where,
          f"format is {data.get('format')!r}, this Syncopate reads format {FORMAT}")
    for key in ("gpu", "local_gemm", "collectives", "fused", "host_s", "stream_wait"):
        _need(key in data, where, f"missing field {key!r}")
    pts = data["local_gemm"].get("points")
    _need(isinstance(pts, dict) and pts, where, "local_gemm.points must map a dtype to points")
    for dt, lst in pts.items():
        _need(isinstance(lst, list) and lst, where, f"local_gemm.points.{dt} is empty")
        for i, p in enumerate(lst):
            for f in ("m", "n", "k", "triton_s", "cublas_s"):
                _need(_number(p.get(f)), where,
                      f"local_gemm.points.{dt}[{i}].{f} must be a positive number")
    for name in ("all_gather", "reduce_scatter"):
        table = data["collectives"].get(name)
        _need(isinstance(table, dict) and table, where, f"collectives.{name} is missing")
        for w, e in table.items():
            _need(w.isdigit() and int(w) >= 2, where, f"collectives.{name} key {w!r} must be a "
                  f"world size >= 2")
            for f in ("alpha_s", "beta_bps"):
                _need(_number(e.get(f), zero_ok=f == "alpha_s"), where,
                      f"collectives.{name}.{w}.{f} is missing or not positive")
    for op, table in data["fused"].items():
        for w, variants in table.items():
            for v, lst in variants.items():
                for i, p in enumerate(lst):
                    for f in ("m", "n", "k", "measured_s"):
                        _need(_number(p.get(f)), where,
                              f"fused.{op}.{w}.{v}[{i}].{f} must be a positive number")
    ops = data.get("ops", {})
    _need(isinstance(ops, dict), where, "ops must map an op to its measurements")
    for op, table in ops.items():
        _need(isinstance(table, dict), where, f"ops.{op} must map a world size to candidates")
        for w, cands in table.items():
            _need(w.isdigit() and int(w) >= 1 and isinstance(cands, dict), where,
                  f"ops.{op} key {w!r} must be a world size mapping candidates to points")
            for c, lst in cands.items():
                _need(isinstance(lst, list) and lst, where, f"ops.{op}.{w}.{c} is empty")
                for i, p in enumerate(lst):
                    _need(isinstance(p, dict) and _number(p.get("measured_s")), where,
                          f"ops.{op}.{w}.{c}[{i}].measured_s must be a positive number")
    for k, e in data["host_s"].items():
        _need(isinstance(e, dict) and _number(e.get("seconds"), zero_ok=True), where,
              f"host_s.{k}.seconds must be a number >= 0")
    _need(isinstance(data["stream_wait"], dict) and "available" in data["stream_wait"], where,
          "stream_wait.available is missing")
    return Calibration(gpu=str(data["gpu"]), data=data,
                       digest=hashlib.sha256(raw).hexdigest(), path=where)


@functools.lru_cache(maxsize=16)
def load(gpu: str | None) -> Calibration | None:
    """The shipped calibration of ``gpu`` (a type such as ``h200``), or None when there is none
    (the ops then use their uncalibrated defaults and ``explain`` says how to calibrate).
    Memoised per process: the file is read once, as bytes, and parsed by :func:`parse`."""
    if gpu is None:
        return None
    path = calibration_path(gpu)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        raw = f.read()
    cal = parse(raw, path)
    _need(cal.gpu == gpu, path, f"its gpu field says {cal.gpu!r} but the file is for {gpu!r}")
    return cal
