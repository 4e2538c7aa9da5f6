"""Mutation testing of the soundness core with cosmic-ray (docs/mutation-testing.md).

Too slow for CI: run it before a release.  Each module of the core is mutated by cosmic-ray
(one mutant at a time, on a *copy* of the tracked tree, so the work tree is never touched) and
each mutant is judged by a fast selection of the tests that exercise that module -- its lit
files first, then the pytest files, both stopping at the first failure -- not the whole suite
(20 minutes a run here).  A mutant no selected test notices *survives*: a test is missing, or
the mutant is equivalent (docs/mutation-testing.md records which).

    pip install cosmic-ray          # into your venv; not a dependency of the project
    python scripts/mutation_test.py --sample 20              # every module, 20 mutants each
    python scripts/mutation_test.py --modules purity checker --sample 0   # all their mutants

Writes, under ``--workdir`` (default ``out/mutation``): the copy (``src/``, with this script
frozen beside it), one cosmic-ray session per module (``<module>.sqlite``, ``<module>.toml``),
``<module>.survivors.txt`` with each surviving mutant's diff, and ``scores.json``; prints the
score per module.  ``--run-tests MODULE`` is what each mutant runs (cosmic-ray's
``test-command``).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: module -> (paths to mutate, lit files, pytest files): the fast selection of each module,
#: the tests that exercise it (lit files of its pass, the pytest files that drive it)
MODULES = {
    "purity": (["passes/purity.py"],
               ["tile-remap-refusals.mlir", "tile-remap-loop-carried.mlir",
                "tile-remap-persistent.mlir", "tile-remap-gemm.mlir"],
               ["tests/test_remap_loop_carried.py"]),
    "tile_remap": (["passes/tile_remap.py"],
                   ["tile-remap-*.mlir"],
                   ["tests/test_remap_loop_carried.py", "tests/test_soundness.py"]),
    "insert_waits": (["passes/insert_waits.py"],
                     ["insert-waits-*.mlir", "pipeline-sm-*.mlir"],
                     ["tests/test_emulate_checker.py", "tests/test_soundness.py",
                      "tests/test_compile_fused.py::"
                      "test_warp_specialized_loops_are_refused_with_a_clear_error"]),
    "access_eval": (["passes/access_eval.py"],
                    ["access-*.mlir", "check-accesses*.mlir", "insert-waits-*.mlir",
                     "tile-remap-loop.mlir"],
                    ["tests/test_soundness.py"]),
    "verify": (["python/syncopate/schedule/verify.py",
                "python/syncopate/schedule/verify_extent.py",
                "python/syncopate/schedule/verify_graph.py",
                "python/syncopate/schedule/verify_structure.py"],
               [],
               ["tests/test_schedule_verify.py", "tests/test_schedule_soundness.py",
                "tests/test_schedule_templates.py", "tests/test_schedule_json.py",
                "tests/test_schedule_moe.py"]),
    "checker": (["python/syncopate/emulate/checker.py"],
                [],
                ["tests/test_emulate_checker.py", "tests/test_emulate_mutations.py"]),
    # last: the lead changes it concurrently (atomics); mutate this branch's copy only
    "access": (["passes/access.py"],
               ["access-*.mlir", "check-accesses*.mlir", "insert-waits-*.mlir",
                "append-abi-params-rank-view.mlir"],
               ["tests/test_soundness.py", "tests/test_access_hints.py"]),
}

#: operators left out: they mostly make code that cannot run at all (true division or powers
#: in integer index code, bit shifts, ``is`` for ``==``, a decorator removed, any variable
#: replaced by another) -- killed by any test, they would only dilute the sample
EXCLUDED_OPERATORS = [
    r"core/ReplaceBinaryOperator_\w+_(Pow|RShift|LShift|BitXor|Div)$",
    r"core/ReplaceComparisonOperator_(Eq|NotEq|Lt|LtE|Gt|GtE)_(Is|IsNot)$",
    r"core/ReplaceComparisonOperator_(Is|IsNot)_(Eq|NotEq|Lt|LtE|Gt|GtE)$",
    r"core/RemoveDecorator$",
    r"core/VariableReplacer$",
    r"core/VariableInserter$",
]


def _env(src: Path) -> dict:
    """The copy's packages ahead of the editable install (``syncopate_mlir.passes`` is the
    copy's ``passes/`` through a symlink, as the install maps it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(src / "python"), str(src)])
    return env


def make_copy(workdir: Path) -> Path:
    """A fresh copy of the tracked files of this checkout (as they are on disk)."""
    src = workdir / "src"
    if src.exists():
        shutil.rmtree(src)
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                           capture_output=True).stdout.decode().split("\0")
    for f in filter(None, files):
        dst = src / f
        dst.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / f).is_file():
            shutil.copy2(ROOT / f, dst)
    link = src / "syncopate_mlir" / "passes"
    if not link.exists():
        link.symlink_to(Path("..") / "passes")
    return src


