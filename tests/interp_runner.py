"""Run a Triton-interpreter worker script in a subprocess (shared by the kernels' CPU tests).

``TRITON_INTERPRET=1`` must be set before triton is imported, so the interpreted kernels run
in a fresh Python: the worker reads a JSON list of cases and writes a JSON result per case.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys


def run_interpreter_worker(worker, cases, tmp, timeout: float = 600) -> dict:
    """Write ``cases`` to ``tmp/cases.json``, run ``worker cases.json results.json`` under the
    interpreter with this process's import path, and return the results (the worker's stderr
    tail in the assertion message when it fails)."""
    cases_path = os.path.join(str(tmp), "cases.json")
    results_path = os.path.join(str(tmp), "results.json")
    with open(cases_path, "w") as f:
        json.dump(cases, f)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=os.pathsep.join(
        p for p in [os.environ.get("PYTHONPATH", "")] + sys.path if p))
    proc = subprocess.run([sys.executable, str(worker), cases_path, results_path], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"interpreter worker failed:\n{proc.stderr[-4000:]}"
    with open(results_path) as f:
        return json.load(f)


def serve_cases(run_case, cases_path: str, results_path: str) -> None:
    """The worker's side of :func:`run_interpreter_worker`: ``run_case(case)`` for every case
    of ``cases_path``, results keyed by case name into ``results_path``; a case that raises is
    reported as ``{"name": ..., "error": "Type: message"}`` (the test fails on it) and the
    other cases still run."""
    with open(cases_path) as f:
        cases = json.load(f)
    results = {}
    for c in cases:
        try:
            results[c["name"]] = run_case(c)
        except Exception as e:  # noqa: BLE001 - reported per case
            results[c["name"]] = {"name": c["name"], "error": f"{type(e).__name__}: {e}"}
    with open(results_path, "w") as f:
        json.dump(results, f, indent=1)
