"""``syncopate emulate``: exit 0 when clean, 1 with a typed message on a problem, 2 on bad
usage; never a raw traceback."""

from __future__ import annotations

import pytest

from syncopate.cli import main
from syncopate.schedule import all_gather, dump


@pytest.fixture()
def ag_json(tmp_path):
    path = tmp_path / "ag.json"
    dump(all_gather([256, 64], "bf16", 2, mode="push", split=2), str(path))
    return str(path)


def test_clean_exits_0(ag_json, capsys):
    rc = main(["emulate", "gemm-ptr", "--shape", "256,128,64", "--schedule", ag_json,
               "--operand", "a_ptr", "--world-size", "2", "--policies", "in-order,late,random:3",
               "--launches", "2", "--seed", "1"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "clean" in out and "3 interleavings" in out


def test_mismatched_operand_exits_1_with_typed_message(ag_json, capsys):
    rc = main(["emulate", "gemm-ptr", "--shape", "256,128,64", "--schedule", ag_json,
               "--operand", "c_ptr", "--policies", "in-order"])
    err = capsys.readouterr().err
    assert rc == 1
    assert err.startswith("error: ") and "Traceback" not in err
    # the compiler's soundness gate refuses it before the emulator runs (docs/soundness.md)
    assert "the kernel writes 'c_ptr', but the schedule delivers tensor 'A'" in err


def test_wrong_world_size_exits_1(ag_json, capsys):
    assert main(["emulate", "gemm-ptr", "--shape", "256,128,64", "--schedule", ag_json,
                 "--operand", "a_ptr", "--world-size", "4"]) == 1
    assert "--world-size 4" in capsys.readouterr().err


def test_bad_policy_exits_1(ag_json, capsys):
    assert main(["emulate", "gemm-ptr", "--shape", "256,128,64", "--schedule", ag_json,
                 "--operand", "a_ptr", "--policies", "sideways"]) == 1
    assert "unknown policy" in capsys.readouterr().err


def test_bad_usage_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        main(["emulate", "gemm-ptr", "--shape", "256,128,64"])
    assert e.value.code == 2
