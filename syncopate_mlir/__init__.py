"""The IR layer of Syncopate: the ``tt`` mirror dialect, the ``syncopate`` dialect, the
Triton <-> xDSL bridge, the pass pipeline and the Triton compile hook.

The passes live in the top-level ``passes/`` directory of the repository and are installed as
``syncopate_mlir.passes`` (pyproject's package-dir).  When the repository is used without being
installed (``PYTHONPATH=python:.``, as on the GPU machine), the same directory is mapped here.
"""

import importlib.util as _ilu
import sys as _sys
from pathlib import Path as _Path

if "syncopate_mlir.passes" not in _sys.modules and _ilu.find_spec("syncopate_mlir.passes") is None:
    _dir = _Path(__file__).resolve().parent.parent / "passes"
    if (_dir / "__init__.py").exists():
        _spec = _ilu.spec_from_file_location("syncopate_mlir.passes", _dir / "__init__.py",
                                             submodule_search_locations=[str(_dir)])
        _mod = _ilu.module_from_spec(_spec)
        _sys.modules["syncopate_mlir.passes"] = _mod
        _spec.loader.exec_module(_mod)
        passes = _mod  # the attribute a normal import sets on the parent package
