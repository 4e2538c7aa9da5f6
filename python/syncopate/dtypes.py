"""The one dtype table of Syncopate.

A dtype reaches Syncopate in many spellings: the schedule JSON writes ``bf16``, torch hands
over ``torch.bfloat16`` (or its string ``"torch.bfloat16"``), a Triton signature says ``*bf16``
or ``*fp8e4nv``, Triton source says ``tl.bfloat16``, the MLIR of a TTIR module says ``bf16`` /
``f16`` / ``f8E4M3FN``.  Before this module each layer (schedule model, compiler, runtime
communicator, GEMM wrappers, CE planner) kept its own alias dict and its own element-size
table, and they disagreed at the edges (one silently took 2 bytes for any dtype it did not
know).  Here every dtype has exactly one record and every spelling maps to it; a name that
maps to none raises :class:`~syncopate.errors.DtypeError`, which lists the known dtypes --
there is no silent default anywhere.

The canonical name is the schedule JSON's spelling (``bf16``, ``fp16``, ``fp32``, ``fp64``,
``fp8e4m3``, ``fp8e5m2``, ``int8`` ... ``int64``, ``uint8``, ``uint32``, ``bool``) because the
schedule is the contract between compiler and runtime and is written by people.

The module imports neither torch nor triton (``syncopate.schedule`` and the compiler's pass
pipeline run without them); :func:`torch_dtype` imports torch when it is called.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import DtypeError


@dataclass(frozen=True)
class DType:
    """Everything Syncopate needs to know about one dtype, in each layer's spelling."""

    name: str        #: canonical (schedule JSON) name: "bf16"
    bytes: int       #: element size
    kind: str        #: "float" | "int" | "uint" | "bool"
    torch: str       #: torch attribute name: "bfloat16"
    triton: str      #: element type of a Triton signature: "bf16" (pointer: "*bf16")
    tl: str          #: triton.language attribute name: "bfloat16"
    mlir: str        #: MLIR element type in TTIR: "bf16", "f16", "f8E4M3FN", "i32"
    #: further spellings (short forms, numpy).  Deliberately no "int"/"long": torch's
    #: ``torch.int`` is int32 but numpy's ``int`` is int64 -- an ambiguous name is refused.
    aliases: tuple[str, ...] = ()


_RECORDS = (
    DType("bf16", 2, "float", "bfloat16", "bf16", "bfloat16", "bf16"),
    DType("fp16", 2, "float", "float16", "fp16", "float16", "f16", ("half", "f16")),
    DType("fp32", 4, "float", "float32", "fp32", "float32", "f32", ("float", "f32")),
    DType("fp64", 8, "float", "float64", "fp64", "float64", "f64", ("double", "f64")),
    DType("fp8e4m3", 1, "float", "float8_e4m3fn", "fp8e4nv", "float8e4nv", "f8E4M3FN",
          ("float8e4m3fn", "e4m3", "f8e4m3fn")),
    DType("fp8e5m2", 1, "float", "float8_e5m2", "fp8e5", "float8e5", "f8E5M2",
          ("float8e5m2", "e5m2", "f8e5m2")),
    DType("int8", 1, "int", "int8", "i8", "int8", "i8"),
    DType("uint8", 1, "uint", "uint8", "u8", "uint8", "i8"),
    DType("int16", 2, "int", "int16", "i16", "int16", "i16"),
    DType("int32", 4, "int", "int32", "i32", "int32", "i32"),
    DType("int64", 8, "int", "int64", "i64", "int64", "i64"),
    DType("uint32", 4, "uint", "uint32", "u32", "uint32", "i32"),
    DType("bool", 1, "bool", "bool", "i1", "int1", "i1", ("int1", "bool_")),
)

#: canonical name -> record, in a stable order (the order error messages list them in).
DTYPES: dict[str, DType] = {d.name: d for d in _RECORDS}

#: canonical name -> element size in bytes.
SIZES: dict[str, int] = {d.name: d.bytes for d in _RECORDS}


def _build_aliases() -> dict[str, str]:
    out: dict[str, str] = {}
    for d in _RECORDS:
        # MLIR names are case-sensitive (f8E4M3FN) but lookups are lower-cased; the unsigned
        # ints share an MLIR type with the signed ones (signless), so MLIR names map to the
        # signed dtype only.
        spellings = [d.name, d.torch, d.triton, d.tl, *d.aliases]
        if d.kind != "uint":
            spellings.append(d.mlir)
        for s in spellings:
            s = s.lower()
            prev = out.setdefault(s, d.name)
            if prev != d.name:  # pragma: no cover - a table bug, caught at import
                raise AssertionError(f"dtype alias {s!r} names both {prev} and {d.name}")
    return out


_ALIASES: dict[str, str] = _build_aliases()

_PREFIXES = ("torch.", "triton.language.", "tl.", "numpy.", "np.")


def _lookup(x: Any) -> str | None:
    text = str(x).strip()
    if text.startswith("*"):          # a Triton signature's pointer type: "*bf16"
        text = text[1:]
    text = text.lower()
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return _ALIASES.get(text)


def is_known(x: Any) -> bool:
    """Whether ``x`` (any spelling :func:`canonical` accepts) names a dtype Syncopate knows."""
    return _lookup(x) is not None


def canonical(x: Any) -> str:
    """The canonical (schedule JSON) name of a dtype given in any spelling: a canonical name,
    a torch dtype or its string (``torch.bfloat16``, ``"bfloat16"``), a Triton signature or
    ``triton.language`` type (``"*fp8e4nv"``, ``"tl.bfloat16"``, ``"i32"``), an MLIR element
    type (``"f16"``) or a numpy dtype.  Raises :class:`DtypeError` for anything else."""
    name = _lookup(x)
    if name is None:
        raise DtypeError(x, tuple(DTYPES))
    return name


def info(x: Any) -> DType:
    """The :class:`DType` record of ``x`` (any spelling)."""
    return DTYPES[canonical(x)]


def element_bytes(x: Any) -> int:
    """Element size in bytes of ``x`` (any spelling); never a default for an unknown dtype."""
    return SIZES[canonical(x)]


def torch_name(x: Any) -> str:
    """The torch attribute name of ``x``: ``"bf16"`` -> ``"bfloat16"``."""
    return info(x).torch


def torch_dtype(x: Any):
    """The ``torch.dtype`` of ``x`` (a ``torch.dtype`` is returned unchanged).  Imports torch."""
    import torch
    if isinstance(x, torch.dtype):
        return x
    return getattr(torch, torch_name(x))


def triton_elem(x: Any) -> str:
    """The element type of ``x`` as a Triton signature writes it: ``"fp8e4m3"`` -> ``"fp8e4nv"``."""
    return info(x).triton


def triton_sig(x: Any) -> str:
    """The Triton signature type of a pointer to ``x``: ``"bf16"`` -> ``"*bf16"``."""
    return "*" + triton_elem(x)


def tl_name(x: Any) -> str:
    """The ``triton.language`` spelling of ``x`` for generated source: ``"tl.bfloat16"``."""
    return "tl." + info(x).tl


def mlir_name(x: Any) -> str:
    """The MLIR element type of ``x`` in TTIR: ``"fp16"`` -> ``"f16"`` (ints are signless)."""
    return info(x).mlir
