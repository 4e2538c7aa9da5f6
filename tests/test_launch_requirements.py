"""The one launch-requirement check (``syncopate.abi.check_launch``) and the emulator calling it.

The compiler bakes facts into a fused kernel -- a required argument value (a stride matched to
the schedule tensor's layout), an upper bound (a mask ``cols < n_cols`` over a dim of 64), the
program-id axes it reads.  The runtime refuses a launch that breaks one; the emulator used to
emulate it and report the races it causes (issue 28, item 6).  Both now call the same check and
raise the same ``LaunchRequirementError``.  The runtime side:
tests/runtime/test_fused_launch_requirements.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from syncopate import abi
from syncopate.emulate import PerRank, emulate
from syncopate.errors import LaunchError, LaunchRequirementError
from syncopate.schedule import all_gather

from corpus import unseen as U

SIG = {"inp_ptr": "*fp32", "out_ptr": "*fp32", "n_cols": "i32", "stride": "i32",
       "BLOCK": "constexpr"}
ROWS, COLS = 64, 64


def run(n_cols=COLS, stride=COLS, grid=(ROWS,), seed=0):
    """``masked_rows`` (BLOCK=128 over rows of 64: the kernel requires ``stride == 64`` and
    ``n_cols <= 64``) all-gathered over 2 ranks, emulated under two policies."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    out = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    return emulate(U.masked_rows, signature=SIG, constexprs=dict(BLOCK=128),
                   schedule=all_gather([ROWS, COLS], "fp32", 2), operand="inp_ptr", grid=grid,
                   args=dict(inp_ptr=x, out_ptr=out, n_cols=n_cols, stride=stride),
                   policies=("in-order", "reverse"), launches=1, check=False), x


def violations_of(excinfo):
    return [(v.param, v.relation, v.required, v.given) for v in excinfo.value.violations]


# --------------------------------------------------------------------------- the check itself

def test_each_kind_of_fact_is_checked_and_named():
    req, ub = {"stride_am": 64}, {"n_cols": 64}
    assert abi.launch_violations({"stride_am": 64, "n_cols": 64}, req, ub, (4, 1), [0]) == []
    # a parameter the call does not give is not checked (the CLI knows only some)
    assert abi.launch_violations({}, req, ub) == []
    got = abi.launch_violations({"stride_am": 65, "n_cols": 65}, req, ub, (4, 2, 3), [0, 2])
    assert [(v.param, v.relation, v.required, v.given) for v in got] == [
        ("stride_am", "==", 64, 65), ("n_cols", "<=", 64, 65), ("grid[1]", "==", 1, 2)]
    # the grid axes the kernel reads may be larger than 1; unknown axes (None) are not checked
    assert abi.launch_violations({}, {}, {}, (4, 2, 3), [0, 1, 2]) == []
    assert abi.launch_violations({}, {}, {}, (4, 2, 3), None) == []


def test_check_raises_one_typed_error_listing_every_violation():
    with pytest.raises(LaunchRequirementError) as e:
        abi.check_launch({"stride_am": 32, "n_cols": 100}, {"stride_am": 64}, {"n_cols": 64},
                         where="rank 1: ")
    assert isinstance(e.value, LaunchError)
    msg = str(e.value)
    assert msg.startswith("rank 1: ")
    assert "stride_am=32" in msg and "stride_am == 64" in msg
    assert "n_cols=100" in msg and "n_cols <= 64" in msg
    assert "Pass operands with the layout" in msg


def test_the_abi_grid_refuses_through_the_same_check():
    a = abi.FusedABI("sm", 2, 2, 4, "pull", grid_axes=[0])
    assert a.grid((3,)) == (3 + 4, 1, 1)
    with pytest.raises(LaunchRequirementError, match=r"never reads tl\.program_id\(1\)") as e:
        a.grid((3, 2))
    assert violations_of(e) == [("grid[1]", "==", 1, 2)]


# ---------------------------------------------------------------------------- the emulator

def test_emulator_refuses_a_launch_past_an_upper_bound():
    """``n_cols = 100`` over rows of 64: the runtime refuses it; the emulator used to run it and
    report the out-of-row reads as races."""
    with pytest.raises(LaunchRequirementError) as e:
        run(n_cols=100)
    assert violations_of(e) == [("n_cols", "<=", 64, 100)]
    assert "n_cols=100" in str(e.value)


def test_emulator_refuses_a_launch_breaking_a_required_value():
    with pytest.raises(LaunchRequirementError) as e:
        run(stride=80)
    assert violations_of(e) == [("stride", "==", 64, 80)]


def test_emulator_refuses_a_grid_along_an_axis_the_kernel_never_reads():
    with pytest.raises(LaunchRequirementError) as e:
        run(grid=(ROWS, 2))
    assert violations_of(e) == [("grid[1]", "==", 1, 2)]


def test_emulator_names_the_rank_whose_arguments_break_it():
    with pytest.raises(LaunchRequirementError, match="^rank 1: ") as e:
        run(n_cols=PerRank([COLS, COLS + 1]))
    assert violations_of(e) == [("n_cols", "<=", 64, 65)]


@pytest.mark.parametrize("n_cols", [COLS, COLS // 2])
def test_emulator_runs_a_compliant_launch(n_cols):
    res, x = run(n_cols=n_cols)
    assert res.ok and not res.races and not res.mismatches
    for policy in res.policies:
        for r in range(2):
            got = res.outputs[policy][r]["out_ptr"].reshape(ROWS, COLS)
            np.testing.assert_array_equal(got[:, :n_cols], x[:, :n_cols])


def test_cli_refuses_the_launch_with_one_line(tmp_path, capsys):
    """``syncopate emulate`` with ``--arg n_cols=48`` over rows of 32: exit 1, one typed line
    naming the argument, the bound and the value (not an emulation reporting races)."""
    from syncopate.cli import main
    from syncopate.schedule import dumps
    sched = tmp_path / "ag.json"
    sched.write_text(dumps(all_gather([64, 32], "bf16", 2, split=2)))
    args = ["emulate", "corpus.unseen:masked_rows", "--schedule", str(sched),
            "--operand", "inp_ptr", "--signature",
            "inp_ptr=*bf16,out_ptr=*bf16,n_cols=i32,stride=i32", "--constexpr", "BLOCK=64",
            "--grid", "64", "--arg", "inp_ptr=64x32", "--arg", "out_ptr=zeros:64x32",
            "--arg", "stride=32", "--policies", "in-order"]
    assert main(args + ["--arg", "n_cols=32"]) == 0
    capsys.readouterr()
    assert main(args + ["--arg", "n_cols=48"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "n_cols=48 (the kernel was compiled for n_cols <= 32" in err
    assert "race" not in out + err
