"""``syncopate demo`` (the main job) and ``syncopate compile`` from the command line."""

from __future__ import annotations

import json

import pytest

from syncopate.cli import main
from syncopate.schedule import all_gather, dumps


def test_demo_shows_every_pass_and_the_ptx(capsys, tmp_path):
    assert main(["demo", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for name in ("append-abi-params", "tile-remap", "insert-waits", "insert-signals",
                 "partition-sms", "resolve-chunks", "lower-sm"):
        assert f"== {name}" in out
    assert "syncopate.remap" in out and "syncopate.wait_region" in out
    assert "== append-abi-params: +7 parameters (syn_flags," in out
    assert "ld.acquire.sys loads:" in out and "Compiled to cubin for sm_90" in out
    assert (tmp_path / "kernel.cubin").stat().st_size > 0
    abi = json.loads((tmp_path / "abi.json").read_text())
    assert abi["world_size"] == 2 and abi["comm_programs"] == 16


def test_compile_writes_every_stage(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    sched.write_text(dumps(all_gather([1024, 512], "bf16", 2, split=2)))
    out = tmp_path / "out"
    rc = main(["compile", "gemm-ptr", "--shape", "1024,512,512", "--schedule", str(sched),
               "--operand", "a_ptr", "--backend", "ce", "-o", str(out)])
    assert rc == 0, capsys.readouterr().err
    assert (out / "kernel.ptx").read_text().count("ld.acquire.sys") >= 1
    assert sorted(p.name for p in out.glob("0*.mlir"))[0] == "01-structurize-returns.mlir"


def test_compile_bad_input_exits_1_with_a_typed_message(tmp_path, capsys):
    sched = tmp_path / "ag.json"
    sched.write_text(dumps(all_gather([1024, 512], "bf16", 2)))
    rc = main(["compile", "gemm-ptr", "--shape", "1024,512,512", "--schedule", str(sched),
               "--operand", "x_ptr"])
    err = capsys.readouterr().err
    assert rc == 1 and "unknown operand 'x_ptr'" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "syncopate.schedule", "version": 7}')
    rc = main(["compile", "gemm-ptr", "--shape", "1024,512,512", "--schedule", str(bad),
               "--operand", "a_ptr"])
    assert rc == 1 and "version" in capsys.readouterr().err
    bad.write_text("{not json")
    rc = main(["compile", "gemm-ptr", "--shape", "1024,512,512", "--schedule", str(bad),
               "--operand", "a_ptr"])
    assert rc == 1 and capsys.readouterr().err.startswith("error:")


@pytest.mark.parametrize("kernel", ["gemm-ptr", "gemm-tma"])
def test_compile_refuses_a_shape_that_contradicts_the_schedule(kernel, tmp_path, capsys):
    """--shape M=2048 with a schedule whose A has 1024 rows: the kernel would read rows the
    schedule does not have. Refused at compile time, exit 1, no traceback."""
    sched = tmp_path / "ag.json"
    sched.write_text(dumps(all_gather([1024, 256], "bf16", 2)))
    rc = main(["compile", kernel, "--shape", "2048,512,256", "--schedule", str(sched),
               "--operand", "a_ptr"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "--shape contradicts the schedule: M=2048" in err and "Traceback" not in err
