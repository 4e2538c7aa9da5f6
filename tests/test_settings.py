"""syncopate.settings: every SYNCOPATE_* variable is one typed, documented Setting, read only
through it (CPU only, no torch)."""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest

from syncopate import chunk_table, settings
from syncopate.errors import SyncopateError

REPO = Path(__file__).resolve().parents[1]
#: the project's code (the test suite's own variables, SYNCOPATE_GPU_WORLD & co., stay in tests/)
SOURCES = ("python", "passes", "syncopate_mlir", "scripts")


def _files():
    for top in SOURCES:
        yield from sorted((REPO / top).rglob("*.py"))


def _names(s: str) -> bool:
    return s == "SYNCOPATE" or s.startswith("SYNCOPATE_")


def test_no_module_but_settings_reads_a_syncopate_variable():
    """A read of the environment for a SYNCOPATE_* variable (``os.environ.get("SYNCOPATE_X")``,
    ``env["SYNCOPATE_X"]``, ``getenv``) or of ``os.environ._data`` anywhere but settings.py is
    a second parser of a variable: it must go through syncopate.settings."""
    bad = []
    for path in _files():
        if path == REPO / "python" / "syncopate" / "settings.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            key = None
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("get", "getenv", "pop", "setdefault") and node.args:
                key = node.args[0]
            elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
                key = node.slice
            elif isinstance(node, ast.Attribute) and node.attr == "_data" and \
                    isinstance(node.value, ast.Attribute) and node.value.attr == "environ":
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: os.environ._data")
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and _names(key.value):
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: reads {key.value}")
    assert not bad, "read these through syncopate.settings:\n" + "\n".join(bad)


def test_every_variable_the_code_names_is_a_setting_and_every_setting_is_read():
    """Every SYNCOPATE_* the code or its docstrings name is in the table (docs/api.md), so a
    new variable cannot go undocumented; and every setting is read somewhere."""
    named, read = set(), set()
    for path in _files():
        text = path.read_text()
        named |= set(re.findall(r"\bSYNCOPATE_[A-Z0-9_]*[A-Z0-9]\b", text))
        if path.name != "settings.py":
            read |= set(re.findall(r"\bsettings\.([A-Z][A-Z0-9_]*)\b", text))
            if re.search(r"\bsettings\.watchdog\b", text):
                read |= {"TIMEOUT_S", "TIMEOUT_ACTION"}
    assert named - set(settings.SETTINGS) == set()
    assert {s.var for name, s in vars(settings).items()
            if name in read and isinstance(s, settings.Setting)} == \
        set(settings.SETTINGS)


@pytest.mark.parametrize("var", sorted(settings.SETTINGS))
def test_each_setting_unset_empty_and_bad(var, monkeypatch):
    """Unset or blank is the default; a value that does not parse is the setting's typed
    error naming the variable and the value (text settings take any value)."""
    s = settings.SETTINGS[var]
    assert s.var == var and s.doc and s.kind
    monkeypatch.delenv(var, raising=False)
    assert s.get() == s.default and s.get({}) == s.default
    monkeypatch.setenv(var, "  ")
    assert s.get() == s.default
    monkeypatch.setenv(var, "-7?")
    try:
        value = s.get()
    except SyncopateError as e:
        assert f"{var}='-7?'" in str(e)
        with pytest.raises(type(e)):  # the same answer from a given mapping
            s.get({var: "-7?"})
    else:
        assert value in ("-7?", None)  # a text setting, or SYNCOPATE's "not an off word"


def test_a_changed_value_takes_effect_at_the_next_read(monkeypatch):
    """Values are parsed once per raw value, never cached past a change (tests and users set
    variables at run time)."""
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "3")
    assert settings.TIMEOUT_S.get() == 3.0 and settings.watchdog() == (3_000_000_000, "exit")
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "4")
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_ACTION", "trap")
    assert settings.TIMEOUT_S.get() == 4.0 and settings.watchdog() == (4_000_000_000, "trap")
    assert settings.watchdog_raw() in (None, (b"4", b"trap"))


def test_switches_take_words_and_refuse_the_rest():
    for on in ("1", "true", "ON", "yes"):
        assert settings.TRACE.get({"SYNCOPATE_TRACE": on}) is True
    for off in ("0", "false", "Off", "no"):
        assert settings.TRACE.get({"SYNCOPATE_TRACE": off}) is False
    with pytest.raises(SyncopateError, match="SYNCOPATE_TRACE='2'"):
        settings.TRACE.get({"SYNCOPATE_TRACE": "2"})
    # SYNCOPATE: exactly 1 also installs the hook; an off word turns the fused ops off
    assert [settings.SYNCOPATE.get({"SYNCOPATE": v}) for v in ("1", "0", "off", "yes")] == \
        [True, False, False, None]


def test_scope_sets_and_restores(monkeypatch):
    monkeypatch.setenv("SYNCOPATE_TIMEOUT_S", "7")
    monkeypatch.delenv("SYNCOPATE_TRACE", raising=False)
    with settings.scope(TIMEOUT_S=2, TRACE=True, LOWERING=None):
        assert os.environ["SYNCOPATE_TIMEOUT_S"] == "2" and settings.TRACE.get() is True
        assert "SYNCOPATE_LOWERING" not in os.environ
    assert os.environ["SYNCOPATE_TIMEOUT_S"] == "7" and "SYNCOPATE_TRACE" not in os.environ
    with pytest.raises(TypeError, match="TIMEOUT_S"):
        with settings.scope(TIMEOUT=2):
            pass
    with pytest.raises(SyncopateError, match="SYNCOPATE_TIMEOUT_S='soon'"):
        with settings.scope(TIMEOUT_S="soon"):
            pass
    assert os.environ["SYNCOPATE_TIMEOUT_S"] == "7"


def test_lowering_choices_are_the_compilers():
    assert {settings.LOWERING.get({"SYNCOPATE_LOWERING": v})
            for v in chunk_table.LOWERINGS} == set(chunk_table.LOWERINGS)
