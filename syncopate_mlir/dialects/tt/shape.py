"""Shape ops: ranges, splat/broadcast, dimension changes, concatenation, gathers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar
import math

from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, TensorType, UnitAttr, i32
from xdsl.ir import Attribute, Operation, SSAValue
from xdsl.irdl import (
    AnyAttr,
    VarConstraint,
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import NoMemoryEffect, Pure
from xdsl.utils.exceptions import VerifyException

from .formats import tt_op_definition, tt_variant
from .types import _i32, element_type, like, shape_of
from .parsing import TTOp, _UnaryCastOp, _parse_attr_dict, _value

_T = VarConstraint("T", AnyAttr())  # operands (results) of one type


@tt_op_definition
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


@tt_op_definition
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


@tt_op_definition
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
    """``$lhs, $rhs attr-dict : type($lhs) -> type($result)`` (both operands of one type)."""
    assembly_format = '$lhs `,` $rhs attr-dict `:` type($lhs) `->` type($result)'

    lhs = operand_def(_T)
    rhs = operand_def(_T)
    result = result_def()

    def __init__(self, lhs, rhs, result_type: Attribute):
        super().__init__(operands=[lhs, rhs], result_types=[result_type])


CatOp = tt_variant(_LhsRhsOp, "CatOp", "tt.cat",
                   "``tt.cat``: concatenate two tensors (may reorder elements).", NoMemoryEffect())


@tt_op_definition
class JoinOp(_LhsRhsOp):
    """``tt.join``: join two tensors along a new minor dimension of size 2."""

    name = "tt.join"
    traits = traits_def(NoMemoryEffect())

    def __init__(self, lhs, rhs, result_type: Attribute | None = None):
        lhs = _value(lhs)
        if result_type is None:
            result_type = TensorType(element_type(lhs.type), list(shape_of(lhs.type)) + [2])
        super().__init__(lhs, rhs, result_type)


@tt_op_definition
class SplitOp(TTOp):
    """``tt.split``: split a tensor along its last dimension (of size 2) into two."""

    name = "tt.split"
    assembly_format = '$src attr-dict `:` type($src) `->` type($outLHS)'
    traits = traits_def(NoMemoryEffect())
    ASM_RESULT_NAMES: ClassVar[tuple[str, ...]] = ("outLHS", "outRHS")
    src = operand_def()
    outLHS = result_def(_T)
    outRHS = result_def(_T)

    def __init__(self, src, result_type: Attribute | None = None):
        src = _value(src)
        if result_type is None:
            result_type = TensorType(element_type(src.type), list(shape_of(src.type))[:-1])
        super().__init__(operands=[src], result_types=[result_type, result_type])


@tt_op_definition
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


@tt_op_definition
class ReshapeOp(TTOp):
    """``tt.reshape``: reinterpret a tensor with another shape (``allow_reorder`` lets the
    compiler reorder elements)."""

    name = "tt.reshape"
    assembly_format = '$src (`allow_reorder` $allow_reorder^)? (`efficient_layout` $efficient_layout^)? attr-dict `:` type($src) `->` type($result)'
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

    # Hand-written: the result type is the operand's element type (Triton's InferTypeOpInterface),
    # not inferable by xDSL's format.
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


@tt_op_definition
class MakeRangeOp(TTOp):
    """``tt.make_range {end, start} : tensor<Nxi32>``: ``[start, end)``."""

    name = "tt.make_range"
    assembly_format = 'attr-dict `:` type($result)'
    traits = traits_def(Pure())
    start = prop_def(IntegerAttr)
    end = prop_def(IntegerAttr)
    result = result_def()

    def __init__(self, start: int, end: int):
        super().__init__(result_types=[TensorType(i32, [end - start])],
                         properties={"start": _i32(start), "end": _i32(end)})

    def verify_(self):
        s, e = self.start.value.data, self.end.value.data
        if e <= s or shape_of(self.result.type) != (e - s,):
            raise VerifyException(f"tt.make_range [{s}, {e}) does not match {self.result.type}")


@tt_op_definition
class GatherOp(TTOp):
    """``tt.gather %src[%indices] {axis} : (Ts, Ti) -> Tr``."""

    name = "tt.gather"
    assembly_format = '$src `[` $indices `]` attr-dict `:` functional-type(operands, results)'
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

