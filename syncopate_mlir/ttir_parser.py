"""TTIR text -> xDSL: xDSL's parser, adapted to what Triton prints.

:func:`parse_ttir_text` reads a printed TTIR module into an xDSL ``ModuleOp`` of the ``tt``
mirror, locations included.  What it adds to xDSL's own parser (:class:`_TTIRParser`):

* locations read by the fast reader of :mod:`syncopate_mlir.locations`, and MLIR's trailing
  ``#loc`` alias definitions made readable (xDSL needs an alias defined before its use);
* hexadecimal elements of dense float literals read as bit patterns, as MLIR does
  (``dense<0xFF800000> : tensor<4xf32>`` is -inf);
* typed errors: an operand type an op's IRDL constraints refuse while its custom syntax is
  read names the op and the position; an op the mirror does not know raises
  :class:`~syncopate.errors.UnknownOpError` with the op's name, its position in the text and
  its kernel source location; any other parse failure a
  :class:`~syncopate.errors.CompileError` with the position.  The parsing context refuses
  unregistered ops, so nothing passes through silently.
"""

from __future__ import annotations

import functools

from xdsl.context import Context
from xdsl.dialects.builtin import AnyFloat, ModuleOp
from xdsl.parser import Parser
from xdsl.utils.exceptions import ParseError, VerifyException

from syncopate.errors import CompileError, UnknownOpError

from .context import make_context
from .locations import (
    LocationReader,
    alias_table,
    extract_location_aliases,
    hoist_trailing_aliases,
    source_of_line,
)

__all__ = ["default_context", "parse_ttir_text"]

@functools.cache
def default_context() -> Context:
    """A shared xDSL context for the bridge (parsing does not mutate it)."""
    return make_context()


class _HexLiteral(Parser._TensorLiteralElement):
    """A hexadecimal element of a dense literal: for a float element type MLIR reads it as the
    bit pattern (``dense<0xFF800000> : tensor<4xf32>`` is -inf), xDSL as an integer value."""

    def to_type(self, parser, type):
        if isinstance(type, AnyFloat) and isinstance(self.value, int):
            raw = int(self.value).to_bytes(type.compile_time_size, "little")
            return next(type.iter_unpack(raw))
        return super().to_type(parser, type)


class _TTIRParser(Parser):
    """xDSL's parser, reporting unknown ops with the op's name and text position, and reading
    hexadecimal float elements of dense literals as MLIR does."""

    _loc_reader: LocationReader | None = None
    _op_name = ""

    def parse_operation(self):
        # an operand type refused by an op's IRDL constraint while its custom format is read is
        # a VerifyException without a position or op name: give it both
        start = self._current_token.span.start
        try:
            return super().parse_operation()
        except VerifyException as e:
            self.raise_error(f"'{self._op_name}': {e}", start, self._current_token.span.start)

    def parse_optional_location(self):
        tok = self._current_token
        if self._loc_reader is not None and tok.text == "loc":
            r = self._loc_reader.read_parenthesized(self.lexer.input.content, tok.span.end)
            if r is not None:
                self._resume_from(r[1])
                return r[0]
        return super().parse_optional_location()

    def _parse_tensor_literal_element(self):
        hexa = self._current_token.text[:2] in ("0x", "0X")
        elem = super()._parse_tensor_literal_element()
        if hexa:
            return _HexLiteral(elem.is_negative, elem.value, elem.span)
        return elem

    def _get_op_by_name(self, name: str):
        self._op_name = name
        op_type = self.ctx.get_optional_op(name, dialect_stack=self._parser_state.dialect_stack)
        if op_type is not None:
            return op_type
        here = self._current_token.span.start
        text = self.lexer.input.content
        at = text.rfind(name, 0, here)
        raise _UnknownOp(name, at if at >= 0 else here)


class _UnknownOp(Exception):
    def __init__(self, name: str, offset: int):
        self.name, self.offset = name, offset


def _line_col(text: str, offset: int) -> tuple[int, int]:
    line = text.count("\n", 0, offset) + 1
    col = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return line, col


def parse_ttir_text(text: str, ctx: Context | None = None, name: str = "ttir") -> ModuleOp:
    """Parse TTIR text (as Triton prints it) into an xDSL module of the ``tt`` mirror.

    Raises :class:`UnknownOpError` for an op the mirror does not know and
    :class:`CompileError` for any other syntax the mirror cannot read."""
    ctx = ctx or default_context()
    fast = extract_location_aliases(text)
    if fast is not None:
        prepared, aliases = fast
        parser = _TTIRParser(ctx, prepared, name)
        parser.attribute_aliases.update(aliases)
        parser._loc_reader = LocationReader(aliases)
    else:
        prepared = hoist_trailing_aliases(text)
        parser = _TTIRParser(ctx, prepared, name)
    try:
        module = parser.parse_module()  # (a module around any top-level ops)
    except _UnknownOp as e:
        line, col = _line_col(prepared, e.offset)
        src = source_of_line(prepared, e.offset, alias_table(text))
        where = f" (kernel source {src})" if src else ""
        if e.name.startswith("tt."):
            fix = ("the tt mirror dialect (syncopate_mlir/dialects/tt/) does not define it; add "
                   "it there with Triton's ODS properties and syntax")
        else:
            fix = ("no dialect of the mirror context (syncopate_mlir/context.py: builtin, arith, "
                   "scf, math, cf, ub, gpu, llvm, tt, syncopate) defines it; add the op (or an "
                   "xDSL override, see OVERRIDE_OPS in syncopate_mlir/dialects/tt/__init__.py)")
        raise UnknownOpError(f"unknown op '{e.name}'{where}: {fix}",
                             location=f"{name}:{line}:{col}") from None
    except ParseError as e:
        loc = e.span.get_location()
        raise CompileError(f"cannot read TTIR: {e.msg}\n{e}",
                           location=f"{name}:{loc.line}:{loc.col}") from None
    return module
