"""Triton's enums (``I32EnumAttr``s, stored as ``i32`` integer attributes) and the ``tt`` types
(``!tt.ptr``, ``!tt.tensordesc``), with helpers over pointer-like and tensor types."""

from __future__ import annotations

from enum import IntEnum
from typing import ClassVar

from xdsl.dialects.builtin import IntAttr, IntegerAttr, TensorType, i1, i32
from xdsl.ir import Attribute, ParametrizedAttribute, TypeAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


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


def _enum(name: str, members: str | dict[str, int], start: int = 1, **keywords: str):
    """A Triton enum: ``members`` numbered from ``start`` (or a name -> value mapping), each
    printed as its lower-case name unless ``keywords`` names another spelling."""
    cls = _TTEnum(name, members, start=start, module=__name__, qualname=name)
    cls._KEYWORDS = {m: keywords.get(m.name, m.name.lower()) for m in cls}
    return cls


CacheModifier = _enum("CacheModifier", "NONE CA CG WB CS WT CV")
MemSemantic = _enum("MemSemantic", "RELAXED ACQUIRE RELEASE ACQUIRE_RELEASE",
                    ACQUIRE_RELEASE="acq_rel")
EvictionPolicy = _enum("EvictionPolicy", "NORMAL EVICT_FIRST EVICT_LAST", NORMAL="evict_normal")
PaddingOption = _enum("PaddingOption", "PAD_ZERO PAD_NAN", PAD_ZERO="zero", PAD_NAN="nan")
RMWOp = _enum("RMWOp", "AND OR XOR ADD FADD MAX MIN UMAX UMIN XCHG", XCHG="exch")
DescriptorReduceKind = _enum("DescriptorReduceKind", "ADD MIN MAX INC DEC AND OR XOR")
MemSyncScope = _enum("MemSyncScope", "GPU CTA SYSTEM", SYSTEM="sys")
ProgramIDDim = _enum("ProgramIDDim", "X Y Z", start=0)
RoundingMode = _enum("RoundingMode", "RTZ RTNE", start=0)
PropagateNan = _enum("PropagateNan", {"NONE": 0, "ALL": 0xFFFF})
InputPrecision = _enum("InputPrecision", "TF32 TF32x3 IEEE BF16x3 BF16x6", start=0)
ScaleDotElemType = _enum("ScaleDotElemType", "E4M3 E5M2 E2M3 E3M2 E2M1 BF16 FP16", start=0)


def _i32(v: int) -> IntegerAttr:
    return IntegerAttr(int(v), i32)


def _bool(v: bool) -> IntegerAttr:
    return IntegerAttr(1 if v else 0, i1)


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
