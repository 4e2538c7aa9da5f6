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
Everything Triton emits at the TTIR stage survives, so profilers still map instructions to
kernel source lines (the corpus test checks that the PTX ``.loc`` lines of a round-tripped
compile are those of an ordinary one).  Not kept, and why:

* the locations of the entry-block arguments of ``scf.for`` / ``scf.while`` regions (induction
  variables, ``iter_args``): MLIR's custom printers of these ops do not print them, so no text
  round trip keeps them, Triton's own included.  Triton derives SSA names from them
  (``%k``), so after a round trip such values print as ``%argN``; no instruction carries
  them, so line tables are unaffected.
* ``FusedLoc`` metadata (``fused<#attr>[...]``), which xDSL's location parser does not read;
  Triton 3.6 does not emit fused locations in TTIR.

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


_WS = re.compile(r"\s*")
_LOC_STRING = re.compile(r'"([^"\\]*)"')
_LOC_INT3 = re.compile(r"\s*:\s*(\d+)\s*:\s*(\d+)")
_LOC_ALIAS = re.compile(r"#([\w$.]+)")
_LOC_OPEN = re.compile(r"\s*\(\s*")
_LOC_CLOSE = re.compile(r"\s*\)")
_LOC_AT = re.compile(r"\s+at\s+")
_LOC_ALIAS_DEF = re.compile(r"^#(loc[\w$.]*)\s*=\s*loc\((.*)\)\s*$")


class _LocationReader:
    """A fast reader for the location expressions Triton prints (``unknown``,
    ``"file":L:C``, ``"name"(loc)``, ``callsite(loc at loc)``, ``#alias``).  Returns ``None``
    for anything else (fused locations, escaped strings), and the caller falls back on xDSL's
    own location parser.  Locations are a third of TTIR's tokens; this keeps the bridge fast."""

    def __init__(self, aliases: dict[str, Attribute]):
        self.aliases = aliases
        self._strings: dict[str, object] = {}
        self._flc: dict[tuple, Attribute] = {}

    def _str(self, s: str):
        from xdsl.dialects.builtin import StringAttr
        a = self._strings.get(s)
        if a is None:
            a = self._strings[s] = StringAttr(s)
        return a

    def read(self, text: str, pos: int):
        """(location, end) for the expression at ``pos``, or None."""
        from xdsl.dialects.builtin import IntAttr, NoneAttr
        if text.startswith("unknown", pos):
            return UnknownLoc(), pos + 7
        c = text[pos:pos + 1]
        if c == "#":
            m = _LOC_ALIAS.match(text, pos)
            a = self.aliases.get("#" + m.group(1)) if m else None
            return (a, m.end()) if a is not None else None
        if c == '"':
            m = _LOC_STRING.match(text, pos)
            if m is None:
                return None
            name, end = m.group(1), m.end()
            m2 = _LOC_INT3.match(text, end)
            if m2 is not None:
                key = (name, m2.group(1), m2.group(2))
                a = self._flc.get(key)
                if a is None:
                    a = self._flc[key] = FileLineColLoc(self._str(name), IntAttr(int(key[1])), IntAttr(int(key[2])))
                return a, m2.end()
            if text.startswith("(", end):
                inner = self.read(text, _WS.match(text, end + 1).end())
                if inner is None:
                    return None
                close = _LOC_CLOSE.match(text, inner[1])
                if close is None:
                    return None
                return NameLoc(self._str(name), inner[0]), close.end()
            return NameLoc(self._str(name), NoneAttr()), end
        if text.startswith("callsite", pos):
            o = _LOC_OPEN.match(text, pos + 8)
            if o is None:
                return None
            callee = self.read(text, o.end())
            if callee is None:
                return None
            at = _LOC_AT.match(text, callee[1])
            if at is None:
                return None
            caller = self.read(text, at.end())
            if caller is None:
                return None
            close = _LOC_CLOSE.match(text, caller[1])
            if close is None:
                return None
            return CallSiteLoc(callee[0], caller[0]), close.end()
        return None


def _extract_location_aliases(text: str) -> tuple[str, dict[str, Attribute]] | None:
    """Read every ``#locN = loc(...)`` definition with :class:`_LocationReader` and blank
    their lines (line numbers of ops stay those of Triton's text).  ``None`` when some
    definition is beyond the fast reader (then the text is parsed by xDSL as it is)."""
    aliases: dict[str, Attribute] = {}
    reader = _LocationReader(aliases)
    lines = text.split("\n")
    pending: list[tuple[int, str, str]] = []
    for i, ln in enumerate(lines):
        if ln.startswith("#loc"):
            m = _LOC_ALIAS_DEF.match(ln)
            if m is None:
                return None
            pending.append((i, m.group(1), m.group(2)))
    # MLIR prints definitions after the ones they use; resolve in any order anyway
    while pending:
        rest = []
        for i, name, expr in pending:
            r = reader.read(expr, _WS.match(expr).end())
            if r is None or expr[r[1]:].strip():
                rest.append((i, name, expr))
                continue
            aliases["#" + name] = r[0]
            lines[i] = ""
        if len(rest) == len(pending):
            return None
        pending = rest
    return "\n".join(lines), aliases


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

    _loc_reader: _LocationReader | None = None

    def parse_optional_location(self):
        tok = self._current_token
        if self._loc_reader is not None and tok.text == "loc":
            text = self.lexer.input.content
            o = _LOC_OPEN.match(text, tok.span.end)
            if o is not None:
                r = self._loc_reader.read(text, o.end())
                if r is not None:
                    close = _LOC_CLOSE.match(text, r[1])
                    if close is not None:
                        self._resume_from(close.end())
                        return r[0]
        return super().parse_optional_location()

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


def _source_of_line(text: str, offset: int, table: dict[str, str]) -> str | None:
    """The source location of the op starting at ``offset``: the ``loc(...)`` at the end of
    its line, or (for an op with regions) of the line that closes it."""
    start = text.rfind("\n", 0, offset) + 1
    indent = len(text[start:offset]) - len(text[start:offset].lstrip())
    lines = text[start:].split("\n")
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
    fast = _extract_location_aliases(text)
    if fast is not None:
        prepared, aliases = fast
        parser = _TTIRParser(ctx, prepared, name)
        parser.attribute_aliases.update(aliases)
        parser._loc_reader = _LocationReader(aliases)
    else:
        prepared = _hoist_trailing_aliases(text)
        parser = _TTIRParser(ctx, prepared, name)
    try:
        module = parser.parse_module()
    except _UnknownOp as e:
        line, col = _line_col(prepared, e.offset)
        src = _source_of_line(prepared, e.offset, _alias_table(text))
        where = f" (kernel source {src})" if src else ""
        if e.name.startswith("tt."):
            fix = ("the tt mirror dialect (syncopate_mlir/dialects/tt/) does not define it; add it "
                   "there with Triton's ODS properties and syntax")
        else:
            fix = ("no dialect of the mirror context (syncopate_mlir/context.py: builtin, arith, scf, "
                   "math, cf, ub, gpu, llvm, tt, syncopate) defines it; add the op (or an xDSL "
                   "override, see OVERRIDE_OPS in syncopate_mlir/dialects/tt/__init__.py)")
        raise UnknownOpError(f"unknown op '{e.name}'{where}: {fix}", location=f"{name}:{line}:{col}") from None
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
    """xDSL's printer with MLIR's spelling of the builtin module (``module {``) and MLIR's
    placement of locations: after every op (custom or generic form), block argument and
    function argument.  Unknown locations are printed too (``loc(unknown)``): MLIR gives an op
    without a location the position of its text, not an unknown location.  With
    ``alias_locations`` they print as ``loc(#locN)`` and :meth:`print_location_aliases` writes
    the ``#locN = loc(...)`` definitions (after the module, as MLIR does)."""

    def __init__(self, stream=None, *, locations: bool = True, alias_locations: bool = True, **kw):
        super().__init__(stream, print_debuginfo=False, **kw)
        self.locations = locations
        self.alias_locations = alias_locations
        self._loc_aliases: dict[Attribute, str] = {}

    # ----- locations ---------------------------------------------------------------------------

    def print_optional_location(self, loc: Attribute | None) -> None:
        """`` loc(...)`` for a known location when locations are on; nothing otherwise."""
        if not self.locations or loc is None:
            return
        self.print_string(" ")
        if self.alias_locations:
            alias = self._loc_aliases.get(loc)
            if alias is None:
                n = len(self._loc_aliases)
                alias = "loc" if n == 0 else f"loc{n}"
                self._loc_aliases[loc] = alias
            self.print_string(f"loc(#{alias})")
        else:
            self.print_attribute(loc)

    def print_location_aliases(self) -> None:
        if not self._loc_aliases:
            return
        plain = Printer(self.stream, print_debuginfo=True)
        for loc, alias in self._loc_aliases.items():
            plain.print_string(f"\n#{alias} = ")
            plain.print_attribute(loc)

    def print_attribute(self, attribute: Attribute) -> None:
        from xdsl.dialects.builtin import DenseIntOrFPElementsAttr
        if isinstance(attribute, DenseIntOrFPElementsAttr) and len(attribute) > 1:
            raw = attribute.data.data
            size = len(raw) // len(attribute)
            first = raw[:size]
            # a splat of NaN (NaN != NaN defeats xDSL's splat test): MLIR prints dense<0x7FC00000>
            if size and raw == first * len(attribute) and not attribute.is_splat():
                self.print_string("dense<")
                attribute._print_one_elem(attribute.get_values()[0], self)
                self.print_string("> : ")
                self.print_attribute(attribute.get_type())
                return
        super().print_attribute(attribute)

    def print_float(self, value: float, type) -> None:
        # MLIR spells non-finite floats as upper-case hex bit patterns (0xFF800000)
        if value != value or value in (float("inf"), float("-inf")):
            raw = type.pack((value,))
            self.print_string(f"0x{raw[::-1].hex().upper()}")
            return
        super().print_float(value, type)

    # ----- ops and arguments -------------------------------------------------------------------

    def _print_results(self, op: Operation) -> None:
        """MLIR's result groups: ``%name:3 = ...`` and uses ``%name#1`` (xDSL prints
        ``%a, %b, %c = ...``, which MLIR reads too, but which is not how Triton prints)."""
        results = op.results
        if len(results) <= 1 or any(r in self._ssa_values for r in results):
            return super()._print_results(op)
        asm_names = getattr(type(op), "ASM_RESULT_NAMES", None)
        if asm_names:  # ops that name their results (tt.split: %outLHS, %outRHS)
            names = [self._alloc_name(r.name_hint or n) for r, n in zip(results, asm_names)]
            for r, n in zip(results, names):
                self._ssa_values[r] = n
            self.print_string(", ".join(f"%{n}" for n in names) + " = ")
            return
        name = self._alloc_name(results[0].name_hint)
        for i, r in enumerate(results):
            self._ssa_values[r] = f"{name}#{i}"
        self.print_string(f"%{name}:{len(results)} = ")

    def _alloc_name(self, hint: str | None) -> str:
        if not hint:
            return self._get_new_valid_name_id()
        idx = self.ssa_names.get(hint, 0)
        self.ssa_names[hint] = idx + 1
        return hint + (f"_{idx}" if idx else "")

    def print_op(self, op: Operation) -> None:
        if isinstance(op, ModuleOp) and not self.print_generic_format:
            self.print_string("module")
            op.print(self)
        else:
            super().print_op(op)
        self.print_optional_location(op.location)

    def print_block_argument(self, arg, print_type: bool = True) -> None:
        super().print_block_argument(arg, print_type)
        if print_type:
            self.print_optional_location(arg.location)


def has_known_locations(module: Operation) -> bool:
    """Whether any op or argument in ``module`` has a location other than ``unknown``."""
    for op in module.walk():
        if not isinstance(op.location, UnknownLoc):
            return True
        for r in op.regions:
            for b in r.blocks:
                if any(not isinstance(a.location, UnknownLoc) for a in b.args):
                    return True
    return False


def xdsl_to_text(module: Operation, *, locations: bool | None = True, alias_locations: bool = True,
                 generic: bool = False) -> str:
    """Print an xDSL module in Triton's custom syntax.

    ``locations``: print ``loc(...)`` for every op and argument (needed for a faithful round
    trip: the text for Triton always has them); ``None`` prints them only when the module
    has some known location (hand-written lit inputs print without).  ``alias_locations``:
    as ``#loc`` aliases defined after the module (MLIR's style) rather than inline;
    ``generic``: MLIR's generic op form (properties in ``<{...}>``)."""
    if locations is None:
        locations = has_known_locations(module)
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

    with tempfile.NamedTemporaryFile("w", suffix=".ttir", prefix=f"{re.sub(r'[^A-Za-z0-9_.-]', '_', os.path.basename(name))}-",
                                     delete=False) as f:
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
_BLOCK_COMMENT = re.compile(r"^\s*\^[\w$.-]+(\(.*\))?:\s*//")
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
        if _BLOCK_COMMENT.match(ln):  # MLIR's "^bb1:  // pred: ^bb0"
            ln = ln[:ln.index("//")]
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


_STRING_LIT = re.compile(r'"(?:[^"\\]|\\.)*"')
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
        strings = [(m.start(), m.end()) for m in _STRING_LIT.finditer(line)]
        m = _RESULTS.match(line)
        res_end = m.end(1) if m else -1
        pieces, last = [], 0
        for tok in _SSA_NAME.finditer(line):
            if any(a <= tok.start() < b for a, b in strings):
                continue  # inside a string literal (inline asm: "mov.u32 $0, %clock;")
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
