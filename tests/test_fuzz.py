"""Compiler fuzzing (docs/fuzzing.md): the generator's unit tests (the atomics axis among
them), the oracle's verdicts on atomics, a CI-sized fuzz run that must find no failure, and
one ``xfail(strict=True)`` test per compiler bug the fuzzer found and that is not fixed yet
(when it is, the test passes unexpectedly and the entry in ``syncopate.fuzz.known`` must
go)."""

from __future__ import annotations

import json
import os
from collections import Counter

import numpy as np
import pytest

from syncopate.errors import CompileError
from syncopate.fuzz import ADDRESSING, BODIES, TILINGS, generate, oracle
from syncopate.fuzz.__main__ import format_summary, main, run_many, write_case
from syncopate.fuzz.atomics import LEGAL, OPS, WHERE
from syncopate.fuzz.gen import BACKENDS
from syncopate.fuzz.oracle import (Verdict, check_unfused, run_case, run_unfused,
                                   unexpected_notes)
from syncopate.schedule import verify

#: CI share of the fuzzing (docs/fuzzing.md): seeds 0..CI_CASES-1 as drawn (a quarter of them
#: with atomics), then, for every atomic pattern, the first CI_ATOMIC_SEEDS seeds that can
#: draw it; 0.2-0.5 s a case on the 2-core CPU (a GEMM's histogram up to a few seconds), so
#: the CI share stays under a minute.  ``SYNCOPATE_FUZZ_CI_CASES`` widens the first share;
#: the nightly script runs thousands.
CI_CASES = int(os.environ.get("SYNCOPATE_FUZZ_CI_CASES", "60"))
CI_ATOMIC_SEEDS = 2
LOCAL_PATTERNS = ("elem", "rows", "hist", "count", "split")
COMM_PATTERNS = ("tile", "scalar", "replace", "desc")
GEN_SEEDS = range(600)


# ------------------------------------------------------------------------------ generator

@pytest.fixture(scope="module")
def cases():
    return [generate(s) for s in GEN_SEEDS]


def test_every_style_is_generated(cases):
    seen = {k: Counter(str(c.styles[k]) for c in cases)
            for k in ("body", "addressing", "tiling", "template", "backend", "world_size",
                      "role", "dtype")}
    seen["atomic"] = Counter(c.styles.get("atomic", "none") for c in cases)
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
    # atomics are a share of the cases, not most of them
    assert set(seen["atomic"]) == set(WHERE) and seen["atomic"]["none"] > 0.6 * len(cases)


def test_every_atomic_shape_is_generated():
    """Every atomic op, every dtype the frontend takes for it (that the emulator stores), every
    local and comm pattern, scalar and tensor forms, masked and unmasked, show up."""
    local = [generate(s, atomic="local").atomic for s in range(1500)]
    comm = [generate(s, atomic="comm").atomic for s in range(400)]
    assert {(p.op, p.dtype) for p in local} == {(o, d) for o in OPS for d in LEGAL[o]}
    assert {p.pattern for p in local} == {"elem", "rows", "hist", "count", "split"}
    assert {p.pattern for p in comm} == {"tile", "scalar", "replace", "desc"}
    assert {p.form for p in local} == {"tensor", "scalar", "reduced"}
    assert {p.mask for p in local} == {"bounds", "pred", "none"}
    assert {p.mask for p in comm} == {"bounds", "none"}
    assert {p.op for p in comm} == set(OPS)
    assert {p.dtype for p in comm} == {"bf16", "fp32", "int32"}
    assert any(p.split > 1 for p in comm if p.pattern == "replace")

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
    k = generate(7, body="gemm", role="in", addressing="ptr_mask", tiling="grid2d",
                 atomic="local", atomic_pattern="split")
    assert "ks = tl.program_id(2)" in k.source and "tl.atomic_add(c_ptr" in k.source
    assert len(k.grid) == 3 and k.grid[2] == k.constexprs["SPLIT_K"] > 1
    assert "w_ptr" not in k.signature and "tl.store(c_ptr" not in k.source
    h = generate(7, body="copy", addressing="ptr_mask", atomic="local", atomic_pattern="hist",
                 atomic_op="max", atomic_dtype="uint32")
    assert h.signature["w_ptr"] == "*u32" and "tl.atomic_max(w_ptr + w_b" in h.source
    with pytest.raises(ValueError, match="not one of"):
        generate(7, body="copy", atomic="local", atomic_op="add", atomic_dtype="int16")


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
    (1809, "dot-layout: a GEMM gathered along K, tiles loaded in another memory layout"),
])
def test_fuzzer_findings_are_fixed(seed, what):
    """The fuzzer's first findings, fixed in the compiler: each replays clean or refused (the
    cases as found, before the atomics axis: ``atomic="none"``)."""
    c = generate(seed, atomic="none")
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
    assert main(["--show", "1", "--atomic", "comm"]) == 0
    assert "atomic=comm" in capsys.readouterr().out
    assert main(["--replay", "1"]) == 0
    assert main(["--count", "x"]) == 2


