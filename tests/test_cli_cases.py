"""The command-line failures a new user met (issue 14, "No raw tracebacks"), one test each.

Each test names the case and what it did before: the point is the message the user now gets
(exit 1 for bad input, 2 for bad usage, one line that says what to change).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from syncopate.cli import main, run_handler
from syncopate.schedule import all_gather, dumps

REPO = Path(__file__).resolve().parents[1]

KERNEL_SRC = textwrap.dedent("""
    import triton
    import triton.language as tl


    @triton.jit
    def kernel(a_ptr, out_ptr, K, BM: tl.constexpr, BK: tl.constexpr):
        pid = tl.program_id(0)
        rows = pid * BM + tl.arange(0, BM)
        cols = tl.arange(0, BK)
        x = tl.load(a_ptr + rows[:, None] * K + cols[None, :])
        tl.store(out_ptr + rows[:, None] * K + cols[None, :], x * 2)


    @triton.jit
    def kernel_act(a_ptr, out_ptr, K, BM: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr):
        pid = tl.program_id(0)
        rows = pid * BM + tl.arange(0, BM)
        cols = tl.arange(0, BK)
        x = tl.load(a_ptr + rows[:, None] * K + cols[None, :])
        if ACT == "double":
            x = x * 2
        tl.store(out_ptr + rows[:, None] * K + cols[None, :], x)
""")
SIG = ["--signature", "a_ptr=*bf16,out_ptr=*bf16,K=i32", "--constexpr", "BM=64",
       "--constexpr", "BK=64"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A user's folder: their kernel module (a name no other test imports) and a schedule."""
    (tmp_path / "cli_case_kernels.py").write_text(KERNEL_SRC)
    (tmp_path / "ag.json").write_text(dumps(all_gather([256, 64], "bf16", 2, split=2)))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # undo the cwd the CLI puts there
    monkeypatch.delitem(sys.modules, "cli_case_kernels", raising=False)
    return tmp_path


def run(argv, capsys):
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return rc, out, err


def compile_argv(kernel, *extra):
    return ["compile", kernel, "--schedule", "ag.json", "--operand", "a_ptr", "--backend", "ce",
            *extra]


def test_module_function_from_the_kernels_own_folder_with_the_console_script(workdir):
    """Before: ModuleNotFoundError -- the console script does not put the current folder on
    the import path (``python -m`` does). Now the CLI puts it there, as ``python -m`` would."""
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    (bin_dir / "syncopate").write_text("import sys\nfrom syncopate.cli import main\n"
                                       "sys.exit(main())\n")
    r = subprocess.run([sys.executable, str(bin_dir / "syncopate"),
                        *compile_argv("cli_case_kernels:kernel", *SIG)],
                       cwd=workdir, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "compiled kernel fused (ce)" in r.stdout


def test_a_kernel_file_path(workdir, capsys):
    rc, out, err = run(compile_argv("./cli_case_kernels.py:kernel", *SIG), capsys)
    assert rc == 0, err


def test_unknown_kernel_name_in_a_module(workdir, capsys):
    """Before: AttributeError. Now: the module, and the @triton.jit functions it has."""
    rc, _, err = run(compile_argv("cli_case_kernels:kernal", *SIG), capsys)
    assert rc == 1
    assert "has no function 'kernal'; its @triton.jit functions: kernel" in err


def test_unknown_module(workdir, capsys):
    rc, _, err = run(compile_argv("no_such_module_xyz:kernel", *SIG), capsys)
    assert rc == 1 and err.count("\n") == 1
    assert "cannot import module 'no_such_module_xyz'" in err and "path/to/" in err


def test_not_a_jit_function(workdir, capsys):
    rc, _, err = run(compile_argv("cli_case_kernels:tl", *SIG), capsys)
    assert rc == 1 and "is not a @triton.jit function" in err


@pytest.mark.parametrize("sig, expect", [
    ("a_ptr", "'a_ptr' is not NAME=TYPE"),                 # before: ValueError
    ("a_ptr=int,out_ptr=*bf16,K=i32", "unknown type 'int'"),  # before: KeyError: 'int'
])
def test_malformed_signature(workdir, capsys, sig, expect):
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", "--signature", sig,
                                  "--constexpr", "BM=64", "--constexpr", "BK=64"), capsys)
    assert rc == 2 and expect in err and err.count("error:") == 1


