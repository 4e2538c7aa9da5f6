"""Triton TTIR <-> xDSL, through text, in the MLIR context of the Triton compile.

* :func:`ttir_to_xdsl` reads what Triton prints for a TTIR module (``mod.str()``, debug info
  included) into an xDSL ``ModuleOp`` of the ``tt`` mirror dialect, locations included.
* :func:`xdsl_to_text` prints an xDSL module in Triton's custom syntax, with locations (as
  ``#loc`` aliases, the way MLIR prints them).
* :func:`xdsl_to_ttir` parses that text back into a Triton ``ir.module`` in a given Triton
  MLIR context and verifies it.

Locations
---------
Every op, block argument and function argument keeps its location through the round trip:
``FileLineColLoc`` (``"kernel.py":12:8``), ``NameLoc`` (``"acc"(...)``: Triton names values
after the Python variable and prints ``%acc``), ``CallSiteLoc`` (inlined functions) and
``UnknownLoc``.  MLIR prints location aliases *after* the module and allows forward references
to them; xDSL's parser needs an alias defined before its first use, so :func:`ttir_to_xdsl`
moves the trailing alias definitions to the head of the text first, on the same line as the
last leading alias (so line numbers of ops in error messages are those of Triton's text).
Not kept: ``FusedLoc`` metadata (``fused<#attr>[...]``), which xDSL's location parser does not
read; Triton 3.6 does not emit it in TTIR.  Everything Triton emits at the TTIR stage survives,
so profilers still map instructions to kernel source lines.

Errors
------
An op the mirror does not know raises :class:`syncopate.errors.UnknownOpError` naming the op
and its position in the TTIR text (``name:line:col``) and, when the op carries one, its source
location.  Any other parse failure raises :class:`syncopate.errors.CompileError` with the
position.  Nothing is passed through silently: the parsing context refuses unregistered ops.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Iterable

from xdsl.context import Context
from xdsl.dialects.builtin import (
    CallSiteLoc,
    FileLineColLoc,
    FusedLoc,
    ModuleOp,
    NameLoc,
    UnknownLoc,
)
from xdsl.ir import Attribute, Operation
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError

try:  # the typed errors live in the user-facing package
    from syncopate.errors import CompileError, UnknownOpError
except ImportError:  # pragma: no cover - only when syncopate is not importable
    class CompileError(Exception):  # type: ignore[no-redef]
        def __init__(self, message, location=None):
            self.location, self.message = location, message
            super().__init__(f"{location}: {message}" if location else message)

    class UnknownOpError(CompileError):  # type: ignore[no-redef]
        pass

from .context import make_context

__all__ = [
    "ttir_to_xdsl", "xdsl_to_text", "xdsl_to_ttir", "parse_ttir_text", "default_context",
    "TTIRPrinter", "source_location",
]

_LOCATION_TYPES = (UnknownLoc, FileLineColLoc, NameLoc, CallSiteLoc, FusedLoc)

_default_ctx: Context | None = None


def default_context() -> Context:
    """A shared xDSL context for the bridge (parsing does not mutate it)."""
    global _default_ctx
    if _default_ctx is None:
        _default_ctx = make_context()
    return _default_ctx


# =============================================================================================
# Triton -> xDSL
# =============================================================================================

_ALIAS_DEF = re.compile(r"^#([A-Za-z_][\w$.]*)\s*=\s*(.*)$")


def _hoist_trailing_aliases(text: str) -> str:
    """Move alias definitions printed after the module to before it, keeping line numbers.

    MLIR prints location aliases that ops use after the top-level op; their definitions may
    refer to earlier aliases only.  The hoisted definitions are joined onto the line of the
    last leading alias definition (or prepended to the first line), so the lines of all ops
    are unchanged."""
    lines = text.split("\n")
    # index of the first line of the top-level op
    first_op = next((i for i, ln in enumerate(lines) if ln and not ln.startswith("#")
                     and not ln.startswith("//") and ln.strip()), None)
    if first_op is None:
        return text
    trailing: list[str] = []
    for i in range(first_op + 1, len(lines)):
        ln = lines[i]
        if ln.startswith("#") and _ALIAS_DEF.match(ln):
            trailing.append(ln)
            lines[i] = ""
    if not trailing:
        return text
    joined = " ".join(trailing)
    leading = [i for i in range(first_op) if lines[i].startswith("#")]
    if leading:
        lines[leading[-1]] = lines[leading[-1]] + " " + joined
    else:
        lines[first_op] = joined + " " + lines[first_op]
    return "\n".join(lines)


class _HexLiteral(Parser._TensorLiteralElement):
    """A hexadecimal element of a dense literal: for a float element type MLIR reads it as the
    bit pattern (``dense<0xFF800000> : tensor<4xf32>`` is -inf), xDSL as an integer value."""

    def to_type(self, parser, type):
        from xdsl.dialects.builtin import AnyFloat
        if isinstance(type, AnyFloat) and isinstance(self.value, int):
            raw = int(self.value).to_bytes(type.compile_time_size, "little")
            return next(type.iter_unpack(raw))
        return super().to_type(parser, type)


class _TTIRParser(Parser):
    """xDSL's parser, reporting unknown ops with the op's name and text position, and reading
    hexadecimal float elements of dense literals as MLIR does."""

    def _parse_tensor_literal_element(self):
        hexa = self._current_token.text[:2] in ("0x", "0X")
        elem = super()._parse_tensor_literal_element()
        if hexa:
            return _HexLiteral(elem.is_negative, elem.value, elem.span)
        return elem

    def _get_op_by_name(self, name: str):
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


_FLC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def _alias_table(text: str) -> dict[str, str]:
    table = {}
    for ln in text.split("\n"):
        m = _ALIAS_DEF.match(ln)
        if m:
            table["#" + m.group(1)] = m.group(2)
    return table


def _resolve_source(expr: str, table: dict[str, str], depth: int = 0) -> str | None:
    """The first ``file:line:col`` a location expression (with ``#loc`` aliases) leads to."""
    if depth > 64:
        return None
    for tok in re.finditer(r'"(?:[^"\\]|\\.)*":\d+:\d+|#[A-Za-z_][\w$.]*', expr):
        t = tok.group(0)
        if t.startswith("#"):
            if t in table:
                r = _resolve_source(table[t], table, depth + 1)
                if r:
                    return r
        else:
            m = _FLC.match(t)
            return f"{m.group(1)}:{m.group(2)}:{m.group(3)}"
    return None


def _source_of_line(text: str, offset: int) -> str | None:
    """The source location of the op starting at ``offset``: the ``loc(...)`` at the end of
    its line, or (for an op with regions) of the line that closes it."""
    start = text.rfind("\n", 0, offset) + 1
    indent = len(text[start:offset]) - len(text[start:offset].lstrip())
    lines = text[start:].split("\n")
    table = _alias_table(text)
    candidates = [lines[0]]
    if lines[0].rstrip().endswith("{"):  # find the closing line at the same indentation
        for ln in lines[1:]:
            if ln.strip() and len(ln) - len(ln.lstrip()) == indent:
                candidates.insert(0, ln)
                break
    for ln in candidates:
        m = re.search(r"loc\((.*)\)\s*$", ln)
        if m:
            return _resolve_source(m.group(1), table)
    return None


def parse_ttir_text(text: str, ctx: Context | None = None, name: str = "ttir") -> ModuleOp:
    """Parse TTIR text (as Triton prints it) into an xDSL module of the ``tt`` mirror.

    Raises :class:`UnknownOpError` for an op the mirror does not know and
    :class:`CompileError` for any other syntax the mirror cannot read."""
    ctx = ctx or default_context()
    prepared = _hoist_trailing_aliases(text)
    parser = _TTIRParser(ctx, prepared, name)
    try:
        module = parser.parse_module()
    except _UnknownOp as e:
        line, col = _line_col(prepared, e.offset)
        src = _source_of_line(prepared, e.offset)
        where = f" (kernel source {src})" if src else ""
        raise UnknownOpError(
            f"unknown op '{e.name}'{where}: the tt mirror dialect (syncopate_mlir.dialects.tt) does "
            f"not define it; add it there with Triton's ODS properties and syntax",
            location=f"{name}:{line}:{col}") from None
    except ParseError as e:
        loc = e.span.get_location()
        raise CompileError(f"cannot read TTIR: {e.msg}\n{e}", location=f"{name}:{loc.line}:{loc.col}") from None
    if not isinstance(module, ModuleOp):  # pragma: no cover - parse_module always wraps
        module = ModuleOp([module])
    return module


def _module_text(triton_module_or_text) -> tuple[str, str]:
    if isinstance(triton_module_or_text, str):
        return triton_module_or_text, "ttir"
    mod = triton_module_or_text
    name = "ttir"
    try:
        name = f"{mod.get_entry_func_name()}.ttir"
    except Exception:  # noqa: BLE001 - a module without an entry function
        pass
    return mod.str(), name


def ttir_to_xdsl(triton_module_or_text, ctx: Context | None = None, *, verify: bool = True) -> ModuleOp:
    """A Triton TTIR module (``triton._C.libtriton.ir.module``) or its printed text -> an xDSL
    ``ModuleOp`` with locations.  ``verify`` runs the xDSL verifiers of the mirror."""
    text, name = _module_text(triton_module_or_text)
    module = parse_ttir_text(text, ctx, name)
    if verify:
        try:
            module.verify()
        except Exception as e:  # VerifyException and DiagnosticException
            raise CompileError(f"TTIR read from Triton does not verify in the tt mirror: {e}") from None
    return module


# =============================================================================================
# xDSL -> text
# =============================================================================================


class TTIRPrinter(Printer):
    """xDSL's printer, writing MLIR's spelling of the builtin module (``module {``) and, with
    ``alias_locations``, op and argument locations as ``loc(#locN)`` with the alias
    definitions after the module (call :meth:`print_location_aliases` at the end)."""

    def __init__(self, stream=None, *, locations: bool = True, alias_locations: bool = True, **kw):
        super().__init__(stream, print_debuginfo=locations, **kw)
        self.alias_locations = alias_locations
        self._loc_aliases: dict[Attribute, str] = {}
        self._custom_stack: list[bool] = []

    def print_attribute(self, attribute: Attribute) -> None:
        if (self.alias_locations and not self.printing_location and isinstance(attribute, _LOCATION_TYPES)
                and not isinstance(attribute, UnknownLoc)):
            alias = self._loc_aliases.get(attribute)
            if alias is None:
                n = len(self._loc_aliases)
                alias = "loc" if n == 0 else f"loc{n}"
                self._loc_aliases[attribute] = alias
            self.print_string(f"loc(#{alias})")
            return
        super().print_attribute(attribute)

    def print_operation_type(self, op: Operation) -> None:
        # xDSL's custom printers may call this in the middle of an op; the location belongs
        # after the op, where print_op puts it for custom formats.
        if self._custom_stack and self._custom_stack[-1]:
            self.print_function_type(op.operand_types, op.result_types)
            return
        super().print_operation_type(op)

    def print_op(self, op: Operation) -> None:
        custom = not self.print_generic_format and type(op).print is not Operation.print
        self._custom_stack.append(custom)
        try:
            self._print_op(op)
        finally:
            self._custom_stack.pop()

    def _print_op(self, op: Operation) -> None:
        if isinstance(op, ModuleOp) and not self.print_generic_format:
            self.print_string("module")
            op.print(self)
            if self.print_debuginfo:
                self.print_string(" ")
                self.print_attribute(op.location)
            return
        super().print_op(op)

    def print_location_aliases(self) -> None:
        if not self._loc_aliases:
            return
        plain = Printer(self.stream, print_debuginfo=True)
        for loc, alias in self._loc_aliases.items():
            plain.print_string(f"\n#{alias} = ")
            plain.print_attribute(loc)


def xdsl_to_text(module: Operation, *, locations: bool = True, alias_locations: bool = True,
                 generic: bool = False) -> str:
    """Print an xDSL module in Triton's custom syntax.

    ``locations``: print ``loc(...)`` for every op and argument (needed for a faithful round
    trip); ``alias_locations``: as ``#loc`` aliases defined after the module (MLIR's style)
    rather than inline; ``generic``: MLIR's generic op form (properties in ``<{...}>``)."""
    out = io.StringIO()
    p = TTIRPrinter(out, locations=locations, alias_locations=alias_locations and locations,
                    print_generic_format=generic)
    p.print_op(module)
    p.print_location_aliases()
    out.write("\n")
    return out.getvalue()


# =============================================================================================
# text -> Triton
# =============================================================================================


class _StderrCapture:
    """Capture what C++ writes to file descriptor 2 (MLIR diagnostics) while parsing."""

    def __enter__(self):
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        try:
            import sys
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
        self._saved = os.dup(2)
        os.dup2(self._tmp.fileno(), 2)
        return self

    def __exit__(self, *exc):
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        self.text = self._tmp.read().decode("utf-8", "replace")
        self._tmp.close()
        return False


def text_to_ttir(text: str, context, *, name: str = "syncopate") -> object:
    """Parse TTIR text into a Triton ``ir.module`` in ``context`` and verify it."""
    from triton._C.libtriton import ir

    with tempfile.NamedTemporaryFile("w", suffix=".ttir", prefix=f"{name}-", delete=False) as f:
        f.write(text)
        path = f.name
    try:
        with _StderrCapture() as cap:
            try:
                mod = ir.parse_mlir_module(path, context)
                ok = mod.verify()
            except Exception as e:  # noqa: BLE001 - Triton raises RuntimeError
                mod, ok, err = None, False, e
            else:
                err = None
        if mod is None or not ok:
            diag = cap.text.strip().replace(path, name)
            what = "parse" if mod is None else "verify"
            raise CompileError(f"Triton could not {what} the TTIR printed from xDSL: {err or ''}\n{diag}".rstrip())
        # Triton keeps a handle on the context, not on the file.
        mod.context = context
        return mod
    finally:
        os.unlink(path)


def xdsl_to_ttir(module: ModuleOp, context, *, name: str = "syncopate"):
    """An xDSL module -> a verified Triton ``ir.module`` in Triton's MLIR ``context`` (the one
    the compile uses: dialects loaded with ``ir.load_dialects`` and the backend's)."""
    return text_to_ttir(xdsl_to_text(module), context, name=name)


def source_location(loc: Attribute) -> str | None:
    """``file:line:col`` of a location attribute (through name and call-site locations)."""
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    if isinstance(loc, NameLoc):
        return source_location(loc.location)
    if isinstance(loc, CallSiteLoc):
        return source_location(loc.callee) or source_location(loc.caller)
    if isinstance(loc, FusedLoc):
        for sub in loc.locations.data:
            r = source_location(sub)
            if r:
                return r
    return None


def iter_ops(module: Operation) -> Iterable[Operation]:
    """All ops nested in ``module`` (pre-order)."""
    return module.walk()


# =============================================================================================
# Comparing TTIR texts
# =============================================================================================

_LOC_REF = re.compile(r"#loc[\w$.]*")
_SSA_NAME = re.compile(r"%[\w$.-]+")


def normalize_ttir(text: str, *, ssa_names: bool = True) -> str:
    """TTIR text with location aliases expanded inline and (``ssa_names``) SSA values renamed
    ``%v0, %v1, ...`` in order of appearance: two printings of the same IR by MLIR compare
    equal after this, whatever alias numbering and value names they used."""
    lines = text.split("\n")
    defs: dict[str, str] = {}
    body: list[str] = []
    for ln in lines:
        m = _ALIAS_DEF.match(ln)
        if m and m.group(1).startswith("loc"):
            expr = m.group(2).strip()
            if expr.startswith("loc(") and expr.endswith(")"):
                expr = expr[4:-1]
            defs["#" + m.group(1)] = expr
            continue
        body.append(ln.rstrip())
    cache: dict[str, str] = {}

    def expand(name: str, depth: int = 0) -> str:
        if name in cache:
            return cache[name]
        if name not in defs or depth > 200:
            return name
        out = _LOC_REF.sub(lambda m: expand(m.group(0), depth + 1), defs[name])
        cache[name] = out
        return out

    out = "\n".join(body)
    out = _LOC_REF.sub(lambda m: expand(m.group(0)), out)
    if ssa_names:
        out = _canonical_ssa_names(out)
    return out.strip() + "\n"


_RESULTS = re.compile(r"^\s*(%[\w$.-]+(?::\d+)?(?:\s*,\s*%[\w$.-]+(?::\d+)?)*)\s*=\s")
_ARG_DEF = re.compile(r"(?::(?!\d)| = )")  # `%x: T` (argument) or `%iv = %lb` (loop header)


def _canonical_ssa_names(text: str) -> str:
    """Rename SSA values ``%v0, %v1, ...``: each definition gets a fresh name (MLIR reuses
    names in sibling regions), each use the name of the latest definition.  Definitions are
    op results (``%a, %b:2 =`` at the head of a line), block and function arguments
    (``%x: T``) and the assignments of ``scf.for``/``scf.while`` headers (``%iv = %lb``)."""
    current: dict[str, str] = {}
    counter = [0]

    def fresh(name: str) -> str:
        v = f"%v{counter[0]}"
        counter[0] += 1
        current[name] = v
        return v

    out_lines = []
    for line in text.split("\n"):
        m = _RESULTS.match(line)
        res_end = m.end(1) if m else -1
        pieces, last = [], 0
        for tok in _SSA_NAME.finditer(line):
            name = tok.group(0)
            after = line[tok.end():tok.end() + 3]
            is_def = tok.start() < res_end or _ARG_DEF.match(after) is not None
            if is_def:
                new = fresh(name)
            else:
                new = current.get(name) or fresh(name)
            pieces.append(line[last:tok.start()])
            pieces.append(new)
            last = tok.end()
        pieces.append(line[last:])
        out_lines.append("".join(pieces))
    return "\n".join(out_lines)