def test_refusal_is_typed_and_says_what_to_change():
    # a column tile with no mask and no hint: check-accesses must refuse and ask for a mask
    c = generate(7, body="copy", addressing="ptr_nomask", tiling="derived", role="in",
                 template="all_gather")
    v = run_case(c)
    assert v.outcome == "refused", v.detail
    assert v.detail.startswith("CompileError") and "Mask the access" in v.detail


# ------------------------------------------------------------------------------ atomics

_PAIRS = [(o, d) for o in OPS for d in LEGAL[o]]
#: a 2-D copy kernel with masks, fused with an all-gather of its input on the sm backend: it
#: compiles, so what an atomics case gets is the atomics' doing
_PLAIN = dict(body="copy", addressing="ptr_mask", tiling="row1d", role="in",
              template="all_gather", backend="sm", world_size=2)


@pytest.mark.parametrize("i", range(len(_PAIRS)), ids=[f"{o}-{d}" for o, d in _PAIRS])
def test_every_atomic_op_and_dtype_computes_what_it_means(i):
    """Every (atomic op, dtype) the axis draws, on a tensor no schedule moves: Triton's
    frontend takes the kernel for sm_90, and the unfused kernel, run by the emulator's
    interpreter, leaves in that tensor what the generator's numpy model says."""
    from syncopate.emulate import kernel_ttir
    from syncopate.fuzz import load_kernel
    from syncopate.fuzz.atomics import _ORDER_FREE
    op, dtype = _PAIRS[i]
    pats = ("elem", "rows", "hist", "count") if op in _ORDER_FREE else ("elem", "count")
    c = generate(i, **_PLAIN, atomic="local", atomic_op=op, atomic_dtype=dtype,
                 atomic_pattern=pats[i % len(pats)])
    ttir = kernel_ttir(load_kernel(c), c.signature, c.constexprs, c.attrs)
    assert "tt.atomic_" in ttir
    assert check_unfused(ttir, c) is None, c.style_line


def test_the_atomics_model_tells_ops_apart():
    """The numpy model is not vacuous: the same kernel with atomic_max written as atomic_min
    leaves something else than the model of atomic_max says."""
    from syncopate.emulate import kernel_ttir
    from syncopate.fuzz import load_kernel
    c = generate(5, **_PLAIN, atomic="local", atomic_op="max", atomic_dtype="int32",
                 atomic_pattern="rows")
    c.source = c.source.replace("tl.atomic_max", "tl.atomic_min")
    ttir = kernel_ttir(load_kernel(c), c.signature, c.constexprs, c.attrs)
    assert "w_ptr" in (check_unfused(ttir, c) or "")


@pytest.mark.parametrize("pattern,force,role", [
    ("tile", dict(_PLAIN), "delivers"),
    ("scalar", dict(_PLAIN, body="gemm"), "delivers"),
    ("replace", dict(_PLAIN, body="gemm", role="out", template="reduce_scatter"), "produces"),
    ("tile", dict(_PLAIN, role="out", template="reduce_scatter"), "produces"),
    ("desc", dict(_PLAIN, addressing="tensor_desc", dtype="fp32"), "delivers"),
])
def test_an_atomic_on_the_communicated_tensor_is_refused_naming_it(pattern, force, role):
    """An atomic on the communicated tensor, consumed or produced -- on the tile the kernel
    reads or writes, a counter in its first element, in place of the output's store
    (split-K), a TMA reduction -- is refused, and the refusal is the compiler's atomic message
    at the atomic's line, with the reason of the tensor's role."""
    c = generate(3, **force, atomic="comm", atomic_pattern=pattern)
    v = run_case(c)
    assert v.outcome == "refused", v.line(c)
    assert oracle.names_atomic(c, v.detail), v.detail
    assert f":{c.atomic.lines[0]}:" in v.detail and f"{role} tensor" in v.detail, v.detail


