"""The import rules of docs/architecture.md that import-linter (``lint-imports``) does not check.

* Project imports inside functions (``import_module`` of a project name counts as one): each
  layer imports the layers below it at module top.  A
  lazy one stays only where it keeps torch, Triton or xDSL out of a light entry point
  (``import syncopate``, the CLI's start), and says so in a comment on its line or right above
  it.  The count is capped at today's count so that a new one is a decision, not a habit
  (issue 29: <= 40 over the tree).
* Every module of ``syncopate`` sits in a layer of pyproject's contract (import-linter checks
  only the modules a layer names).
* ``syncopate_mlir/passes`` is a link to ``passes/``, so that import-linter, which reads a
  package from its folder, sees the passes inside the IR layer.
* Every package folder is listed in pyproject (a wheel has only those).

Import circles (every import counted) are import-linter's second contract.
"""

from __future__ import annotations

import ast
import tomllib
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SOURCES = ("python", "passes", "syncopate_mlir")
PROJECT = ("syncopate", "syncopate_mlir", "passes")
#: the function-local project imports the tree holds (issue 29's target: at most 40): the
#: package facades of syncopate and syncopate.runtime, and the CLI handlers that load the
#: compiler, the emulator, the local kernels, the IR or the ops
CEILING = 16


def _sources():
    for top in SOURCES:
        # rglob does not enter the syncopate_mlir/passes link: passes/ is read once, as itself
        yield from sorted(p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts)


def _is_project(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] in PROJECT
    return any(a.name.split(".")[0] in PROJECT for a in node.names)


def _imports_by_name(node) -> bool:
    """``importlib.import_module(".x", ...)`` / ``import_module("syncopate.x")``: an import too."""
    if not isinstance(node, ast.Call) or not node.args:
        return False
    f, first = node.func, node.args[0]
    name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
    return name == "import_module" and isinstance(first, ast.Constant) \
        and isinstance(first.value, str) \
        and (first.value.startswith(".") or first.value.split(".")[0] in PROJECT)


def _local_imports(path: Path) -> list[ast.AST]:
    """The project imports written inside a function (at any depth) of ``path``."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            if in_function and (isinstance(child, (ast.Import, ast.ImportFrom))
                                and _is_project(child) or _imports_by_name(child)):
                found.append(child)
            visit(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse(path.read_text()), False)
    return found


def _explained(lines: list[str], node, import_lines: set[int]) -> bool:
    """A comment on the import's first line, or on the line above it (other imports, however
    many lines each takes, in between)."""
    if "#" in lines[node.lineno - 1]:
        return True
    above = node.lineno - 1  # 1-based
    while above in import_lines:
        above -= 1
    return above >= 1 and lines[above - 1].strip().startswith("#")


def _import_lines(path: Path) -> set[int]:
    """The line numbers that import statements take (1-based)."""
    return {n for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for n in range(node.lineno, node.end_lineno + 1)}


def _package(path: Path) -> str:
    rel = path.relative_to(REPO).as_posix()
    parts = rel.split("/")
    return "/".join(parts[:3]) if parts[0] == "python" else parts[0]


def test_function_local_project_imports_are_few_and_explained():
    per_package: Counter = Counter()
    unexplained = []
    for path in _sources():
        rel = path.relative_to(REPO).as_posix()
        lines, import_lines = path.read_text().splitlines(), _import_lines(path)
        for node in _local_imports(path):
            per_package[_package(path)] += 1
            if not _explained(lines, node, import_lines):
                unexplained.append(f"{rel}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    total = sum(per_package.values())
    table = ", ".join(f"{k} {v}" for k, v in per_package.most_common())
    assert not unexplained, (
        "a project import inside a function: move it to the module's top (in layer order), or, "
        "where it keeps torch/Triton/xDSL out of `import syncopate` or the CLI's start, say so "
        "in a comment:\n" + "\n".join(unexplained))
    assert total <= CEILING, f"{total} function-local project imports (at most {CEILING}): {table}"


def test_the_count_sees_a_function_local_import(tmp_path):
    """The counter finds a lazy import at any depth and reads its comment."""
    src = tmp_path / "m.py"
    src.write_text("import os\n\n\ndef f():\n    if os:\n        # keeps Triton out\n"
                   "        from syncopate import compiler\n        from . import x\n"
                   "    from syncopate.errors import E  # why\n    import json\n    x = 1\n"
                   "    return importlib.import_module('.emulate', __name__)\n")
    found = _local_imports(src)
    lines = src.read_text().splitlines()
    assert [n.lineno for n in found] == [7, 8, 9, 12]
    assert [_explained(lines, n, _import_lines(src)) for n in found] == [True, True, True, False]
    src.write_text("def f():\n    x = 1\n    from syncopate import compiler\n")
    (node,) = _local_imports(src)
    assert not _explained(src.read_text().splitlines(), node, _import_lines(src))


def _modules_named_in_layers() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    (layers,) = [c["layers"] for c in config["tool"]["importlinter"]["contracts"]
                 if c["type"] == "layers"]
    return [m.strip(" ()") for layer in layers for m in layer.replace(":", "|").split("|")]


def test_every_module_sits_in_a_layer():
    named = set(_modules_named_in_layers())
    top = REPO / "python" / "syncopate"
    modules = {f"syncopate.{p.stem}" for p in top.glob("*.py") if p.stem != "__init__"}
    modules |= {f"syncopate.{p.name}" for p in top.iterdir() if (p / "__init__.py").exists()}
    assert modules - named == set(), "give each module a layer in pyproject's contract"
    assert "syncopate_mlir" in named


def test_the_passes_are_linked_into_the_ir_package():
    link = REPO / "syncopate_mlir" / "passes"
    assert link.is_symlink() and link.resolve() == (REPO / "passes").resolve()


def test_every_package_is_installed():
    """A package folder missing from pyproject.toml's ``packages`` works in an editable install
    and is missing from a wheel: every folder with an ``__init__.py`` must be listed."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    listed = set(config["tool"]["setuptools"]["packages"])
    roots = {"python": "", "syncopate_mlir": "syncopate_mlir", "passes": "syncopate_mlir.passes"}
    packages = set()
    for top, prefix in roots.items():
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / top).parts
            packages.add(".".join(p for p in (prefix, *rel) if p))
    assert packages <= listed, sorted(packages - listed)
