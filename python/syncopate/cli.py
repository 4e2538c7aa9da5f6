"""The ``syncopate`` command line (console script ``syncopate = syncopate.cli:main``).

Top-level commands come from the modules listed in :data:`COMMAND_MODULES`.  Each module has a
``register_commands(subparsers)`` that adds its parsers to the top-level subparsers and sets a
handler with ``parser.set_defaults(func=handler)``; a handler takes the parsed arguments and
returns the exit status.  To add a command (``syncopate demo``, ``syncopate compile``), write
such a function in your module and append the module's name here.  Keep module-level imports of
those modules light (argparse only): import Triton, torch or xDSL inside the handler, so that
``syncopate schedule ...`` and ``syncopate --help`` stay fast and work without a GPU stack.

Exit status: 0 success, 1 the input is wrong (a :class:`~syncopate.errors.SyncopateError` or
an unreadable file, printed on stderr one problem per line), 2 bad usage (argparse, or a
:class:`~syncopate.errors.UsageError`: a malformed option value).  No command answers with a
raw traceback (:func:`run_handler`); ``SYNCOPATE_TRACEBACK=1`` shows one when debugging.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from typing import Sequence

from . import settings
from .errors import SyncopateError, UsageError
from .version import __version__

#: Modules whose ``register_commands(subparsers)`` adds top-level commands, in help order.
COMMAND_MODULES: list[str] = [
    "syncopate.schedule_cli",
    "syncopate.compile_cli",
    "syncopate.emulate_cli",
    "syncopate.trace_cli",
    "syncopate.explain_cli",
]


def build_parser() -> argparse.ArgumentParser:
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
    """Run the command line; returns the exit status (the console script exits with it).

    Bad usage raises ``SystemExit(2)`` as argparse does (argparse's own errors and
    :class:`~syncopate.errors.UsageError`); bad input returns 1 with ``error: ...`` lines."""
    args = build_parser().parse_args(argv)
    prog = " ".join(["syncopate", args.command] + [str(v) for k, v in sorted(vars(args).items())
                                                   if k.endswith("_action") and v])
    return run_handler(args.func, args, prog)


def run_handler(func, args, prog: str) -> int:
    """Call a command's handler and turn every failure into an exit status and one line per
    problem: a raw traceback is never the answer to a bad command line or a bad file.

    ``SYNCOPATE_TRACEBACK=1`` re-raises instead (for debugging Syncopate itself)."""
    if settings.TRACEBACK.get():
        return int(func(args) or 0)
    try:
        return int(func(args) or 0)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except SyncopateError as e:
        problems = getattr(e, "problems", None) or [str(e)]
        for p in problems:
            print(f"error: {p}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # `syncopate schedule show x.json | head`
        return 0
    except OSError as e:  # a file the command reads or writes: name it and say why
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - a bug in Syncopate, not in the input
        first = (str(e).splitlines() or [""])[0]
        print(f"error: internal error in {prog}: {type(e).__name__}: {first} -- this is a bug "
              f"in Syncopate; rerun with SYNCOPATE_TRACEBACK=1 and report the traceback",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
