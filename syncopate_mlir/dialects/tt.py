"""The ``tt`` mirror dialect: Triton 3.6.0's TTIR ops, types and attributes in xDSL.

Every op here has

* the operand, result, region and property names and types of Triton's ODS definition
  (``include/triton/Dialect/Triton/IR/TritonOps.td`` at v3.6.0), so that the generic form
  xDSL prints is parsed by Triton's MLIR as the same op (``operandSegmentSizes``, ``cache``,
  ``evict``, ``isVolatile``, ``boundaryCheck``, ``inputPrecision``, ``sem``, ``scope`` ...);
* a parser and printer for Triton's *custom* assembly syntax (the declarative
  ``assemblyFormat`` of the ``.td`` file, or the C++ printer for ``tt.func``), so that the text
  Triton prints for a TTIR module parses here and the text printed here parses in Triton;
* Python accessors with Triton's operand names (``LoadOp.ptr``, ``.mask``, ``.other``;
  ``DotOp.a/.b/.c``; ``FuncOp.sym_name`` ...) and a builder-friendly ``__init__``.

Triton's enum attributes (``CacheModifier``, ``MemSemantic`` ...) are ``I32EnumAttr``s: in
MLIR they are stored as ``i32`` integer attributes and printed as keywords by the custom
formats.  Here they are ``IntegerAttr`` properties of type ``i32`` too, and each has a Python
``IntEnum`` (:class:`CacheModifier`, :class:`EvictionPolicy`, :class:`MemSemantic`,
:class:`MemSyncScope`, :class:`RMWOp`, :class:`PaddingOption`, :class:`RoundingMode`,
:class:`PropagateNan`, :class:`InputPrecision`, :class:`ProgramIDDim`,
:class:`ScaleDotElemType`, :class:`DescriptorReduceKind`) whose values are Triton's.  Ops
expose the enum through a typed accessor next to the raw property, e.g.
``LoadOp.cache`` (the ``IntegerAttr``) and ``LoadOp.cache_modifier`` (the enum).

Also here: overrides of xDSL's ``arith.select``, ``arith.cmpi`` and ``arith.cmpf`` (Triton
compares and selects elementwise on tensors, with ``tensor<..xi1>`` results and conditions,
which xDSL's ops refuse, and attaches attributes to them), which
:func:`syncopate_mlir.context.make_context` registers in place of xDSL's.  They subclass
xDSL's classes, so ``isinstance(op, arith.CmpiOp)`` still holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from enum import IntEnum
from typing import ClassVar

from xdsl.dialects import arith as _arith
from xdsl.dialects import gpu as _gpu
from xdsl.dialects import scf as _scf
from xdsl.dialects.builtin import (
    ArrayAttr,
    BFloat16Type,
    BoolAttr,
    DenseArrayBase,
    DenseIntOrFPElementsAttr,
    DictionaryAttr,
    Float16Type,
    Float32Type,
    Float64Type,
    FloatAttr,
    FunctionType,
    IntAttr,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    NoneAttr,
    StringAttr,
    SymbolRefAttr,
    TensorType,
    UnitAttr,
    i1,
    i32,
    i64,
)
from xdsl.ir import (
    Attribute,
    Block,
    Dialect,
    Operation,
    ParametrizedAttribute,
    Region,
    SSAValue,
    TypeAttribute,
)
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    SameVariadicOperandSize,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import AttrParser, Parser, UnresolvedOperand
from xdsl.printer import Printer
from xdsl.traits import (
    CallableOpInterface,
    EffectInstance,
    MemoryEffect,
    MemoryEffectKind,
    HasParent,
    IsolatedFromAbove,
    IsTerminator,
    MemoryReadEffect,
    MemoryWriteEffect,
    NoMemoryEffect,
    Pure,
    RecursiveMemoryEffect,
    ReturnLike,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException

# =============================================================================================
# Enums (Triton's I32EnumAttrs; values and keywords as in TritonAttrDefs.td)
# =============================================================================================


class _TTEnum(IntEnum):
    """An ``I32EnumAttr`` of Triton: an ``i32`` integer attribute printed as a keyword."""

    _KEYWORDS: ClassVar[dict]

    @property
    def keyword(self) -> str:
        return type(self)._KEYWORDS[self]

    @classmethod
    def from_keyword(cls, kw: str):
        for member, k in cls._KEYWORDS.items():
            if k == kw:
                return member
        raise KeyError(kw)

    @classmethod
    def keywords(cls) -> list[str]:
        return list(cls._KEYWORDS.values())

    def attr(self) -> IntegerAttr:
        return IntegerAttr(int(self), i32)

    @classmethod
    def coerce(cls, value: "_TTEnum | int | str | IntegerAttr"):
        """Accept an enum member, its integer value, its keyword (``"cg"``, ``"acq_rel"``) or
        an ``IntegerAttr``."""
        if isinstance(value, IntegerAttr):
            return cls(value.value.data)
        if isinstance(value, str):
            try:
                return cls.from_keyword(value)
            except KeyError:
                return cls[value.upper()]
        return cls(value)


def _kw(cls, mapping):
    cls._KEYWORDS = {cls[k]: v for k, v in mapping.items()}
    return cls


class CacheModifier(_TTEnum):
    NONE = 1
    CA = 2
    CG = 3
    WB = 4
    CS = 5
    WT = 6
    CV = 7


_kw(CacheModifier, {"NONE": "none", "CA": "ca", "CG": "cg", "WB": "wb", "CS": "cs", "WT": "wt", "CV": "cv"})


class MemSemantic(_TTEnum):
    RELAXED = 1
    ACQUIRE = 2
    RELEASE = 3
    ACQUIRE_RELEASE = 4


_kw(MemSemantic, {"RELAXED": "relaxed", "ACQUIRE": "acquire", "RELEASE": "release",
                  "ACQUIRE_RELEASE": "acq_rel"})


class EvictionPolicy(_TTEnum):
    NORMAL = 1
    EVICT_FIRST = 2
    EVICT_LAST = 3


_kw(EvictionPolicy, {"NORMAL": "evict_normal", "EVICT_FIRST": "evict_first", "EVICT_LAST": "evict_last"})


class PaddingOption(_TTEnum):
    PAD_ZERO = 1
    PAD_NAN = 2


_kw(PaddingOption, {"PAD_ZERO": "zero", "PAD_NAN": "nan"})


class RMWOp(_TTEnum):
    AND = 1
    OR = 2
    XOR = 3
    ADD = 4
    FADD = 5
    MAX = 6
    MIN = 7
    UMAX = 8
    UMIN = 9
    XCHG = 10


_kw(RMWOp, {"AND": "and", "OR": "or", "XOR": "xor", "ADD": "add", "FADD": "fadd", "MAX": "max",
            "MIN": "min", "UMAX": "umax", "UMIN": "umin", "XCHG": "exch"})


class DescriptorReduceKind(_TTEnum):
    ADD = 1
    MIN = 2
    MAX = 3
    INC = 4
    DEC = 5
    AND = 6
    OR = 7
    XOR = 8


_kw(DescriptorReduceKind, {"ADD": "add", "MIN": "min", "MAX": "max", "INC": "inc", "DEC": "dec",
                           "AND": "and", "OR": "or", "XOR": "xor"})


class MemSyncScope(_TTEnum):
    GPU = 1
    CTA = 2
    SYSTEM = 3


_kw(MemSyncScope, {"GPU": "gpu", "CTA": "cta", "SYSTEM": "sys"})


class ProgramIDDim(_TTEnum):
    X = 0
    Y = 1
    Z = 2


_kw(ProgramIDDim, {"X": "x", "Y": "y", "Z": "z"})


class RoundingMode(_TTEnum):
    RTZ = 0
    RTNE = 1


_kw(RoundingMode, {"RTZ": "rtz", "RTNE": "rtne"})


class PropagateNan(_TTEnum):
    NONE = 0
    ALL = 0xFFFF


_kw(PropagateNan, {"NONE": "none", "ALL": "all"})


class InputPrecision(_TTEnum):
    TF32 = 0
    TF32x3 = 1
    IEEE = 2
    BF16x3 = 3
    BF16x6 = 4


_kw(InputPrecision, {"TF32": "tf32", "TF32x3": "tf32x3", "IEEE": "ieee", "BF16x3": "bf16x3",
                     "BF16x6": "bf16x6"})


class ScaleDotElemType(_TTEnum):
    E4M3 = 0
    E5M2 = 1
    E2M3 = 2
    E3M2 = 3
    E2M1 = 4
    BF16 = 5
    FP16 = 6


_kw(ScaleDotElemType, {"E4M3": "e4m3", "E5M2": "e5m2", "E2M3": "e2m3", "E3M2": "e3m2",
                       "E2M1": "e2m1", "BF16": "bf16", "FP16": "fp16"})


def _i32(v: int) -> IntegerAttr:
    return IntegerAttr(int(v), i32)


def _bool(v: bool) -> IntegerAttr:
    return IntegerAttr(1 if v else 0, i1)



# =============================================================================================
# Types
# =============================================================================================


@irdl_attr_definition
class PointerType(ParametrizedAttribute, TypeAttribute):
    """``!tt.ptr<T>`` / ``!tt.ptr<T, addrspace>`` (address space 1, global, is elided).

    ``T`` is a scalar type, or a ranked tensor type for a block pointer
    (``!tt.ptr<tensor<128x64xf16>>``)."""

    name = "tt.ptr"

    pointee_type: Attribute
    address_space: IntAttr

    def __init__(self, pointee_type: Attribute, address_space: int | IntAttr = 1):
        if isinstance(address_space, int):
            address_space = IntAttr(address_space)
        super().__init__(pointee_type, address_space)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_attribute(self.pointee_type)
        if self.address_space.data != 1:
            printer.print_string(", ")
            printer.print_int(self.address_space.data)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[Attribute, IntAttr]:
        parser.parse_punctuation("<")
        pointee = parser.parse_type()
        space = 1
        if parser.parse_optional_punctuation(",") is not None:
            space = parser.parse_integer(allow_boolean=False, allow_negative=False)
        parser.parse_punctuation(">")
        return (pointee, IntAttr(space))

    @property
    def is_block_pointer(self) -> bool:
        return isinstance(self.pointee_type, TensorType)


@irdl_attr_definition
class TensorDescType(ParametrizedAttribute, TypeAttribute):
    """``!tt.tensordesc<tensor<BxT>>``: a TMA tensor descriptor with block type ``tensor<BxT>``.

    Signed/unsigned integer element types (``si32``) appear when the descriptor was made from
    a pointer to a signed type, as Triton 3.6 prints them."""

    name = "tt.tensordesc"

    block_type: TensorType

    def __init__(self, block_type: TensorType):
        super().__init__(block_type)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string("<")
        printer.print_attribute(self.block_type)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> tuple[TensorType]:
        parser.parse_punctuation("<")
        block = parser.parse_type()
        parser.parse_punctuation(">")
        if not isinstance(block, TensorType):
            parser.raise_error("expected a ranked tensor type in !tt.tensordesc")
        return (block,)


# ----- type helpers ---------------------------------------------------------------------------


def is_ptr_like(t: Attribute) -> bool:
    return isinstance(t, PointerType) or (isinstance(t, TensorType) and isinstance(t.element_type, PointerType))


def is_tensor(t: Attribute) -> bool:
    return isinstance(t, TensorType)


def element_type(t: Attribute) -> Attribute:
    return t.element_type if isinstance(t, TensorType) else t


def shape_of(t: Attribute) -> tuple[int, ...]:
    return t.get_shape() if isinstance(t, TensorType) else ()


def like(t: Attribute, elem: Attribute) -> Attribute:
    """A type with the shape of ``t`` (scalar or tensor) and element type ``elem``."""
    if isinstance(t, TensorType):
        return TensorType(elem, t.get_shape(), t.encoding)
    return elem


def pointee_type(ptr_like: Attribute) -> Attribute:
    """The type a ``tt.load`` from ``ptr_like`` produces: ``!tt.ptr<T>`` -> ``T``,
    ``tensor<Nx!tt.ptr<T>>`` -> ``tensor<NxT>``, ``!tt.ptr<tensor<..>>`` -> ``tensor<..>``."""
    if isinstance(ptr_like, PointerType):
        return ptr_like.pointee_type
    if isinstance(ptr_like, TensorType) and isinstance(ptr_like.element_type, PointerType):
        return like(ptr_like, ptr_like.element_type.pointee_type)
    raise VerifyException(f"expected a pointer or a tensor of pointers, got {ptr_like}")


def pointer_type_like(value_type: Attribute, address_space: int = 1) -> Attribute:
    """``T`` -> ``!tt.ptr<T>``; ``tensor<NxT>`` -> ``tensor<Nx!tt.ptr<T>>``."""
    return like(value_type, PointerType(element_type(value_type), address_space))


def i1_like(t: Attribute) -> Attribute:
    return like(t, i1)


# =============================================================================================
# Custom-format helpers
# =============================================================================================

_SEGMENTS = "operandSegmentSizes"


def _defaults(cls) -> dict[str, Attribute]:
    d = cls.__dict__.get("_tt_defaults")
    if d is None:
        op_def = cls.get_irdl_definition()
        d = {name: p.default_value for name, p in op_def.properties.items() if p.default_value is not None}
        cls._tt_defaults = d
    return d


def _print_attr_dict(printer: Printer, op: IRDLOperation, skip: Iterable[str] = (),
                     keyword: bool = False) -> None:
    """Print ``{...}`` with the op's discardable attributes and the properties that are not
    part of the custom format (``skip``), leaving out defaults, like MLIR's ``attr-dict``."""
    defaults = _defaults(type(op))
    skip = set(skip)
    entries: dict[str, Attribute] = {}
    for k, v in op.properties.items():
        if k in skip or k == _SEGMENTS:
            continue
        if k in defaults and defaults[k] == v:
            continue
        entries[k] = v
    for k, v in op.attributes.items():
        if k not in skip:
            entries[k] = v
    if entries:
        printer.print_op_attributes(dict(sorted(entries.items())), print_keyword=keyword)


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
    first = parser.parse_optional_unresolved_operand()
    if first is None:
        return []
    out = [first]
    while parser.parse_optional_punctuation(",") is not None:
        out.append(parser.parse_unresolved_operand())
    return out


