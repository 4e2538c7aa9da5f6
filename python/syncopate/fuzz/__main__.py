"""``python -m syncopate.fuzz``: run generated cases and print counts per outcome and style.

    python -m syncopate.fuzz --count 200 --seed 0 [--out DIR] [--time-budget SEC]
    python -m syncopate.fuzz --replay SEED [--out DIR]      # one case, verbose
    python -m syncopate.fuzz --show SEED                     # print the source and schedule
    python -m syncopate.fuzz --atomic none|local|comm ...    # pin the atomics axis

Seeds ``S, S+1, ..., S+N-1`` are run.  Every failure, invalid and known case is written to
``DIR/seed-<SEED>/`` (``kernel.py``, ``schedule.json``, ``case.json``, ``report.txt``) so it can
be replayed; ``DIR/summary.json`` holds the counts.  Exit status 1 when any case failed (a
``known`` bug does not count), 0 otherwise, 2 on bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter, defaultdict

from ..cli import run_handler
from ..cli_args import nonnegative_int, positive_float
from ..errors import UsageError
from .atomics import WHERE as ATOMIC_WHERE
from .gen import STYLE_KEYS, generate
from .oracle import OUTCOMES, run_case


def replay_command(case) -> str:
    """The command that replays ``case`` (with ``--atomic`` when it was pinned)."""
    cmd = f"python -m syncopate.fuzz --replay {case.seed}"
    atomic = case.styles.get("atomic", "none")
    if generate(case.seed).styles.get("atomic", "none") != atomic:
        cmd += f" --atomic {atomic}"
    return cmd


def write_case(out: str, case, verdict) -> str:
    d = os.path.join(out, f"seed-{case.seed}")
    os.makedirs(d, exist_ok=True)
    info = dict(case.to_json(), outcome=verdict.outcome, kind=verdict.kind, known=verdict.known,
                detail=verdict.detail, replay=replay_command(case))
    for name, text in (("kernel.py", case.source), ("schedule.json", case.schedule_json()),
                       ("case.json", json.dumps(info, indent=1, default=str)),
                       ("report.txt", f"{verdict.line(case)}\n\n{verdict.detail}\n\n"
                                      f"{verdict.report}\n")):
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return d


def refusal_reason(detail: str) -> str:
    """A refusal message without its location and numbers: what the refusals are about."""
    text = re.sub(r"^(\w+Error): (/\S+?:\d+:\d+: )?", r"\1: ", detail.splitlines()[0])
    text = re.sub(r"'[\w.#-]*'|\d+|%\w+", "_", text)
    return text[:90]


def run_many(seeds, *, out: str | None = None, time_budget: float | None = None,
             verbose: bool = False, echo=print, force: dict | None = None) -> dict:
    """Run the cases of ``seeds`` (stopping when ``time_budget`` seconds are spent) and return
    the summary: counts per outcome, per style value, the seeds of the non-clean cases.
    ``force``: style choices pinned for every case (``generate``'s keywords)."""
    t0 = time.perf_counter()
    counts: Counter = Counter()
    per_style: dict = defaultdict(lambda: defaultdict(Counter))
    notable: dict = defaultdict(list)
    reasons: Counter = Counter()
    n = noted = 0
    for seed in seeds:
        if time_budget is not None and time.perf_counter() - t0 > time_budget:
            echo(f"time budget of {time_budget:g} s spent after {n} cases")
            break
        case = generate(seed, **(force or {}))
        v = run_case(case)
        n += 1
        counts[v.outcome] += 1
        noted += v.outcome == "clean" and v.notes > 0
        for k in STYLE_KEYS:
            per_style[k][str(case.styles.get(k, "none" if k == "atomic" else "-"))][
                v.outcome] += 1
        if v.outcome == "refused":
            reasons[refusal_reason(v.detail)] += 1
        if v.outcome in ("failure", "known", "invalid"):
            notable[v.outcome].append(dict(seed=seed, kind=v.kind, known=v.known,
                                           styles=case.style_line, detail=v.detail[:300]))
            if out:
                write_case(out, case, v)
            if v.outcome != "known" or verbose:
                echo(v.line(case))
        elif verbose:
            echo(v.line(case))
    seconds = time.perf_counter() - t0
    summary = dict(cases=n, seconds=round(seconds, 1),
                   counts={o: counts.get(o, 0) for o in OUTCOMES}, clean_with_notes=noted,
                   per_style={k: {val: dict(c) for val, c in sorted(vals.items())}
                              for k, vals in per_style.items()},
                   refusals=dict(reasons.most_common()), notable=dict(notable))
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "summary.json"), "w") as f:
            json.dump(summary, f, indent=1)
    return summary