def run_tests(module: str) -> int:
    """The selection of ``module`` in the current directory (the copy): lit, then pytest;
    exit status 0 when every test passes (the mutant survives)."""
    _, lit_files, py_files = MODULES[module]
    if lit_files:
        paths = sorted({p for pat in lit_files for p in glob.glob(f"lit_tests/{pat}")})
        rc = subprocess.call(["lit", "-q", "--max-failures=1", *paths],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if rc:
            return rc
    if py_files:
        return subprocess.call([sys.executable, "-m", "pytest", "-x", "-q",
                                "-p", "no:cacheprovider", *py_files],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return 0


def _config(module: str, timeout: float, runner: Path) -> str:
    paths, _, _ = MODULES[module]
    test = f"{sys.executable} {runner} --run-tests {module}"
    return "\n".join([
        "[cosmic-ray]",
        f"module-path = {json.dumps(paths)}",
        f"timeout = {timeout}",
        "excluded-modules = []",
        f"test-command = {json.dumps(test)}",
        "[cosmic-ray.distributor]",
        'name = "local"',
        "[cosmic-ray.filters.operators-filter]",
        f"exclude-operators = {json.dumps(EXCLUDED_OPERATORS)}",
        "",
    ])


def sample(session: Path, n: int, seed: int) -> tuple[int, int]:
    """Keep ``n`` pending mutants chosen at random (seeded), mark the rest skipped;
    ``(mutants after the operator filter, kept)``."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    with use_db(str(session), WorkDB.Mode.open) as db:
        pending = sorted(db.pending_work_items, key=lambda w: w.job_id)
        keep = pending if n <= 0 or n >= len(pending) else \
            random.Random(seed).sample(pending, n)
        kept = {w.job_id for w in keep}
        drop = [w.job_id for w in pending if w.job_id not in kept]
        if drop:
            db.set_multiple_results(drop, WorkResult(output="not sampled",
                                                     worker_outcome=WorkerOutcome.SKIPPED))
        return len(pending), len(keep)


def survivors(session: Path) -> list[dict]:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    out = []
    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.NORMAL and \
                    result.test_outcome == TestOutcome.SURVIVED:
                m = item.mutations[0]
                out.append({"job": item.job_id, "module": str(m.module_path),
                            "line": m.start_pos[0], "operator": m.operator_name,
                            "occurrence": m.occurrence, "diff": result.diff})
    return out


def score(session: Path) -> dict:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome, WorkerOutcome

    counts = {"killed": 0, "survived": 0, "incompetent": 0, "timeout": 0}
    with use_db(str(session), WorkDB.Mode.open) as db:
        for _, result in db.completed_work_items:
            if result.worker_outcome == WorkerOutcome.SKIPPED:
                continue
            if result.worker_outcome == WorkerOutcome.NORMAL:
                counts["survived" if result.test_outcome == TestOutcome.SURVIVED
                       else "incompetent" if result.test_outcome == TestOutcome.INCOMPETENT
                       else "killed"] += 1
            elif result.worker_outcome == WorkerOutcome.ABNORMAL:
                counts["killed"] += 1  # the test command itself crashed: noticed
            else:
                counts["timeout"] += 1
    run = counts["killed"] + counts["survived"] + counts["timeout"]
    counts["score"] = round(100.0 * (counts["killed"] + counts["timeout"]) / run, 1) \
        if run else None
    return counts


def run_module(module: str, workdir: Path, src: Path, n: int, seed: int,
               timeout: float) -> dict:
    cfg = workdir / f"{module}.toml"
    session = workdir / f"{module}.sqlite"
    cfg.write_text(_config(module, timeout, workdir / "mutation_test.py"))
    if session.exists():
        session.unlink()
    env = _env(src)
    cr = [sys.executable, "-m", "cosmic_ray.cli"]
    subprocess.run(cr + ["init", str(cfg), str(session)], cwd=src, env=env, check=True)
    subprocess.run([sys.executable, "-m", "cosmic_ray.tools.filters.operators_filter",
                    str(session), str(cfg)], cwd=src, env=env, check=True)
    total, kept = sample(session, n, seed)
    print(f"[{module}] {total} mutants after the operator filter, {kept} sampled", flush=True)
    base = subprocess.run(cr + ["baseline", str(cfg)], cwd=src, env=env)
    if base.returncode:
        raise SystemExit(f"[{module}] the unmutated selection fails: fix that first")
    subprocess.run(cr + ["exec", str(cfg), str(session)], cwd=src, env=env, check=True)
    surv = survivors(session)
    with open(workdir / f"{module}.survivors.txt", "w") as f:
        for s in surv:
            f.write(f"== {s['module']}:{s['line']} {s['operator']} #{s['occurrence']} "
                    f"(job {s['job']})\n{s['diff']}\n")
    res = dict(module=module, mutants=total, sampled=kept, **score(session))
    print(f"[{module}] {json.dumps(res)}", flush=True)
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modules", nargs="*", default=list(MODULES), choices=list(MODULES))
    p.add_argument("--sample", type=int, default=20,
                   help="mutants per module, chosen at random (0: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=600.0,
                   help="seconds one mutant's selection may take (a hang is 'timeout')")
    p.add_argument("--workdir", default=str(ROOT / "out" / "mutation"))
    p.add_argument("--run-tests", metavar="MODULE", choices=list(MODULES),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run_tests:
        return run_tests(args.run_tests)
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    src = make_copy(workdir)
    # each mutant runs this script's selection: a frozen copy, so that editing the script
    # (or the tests) while a run goes on cannot change what the run measures
    shutil.copy2(Path(__file__).resolve(), workdir / "mutation_test.py")
    results = [run_module(m, workdir, src, args.sample, args.seed, args.timeout)
               for m in args.modules]
    (workdir / "scores.json").write_text(json.dumps(results, indent=2))
    for r in results:
        print(f"{r['module']:14s} {r['sampled']:4d}/{r['mutants']:<5d} killed {r['killed']:4d} "
              f"survived {r['survived']:4d} timeout {r['timeout']:3d} score {r['score']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