def _parse_bracket_operands(parser: Parser) -> list[UnresolvedOperand]:
    parser.parse_punctuation("[")
    ops = _parse_operands(parser)
    parser.parse_punctuation("]")
    return ops


def _parse_types(parser: Parser) -> list[Attribute]:
    out = [parser.parse_type()]
    while parser.parse_optional_punctuation(",") is not None:
        out.append(parser.parse_type())
    return out


def _print_types(printer: Printer, types: Iterable[Attribute]) -> None:
    printer.print_list(types, printer.print_attribute)


def _print_stripped(printer: Printer, t: Attribute) -> None:
    """Print a ``tt`` type without its ``!tt.ptr`` / ``!tt.tensordesc`` prefix, as MLIR does in
    a format for a type constraint of the op's own dialect (``: <f32>, <tensor<..>>``)."""
    if isinstance(t, (PointerType, TensorDescType)):
        t.print_parameters(printer)
    else:
        printer.print_attribute(t)


def _parse_stripped(parser: Parser, cls) -> Attribute:
    if parser._current_token.text == "<":  # noqa: SLF001 - the stripped form starts with '<'
        return cls(*cls.parse_parameters(parser))
    return parser.parse_type()


def _resolve(parser: Parser, operands: Sequence[UnresolvedOperand], types: Sequence[Attribute]):
    if len(operands) != len(types):
        parser.raise_error(f"expected {len(operands)} types, got {len(types)}")
    return [parser.resolve_operand(o, t) for o, t in zip(operands, types)]


def _enum_prop(op: Operation, name: str, enum_cls):
    attr = op.properties.get(name)
    if attr is None:
        return None
    return enum_cls(attr.value.data)


def _parse_enum(parser: Parser, enum_cls):
    kw = parser.parse_identifier()
    try:
        return enum_cls.from_keyword(kw)
    except KeyError:
        parser.raise_error(f"expected one of {enum_cls.keywords()} for {enum_cls.__name__}, got '{kw}'")


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
        _print_attr_dict(printer, self, skip)


# =============================================================================================
# Simple "src : type -> type" style ops
# =============================================================================================


class _UnaryCastOp(TTOp):
    """``$src attr-dict : type($src) -> type($result)``."""

    src = operand_def()
    result = result_def()

    def __init__(self, src: SSAValue | Operation, result_type: Attribute, **attrs: Attribute):
        super().__init__(operands=[src], result_types=[result_type], attributes=attrs or None)

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        src_t = parser.parse_type()
        parser.parse_punctuation("->")
        res_t = parser.parse_type()
        return cls.create(operands=[parser.resolve_operand(src, src_t)], result_types=[res_t],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.src)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


@irdl_op_definition
class IntToPtrOp(_UnaryCastOp):
    """``tt.int_to_ptr``: cast ``i64`` (or a tensor of) to a pointer (or a tensor of)."""

    name = "tt.int_to_ptr"
    traits = traits_def(Pure())

    def verify_(self):
        if element_type(self.src.type) != i64 or not is_ptr_like(self.result.type):
            raise VerifyException("tt.int_to_ptr casts i64 (or a tensor of i64) to a pointer type")


@irdl_op_definition
class PtrToIntOp(_UnaryCastOp):
    """``tt.ptr_to_int``: cast a pointer (or a tensor of) to ``i64`` (or a tensor of)."""

    name = "tt.ptr_to_int"
    traits = traits_def(Pure())

    def verify_(self):
        if not is_ptr_like(self.src.type) or element_type(self.result.type) != i64:
            raise VerifyException("tt.ptr_to_int casts a pointer type to i64 (or a tensor of i64)")


@irdl_op_definition
class BitcastOp(_UnaryCastOp):
    """``tt.bitcast``: reinterpret bits between types of the same width (pointers included)."""

    name = "tt.bitcast"
    traits = traits_def(Pure())


@irdl_op_definition
class SplatOp(_UnaryCastOp):
    """``tt.splat``: broadcast a scalar to a tensor."""

    name = "tt.splat"
    traits = traits_def(Pure())

    def __init__(self, src: SSAValue | Operation, result_type: Attribute | Sequence[int]):
        src = _value(src)
        if not isinstance(result_type, Attribute):
            result_type = TensorType(src.type, list(result_type))
        super().__init__(src, result_type)

    def verify_(self):
        if not isinstance(self.result.type, TensorType) or element_type(self.result.type) != element_type(self.src.type):
            raise VerifyException("tt.splat result must be a tensor of the source's element type")


@irdl_op_definition
class BroadcastOp(_UnaryCastOp):
    """``tt.broadcast``: grow size-1 dimensions of a tensor."""

    name = "tt.broadcast"
    traits = traits_def(Pure())

    def verify_(self):
        s, r = self.src.type, self.result.type
        if not (isinstance(s, TensorType) and isinstance(r, TensorType)) or s.element_type != r.element_type:
            raise VerifyException("tt.broadcast takes and returns tensors of one element type")
        if len(s.get_shape()) != len(r.get_shape()) or any(
                a != b and a != 1 for a, b in zip(s.get_shape(), r.get_shape())):
            raise VerifyException(f"tt.broadcast cannot broadcast {s} to {r}")


@irdl_op_definition
class ExpandDimsOp(_UnaryCastOp):
    """``tt.expand_dims``: insert a size-1 dimension at ``axis``."""

    name = "tt.expand_dims"
    traits = traits_def(Pure())
    axis = prop_def(IntegerAttr)

    def __init__(self, src: SSAValue | Operation, axis: int, result_type: Attribute | None = None):
        src = _value(src)
        if result_type is None:
            shape = list(shape_of(src.type))
            shape.insert(axis, 1)
            result_type = TensorType(element_type(src.type), shape)
        IRDLOperation.__init__(self, operands=[src], result_types=[result_type],
                               properties={"axis": _i32(axis)})

    def verify_(self):
        s, r = shape_of(self.src.type), shape_of(self.result.type)
        ax = self.axis.value.data
        if not 0 <= ax <= len(s) or list(r) != list(s[:ax]) + [1] + list(s[ax:]):
            raise VerifyException(f"tt.expand_dims axis {ax}: {self.src.type} -> {self.result.type}")


class _LhsRhsOp(TTOp):
    """``$lhs, $rhs attr-dict : type($lhs) -> type($result)``."""

    lhs = operand_def()
    rhs = operand_def()
    result = result_def()

    def __init__(self, lhs, rhs, result_type: Attribute):
        super().__init__(operands=[lhs, rhs], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser):
        lhs = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        rhs = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        return cls.create(operands=_resolve(parser, [lhs, rhs], [t, t]), result_types=[rt],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, [self.lhs, self.rhs])
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.lhs.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


@irdl_op_definition
class CatOp(_LhsRhsOp):
    """``tt.cat``: concatenate two tensors (may reorder elements)."""

    name = "tt.cat"
    traits = traits_def(NoMemoryEffect())


@irdl_op_definition
class JoinOp(_LhsRhsOp):
    """``tt.join``: join two tensors along a new minor dimension of size 2."""

    name = "tt.join"
    traits = traits_def(NoMemoryEffect())

    def __init__(self, lhs, rhs, result_type: Attribute | None = None):
        lhs = _value(lhs)
        if result_type is None:
            result_type = TensorType(element_type(lhs.type), list(shape_of(lhs.type)) + [2])
        super().__init__(lhs, rhs, result_type)


@irdl_op_definition
class SplitOp(TTOp):
    """``tt.split``: split a tensor along its last dimension (of size 2) into two."""

    name = "tt.split"
    traits = traits_def(NoMemoryEffect())
    ASM_RESULT_NAMES: ClassVar[tuple[str, ...]] = ("outLHS", "outRHS")
    src = operand_def()
    outLHS = result_def()
    outRHS = result_def()

    def __init__(self, src, result_type: Attribute | None = None):
        src = _value(src)
        if result_type is None:
            result_type = TensorType(element_type(src.type), list(shape_of(src.type))[:-1])
        super().__init__(operands=[src], result_types=[result_type, result_type])

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        st = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        return cls.create(operands=[parser.resolve_operand(src, st)], result_types=[rt, rt],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.src)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.outLHS.type)


@irdl_op_definition
class TransOp(_UnaryCastOp):
    """``tt.trans``: permute the dimensions of a tensor by ``order``."""

    name = "tt.trans"
    traits = traits_def(Pure())
    order = prop_def(DenseArrayBase)

    def __init__(self, src, order: Sequence[int], result_type: Attribute | None = None):
        src = _value(src)
        if result_type is None:
            s = shape_of(src.type)
            result_type = TensorType(element_type(src.type), [s[i] for i in order])
        IRDLOperation.__init__(self, operands=[src], result_types=[result_type],
                               properties={"order": DenseArrayBase.from_list(i32, list(order))})


@irdl_op_definition
class ReshapeOp(TTOp):
    """``tt.reshape``: reinterpret a tensor with another shape (``allow_reorder`` lets the
    compiler reorder elements)."""

    name = "tt.reshape"
    traits = traits_def(Pure())
    src = operand_def()
    result = result_def()
    allow_reorder = opt_prop_def(UnitAttr)
    efficient_layout = opt_prop_def(UnitAttr)

    def __init__(self, src, result_type: Attribute | Sequence[int], allow_reorder: bool = False,
                 efficient_layout: bool = False):
        src = _value(src)
        if not isinstance(result_type, Attribute):
            result_type = TensorType(element_type(src.type), list(result_type))
        props = {}
        if allow_reorder:
            props["allow_reorder"] = UnitAttr()
        if efficient_layout:
            props["efficient_layout"] = UnitAttr()
        super().__init__(operands=[src], result_types=[result_type], properties=props)

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        props = {}
        if parser.parse_optional_keyword("allow_reorder") is not None:
            props["allow_reorder"] = UnitAttr()
        if parser.parse_optional_keyword("efficient_layout") is not None:
            props["efficient_layout"] = UnitAttr()
        p2, attrs = _parse_attr_dict(parser, cls)
        props.update(p2)
        parser.parse_punctuation(":")
        st = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        return cls.create(operands=[parser.resolve_operand(src, st)], result_types=[rt],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.src)
        if self.allow_reorder is not None:
            printer.print_string(" allow_reorder")
        if self.efficient_layout is not None:
            printer.print_string(" efficient_layout")
        self._print_dict(printer, ("allow_reorder", "efficient_layout"))
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)

    def verify_(self):
        n = lambda t: math.prod(shape_of(t))  # noqa: E731
        if n(self.src.type) != n(self.result.type):
            raise VerifyException("tt.reshape cannot change the number of elements")


@irdl_op_definition
class UnsplatOp(TTOp):
    """``tt.unsplat``: the single element of a one-element tensor, as a scalar."""

    name = "tt.unsplat"
    traits = traits_def(Pure())
    src = operand_def()
    result = result_def()

    def __init__(self, src):
        src = _value(src)
        super().__init__(operands=[src], result_types=[element_type(src.type)])

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        st = parser.parse_type()
        return cls.create(operands=[parser.resolve_operand(src, st)], result_types=[element_type(st)],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.src)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)

    def verify_(self):
        if math.prod(shape_of(self.src.type)) != 1:
            raise VerifyException("tt.unsplat needs a tensor with exactly one element")


@irdl_op_definition
class FpToFpOp(TTOp):
    """``tt.fp_to_fp``: float conversion with custom types (fp8) and rounding modes."""

    name = "tt.fp_to_fp"
    traits = traits_def(Pure())
    src = operand_def()
    result = result_def()
    rounding = opt_prop_def(IntegerAttr)

    def __init__(self, src, result_type: Attribute, rounding: RoundingMode | str | None = None):
        props = {}
        if rounding is not None:
            props["rounding"] = RoundingMode.coerce(rounding).attr()
        super().__init__(operands=[src], result_types=[result_type], properties=props)

    @property
    def rounding_mode(self) -> RoundingMode | None:
        return _enum_prop(self, "rounding", RoundingMode)

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        if parser.parse_optional_punctuation(",") is not None:
            parser.parse_keyword("rounding")
            parser.parse_punctuation("=")
            props["rounding"] = _parse_enum(parser, RoundingMode).attr()
        parser.parse_punctuation(":")
        st = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        return cls.create(operands=[parser.resolve_operand(src, st)], result_types=[rt],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.src)
        self._print_dict(printer, ("rounding",))
        if self.rounding is not None:
            printer.print_string(f", rounding = {self.rounding_mode.keyword}")
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


