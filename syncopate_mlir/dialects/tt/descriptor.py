"""TMA tensor descriptors: making them, loads, stores, reductions, gathers and scatters."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntegerAttr, TensorType, i32, i64
from xdsl.ir import Attribute
from xdsl.irdl import (
    SameVariadicOperandSize,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from .types import (
    CacheModifier,
    DescriptorReduceKind,
    EvictionPolicy,
    PaddingOption,
    PointerType,
    TensorDescType,
    element_type,
)
from .parsing import (
    TTOp,
    _CACHE_NONE,
    _EVICT_NORMAL,
    _parse_attr_dict,
    _parse_bracket_operands,
    _parse_cache_evict,
    _parse_enum,
    _parse_stripped,
    _parse_types,
    _print_cache_evict,
    _print_operands,
    _print_stripped,
    _print_types,
    _resolve,
    _signless,
    _value,
)


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
