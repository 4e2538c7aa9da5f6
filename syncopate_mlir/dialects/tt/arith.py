"""Overrides of xDSL's ``arith`` ops for what Triton's TTIR holds and prints: elementwise
selects and compares on tensors (``tensor<..xi1>``), casts on tensors, ``arith.remf``.
Each subclasses xDSL's op, so ``isinstance(op, arith.CmpiOp)`` still holds."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith as _arith
from xdsl.dialects.builtin import IntegerAttr, IntegerType, TensorType, i1
from xdsl.ir import Operation
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    prop_def,
    result_def,
    traits_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from .types import element_type, i1_like, shape_of
from .parsing import _parse_operands, _parse_types, _print_operands, _resolve, _value


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

    # Hand-written: MLIR's arith.select has a C++ parser (one type, or the condition's tensor
    # type then the value type).
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


# Hand-written: the result type (i1 of the operands' shape) is not inferable by xDSL's format,
# and xDSL's own cmpi/cmpf formats print an i1 result only.
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
class RemFOp(_arith.FloatingPointLikeBinaryOperation):
    """``arith.remf %a, %b (fastmath<..>)? : T``: float remainder (Triton's ``%`` on floats),
    which xDSL's arith dialect lacks."""

    name = "arith.remf"
    traits = traits_def(Pure())
