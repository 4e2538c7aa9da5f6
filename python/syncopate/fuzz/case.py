"""A fuzz case: one generated kernel x schedule, with everything needed to compile, emulate
and replay it (:class:`Case`, its pointer parameters :class:`Tensor`), and
:func:`load_kernel`, which turns its source into a ``@triton.jit`` function.

Its own module because the oracle, the CLI and the tests handle cases without generating them
(``generate`` in ``gen.py`` is the one producer).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from syncopate.schedule import dumps
from .. import dtypes
from ..emulate.memory import etype_named, to_etype

__all__ = ["STYLE_KEYS", "Case", "Picker", "Tensor", "cdiv", "load_kernel"]

#: the style axes reported per outcome by the CLI
STYLE_KEYS = ("body", "addressing", "tiling", "role", "template", "backend", "world_size",
              "dtype", "atomic", "atomic_op", "atomic_dtype", "atomic_pattern", "atomic_mask")


class Picker:
    """One style choice: ``force[key]`` when the caller pinned it (it must be one of
    ``options``), else a weighted draw from ``rng``.  Both generators draw through one (the
    case's and the atomics' axis, each with its own ``random.Random``)."""

    def __init__(self, rng, force: dict):
        self.rng, self.force = rng, force

    def __call__(self, key, options, weights=None):
        options = list(options)
        if key in self.force:
            v = self.force[key]
            if v not in options:
                raise ValueError(f"{key}={v!r} is not one of {tuple(options)}")
            return v
        return self.rng.choices(options, weights=weights)[0]


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Tensor:
    """A pointer parameter: its shape, element type and whether the kernel reads or writes it
    (``acc``: updates it with atomics, fuzz/atomics.py)."""

    name: str
    shape: tuple[int, ...]
    dtype: str          # schedule spelling: bf16 / fp32 / int32 / uint32 / int64 / ...
    role: str           # "in", "out" or "acc"
    stride: str | None = None   # the runtime row-stride parameter, if any
    #: what an output or an atomics' tensor holds before the kernel: None (an output the
    #: kernel stores: NaN, so a tile it never writes shows), "zeros", "random"
    init: str | None = None

    @property
    def sig(self) -> str:
        return dtypes.triton_sig(self.dtype)


@dataclass
class Case:
    """One generated kernel x schedule, everything needed to compile, emulate and replay it."""

    seed: int
    styles: dict[str, Any]
    source: str
    kernel_name: str
    tensors: list[Tensor]
    scalars: dict[str, int]
    constexprs: dict[str, int]
    grid: tuple[int, ...]
    operand: str
    schedule: Any                      # syncopate.schedule.Schedule
    backend: str
    comm_programs: int
    policies: tuple[str, ...]
    launches: int = 2
    attrs: dict = field(default_factory=dict)
    atomic: Any = None                 # fuzz.atomics.AtomicPlan, or None

    # ---------------------------------------------------------------- derived
    @property
    def signature(self) -> dict[str, str]:
        sig = {t.name: t.sig for t in self.tensors}
        sig.update({n: "i32" for n in self.scalars})
        sig.update({n: "constexpr" for n in self.constexprs})
        return sig

    @property
    def style_line(self) -> str:
        return " ".join(f"{k}={self.styles[k]}" for k in STYLE_KEYS if k in self.styles)

    def schedule_json(self) -> str:
        return dumps(self.schedule)

    def inputs(self, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Full (unsharded) input tensors for one rank, drawn from ``rng``: random floats, a row
        permutation for index tensors; and the starting contents of the tensors atomics update
        (``init``), already in their element type: small integers (the model stays exact) or
        floats."""
        out = {}
        for t in self.tensors:
            if t.role == "in":
                if t.dtype == "int32":
                    rows = self.tensors[0].shape[0]
                    out[t.name] = rng.integers(0, rows, size=t.shape).astype(np.int32)
                else:
                    out[t.name] = rng.standard_normal(t.shape).astype(np.float32)
                continue
            if t.init is None:
                continue
            floating = dtypes.info(t.dtype).kind == "float"
            if t.init == "zeros":
                v = np.zeros(t.shape, np.float32 if floating else np.int64)
            elif floating:
                v = rng.standard_normal(t.shape).astype(np.float32)
            else:
                lo = 0 if dtypes.info(t.dtype).kind == "uint" else -4
                v = rng.integers(lo, 5, size=t.shape)
            out[t.name] = to_etype(v, etype_named(t.dtype))
        return out

    def expected(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """What a correct single-GPU kernel writes into its output, computed with numpy: the
        generator's own check that it wrote the kernel it meant to (see ``oracle.invalid``)."""
        body = self.styles["body"]
        scale = self.constexprs.get("SCALE_NUM", 0)
        if body == "gemm":
            a, b = inputs["a_ptr"].astype(np.float64), inputs["b_ptr"].astype(np.float64)
            return {"c_ptr": a @ b}
        x = inputs["x_ptr"].astype(np.float64)
        if "idx_ptr" in inputs:
            x = x[inputs["idx_ptr"]]
        if body == "rowsum":
            return {"y_ptr": x.sum(axis=1)}
        if body == "scale":
            return {"y_ptr": x * (scale / 4.0) + 1.0}
        return {"y_ptr": x}

    def to_json(self) -> dict:
        return dict(seed=self.seed, styles=self.styles, kernel=self.kernel_name,
                    signature=self.signature, constexprs=self.constexprs,
                    scalars=self.scalars, grid=list(self.grid), operand=self.operand,
                    backend=self.backend, comm_programs=self.comm_programs,
                    policies=list(self.policies), launches=self.launches,
                    atomic=None if self.atomic is None else dict(vars(self.atomic)),
                    schedule=json.loads(self.schedule_json()))


# ------------------------------------------------------------------------------ loading

@functools.cache
def _default_dir() -> str:
    """One temporary directory per process for the kernels' files."""
    return tempfile.mkdtemp(prefix="syncopate-fuzz-")


def load_kernel(case: Case):
    """Write ``case.source`` to a real file and import it: Triton's JIT reads the kernel's
    source with ``inspect`` (``exec`` of a string leaves it nothing to read), and the TTIR
    locations then name that file, so refusals point into it."""
    digest = hashlib.sha1(case.source.encode()).hexdigest()[:10]
    path = os.path.join(_default_dir(), f"fuzz_{case.seed}_{digest}.py")
    with open(path, "w") as f:
        f.write(case.source)
    spec = importlib.util.spec_from_file_location(f"syncopate_fuzz_{case.seed}_{digest}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, case.kernel_name)