@pytest.mark.parametrize("op", [o for o in OPS if "int32" in LEGAL[o]])
def test_an_atomic_on_the_index_tensor_keeps_every_index_in_bounds(op):
    """Seed 30252 (atomic=comm, found invalid): an atomic on the gathered rows' index tensor
    (the communicated one) added 1 to an index, and a later program of the unfused kernel
    gathered the row past the last: a kernel that is wrong on one GPU.  Every op the axis
    draws for it leaves each index a row, even when every index is the last row."""
    from syncopate.emulate import kernel_ttir
    from syncopate.fuzz import load_kernel
    def on_index(seed):
        """The case of ``seed`` when its atomic goes to the index tensor with ``op`` and the
        kernel has several column tiles (later programs gather rows again), else None."""
        try:
            c = generate(seed, body="scale", addressing="gather_vec", tiling="colmajor",
                         role="in", template="all_gather", atomic="comm", atomic_op=op)
        except ValueError:      # this seed's communicated tensor does not take ``op``
            return None
        ok = c.operand == "idx_ptr" and c.scalars["N"] > c.constexprs["BN"]
        return c if ok else None

    c = next(c for c in map(on_index, range(300)) if c is not None)
    inputs = c.inputs(np.random.default_rng(c.seed))
    inputs["idx_ptr"] = np.full_like(inputs["idx_ptr"], c.scalars["M"] - 1)
    ttir = kernel_ttir(load_kernel(c), c.signature, c.constexprs, c.attrs)
    got = run_unfused(ttir, c, inputs)     # raises EmulationError on an out-of-bounds gather
    assert np.isfinite(got["y_ptr"].astype(np.float64)).all(), c.style_line


def test_the_oracle_fails_an_atomic_that_is_not_refused_or_refused_otherwise(monkeypatch):
    """What the oracle says when the compiler gets atomics wrong (the compiler stood in for):
    an atomic on the communicated tensor fused is ``atomic-not-refused``; refused with
    another message while the kernel without it compiles, ``atomic-wrong-refusal``; a kernel
    with atomics on a tensor no schedule moves refused although it compiles without them,
    ``atomic-refused``; refused the way the kernel without atomics is, refused."""
    from syncopate.fuzz import load_kernel
    fuse = oracle._fuse
    comm = generate(3, **_PLAIN, atomic="comm", atomic_pattern="tile")
    base = generate(3, **_PLAIN, atomic="none")
    monkeypatch.setattr(oracle, "_fuse", lambda kernel, case: fuse(load_kernel(base), base))
    assert run_case(comm).kind == "atomic-not-refused"

    def refuse(only_atomics):
        def stand_in(kernel, case):
            if case.atomic is not None or not only_atomics:
                raise CompileError("the kernel is refused for a reason that is not its atomic")
            return fuse(kernel, case)
        return stand_in
    monkeypatch.setattr(oracle, "_fuse", refuse(True))
    v = run_case(comm)
    assert (v.outcome, v.kind) == ("failure", "atomic-wrong-refusal"), v.line(comm)
    local = generate(3, **_PLAIN, atomic="local", atomic_pattern="elem")
    v = run_case(local)
    assert (v.outcome, v.kind) == ("failure", "atomic-refused"), v.line(local)
    monkeypatch.setattr(oracle, "_fuse", refuse(False))
    assert run_case(comm).outcome == "refused" and run_case(local).outcome == "refused"


def test_clean_allows_float_atomic_order_notes_and_nothing_looser():
    """A note is clean only when it is a float atomic order note on the tensor the case adds
    floats into atomically: on another tensor, in a case without float adds, or any other
    note, it is unexplained (a failure)."""
    note = ("float atomic order: rank 1, launch 2, w_ptr: 3 element(s) differ from the unfused "
            "kernel only within the rounding bound of their float atomic adds [random:3]")
    fadd = generate(3, **_PLAIN, atomic="local", atomic_op="add", atomic_dtype="fp32",
                    atomic_pattern="elem")
    assert unexpected_notes(fadd, [note]) == []
    assert unexpected_notes(fadd, [note.replace("w_ptr", "y_ptr")]) != []
    assert unexpected_notes(fadd, ["rank 0: something else"]) != []
    fmax = generate(3, **_PLAIN, atomic="local", atomic_op="max", atomic_dtype="fp32",
                    atomic_pattern="elem")
    iadd = generate(3, **_PLAIN, atomic="local", atomic_op="add", atomic_dtype="int32",
                    atomic_pattern="elem")
    for c in (fmax, iadd, generate(3, **_PLAIN, atomic="none")):
        assert unexpected_notes(c, [note]) == [note], c.style_line