def test_malformed_constexpr(workdir, capsys):
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", *SIG, "--constexpr", "BM"), capsys)
    assert rc == 2 and "--constexpr 'BM' is not NAME=VALUE" in err


def test_constexpr_that_is_no_parameter(workdir, capsys):
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", *SIG, "--constexpr", "BN=3"),
                     capsys)
    assert rc == 1 and "has no parameter 'BN'" in err


@pytest.mark.parametrize("shape, expect", [
    ("8192,7168", "has 2 size(s); gemm-ptr (M,N,K of the local GEMM) takes 3"),  # ValueError
    ("8192,x,4096", "mixes ',' and 'x'"),                                   # ValueError
    ("0,64,64", "is not a shape"),                                          # compiled M=0
])
def test_bad_gemm_shape(workdir, capsys, shape, expect):
    rc, _, err = run(compile_argv("gemm-ptr", "--shape", shape), capsys)
    assert rc == 2 and expect in err


def test_shape_with_x_is_accepted_explicitly_and_means_the_same(capsys):
    """Before: ``--shape 8192x4096`` was read as 8192,4096 silently (undocumented). Now both
    forms are documented, read by one parser for every command, and never mixed."""
    _, with_x, _ = run(["schedule", "all-gather", "--shape", "8192x4096", "--world-size", "2"],
                       capsys)
    _, with_comma, _ = run(["schedule", "all-gather", "--shape", "8192,4096",
                            "--world-size", "2"], capsys)
    import json
    assert with_x == with_comma
    assert json.loads(with_x)["tensors"]["A"]["shape"] == [8192, 4096]
    rc, _, err = run(["schedule", "all-gather", "--shape", "8192,x,4096", "--world-size", "2"],
                     capsys)
    assert rc == 2 and "mixes ',' and 'x'" in err
    from syncopate.cli import build_parser
    help_text = build_parser()._subparsers._group_actions[0].choices["schedule"] \
        ._subparsers._group_actions[0].choices["all-gather"].format_help()
    assert "8192x4096" in help_text


def test_gemm_dtype_fp32(workdir, capsys):
    """Before: ValueError from the GEMM config. Now argparse names the choices."""
    rc, _, err = run(compile_argv("gemm-ptr", "--shape", "256,128,64", "--dtype", "fp32"),
                     capsys)
    assert rc == 2 and "invalid choice: 'fp32' (choose from 'bf16', 'fp16')" in err


def test_options_that_do_not_apply_are_refused(workdir, capsys):
    rc, _, err = run(compile_argv("gemm-ptr", "--shape", "256,128,64", *SIG), capsys)
    assert rc == 2 and "do not apply to kernel gemm-ptr" in err
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", "--shape", "256,128,64", *SIG),
                     capsys)
    assert rc == 2 and "--shape does not apply" in err


def test_output_into_a_missing_folder_and_onto_a_file(workdir, capsys):
    """Before: FileNotFoundError. Now ``-o`` creates missing folders (compile and schedule
    alike) and refuses a file in the way before compiling."""
    rc, _, err = run(compile_argv("gemm-ptr", "--shape", "256,128,64", "-o", "a/b/out"), capsys)
    assert rc == 0, err
    assert (workdir / "a/b/out/02-check-accesses.mlir").exists()
    rc, _, err = run(compile_argv("gemm-ptr", "--shape", "256,128,64", "-o", "ag.json"), capsys)
    assert rc == 1 and "a file is in the way" in err
    rc, _, err = run(["schedule", "all-gather", "--shape", "64,8", "--world-size", "2",
                      "-o", "new/folder/ag.json"], capsys)
    assert rc == 0 and (workdir / "new/folder/ag.json").exists()
    rc, _, err = run(["schedule", "all-gather", "--shape", "64,8", "--world-size", "2",
                      "-o", "new"], capsys)
    assert rc == 1 and "is a directory; give a file name" in err


def test_schedule_check_reads_stdin(workdir, capsys, monkeypatch):
    """Before: ``syncopate schedule check -`` was refused (no file '-')."""
    import io
    monkeypatch.setattr(sys, "stdin", io.StringIO((workdir / "ag.json").read_text()))
    assert run(["schedule", "check", "-"], capsys)[:2] == (0, "ok\n")
    monkeypatch.setattr(sys, "stdin", io.StringIO("{not json"))
    rc, _, err = run(["schedule", "show", "-"], capsys)
    assert rc == 1 and err.startswith("error: <stdin>: not valid JSON")


