"""Every command, every argument, given something wrong: exit 1 or 2, a message, no traceback.

The commands are discovered, not listed: every entry point (the console scripts of
``pyproject.toml`` and every module under ``python/`` and ``syncopate_mlir/`` that runs as a
script) must be in :data:`ENTRY_POINTS`, and every subcommand is found by walking its argparse
parser.  Each leaf command is run once per bad case:

* each required argument left out (exit 2);
* each argument that takes a value given a bad one, chosen from the argument's kind: a value
  outside ``choices``, text that its ``type=`` refuses, and for free-text arguments the bad
  values of :data:`BAD_TEXT` (a missing file, a file that is not JSON, a folder, a path under a
  regular file, a malformed kernel reference...).  A new free-text argument without an entry
  there fails :func:`test_every_free_text_argument_has_bad_values`, so the walk stays complete.

The assertion is the user's view: the exit status is 1 or 2, stderr has no ``Traceback`` and
no "internal error" (the last-resort line of :func:`syncopate.cli.run_handler`: reaching it
means a failure nobody turned into a message), and the message is one line per problem
(``error: ...``; argparse's usage lines before ``prog: error: ...`` for bad usage).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

from syncopate.schedule import all_gather, dumps

REPO = Path(__file__).resolve().parents[1]


def _syncopate():
    from syncopate import cli
    return cli.build_parser(), cli.main


def _opt():
    from syncopate_mlir import opt
    return opt._arg_parser(), opt.main


def _bench():
    from syncopate.bench import __main__ as bench
    return bench.build_parser(), bench.main


def _fuzz():
    from syncopate.fuzz import __main__ as fuzz
    return fuzz.build_parser(), fuzz.main


def _bench_local():
    from syncopate.bench import local as bench_local
    return bench_local.build_parser(), bench_local.main


def _bench_fp8():
    from syncopate.bench import local_fp8 as bench_fp8
    return bench_fp8.build_parser(), bench_fp8.main


def _bench_grouped():
    from syncopate.bench import grouped as bench_grouped
    return bench_grouped.build_parser(), bench_grouped.main


#: entry point -> (its module, how to get (parser, main), arguments every run starts with).
#: The fuzzer's ``--count 0`` keeps a run that gets past its arguments from fuzzing 50 cases.
ENTRY_POINTS = {
    "syncopate": ("syncopate.cli", _syncopate, []),
    "syncopate-opt": ("syncopate_mlir.opt", _opt, []),
    "python -m syncopate.bench": ("syncopate.bench.__main__", _bench, []),
    "python -m syncopate.fuzz": ("syncopate.fuzz.__main__", _fuzz, ["--count", "0"]),
    "python -m syncopate.bench.local": ("syncopate.bench.local", _bench_local, []),
    "python -m syncopate.bench.local_fp8": ("syncopate.bench.local_fp8", _bench_fp8, []),
    "python -m syncopate.bench.grouped": ("syncopate.bench.grouped",
                                                  _bench_grouped, []),
}


def _script_modules() -> set[str]:
    """Modules that run as scripts: ``__main__.py`` files and ``if __name__ == "__main__"``."""
    found = set()
    for root, prefix in ((REPO / "python", ""), (REPO / "syncopate_mlir", "syncopate_mlir.")):
        for path in root.rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if path.name == "__main__.py" or re.search(r"^if __name__ == .__main__.:", text,
                                                       re.MULTILINE):
                mod = ".".join(path.relative_to(root).with_suffix("").parts)
                found.add(prefix + mod)
    found.discard("syncopate.__main__")  # runs syncopate.cli.main: the "syncopate" entry
    return found


def test_every_entry_point_is_walked():
    import tomllib
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    walked = {mod for mod, _, _ in ENTRY_POINTS.values()}
    for name, target in scripts.items():
        assert name in ENTRY_POINTS, f"console script {name} is not walked: add it to ENTRY_POINTS"
        assert ENTRY_POINTS[name][0] == target.split(":")[0]
    missing = _script_modules() - walked
    assert not missing, f"modules that run as scripts but are not walked: {sorted(missing)}"


def _leaves(parser: argparse.ArgumentParser, path=()):
    """(subcommand path, parser) of every leaf command under ``parser``."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, path + (name,))


