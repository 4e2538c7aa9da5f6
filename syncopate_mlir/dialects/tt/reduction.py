"""Ops with a combine region (reduce, scan, map_elementwise, printed in generic form by
Triton 3.6) and their terminators."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import BoolAttr, IntegerAttr, TensorType
from xdsl.ir import Attribute, Block, Region
from xdsl.irdl import (
    irdl_op_definition,
    prop_def,
    region_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.traits import HasParent, IsTerminator, Pure, RecursiveMemoryEffect, ReturnLike
from xdsl.utils.exceptions import VerifyException

from .formats import tt_variant
from .types import _bool, _i32, element_type, shape_of
from .parsing import TTOp, _ReturnLikeOp, _value


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


class _CombineReturnOp(_ReturnLikeOp):
    """``tt.<op>.return %v : T``: the terminator of a combine region (each subclass names its
    parent op in its traits)."""

    assembly_format = "$result attr-dict (`:` type($result)^)?"
    result = var_operand_def()


def _combine_return(parent: type) -> type:
    """``<parent>.return``, the terminator of ``parent``'s combine region."""
    cls_name = parent.__name__.removesuffix("Op") + "ReturnOp"
    return tt_variant(_CombineReturnOp, cls_name, f"{parent.name}.return",
                      f"``{parent.name}.return %v : T``: the terminator of a ``{parent.name}`` "
                      f"region.", Pure(), IsTerminator(), ReturnLike(), HasParent(parent))


ReduceReturnOp = _combine_return(ReduceOp)
ScanReturnOp = _combine_return(ScanOp)
MapElementwiseReturnOp = _combine_return(MapElementwiseOp)