def test_schedule_show_names_a_tensor_it_does_not_have(workdir, capsys):
    rc, _, err = run(["schedule", "show", "ag.json", "--tensor", "B"], capsys)
    assert rc == 1 and "the schedule has no such tensor; it has A" in err


def test_syncopate_opt_version():
    """Before: ``syncopate-opt --version`` exited 2 (unknown argument)."""
    from syncopate import __version__
    r = subprocess.run([sys.executable, "-m", "syncopate_mlir.opt", "--version"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"syncopate-opt {__version__}"


def test_python_dash_m_syncopate():
    r = subprocess.run([sys.executable, "-m", "syncopate", "--version"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("syncopate ")


@pytest.mark.parametrize("target, expect", [
    (("cuda", 80), "needs sm_90 or newer"),  # before: 2000 lines of PTX, "report a Triton bug"
    (("hip", "gfx942"), "CUDA only"),        # before: a bare AssertionError
])
def test_target_is_checked_up_front(target, expect):
    import syncopate
    from syncopate.errors import CompileError
    from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
    cfg = default_config(256, 128, 64, "bf16", "ptr")
    sig, cx = compile_args("matmul_ptr_kernel", "bf16", cfg)
    with pytest.raises(CompileError, match=expect):
        syncopate.compile(kernel_fn("matmul_ptr_kernel"), signature=sig, constexprs=cx,
                          schedule=all_gather([256, 64], "bf16", 2), operand="a_ptr",
                          backend="ce", target=target, attrs=compile_attrs("matmul_ptr_kernel"))


def test_an_error_in_the_users_kernel_is_one_line_with_its_location(workdir, capsys):
    """Triton's CompilationError (source excerpt, chained traceback) becomes file:line: why."""
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", "--signature",
                                  "a_ptr=*bf16,out_ptr=*bf16,K=i32", "--constexpr", "BM=48",
                                  "--constexpr", "BK=64"), capsys)
    assert rc == 1 and err.count("\n") == 1
    line = KERNEL_SRC.splitlines().index(
        "    rows = pid * BM + tl.arange(0, BM)") + 1
    assert f"cli_case_kernels.py:{line}: Triton cannot compile kernel: arange's range must be " \
           f"a power of 2" in err


def test_stage_files_are_numbered_alike_by_dash_o_and_dump_ir(workdir, capsys, monkeypatch):
    """Before: ``-o`` numbered the stages from 01, ``SYNCOPATE_DUMP_IR`` from 00."""
    monkeypatch.setenv("SYNCOPATE_DUMP_IR", str(workdir / "dump"))
    rc, _, err = run(compile_argv("gemm-ptr", "--shape", "256,128,64", "-o", "out"), capsys)
    assert rc == 0, err
    dashed = sorted(p.name for p in (workdir / "out").glob("*.mlir"))
    dumped = sorted(p.name for p in (workdir / "dump").rglob("*.mlir"))
    assert dashed[0].startswith("01-") and set(dashed) == set(dumped)


def test_demo_counts_the_parameters_append_abi_params_adds():
    """Before: ``== append-abi-params: no change`` although the pass adds the ABI parameters."""
    from syncopate.compile_cli import _pass_changes
    before = "  tt.func public @k(%a_ptr: !tt.ptr<bf16>, %K: i32) {"
    after = "  tt.func public @k(%a_ptr: !tt.ptr<bf16>, %K: i32, %syn_flags: !tt.ptr<i32>, " \
            "%syn_rank: i32) {"
    assert _pass_changes(before, after, {}, {}) == "+2 parameters (syn_flags, syn_rank)"
    assert _pass_changes(after, after, {"tt.load": 1}, {"tt.load": 2}) == "tt.load +1"
    assert _pass_changes(after, after, {}, {}) == "no change"


def test_scripts_check_shows_why_tests_were_skipped():
    """Before: ``pytest -q`` hid the GPU tests' skip reasons; ``-rs`` lists each with it."""
    pytest_lines = [ln for ln in (REPO / "scripts/check").read_text().splitlines()
                    if "pytest" in ln and not ln.lstrip().startswith("#")]
    assert pytest_lines and all(" -rs" in ln for ln in pytest_lines)


def test_an_unexpected_exception_is_one_line_not_a_traceback(capsys, monkeypatch):
    def broken(args):
        raise RuntimeError("boom\nsecond line")
    monkeypatch.delenv("SYNCOPATE_TRACEBACK", raising=False)
    assert run_handler(broken, None, "syncopate x") == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error in syncopate x: RuntimeError: boom" in err
    assert "SYNCOPATE_TRACEBACK=1" in err
    monkeypatch.setenv("SYNCOPATE_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        run_handler(broken, None, "syncopate x")


def test_an_unreadable_file_is_one_line(capsys):
    def reads(args):
        open(os.path.join("/nonexistent-dir-xyz", "f.json"))
    assert run_handler(reads, None, "syncopate x") == 1
    assert capsys.readouterr().err == \
        "error: /nonexistent-dir-xyz/f.json: No such file or directory\n"


EMULATE = ["emulate", "cli_case_kernels:kernel", "--schedule", "ag.json", "--operand", "a_ptr",
           *SIG]


@pytest.mark.parametrize("extra, expect", [
    ([], "needs --grid"),                                             # was exit 1
    (["--grid", "0"], "give 1 to 3 positive integers"),               # emulated 0 programs: "ok"
    (["--grid", "4", "--arg", "K=64", "--arg", "K=3"], "--arg K is given twice"),  # K=3 won
    (["--grid", "4", "--arg", "out_ptr=perm:-3"], "is not a shape"),  # out-of-bounds report
    # issue 28: a number for a pointer became a one-element tensor ("out-of-bounds ... element
    # 1 of 1"); a shape for a scalar, a tensor where the kernel adds an integer
    (["--grid", "4", "--arg", "out_ptr=32"],
     "--arg out_ptr=32: out_ptr is a pointer (*bf16); give it a tensor: out_ptr=RxC or "
     "out_ptr=randn:N (random values), out_ptr=zeros:RxC or out_ptr=perm:N"),
    (["--grid", "4", "--arg", "K=64x64"], "--arg K=64x64: K is a scalar (i32); give it a number"),
])
def test_emulate_grid_and_args_are_checked(workdir, capsys, extra, expect):
    rc, _, err = run(EMULATE + extra, capsys)
    assert rc == 2 and expect in err and err.count("\n") == 1


def test_schedule_show_compute_time_must_be_a_number(workdir, capsys):
    """Before: ``--compute-us nan`` printed nan estimates; ``-5`` a float-noise message."""
    for bad in ("nan", "-5"):
        rc, _, err = run(["schedule", "show", "ag.json", "--compute-us", bad], capsys)
        assert rc == 2 and "must be a number >= 0" in err


def test_syncopate_opt_checks_the_pipeline_before_reading_input(monkeypatch, capsys):
    """Before: an unknown pass with empty stdin exited 0 (nothing was parsed to run it on)."""
    import io

    from syncopate_mlir import opt
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert opt.main(["-p", "no-such-pass"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("syncopate-opt: error: Unrecognized passes: ['no-such-pass']")
    assert "registered passes: " in err and "tile-remap" in err


def test_a_huge_world_size_is_refused_not_out_of_memory(workdir, capsys):
    """Found by mutating schedule JSON: ``"world_size": 10**12`` ran the verifier out of
    memory (an internal error); the template commands built W*(W-1) chunks first."""
    import json
    doc = json.loads((workdir / "ag.json").read_text())
    doc["world_size"] = 10 ** 12
    (workdir / "huge.json").write_text(json.dumps(doc))
    rc, _, err = run(["schedule", "check", "huge.json"], capsys)
    assert rc == 1 and "world_size 1000000000000 is more than 4096 ranks" in err
    rc, _, err = run(["schedule", "all-gather", "--shape", "8,8", "--world-size", "100000000"],
                     capsys)
    assert rc == 1 and "world_size 100000000 is more than 4096 ranks" in err


# ------------------------------------------------------------ issue 28, item 7: what a user hit

EMULATE_OK = EMULATE + ["--grid", "4", "--arg", "a_ptr=256x64", "--arg", "out_ptr=zeros:256x64",
                        "--arg", "K=64"]


@pytest.mark.parametrize("policy", ["behind:2", "behind:7", "behind:-3"])
def test_behind_must_name_a_rank_of_the_schedule(workdir, capsys, policy):
    """Before: ``--policies behind:7`` at W = 2 ran one interleaving (as in-order) and exited
    0. Now every rank outside -W..W-1 is refused, on the command line and in the API."""
    rc, _, err = run(EMULATE_OK + ["--policies", policy], capsys)
    rank = policy.split(":")[1]
    assert rc == 1 and err.count("\n") == 1, err
    assert err == (f"error: policy {policy!r}: there is no rank {rank} in a world of 2; behind "
                   f"takes a rank from 0 to 1 (or -1 to -2, counted from the last)\n")


def test_behind_in_the_api_and_its_valid_ranks(workdir):
    import numpy as np

    import syncopate
    from syncopate.cli_kernel import load_user_kernel
    from syncopate.emulate.scheduler import parse_policy
    from syncopate.errors import EmulationError

    for r in range(-2, 2):  # every rank of W = 2, either way of counting
        assert parse_policy(f"behind:{r}", 2) == ("behind", r)
    kernel = load_user_kernel("cli_case_kernels:kernel")
    rng = np.random.default_rng(3)
    with pytest.raises(EmulationError, match="there is no rank 7 in a world of 2"):
        syncopate.emulate(kernel, signature={"a_ptr": "*bf16", "out_ptr": "*bf16", "K": "i32"},
                          constexprs={"BM": 64, "BK": 64}, schedule="ag.json", operand="a_ptr",
                          grid=(4,), args=dict(a_ptr=rng.standard_normal((256, 64)),
                                               out_ptr=np.zeros((256, 64)), K=64),
                          policies=["in-order", "behind:7"])


@pytest.mark.parametrize("value", ["abc", "gelu", "64x", "[64]"])
def test_a_constexpr_value_that_is_no_value(workdir, capsys, value):
    """Before: ``--constexpr BM=abc`` reached Triton as text and came back as an internal
    AttributeError("'str' object has no attribute 'type'")."""
    argv = compile_argv("cli_case_kernels:kernel", "--signature", "a_ptr=*bf16,out_ptr=*bf16,K=i32",
                        "--constexpr", f"BM={value}", "--constexpr", "BK=64")
    rc, _, err = run(argv, capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert (f"--constexpr BM={value}: {value!r} is not a value a constexpr takes; give BM an "
            f"integer (BM=64), a float (BM=0.5), True/False, or quoted text (BM='gelu') for a "
            f"string constexpr") in err


def test_a_string_constexpr_is_quoted_text(workdir, capsys):
    from syncopate.cli_args import constexpr
    assert [constexpr(t) for t in ("A=64", "A=0.5", "A=True", "A='gelu'", 'A="x y"')] == \
        [("A", 64), ("A", 0.5), ("A", True), ("A", "gelu"), ("A", "x y")]
    rc, out, err = run(compile_argv("cli_case_kernels:kernel_act", "--signature",
                                    "a_ptr=*bf16,out_ptr=*bf16,K=i32", "--constexpr", "BM=64",
                                    "--constexpr", "BK=64", "--constexpr", "ACT='double'"), capsys)
    assert rc == 0, err
    assert "compiled kernel_act fused (ce)" in out


def test_randn_gives_a_pointer_a_random_vector():
    """``--arg bias_ptr=randn:32``: the random 1-D tensor a number used to stand for."""
    import numpy as np

    from syncopate.emulate import PerRank
    from syncopate.emulate_cli import _arg_value
    rng = np.random.default_rng(5)
    v = _arg_value("bias_ptr", "randn:32", "*fp32", rng, 2, per_rank=False, np=np,
                   PerRank=PerRank)
    assert v.shape == (32,) and v.dtype == np.float32 and len(np.unique(v)) == 32
    w = _arg_value("x_ptr", "randn:4x8", "*bf16", rng, 2, per_rank=True, np=np, PerRank=PerRank)
    assert [a.shape for a in w] == [(4, 8), (4, 8)]
    assert not np.array_equal(w[0], w[1])


def _rs_push(workdir):
    from syncopate.schedule import reduce_scatter
    (workdir / "rs.json").write_text(dumps(reduce_scatter([256, 64], "bf16", 2, mode="push",
                                                          split=2)))
    (workdir / "ag_push.json").write_text(dumps(all_gather([256, 64], "bf16", 2, mode="push",
                                                           split=2)))


def test_compile_prints_the_schedules_mode(workdir, capsys):
    """Before: a push reduce-scatter printed "mode pull" (the ABI's word: which side the comm
    programs copy from). Now the schedule's mode, and why the kernel runs it otherwise."""
    _rs_push(workdir)
    sig = ["--signature", "a_ptr=*bf16,out_ptr=*bf16,K=i32", "--constexpr", "BM=64",
           "--constexpr", "BK=64"]
    rc, out, err = run(["compile", "cli_case_kernels:kernel", "--schedule", "rs.json",
                        "--operand", "out_ptr", "--comm-programs", "2", *sig], capsys)
    assert rc == 0, err
    assert ("2 comm programs, mode push (run as pull: the sm comm programs run each sum chunk on "
            "its destination, which reads the peers' partials and adds them);") in out
    for sched, mode in (("ag_push.json", "push"), ("ag.json", "pull")):
        rc, out, err = run(["compile", "cli_case_kernels:kernel", "--schedule", sched,
                            "--operand", "a_ptr", "--comm-programs", "2", *sig], capsys)
        assert rc == 0, err
        assert f"2 comm programs, mode {mode}; launch requirements" in out


def test_comm_programs_past_what_the_gpu_holds(workdir, capsys):
    """Before: ``--comm-programs 100000`` compiled silently (comm programs that spin need an
    SM each, all at once). Refused before compiling from the kernel's warps, after compiling
    from its shared memory too; and refused where the backend has none."""
    user = ["--signature", "a_ptr=*bf16,out_ptr=*bf16,K=i32", "--constexpr", "BM=64",
            "--constexpr", "BK=64"]
    limit = ("give at most 2111 (the sm backend's default is 16)")
    for argv in (["compile", "cli_case_kernels:kernel", "--schedule", "ag.json", "--operand",
                  "a_ptr", "--backend", "sm", "--comm-programs", "100000", *user],
                 EMULATE_OK + ["--comm-programs", "100000"],
                 ["demo", "--comm-programs", "100000"]):
        rc, _, err = run(argv, capsys)
        assert rc == 2 and err.count("\n") == 1, err
        assert "--comm-programs 100000: the comm programs spin until their chunks have moved" \
            in err
        assert "132 SMs x " in err
    assert limit in err or "give at most 1055" in err  # the demo's GEMM runs 8 warps
    rc, _, err = run(["compile", "gemm-ptr", "--shape", "256,128,64", "--schedule", "ag.json",
                      "--operand", "a_ptr", "--comm-programs", "1000"], capsys)
    assert rc == 2 and err.count("\n") == 1, err
    assert "programs of this kernel (4 warps, 65536 B shared memory): give at most 395" in err
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", "--comm-programs", "4", *user),
                     capsys)
    assert rc == 2 and "--comm-programs does not apply to backend ce" in err
    # the cost model gives each comm program an SM (estimate() refused it only with compute)
    rc, out, err = run(["schedule", "show", "ag.json", "--comm-programs", "100000"], capsys)
    assert rc == 2 and not out and err == (
        "syncopate schedule show: error: --comm-programs 100000: the cost model runs each comm "
        "program on an SM of its own, and an H200 has 132: give at most 131, leaving the "
        "compute an SM\n")
    rc, out, _ = run(["schedule", "show", "ag.json", "--comm-programs", "131"], capsys)
    assert rc == 0 and "131 comm programs" in out


def test_request_json_records_the_kernels_dtype(workdir, capsys):
    """Before: ``request.json`` said ``"dtype": "bf16"`` (the GEMMs' --dtype default) for a user
    kernel over fp32; --dtype given to such a kernel was ignored."""
    import json
    (workdir / "ag32.json").write_text(dumps(all_gather([256, 64], "fp32", 2, split=2)))
    for dtype in ("fp32", "fp16", "bf16"):
        (workdir / f"ag_{dtype}.json").write_text(dumps(all_gather([256, 64], dtype, 2, split=2)))
        rc, _, err = run(["compile", "cli_case_kernels:kernel", "--schedule", f"ag_{dtype}.json",
                          "--operand", "a_ptr", "--backend", "ce", "--signature",
                          f"a_ptr=*{dtype},out_ptr=*{dtype},K=i32", "--constexpr", "BM=64",
                          "--constexpr", "BK=64", "-o", f"out_{dtype}"], capsys)
        assert rc == 0, err
        assert json.loads((workdir / f"out_{dtype}" / "request.json").read_text())["dtype"] == dtype
    rc, _, err = run(compile_argv("cli_case_kernels:kernel", "--dtype", "fp16", *SIG), capsys)
    assert rc == 2 and "--dtype does not apply to kernel cli_case_kernels:kernel" in err