def _value_actions(parser):
    """The arguments that take a value (not flags, help, version or subcommands)."""
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._VersionAction,
                          argparse._SubParsersAction)) or a.nargs == 0:
            continue
        yield a


def _flag(a) -> str | None:
    return max(a.option_strings, key=len) if a.option_strings else None


# ----------------------------------------------------------------------------- the inputs

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli-walk")
    (d / "ag.json").write_text(dumps(all_gather([256, 64], "bf16", 2, split=2)))
    (d / "bad.json").write_text("{not json")
    (d / "list.json").write_text("[1, 2]")
    (d / "plain.txt").write_text("a regular file\n")
    (d / "k.mlir").write_text("module {\n  tt.func public @k() {\n    tt.return\n  }\n}\n")
    from syncopate.trace import Event, save_chrome  # a valid timeline (syncopate trace ...)
    save_chrome(str(d / "trace.json"), [Event(0, 1, 1, 0, -1, 0, 10), Event(0, 2, 1, 0, -1, 0, 20)])
    (d / "folder").mkdir()
    return d


def _fill(dest: str, f: Path, leaf: tuple) -> str:
    """A valid value for a required argument (so that one bad argument is tested at a time)."""
    valid = {"kernel": "gemm-ptr", "schedule": str(f / "ag.json"), "file": str(f / "ag.json"),
             "operand": "a_ptr", "shape": "256,128,64", "world_size": "2", "split_dim": "0",
             "concat_dim": "1", "input": str(f / "k.mlir"), "trace": str(f / "trace.json"),
             "op": "gemm_rs"}
    assert dest in valid, (f"{' '.join(leaf)}: no valid value known for the required argument "
                           f"{dest!r}; add one to _fill")
    return valid[dest]


#: bad values for arguments whose type is free text, by argparse ``dest``; ``{f}`` is the folder
#: of the fixture files.  Each must be wrong whatever else is given.
BAD_TEXT = {
    "kernel": ["no-such-kernel", "nomod_xyz:kernel", "syncopate.errors:nothing",
               "syncopate.errors:SyncopateError", "{f}/plain.txt:kernel", "{f}/folder"],
    "schedule": ["{f}/missing.json", "{f}/bad.json", "{f}/list.json", "{f}/folder"],
    "file": ["{f}/missing.json", "{f}/bad.json", "{f}/list.json", "{f}/folder"],
    "input": ["{f}/missing.mlir", "{f}/bad.json", "{f}/folder"],
    "trace": ["{f}/missing.json", "{f}/bad.json", "{f}/list.json", "{f}/folder"],
    "operand": ["a_ptr:", "no_such_param", "a_ptr:A,b"],
    "signature": ["a_ptr", "a_ptr=int", "=*bf16"],
    "constexpr": ["BLOCK", "=3"],
    "arg": ["K", "a_ptr=1x", "out_ptr=zeros:x"],
    "grid": ["x", "1,,"],
    "policies": ["sideways", "behind:x"],
    "output": ["{f}/plain.txt/sub"],
    "out": ["{f}/plain.txt/sub"],
    "tensor": ["", "no such tensor"],
    "dtype": ["fp33"],
    "op": ["no_such_op", "", "ulysses_attention "],  # explain: a registered op, checked there
    "gpu": ["../h200", "H 200"],
    "table": ["{f}/missing.json", "{f}/bad.json", "{f}/list.json", "{f}/folder"],
    "install_tuned": ["{f}/missing.json", "{f}/bad.json", "{f}/list.json", "{f}/folder"],
    "from_results": ["{f}/missing", "{f}/folder", "{f}/plain.txt"],
    "calibration_dir": ["{f}/plain.txt/sub"],
    "passes": ["no-such-pass", "tile-remap{"],
}


