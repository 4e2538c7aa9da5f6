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

Modules
-------
This module is the bridge's interface and the trip through Triton; the parts live beside it:
:mod:`~syncopate_mlir.ttir_parser` (text -> xDSL), :mod:`~syncopate_mlir.locations` (reading
and resolving locations), :mod:`~syncopate_mlir.ttir_printer` (xDSL -> text) and
:mod:`~syncopate_mlir.ttir_compare` (comparing two printings of the same IR).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from syncopate.errors import CompileError

from .locations import source_location
from .ttir_compare import normalize_ttir
from .ttir_parser import default_context, parse_ttir_text
from .ttir_printer import TTIRPrinter, has_known_locations, xdsl_to_text

__all__ = [
    "ttir_to_xdsl", "xdsl_to_text", "xdsl_to_ttir", "parse_ttir_text", "default_context",
    "TTIRPrinter", "source_location", "text_to_ttir", "normalize_ttir", "has_known_locations",
]


# =============================================================================================
# Triton -> xDSL
# =============================================================================================

def _module_text(triton_module_or_text) -> tuple[str, str]:
    if isinstance(triton_module_or_text, str):
        return triton_module_or_text, "ttir"
    try:
        name = f"{triton_module_or_text.get_entry_func_name()}.ttir"
    except Exception:  # noqa: BLE001 - a module without an entry function
        name = "ttir"
    return triton_module_or_text.str(), name


def ttir_to_xdsl(triton_module_or_text, ctx: Context | None = None, *,
                 verify: bool = True) -> ModuleOp:
    """A Triton TTIR module (``triton._C.libtriton.ir.module``) or its printed text -> an xDSL
    ``ModuleOp`` with locations.  ``verify`` runs the xDSL verifiers of the mirror."""
    text, name = _module_text(triton_module_or_text)
    module = parse_ttir_text(text, ctx, name)
    if verify:
        try:
            module.verify()
        except Exception as e:  # VerifyException and DiagnosticException
            raise CompileError(
                f"TTIR read from Triton does not verify in the tt mirror: {e}") from None
    return module


# =============================================================================================
# xDSL -> Triton
# =============================================================================================

class _StderrCapture:
    """Capture what C++ writes to file descriptor 2 (MLIR diagnostics) while parsing."""

    def __enter__(self):
        self._tmp = tempfile.TemporaryFile(mode="w+b")
        try:
            sys.stderr.flush()  # what Python buffered goes out before the capture
        except (AttributeError, ValueError):  # no stderr, or a closed one
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

    prefix = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(name)) + "-"
    with tempfile.NamedTemporaryFile("w", suffix=".ttir", prefix=prefix, delete=False) as f:
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
            raise CompileError(f"Triton could not {what} the TTIR printed from xDSL: "
                               f"{err or ''}\n{diag}".rstrip())
        # Triton keeps a handle on the context, not on the file.
        mod.context = context
        return mod
    finally:
        os.unlink(path)


def xdsl_to_ttir(module: ModuleOp, context, *, name: str = "syncopate"):
    """An xDSL module -> a verified Triton ``ir.module`` in Triton's MLIR ``context`` (the one
    the compile uses: dialects loaded with ``ir.load_dialects`` and the backend's)."""
    return text_to_ttir(xdsl_to_text(module), context, name=name)