# =============================================================================================
# Elementwise math ops ("$x, $y attr-dict : type($x)")
# =============================================================================================


class _SameTypeOp(TTOp):
    """Ops whose operands and result share one type: ``$x (, $y)* attr-dict : type($x)``."""

    result = result_def()
    _OPERANDS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse(cls, parser: Parser):
        ops = _parse_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.create(operands=_resolve(parser, ops, [t] * len(ops)), result_types=[t],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self):
        if any(o.type != self.result.type for o in self.operands):
            raise VerifyException(f"{self.name} needs operands and result of one type")


@irdl_op_definition
class PreciseSqrtOp(_SameTypeOp):
    """``tt.precise_sqrt``: IEEE-rounded square root."""

    name = "tt.precise_sqrt"
    traits = traits_def(Pure())
    x = operand_def()

    def __init__(self, x):
        x = _value(x)
        super().__init__(operands=[x], result_types=[x.type])


class _BinarySameTypeOp(_SameTypeOp):
    x = operand_def()
    y = operand_def()

    def __init__(self, x, y):
        x = _value(x)
        super().__init__(operands=[x, y], result_types=[x.type])


@irdl_op_definition
class PreciseDivFOp(_BinarySameTypeOp):
    """``tt.precise_divf``: IEEE-rounded division."""

    name = "tt.precise_divf"
    traits = traits_def(Pure())


@irdl_op_definition
class MulhiUIOp(_BinarySameTypeOp):
    """``tt.mulhiui``: high half of the unsigned 2N-bit product."""

    name = "tt.mulhiui"
    traits = traits_def(Pure())


@irdl_op_definition
class ClampFOp(TTOp):
    """``tt.clampf``: clamp ``x`` to ``[min, max]`` (``propagateNan``: none | all)."""

    name = "tt.clampf"
    traits = traits_def(Pure())
    x = operand_def()
    min = operand_def()
    max = operand_def()
    result = result_def()
    propagateNan = prop_def(IntegerAttr)

    def __init__(self, x, min, max, propagate_nan: PropagateNan | str = PropagateNan.NONE):
        x = _value(x)
        super().__init__(operands=[x, min, max], result_types=[x.type],
                         properties={"propagateNan": PropagateNan.coerce(propagate_nan).attr()})

    @property
    def propagate_nan(self) -> PropagateNan:
        return PropagateNan(self.propagateNan.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        ops = [parser.parse_unresolved_operand()]
        for _ in range(2):
            parser.parse_punctuation(",")
            ops.append(parser.parse_unresolved_operand())
        parser.parse_punctuation(",")
        parser.parse_keyword("propagateNan")
        parser.parse_punctuation("=")
        pn = _parse_enum(parser, PropagateNan)
        props, attrs = _parse_attr_dict(parser, cls)
        props["propagateNan"] = pn.attr()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.create(operands=_resolve(parser, ops, [t] * 3), result_types=[t],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        printer.print_string(f", propagateNan = {self.propagate_nan.keyword}")
        self._print_dict(printer, ("propagateNan",))
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)


# =============================================================================================
# Pointers, loads and stores
# =============================================================================================


@irdl_op_definition
class AddPtrOp(TTOp):
    """``tt.addptr %ptr, %offset : ptr-type, offset-type``: pointer arithmetic in elements."""

    name = "tt.addptr"
    traits = traits_def(Pure())
    ptr = operand_def()
    offset = operand_def()
    result = result_def()

    def __init__(self, ptr, offset):
        ptr = _value(ptr)
        super().__init__(operands=[ptr, offset], result_types=[ptr.type])

    @classmethod
    def parse(cls, parser: Parser):
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        off = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        rt = parser.parse_type()
        parser.parse_punctuation(",")
        ot = parser.parse_type()
        return cls.create(operands=_resolve(parser, [ptr, off], [rt, ot]), result_types=[rt],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, [self.ptr, self.offset])
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)
        printer.print_string(", ")
        printer.print_attribute(self.offset.type)

    def verify_(self):
        if self.result.type != self.ptr.type or not is_ptr_like(self.ptr.type):
            raise VerifyException("tt.addptr result type must be the pointer operand's type")
        if shape_of(self.offset.type) != shape_of(self.ptr.type) or not isinstance(
                element_type(self.offset.type), IntegerType):
            raise VerifyException("tt.addptr offset must be an integer of the pointer's shape")


@irdl_op_definition
class AdvanceOp(TTOp):
    """``tt.advance %ptr, [%offsets] : <tensor<..>>``: move a block pointer."""

    name = "tt.advance"
    traits = traits_def(Pure())
    ptr = operand_def()
    offsets = var_operand_def()
    result = result_def()

    def __init__(self, ptr, offsets: Sequence):
        ptr = _value(ptr)
        super().__init__(operands=[ptr, list(offsets)], result_types=[ptr.type])

    @classmethod
    def parse(cls, parser: Parser):
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        offs = _parse_bracket_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        rt = _parse_stripped(parser, PointerType)
        return cls.create(operands=_resolve(parser, [ptr] + offs, [rt] + [i32] * len(offs)),
                          result_types=[rt], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.ptr)
        printer.print_string(", [")
        _print_operands(printer, self.offsets)
        printer.print_string("]")
        self._print_dict(printer)
        printer.print_string(" : ")
        _print_stripped(printer, self.result.type)


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
            props["cache"] = _parse_enum(parser, CacheModifier).attr()
        elif parser.parse_optional_keyword("evictionPolicy") is not None:
            parser.parse_punctuation("=")
            props["evict"] = _parse_enum(parser, EvictionPolicy).attr()
        else:
            return


_CACHE_NONE = CacheModifier.NONE.attr()
_EVICT_NORMAL = EvictionPolicy.NORMAL.attr()
_FALSE = _bool(False)
_EMPTY_I32_ARRAY = DenseArrayBase.from_list(i32, [])


