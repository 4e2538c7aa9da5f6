"""What the ``tt`` ops' declarative ``assembly_format``s need beyond xDSL's directives.

* :func:`tt_op_definition`: ``irdl_op_definition``, with the ``attr-dict`` of the op's format
  printed in sorted order.  MLIR's attribute dictionaries are sorted (discardable attributes
  and the inherent ones held as properties together), so Triton prints them sorted; xDSL's
  ``attr-dict`` prints discardable attributes, then properties, in insertion order.
* ``custom<E>($prop)`` for each Triton enum ``E`` (:func:`enum_directive`): an ``i32``
  ``IntegerAttr`` property printed as its keyword (``cacheModifier = cg``), as MLIR prints
  an ``I32EnumAttr``.  It can anchor an optional group (present when not the default).
* ``custom<CacheEvict>($cache, $evict)``: MLIR's ``oilist(`cacheModifier` `=` $cache |
  `evictionPolicy` `=` $evict)``, parsed in either order, printed in declaration order.
* ``custom<PtrType>(type($x))`` / ``custom<DescType>(type($x))``: a ``!tt.ptr`` /
  ``!tt.tensordesc`` type printed without its dialect prefix (``<tensor<64x32xf16>>``), as MLIR
  prints a type whose constraint is a type of the op's own dialect.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdsl.irdl import ParsePropInAttrDict, irdl_op_definition, traits_def
from xdsl.irdl.declarative_assembly_format import (
    AttrDictDirective,
    AttributeVariable,
    CustomDirective,
    FormatProgram,
    ParsingState,
    PrintingState,
    TypeDirective,
    irdl_custom_directive,
)
from xdsl.parser import Parser
from xdsl.printer import Printer

from .types import (
    CacheModifier,
    DescriptorReduceKind,
    EvictionPolicy,
    InputPrecision,
    MemSemantic,
    MemSyncScope,
    PointerType,
    ProgramIDDim,
    PropagateNan,
    RMWOp,
    RoundingMode,
    ScaleDotElemType,
    TensorDescType,
    _TTEnum,
)


class _SortedAttrDict(AttrDictDirective):
    """``attr-dict`` printed in MLIR's (sorted) order; parsing is xDSL's."""

    def print(self, printer: Printer, state: PrintingState, op) -> None:
        if print_sorted_attr_dict(printer, op, self.expected_properties, self.reserved_attr_names,
                                  self.with_keyword):
            state.last_was_punctuation = False
            state.should_emit_space = True


def print_sorted_attr_dict(printer: Printer, op, props: Iterable[str], skip: Iterable[str] = (),
                           keyword: bool = False) -> bool:
    """MLIR's ``attr-dict``: the op's discardable attributes and its properties ``props`` not at
    their default, sorted, less ``skip``; False when nothing was printed.  The declarative
    formats and the hand-written ones (``TTOp._print_dict``) print through here."""
    defaults = op.get_irdl_definition().properties
    entries = dict(op.attributes)
    for k in props:
        v = op.properties.get(k)
        if v is not None and (k not in defaults or v != defaults[k].default_value):
            entries[k] = v
    return printer.print_op_attributes(dict(sorted(entries.items())), reserved_attr_names=skip,
                                       print_keyword=keyword)


def tt_op_definition(cls):
    """``irdl_op_definition`` for an op with an ``assembly_format``, whose ``attr-dict``
    prints sorted (see the module docstring)."""
    options = tuple(getattr(cls, "irdl_options", ()))
    if not any(isinstance(o, ParsePropInAttrDict) for o in options):
        cls.irdl_options = (*options, ParsePropInAttrDict())  # properties outside the format
    cls = irdl_op_definition(cls)
    # the program irdl_op_definition compiled (a closure cell of its print), else compile again
    cells = [c.cell_contents for c in cls.print.__closure__ or ()]
    program = next((c for c in cells if isinstance(c, FormatProgram)), None) or \
        FormatProgram.from_str(cls.assembly_format, cls.get_irdl_definition())
    program = FormatProgram(tuple(
        _SortedAttrDict(s.with_keyword, s.reserved_attr_names, s.expected_properties)
        if type(s) is AttrDictDirective else s for s in program.stmts))

    def parse(c, parser: Parser):
        return program.parse(parser, c)

    def print_(self, printer: Printer) -> None:
        program.print(printer, self)

    cls.parse = classmethod(parse)
    cls.print = print_
    return cls


def tt_variant(base: type, cls_name: str, name: str, doc: str, *traits) -> type:
    """The typed op ``name`` that is ``base`` (its operands, results, format, builder and
    checks) under another name, docstring and traits: ops of one shape (``tt.precise_divf`` and
    ``tt.mulhiui``, the combine-region terminators ...) defined from one line each."""
    return tt_op_definition(type(cls_name, (base,), {
        "__doc__": doc, "__module__": base.__module__, "__qualname__": cls_name, "name": name,
        "traits": traits_def(*traits)}))


# ----- enums as keywords ----------------------------------------------------------------------


def _parse_keyword(parser: Parser, enum: type[_TTEnum]):
    kw = parser.parse_identifier()
    try:
        return enum.from_keyword(kw).attr()
    except KeyError:
        parser.raise_error(f"expected one of {enum.keywords()} for {enum.__name__}, got '{kw}'")


class _EnumDirective(CustomDirective):
    """``custom<E>($prop)``: an enum property as its keyword."""

    enum: type[_TTEnum]
    attr: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        self.attr.set(state, _parse_keyword(parser, self.enum))

    def print(self, printer: Printer, state: PrintingState, op) -> None:
        state.print_whitespace(printer)
        printer.print_string(self.enum(self.attr.get(op).value.data).keyword)

    def is_present(self, op) -> bool:
        return self.attr.is_present(op)

    def is_anchorable(self) -> bool:
        return self.attr.is_anchorable()


def enum_directive(enum: type[_TTEnum]) -> type[CustomDirective]:
    """The ``custom<E>($prop)`` directive of enum ``E`` (named as the enum)."""
    cls = type(enum.__name__, (_EnumDirective,), {
        "__annotations__": {"attr": AttributeVariable}, "enum": enum, "__module__": __name__})
    return irdl_custom_directive(cls)


ENUM_DIRECTIVES = {e: enum_directive(e) for e in (
    CacheModifier, EvictionPolicy, MemSemantic, MemSyncScope, RMWOp, ProgramIDDim, RoundingMode,
    PropagateNan, InputPrecision, ScaleDotElemType, DescriptorReduceKind)}


def enums(*names: type[_TTEnum]) -> tuple[type[CustomDirective], ...]:
    return tuple(ENUM_DIRECTIVES[e] for e in names)


@irdl_custom_directive
class CacheEvict(CustomDirective):
    """``oilist(`cacheModifier` `=` $cache | `evictionPolicy` `=` $evict)``: each clause
    optional (printed when not the default), in either order."""

    cache: AttributeVariable
    evict: AttributeVariable

    def parse(self, parser: Parser, state: ParsingState) -> None:
        seen = set()
        while True:
            for kw, var, enum in (("cacheModifier", self.cache, CacheModifier),
                                  ("evictionPolicy", self.evict, EvictionPolicy)):
                if kw not in seen and parser.parse_optional_keyword(kw) is not None:
                    parser.parse_punctuation("=")
                    var.set(state, _parse_keyword(parser, enum))
                    seen.add(kw)
                    break
            else:
                return

    def print(self, printer: Printer, state: PrintingState, op) -> None:
        for kw, var, enum in (("cacheModifier", self.cache, CacheModifier),
                              ("evictionPolicy", self.evict, EvictionPolicy)):
            if var.is_present(op):
                state.print_whitespace(printer)
                printer.print_string(f"{kw} = {enum(var.get(op).value.data).keyword}")

    def can_parse_empty(self) -> bool:
        return True


# ----- tt types without their prefix ----------------------------------------------------------


def parse_stripped(parser: Parser, cls: type):
    """A ``cls`` type (``PointerType``, ``TensorDescType``) read without its prefix, or any
    type in full; also what the hand-written formats (``tt.make_tensor_ptr``) use."""
    if parser._current_token.text == "<":  # noqa: SLF001 - the stripped form starts with '<'
        return cls(*cls.parse_parameters(parser))
    return parser.parse_type()


def print_stripped(printer: Printer, t, cls: type) -> None:
    """``t`` without its prefix when it is a ``cls`` type, in full otherwise."""
    if isinstance(t, cls):
        t.print_parameters(printer)
    else:
        printer.print_attribute(t)


class _StrippedType(CustomDirective):
    """``custom<PtrType>(type($x))``: ``<pointee>`` for ``!tt.ptr<pointee>`` (any other type is
    printed and read in full)."""

    type_cls: type
    type: TypeDirective

    def parse(self, parser: Parser, state: ParsingState) -> None:
        self.type.set(state, (parse_stripped(parser, self.type_cls),))

    def print(self, printer: Printer, state: PrintingState, op) -> None:
        state.print_whitespace(printer)
        (t,) = self.type.get(op)
        print_stripped(printer, t, self.type_cls)


PtrType = irdl_custom_directive(type("PtrType", (_StrippedType,), {
    "__annotations__": {"type": TypeDirective}, "type_cls": PointerType, "__module__": __name__}))
DescType = irdl_custom_directive(type("DescType", (_StrippedType,), {
    "__annotations__": {"type": TypeDirective}, "type_cls": TensorDescType, "__module__": __name__}))
