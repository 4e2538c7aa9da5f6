"""MLIR locations in TTIR text: read fast, and resolved to kernel source for error messages.

Locations are a third of the tokens Triton prints for a TTIR module, so the bridge reads the
forms Triton emits with a small reader of its own (:class:`LocationReader`) rather than xDSL's
general location parser.  MLIR prints location aliases *after* the module and allows forward
references to them; xDSL's parser needs an alias defined before its first use, so the bridge
either reads every ``#locN = loc(...)`` definition up front (:func:`extract_location_aliases`)
or, when one is beyond the fast reader, moves the trailing definitions to the head of the text
(:func:`hoist_trailing_aliases`).  Both keep the line numbers of ops those of Triton's text.

For error messages, :func:`source_of_line` finds the kernel source position (``file:line:col``)
of the op at a text offset, and :func:`source_location` the one of a location attribute.
"""

from __future__ import annotations

import re

from xdsl.dialects.builtin import (
    CallSiteLoc,
    FileLineColLoc,
    FusedLoc,
    IntAttr,
    NameLoc,
    NoneAttr,
    StringAttr,
    UnknownLoc,
)
from xdsl.ir import Attribute

__all__ = [
    "ALIAS_DEF", "LocationReader", "alias_table", "extract_location_aliases",
    "hoist_trailing_aliases", "source_location", "source_of_line",
]

#: an alias definition line of MLIR's text (``#name = ...``)
ALIAS_DEF = re.compile(r"^#([A-Za-z_][\w$.]*)\s*=\s*(.*)$")


def hoist_trailing_aliases(text: str) -> str:
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
        if ln.startswith("#") and ALIAS_DEF.match(ln):
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


class LocationReader:
    """A fast reader for the location expressions Triton prints (``unknown``,
    ``"file":L:C``, ``"name"(loc)``, ``callsite(loc at loc)``, ``#alias``).  Returns ``None``
    for anything else (fused locations, escaped strings), and the caller falls back on xDSL's
    own location parser.  Locations are a third of TTIR's tokens; this keeps the bridge fast."""

    def __init__(self, aliases: dict[str, Attribute]):
        self.aliases = aliases
        self._strings: dict[str, object] = {}
        self._flc: dict[tuple, Attribute] = {}

    def _str(self, s: str):
        a = self._strings.get(s)
        if a is None:
            a = self._strings[s] = StringAttr(s)
        return a

    def read(self, text: str, pos: int):
        """(location, end) for the expression at ``pos``, or None."""
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
                    a = self._flc[key] = FileLineColLoc(self._str(name), IntAttr(int(key[1])),
                                                        IntAttr(int(key[2])))
                return a, m2.end()
            if text.startswith("(", end):
                inner = self.read_parenthesized(text, end)
                return None if inner is None else (NameLoc(self._str(name), inner[0]), inner[1])
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

    def read_parenthesized(self, text: str, pos: int):
        """(location, end) for ``( expression )`` at ``pos`` (right after the ``loc`` keyword),
        or None."""
        o = _LOC_OPEN.match(text, pos)
        if o is None:
            return None
        r = self.read(text, o.end())
        if r is None:
            return None
        close = _LOC_CLOSE.match(text, r[1])
        if close is None:
            return None
        return r[0], close.end()


def extract_location_aliases(text: str) -> tuple[str, dict[str, Attribute]] | None:
    """Read every ``#locN = loc(...)`` definition with :class:`LocationReader` and blank
    their lines (line numbers of ops stay those of Triton's text).  ``None`` when some
    definition is beyond the fast reader (then the text is parsed by xDSL as it is)."""
    aliases: dict[str, Attribute] = {}
    reader = LocationReader(aliases)
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


# ------------------------------------------------------------------ kernel source positions

_FLC = re.compile(r'"((?:[^"\\]|\\.)*)":(\d+):(\d+)')


def alias_table(text: str) -> dict[str, str]:
    """``#name`` -> the text of its definition, for every alias defined in ``text``."""
    table = {}
    for ln in text.split("\n"):
        m = ALIAS_DEF.match(ln)
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


def source_of_line(text: str, offset: int, table: dict[str, str]) -> str | None:
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


def source_location(loc: Attribute | None, caller_first: bool = False) -> str | None:
    """``file:line:col`` of a location attribute (through name, fused and call-site
    locations: of an inlined call the callee's position, or with ``caller_first`` the call's,
    the kernel line the passes' messages name)."""
    if isinstance(loc, FileLineColLoc):
        return f"{loc.filename.data}:{loc.line.data}:{loc.column.data}"
    if isinstance(loc, NameLoc):
        subs = [loc.location]
    elif isinstance(loc, CallSiteLoc):
        subs = [loc.caller, loc.callee] if caller_first else [loc.callee, loc.caller]
    elif isinstance(loc, FusedLoc):
        subs = loc.locations.data
    else:
        return None
    return next(filter(None, (source_location(sub, caller_first) for sub in subs)), None)