@irdl_op_definition
class LoadOp(TTOp):
    """``tt.load``: load from a pointer, a tensor of pointers, or a block pointer.

    Operands: ``ptr``, optional ``mask`` and ``other``.  Properties (ODS names):
    ``boundaryCheck`` (block pointers), ``padding``, ``cache``, ``evict``, ``isVolatile``."""

    name = "tt.load"
    traits = traits_def(LoadEffects())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    ptr = operand_def()
    mask = opt_operand_def()
    other = opt_operand_def()
    result = result_def()

    boundary_check = prop_def(DenseArrayBase, _EMPTY_I32_ARRAY, prop_name="boundaryCheck")
    padding = opt_prop_def(IntegerAttr)
    cache = prop_def(IntegerAttr, _CACHE_NONE)
    evict = prop_def(IntegerAttr, _EVICT_NORMAL)
    is_volatile = prop_def(BoolAttr, _FALSE, prop_name="isVolatile")

    def __init__(self, ptr, mask=None, other=None, *, boundary_check: Sequence[int] = (),
                 padding: PaddingOption | str | None = None,
                 cache: CacheModifier | str = CacheModifier.NONE,
                 evict: EvictionPolicy | str = EvictionPolicy.NORMAL, is_volatile: bool = False,
                 result_type: Attribute | None = None):
        ptr = _value(ptr)
        if result_type is None:
            result_type = pointee_type(ptr.type)
        props = {
            "boundaryCheck": DenseArrayBase.from_list(i32, list(boundary_check)),
            "cache": CacheModifier.coerce(cache).attr(),
            "evict": EvictionPolicy.coerce(evict).attr(),
            "isVolatile": BoolAttr(bool(is_volatile), i1),
        }
        if padding is not None:
            props["padding"] = PaddingOption.coerce(padding).attr()
        super().__init__(operands=[ptr, [mask] if mask is not None else [],
                                   [other] if other is not None else []],
                         result_types=[result_type], properties=props)

    @property
    def cache_modifier(self) -> CacheModifier:
        return CacheModifier(self.cache.value.data)

    @property
    def eviction_policy(self) -> EvictionPolicy:
        return EvictionPolicy(self.evict.value.data)

    @property
    def padding_option(self) -> PaddingOption | None:
        return _enum_prop(self, "padding", PaddingOption)

    @property
    def volatile(self) -> bool:
        return bool(self.is_volatile.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        ptr = parser.parse_unresolved_operand()
        rest = []
        while parser.parse_optional_punctuation(",") is not None:
            rest.append(parser.parse_unresolved_operand())
        if len(rest) > 2:
            parser.raise_error("tt.load takes at most a mask and an other value")
        props: dict = {}
        _parse_cache_evict(parser, props)
        p2, attrs = _parse_attr_dict(parser, cls)
        props.update(p2)
        parser.parse_punctuation(":")
        pt = parser.parse_type()
        val_t = pointee_type(pt)
        types = [pt, i1_like(val_t), val_t][: 1 + len(rest)]
        ops = _resolve(parser, [ptr] + rest, types)
        segs = [1, 1 if len(rest) > 0 else 0, 1 if len(rest) > 1 else 0]
        props[_SEGMENTS] = DenseArrayBase.from_list(i32, segs)
        return cls.create(operands=ops, result_types=[val_t], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        _print_cache_evict(printer, self)
        self._print_dict(printer, ("cache", "evict"))
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)

    def verify_(self):
        if self.result.type != pointee_type(self.ptr.type):
            raise VerifyException(f"tt.load result type {self.result.type} does not match the "
                                  f"pointer type {self.ptr.type}")
        if self.mask is not None and self.mask.type != i1_like(self.result.type):
            raise VerifyException("tt.load mask must be i1 of the result's shape")
        if self.other is not None and self.other.type != self.result.type:
            raise VerifyException("tt.load other must have the result type")


@irdl_op_definition
class StoreOp(TTOp):
    """``tt.store``: store ``value`` through ``ptr`` under an optional ``mask``.

    Properties (ODS names): ``boundaryCheck``, ``cache``, ``evict``."""

    name = "tt.store"
    traits = traits_def(MemoryWriteEffect())

    ptr = operand_def()
    value = operand_def()
    mask = opt_operand_def()

    boundary_check = prop_def(DenseArrayBase, _EMPTY_I32_ARRAY, prop_name="boundaryCheck")
    cache = prop_def(IntegerAttr, _CACHE_NONE)
    evict = prop_def(IntegerAttr, _EVICT_NORMAL)

    def __init__(self, ptr, value, mask=None, *, boundary_check: Sequence[int] = (),
                 cache: CacheModifier | str = CacheModifier.NONE,
                 evict: EvictionPolicy | str = EvictionPolicy.NORMAL):
        props = {
            "boundaryCheck": DenseArrayBase.from_list(i32, list(boundary_check)),
            "cache": CacheModifier.coerce(cache).attr(),
            "evict": EvictionPolicy.coerce(evict).attr(),
        }
        super().__init__(operands=[ptr, value, [mask] if mask is not None else []], properties=props)

    @property
    def cache_modifier(self) -> CacheModifier:
        return CacheModifier(self.cache.value.data)

    @property
    def eviction_policy(self) -> EvictionPolicy:
        return EvictionPolicy(self.evict.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        ptr = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        val = parser.parse_unresolved_operand()
        rest = []
        if parser.parse_optional_punctuation(",") is not None:
            rest.append(parser.parse_unresolved_operand())
        props: dict = {}
        _parse_cache_evict(parser, props)
        p2, attrs = _parse_attr_dict(parser, cls)
        props.update(p2)
        parser.parse_punctuation(":")
        pt = parser.parse_type()
        val_t = pointee_type(pt)
        ops = _resolve(parser, [ptr, val] + rest, [pt, val_t, i1_like(val_t)][: 2 + len(rest)])
        return cls.create(operands=ops, properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        _print_cache_evict(printer, self)
        self._print_dict(printer, ("cache", "evict"))
        printer.print_string(" : ")
        printer.print_attribute(self.ptr.type)

    def verify_(self):
        if self.value.type != pointee_type(self.ptr.type):
            raise VerifyException(f"tt.store value type {self.value.type} does not match the "
                                  f"pointer type {self.ptr.type}")
        if self.mask is not None and self.mask.type != i1_like(self.value.type):
            raise VerifyException("tt.store mask must be i1 of the value's shape")


# =============================================================================================
# Atomics
# =============================================================================================


@irdl_op_definition
class AtomicRMWOp(TTOp):
    """``tt.atomic_rmw <op>, <sem>, <scope>, %ptr, %val (, %mask)? : (types) -> type``.

    Returns the old value.  Properties: ``atomic_rmw_op``, ``sem``, ``scope``."""

    name = "tt.atomic_rmw"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    ptr = operand_def()
    val = operand_def()
    mask = opt_operand_def()
    result = result_def()

    atomic_rmw_op = prop_def(IntegerAttr)
    sem = prop_def(IntegerAttr)
    scope = prop_def(IntegerAttr)

    def __init__(self, rmw_op: RMWOp | str, ptr, val, mask=None, *,
                 sem: MemSemantic | str = MemSemantic.ACQUIRE_RELEASE,
                 scope: MemSyncScope | str = MemSyncScope.GPU, result_type: Attribute | None = None):
        val = _value(val)
        super().__init__(
            operands=[ptr, val, [mask] if mask is not None else []],
            result_types=[result_type or val.type],
            properties={"atomic_rmw_op": RMWOp.coerce(rmw_op).attr(),
                        "sem": MemSemantic.coerce(sem).attr(),
                        "scope": MemSyncScope.coerce(scope).attr()})

    @property
    def rmw_op(self) -> RMWOp:
        return RMWOp(self.atomic_rmw_op.value.data)

    @property
    def mem_semantic(self) -> MemSemantic:
        return MemSemantic(self.sem.value.data)

    @property
    def mem_scope(self) -> MemSyncScope:
        return MemSyncScope(self.scope.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        op = _parse_enum(parser, RMWOp)
        parser.parse_punctuation(",")
        sem = _parse_enum(parser, MemSemantic)
        parser.parse_punctuation(",")
        scope = _parse_enum(parser, MemSyncScope)
        parser.parse_punctuation(",")
        ops = _parse_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        props.update(atomic_rmw_op=op.attr(), sem=sem.attr(), scope=scope.attr())
        return cls.create(operands=_resolve(parser, ops, ft.inputs.data), result_types=ft.outputs.data,
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(f" {self.rmw_op.keyword}, {self.mem_semantic.keyword}, {self.mem_scope.keyword}, ")
        _print_operands(printer, self.operands)
        self._print_dict(printer, ("atomic_rmw_op", "sem", "scope"))
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    def verify_(self):
        if self.ptr.type != pointer_type_like(self.val.type, _addr_space(self.ptr.type)):
            raise VerifyException("tt.atomic_rmw pointer type must match the value type")
        if self.mask is not None and self.mask.type != i1_like(self.val.type):
            raise VerifyException("tt.atomic_rmw mask must be i1 of the value's shape")


def _addr_space(ptr_like: Attribute) -> int:
    p = element_type(ptr_like)
    return p.address_space.data if isinstance(p, PointerType) else 1


@irdl_op_definition
class AtomicCASOp(TTOp):
    """``tt.atomic_cas <sem>, <scope>, %ptr, %cmp, %val : (types) -> type``: compare and swap,
    returns the old value.  Properties: ``sem``, ``scope``."""

    name = "tt.atomic_cas"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())

    ptr = operand_def()
    cmp = operand_def()
    val = operand_def()
    result = result_def()

    sem = prop_def(IntegerAttr)
    scope = prop_def(IntegerAttr)

    def __init__(self, ptr, cmp, val, *, sem: MemSemantic | str = MemSemantic.ACQUIRE_RELEASE,
                 scope: MemSyncScope | str = MemSyncScope.GPU, result_type: Attribute | None = None):
        val = _value(val)
        super().__init__(operands=[ptr, cmp, val], result_types=[result_type or val.type],
                         properties={"sem": MemSemantic.coerce(sem).attr(),
                                     "scope": MemSyncScope.coerce(scope).attr()})

    @property
    def mem_semantic(self) -> MemSemantic:
        return MemSemantic(self.sem.value.data)

    @property
    def mem_scope(self) -> MemSyncScope:
        return MemSyncScope(self.scope.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        sem = _parse_enum(parser, MemSemantic)
        parser.parse_punctuation(",")
        scope = _parse_enum(parser, MemSyncScope)
        parser.parse_punctuation(",")
        ops = _parse_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        props.update(sem=sem.attr(), scope=scope.attr())
        return cls.create(operands=_resolve(parser, ops, ft.inputs.data), result_types=ft.outputs.data,
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(f" {self.mem_semantic.keyword}, {self.mem_scope.keyword}, ")
        _print_operands(printer, self.operands)
        self._print_dict(printer, ("sem", "scope"))
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)

    def verify_(self):
        if self.cmp.type != self.val.type or self.result.type != self.val.type:
            raise VerifyException("tt.atomic_cas cmp, val and result must have one type")


# =============================================================================================
# Program ids, ranges
# =============================================================================================


class _ProgramDimOp(TTOp):
    axis = prop_def(IntegerAttr)
    result = result_def()

    def __init__(self, axis: int | ProgramIDDim | str = 0):
        super().__init__(result_types=[i32], properties={"axis": ProgramIDDim.coerce(axis).attr()})

    @property
    def axis_dim(self) -> ProgramIDDim:
        return ProgramIDDim(self.axis.value.data)

    @property
    def axis_int(self) -> int:
        return int(self.axis.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        axis = _parse_enum(parser, ProgramIDDim)
        props, attrs = _parse_attr_dict(parser, cls)
        props["axis"] = axis.attr()
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.create(result_types=[t], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(f" {self.axis_dim.keyword}")
        self._print_dict(printer, ("axis",))
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self):
        if self.axis.value.data not in (0, 1, 2) or self.result.type != i32:
            raise VerifyException(f"{self.name} takes axis x, y or z and returns i32")


@irdl_op_definition
class GetProgramIdOp(_ProgramDimOp):
    """``tt.get_program_id x|y|z : i32``."""

    name = "tt.get_program_id"
    traits = traits_def(Pure())


@irdl_op_definition
class GetNumProgramsOp(_ProgramDimOp):
    """``tt.get_num_programs x|y|z : i32``."""

    name = "tt.get_num_programs"
    traits = traits_def(Pure())


@irdl_op_definition
class MakeRangeOp(TTOp):
    """``tt.make_range {end, start} : tensor<Nxi32>``: ``[start, end)``."""

    name = "tt.make_range"
    traits = traits_def(Pure())
    start = prop_def(IntegerAttr)
    end = prop_def(IntegerAttr)
    result = result_def()

    def __init__(self, start: int, end: int):
        super().__init__(result_types=[TensorType(i32, [end - start])],
                         properties={"start": _i32(start), "end": _i32(end)})

    @classmethod
    def parse(cls, parser: Parser):
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        return cls.create(result_types=[t], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.result.type)

    def verify_(self):
        s, e = self.start.value.data, self.end.value.data
        if e <= s or shape_of(self.result.type) != (e - s,):
            raise VerifyException(f"tt.make_range [{s}, {e}) does not match {self.result.type}")


# =============================================================================================
# Dot
# =============================================================================================


@irdl_op_definition
class DotOp(TTOp):
    """``tt.dot %a, %b, %c (, inputPrecision = p)? : ta * tb -> td``: ``d = a @ b + c``.

    Properties: ``inputPrecision`` (default ieee), ``maxNumImpreciseAcc`` (default 0)."""

    name = "tt.dot"
    traits = traits_def(Pure())
    a = operand_def()
    b = operand_def()
    c = operand_def()
    d = result_def()
    input_precision = prop_def(IntegerAttr, InputPrecision.IEEE.attr(), prop_name="inputPrecision")
    max_num_imprecise_acc = prop_def(IntegerAttr, _i32(0), prop_name="maxNumImpreciseAcc")

    def __init__(self, a, b, c, input_precision: InputPrecision | str = InputPrecision.IEEE,
                 max_num_imprecise_acc: int = 0):
        c = _value(c)
        super().__init__(operands=[a, b, c], result_types=[c.type],
                         properties={"inputPrecision": InputPrecision.coerce(input_precision).attr(),
                                     "maxNumImpreciseAcc": _i32(max_num_imprecise_acc)})

    @property
    def precision(self) -> InputPrecision:
        return InputPrecision(self.input_precision.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        ops = [parser.parse_unresolved_operand()]
        for _ in range(2):
            parser.parse_punctuation(",")
            ops.append(parser.parse_unresolved_operand())
        props = {}
        if parser.parse_optional_punctuation(",") is not None:
            parser.parse_keyword("inputPrecision")
            parser.parse_punctuation("=")
            props["inputPrecision"] = _parse_enum(parser, InputPrecision).attr()
        p2, attrs = _parse_attr_dict(parser, cls)
        props.update(p2)
        parser.parse_punctuation(":")
        ta = parser.parse_type()
        parser.parse_punctuation("*")
        tb = parser.parse_type()
        parser.parse_punctuation("->")
        td = parser.parse_type()
        return cls.create(operands=_resolve(parser, ops, [ta, tb, td]), result_types=[td],
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        if self.precision != InputPrecision.IEEE:
            printer.print_string(f", inputPrecision = {self.precision.keyword}")
        self._print_dict(printer, ("inputPrecision",))
        printer.print_string(" : ")
        printer.print_attribute(self.a.type)
        printer.print_string(" * ")
        printer.print_attribute(self.b.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.d.type)

    def verify_(self):
        sa, sb, sc = shape_of(self.a.type), shape_of(self.b.type), shape_of(self.c.type)
        if self.d.type != self.c.type:
            raise VerifyException("tt.dot result type must be the accumulator type")
        if len(sa) not in (2, 3) or len(sa) != len(sb) or len(sa) != len(sc) or sa[-1] != sb[-2] \
                or sc[-2:] != (sa[-2], sb[-1]):
            raise VerifyException(f"tt.dot shapes do not match: {self.a.type} * {self.b.type} -> {self.c.type}")


@irdl_op_definition
class DotScaledOp(TTOp):
    """``tt.dot_scaled``: microscaled matmul ``d = scale(a, a_scale) @ scale(b, b_scale) + c``.

    Properties: ``a_elem_type``, ``b_elem_type`` (ScaleDotElemType), ``fastMath``,
    ``lhs_k_pack``, ``rhs_k_pack``."""

    name = "tt.dot_scaled"
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    a = operand_def()
    b = operand_def()
    c = operand_def()
    a_scale = opt_operand_def()
    b_scale = opt_operand_def()
    d = result_def()
    a_elem_type = prop_def(IntegerAttr)
    b_elem_type = prop_def(IntegerAttr)
    fast_math = prop_def(BoolAttr, prop_name="fastMath")
    lhs_k_pack = prop_def(BoolAttr, _bool(True))
    rhs_k_pack = prop_def(BoolAttr, _bool(True))

    def __init__(self, a, b, c, a_scale=None, b_scale=None, *, a_elem_type: ScaleDotElemType | str,
                 b_elem_type: ScaleDotElemType | str, fast_math: bool = False,
                 lhs_k_pack: bool = True, rhs_k_pack: bool = True):
        c = _value(c)
        super().__init__(
            operands=[a, b, c, [a_scale] if a_scale is not None else [],
                      [b_scale] if b_scale is not None else []],
            result_types=[c.type],
            properties={"a_elem_type": ScaleDotElemType.coerce(a_elem_type).attr(),
                        "b_elem_type": ScaleDotElemType.coerce(b_elem_type).attr(),
                        "fastMath": _bool(fast_math), "lhs_k_pack": _bool(lhs_k_pack),
                        "rhs_k_pack": _bool(rhs_k_pack)})

    @classmethod
    def parse(cls, parser: Parser):
        a = parser.parse_unresolved_operand()
        a_s = parser.parse_unresolved_operand() if parser.parse_optional_keyword("scale") is not None else None
        parser.parse_punctuation(",")
        b = parser.parse_unresolved_operand()
        b_s = parser.parse_unresolved_operand() if parser.parse_optional_keyword("scale") is not None else None
        parser.parse_punctuation(",")
        c = parser.parse_unresolved_operand()
        parser.parse_keyword("lhs")
        parser.parse_punctuation("=")
        ae = _parse_enum(parser, ScaleDotElemType)
        parser.parse_keyword("rhs")
        parser.parse_punctuation("=")
        be = _parse_enum(parser, ScaleDotElemType)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ta = parser.parse_type()
        tas = parser.parse_type() if parser.parse_optional_punctuation(",") is not None else None
        parser.parse_punctuation("*")
        tb = parser.parse_type()
        tbs = parser.parse_type() if parser.parse_optional_punctuation(",") is not None else None
        parser.parse_punctuation("->")
        td = parser.parse_type()
        ops = _resolve(parser, [a, b, c], [ta, tb, td])
        sa = [parser.resolve_operand(a_s, tas)] if a_s is not None else []
        sb = [parser.resolve_operand(b_s, tbs)] if b_s is not None else []
        props.update(a_elem_type=ae.attr(), b_elem_type=be.attr())
        props[_SEGMENTS] = DenseArrayBase.from_list(i32, [1, 1, 1, len(sa), len(sb)])
        return cls.create(operands=ops + sa + sb, result_types=[td], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.a)
        if self.a_scale is not None:
            printer.print_string(" scale ")
            printer.print_operand(self.a_scale)
        printer.print_string(", ")
        printer.print_operand(self.b)
        if self.b_scale is not None:
            printer.print_string(" scale ")
            printer.print_operand(self.b_scale)
        printer.print_string(", ")
        printer.print_operand(self.c)
        printer.print_string(f" lhs = {ScaleDotElemType(self.a_elem_type.value.data).keyword}"
                             f" rhs = {ScaleDotElemType(self.b_elem_type.value.data).keyword}")
        self._print_dict(printer, ("a_elem_type", "b_elem_type"))
        printer.print_string(" : ")
        printer.print_attribute(self.a.type)
        if self.a_scale is not None:
            printer.print_string(", ")
            printer.print_attribute(self.a_scale.type)
        printer.print_string(" * ")
        printer.print_attribute(self.b.type)
        if self.b_scale is not None:
            printer.print_string(", ")
            printer.print_attribute(self.b_scale.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.d.type)


# =============================================================================================
# Reduce / scan / map_elementwise (generic form in Triton 3.6) and their terminators
# =============================================================================================


class _RegionCombineOp(TTOp):
    """Ops with a combine region that Triton prints in generic form (no custom syntax)."""

    srcs = var_operand_def()
    result = var_result_def()
    combineOp = region_def("single_block")

    @staticmethod
    def _make_region(elem_types: Sequence[Attribute], body=None) -> Region:
        block = Block(arg_types=list(elem_types) * 2)
        if body is not None:
            body(block)
        return Region(block)


@irdl_op_definition
class ReduceOp(_RegionCombineOp):
    """``"tt.reduce"(%srcs) <{axis}> ({combine}) : (...) -> (...)``.

    ``body(block)`` fills the combine block (args: lhs elements then rhs elements) and must end
    with a :class:`ReduceReturnOp`."""

    name = "tt.reduce"
    traits = traits_def(Pure())
    axis = prop_def(IntegerAttr)

    def __init__(self, srcs: Sequence, axis: int, body=None, result_types: Sequence[Attribute] | None = None):
        srcs = [_value(s) for s in srcs]
        if result_types is None:
            result_types = []
            for s in srcs:
                shape = list(shape_of(s.type))
                del shape[axis]
                result_types.append(TensorType(element_type(s.type), shape) if shape else element_type(s.type))
        super().__init__(operands=[srcs], result_types=[list(result_types)],
                         properties={"axis": _i32(axis)},
                         regions=[self._make_region([element_type(s.type) for s in srcs], body)])

    def verify_(self):
        for s in self.srcs:
            if not 0 <= self.axis.value.data < len(shape_of(s.type)):
                raise VerifyException(f"tt.reduce axis {self.axis.value.data} out of range for {s.type}")
        term = self.combineOp.block.last_op
        if not isinstance(term, ReduceReturnOp):
            raise VerifyException("tt.reduce combine region must end with tt.reduce.return")


@irdl_op_definition
class ScanOp(_RegionCombineOp):
    """``"tt.scan"(%srcs) <{axis, reverse}> ({combine}) : (...) -> (...)``."""

    name = "tt.scan"
    traits = traits_def(Pure())
    axis = prop_def(IntegerAttr)
    reverse = prop_def(BoolAttr)

    def __init__(self, srcs: Sequence, axis: int, reverse: bool = False, body=None):
        srcs = [_value(s) for s in srcs]
        super().__init__(operands=[srcs], result_types=[[s.type for s in srcs]],
                         properties={"axis": _i32(axis), "reverse": _bool(reverse)},
                         regions=[self._make_region([element_type(s.type) for s in srcs], body)])

    def verify_(self):
        term = self.combineOp.block.last_op
        if not isinstance(term, ScanReturnOp):
            raise VerifyException("tt.scan combine region must end with tt.scan.return")


@irdl_op_definition
class MapElementwiseOp(TTOp):
    """``"tt.map_elementwise"(%srcs) <{pack}> ({scalar region}) : (...) -> (...)``: apply a
    scalar region (which may hold several blocks) elementwise."""

    name = "tt.map_elementwise"
    traits = traits_def(RecursiveMemoryEffect())
    srcs = var_operand_def()
    result = var_result_def()
    pack = prop_def(IntegerAttr)
    scalarOp = region_def()

    def __init__(self, srcs: Sequence, result_types: Sequence[Attribute], region: Region, pack: int = 1):
        super().__init__(operands=[list(srcs)], result_types=[list(result_types)],
                         properties={"pack": _i32(pack)}, regions=[region])


class _ReturnLikeOp(TTOp):
    """``$result attr-dict : type($result)`` terminators (the operand group is defined by each
    subclass with its ODS name)."""

    def __init__(self, values: Sequence = ()):
        super().__init__(operands=[list(values)])

    @classmethod
    def parse(cls, parser: Parser):
        ops = _parse_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        types = []
        if ops:
            parser.parse_punctuation(":")
            types = _parse_types(parser)
        return cls.create(operands=_resolve(parser, ops, types), properties=props, attributes=attrs)

    def print(self, printer: Printer):
        if self.operands:
            printer.print_string(" ")
            _print_operands(printer, self.operands)
        self._print_dict(printer)
        if self.operands:
            printer.print_string(" : ")
            _print_types(printer, self.operand_types)


@irdl_op_definition
class ReduceReturnOp(_ReturnLikeOp):
    """``tt.reduce.return %v : T``: terminator of a reduce combine region."""

    name = "tt.reduce.return"
    traits = traits_def(Pure(), IsTerminator(), ReturnLike(), HasParent(ReduceOp))
    result = var_operand_def()


@irdl_op_definition
class ScanReturnOp(_ReturnLikeOp):
    """``tt.scan.return %v : T``: terminator of a scan combine region."""

    name = "tt.scan.return"
    traits = traits_def(Pure(), IsTerminator(), ReturnLike(), HasParent(ScanOp))
    result = var_operand_def()


@irdl_op_definition
class MapElementwiseReturnOp(_ReturnLikeOp):
    """``tt.map_elementwise.return %v : T``."""

    name = "tt.map_elementwise.return"
    traits = traits_def(Pure(), IsTerminator(), ReturnLike(), HasParent(MapElementwiseOp))
    result = var_operand_def()


# =============================================================================================
# Extern calls, inline asm, histogram, gather, print/assert
# =============================================================================================


@irdl_op_definition
class ExternElementwiseOp(TTOp):
    """``tt.extern_elementwise %srcs {libname, libpath, pure, symbol} : (T...) -> T``: call a
    device library function (libdevice, NVSHMEM device bitcode ...) elementwise."""

    name = "tt.extern_elementwise"
    traits = traits_def(PureIfPureProperty())
    irdl_options = (SameVariadicOperandSize(),)
    srcs = var_operand_def()
    result = result_def()
    libname = prop_def(StringAttr)
    libpath = prop_def(StringAttr)
    symbol = prop_def(StringAttr)
    pure = prop_def(BoolAttr)

    def __init__(self, srcs: Sequence, result_type: Attribute, symbol: str, *, libname: str = "",
                 libpath: str = "", pure: bool = True):
        super().__init__(operands=[list(srcs)], result_types=[result_type],
                         properties={"libname": StringAttr(libname), "libpath": StringAttr(libpath),
                                     "symbol": StringAttr(symbol), "pure": _bool(pure)})

    @property
    def is_pure(self) -> bool:
        return bool(self.pure.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        ops = _parse_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        return cls.create(operands=_resolve(parser, ops, ft.inputs.data), result_types=ft.outputs.data,
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        if self.operands:
            printer.print_string(" ")
            _print_operands(printer, self.operands)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)


@irdl_op_definition
class ElementwiseInlineAsmOp(TTOp):
    """``tt.elementwise_inline_asm "asm" {constraints, packed_element, pure} %args : T... -> R...``.

    Runs ``asm_string`` on ``packed_element`` elements at a time; ``$0..`` are the results,
    then the arguments, as in PTX inline asm.  Properties: ``asm_string``, ``constraints``,
    ``pure``, ``packed_element``."""

    name = "tt.elementwise_inline_asm"
    traits = traits_def(PureIfPureProperty())
    args = var_operand_def()
    result = var_result_def()
    asm_string = prop_def(StringAttr)
    constraints = prop_def(StringAttr)
    pure = prop_def(BoolAttr)
    packed_element = prop_def(IntegerAttr)

    def __init__(self, asm_string: str, constraints: str, args: Sequence,
                 result_types: Sequence[Attribute], *, pure: bool = True, packed_element: int = 1):
        super().__init__(operands=[list(args)], result_types=[list(result_types)],
                         properties={"asm_string": StringAttr(asm_string),
                                     "constraints": StringAttr(constraints),
                                     "pure": _bool(pure), "packed_element": _i32(packed_element)})

    @property
    def is_pure(self) -> bool:
        return bool(self.pure.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        asm = parser.parse_str_literal()
        props, attrs = _parse_attr_dict(parser, cls)
        ops = _parse_operands(parser)
        types = []
        if ops:
            parser.parse_punctuation(":")
            types = _parse_types(parser)
        parser.parse_punctuation("->")
        rtypes = _parse_types(parser)
        props["asm_string"] = StringAttr(asm)
        return cls.create(operands=_resolve(parser, ops, types), result_types=rtypes,
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_string_literal(self.asm_string.data)
        self._print_dict(printer, ("asm_string",))
        if self.operands:
            printer.print_string(" ")
            _print_operands(printer, self.operands)
            printer.print_string(" : ")
            _print_types(printer, self.operand_types)
        printer.print_string(" -> ")
        _print_types(printer, self.result_types)


@irdl_op_definition
class HistogramOp(TTOp):
    """``tt.histogram %src (, %mask)? : tensor<NxiK> -> tensor<Bxi32>``."""

    name = "tt.histogram"
    traits = traits_def(Pure())
    src = operand_def()
    mask = opt_operand_def()
    result = result_def()

    def __init__(self, src, num_bins: int, mask=None, result_elem: Attribute = i32):
        super().__init__(operands=[src, [mask] if mask is not None else []],
                         result_types=[TensorType(result_elem, [num_bins])])

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        mask = parser.parse_unresolved_operand() if parser.parse_optional_punctuation(",") is not None else None
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        st = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        ops = [parser.resolve_operand(src, st)]
        if mask is not None:
            ops.append(parser.resolve_operand(mask, i1_like(st)))
        return cls.create(operands=ops, result_types=[rt], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.src.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


@irdl_op_definition
class GatherOp(TTOp):
    """``tt.gather %src[%indices] {axis} : (Ts, Ti) -> Tr``."""

    name = "tt.gather"
    traits = traits_def(Pure())
    src = operand_def()
    indices = operand_def()
    result = result_def()
    axis = prop_def(IntegerAttr)
    efficient_layout = opt_prop_def(UnitAttr)

    def __init__(self, src, indices, axis: int):
        src, indices = _value(src), _value(indices)
        super().__init__(operands=[src, indices],
                         result_types=[like(indices.type, element_type(src.type))],
                         properties={"axis": _i32(axis)})

    @classmethod
    def parse(cls, parser: Parser):
        src = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        idx = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        return cls.create(operands=_resolve(parser, [src, idx], ft.inputs.data),
                          result_types=ft.outputs.data, properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.src)
        printer.print_string("[")
        printer.print_operand(self.indices)
        printer.print_string("]")
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)


@irdl_op_definition
class PrintOp(TTOp):
    """``tt.print "prefix" {hex, isSigned} (: %args : types)?``: device-side printf."""

    name = "tt.print"
    traits = traits_def(MemoryWriteEffect())
    irdl_options = (SameVariadicOperandSize(),)
    args = var_operand_def()
    prefix = prop_def(StringAttr)
    hex = prop_def(BoolAttr)
    isSigned = prop_def(DenseArrayBase)

    def __init__(self, prefix: str, args: Sequence = (), *, hex: bool = False,
                 is_signed: Sequence[int] | None = None):
        args = [_value(a) for a in args]
        if is_signed is None:
            is_signed = [1] * len(args)
        super().__init__(operands=[args], properties={
            "prefix": StringAttr(prefix), "hex": _bool(hex),
            "isSigned": DenseArrayBase.from_list(i32, list(is_signed))})

    @classmethod
    def parse(cls, parser: Parser):
        prefix = parser.parse_str_literal()
        props, attrs = _parse_attr_dict(parser, cls)
        ops, types = [], []
        if parser.parse_optional_punctuation(":") is not None:
            ops = _parse_operands(parser)
            parser.parse_punctuation(":")
            types = _parse_types(parser)
        props["prefix"] = StringAttr(prefix)
        return cls.create(operands=_resolve(parser, ops, types), properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_string_literal(self.prefix.data)
        self._print_dict(printer, ("prefix",))
        if self.operands:
            printer.print_string(" : ")
            _print_operands(printer, self.operands)
            printer.print_string(" : ")
            _print_types(printer, self.operand_types)


@irdl_op_definition
class AssertOp(TTOp):
    """``tt.assert %cond, "message" : type``: device-side assert."""

    name = "tt.assert"
    traits = traits_def(MemoryWriteEffect())
    condition = operand_def()
    message = prop_def(StringAttr)

    def __init__(self, condition, message: str):
        super().__init__(operands=[condition], properties={"message": StringAttr(message)})

    @classmethod
    def parse(cls, parser: Parser):
        cond = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        msg = parser.parse_str_literal()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        t = parser.parse_type()
        props["message"] = StringAttr(msg)
        return cls.create(operands=[parser.resolve_operand(cond, t)], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.condition)
        printer.print_string(", ")
        printer.print_string_literal(self.message.data)
        self._print_dict(printer, ("message",))
        printer.print_string(" : ")
        printer.print_attribute(self.condition.type)


# =============================================================================================
# Block pointers and tensor descriptors
# =============================================================================================


@irdl_op_definition
class MakeTensorPtrOp(TTOp):
    """``tt.make_tensor_ptr %base, [%shape], [%strides], [%offsets] {order} : <tensor<..>>``."""

    name = "tt.make_tensor_ptr"
    traits = traits_def(Pure())
    irdl_options = (SameVariadicOperandSize(),)
    base = operand_def()
    shape = var_operand_def()
    strides = var_operand_def()
    offsets = var_operand_def()
    result = result_def()
    order = prop_def(DenseArrayBase)

    def __init__(self, base, shape: Sequence, strides: Sequence, offsets: Sequence,
                 block_shape: Sequence[int], order: Sequence[int]):
        base = _value(base)
        bp = base.type
        rt = PointerType(TensorType(bp.pointee_type, list(block_shape)), bp.address_space)
        super().__init__(operands=[base, list(shape), list(strides), list(offsets)], result_types=[rt],
                         properties={"order": DenseArrayBase.from_list(i32, list(order))})

    @classmethod
    def parse(cls, parser: Parser):
        base = parser.parse_unresolved_operand()
        groups = []
        for _ in range(3):
            parser.parse_punctuation(",")
            groups.append(_parse_bracket_operands(parser))
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        rt = _parse_stripped(parser, PointerType)
        bt = PointerType(rt.pointee_type.element_type, rt.address_space)
        n = len(groups[0])
        ops = _resolve(parser, [base] + groups[0] + groups[1] + groups[2],
                       [bt] + [i64] * (2 * n) + [i32] * len(groups[2]))
        return cls.create(operands=ops, result_types=[rt], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.base)
        for g in (self.shape, self.strides, self.offsets):
            printer.print_string(", [")
            _print_operands(printer, g)
            printer.print_string("]")
        self._print_dict(printer)
        printer.print_string(" : ")
        _print_stripped(printer, self.result.type)


@irdl_op_definition
class MakeTensorDescOp(TTOp):
    """``tt.make_tensor_descriptor %base, [%shape], [%strides] : <T>, <tensor<..>>``: a TMA
    descriptor over a global tensor (``shape`` i32, ``strides`` i64).  Property ``padding``."""

    name = "tt.make_tensor_descriptor"
    traits = traits_def(Pure())
    irdl_options = (SameVariadicOperandSize(),)
    base = operand_def()
    shape = var_operand_def()
    strides = var_operand_def()
    result = result_def()
    padding = prop_def(IntegerAttr, PaddingOption.PAD_ZERO.attr())

    def __init__(self, base, shape: Sequence, strides: Sequence, block_shape: Sequence[int] | TensorType,
                 padding: PaddingOption | str = PaddingOption.PAD_ZERO, element_type: Attribute | None = None):
        base = _value(base)
        if isinstance(block_shape, TensorType):
            block = block_shape
        else:
            block = TensorType(element_type or base.type.pointee_type, list(block_shape))
        super().__init__(operands=[base, list(shape), list(strides)], result_types=[TensorDescType(block)],
                         properties={"padding": PaddingOption.coerce(padding).attr()})

    @property
    def padding_option(self) -> PaddingOption:
        return PaddingOption(self.padding.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        base = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        shape = _parse_bracket_operands(parser)
        parser.parse_punctuation(",")
        strides = _parse_bracket_operands(parser)
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        bt = _parse_stripped(parser, PointerType)
        parser.parse_punctuation(",")
        rt = _parse_stripped(parser, TensorDescType)
        ops = _resolve(parser, [base] + shape + strides, [bt] + [i32] * len(shape) + [i64] * len(strides))
        return cls.create(operands=ops, result_types=[rt], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.base)
        printer.print_string(", [")
        _print_operands(printer, self.shape)
        printer.print_string("], [")
        _print_operands(printer, self.strides)
        printer.print_string("]")
        self._print_dict(printer)
        printer.print_string(" : ")
        _print_stripped(printer, self.base.type)
        printer.print_string(", ")
        _print_stripped(printer, self.result.type)


@irdl_op_definition
class DescriptorLoadOp(TTOp):
    """``tt.descriptor_load %desc[%indices] : !tt.tensordesc<..> -> tensor<..>`` (TMA load).
    Properties: ``cache``, ``evict``."""

    name = "tt.descriptor_load"
    traits = traits_def(MemoryReadEffect())
    desc = operand_def()
    indices = var_operand_def()
    result = result_def()
    cache = prop_def(IntegerAttr, _CACHE_NONE)
    evict = prop_def(IntegerAttr, _EVICT_NORMAL)

    def __init__(self, desc, indices: Sequence, result_type: Attribute | None = None, *,
                 cache: CacheModifier | str = CacheModifier.NONE,
                 evict: EvictionPolicy | str = EvictionPolicy.NORMAL):
        desc = _value(desc)
        if result_type is None:
            bt = desc.type.block_type
            result_type = TensorType(_signless(bt.element_type), bt.get_shape())
        super().__init__(operands=[desc, list(indices)], result_types=[result_type],
                         properties={"cache": CacheModifier.coerce(cache).attr(),
                                     "evict": EvictionPolicy.coerce(evict).attr()})

    @property
    def cache_modifier(self) -> CacheModifier:
        return CacheModifier(self.cache.value.data)

    @property
    def eviction_policy(self) -> EvictionPolicy:
        return EvictionPolicy(self.evict.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        desc = parser.parse_unresolved_operand()
        idx = _parse_bracket_operands(parser)
        props: dict = {}
        _parse_cache_evict(parser, props)
        p2, attrs = _parse_attr_dict(parser, cls)
        props.update(p2)
        parser.parse_punctuation(":")
        dt = parser.parse_type()
        parser.parse_punctuation("->")
        rt = parser.parse_type()
        return cls.create(operands=_resolve(parser, [desc] + idx, [dt] + [i32] * len(idx)),
                          result_types=[rt], properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.desc)
        printer.print_string("[")
        _print_operands(printer, self.indices)
        printer.print_string("]")
        _print_cache_evict(printer, self)
        self._print_dict(printer, ("cache", "evict"))
        printer.print_string(" : ")
        printer.print_attribute(self.desc.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.result.type)


def _signless(t: Attribute) -> Attribute:
    if isinstance(t, IntegerType):
        return IntegerType(t.width.data)
    return t


@irdl_op_definition
class DescriptorStoreOp(TTOp):
    """``tt.descriptor_store %desc[%indices], %src : !tt.tensordesc<..>, tensor<..>`` (TMA store)."""

    name = "tt.descriptor_store"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    desc = operand_def()
    src = operand_def()
    indices = var_operand_def()

    def __init__(self, desc, src, indices: Sequence):
        super().__init__(operands=[desc, src, list(indices)])

    @classmethod
    def parse(cls, parser: Parser):
        desc = parser.parse_unresolved_operand()
        idx = _parse_bracket_operands(parser)
        parser.parse_punctuation(",")
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        dt = parser.parse_type()
        parser.parse_punctuation(",")
        st = parser.parse_type()
        return cls.create(operands=_resolve(parser, [desc, src] + idx, [dt, st] + [i32] * len(idx)),
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.desc)
        printer.print_string("[")
        _print_operands(printer, self.indices)
        printer.print_string("], ")
        printer.print_operand(self.src)
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_attribute(self.desc.type)
        printer.print_string(", ")
        printer.print_attribute(self.src.type)


@irdl_op_definition
class DescriptorReduceOp(TTOp):
    """``tt.descriptor_reduce <kind>, %desc[%indices], %src : !tt.tensordesc<..>, tensor<..>``:
    an atomic reduction into global memory through TMA.  Property ``kind``."""

    name = "tt.descriptor_reduce"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    desc = operand_def()
    src = operand_def()
    indices = var_operand_def()
    kind = prop_def(IntegerAttr)

    def __init__(self, kind: DescriptorReduceKind | str, desc, src, indices: Sequence):
        super().__init__(operands=[desc, src, list(indices)],
                         properties={"kind": DescriptorReduceKind.coerce(kind).attr()})

    @property
    def reduce_kind(self) -> DescriptorReduceKind:
        return DescriptorReduceKind(self.kind.value.data)

    @classmethod
    def parse(cls, parser: Parser):
        kind = _parse_enum(parser, DescriptorReduceKind)
        parser.parse_punctuation(",")
        desc = parser.parse_unresolved_operand()
        idx = _parse_bracket_operands(parser)
        parser.parse_punctuation(",")
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        dt = parser.parse_type()
        parser.parse_punctuation(",")
        st = parser.parse_type()
        props["kind"] = kind.attr()
        return cls.create(operands=_resolve(parser, [desc, src] + idx, [dt, st] + [i32] * len(idx)),
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(f" {self.reduce_kind.keyword}, ")
        printer.print_operand(self.desc)
        printer.print_string("[")
        _print_operands(printer, self.indices)
        printer.print_string("], ")
        printer.print_operand(self.src)
        self._print_dict(printer, ("kind",))
        printer.print_string(" : ")
        printer.print_attribute(self.desc.type)
        printer.print_string(", ")
        printer.print_attribute(self.src.type)


@irdl_op_definition
class DescriptorGatherOp(TTOp):
    """``tt.descriptor_gather %desc[%x_offsets, %y_offset] : (desc, tensor<Nxi32>, i32) -> T``."""

    name = "tt.descriptor_gather"
    traits = traits_def(MemoryReadEffect())
    desc = operand_def()
    x_offsets = operand_def()
    y_offset = operand_def()
    result = result_def()

    def __init__(self, desc, x_offsets, y_offset, result_type: Attribute):
        super().__init__(operands=[desc, x_offsets, y_offset], result_types=[result_type])

    @classmethod
    def parse(cls, parser: Parser):
        desc = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        x = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        y = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        return cls.create(operands=_resolve(parser, [desc, x, y], ft.inputs.data),
                          result_types=ft.outputs.data, properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.desc)
        printer.print_string("[")
        _print_operands(printer, [self.x_offsets, self.y_offset])
        printer.print_string("]")
        self._print_dict(printer)
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)


@irdl_op_definition
class DescriptorScatterOp(TTOp):
    """``tt.descriptor_scatter %desc[%x_offsets, %y_offset], %src : types``."""

    name = "tt.descriptor_scatter"
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    desc = operand_def()
    x_offsets = operand_def()
    y_offset = operand_def()
    src = operand_def()

    def __init__(self, desc, x_offsets, y_offset, src):
        super().__init__(operands=[desc, x_offsets, y_offset, src])

    @classmethod
    def parse(cls, parser: Parser):
        desc = parser.parse_unresolved_operand()
        parser.parse_punctuation("[")
        x = parser.parse_unresolved_operand()
        parser.parse_punctuation(",")
        y = parser.parse_unresolved_operand()
        parser.parse_punctuation("]")
        parser.parse_punctuation(",")
        src = parser.parse_unresolved_operand()
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        types = _parse_types(parser)
        return cls.create(operands=_resolve(parser, [desc, x, y, src], types), properties=props,
                          attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.desc)
        printer.print_string("[")
        _print_operands(printer, [self.x_offsets, self.y_offset])
        printer.print_string("], ")
        printer.print_operand(self.src)
        self._print_dict(printer)
        printer.print_string(" : ")
        _print_types(printer, self.operand_types)


# =============================================================================================
# Functions, calls, returns
# =============================================================================================


class FuncOpCallableInterface(CallableOpInterface):
    @classmethod
    def get_callable_region(cls, op: Operation) -> Region:
        return op.body

    @classmethod
    def get_argument_types(cls, op: Operation) -> tuple[Attribute, ...]:
        return op.function_type.inputs.data

    @classmethod
    def get_result_types(cls, op: Operation) -> tuple[Attribute, ...]:
        return op.function_type.outputs.data


@irdl_op_definition
class FuncOp(TTOp):
    """``tt.func [public|private] @name(%arg: T {attrs} loc(..), ...) -> R attributes {..} {..}``.

    Properties (ODS names): ``sym_name``, ``function_type``, ``sym_visibility``, ``arg_attrs``,
    ``res_attrs``.  Other attributes (``noinline``) are discardable attributes.
    Use :meth:`insert_arg` / :meth:`append_arg` to add a kernel argument: they keep the entry
    block, ``function_type`` and ``arg_attrs`` in step."""

    name = "tt.func"
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), FuncOpCallableInterface())

    body = region_def()
    sym_name = prop_def(StringAttr)
    function_type = prop_def(FunctionType)
    sym_visibility = opt_prop_def(StringAttr)
    arg_attrs = opt_prop_def(ArrayAttr)
    res_attrs = opt_prop_def(ArrayAttr)

    def __init__(self, name: str, function_type: FunctionType | tuple[Sequence[Attribute], Sequence[Attribute]],
                 region: Region | None = None, *, visibility: str | None = "public",
                 arg_attrs: Sequence[Mapping[str, Attribute] | DictionaryAttr] | None = None,
                 res_attrs: Sequence[Mapping[str, Attribute] | DictionaryAttr] | None = None,
                 attributes: Mapping[str, Attribute] | None = None):
        if isinstance(function_type, tuple):
            function_type = FunctionType.from_lists(list(function_type[0]), list(function_type[1]))
        if region is None:
            region = Region(Block(arg_types=function_type.inputs.data))
        props: dict[str, Attribute] = {"sym_name": StringAttr(name), "function_type": function_type}
        if visibility is not None:
            props["sym_visibility"] = StringAttr(visibility)
        if arg_attrs is not None:
            props["arg_attrs"] = ArrayAttr([a if isinstance(a, DictionaryAttr) else DictionaryAttr(dict(a))
                                            for a in arg_attrs])
        if res_attrs is not None:
            props["res_attrs"] = ArrayAttr([a if isinstance(a, DictionaryAttr) else DictionaryAttr(dict(a))
                                            for a in res_attrs])
        super().__init__(properties=props, regions=[region], attributes=attributes)

    # ----- accessors -------------------------------------------------------------------------

    @property
    def entry_block(self) -> Block:
        return self.body.blocks.first

    @property
    def args(self) -> tuple:
        return self.entry_block.args

    @property
    def is_declaration(self) -> bool:
        return not self.body.blocks

    def get_arg_attrs(self, index: int) -> dict[str, Attribute]:
        if self.arg_attrs is None:
            return {}
        return dict(self.arg_attrs.data[index].data)

    def set_arg_attr(self, index: int, name: str, value: Attribute) -> None:
        n = len(self.function_type.inputs.data)
        dicts = [dict(d.data) for d in self.arg_attrs.data] if self.arg_attrs is not None else [{} for _ in range(n)]
        dicts[index][name] = value
        self.arg_attrs = ArrayAttr([DictionaryAttr(d) for d in dicts])

    def arg_index(self, name: str) -> int | None:
        """Index of the argument whose name (its ``NameLoc``, as Triton records the Python
        parameter name, or its SSA name hint) is ``name``."""
        for i, a in enumerate(self.args):
            if _loc_name(a.location) == name or a.name_hint == name:
                return i
        return None

    def insert_arg(self, index: int, arg_type: Attribute, *, name: str | None = None,
                   attrs: Mapping[str, Attribute] | None = None, location: Attribute | None = None):
        """Insert a new argument at ``index``; returns the new block argument.

        ``name`` becomes a ``NameLoc`` (as Triton names kernel arguments, so Triton prints
        ``%name``) around ``location`` (default: the location of the function)."""
        inputs = list(self.function_type.inputs.data)
        n = len(inputs)
        inputs.insert(index, arg_type)
        self.function_type = FunctionType.from_lists(inputs, list(self.function_type.outputs.data))
        if self.arg_attrs is not None or attrs:
            dicts = [d for d in self.arg_attrs.data] if self.arg_attrs is not None else \
                [DictionaryAttr({}) for _ in range(n)]
            dicts.insert(index, DictionaryAttr(dict(attrs or {})))
            self.arg_attrs = ArrayAttr(dicts)
        from xdsl.dialects.builtin import NameLoc
        loc = location if location is not None else self.location
        if name is not None:
            loc = NameLoc(StringAttr(name), loc)
        arg = self.entry_block.insert_arg(arg_type, index, loc)
        if name is not None:
            arg.name_hint = name
        return arg

    def append_arg(self, arg_type: Attribute, *, name: str | None = None,
                   attrs: Mapping[str, Attribute] | None = None, location: Attribute | None = None):
        """Append a new argument (see :meth:`insert_arg`)."""
        return self.insert_arg(len(self.function_type.inputs.data), arg_type, name=name, attrs=attrs,
                               location=location)

    # ----- syntax ----------------------------------------------------------------------------

    @classmethod
    def parse(cls, parser: Parser):
        from xdsl.dialects.utils import parse_func_op_like
        visibility = parser.parse_optional_visibility_keyword()
        (name, inputs, outputs, region, extra, arg_attrs, res_attrs) = parse_func_op_like(
            parser, reserved_attr_names=("sym_name", "function_type", "sym_visibility", "arg_attrs",
                                         "res_attrs"))
        props: dict[str, Attribute] = {"sym_name": StringAttr(name),
                                       "function_type": FunctionType.from_lists(list(inputs), list(outputs))}
        if visibility is not None:
            props["sym_visibility"] = visibility
        if arg_attrs is not None:
            props["arg_attrs"] = arg_attrs
        if res_attrs is not None:
            props["res_attrs"] = res_attrs
        attrs = dict(extra.data) if extra is not None else {}
        return cls.create(properties=props, attributes=attrs, regions=[region])

    def print(self, printer: Printer):
        from xdsl.dialects.utils import print_func_op_like
        if self.sym_visibility is not None:
            printer.print_string(" " + self.sym_visibility.data)
        if not self.body.blocks:
            print_func_op_like(printer, self.sym_name, self.function_type, self.body, self.attributes,
                               arg_attrs=self.arg_attrs, res_attrs=self.res_attrs, reserved_attr_names=(),
                               print_empty_outputs=False)
            return
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name)
        printer.print_string("(")
        attrs = self.arg_attrs.data if self.arg_attrs is not None else [None] * len(self.args)
        printer.print_list(zip(self.args, attrs), lambda p: _print_func_arg(printer, *p))
        printer.print_string(")")
        outs = self.function_type.outputs.data
        if outs:
            printer.print_string(" -> ")
            res = self.res_attrs.data if self.res_attrs is not None else None
            if len(outs) == 1 and not (res and res[0].data) and not isinstance(outs[0], FunctionType):
                printer.print_attribute(outs[0])
            else:
                printer.print_string("(")
                printer.print_list(range(len(outs)), lambda i: (
                    printer.print_attribute(outs[i]),
                    res is not None and res[i].data and printer.print_op_attributes(res[i].data)))
                printer.print_string(")")
        if self.attributes:
            printer.print_op_attributes(dict(sorted(self.attributes.items())), print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=True)

    def verify_(self):
        if self.body.blocks:
            types = tuple(a.type for a in self.entry_block.args)
            if types != tuple(self.function_type.inputs.data):
                raise VerifyException(f"tt.func @{self.sym_name.data}: entry block arguments {types} do "
                                      f"not match the function type {self.function_type}")
        if self.arg_attrs is not None and len(self.arg_attrs.data) != len(self.function_type.inputs.data):
            raise VerifyException(f"tt.func @{self.sym_name.data}: arg_attrs has "
                                  f"{len(self.arg_attrs.data)} entries for {len(self.function_type.inputs.data)} arguments")


def _print_func_arg(printer: Printer, arg, attrs: DictionaryAttr | None) -> None:
    """``%arg: T {attrs} loc(..)``, the location as the printer places them (an xDSL printer
    with ``print_debuginfo``, or the bridge's ``TTIRPrinter``)."""
    printer.print_block_argument(arg, print_type=False)
    printer.print_string(": ")
    printer.print_attribute(arg.type)
    if attrs is not None and attrs.data:
        printer.print_op_attributes(attrs.data)
    if hasattr(printer, "print_optional_location"):
        printer.print_optional_location(arg.location)
    elif printer.print_debuginfo:
        printer.print_string(" ")
        printer.print_attribute(arg.location)


def _loc_name(loc: Attribute) -> str | None:
    from xdsl.dialects.builtin import NameLoc
    return loc.desc.data if isinstance(loc, NameLoc) else None


@irdl_op_definition
class ReturnOp(_ReturnLikeOp):
    """``tt.return (%srcs : types)?``."""

    name = "tt.return"
    traits = traits_def(Pure(), IsTerminator(), ReturnLike(), HasParent(FuncOp))
    srcs = var_operand_def()

    def verify_(self):
        func = self.parent_op()
        if isinstance(func, FuncOp):
            want = tuple(func.function_type.outputs.data)
            if tuple(self.operand_types) != want:
                raise VerifyException(f"tt.return types {tuple(self.operand_types)} do not match the "
                                      f"results {want} of @{func.sym_name.data}")


@irdl_op_definition
class CallOp(TTOp):
    """``tt.call @callee(%args) : (T...) -> R...``.  Properties: ``callee``, ``arg_attrs``,
    ``res_attrs``."""

    name = "tt.call"
    args = var_operand_def()
    result = var_result_def()
    callee = prop_def(SymbolRefAttr)
    arg_attrs = opt_prop_def(ArrayAttr)
    res_attrs = opt_prop_def(ArrayAttr)

    def __init__(self, callee: str | SymbolRefAttr, args: Sequence, result_types: Sequence[Attribute]):
        if isinstance(callee, str):
            callee = SymbolRefAttr(callee)
        super().__init__(operands=[list(args)], result_types=[list(result_types)],
                         properties={"callee": callee})

    @classmethod
    def parse(cls, parser: Parser):
        callee = parser.parse_attribute()
        parser.parse_punctuation("(")
        ops = _parse_operands(parser)
        parser.parse_punctuation(")")
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        props["callee"] = callee
        return cls.create(operands=_resolve(parser, ops, ft.inputs.data), result_types=ft.outputs.data,
                          properties=props, attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_attribute(self.callee)
        printer.print_string("(")
        _print_operands(printer, self.operands)
        printer.print_string(")")
        self._print_dict(printer, ("callee",))
        printer.print_string(" : ")
        printer.print_function_type(self.operand_types, self.result_types)


# =============================================================================================
# Overrides of xDSL ops whose syntax differs from what MLIR (Triton's) prints or accepts
# =============================================================================================


@irdl_op_definition
class SelectOp(_arith.SelectOp):
    """``arith.select %cond, %a, %b : T`` or ``: tensor<..xi1>, T``: xDSL's op, also taking an
    elementwise tensor condition (Triton's ``tl.where``), with MLIR's syntax for it.

    A subclass of xDSL's ``arith.SelectOp``: ``isinstance`` checks and the ``cond``/``lhs``/
    ``rhs`` accessors keep working (``condition``/``true_value``/``false_value`` are MLIR's
    names)."""

    name = "arith.select"
    assembly_format = None
    traits = traits_def(Pure())
    cond = operand_def()
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()

    condition = property(lambda self: self.cond)
    true_value = property(lambda self: self.lhs)
    false_value = property(lambda self: self.rhs)

    def __init__(self, condition, true_value, false_value):
        true_value = _value(true_value)
        IRDLOperation.__init__(self, operands=[condition, true_value, false_value],
                               result_types=[true_value.type])

    @classmethod
    def parse(cls, parser: Parser):
        ops = _parse_operands(parser)
        attrs = parser.parse_optional_attr_dict()
        parser.parse_punctuation(":")
        types = _parse_types(parser)
        if len(types) == 1:
            ct, t = i1, types[0]
        else:
            ct, t = types
        return cls.create(operands=_resolve(parser, ops, [ct, t, t]), result_types=[t], attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        _print_operands(printer, self.operands)
        if self.attributes:
            printer.print_op_attributes(dict(sorted(self.attributes.items())))
        printer.print_string(" : ")
        if isinstance(self.cond.type, TensorType):
            printer.print_attribute(self.cond.type)
            printer.print_string(", ")
        printer.print_attribute(self.result.type)

    def verify_(self):
        if self.lhs.type != self.rhs.type or self.result.type != self.lhs.type:
            raise VerifyException("arith.select branches and result must have one type")
        ct = self.cond.type
        if ct != i1 and ct != i1_like(self.result.type):
            raise VerifyException("arith.select condition must be i1 or an i1 tensor of the result's shape")


def _cmp_parse(cls, parser: Parser, predicates: Sequence[str], with_fastmath: bool):
    kw = parser.parse_identifier()
    if kw not in predicates:
        parser.raise_error(f"unknown {cls.name} predicate '{kw}'")
    parser.parse_punctuation(",")
    lhs = parser.parse_unresolved_operand()
    parser.parse_punctuation(",")
    rhs = parser.parse_unresolved_operand()
    props = {"predicate": IntegerAttr(predicates.index(kw), 64)}
    if with_fastmath and parser.parse_optional_keyword("fastmath") is not None:
        props["fastmath"] = _arith.FastMathFlagsAttr(_arith.FastMathFlagsAttr.parse_parameter(parser))
    attrs = parser.parse_optional_attr_dict()
    parser.parse_punctuation(":")
    t = parser.parse_type()
    return cls.create(operands=_resolve(parser, [lhs, rhs], [t, t]), result_types=[i1_like(t)],
                      properties=props, attributes=attrs)


def _cmp_print(op, printer: Printer, predicates: Sequence[str]):
    printer.print_string(f" {predicates[op.predicate.value.data]}, ")
    _print_operands(printer, [op.lhs, op.rhs])
    fm = op.properties.get("fastmath")
    if fm is not None and fm != _arith.FastMathFlagsAttr("none"):
        printer.print_string(" fastmath")
        fm.print_parameter(printer)
    if op.attributes:
        printer.print_op_attributes(dict(sorted(op.attributes.items())))
    printer.print_string(" : ")
    printer.print_attribute(op.lhs.type)


@irdl_op_definition
class CmpiOp(_arith.CmpiOp):
    """``arith.cmpi pred, %a, %b {attrs} : T``: xDSL's op, with a result of the operands' shape
    (``tensor<..xi1>`` for tensors) and the attribute dictionary kept."""

    name = "arith.cmpi"
    predicate = prop_def(IntegerAttr)
    lhs = operand_def()
    rhs = operand_def()
    result = result_def()

    def __init__(self, operand1, operand2, arg: int | str):
        operand1 = _value(operand1)
        if isinstance(arg, str):
            arg = _arith.CMPI_COMPARISON_OPERATIONS.index(arg)
        IRDLOperation.__init__(self, operands=[operand1, operand2], result_types=[i1_like(operand1.type)],
                               properties={"predicate": IntegerAttr(arg, 64)})

    @classmethod
    def parse(cls, parser: Parser):
        return _cmp_parse(cls, parser, _arith.CMPI_COMPARISON_OPERATIONS, False)

    def print(self, printer: Printer):
        _cmp_print(self, printer, _arith.CMPI_COMPARISON_OPERATIONS)

    def verify_(self):
        if self.lhs.type != self.rhs.type or self.result.type != i1_like(self.lhs.type):
            raise VerifyException("arith.cmpi operands must have one type and the result its i1 shape")


@irdl_op_definition
class CmpfOp(_arith.CmpfOp):
    """``arith.cmpf pred, %a, %b (fastmath<..>)? {attrs} : T``: xDSL's op, with a result of the
    operands' shape and the attribute dictionary kept."""

    name = "arith.cmpf"
    predicate = prop_def(IntegerAttr)
    lhs = operand_def()
    rhs = operand_def()
    fastmath = prop_def(_arith.FastMathFlagsAttr, default_value=_arith.FastMathFlagsAttr("none"))
    result = result_def()

    def __init__(self, operand1, operand2, arg: int | str, fastmath=None):
        operand1 = _value(operand1)
        if isinstance(arg, str):
            arg = _arith.CMPF_COMPARISON_OPERATIONS.index(arg)
        IRDLOperation.__init__(self, operands=[operand1, operand2], result_types=[i1_like(operand1.type)],
                               properties={"predicate": IntegerAttr(arg, 64),
                                           "fastmath": fastmath or _arith.FastMathFlagsAttr("none")})

    @classmethod
    def parse(cls, parser: Parser):
        return _cmp_parse(cls, parser, _arith.CMPF_COMPARISON_OPERATIONS, True)

    def print(self, printer: Printer):
        _cmp_print(self, printer, _arith.CMPF_COMPARISON_OPERATIONS)

    def verify_(self):
        if self.lhs.type != self.rhs.type or self.result.type != i1_like(self.lhs.type):
            raise VerifyException("arith.cmpf operands must have one type and the result its i1 shape")


def _cast_verify(category_in, category_out, width_rule):
    def verify_(self) -> None:
        it, rt = self.input.type, self.result.type
        if shape_of(it) != shape_of(rt) or isinstance(it, TensorType) != isinstance(rt, TensorType):
            raise VerifyException(f"{self.name}: operand {it} and result {rt} must have one shape")
        ei, er = element_type(it), element_type(rt)
        if not (category_in(ei) and category_out(er)):
            raise VerifyException(f"{self.name}: cannot cast {ei} to {er}")
        if width_rule is not None and not width_rule(ei, er):
            raise VerifyException(f"{self.name}: bit widths of {ei} and {er} do not allow this cast")
    return verify_


def _is_int(t):
    return isinstance(t, IntegerType)


def _is_float(t):
    from xdsl.dialects.builtin import AnyFloat
    return isinstance(t, AnyFloat)


def _width(t):
    return t.width.data if isinstance(t, IntegerType) else t.bitwidth


_CAST_RULES = {
    "ExtSIOp": (_is_int, _is_int, lambda a, b: _width(b) > _width(a)),
    "ExtUIOp": (_is_int, _is_int, lambda a, b: _width(b) > _width(a)),
    "TruncIOp": (_is_int, _is_int, lambda a, b: _width(b) < _width(a)),
    "SIToFPOp": (_is_int, _is_float, None),
    "UIToFPOp": (_is_int, _is_float, None),
    "FPToSIOp": (_is_float, _is_int, None),
    "FPToUIOp": (_is_float, _is_int, None),
    "ExtFOp": (_is_float, _is_float, lambda a, b: _width(b) > _width(a)),
    "TruncFOp": (_is_float, _is_float, lambda a, b: _width(b) < _width(a)),
    "BitcastOp": (lambda t: _is_int(t) or _is_float(t), lambda t: _is_int(t) or _is_float(t),
                  lambda a, b: _width(a) == _width(b)),
}


def _make_cast_override(name: str):
    base = getattr(_arith, name)
    cat_in, cat_out, width = _CAST_RULES[name]
    ns = {
        "__doc__": f"``{base.name} %x : T to U``: xDSL's op, accepting tensors (elementwise), as "
                   f"MLIR does.  A subclass of ``xdsl.dialects.arith.{name}``.",
        "__module__": __name__,
        "__qualname__": "Arith" + name,
        "name": base.name,
        "input": operand_def(),
        "result": result_def(),
        "verify_": _cast_verify(cat_in, cat_out, width),
        # the base's generated parse/print must not count as custom ones: the declarative
        # format (inherited) is compiled again for this class
        "print": Operation.print,
        "parse": classmethod(Operation.parse.__func__),
    }
    return irdl_op_definition(type("Arith" + name, (base,), ns))


_ARITH_CASTS = [_make_cast_override(n) for n in _CAST_RULES]
globals().update({c.__name__: c for c in _ARITH_CASTS})


@irdl_op_definition
class WhileOp(_scf.WhileOp):
    """``scf.while (%arg = %init, ...) : (T...) -> (R...) {before} do {after}``: xDSL's op, also
    reading and printing MLIR's form without loop-carried values (``scf.while : () -> () {``)
    and printing the location after the op.  A subclass of xDSL's ``scf.WhileOp``."""

    name = "scf.while"
    arguments = var_operand_def()
    res = var_result_def()
    before_region = region_def("single_block")
    after_region = region_def("single_block")

    def print(self, printer: Printer):
        if self.arguments:
            printer.print_string(" (")
            printer.print_list(zip(self.before_region.block.args, self.arguments),
                               lambda pair: self._print_pair(printer, pair))
            printer.print_string(")")
        printer.print_string(" : ")
        printer.print_function_type(self.arguments.types, self.result_types)
        printer.print_string(" ")
        printer.print_region(self.before_region, print_entry_block_args=False)
        printer.print_string(" do ")
        printer.print_region(self.after_region)
        if self.attributes:
            printer.print_op_attributes(dict(sorted(self.attributes.items())), print_keyword=True)

    @classmethod
    def parse(cls, parser: Parser):
        pairs = []
        if parser.parse_optional_punctuation("(") is not None:
            if parser.parse_optional_punctuation(")") is None:
                while True:
                    arg = parser.parse_argument(expect_type=False)
                    parser.parse_punctuation("=")
                    pairs.append((arg, parser.parse_unresolved_operand()))
                    if parser.parse_optional_punctuation(",") is None:
                        break
                parser.parse_punctuation(")")
        parser.parse_punctuation(":")
        ft = parser.parse_function_type()
        ins = ft.inputs.data
        if len(pairs) != len(ins):
            parser.raise_error(f"scf.while has {len(pairs)} loop-carried values but {len(ins)} types")
        block_args = [a.resolve(t) for (a, _), t in zip(pairs, ins)]
        operands = [parser.resolve_operand(o, t) for (_, o), t in zip(pairs, ins)]
        before = parser.parse_region(block_args)
        parser.parse_characters("do")
        after = parser.parse_region()
        attrs = parser.parse_optional_attr_dict_with_keyword()
        return cls.create(operands=operands, result_types=ft.outputs.data, regions=[before, after],
                          attributes=dict(attrs.data) if attrs is not None else {})


@irdl_op_definition
class RemFOp(_arith.FloatingPointLikeBinaryOperation):
    """``arith.remf %a, %b (fastmath<..>)? : T``: float remainder (Triton's ``%`` on floats),
    which xDSL's arith dialect lacks."""

    name = "arith.remf"
    traits = traits_def(Pure())


@irdl_op_definition
class GpuBarrierOp(_gpu.BarrierOp):
    """``gpu.barrier``: xDSL's op with MLIR's custom syntax (``tl.debug_barrier()``).  A
    subclass of ``xdsl.dialects.gpu.BarrierOp``."""

    name = "gpu.barrier"
    assembly_format = "attr-dict"
    print = Operation.print
    parse = classmethod(Operation.parse.__func__)


@irdl_op_definition
class LLVMAssumeOp(IRDLOperation):
    """``llvm.intr.assume %cond (["tag"(%ops : types), ...])? : i1 {attrs}`` (``tl.assume``).
    Properties as MLIR's LLVM dialect: ``op_bundle_sizes``, ``op_bundle_tags``."""

    name = "llvm.intr.assume"
    cond = operand_def()
    op_bundle_operands = var_operand_def()
    op_bundle_sizes = prop_def(DenseArrayBase)
    op_bundle_tags = opt_prop_def(ArrayAttr)

    def __init__(self, cond, bundles: Sequence[tuple[str, Sequence]] = ()):
        props: dict = {"op_bundle_sizes": DenseArrayBase.from_list(i32, [len(ops) for _, ops in bundles])}
        if bundles:
            props["op_bundle_tags"] = ArrayAttr([StringAttr(tag) for tag, _ in bundles])
        super().__init__(operands=[cond, [o for _, ops in bundles for o in ops]], properties=props)

    @classmethod
    def parse(cls, parser: Parser):
        cond = parser.parse_unresolved_operand()
        tags, sizes, ops = [], [], []
        if parser.parse_optional_punctuation("[") is not None:
            while True:
                tags.append(StringAttr(parser.parse_str_literal()))
                parser.parse_punctuation("(")
                group = _parse_operands(parser)
                types = []
                if group:
                    parser.parse_punctuation(":")
                    types = _parse_types(parser)
                parser.parse_punctuation(")")
                ops += _resolve(parser, group, types)
                sizes.append(len(group))
                if parser.parse_optional_punctuation(",") is None:
                    break
            parser.parse_punctuation("]")
        parser.parse_punctuation(":")
        ct = parser.parse_type()
        attrs = parser.parse_optional_attr_dict()
        props: dict = {"op_bundle_sizes": DenseArrayBase.from_list(i32, sizes)}
        if tags:
            props["op_bundle_tags"] = ArrayAttr(tags)
        return cls.create(operands=[parser.resolve_operand(cond, ct)] + ops, properties=props,
                          attributes=attrs)

    def print(self, printer: Printer):
        printer.print_string(" ")
        printer.print_operand(self.cond)
        sizes = self.op_bundle_sizes.get_values()
        if sizes:
            printer.print_string(" [")
            ops = list(self.op_bundle_operands)
            tags = self.op_bundle_tags.data if self.op_bundle_tags is not None else []
            for k, (tag, n) in enumerate(zip(tags, sizes)):
                group, ops = ops[:n], ops[n:]
                if k:
                    printer.print_string(", ")
                printer.print_string_literal(tag.data)
                printer.print_string("(")
                if group:
                    _print_operands(printer, group)
                    printer.print_string(" : ")
                    _print_types(printer, [o.type for o in group])
                printer.print_string(")")
            printer.print_string("]")
        printer.print_string(" : ")
        printer.print_attribute(self.cond.type)
        if self.attributes:
            printer.print_op_attributes(dict(sorted(self.attributes.items())))

    def verify_(self):
        if self.cond.type != i1:
            raise VerifyException("llvm.intr.assume takes an i1 condition")
        if sum(self.op_bundle_sizes.get_values()) != len(self.op_bundle_operands):
            raise VerifyException("llvm.intr.assume op_bundle_sizes does not match its operands")


# =============================================================================================
# The dialect
# =============================================================================================

TT_OPS = [
    IntToPtrOp, PtrToIntOp, BitcastOp, FpToFpOp, ClampFOp, PreciseSqrtOp, PreciseDivFOp, MulhiUIOp,
    AddPtrOp, AdvanceOp, LoadOp, StoreOp, AtomicRMWOp, AtomicCASOp, SplatOp, UnsplatOp, ExpandDimsOp,
    ReshapeOp, BroadcastOp, CatOp, JoinOp, SplitOp, TransOp, GetProgramIdOp, GetNumProgramsOp, DotOp,
    DotScaledOp, ReduceOp, ReduceReturnOp, ScanOp, ScanReturnOp, MapElementwiseOp, MapElementwiseReturnOp,
    ExternElementwiseOp, MakeRangeOp, ElementwiseInlineAsmOp, HistogramOp, GatherOp, PrintOp, AssertOp,
    MakeTensorPtrOp, MakeTensorDescOp, DescriptorLoadOp, DescriptorStoreOp,
    DescriptorReduceOp, DescriptorGatherOp, DescriptorScatterOp, CallOp, FuncOp, ReturnOp,
]

TT_ATTRS = [PointerType, TensorDescType]

TT = Dialect("tt", TT_OPS, TT_ATTRS)

#: ops that replace xDSL's of the same name in the context, or that xDSL's dialects lack
#: (``llvm.intr.assume``), see the module docstring
OVERRIDE_OPS = [SelectOp, CmpiOp, CmpfOp, RemFOp, WhileOp, GpuBarrierOp, LLVMAssumeOp] + _ARITH_CASTS

__all__ = [
    "TT", "TT_OPS", "TT_ATTRS", "OVERRIDE_OPS", "PointerType", "TensorDescType",
    "CacheModifier", "EvictionPolicy", "MemSemantic", "MemSyncScope", "RMWOp", "PaddingOption",
    "RoundingMode", "PropagateNan", "InputPrecision", "ProgramIDDim", "ScaleDotElemType",
    "DescriptorReduceKind", "pointee_type", "pointer_type_like", "is_ptr_like", "element_type",
    "shape_of", "like", "i1_like",
] + [c.__name__ for c in TT_OPS + OVERRIDE_OPS]