def format_summary(summary: dict) -> str:
    c = summary["counts"]
    n = max(1, summary["cases"])
    lines = [f"{summary['cases']} cases in {summary['seconds']} s: " +
             ", ".join(f"{o} {c[o]} ({100 * c[o] / n:.0f}%)" for o in OUTCOMES)]
    if summary.get("clean_with_notes"):
        lines.append(f"  clean with float atomic order notes: {summary['clean_with_notes']}")
    for k, vals in summary["per_style"].items():
        parts = [f"{val}: " + "/".join(f"{o[0]}{cnt[o]}" for o in OUTCOMES if cnt.get(o))
                 for val, cnt in vals.items()]
        lines.append(f"  {k:11s} " + "  ".join(parts))
    lines.append("  (c=clean r=refused k=known i=invalid f=failure)")
    if summary.get("refusals"):
        lines.append("  refusals:")
        lines += [f"    {n:5d}  {r}" for r, n in list(summary["refusals"].items())[:12]]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m syncopate.fuzz",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=nonnegative_int, default=50)
    ap.add_argument("--seed", type=nonnegative_int, default=0, help="first seed")
    ap.add_argument("--out", default=None, help="where failing cases are written")
    ap.add_argument("--time-budget", type=positive_float, default=None,
                    help="stop after SEC seconds")
    ap.add_argument("--replay", type=nonnegative_int, default=None, metavar="SEED")
    ap.add_argument("--show", type=nonnegative_int, default=None, metavar="SEED")
    ap.add_argument("--atomic", choices=ATOMIC_WHERE, default=None,
                    help="pin the atomics axis: none, on a tensor no schedule moves (local), "
                         "on the communicated tensor (comm)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per case")
    return ap


def main(argv=None) -> int:
    try:
        return run_handler(_run, build_parser().parse_args(argv), "python -m syncopate.fuzz")
    except SystemExit as e:  # argparse's or a UsageError's: this entry point returns the status
        return int(e.code or 0)


def _run(a) -> int:
    if a.out and os.path.exists(a.out) and not os.path.isdir(a.out):
        raise UsageError(f"--out {a.out}: a file is in the way; give a directory")
    force = {} if a.atomic is None else {"atomic": a.atomic}
    if a.show is not None:
        case = generate(a.show, **force)
        print(case.source)
        print(f"# {case.style_line}\n# grid {case.grid} operand {case.operand} backend "
              f"{case.backend} comm_programs {case.comm_programs} policies {case.policies}")
        print(case.schedule_json())
        return 0
    if a.replay is not None:
        case = generate(a.replay, **force)
        v = run_case(case)
        print(v.line(case))
        if v.outcome != "clean":
            print(v.detail)
            print(v.report)
        if a.out:
            print("written to", write_case(a.out, case, v))
        return 1 if v.outcome == "failure" else 0
    summary = run_many(range(a.seed, a.seed + a.count), out=a.out, time_budget=a.time_budget,
                       verbose=a.verbose, force=force)
    print(json.dumps(summary, indent=1) if a.json else format_summary(summary))
    return 1 if summary["counts"]["failure"] else 0


if __name__ == "__main__":
    sys.exit(main())
