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


def test_emulate_any_kernel_with_args_and_grid(tmp_path, capsys):
    """A kernel of another style (a gather through loaded row indices) from the command line."""
    sched = tmp_path / "ag.json"
    from syncopate.schedule import all_gather, dumps
    sched.write_text(dumps(all_gather([64, 32], "bf16", 2, split=2)))
    rc = main(["emulate", "corpus.unseen:row_gather", "--schedule", str(sched),
               "--operand", "inp_ptr", "--signature",
               "inp_ptr=*bf16,idx_ptr=*i32,out_ptr=*bf16,n_cols=i32,stride_in=i32,stride_out=i32",
               "--constexpr", "BLOCK=32", "--grid", "64", "--arg", "inp_ptr=64x32",
               "--arg", "idx_ptr=perm:64", "--arg", "out_ptr=zeros:64x32", "--arg", "n_cols=32",
               "--arg", "stride_in=32", "--arg", "stride_out=32", "--policies", "in-order,late"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "clean" in out


def test_emulate_any_kernel_needs_every_arg(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    from syncopate.schedule import all_gather, dumps
    sched.write_text(dumps(all_gather([64, 32], "bf16", 2, split=2)))
    rc = main(["emulate", "corpus.unseen:masked_rows", "--schedule", str(sched),
               "--operand", "inp_ptr", "--signature",
               "inp_ptr=*bf16,out_ptr=*bf16,n_cols=i32,stride=i32", "--constexpr", "BLOCK=32",
               "--grid", "64", "--arg", "inp_ptr=64x32"])
    err = capsys.readouterr().err
    assert rc == 1 and "missing out_ptr, n_cols, stride" in err and "Traceback" not in err


def test_emulate_a_directory_written_by_compile(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    from syncopate.schedule import all_gather, dumps
    sched.write_text(dumps(all_gather([256, 64], "bf16", 2, split=2)))
    out_dir = tmp_path / "fused"
    assert main(["compile", "gemm-ptr", "--shape", "256,128,64", "--schedule", str(sched),
                 "--operand", "a_ptr", "-o", str(out_dir)]) == 0
    assert (out_dir / "request.json").exists()
    capsys.readouterr()
    rc = main(["emulate", str(out_dir), "--policies", "in-order,late"])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "clean" in out
