"""Compute ops: float conversions, precise math, clamps, dots, extern calls, inline asm,
histograms."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import (
    BoolAttr,
    IntegerAttr,
    StringAttr,
    TensorType,
    i32,
)
from xdsl.ir import Attribute
from xdsl.irdl import (
    AnyAttr,
    VarConstraint,
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

from .formats import enums, tt_op_definition, tt_variant
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
    view,
    _parse_attr_dict,
    _print_operands,
    _value,
)

_T = VarConstraint("T", AnyAttr())  # operands (and results) of one type


@tt_op_definition
class FpToFpOp(TTOp):
    """``tt.fp_to_fp``: float conversion with custom types (fp8) and rounding modes."""

    name = "tt.fp_to_fp"
    assembly_format = '$src attr-dict (`,` `rounding` `=` custom<RoundingMode>($rounding)^)? `:` type($src) `->` type($result)'
    custom_directives = enums(RoundingMode)
    traits = traits_def(Pure())
    src = operand_def()
    result = result_def()
    rounding = opt_prop_def(IntegerAttr)

    def __init__(self, src, result_type: Attribute, rounding: RoundingMode | str | None = None):
        props = {}
        if rounding is not None:
            props["rounding"] = RoundingMode.coerce(rounding).attr()
        super().__init__(operands=[src], result_types=[result_type], properties=props)

    rounding_mode = view("rounding", RoundingMode)


class _SameTypeOp(TTOp):
    """Ops whose operands and result share one type: ``$x (, $y)* attr-dict : type($x)``."""
    assembly_format = 'operands attr-dict `:` type($result)'

    result = result_def(_T)

    def verify_(self):
        if any(o.type != self.result.type for o in self.operands):
            raise VerifyException(f"{self.name} needs operands and result of one type")


@tt_op_definition
class PreciseSqrtOp(_SameTypeOp):
    """``tt.precise_sqrt``: IEEE-rounded square root."""

    name = "tt.precise_sqrt"
    traits = traits_def(Pure())
    x = operand_def(_T)

    def __init__(self, x):
        x = _value(x)
        super().__init__(operands=[x], result_types=[x.type])


class _BinarySameTypeOp(_SameTypeOp):
    x = operand_def(_T)
    y = operand_def(_T)

    def __init__(self, x, y):
        x = _value(x)
        super().__init__(operands=[x, y], result_types=[x.type])


PreciseDivFOp = tt_variant(_BinarySameTypeOp, "PreciseDivFOp", "tt.precise_divf",
                           "``tt.precise_divf``: IEEE-rounded division.", Pure())
MulhiUIOp = tt_variant(_BinarySameTypeOp, "MulhiUIOp", "tt.mulhiui",
                       "``tt.mulhiui``: high half of the unsigned 2N-bit product.", Pure())


@tt_op_definition
class ClampFOp(TTOp):
    """``tt.clampf``: clamp ``x`` to ``[min, max]`` (``propagateNan``: none | all)."""

    name = "tt.clampf"
    assembly_format = '$x `,` $min `,` $max `,` `propagateNan` `=` custom<PropagateNan>($propagateNan) attr-dict `:` type($result)'
    custom_directives = enums(PropagateNan)
    traits = traits_def(Pure())
    x = operand_def(_T)
    min = operand_def(_T)
    max = operand_def(_T)
    result = result_def(_T)
    propagateNan = prop_def(IntegerAttr)

    def __init__(self, x, min, max, propagate_nan: PropagateNan | str = PropagateNan.NONE):
        x = _value(x)
        super().__init__(operands=[x, min, max], result_types=[x.type],
                         properties={"propagateNan": PropagateNan.coerce(propagate_nan).attr()})

    propagate_nan = view("propagateNan", PropagateNan)


@tt_op_definition
class DotOp(TTOp):
    """``tt.dot %a, %b, %c (, inputPrecision = p)? : ta * tb -> td``: ``d = a @ b + c``.

    Properties: ``inputPrecision`` (default ieee), ``maxNumImpreciseAcc`` (default 0)."""

    name = "tt.dot"
    assembly_format = '$a `,` $b `,` $c (`,` `inputPrecision` `=` custom<InputPrecision>($inputPrecision)^)? attr-dict `:` type($a) `*` type($b) `->` type($d)'
    custom_directives = enums(InputPrecision)
    traits = traits_def(Pure())
    a = operand_def()
    b = operand_def()
    c = operand_def(_T)
    d = result_def(_T)
    input_precision = prop_def(IntegerAttr, InputPrecision.IEEE.attr(), prop_name="inputPrecision")
    max_num_imprecise_acc = prop_def(IntegerAttr, _i32(0), prop_name="maxNumImpreciseAcc")

    def __init__(self, a, b, c, input_precision: InputPrecision | str = InputPrecision.IEEE,
                 max_num_imprecise_acc: int = 0):
        c = _value(c)
        super().__init__(operands=[a, b, c], result_types=[c.type],
                         properties={"inputPrecision": InputPrecision.coerce(input_precision).attr(),
                                     "maxNumImpreciseAcc": _i32(max_num_imprecise_acc)})

    precision = view("input_precision", InputPrecision)

    def verify_(self):
        sa, sb, sc = shape_of(self.a.type), shape_of(self.b.type), shape_of(self.c.type)
        if self.d.type != self.c.type:
            raise VerifyException("tt.dot result type must be the accumulator type")
        if len(sa) not in (2, 3) or len(sa) != len(sb) or len(sa) != len(sc) or sa[-1] != sb[-2] \
                or sc[-2:] != (sa[-2], sb[-1]):
            raise VerifyException(f"tt.dot shapes do not match: {self.a.type} * {self.b.type} -> {self.c.type}")


@tt_op_definition
class DotScaledOp(TTOp):
    """``tt.dot_scaled``: microscaled matmul ``d = scale(a, a_scale) @ scale(b, b_scale) + c``.

    Properties: ``a_elem_type``, ``b_elem_type`` (ScaleDotElemType), ``fastMath``,
    ``lhs_k_pack``, ``rhs_k_pack``."""

    name = "tt.dot_scaled"
    assembly_format = '$a (`scale` $a_scale^)? `,` $b (`scale` $b_scale^)? `,` $c `lhs` `=` custom<ScaleDotElemType>($a_elem_type) `rhs` `=` custom<ScaleDotElemType>($b_elem_type) attr-dict `:` type($a) (`,` type($a_scale)^)? `*` type($b) (`,` type($b_scale)^)? `->` type($d)'
    custom_directives = enums(ScaleDotElemType)
    traits = traits_def(Pure())
    irdl_options = (AttrSizedOperandSegments(as_property=True),)
    a = operand_def()
    b = operand_def()
    c = operand_def(_T)
    a_scale = opt_operand_def()
    b_scale = opt_operand_def()
    d = result_def(_T)
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


@tt_op_definition
class ExternElementwiseOp(TTOp):
    """``tt.extern_elementwise %srcs {libname, libpath, pure, symbol} : (T...) -> T``: call a
    device library function (libdevice, NVSHMEM device bitcode ...) elementwise."""

    name = "tt.extern_elementwise"
    assembly_format = 'operands attr-dict `:` functional-type(operands, $result)'
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

    is_pure = view("pure", bool)


@tt_op_definition
class ElementwiseInlineAsmOp(TTOp):
    """``tt.elementwise_inline_asm "asm" {constraints, packed_element, pure} %args : T... -> R...``.

    Runs ``asm_string`` on ``packed_element`` elements at a time; ``$0..`` are the results,
    then the arguments, as in PTX inline asm.  Properties: ``asm_string``, ``constraints``,
    ``pure``, ``packed_element``."""

    name = "tt.elementwise_inline_asm"
    assembly_format = '$asm_string attr-dict ($args^ `:` type($args))? `->` type($result)'
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

    is_pure = view("pure", bool)


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

    # Hand-written: the mask type is i1 of the source's shape, not inferable by xDSL's format.
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
