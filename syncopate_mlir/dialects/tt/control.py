"""Functions, calls, returns, program ids, device-side print and assert."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    DenseArrayBase,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    StringAttr,
    SymbolRefAttr,
    i32,
)
from xdsl.ir import Attribute, Block, Operation, Region
from xdsl.irdl import (
    SameVariadicOperandSize,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
    var_result_def,
)
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.traits import (
    CallableOpInterface,
    HasParent,
    IsTerminator,
    IsolatedFromAbove,
    MemoryWriteEffect,
    Pure,
    ReturnLike,
    SymbolOpInterface,
)
from xdsl.utils.exceptions import VerifyException

from .formats import enums, tt_op_definition, tt_variant
from .types import ProgramIDDim, _bool
from .parsing import (
    view,
    TTOp,
    _ReturnLikeOp,
    _value,
)


class _ProgramDimOp(TTOp):
    axis = prop_def(IntegerAttr)
    assembly_format = 'custom<ProgramIDDim>($axis) attr-dict `:` type($result)'
    custom_directives = enums(ProgramIDDim)
    result = result_def()

    def __init__(self, axis: int | ProgramIDDim | str = 0):
        super().__init__(result_types=[i32], properties={"axis": ProgramIDDim.coerce(axis).attr()})

    axis_dim = view("axis", ProgramIDDim)
    axis_int = view("axis", int)

    def verify_(self):
        if self.axis.value.data not in (0, 1, 2) or self.result.type != i32:
            raise VerifyException(f"{self.name} takes axis x, y or z and returns i32")


GetProgramIdOp = tt_variant(_ProgramDimOp, "GetProgramIdOp", "tt.get_program_id",
                            "``tt.get_program_id x|y|z : i32``.", Pure())
GetNumProgramsOp = tt_variant(_ProgramDimOp, "GetNumProgramsOp", "tt.get_num_programs",
                              "``tt.get_num_programs x|y|z : i32``.", Pure())


@tt_op_definition
class PrintOp(TTOp):
    """``tt.print "prefix" {hex, isSigned} (: %args : types)?``: device-side printf."""

    name = "tt.print"
    assembly_format = '$prefix attr-dict (`:` $args^ `:` type($args))?'
    traits = traits_def(MemoryWriteEffect())
    irdl_options = (SameVariadicOperandSize(),)
    args = var_operand_def()
    prefix = prop_def(StringAttr)
    hex = prop_def(BoolAttr)
    isSigned = prop_def(DenseArrayBase)

    def __init__(self, prefix: str, args: Sequence = (), *, hex: bool = False,
                 is_signed: Sequence[int] | None = None):
        args = [_value(a) for a in args]
        if is_signed is None:
            is_signed = [1] * len(args)
        super().__init__(operands=[args], properties={
            "prefix": StringAttr(prefix), "hex": _bool(hex),
            "isSigned": DenseArrayBase.from_list(i32, list(is_signed))})


@tt_op_definition
class AssertOp(TTOp):
    """``tt.assert %cond, "message" : type``: device-side assert."""

    name = "tt.assert"
    assembly_format = '$condition `,` $message attr-dict `:` type($condition)'
    traits = traits_def(MemoryWriteEffect())
    condition = operand_def()
    message = prop_def(StringAttr)

    def __init__(self, condition, message: str):
        super().__init__(operands=[condition], properties={"message": StringAttr(message)})


class FuncOpCallableInterface(CallableOpInterface):
    @classmethod
    def get_callable_region(cls, op: Operation) -> Region:
        return op.body

    @classmethod
    def get_argument_types(cls, op: Operation) -> tuple[Attribute, ...]:
        return op.function_type.inputs.data

    @classmethod
    def get_result_types(cls, op: Operation) -> tuple[Attribute, ...]:
        return op.function_type.outputs.data


@irdl_op_definition
class FuncOp(TTOp):
    """``tt.func [public|private] @name(%arg: T {attrs} loc(..), ...) -> R attributes {..} {..}``.

    Properties (ODS names): ``sym_name``, ``function_type``, ``sym_visibility``, ``arg_attrs``,
    ``res_attrs``.  Other attributes (``noinline``) are discardable attributes.
    Use :meth:`insert_arg` / :meth:`append_arg` to add a kernel argument: they keep the entry
    block, ``function_type`` and ``arg_attrs`` in step."""

    name = "tt.func"
    traits = traits_def(IsolatedFromAbove(), SymbolOpInterface(), FuncOpCallableInterface())

    body = region_def()
    sym_name = prop_def(StringAttr)
    function_type = prop_def(FunctionType)
    sym_visibility = opt_prop_def(StringAttr)
    arg_attrs = opt_prop_def(ArrayAttr)
    res_attrs = opt_prop_def(ArrayAttr)

    def __init__(self, name: str, function_type: FunctionType | tuple[Sequence[Attribute], Sequence[Attribute]],
                 region: Region | None = None, *, visibility: str | None = "public",
                 arg_attrs: Sequence[Mapping[str, Attribute] | DictionaryAttr] | None = None,
                 res_attrs: Sequence[Mapping[str, Attribute] | DictionaryAttr] | None = None,
                 attributes: Mapping[str, Attribute] | None = None):
        if isinstance(function_type, tuple):
            function_type = FunctionType.from_lists(list(function_type[0]), list(function_type[1]))
        if region is None:
            region = Region(Block(arg_types=function_type.inputs.data))
        props: dict[str, Attribute] = {"sym_name": StringAttr(name), "function_type": function_type}
        if visibility is not None:
            props["sym_visibility"] = StringAttr(visibility)
        for key, dicts in (("arg_attrs", arg_attrs), ("res_attrs", res_attrs)):
            if dicts is not None:
                props[key] = ArrayAttr([a if isinstance(a, DictionaryAttr)
                                        else DictionaryAttr(dict(a)) for a in dicts])
        super().__init__(properties=props, regions=[region], attributes=attributes)

    # ----- accessors -------------------------------------------------------------------------

    @property
    def entry_block(self) -> Block:
        return self.body.blocks.first

    @property
    def args(self) -> tuple:
        return self.entry_block.args

    def get_arg_attrs(self, index: int) -> dict[str, Attribute]:
        if self.arg_attrs is None:
            return {}
        return dict(self.arg_attrs.data[index].data)

    def set_arg_attr(self, index: int, name: str, value: Attribute) -> None:
        n = len(self.function_type.inputs.data)
        dicts = [dict(d.data) for d in self.arg_attrs.data] if self.arg_attrs is not None else [{} for _ in range(n)]
        dicts[index][name] = value
        self.arg_attrs = ArrayAttr([DictionaryAttr(d) for d in dicts])

    def arg_index(self, name: str) -> int | None:
        """Index of the argument whose name (its ``NameLoc``, as Triton records the Python
        parameter name, or its SSA name hint) is ``name``."""
        for i, a in enumerate(self.args):
            if _loc_name(a.location) == name or a.name_hint == name:
                return i
        return None

    def insert_arg(self, index: int, arg_type: Attribute, *, name: str | None = None,
                   attrs: Mapping[str, Attribute] | None = None, location: Attribute | None = None):
        """Insert a new argument at ``index``; returns the new block argument.

        ``name`` becomes a ``NameLoc`` (as Triton names kernel arguments, so Triton prints
        ``%name``) around ``location`` (default: the location of the function)."""
        inputs = list(self.function_type.inputs.data)
        n = len(inputs)
        inputs.insert(index, arg_type)
        self.function_type = FunctionType.from_lists(inputs, list(self.function_type.outputs.data))
        if self.arg_attrs is not None or attrs:
            dicts = [d for d in self.arg_attrs.data] if self.arg_attrs is not None else \
                [DictionaryAttr({}) for _ in range(n)]
            dicts.insert(index, DictionaryAttr(dict(attrs or {})))
            self.arg_attrs = ArrayAttr(dicts)
        from xdsl.dialects.builtin import NameLoc
        loc = location if location is not None else self.location
        if name is not None:
            loc = NameLoc(StringAttr(name), loc)
        arg = self.entry_block.insert_arg(arg_type, index, loc)
        if name is not None:
            arg.name_hint = name
        return arg

    def append_arg(self, arg_type: Attribute, *, name: str | None = None,
                   attrs: Mapping[str, Attribute] | None = None, location: Attribute | None = None):
        """Append a new argument (see :meth:`insert_arg`)."""
        return self.insert_arg(len(self.function_type.inputs.data), arg_type, name=name, attrs=attrs,
                               location=location)

    # ----- syntax ----------------------------------------------------------------------------

    # Hand-written: Triton prints tt.func with MLIR's C++ function printer (argument names,
    # attributes and locations inline), which has no declarative form.
    @classmethod
    def parse(cls, parser: Parser):
        from xdsl.dialects.utils import parse_func_op_like
        visibility = parser.parse_optional_visibility_keyword()
        (name, inputs, outputs, region, extra, arg_attrs, res_attrs) = parse_func_op_like(
            parser, reserved_attr_names=("sym_name", "function_type", "sym_visibility", "arg_attrs",
                                         "res_attrs"))
        props: dict[str, Attribute] = {"sym_name": StringAttr(name),
                                       "function_type": FunctionType.from_lists(list(inputs), list(outputs))}
        for key, value in (("sym_visibility", visibility), ("arg_attrs", arg_attrs),
                           ("res_attrs", res_attrs)):
            if value is not None:
                props[key] = value
        attrs = dict(extra.data) if extra is not None else {}
        return cls.create(properties=props, attributes=attrs, regions=[region])

    def print(self, printer: Printer):
        from xdsl.dialects.utils import print_func_op_like
        if self.sym_visibility is not None:
            printer.print_string(" " + self.sym_visibility.data)
        if not self.body.blocks:
            print_func_op_like(printer, self.sym_name, self.function_type, self.body, self.attributes,
                               arg_attrs=self.arg_attrs, res_attrs=self.res_attrs, reserved_attr_names=(),
                               print_empty_outputs=False)
            return
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name)
        printer.print_string("(")
        attrs = self.arg_attrs.data if self.arg_attrs is not None else [None] * len(self.args)
        printer.print_list(zip(self.args, attrs), lambda p: _print_func_arg(printer, *p))
        printer.print_string(")")
        outs = self.function_type.outputs.data
        if outs:
            printer.print_string(" -> ")
            res = self.res_attrs.data if self.res_attrs is not None else None
            if len(outs) == 1 and not (res and res[0].data) and not isinstance(outs[0], FunctionType):
                printer.print_attribute(outs[0])
            else:
                printer.print_string("(")
                printer.print_list(range(len(outs)), lambda i: (
                    printer.print_attribute(outs[i]),
                    res is not None and res[i].data and printer.print_op_attributes(res[i].data)))
                printer.print_string(")")
        if self.attributes:
            printer.print_op_attributes(dict(sorted(self.attributes.items())), print_keyword=True)
        printer.print_string(" ")
        printer.print_region(self.body, print_entry_block_args=False, print_block_terminators=True)

    def verify_(self):
        if self.body.blocks:
            types = tuple(a.type for a in self.entry_block.args)
            if types != tuple(self.function_type.inputs.data):
                raise VerifyException(f"tt.func @{self.sym_name.data}: entry block arguments {types} do "
                                      f"not match the function type {self.function_type}")
        if self.arg_attrs is not None and len(self.arg_attrs.data) != len(self.function_type.inputs.data):
            raise VerifyException(f"tt.func @{self.sym_name.data}: arg_attrs has "
                                  f"{len(self.arg_attrs.data)} entries for {len(self.function_type.inputs.data)} arguments")


def _print_func_arg(printer: Printer, arg, attrs: DictionaryAttr | None) -> None:
    """``%arg: T {attrs} loc(..)``, the location as the printer places them (an xDSL printer
    with ``print_debuginfo``, or the bridge's ``TTIRPrinter``)."""
    printer.print_block_argument(arg, print_type=False)
    printer.print_string(": ")
    printer.print_attribute(arg.type)
    if attrs is not None and attrs.data:
        printer.print_op_attributes(attrs.data)
    if hasattr(printer, "print_optional_location"):
        printer.print_optional_location(arg.location)
    elif printer.print_debuginfo:
        printer.print_string(" ")
        printer.print_attribute(arg.location)


def _loc_name(loc: Attribute) -> str | None:
    from xdsl.dialects.builtin import NameLoc
    return loc.desc.data if isinstance(loc, NameLoc) else None


@tt_op_definition
class ReturnOp(_ReturnLikeOp):
    """``tt.return (%srcs : types)?``."""

    name = "tt.return"
    assembly_format = "$srcs attr-dict (`:` type($srcs)^)?"
    traits = traits_def(Pure(), IsTerminator(), ReturnLike(), HasParent(FuncOp))
    srcs = var_operand_def()

    def verify_(self):
        func = self.parent_op()
        if isinstance(func, FuncOp):
            want = tuple(func.function_type.outputs.data)
            if tuple(self.operand_types) != want:
                raise VerifyException(f"tt.return types {tuple(self.operand_types)} do not match the "
                                      f"results {want} of @{func.sym_name.data}")


@tt_op_definition
class CallOp(TTOp):
    """``tt.call @callee(%args) : (T...) -> R...``.  Properties: ``callee``, ``arg_attrs``,
    ``res_attrs``."""

    name = "tt.call"
    assembly_format = '$callee `(` $args `)` attr-dict `:` functional-type($args, results)'
    args = var_operand_def()
    result = var_result_def()
    callee = prop_def(SymbolRefAttr)
    arg_attrs = opt_prop_def(ArrayAttr)
    res_attrs = opt_prop_def(ArrayAttr)

    def __init__(self, callee: str | SymbolRefAttr, args: Sequence, result_types: Sequence[Attribute]):
        if isinstance(callee, str):
            callee = SymbolRefAttr(callee)
        super().__init__(operands=[list(args)], result_types=[list(result_types)],
                         properties={"callee": callee})

