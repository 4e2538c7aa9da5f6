"""The ``syncopate`` command line (console script ``syncopate = syncopate.cli:main``).

Top-level commands come from the modules listed in :data:`COMMAND_MODULES`.  Each module has a
``register_commands(subparsers)`` that adds its parsers to the top-level subparsers and sets a
handler with ``parser.set_defaults(func=handler)``; a handler takes the parsed arguments and
returns the exit status.  To add a command (``syncopate demo``, ``syncopate compile``), write
such a function in your module and append the module's name here.  Keep module-level imports of
those modules light (argparse only): import Triton, torch or xDSL inside the handler, so that
``syncopate schedule ...`` and ``syncopate --help`` stay fast and work without a GPU stack.

Exit status: 0 success, 1 the input is wrong (a :class:`~syncopate.errors.SyncopateError`,
printed on stderr one problem per line), 2 bad usage (argparse).
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from typing import Sequence

#: Modules whose ``register_commands(subparsers)`` adds top-level commands, in help order.
COMMAND_MODULES: list[str] = [
    "syncopate.schedule.cli",
    "syncopate.compile_cli",
    "syncopate.emulate.cli",
    "syncopate.trace_cli",
]


def build_parser() -> argparse.ArgumentParser:
    from . import __version__
    parser = argparse.ArgumentParser(
        prog="syncopate",
        description="Syncopate: fuse single-GPU Triton kernels with chunked communication.",
        epilog="Exit status: 0 ok, 1 invalid input (problems on stderr, one per line), "
               "2 bad usage.")
    parser.add_argument("--version", action="version", version=f"syncopate {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in COMMAND_MODULES:
        import_module(name).register_commands(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (the console script exits with it)."""
    from .errors import SyncopateError
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SyncopateError as e:
        problems = getattr(e, "problems", None) or [str(e)]
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `syncopate schedule show x.json | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
