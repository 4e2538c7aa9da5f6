"""Compute ops: float conversions, precise math, clamps, dots, extern calls, inline asm,
histograms."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    BoolAttr,
    DenseArrayBase,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
)
from xdsl.ir import Attribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    SameVariadicOperandSize,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from .types import (
    InputPrecision,
    PropagateNan,
    RoundingMode,
    ScaleDotElemType,
    _bool,
    _i32,
    i1_like,
    shape_of,
)
from .parsing import (
    PureIfPureProperty,
    TTOp,
    _SEGMENTS,
    _enum_prop,
    _parse_attr_dict,
    _parse_enum,
    _parse_operands,
    _parse_types,
    _print_operands,
    _print_types,
    _resolve,
    _value,
)


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
