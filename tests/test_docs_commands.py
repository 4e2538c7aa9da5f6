"""Every documented command runs as written: the shell and Python blocks of README.md and of
every docs/*.md, in order, on this CPU, so the docs cannot drift from the code.

Each markdown file runs in a fresh temporary folder that holds links to the repository's
top-level entries (the docs' commands are written for the repository root: ``examples/...``,
``docs/traces/...``), so whatever a block writes (``ag.json``, ``fused/``) lands there and a
later block of the same file reads it. Shell blocks run in ``bash`` with ``set -euo pipefail``
(every command must succeed); Python blocks run in one namespace per file, as a reader pasting
them into one interpreter would.

A block that must not run here says so, with the reason, in an HTML comment on the line
right before it (invisible when rendered)::

    <!-- gpu-only: needs 2 GPUs and torchrun -->
    <!-- setup: installs the package (the test environment is that install) -->
    <!-- not-run: an output listing -->
    <!-- slow: compiles a W = 8 kernel (~2 min); SYNCOPATE_DOCS_SLOW=1 runs it -->

``gpu-only`` is for what needs GPUs, torchrun, several processes or the network; ``setup``
for the install lines (``python3 -m venv ... pip install ...``): the tests already run inside
that install, and CI must not install twice; ``not-run`` for listings, excerpts and
pseudo-code; ``slow`` runs only with ``SYNCOPATE_DOCS_SLOW=1``. The code blocks that are
skipped are listed with their reasons by ``pytest -rs`` (:func:`test_marked_block`).

Any other block must be ``python``, ``bash`` or ``sh`` and must succeed; a block of another
language (``json``, ``text``) or none is not run and needs a marker as well, so nothing in the
docs is silently exempt.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))

#: what a marker may say: skipped always, except ``slow`` under SYNCOPATE_DOCS_SLOW=1
KINDS = ("gpu-only", "setup", "not-run", "slow")
MARKER = re.compile(r"^\s*<!--\s*([a-z-]+):\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)(.*)$")
LANGS = {"python": "python", "bash": "shell", "sh": "shell"}
SHELL_TIMEOUT_S = 300
#: set for the blocks' processes: a block that runs the test suite must not run the docs again
NESTED = "SYNCOPATE_IN_DOCS_TEST"


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    marker: tuple[str, str] | None  # (kind, reason)

    @property
    def where(self) -> str:
        return f"{_rel(self.path)}:{self.line}"


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path``, each with the marker on the line before it (if any)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].strip() == "" else lines[i])
            i += 1
        i += 1
        prev = lines[start - 1] if start > 0 else ""
        mk = MARKER.match(prev)
        out.append(Block(path, start + 1, lang, "\n".join(body) + "\n",
                         (mk.group(1), mk.group(2)) if mk else None))
    return out


def _problems_of_markers(path: Path) -> list[str]:
    """Markers that mark nothing, name an unknown kind or give no reason."""
    lines = path.read_text(encoding="utf-8").splitlines()
    bad = []
    for n, line in enumerate(lines):
        m = MARKER.match(line)
        if not m:
            continue
        where = f"{_rel(path)}:{n + 1}"
        if m.group(1) not in KINDS:
            bad.append(f"{where}: unknown marker {m.group(1)!r}; use one of {', '.join(KINDS)}")
        elif not m.group(2):
            bad.append(f"{where}: the {m.group(1)} marker gives no reason")
        elif n + 1 >= len(lines) or not FENCE.match(lines[n + 1]):
            bad.append(f"{where}: the marker is not on the line right before a code block")
    return bad


def _workdir(tmp_path: Path) -> Path:
    """A folder that looks like the repository root but keeps what the blocks write."""
    for entry in REPO.iterdir():
        if entry.name in (".git", ".venv", "build") or entry.name.startswith("."):
            continue
        (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _env() -> dict:
    env = dict(os.environ)
    # the interpreter running the tests and its console scripts (syncopate, syncopate-opt)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.pop("SYNCOPATE_TRACEBACK", None)
    env[NESTED] = "1"
    return env


def _run_shell(b: Block, cwd: Path) -> None:
    # a block marked slow (run with SYNCOPATE_DOCS_SLOW=1) takes as long as it says it does
    limit = None if b.marker and b.marker[0] == "slow" else SHELL_TIMEOUT_S
    try:
        proc = subprocess.run(["bash", "-c", "set -euo pipefail\n" + b.code], cwd=cwd,
                              env=_env(), capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{b.where}: the shell block ran past {limit} s: make it faster, or mark "
                    f"it <!-- slow: why -->\n--- block\n{b.code}", pytrace=False)
    if proc.returncode != 0:
        pytest.fail(f"{b.where}: the shell block exited {proc.returncode}\n--- block\n{b.code}"
                    f"--- stdout (tail)\n{proc.stdout[-3000:]}\n--- stderr (tail)\n"
                    f"{proc.stderr[-3000:]}", pytrace=False)


def _run_python(b: Block, namespace: dict) -> None:
    try:
        exec(compile(b.code, b.where, "exec"), namespace)  # noqa: S102 - the docs' own code
    except BaseException as e:  # noqa: BLE001 - report which block, then fail
        tb = "".join(traceback.format_exception(type(e), e, e.__traceback__)[-6:])
        pytest.fail(f"{b.where}: the Python block raised {type(e).__name__}\n--- block\n"
                    f"{b.code}--- traceback (tail)\n{tb}", pytrace=False)


def _skip_reason(b: Block) -> str | None:
    if b.marker is not None:
        kind, reason = b.marker
        if kind == "slow" and os.environ.get("SYNCOPATE_DOCS_SLOW", "") not in ("", "0"):
            return None
        return f"{kind}: {reason}"
    return None


def unmarked_problems(path: Path) -> list[str]:
    """Blocks the test would not run (another language, or none) that carry no marker, and
    markers that are malformed or mark nothing."""
    bad = _problems_of_markers(path)
    for b in blocks(path):
        if b.marker is None and b.lang not in LANGS:
            bad.append(f"{b.where}: a {b.lang or 'plain'} block without a marker: label it "
                       f"python/bash if it runs, else mark it (<!-- not-run: why -->)")
    return bad


def run_blocks(path: Path, cwd: Path, monkeypatch) -> int:
    """Run the blocks of ``path`` that are not marked, in order, in ``cwd``; fails at the first
    that fails. Returns how many ran."""
    todo = [b for b in blocks(path) if b.lang in LANGS and _skip_reason(b) is None]
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "path", list(sys.path))
    namespace = {"__name__": "__main__"}
    for b in todo:
        if LANGS[b.lang] == "shell":
            _run_shell(b, cwd)
        else:
            _run_python(b, namespace)
    return len(todo)


def test_every_block_is_runnable_or_marked():
    bad = [p for path in DOCS for p in unmarked_problems(path)]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", DOCS, ids=[_rel(p) for p in DOCS])
def test_doc_blocks_run(path, tmp_path, monkeypatch):
    if os.environ.get(NESTED):
        pytest.skip("inside a docs block: the docs run once")
    if not run_blocks(path, _workdir(tmp_path), monkeypatch):
        pytest.skip("no block to run here: each is marked gpu-only, setup, slow or not-run")


SKIPPED = [b for path in DOCS for b in blocks(path)
           if b.marker is not None and b.marker[0] != "not-run"]


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_marked_block(block):
    """Each block that is code but does not run here, listed with its reason (``-rs``)."""
    reason = _skip_reason(block)
    if reason is not None:
        pytest.skip(f"{block.where}: {reason}")


def test_the_harness_fails_an_unmarked_failing_block(tmp_path, monkeypatch):
    """The check itself: an unmarked block that fails fails the test, the same block marked
    is skipped, state flows from one block to the next, and an unmarked non-code block is
    reported."""
    doc = tmp_path / "doc.md"
    doc.write_text("```bash\necho 41 > n.txt\n```\n\n```python\n"
                   "n = int(open('n.txt').read()) + 1\n```\n\n```python\nassert n == 42\n```\n")
    assert run_blocks(doc, tmp_path, monkeypatch) == 3
    doc.write_text("```bash\nsyncopate schedule check no-such.json\n```\n")
    with pytest.raises(pytest.fail.Exception, match="doc.md:1: the shell block exited 1"):
        run_blocks(doc, tmp_path, monkeypatch)
    doc.write_text("```python\nraise ValueError('drifted')\n```\n")
    with pytest.raises(pytest.fail.Exception, match="raised ValueError"):
        run_blocks(doc, tmp_path, monkeypatch)
    doc.write_text("<!-- gpu-only: needs a GPU -->\n```python\nraise ValueError\n```\n")
    assert run_blocks(doc, tmp_path, monkeypatch) == 0
    doc.write_text("```json\n{}\n```\n<!-- gpu-only: -->\n```bash\ntrue\n```\n"
                   "<!-- later: x -->\n```bash\ntrue\n```\n")
    bad = unmarked_problems(doc)
    assert len(bad) == 3 and "a json block without a marker" in bad[-1], bad


def test_every_pass_of_the_pipeline_is_documented():
    """Every pass a fused compile runs, on every backend and reduce mode, has its row in the
    README's pass table and its name in docs/architecture.md's layer map (insert-trace,
    load-epoch and self-advance-epoch were missing from both)."""
    from syncopate import backends
    from syncopate_mlir.pipeline import pass_names

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    arch = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for name in backends.names():
        for reduce in backends.get(name).reduce_modes:
            for p in pass_names(name, reduce):
                if not re.search(rf"^\| [^|]*`{re.escape(p)}`", readme, re.MULTILINE):
                    missing.append(f"README.md's pass table: {p}")
                if not re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", arch):
                    missing.append(f"docs/architecture.md: {p}")
    assert not missing, sorted(set(missing))


#: where a message or a doc could name a function of ``syncopate.language``
NAMED_IN = ["README.md", "docs", "python", "passes", "syncopate_mlir"]


def test_every_language_function_named_exists():
    """Messages and docs name ``syncopate.language`` functions that exist: a refusal once
    told users to call ``syncopate.language.hint_region``, which there is not (the hints are
    ``hint_region1``/``2``/``3``, one per rank)."""
    import syncopate.language as sl

    bad = []
    for top in NAMED_IN:
        root = REPO / top
        files = [root] if root.is_file() else [p for p in root.rglob("*")
                                               if p.suffix in (".py", ".md")]
        for f in files:
            text = f.read_text(encoding="utf-8")
            for m in re.finditer(r"syncopate\.language\.(\w+)([{*]?)", text):
                name, pattern = m.groups()  # hint_region{nd} in an f-string, hint_region*
                if not (any(n.startswith(name) for n in vars(sl)) if pattern
                        else hasattr(sl, name)):
                    bad.append(f"{_rel(f)}: syncopate.language.{name}")
    assert not bad, bad
