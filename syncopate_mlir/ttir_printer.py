"""xDSL -> TTIR text: xDSL's printer with MLIR's spelling, so Triton reads the result back.

:func:`xdsl_to_text` prints a module in Triton's custom syntax; :class:`TTIRPrinter` is xDSL's
printer with what MLIR does differently: ``module {`` for the builtin module, a location after
every op, block argument and function argument (as ``#loc`` aliases defined after the module),
result groups (``%name:3 = ...``), splats of NaN and non-finite floats as hex bit patterns.
"""

from __future__ import annotations

import io

from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, UnknownLoc
from xdsl.ir import Attribute, Operation
from xdsl.printer import Printer

__all__ = ["TTIRPrinter", "has_known_locations", "xdsl_to_text"]


class TTIRPrinter(Printer):
    """xDSL's printer with MLIR's spelling of the builtin module (``module {``) and MLIR's
    placement of locations: after every op (custom or generic form), block argument and
    function argument.  Unknown locations are printed too (``loc(unknown)``): MLIR gives an op
    without a location the position of its text, not an unknown location.  With
    ``alias_locations`` they print as ``loc(#locN)`` and :meth:`print_location_aliases` writes
    the ``#locN = loc(...)`` definitions (after the module, as MLIR does)."""

    def __init__(self, stream=None, *, locations: bool = True, alias_locations: bool = True,
                 **kw):
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


def xdsl_to_text(module: Operation, *, locations: bool | None = True,
                 alias_locations: bool = True, generic: bool = False) -> str:
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