def _cases(files):
    for entry, (_, get, prefix) in ENTRY_POINTS.items():
        parser, _main = get()
        for leaf, sub in _leaves(parser):
            required = [a for a in _value_actions(sub)
                        if a.required or (not a.option_strings and a.nargs not in ("?", "*"))]
            base = {a.dest: _fill(a.dest, files, (entry,) + leaf) for a in required}
            base.update({a.dest: _fill(a.dest, files, (entry,) + leaf)  # an optional input file
                         for a in _value_actions(sub) if not a.option_strings})
            # --shape of the GEMM kernels: without it every compile/emulate run would stop at
            # the same "needs --shape" and test nothing else
            base.update({a.dest: _fill(a.dest, files, leaf) for a in _value_actions(sub)
                         if a.dest == "shape"})

            def argv(values, drop=None, leaf=leaf, sub=sub):
                out = list(prefix) + list(leaf)
                for a in _value_actions(sub):
                    if a.dest == drop or a.dest not in values:
                        continue
                    v = values[a.dest]
                    out += ([_flag(a)] if _flag(a) else []) + [v]
                return out

            for a in required:
                yield entry, leaf, f"without {a.dest}", argv(base, drop=a.dest)
            for a in _value_actions(sub):
                for bad in _bad_values(a, files):
                    yield entry, leaf, f"{_flag(a) or a.dest}={bad!r}", \
                        argv({**base, a.dest: bad})


def _bad_values(a, files) -> list[str]:
    if a.choices is not None:
        return ["not-a-choice"]
    if a.type in (int, float):  # a plain number: any is valid, negative dims count from the end
        return ["nonsense"]
    if a.type is not None and a.type is not str:  # a checking type (cli_args): sign included
        return [v.replace("{f}", str(files)) for v in BAD_TEXT.get(a.dest, ["nonsense", "-1"])]
    return [v.replace("{f}", str(files)) for v in BAD_TEXT.get(a.dest, [])]


def test_every_free_text_argument_has_bad_values():
    missing = []
    for entry, (_, get, _) in ENTRY_POINTS.items():
        parser, _main = get()
        for leaf, sub in _leaves(parser):
            for a in _value_actions(sub):
                if a.choices is None and a.type in (None, str) and a.dest not in BAD_TEXT:
                    missing.append(f"{entry} {' '.join(leaf)} {_flag(a) or a.dest}")
    assert not missing, f"free-text arguments with no bad values in BAD_TEXT: {missing}"


def _run(entry: str, argv: list[str], capsys) -> tuple[int, str]:
    _, get, _ = ENTRY_POINTS[entry]
    _, main = get()
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return rc, capsys.readouterr().err


def _problems(entry: str, rc: int, err: str) -> list[str]:
    """What is wrong with a refusal as the user sees it (empty: nothing)."""
    lines = [ln for ln in err.splitlines() if ln.strip()]
    out = []
    if rc not in (1, 2):
        out.append(f"exit status {rc}, expected 1 (bad input) or 2 (bad usage)")
    if "Traceback" in err or "internal error" in err:
        out.append("a traceback / internal error:\n" + err[-1500:])
    elif not lines:
        out.append("no message on stderr")
    elif rc == 2:
        usage = [ln for ln in lines if not re.match(r"^\S.*: error: ", ln)]
        errors = [ln for ln in lines if re.match(r"^\S.*: error: ", ln)]
        if len(errors) != 1 or not all(ln.startswith(("usage:", " ")) for ln in usage):
            out.append(f"bad usage should print usage lines and one 'PROG: error:' line:\n{err}")
    elif rc == 1 and entry != "syncopate-opt":  # MLIR diagnostics there are multi-line
        if not all(re.match(r"^(\S.*: )?error: ", ln) for ln in lines):
            out.append(f"every stderr line should be one problem ('error: ...'):\n{err}")
    return out


def test_walk_every_command_with_bad_arguments(files, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # outputs a bad case might still write land here
    monkeypatch.setattr(sys, "stdin", open("/dev/null"))
    monkeypatch.delenv("RANK", raising=False)
    failures, n = [], 0
    seen_leaves = set()
    for entry, leaf, label, argv in _cases(files):
        n += 1
        seen_leaves.add((entry, leaf))
        rc, err = _run(entry, argv, capsys)
        for p in _problems(entry, rc, err):
            failures.append(f"{entry} {' '.join(argv)}  [{label}]: {p}")
    assert n > 100 and len(seen_leaves) >= 10, (n, seen_leaves)
    assert not failures, f"{len(failures)} of {n} runs:\n" + "\n\n".join(failures)
