"""Shared pieces of the ``tt`` ops: the op base class, parse/print helpers of the custom
formats Triton prints, and memory-effect traits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from xdsl.dialects.builtin import DenseArrayBase, IntegerType, i32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import IRDLOperation, operand_def, result_def
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import EffectInstance, MemoryEffect, MemoryEffectKind

from .formats import _parse_keyword, print_sorted_attr_dict
from .types import CacheModifier, EvictionPolicy, PointerType, _bool, element_type


_SEGMENTS = "operandSegmentSizes"


def _parse_attr_dict(parser: Parser, cls, keyword: bool = False) -> tuple[dict, dict]:
    """Parse an optional ``{...}`` (or ``attributes {...}``) and split it into properties of
    ``cls`` and discardable attributes."""
    if keyword:
        d = parser.parse_optional_attr_dict_with_keyword()
        raw = dict(d.data) if d is not None else {}
    else:
        raw = parser.parse_optional_attr_dict()
    return _split_props(cls, raw)


def _split_props(cls, raw: Mapping[str, Attribute]) -> tuple[dict, dict]:
    names = cls.get_irdl_definition().properties
    props, attrs = {}, {}
    for k, v in raw.items():
        (props if k in names else attrs)[k] = v
    return props, attrs


def _print_operands(printer: Printer, values: Sequence[SSAValue]) -> None:
    printer.print_list(values, printer.print_operand)


def _parse_operands(parser: Parser) -> list[UnresolvedOperand]:
    """A possibly empty, comma separated list of operands (no delimiters)."""
    return parser.parse_optional_undelimited_comma_separated_list(
        parser.parse_optional_unresolved_operand, parser.parse_unresolved_operand) or []


def _parse_bracket_operands(parser: Parser) -> list[UnresolvedOperand]:
    parser.parse_punctuation("[")
    ops = _parse_operands(parser)
    parser.parse_punctuation("]")
    return ops


def _parse_types(parser: Parser) -> list[Attribute]:
    return parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_type)


def _print_types(printer: Printer, types: Iterable[Attribute]) -> None:
    printer.print_list(types, printer.print_attribute)


def _resolve(parser: Parser, operands: Sequence[UnresolvedOperand], types: Sequence[Attribute]):
    if len(operands) != len(types):
        parser.raise_error(f"expected {len(operands)} types, got {len(types)}")
    return [parser.resolve_operand(o, t) for o, t in zip(operands, types)]


def view(field: str, cls) -> property:
    """A read-only property: the integer property ``field`` as ``cls`` (an enum, ``bool``,
    ``int``), or None where an optional property is unset."""
    def get(op):
        attr = getattr(op, field)
        return None if attr is None else cls(attr.value.data)
    return property(get)


def _value(v) -> SSAValue:
    return SSAValue.get(v)


_READ_WRITE = frozenset((EffectInstance(MemoryEffectKind.READ), EffectInstance(MemoryEffectKind.WRITE)))


_READ = frozenset((EffectInstance(MemoryEffectKind.READ),))


class PureIfPureProperty(MemoryEffect):
    """Triton's ``getEffects`` of extern calls and inline asm: none when the op's ``pure``
    property is true, read and write of global memory otherwise."""

    @classmethod
    def get_effects(cls, op: Operation):
        pure = op.properties.get("pure")
        return frozenset() if pure is not None and pure.value.data else _READ_WRITE


class LoadEffects(MemoryEffect):
    """Triton's ``LoadOp::getEffects``: a read of global memory, and a write too when the load
    is volatile (so that a volatile load is never hoisted, merged or removed)."""

    @classmethod
    def get_effects(cls, op: Operation):
        vol = op.properties.get("isVolatile")
        return _READ_WRITE if vol is not None and vol.value.data else _READ


class TTOp(IRDLOperation):
    """Base class of the ``tt`` ops (helpers shared by the custom formats)."""

    def _print_dict(self, printer: Printer, skip: Iterable[str] = ()) -> None:
        """``{...}`` of the properties that are not part of the custom format (``skip``)."""
        print_sorted_attr_dict(printer, self, [k for k in self.properties if k != _SEGMENTS], skip)


class _UnaryCastOp(TTOp):
    """``$src attr-dict : type($src) -> type($result)``."""
    assembly_format = '$src attr-dict `:` type($src) `->` type($result)'

    src = operand_def()
    result = result_def()

    def __init__(self, src: SSAValue | Operation, result_type: Attribute, **attrs: Attribute):
        super().__init__(operands=[src], result_types=[result_type], attributes=attrs or None)


def _print_cache_evict(printer: Printer, op) -> None:
    if op.cache.value.data != CacheModifier.NONE:
        printer.print_string(f" cacheModifier = {CacheModifier(op.cache.value.data).keyword}")
    if op.evict.value.data != EvictionPolicy.NORMAL:
        printer.print_string(f" evictionPolicy = {EvictionPolicy(op.evict.value.data).keyword}")


def _parse_cache_evict(parser: Parser, props: dict) -> None:
    """``oilist(cacheModifier = $cache | evictionPolicy = $evict)``"""
    while True:
        if parser.parse_optional_keyword("cacheModifier") is not None:
            parser.parse_punctuation("=")
            props["cache"] = _parse_keyword(parser, CacheModifier)
        elif parser.parse_optional_keyword("evictionPolicy") is not None:
            parser.parse_punctuation("=")
            props["evict"] = _parse_keyword(parser, EvictionPolicy)
        else:
            return


_CACHE_NONE = CacheModifier.NONE.attr()


_EVICT_NORMAL = EvictionPolicy.NORMAL.attr()


_FALSE = _bool(False)


_EMPTY_I32_ARRAY = DenseArrayBase.from_list(i32, [])


def _addr_space(ptr_like: Attribute) -> int:
    p = element_type(ptr_like)
    return p.address_space.data if isinstance(p, PointerType) else 1


class _ReturnLikeOp(TTOp):
    """``$values attr-dict (: type($values))?`` terminators (the operand group is defined by
    each subclass with its ODS name, and so is its format)."""

    def __init__(self, values: Sequence = ()):
        super().__init__(operands=[list(values)])


def _signless(t: Attribute) -> Attribute:
    if isinstance(t, IntegerType):
        return IntegerType(t.width.data)
    return t
