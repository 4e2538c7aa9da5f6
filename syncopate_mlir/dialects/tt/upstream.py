"""Overrides of other upstream ops for MLIR's syntax as Triton prints it (``scf.while``
without loop-carried values, ``gpu.barrier``) and ``llvm.intr.assume``, which xDSL lacks."""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import gpu as _gpu, scf as _scf
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, StringAttr, i1, i32
from xdsl.ir import Operation
from xdsl.irdl import (
    IRDLOperation,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException

from .parsing import _parse_operands, _parse_types, _print_operands, _print_types, _resolve


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

    # Hand-written: MLIR's scf.while has a C++ parser/printer (`(%a = %init) : ... do {..}`).
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

    # Hand-written: operand bundles (`["tag"(%ops : types), ...]`) have no declarative form.
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
