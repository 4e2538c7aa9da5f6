"""The README and docs/ stand on their own: every file they point at is in the repository.

They once referred 17 times to a DESIGN.md that was never in the repository, and to
``../shared``; a reader of a clone cannot follow those.  This test reads every Markdown file of
the README and ``docs/`` and checks:

* every Markdown link ``[text](target)`` outside code blocks (not a URL, not an ``#anchor``)
  resolves to a file or folder inside the repository;
* no path climbs out of it (``../``), and no absolute path names a machine's folders;
* every path that starts with one of the repository's top-level folders
  (``python/syncopate/compiler.py``, ``docs/loopback.md``, ``passes/abi_info.read_abi`` -- a
  module and one of its names) exists, as does every ``NAME.md`` mentioned.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".")}

LINK = re.compile(r"\]\(([^)\s]+)\)")
PATH = re.compile(r"(?<![\w/.:-])((?:\.{1,2}/)*[\w.-]+(?:/[\w.*<>{}-]+)+/?|[\w.-]+\.md\b)")
ABSOLUTE = re.compile(r"(?<![\w:/.])(/(?:work|home|tmp/shared|root|Users)/[\w./-]+)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _inside(p: Path) -> bool:
    p = p.resolve()
    return p == REPO or REPO in p.parents


def _exists(ref: str, doc: Path) -> bool:
    """``ref`` from ``doc``: a path relative to the repository or to the doc's folder, or a
    module path followed by a name (``passes/abi_info.read_abi`` -> ``passes/abi_info.py``)."""
    ref = ref.rstrip("/")
    candidates = [REPO / ref, doc.parent / ref]
    head, _, last = ref.rpartition("/")
    if "." in last and not last.endswith((".md", ".py", ".sh", ".json", ".toml", ".txt")):
        module = f"{head}/{last.split('.')[0]}"
        candidates += [REPO / f"{module}.py", REPO / module]
    if "/" not in ref:  # a bare NAME.md: anywhere in the repository
        candidates += list(REPO.rglob(ref))
    return any(c.exists() and _inside(c) for c in candidates)


def _problems(doc: Path, text: str | None = None) -> list[str]:
    text = doc.read_text(encoding="utf-8") if text is None else text
    rel = doc.relative_to(REPO)
    out = []
    for m in LINK.finditer(FENCE.sub("", text)):
        target = m.group(1)
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = doc.parent / target.split("#")[0]
        if not (path.exists() and _inside(path)):
            out.append(f"{rel}: link to {target}, which is not in the repository")
    for m in ABSOLUTE.finditer(text):
        out.append(f"{rel}: absolute path {m.group(1)} (a folder of one machine)")
    for m in PATH.finditer(text):
        ref = m.group(1)
        if ref.startswith("../") or "/../" in ref:
            out.append(f"{rel}: {ref} points outside the repository")
            continue
        first = ref.removeprefix("./").split("/")[0]
        checked = ("/" in ref and first in TOP) or ref.endswith(".md")
        if checked and not re.search(r"[*<>{}]", ref) and not _exists(ref, doc):
            out.append(f"{rel}: {ref} does not exist in the repository")
    return out


def test_readme_and_docs_point_only_at_files_in_the_repository():
    assert len(DOCS) > 5
    problems = [p for doc in DOCS for p in _problems(doc)]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_what_it_is_for():
    """The checks above on a doc with every kind of bad reference (else a regex gone wrong
    would pass silently); the doc is not written, only read as if it were docs/probe.md."""
    text = ("See DESIGN.md and [the notes](../shared/notes.md), `../shared/x.py`,\n"
            "[ok](loopback.md), `python/syncopate/nope.py`, `passes/abi_info.read_abi`\n"
            "and /work/main/README.md.\n\n```\nf[grid](*args)\n```\n")
    found = "\n".join(_problems(REPO / "docs" / "probe.md", text))
    assert "DESIGN.md does not exist" in found
    assert "link to ../shared/notes.md" in found and "../shared/x.py points outside" in found
    assert "python/syncopate/nope.py does not exist" in found
    assert "absolute path /work/main/README.md" in found
    assert "loopback.md" not in found and "abi_info" not in found and "*args" not in found
