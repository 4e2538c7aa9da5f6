"""Compiler fuzzing (docs/fuzzing.md): the generator's unit tests, a CI-sized fuzz run that
must find no failure, and one ``xfail(strict=True)`` test per compiler bug the fuzzer found
and that is not fixed yet (when it is, the test passes unexpectedly and the entry in
``syncopate.fuzz.known`` must go)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from syncopate.fuzz import ADDRESSING, BODIES, TILINGS, generate
from syncopate.fuzz.__main__ import format_summary, main, run_many, write_case
from syncopate.fuzz.gen import BACKENDS
from syncopate.fuzz.oracle import Verdict, check_unfused, run_case
from syncopate.schedule import verify

#: CI share of the fuzzing: seeds 0..CI_CASES-1, about 0.2 s each on the 2-core CPU (measured:
#: docs/fuzzing.md); the nightly script runs thousands more
CI_CASES = int(os.environ.get("SYNCOPATE_FUZZ_CI_CASES", "800"))
GEN_SEEDS = range(600)


# ------------------------------------------------------------------------------ generator

@pytest.fixture(scope="module")
def cases():
    return [generate(s) for s in GEN_SEEDS]


def test_every_style_is_generated(cases):
    seen = {k: Counter(str(c.styles[k]) for c in cases)
            for k in ("body", "addressing", "tiling", "template", "backend", "world_size",
                      "role", "dtype")}
    assert set(seen["body"]) == set(BODIES)
    assert set(seen["addressing"]) == set(ADDRESSING)
    assert set(seen["tiling"]) == set(TILINGS)
    assert set(seen["template"]) == {"all_gather", "reduce_scatter", "all_reduce", "all_to_all",
                                     "ring_pass"}
    assert set(seen["backend"]) == set(BACKENDS)
    assert set(seen["world_size"]) == {"2", "3", "4"}
    assert set(seen["role"]) == {"in", "out"} and set(seen["dtype"]) == {"bf16", "fp32"}
    # the common case dominates: world size 2, all-gather / reduce-scatter
    assert seen["world_size"]["2"] > len(cases) / 2
    assert seen["template"]["all_gather"] + seen["template"]["reduce_scatter"] > len(cases) / 2


def test_generation_is_deterministic_and_schedules_verify(cases):
    for c in cases[:50]:
        again = generate(c.seed)
        assert again.source == c.source and again.schedule_json() == c.schedule_json()
        assert again.grid == c.grid and again.comm_programs == c.comm_programs
        verify(c.schedule)
        t = next(t for t in c.tensors if t.name == c.operand)
        assert list(c.schedule.tensors[next(iter(c.schedule.tensors))].shape) == list(t.shape)
        assert f"def {c.kernel_name}(" in c.source
        assert 1 <= c.comm_programs <= 4 and len(c.policies) == 4


def test_shapes_are_small(cases):
    for c in cases:
        assert 48 <= c.scalars["M"] <= 256 and 16 <= c.scalars["N"] <= 128, c.style_line


def test_forced_styles():
    c = generate(7, body="gemm", addressing="block_ptr", tiling="persistent_np",
                 template="reduce_scatter", role="out", backend="ce", world_size=3)
    assert c.styles["body"] == "gemm" and "tl.make_block_ptr" in c.source
    assert "tl.num_programs(0)" in c.source and "tl.dot" in c.source
    assert c.operand == "c_ptr" and c.backend == "ce" and c.schedule.world_size == 3
    d = generate(7, body="copy", addressing="tensor_desc", tiling="derived")
    assert "tl.make_tensor_descriptor" in d.source and "pn = pid - pm * n_n" in d.source
    g = generate(7, body="scale", addressing="gather_hint", tiling="grid2d")
    assert "sl.hint_region2(x_ptr, src, src + 1" in g.source and "tl.program_id(1)" in g.source
    with pytest.raises(ValueError, match="not one of"):
        generate(7, body="conv")


def _one_per_style(cases, key):
    out = {}
    for c in cases:
        out.setdefault((c.styles["body"], c.styles[key]), c)
    return list(out.values())


def test_sources_compile_for_sm90_and_compute_what_they_mean(cases):
    """One case of every (body, addressing) pair goes through Triton's frontend for sm_90 and
    its unfused kernel, run by the emulator's interpreter, matches numpy."""
    from syncopate.emulate import kernel_ttir
    from syncopate.fuzz import load_kernel
    picked = _one_per_style(cases, "addressing")
    assert len(picked) >= 25
    for c in picked:
        ttir = kernel_ttir(load_kernel(c), c.signature, c.constexprs, c.attrs)
        assert f"tt.func public @{c.kernel_name}" in ttir
        assert check_unfused(ttir, c) is None, c.style_line


