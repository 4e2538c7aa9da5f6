"""docs/api.md is what ``scripts/api_doc.py`` writes from the code: the reference stays true.

When this fails, the public API or a docstring changed: run ``python scripts/api_doc.py`` and
commit docs/api.md with the change.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("triton")

REPO = Path(__file__).resolve().parents[1]


def _api_doc():
    spec = importlib.util.spec_from_file_location("api_doc", REPO / "scripts" / "api_doc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_api_md_is_up_to_date():
    text = _api_doc().render()
    assert (REPO / "docs" / "api.md").read_text(encoding="utf-8") == text, \
        "docs/api.md is stale: run python scripts/api_doc.py"


def test_api_md_covers_the_public_api():
    """The objects the issue names are in it, and every error class, op and template."""
    import syncopate.errors as errors
    import syncopate.ops as ops
    from syncopate.schedule import TEMPLATES
    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    headings = {ln[5:-1] for ln in text.splitlines() if ln.startswith("### `")}
    for name in ("syncopate.fuse", "syncopate.compile", "syncopate.emulate",
                 "syncopate.ops.ag_gemm", "syncopate.ops.gemm_rs",
                 "syncopate.runtime.Communicator", "syncopate.schedule.Schedule"):
        assert name in headings, name
    for n, v in vars(errors).items():
        if isinstance(v, type) and issubclass(v, errors.SyncopateError):
            assert f"syncopate.errors.{n}" in headings, n
    assert {f"syncopate.ops.{n}" for n in ops.__all__} <= headings
    assert {f"syncopate.schedule.{f.__name__}" for f in TEMPLATES.values()} <= headings
    assert "*(no docstring)*" not in text
