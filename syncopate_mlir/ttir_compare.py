"""Comparing TTIR texts: two printings of the same IR, whatever their alias numbering and value
names.

:func:`normalize_ttir` expands ``#loc`` aliases inline and renames SSA values in order of
appearance, so the round-trip tests can compare what Triton prints with what the bridge
prints after a trip through xDSL.
"""

from __future__ import annotations

import re

from .locations import ALIAS_DEF

__all__ = ["normalize_ttir"]

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
        m = ALIAS_DEF.match(ln)
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
