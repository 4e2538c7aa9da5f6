"""The Triton compile hook: idempotent, chains other hooks, never touches an unfused compile,
keys fused compiles apart from unfused ones, dumps IR on request, installs from SYNCOPATE=1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import syncopate
from syncopate.schedule import all_gather
from syncopate_mlir import hook

TARGET = GPUTarget("cuda", 90, 32)


@triton.jit
def copy_rows(a_ptr, out_ptr, K, BM: tl.constexpr, BK: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BM + tl.arange(0, BM)
    cols = tl.arange(0, BK)
    x = tl.load(a_ptr + rows[:, None] * K + cols[None, :])
    tl.store(out_ptr + rows[:, None] * K + cols[None, :], x * 2)


SIG = {"a_ptr": "*bf16", "out_ptr": "*bf16", "K": "i32", "BM": "constexpr", "BK": "constexpr"}
CX = {"BM": 64, "BK": 64}


@pytest.fixture
def clean_hook():
    saved = triton.knobs.runtime.add_stages_inspection_hook
    hook.uninstall()
    triton.knobs.runtime.add_stages_inspection_hook = None
    yield
    triton.knobs.runtime.add_stages_inspection_hook = saved


def _unfused():
    return triton.compile(ASTSource(copy_rows, SIG, CX), target=TARGET)


def test_install_is_idempotent_and_chains_a_previous_hook(clean_hook):
    seen = []
    triton.knobs.runtime.add_stages_inspection_hook = lambda *a: seen.append(list(a[1]))
    hook.install()
    first = triton.knobs.runtime.add_stages_inspection_hook
    hook.install()
    assert triton.knobs.runtime.add_stages_inspection_hook is first
    stages = {"ttir": None, "ttgir": None, "llir": None}
    first(None, stages, None, None, 90)
    assert seen == [["ttir", "ttgir", "llir"]], "the previous hook was not called"
    assert list(stages) == ["ttir", "syncopate", "ttgir", "llir"]
    hook.uninstall()
    assert triton.knobs.runtime.add_stages_inspection_hook is not first


def test_unfused_compile_is_untouched_by_the_hook(clean_hook):
    plain = _unfused()
    hook.install()
    with_hook = triton.compile(ASTSource(copy_rows, SIG, CX), target=TARGET,
                               options={"debug": False})
    assert with_hook.asm["ttir"] == plain.asm["ttir"]
    assert with_hook.asm["ptx"] == plain.asm["ptx"]
    # the stage passes the module through: what it stores is the unfused TTIR itself
    assert with_hook.asm.get("syncopate", with_hook.asm["ttir"]) == plain.asm["ttir"]
    assert "syncopate" not in with_hook.metadata._fields


def test_fused_and_unfused_compiles_never_share_a_cache_entry(clean_hook):
    sched = all_gather([256, 64], "bf16", 2)
    fused = syncopate.compile(copy_rows, signature=SIG, constexprs=CX, schedule=sched,
                              operand="a_ptr", backend="ce")
    plain = _unfused()
    assert fused.kernel.hash != plain.hash
    assert "ld.acquire.sys" in fused.asm["ptx"] and "ld.acquire.sys" not in plain.asm["ptx"]
    again = _unfused()
    assert again.hash == plain.hash and "ld.acquire.sys" not in again.asm["ptx"]
    # a different schedule is a different fused binary
    other = syncopate.compile(copy_rows, signature=SIG, constexprs=CX,
                              schedule=all_gather([256, 64], "bf16", 2, split=2),
                              operand="a_ptr", backend="ce")
    assert other.kernel.hash != fused.kernel.hash


def test_dump_ir_writes_each_pass(tmp_path, monkeypatch, clean_hook):
    monkeypatch.setenv("SYNCOPATE_DUMP_IR", str(tmp_path))
    # a schedule no other test uses, so the compile is not a cache hit
    sched = all_gather([256, 64], "bf16", 2, split=4)
    syncopate.compile(copy_rows, signature=SIG, constexprs=CX, schedule=sched, operand="a_ptr",
                      backend="ce")
    files = sorted(p.name for p in tmp_path.rglob("*.mlir"))
    assert files and files[0].startswith("01-structurize-returns")
    assert any("insert-waits" in f for f in files) and any("lower-ce" in f for f in files)


def test_syncopate_env_installs_the_hook_at_import():
    code = "import syncopate\nfrom syncopate_mlir import hook\nprint(hook.installed())"
    env = dict(os.environ, SYNCOPATE="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
    env["SYNCOPATE"] = "0"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_compile_errors_are_typed():
    sched = all_gather([256, 64], "bf16", 2)
    with pytest.raises(syncopate.CompileError, match="unknown operand 'b_ptr'"):
        syncopate.compile(copy_rows, signature=SIG, constexprs=CX, schedule=sched,
                          operand="b_ptr", backend="ce")
    with pytest.raises(syncopate.CompileError, match="points to fp16 but the schedule"):
        syncopate.compile(copy_rows, signature={**SIG, "a_ptr": "*fp16"}, constexprs=CX,
                          schedule=sched, operand="a_ptr", backend="ce")
    with pytest.raises(syncopate.ScheduleError):
        syncopate.compile(copy_rows, signature=SIG, constexprs=CX, schedule="{not json",
                          operand="a_ptr", backend="ce")
    with pytest.raises(syncopate.ScheduleError, match="version"):
        syncopate.compile(copy_rows, signature=SIG, constexprs=CX,
                          schedule='{"format": "syncopate.schedule", "version": 2}',
                          operand="a_ptr", backend="ce")
    with pytest.raises(syncopate.CompileError, match="unknown backend"):
        syncopate.compile(copy_rows, signature=SIG, constexprs=CX, schedule=sched,
                          operand="a_ptr", backend="nccl")


def test_shape_mismatch_between_schedule_and_kernel_is_a_typed_error():
    """K is a constexpr 128 here, but the schedule's A has 64 columns: the analysis matches the
    row stride against the schedule and refuses at compile time."""
    sig = {**SIG, "K": "constexpr"}
    with pytest.raises(syncopate.CompileError, match="64"):
        syncopate.compile(copy_rows, signature=sig, constexprs={**CX, "K": 128},
                          schedule=all_gather([256, 64], "bf16", 2), operand="a_ptr",
                          backend="ce")
