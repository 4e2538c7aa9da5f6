# -*- Python -*-
"""lit configuration of the syncopate FileCheck tests.

Run from the repository root with the virtual environment active:  ``lit -sv lit_tests``
(or ``cmake --build build --target check-syncopate``).

Every ``*.mlir`` file here is a test: ``// RUN: syncopate-opt %s -p '...' | filecheck %s``.
Schedules the tests attach live in ``Inputs/`` (``%inputs`` or ``%S/Inputs``); pass-pipeline
options that hold a path must be quoted for xDSL's pipeline parser:
``attach-schedule{file="%inputs/ag2-push.json" operands="a_ptr:A"}``.
"""

import os
import shutil
import sys

import lit.formats

config.name = "syncopate"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = config.test_source_root  # outputs go to lit_tests/Output (ignored)

# The tools come from the environment lit runs in (the venv's bin directory first).
bin_dir = os.path.dirname(sys.executable)
config.environment["PATH"] = os.pathsep.join([bin_dir, os.environ.get("PATH", "")])
for var in ("HOME", "PYTHONPATH", "VIRTUAL_ENV", "TRITON_HOME", "TRITON_CACHE_DIR"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
# Triton's cache (used by --verify-triton only for its MLIR context): keep it out of the tree
config.environment.setdefault("TRITON_CACHE_DIR", os.path.join(config.test_exec_root, "Output", "triton-cache"))


def _tool(name: str) -> str:
    path = os.path.join(bin_dir, name)
    if os.path.exists(path):
        return path
    found = shutil.which(name)
    if found is None:
        lit_config.fatal(f"lit_tests: '{name}' not found: activate the venv (pip install -e .[test])")
    return found


config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))
config.substitutions.append(("syncopate-opt", _tool("syncopate-opt")))
config.substitutions.append(("filecheck", _tool("filecheck")))
config.substitutions.append(("%python", sys.executable))
