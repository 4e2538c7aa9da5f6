"""Parsers of the command line's values, shared by every ``syncopate`` command.

One parser per kind of value (a shape, a ``--signature``, a ``--constexpr``, an ``--operand``),
so that ``syncopate schedule``, ``compile`` and ``emulate`` read ``--shape 8192x4096`` the same
way and refuse the same malformed text with the same message.  Each raises
:class:`argparse.ArgumentTypeError` (used as an argparse ``type=``: argparse prefixes the option
and exits 2) or :class:`~syncopate.errors.UsageError` (checked after parsing, once the kernel is
known: the CLI exits 2 as well).  The message says which form the value takes.
"""

from __future__ import annotations

import argparse
import re
from .compile_checks import is_signature_type, triton_scalar_types
from .errors import UsageError

SHAPE_FORMS = "sizes separated by commas or by 'x' (8192,4096 or 8192x4096)"


def shape(text: str) -> tuple[int, ...]:
    """``8192,4096`` or ``8192x4096`` -> ``(8192, 4096)``.

    Both separators are accepted on purpose (a shape is commonly written either way) but not
    mixed (``8192,x,4096`` is a typo, not a shape); every size must be a positive integer."""
    t = text.strip()
    seps = {s for s in (",", "x", "X") if s in t}
    if len(seps) > 1 and seps != {"x", "X"}:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape: it mixes ',' and 'x'; give {SHAPE_FORMS}")
    parts = re.split(r"[,xX]", t)
    if not all(re.fullmatch(r"\d+", p.strip()) for p in parts) or \
            any(int(p) < 1 for p in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a shape: give positive {SHAPE_FORMS}")
    return tuple(int(p) for p in parts)


def _number(cast, ok, what: str, name: str, doc: str):
    """An argparse type: ``cast(text)`` when ``ok`` of it, else the message ``must be what``."""
    def parse(text: str):
        try:
            v = cast(text)
        except ValueError:
            v = None
        if v is None or not ok(v):
            raise argparse.ArgumentTypeError(f"{text!r} must be {what}")
        return v
    parse.__name__, parse.__doc__ = name, doc
    return parse


positive_int = _number(int, lambda v: v >= 1, "a positive integer", "positive_int",
                       "An integer >= 1 (a count: ranks, chunks, programs, launches).")
nonnegative_int = _number(int, lambda v: v >= 0, "an integer >= 0", "nonnegative_int",
                          "An integer >= 0 (a seed, a count that may be zero).")
nonnegative_float = _number(float, lambda v: 0 <= v < float("inf"), "a number >= 0",
                            "nonnegative_float", 'A finite number >= 0 (a budget where 0 means '
                            '"none of the optional work").')
positive_float = _number(float, lambda v: 0 < v < float("inf"), "a positive number",
                         "positive_float", "A number > 0 (seconds, a budget).")


def csv_ints(text: str) -> str:
    """``8192,1024``: positive integers separated by commas, returned as normalized text (the
    benchmark's options are kept as text and split where they are used)."""
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        vals = ()
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give positive integers separated by commas, e.g. 8192,1024")
    return ",".join(map(str, vals))


def csv_names(known: tuple[str, ...]):
    """An argparse type for a comma-separated subset of ``known`` (``--ops ag,rs``), returned as
    normalized text."""
    def parse(text: str) -> str:
        names = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [n for n in names if n not in known]
        if not names or bad:
            raise argparse.ArgumentTypeError(
                f"{text!r}: give a comma-separated subset of {', '.join(known)}"
                + (f" ({', '.join(map(repr, bad))} unknown)" if bad else ""))
        return ",".join(names)
    parse.__name__ = "list"
    return parse


_IDENT = re.compile(r"[A-Za-z_]\w*\Z")


def tensor_name(text: str) -> str:
    """A schedule tensor's name: a letter or ``_`` then letters, digits, ``_``, ``.``, ``-``
    (it is written into ``--operand param:TENSOR`` and into the fused IR's attributes)."""
    if not re.fullmatch(r"[A-Za-z_][\w.-]*", text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a tensor name: use letters, digits, '_', '.', '-' (e.g. A, kv)")
    return text


def signature(text: str) -> dict[str, str]:
    """``a_ptr=*bf16,K=i32`` -> ``{"a_ptr": "*bf16", "K": "i32"}``.

    Types are Triton's signature strings: ``*DTYPE`` for a pointer, a scalar type (``i32``,
    ``fp32``), or ``constexpr``; an unknown type is refused here, not deep inside Triton
    (where it surfaces as ``KeyError: 'int'``)."""
    out: dict[str, str] = {}
    for item in (s.strip() for s in text.split(",")):
        name, eq, ty = item.partition("=")
        name, ty = name.strip(), ty.strip()
        if not eq or not _IDENT.match(name) or not ty:
            raise UsageError(f"--signature: {item!r} is not NAME=TYPE; write e.g. "
                             f"--signature a_ptr=*bf16,out_ptr=*bf16,K=i32")
        if name in out:
            raise UsageError(f"--signature names {name!r} twice")
        if not is_signature_type(ty):
            raise UsageError(f"--signature: {name}={ty}: unknown type {ty!r}; use *DTYPE for a "
                             f"pointer, a scalar ("
                             f"{', '.join(triton_scalar_types())}) or constexpr")
        out[name] = ty
    return out


def constexpr(text: str) -> tuple[str, object]:
    """``BLOCK=64`` -> ``("BLOCK", 64)``; a value is an integer, a float, ``True``/``False`` or
    quoted text (``ACT='gelu'``, for a kernel that compares a constexpr with a string).

    Unquoted text is refused here: passed on as a string it reaches Triton as, say, a block
    size, and surfaces as an internal ``AttributeError`` deep in the frontend."""
    name, eq, value = text.partition("=")
    name = name.strip()
    if not eq or not _IDENT.match(name) or not value.strip():
        raise UsageError(f"--constexpr {text!r} is not NAME=VALUE; write e.g. --constexpr BLOCK=64")
    v = _value(value.strip())
    if v is None:
        raise UsageError(f"--constexpr {name}={value.strip()}: {value.strip()!r} is not a value "
                         f"a constexpr takes; give {name} an integer ({name}=64), a float "
                         f"({name}=0.5), True/False, or quoted text ({name}='gelu') for a "
                         f"string constexpr")
    return name, v


def _value(text: str):
    """The constexpr value ``text`` spells, or None when it spells none."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    if text in ("True", "False"):
        return text == "True"
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return None


def operand(text: str):
    """``a_ptr`` (the kernel parameter holding the schedule's only tensor) or
    ``a_ptr:A,b_ptr:B`` (parameter -> schedule tensor, for a schedule of several tensors)."""
    if ":" not in text:
        if not _IDENT.match(text.strip()):
            raise UsageError(f"--operand {text!r}: name a kernel parameter (a_ptr) or map "
                             f"parameters to schedule tensors (a_ptr:A,b_ptr:B)")
        return text.strip()
    out = {}
    for item in text.split(","):
        param, colon, tensor = item.partition(":")
        if not colon or not _IDENT.match(param.strip()) or not tensor.strip():
            raise UsageError(f"--operand: {item!r} is not PARAM:TENSOR; write e.g. "
                             f"--operand a_ptr:A,b_ptr:B")
        out[param.strip()] = tensor.strip()
    return out
