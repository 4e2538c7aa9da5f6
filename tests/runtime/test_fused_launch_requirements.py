"""FusedKernel.launch refuses a call that breaks what the compiled kernel requires (an argument's
required value, an upper bound, no element of a produced tensor stored twice), through the
checks the emulator calls too (``syncopate.abi.check_launch``, ``syncopate.tiling.check_stores``;
the emulator side: tests/test_launch_requirements.py, tests/test_probe_unseen3.py), and
enqueues nothing; a compliant call still launches.

CPU only: the device side is recorded instead of run (the fixture of test_fused_launch.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.errors import LaunchError, LaunchRequirementError  # noqa: E402
from runtime_fakes import fk_values  # noqa: E402
from test_fused_launch import _fast_path_fixture  # noqa: E402


def _with_requirements(monkeypatch):
    """The fixture's kernel, whose configuration's ABI requires ``stride_am == 32`` (the
    schedule tensor's row) and ``M <= 64`` (a mask over its 64 rows)."""
    from syncopate.runtime import fused as fmod
    c, fk, calls = _fast_path_fixture(monkeypatch)
    a = abi.FusedABI("sm", 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True,
                     requirements={"stride_am": 32}, upper_bounds={"M": 64}, grid_axes=[0])

    def config(spec_, options):
        cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32),
                           flag_addrs=[0, 0])
        fk._new_epoch_word(cfg)
        return cfg
    monkeypatch.setattr(fk, "_config", config)
    return c, fk, calls


@pytest.mark.parametrize("position,value,violation", [
    (6, 48, ("stride_am", "==", 32, 48)),  # stride_am
    (3, 65, ("M", "<=", 64, 65)),          # M
])
def test_runtime_refuses_a_call_breaking_a_requirement(monkeypatch, position, value, violation):
    c, fk, calls = _with_requirements(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = fk_values(c, A)
    assert fk.launch((3,), vals) == 1  # compliant: launched
    bad = list(vals)
    bad[position] = value
    with pytest.raises(LaunchRequirementError) as e:
        fk.launch((3,), bad)
    assert [(v.param, v.relation, v.required, v.given) for v in e.value.violations] == \
        [violation]
    assert len(calls["launched"]) == 1  # nothing enqueued for the refused call
    assert fk.launch((3,), vals) == 2   # and the compliant call still runs


def test_runtime_refuses_a_grid_along_an_unread_axis(monkeypatch):
    c, fk, calls = _with_requirements(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    with pytest.raises(LaunchRequirementError) as e:
        fk.launch((3, 2), fk_values(c, A))
    assert [(v.param, v.given) for v in e.value.violations] == [("grid[1]", 2)]
    assert calls["launched"] == []


def test_runtime_refuses_a_launch_that_stores_an_element_twice(monkeypatch):
    """The configuration's ABI records a store of 16 x 32 boxes at rows ``pid * (M // 8)``:
    with M = 64 the programs' boxes overlap by half, so a grid of 2 programs is refused before
    anything is enqueued (:func:`syncopate.tiling.check_stores`, the emulator's check too);
    one program is launched."""
    from syncopate.runtime import fused as fmod
    from syncopate.tiling import Op, Step, StoreSlice
    c, fk, calls = _fast_path_fixture(monkeypatch)
    steps = (Step(Op.PID, bits=32), Step(Op.ARG, name="M", bits=32),
             Step(Op.CONST, value=8, bits=32), Step(Op.DIVS, (1, 2), bits=32),
             Step(Op.MUL, (0, 3), bits=32), Step(Op.CONST))
    a = abi.FusedABI("sm", 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True,
                     stores=[StoreSlice("A", "k.py:7:4", (64, 32), steps, (4, 5), (16, 32))])

    def config(spec_, options):
        cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32),
                           flag_addrs=[0, 0])
        fk._new_epoch_word(cfg)
        return cfg
    monkeypatch.setattr(fk, "_config", config)
    vals = fk_values(c, c.empty((64, 32), torch.bfloat16))
    with pytest.raises(LaunchError, match=r"element \(8, 0\) of tensor 'A'.* is stored twice in "
                                          r"one launch .*the store at k\.py:7:4 in program "
                                          r"\(0, 0, 0\), and by the store at k\.py:7:4 in "
                                          r"program \(1, 0, 0\)"):
        fk.launch((2,), vals)
    assert calls["launched"] == []
    assert fk.launch((1,), vals) == 1


def test_runtime_refuses_a_launch_its_tile_remap_would_not_renumber(monkeypatch):
    """The configuration's ABI records a remap of the coordinate ``pid`` over 4 tiles that
    rank 1 rotates by 2: a grid of 4 programs computes every tile and is launched; a grid of 2
    computes tiles 0 and 1 only, which the remap would move to 2 and 3, so it is refused before
    anything is enqueued (:func:`syncopate.tiling.check_remaps`, the emulator's check too)."""
    from syncopate.runtime import fused as fmod
    from syncopate.tiling import Op, RemapSlice, Step
    c, fk, calls = _fast_path_fixture(monkeypatch)
    a = abi.FusedABI("sm", 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True,
                     remap_checks=[RemapSlice("A", 0, "k.py:3:4", 4, (0, 1, 2, 3, 2, 3, 0, 1),
                                              (Step(Op.PID, bits=32),), 0, ())])

    def config(spec_, options):
        cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32),
                           flag_addrs=[0, 0])
        fk._new_epoch_word(cfg)
        return cfg
    monkeypatch.setattr(fk, "_config", config)
    vals = fk_values(c, c.empty((64, 32), torch.bfloat16))
    with pytest.raises(LaunchError, match=r"on rank 1, program \(0, 0, 0\) has coordinate 0 and "
                                          r"would run as coordinate 2, a tile this launch of "
                                          r"grid \(2, 1, 1\) computes 0 time\(s\)"):
        fk.launch((2,), vals)
    assert calls["launched"] == []
    assert fk.launch((4,), vals) == 1
