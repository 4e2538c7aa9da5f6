"""Pointer ops: casts between pointers and integers, pointer arithmetic, block pointers."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import DenseArrayBase, IntegerType, TensorType, i32, i64
from xdsl.irdl import (
    AnyAttr,
    VarConstraint,
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
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from .formats import PtrType, parse_stripped, print_stripped, tt_op_definition
from .types import PointerType, element_type, is_ptr_like, shape_of
from .parsing import (
    TTOp,
    _UnaryCastOp,
    _parse_attr_dict,
    _parse_bracket_operands,
    _print_operands,
    _resolve,
    _value,
)
_T = VarConstraint("T", AnyAttr())  # the pointer operand and the result


@tt_op_definition
class IntToPtrOp(_UnaryCastOp):
    """``tt.int_to_ptr``: cast ``i64`` (or a tensor of) to a pointer (or a tensor of)."""

    name = "tt.int_to_ptr"
    traits = traits_def(Pure())

    def verify_(self):
        if element_type(self.src.type) != i64 or not is_ptr_like(self.result.type):
            raise VerifyException("tt.int_to_ptr casts i64 (or a tensor of i64) to a pointer type")


@tt_op_definition
class PtrToIntOp(_UnaryCastOp):
    """``tt.ptr_to_int``: cast a pointer (or a tensor of) to ``i64`` (or a tensor of)."""

    name = "tt.ptr_to_int"
    traits = traits_def(Pure())

    def verify_(self):
        if not is_ptr_like(self.src.type) or element_type(self.result.type) != i64:
            raise VerifyException("tt.ptr_to_int casts a pointer type to i64 (or a tensor of i64)")


@tt_op_definition
class BitcastOp(_UnaryCastOp):
    """``tt.bitcast``: reinterpret bits between types of the same width (pointers included)."""

    name = "tt.bitcast"
    traits = traits_def(Pure())


@tt_op_definition
class AddPtrOp(TTOp):
    """``tt.addptr %ptr, %offset : ptr-type, offset-type``: pointer arithmetic in elements."""

    name = "tt.addptr"
    assembly_format = '$ptr `,` $offset attr-dict `:` type($result) `,` type($offset)'
    traits = traits_def(Pure())
    ptr = operand_def(_T)
    offset = operand_def()
    result = result_def(_T)

    def __init__(self, ptr, offset):
        ptr = _value(ptr)
        super().__init__(operands=[ptr, offset], result_types=[ptr.type])

    def verify_(self):
        if self.result.type != self.ptr.type or not is_ptr_like(self.ptr.type):
            raise VerifyException("tt.addptr result type must be the pointer operand's type")
        if shape_of(self.offset.type) != shape_of(self.ptr.type) or not isinstance(
                element_type(self.offset.type), IntegerType):
            raise VerifyException("tt.addptr offset must be an integer of the pointer's shape")


@tt_op_definition
class AdvanceOp(TTOp):
    """``tt.advance %ptr, [%offsets] : <tensor<..>>``: move a block pointer."""

    name = "tt.advance"
    assembly_format = '$ptr `,` `[` $offsets `]` attr-dict `:` custom<PtrType>(type($result))'
    custom_directives = (PtrType,)
    traits = traits_def(Pure())
    ptr = operand_def(_T)
    offsets = var_operand_def(i32)
    result = result_def(_T)

    def __init__(self, ptr, offsets: Sequence):
        ptr = _value(ptr)
        super().__init__(operands=[ptr, list(offsets)], result_types=[ptr.type])


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

    # Hand-written: the base pointer type (`!tt.ptr<elem>`) is derived from the result's block
    # type (`<tensor<..xelem>>`), which xDSL's format cannot infer.
    @classmethod
    def parse(cls, parser: Parser):
        base = parser.parse_unresolved_operand()
        groups = []
        for _ in range(3):
            parser.parse_punctuation(",")
            groups.append(_parse_bracket_operands(parser))
        props, attrs = _parse_attr_dict(parser, cls)
        parser.parse_punctuation(":")
        rt = parse_stripped(parser, PointerType)
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
        print_stripped(printer, self.result.type, PointerType)
