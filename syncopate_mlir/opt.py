"""``syncopate-opt``: an xDSL-opt style driver for TTIR and the syncopate passes.

    syncopate-opt FILE.mlir [-p pass1,pass2{opt=val}] [-o OUT]

Reads TTIR in Triton's syntax (``-`` or no file: stdin), runs the named passes (the pass
registry, and ``fuse``: the compile's whole pipeline for the module's request, as an xDSL
``PassPipeline`` from ``syncopate_mlir/pipeline.py``), and prints the module in Triton's
syntax.  With no passes this is the round trip through the ``tt`` mirror.  Diagnostics (unknown ops, parse and
verification errors, pass failures) go to stderr and the exit code is 1, so lit tests can check
them with ``not syncopate-opt %s 2>&1 | filecheck %s``.

Locations are printed (as ``#loc`` aliases after the module, as Triton prints them) when the
input has any; ``--print-debuginfo`` / ``--strip-debuginfo`` force them on / off.
``--split-input-file`` processes chunks separated by ``// -----`` independently, like mlir-opt.
``--verify-triton`` also parses the result into Triton's MLIR and verifies it there.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from xdsl.passes import PassPipeline
from xdsl.utils.exceptions import ArgSpecParseError, DiagnosticException, ParseError

from syncopate import __version__
from syncopate.errors import SyncopateError

from .bridge import parse_ttir_text, text_to_ttir, xdsl_to_text
from .context import make_context
from .dialects.syncopate import strip_module_state
from .pipeline import OPT_PASSES

SPLIT_MARKER = "// -----"


def _arg_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="syncopate-opt",
        description="Read TTIR (Triton's syntax), run syncopate passes, print TTIR.")
    ap.add_argument("--version", action="version", version=f"syncopate-opt {__version__}")
    ap.add_argument("input", nargs="?", default="-", help="input .mlir/.ttir file ('-' = stdin)")
    ap.add_argument("-p", "--passes", default="",
                    help="comma separated pass pipeline, e.g. 'tile-remap,insert-waits{backend=sm}'")
    ap.add_argument("-o", "--output", default="-", help="output file ('-' = stdout)")
    loc = ap.add_mutually_exclusive_group()
    loc.add_argument("--print-debuginfo", "--mlir-print-debuginfo", dest="locations", action="store_true",
                     default=None, help="always print locations")
    loc.add_argument("--strip-debuginfo", dest="locations", action="store_false",
                     help="never print locations")
    ap.add_argument("--inline-locations", action="store_true",
                    help="print locations inline instead of as #loc aliases")
    ap.add_argument("--print-op-generic", "--mlir-print-op-generic", dest="generic", action="store_true",
                    help="print ops in MLIR's generic form")
    ap.add_argument("--split-input-file", action="store_true",
                    help=f"process chunks separated by '{SPLIT_MARKER}' independently")
    ap.add_argument("--verify-triton", action="store_true",
                    help="parse the output into Triton's MLIR context and verify it there")
    ap.add_argument("--verify-each", action="store_true", default=True,
                    help="verify the module after each pass (default)")
    ap.add_argument("--no-verify-each", dest="verify_each", action="store_false")
    ap.add_argument("--print-ir-after-all", action="store_true",
                    help="print the module to stderr after each pass")
    ap.add_argument("--list-passes", action="store_true", help="list the registered passes and exit")
    return ap


def _diagnostic(err: BaseException) -> str:
    if isinstance(err, (ParseError, DiagnosticException, SyncopateError)):
        return str(err)
    return f"{type(err).__name__}: {err}"


def process(text: str, *, name: str, pipeline: str = "", locations: bool | None = None,
            inline_locations: bool = False, generic: bool = False, verify_each: bool = True,
            verify_triton: bool = False, print_ir_after_all: bool = False) -> str:
    """Parse ``text``, run ``pipeline``, return the printed module (raises on any error)."""
    ctx = make_context()
    module = parse_ttir_text(text, ctx, name)
    module.verify()
    if pipeline.strip():
        def after_pass(prev, mod, nxt):
            if verify_each:
                mod.verify()
            if print_ir_after_all:
                sys.stderr.write(f"// -----// IR after {prev.name} //----- //\n")
                sys.stderr.write(xdsl_to_text(mod, locations=None))

        pipe = parse_pipeline(pipeline, after_pass)
        pipe.apply(ctx, module)
        if verify_each:
            module.verify()
    out = xdsl_to_text(module, locations=locations, alias_locations=not inline_locations, generic=generic)
    if verify_triton:
        from triton._C.libtriton import ir  # Triton only for --verify-triton

        tctx = ir.context()
        ir.load_dialects(tctx)
        for_triton = module.clone()
        strip_module_state(for_triton)  # as the pipeline hands it to Triton
        text_to_ttir(xdsl_to_text(for_triton, locations=True), tctx, name=name)
    return out


class _UsageError(Exception):
    pass


def parse_pipeline(pipeline: str, after_pass=None):
    """The ``-p`` pipeline as xDSL's ``PassPipeline``; an unknown pass or malformed options is a
    :class:`_UsageError` naming the registered passes (checked before any input is read)."""
    available = {k: (lambda c=c: c) for k, c in OPT_PASSES.items()}
    try:
        return PassPipeline.parse_spec(available, pipeline, after_pass)
    except ValueError as e:
        known = ", ".join(sorted(OPT_PASSES))
        raise _UsageError(f"{e} (registered passes: {known})") from None
    except ArgSpecParseError as e:  # a BaseException in xDSL: would escape as a traceback
        raise _UsageError(f"{e}\nquote option values that hold paths or punctuation, e.g. "
                          f"attach-schedule{{file=\"Inputs/ag.json\" operands=\"a_ptr:A\"}}") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _arg_parser().parse_args(argv)
    if args.list_passes:
        for name, cls in sorted(OPT_PASSES.items()):
            doc = (cls.__doc__ or "").strip().split("\n")[0]
            print(f"{name}\t{doc}")
        return 0
    if args.passes.strip():
        try:  # a bad pipeline is refused before stdin is read (or waited for)
            parse_pipeline(args.passes)
        except _UsageError as e:
            sys.stderr.write(f"syncopate-opt: error: {e}\n")
            return 1
    try:
        if args.input == "-":
            text, name = sys.stdin.read(), "<stdin>"
        else:
            with open(args.input, encoding="utf-8") as f:
                text = f.read()
            name = args.input
    except OSError as e:
        sys.stderr.write(f"syncopate-opt: error: {e}\n")
        return 1

    chunks = text.split(SPLIT_MARKER) if args.split_input_file else [text]
    outputs: list[str] = []
    failed = False
    line_offset = 0
    for chunk in chunks:
        if not any(ln.strip() and not ln.strip().startswith("//") for ln in chunk.split("\n")):
            line_offset += chunk.count("\n")
            continue
        # keep line numbers of diagnostics relative to the whole file
        padded = "\n" * line_offset + chunk
        line_offset += chunk.count("\n")
        try:
            outputs.append(process(padded, name=name, pipeline=args.passes, locations=args.locations,
                                   inline_locations=args.inline_locations, generic=args.generic,
                                   verify_each=args.verify_each, verify_triton=args.verify_triton,
                                   print_ir_after_all=args.print_ir_after_all))
        except _UsageError as e:
            sys.stderr.write(f"syncopate-opt: error: {e}\n")
            return 1
        except Exception as e:  # noqa: BLE001 - every failure is a diagnostic with exit code 1
            sys.stderr.write(f"syncopate-opt: error: {_diagnostic(e)}\n")
            failed = True
    result = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs) + "\n"
    if args.output == "-":
        sys.stdout.write(result)
    else:
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(result)
        except OSError as e:
            sys.stderr.write(f"syncopate-opt: error: -o {args.output}: {e.strerror or e}\n")
            return 1
    return 1 if failed else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
