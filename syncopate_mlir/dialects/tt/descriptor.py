"""TMA tensor descriptors: making them, loads, stores, reductions, gathers and scatters."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import IntegerAttr, TensorType, i32, i64
from xdsl.ir import Attribute
from xdsl.irdl import (
    SameVariadicOperandSize,
    operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import MemoryReadEffect, MemoryWriteEffect, Pure

from .formats import CacheEvict, DescType, PtrType, enums, tt_op_definition
from .types import (
    CacheModifier,
    DescriptorReduceKind,
    EvictionPolicy,
    PaddingOption,
    TensorDescType,
    element_type,
)
from .parsing import (
    view,
    TTOp,
    _CACHE_NONE,
    _EVICT_NORMAL,
    _signless,
    _value,
)


@tt_op_definition
class MakeTensorDescOp(TTOp):
    """``tt.make_tensor_descriptor %base, [%shape], [%strides] : <T>, <tensor<..>>``: a TMA
    descriptor over a global tensor (``shape`` i32, ``strides`` i64).  Property ``padding``."""

    name = "tt.make_tensor_descriptor"
    assembly_format = '$base `,` `[` $shape `]` `,` `[` $strides `]` attr-dict `:` custom<PtrType>(type($base)) `,` custom<DescType>(type($result))'
    custom_directives = (PtrType, DescType)
    traits = traits_def(Pure())
    irdl_options = (SameVariadicOperandSize(),)
    base = operand_def()
    shape = var_operand_def(i32)
    strides = var_operand_def(i64)
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

    padding_option = view("padding", PaddingOption)


@tt_op_definition
class DescriptorLoadOp(TTOp):
    """``tt.descriptor_load %desc[%indices] : !tt.tensordesc<..> -> tensor<..>`` (TMA load).
    Properties: ``cache``, ``evict``."""

    name = "tt.descriptor_load"
    assembly_format = '$desc `[` $indices `]` custom<CacheEvict>($cache, $evict) attr-dict `:` type($desc) `->` type($result)'
    custom_directives = (CacheEvict,)
    traits = traits_def(MemoryReadEffect())
    desc = operand_def()
    indices = var_operand_def(i32)
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

    cache_modifier = view("cache", CacheModifier)
    eviction_policy = view("evict", EvictionPolicy)


@tt_op_definition
class DescriptorStoreOp(TTOp):
    """``tt.descriptor_store %desc[%indices], %src : !tt.tensordesc<..>, tensor<..>`` (TMA store)."""

    name = "tt.descriptor_store"
    assembly_format = '$desc `[` $indices `]` `,` $src attr-dict `:` type($desc) `,` type($src)'
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    desc = operand_def()
    src = operand_def()
    indices = var_operand_def(i32)

    def __init__(self, desc, src, indices: Sequence):
        super().__init__(operands=[desc, src, list(indices)])


@tt_op_definition
class DescriptorReduceOp(TTOp):
    """``tt.descriptor_reduce <kind>, %desc[%indices], %src : !tt.tensordesc<..>, tensor<..>``:
    an atomic reduction into global memory through TMA.  Property ``kind``."""

    name = "tt.descriptor_reduce"
    assembly_format = 'custom<DescriptorReduceKind>($kind) `,` $desc `[` $indices `]` `,` $src attr-dict `:` type($desc) `,` type($src)'
    custom_directives = enums(DescriptorReduceKind)
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    desc = operand_def()
    src = operand_def()
    indices = var_operand_def(i32)
    kind = prop_def(IntegerAttr)

    def __init__(self, kind: DescriptorReduceKind | str, desc, src, indices: Sequence):
        super().__init__(operands=[desc, src, list(indices)],
                         properties={"kind": DescriptorReduceKind.coerce(kind).attr()})

    reduce_kind = view("kind", DescriptorReduceKind)


@tt_op_definition
class DescriptorGatherOp(TTOp):
    """``tt.descriptor_gather %desc[%x_offsets, %y_offset] : (desc, tensor<Nxi32>, i32) -> T``."""

    name = "tt.descriptor_gather"
    assembly_format = '$desc `[` $x_offsets `,` $y_offset `]` attr-dict `:` functional-type(operands, results)'
    traits = traits_def(MemoryReadEffect())
    desc = operand_def()
    x_offsets = operand_def()
    y_offset = operand_def()
    result = result_def()

    def __init__(self, desc, x_offsets, y_offset, result_type: Attribute):
        super().__init__(operands=[desc, x_offsets, y_offset], result_types=[result_type])


@tt_op_definition
class DescriptorScatterOp(TTOp):
    """``tt.descriptor_scatter %desc[%x_offsets, %y_offset], %src : types``."""

    name = "tt.descriptor_scatter"
    assembly_format = '$desc `[` $x_offsets `,` $y_offset `]` `,` $src attr-dict `:` type(operands)'
    traits = traits_def(MemoryReadEffect(), MemoryWriteEffect())
    desc = operand_def()
    x_offsets = operand_def()
    y_offset = operand_def()
    src = operand_def()

    def __init__(self, desc, x_offsets, y_offset, src):
        super().__init__(operands=[desc, x_offsets, y_offset, src])

