"""``syncopate schedule``: template commands, check (exit codes and where output goes), show;
in-process through ``main(argv)`` and once through the installed console script."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from syncopate.cli import COMMAND_MODULES, build_parser, main
from syncopate.schedule import all_gather, dump, load, loads, verify


def run(argv, capsys):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_all_gather_to_file(tmp_path: Path, capsys):
    out_file = tmp_path / "ag.json"
    rc, out, err = run(["schedule", "all-gather", "--shape", "8192,4096", "--dtype", "bf16",
                        "--world-size", "2", "--split", "2", "-o", str(out_file)], capsys)
    assert rc == 0 and err == ""
    assert out == f"wrote {out_file}: 4 chunks, world size 2\n"
    s = load(out_file)
    verify(s)
    assert s == all_gather((8192, 4096), "bf16", 2, split=2)


def test_template_to_stdout(capsys):
    rc, out, _ = run(["schedule", "reduce-scatter", "--shape", "10x3", "--world-size", "3",
                      "--order", "ring", "--tensor", "P"], capsys)
    assert rc == 0
    s = loads(out)
    verify(s)
    assert s.meta["template"] == {"name": "reduce_scatter", "shape": [10, 3], "dtype": "bf16",
                                  "world_size": 3, "dim": 0, "order": "ring", "mode": "push",
                                  "split": 1, "tensor": "P"}


@pytest.mark.parametrize("argv, name", [
    (["all-gather", "--order", "ring", "--mode", "push", "--dim", "1"], "all_gather"),
    (["reduce-scatter", "--split", "3"], "reduce_scatter"),
    (["all-reduce", "--mode", "pull", "--dtype", "fp32"], "all_reduce"),
    (["all-to-all", "--split-dim", "0", "--concat-dim", "1"], "all_to_all"),
    (["ring-pass", "--split", "2"], "ring_pass"),
])
def test_every_template_command(argv, name, capsys):
    rc, out, _ = run(["schedule", argv[0], "--shape", "12,6", "--world-size", "4", *argv[1:]],
                     capsys)
    assert rc == 0
    s = loads(out)
    verify(s)
    assert s.meta["template"]["name"] == name


def test_template_argument_errors(capsys):
    # Usage errors are argparse's: exit status 2.
    with pytest.raises(SystemExit) as e:
        main(["schedule", "all-gather", "--shape", "8,x", "--world-size", "2"])
    assert e.value.code == 2
    assert "is not a shape" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["schedule", "all-gather", "--shape", "8", "--world-size", "0"])
    assert e.value.code == 2
    assert "'0' must be a positive integer" in capsys.readouterr().err
    # Values the template refuses: exit status 1 with the template's message.
    rc, out, err = run(["schedule", "all-gather", "--shape", "8", "--world-size", "2",
                        "--dim", "3"], capsys)
    assert rc == 1 and out == ""
    assert err.startswith("error: all_gather: dim must be a dim of shape [8]")


def test_check_ok(tmp_path: Path, capsys):
    path = tmp_path / "ag.json"
    dump(all_gather((64, 8), "bf16", 4, order="ring"), path)
    rc, out, err = run(["schedule", "check", str(path)], capsys)
    assert (rc, out, err) == (0, "ok\n", "")


def test_check_reports_every_problem_on_stderr(tmp_path: Path, capsys):
    doc = json.loads(all_gather((8, 2), "bf16", 2).to_json())
    doc["chunks"][0]["offsets"] = [6, 0]  # out of bounds: rows 6..10 of 8
    doc["chunks"][1]["dst"] = 0  # src == dst
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    rc, out, err = run(["schedule", "check", str(path)], capsys)
    assert rc == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 2 and all(line.startswith("error: chunk ") for line in lines)
    assert "chunk 0 (A rank 1 -> 0, pull, step 0, offsets [6, 0] sizes [4, 2])" in lines[0]
    assert "out of bounds" in lines[0]
    assert "src == dst == 0" in lines[1]


def test_check_semantic_problem(tmp_path: Path, capsys):
    doc = json.loads(all_gather((8, 2), "bf16", 2).to_json())
    del doc["chunks"][1]
    path = tmp_path / "short.json"
    path.write_text(json.dumps(doc))
    rc, _, err = run(["schedule", "check", str(path)], capsys)
    assert rc == 1
    assert err == ("error: tensor A: final placement not met: rank 1 must end with offsets "
                   "[0, 0] sizes [8, 2] complete (final[1]) but lacks offsets [0, 0] sizes "
                   "[4, 2] (it holds nothing there); add chunks that deliver the complete value "
                   "to rank 1, or remove the region from its final placement\n")


def test_check_unreadable_or_malformed(tmp_path: Path, capsys):
    rc, _, err = run(["schedule", "check", str(tmp_path / "missing.json")], capsys)
    assert rc == 1 and err.startswith("error: cannot read schedule file")
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "syncopate.schedule", "version": 1,')
    rc, _, err = run(["schedule", "check", str(bad)], capsys)
    assert rc == 1 and "not valid JSON" in err and str(bad) in err


def test_show(tmp_path: Path, capsys):
    path = tmp_path / "ag.json"
    dump(all_gather((8192, 4096), "bf16", 2, split=2), path)
    rc, out, err = run(["schedule", "show", str(path), "--backend", "sm",
                        "--comm-programs", "16"], capsys)
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"schedule {path}: world size 2, 4 chunks, 64.0 MiB"
    assert lines[1].startswith("template all_gather: shape=[8192, 4096] dtype=bf16")
    assert "rank 0: receives 2, sends 2, runs 2" in lines
    header = next(line for line in lines if line.strip().startswith("step"))
    assert header.split() == ["step", "chunk", "dir", "peer", "mode", "reduce", "tensor",
                              "region", "bytes", "after"]
    row = next(line for line in lines if line.split()[:3] == ["0", "0", "recv"])
    assert row.split() == ["0", "0", "recv", "1", "pull*", "none", "A", "[4096:6144,",
                           "0:4096]", "16.0", "MiB", "-"]
    assert any(line.startswith("cost model: backend sm, 16 comm programs: 4 chunks") for line in lines)
    assert any(line.startswith("  comm per rank (ms): 0: ") for line in lines)
    assert not any("fused" in line for line in lines)


def test_show_with_compute_and_backend(tmp_path: Path, capsys):
    path = tmp_path / "ag.json"
    dump(all_gather((8192, 4096), "bf16", 2, split=2), path)
    rc, out, _ = run(["schedule", "show", str(path), "--backend", "ce", "--compute-us", "200"],
                     capsys)
    assert rc == 0
    assert "cost model: backend ce: 4 chunks" in out and "fused" in out
    assert "fused per rank (ms): 0: " in out


def test_show_invalid_schedule(tmp_path: Path, capsys):
    doc = json.loads(all_gather((8, 2), "bf16", 2).to_json())
    doc["chunks"][1]["reduce"] = "sum"
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    rc, out, err = run(["schedule", "show", str(path)], capsys)
    assert rc == 1
    assert "rank 0:" in out and "cost model" not in out  # the plan, no estimate
    assert err.startswith("error: chunk 1 (A rank 0 -> 1, pull, sum, step 0")


def test_parser_is_extensible():
    # Other commands plug in through COMMAND_MODULES + register_commands(subparsers).
    assert "syncopate.schedule_cli" in COMMAND_MODULES
    parser = build_parser()
    args = parser.parse_args(["schedule", "check", "x.json"])
    assert callable(args.func)
    with pytest.raises(SystemExit) as e:
        parser.parse_args([])
    assert e.value.code == 2


def test_console_script(tmp_path: Path):
    exe = shutil.which("syncopate", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("the syncopate console script is not installed next to this Python "
                    "(pip install -e . installs it)")
    path = tmp_path / "rp.json"
    r = subprocess.run([exe, "schedule", "ring-pass", "--shape", "16,4", "--world-size", "4",
                        "-o", str(path)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([exe, "schedule", "check", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert (r.returncode, r.stdout, r.stderr) == (0, "ok\n", "")
    doc = json.loads(path.read_text())
    for c in doc["chunks"]:  # forward at the step the data arrives, without after: a race
        c["step"], c["after"] = 0, []
    path.write_text(json.dumps(doc))
    r = subprocess.run([exe, "schedule", "check", str(path)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 1 and r.stdout == "" and "error: chunk" in r.stderr