# ------------------------------------------------------------------------------ oracle

def test_known_bugs_are_matched_narrowly(monkeypatch):
    """A recorded bug matches only its own styles and failure kind (the list is empty while
    every finding is fixed; the matcher is checked with a stand-in entry)."""
    from syncopate.fuzz import known
    entry = known.Known("stand-in", "all_to_all reads before arrival", 204,
                        lambda c, v: c.styles.get("template") == "all_to_all"
                        and v.kind == "read-before-arrival")
    monkeypatch.setattr(known, "KNOWN", [entry])
    c = generate(0, template="all_gather", role="in", body="copy")
    v = Verdict(0, "failure", kind="read-before-arrival")
    assert known.match_known(c, v) is None
    c2 = generate(0, template="all_to_all", role="in", body="copy")
    assert known.match_known(c2, v) == "stand-in"
    assert known.match_known(c2, Verdict(0, "failure", kind="crash")) is None


@pytest.mark.parametrize("seed,what", [
    (75, "remap-reorders-reduction: a row sum over column tiles gathered along the columns"),
    (204, "all_to_all-undelivered-read: a kernel reading the whole tensor of an all-to-all"),
    (624, "all_reduce-push-unwaited: all_reduce on sm, the all-gather phase pushed"),
])
def test_fuzzer_findings_are_fixed(seed, what):
    """The fuzzer's first findings, fixed in the compiler: each replays clean or refused."""
    c = generate(seed)
    v = run_case(c)
    assert v.outcome in ("clean", "refused"), f"{what}: {v.line(c)}"


def test_failures_are_written_for_replay(tmp_path):
    c = generate(3)
    d = write_case(str(tmp_path), c, Verdict(3, "failure", "a detail", "mismatch",
                                             report="the report"))
    names = sorted(os.listdir(d))
    assert names == ["case.json", "kernel.py", "report.txt", "schedule.json"]
    meta = json.loads(open(os.path.join(d, "case.json")).read())
    assert meta["replay"] == "python -m syncopate.fuzz --replay 3"
    assert meta["seed"] == 3 and meta["outcome"] == "failure"
    assert open(os.path.join(d, "kernel.py")).read() == c.source
    assert "the report" in open(os.path.join(d, "report.txt")).read()


def test_cli(tmp_path, capsys):
    assert main(["--count", "3", "--seed", "1", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "3 cases in" in out and "addressing" in out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["cases"] == 3 and sum(summary["counts"].values()) == 3
    assert main(["--show", "1"]) == 0
    assert "@triton.jit" in capsys.readouterr().out
    assert main(["--replay", "1"]) == 0
    assert main(["--count", "x"]) == 2


def test_refusal_is_typed_and_says_what_to_change():
    # a column tile with no mask and no hint: check-accesses must refuse and ask for a mask
    c = generate(7, body="copy", addressing="ptr_nomask", tiling="derived", role="in",
                 template="all_gather")
    v = run_case(c)
    assert v.outcome == "refused", v.detail
    assert v.detail.startswith("CompileError") and "Mask the access" in v.detail


# ------------------------------------------------------------------------------ CI fuzzing

def test_fuzz_ci_no_failures():
    """The CI share of fuzzing: every case is clean, refused, or a known (recorded) bug."""
    summary = run_many(range(CI_CASES), echo=lambda *_: None)
    text = format_summary(summary)
    print(text)
    counts = summary["counts"]
    assert summary["cases"] == CI_CASES
    assert counts["failure"] == 0, json.dumps(summary["notable"].get("failure"), indent=1)
    assert counts["invalid"] <= max(1, CI_CASES // 100), summary["notable"].get("invalid")
    # the fuzzer must mostly reach the emulator, not stop at refusals
    assert counts["clean"] >= CI_CASES // 2, text


# ------------------------------------------------------------------------------ fixed bugs

def test_found_hint_on_a_derived_box_is_honoured():
    """Seed 18 (fixed in passes/access.py): a column tile ``pn * BN`` with no mask but a
    ``hint_region2`` right before the load was refused with "state its box with
    syncopate.language.hint_region" -- the hint was only read when the box could not be
    derived, so the advice could never be followed.  Now it fuses and emulates clean."""
    c = generate(18)
    assert c.styles["addressing"] == "hint" and "sl.hint_region2(x_ptr" in c.source
    v = run_case(c)
    assert v.outcome == "clean", v.line(c)


def test_found_reduced_tolerance_under_cancellation():
    """Seed 10 (fixed in the emulator): a bf16 row-sum reduce-scatter over 3 ranks was reported
    as a mismatch because the tolerance scaled with |sum| while the partials' roundings scale
    with the partials (cancellation)."""
    v = run_case(generate(10))
    assert v.outcome == "clean", v.detail