def test_split_k_into_a_local_output_is_clean_with_float_atomic_order_notes():
    """Split-K: the schedule gathers A, each program adds its K slice's partial tile into C
    (not communicated) with tl.atomic_add; the fused programs run in another order, so C
    rounds differently -- clean, with the emulator's float atomic order notes."""
    c = generate(15, atomic="local")
    assert c.atomic.pattern == "split" and c.styles["body"] == "gemm" and c.operand != "c_ptr"
    v = run_case(c)
    assert v.outcome == "clean", v.line(c)
    assert "float atomic order" in v.report and v.notes > 0


# ------------------------------------------------------------------------------ CI fuzzing

def _fuzz(seeds, **force) -> tuple[dict, str]:
    """Run ``seeds`` (with ``force``'s styles pinned); every case must be clean, refused or a
    known (recorded) bug, the generator's invalid cases under 1% (none in a CI-sized run)."""
    summary = run_many(seeds, echo=lambda *_: None, force=force)
    text = format_summary(summary)
    print(text)
    counts = summary["counts"]
    assert summary["cases"] == len(seeds)
    assert counts["failure"] == 0, json.dumps(summary["notable"].get("failure"), indent=1)
    assert counts["invalid"] <= len(seeds) // 100, summary["notable"].get("invalid")
    return summary, text


def _drawable(n: int, **force) -> list[int]:
    """The first ``n`` seeds whose case can take ``force`` (not every kernel can have every
    pattern: split-K/N needs an output no schedule moves, a TMA reduction a descriptor)."""
    seeds = []
    for s in range(1000):
        try:
            generate(s, **force)
        except ValueError:
            continue
        seeds.append(s)
        if len(seeds) == n:
            return seeds
    raise AssertionError(f"no {n} seeds in 1000 draw {force}")


def test_fuzz_ci_no_failures():
    """The CI share of fuzzing: no failure, and the fuzzer mostly reaches the emulator."""
    summary, text = _fuzz(range(CI_CASES))
    assert summary["counts"]["clean"] >= CI_CASES // 2, text


@pytest.mark.parametrize("pattern", LOCAL_PATTERNS)
def test_fuzz_ci_atomics_on_a_tensor_no_schedule_moves(pattern):
    """Atomics on a tensor no schedule moves, every pattern (per element, per row, a
    histogram, a counter or election, split-K/N): no failure -- a kernel that fuses without
    its atomics is not refused with them, and the fused kernel leaves what the unfused one
    does (float adds within the emulator's float atomic order bound) -- and the pattern
    reaches the emulator clean."""
    force = dict(atomic="local", atomic_pattern=pattern)
    summary, text = _fuzz(_drawable(CI_ATOMIC_SEEDS, **force), **force)
    assert summary["counts"]["clean"] >= 1, text


@pytest.mark.parametrize("pattern", COMM_PATTERNS)
def test_fuzz_ci_atomics_on_the_communicated_tensor_are_refused(pattern):
    """An atomic on the communicated tensor, every pattern (the tile, a counter, in place of
    the store, a TMA reduction): every case is refused, with the compiler's atomic message at
    the atomic's line or the refusal the kernel without it gets (the oracle's check), and
    the first seed's stops at the atomic itself."""
    force = dict(atomic="comm", atomic_pattern=pattern)
    seeds = _drawable(CI_ATOMIC_SEEDS, **force)
    summary, text = _fuzz(seeds, **force)
    assert summary["counts"]["refused"] == len(seeds), text
    v = run_case(generate(seeds[0], **force))
    assert oracle.names_atomic(generate(seeds[0], **force), v.detail), v.detail


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
    v = run_case(generate(10, atomic="none"))
    assert v.outcome == "clean", v.detail
