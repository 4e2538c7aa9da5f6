"""The IR layer of Syncopate: the ``tt`` mirror dialect, the ``syncopate`` dialect, the
Triton <-> xDSL bridge, the pass pipeline and the Triton compile hook.

The passes live in the top-level ``passes/`` directory of the repository and are installed as
``syncopate_mlir.passes`` (pyproject's package-dir).  The link ``syncopate_mlir/passes`` ->
``../passes`` gives the same name where the repository is used without being installed
(``PYTHONPATH=python:.``, as on the GPU machine) and lets import-linter (``lint-imports``),
which reads packages from their directories, see the passes inside the IR layer.
"""
