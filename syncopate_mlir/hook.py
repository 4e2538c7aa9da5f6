"""The Triton compile hook: a ``syncopate`` stage right after ``ttir``.

Triton 3.6 lets a process inspect and edit the stage pipeline of every compile through
``triton.knobs.runtime.add_stages_inspection_hook`` (called with backend, stages, options,
language, capability).  :func:`install` adds one stage, named ``syncopate``, after ``ttir``:
it runs the overlap passes over the TTIR of a *fused* compile and passes every other module
through untouched (not even round-tripped), so an unfused compile of the same kernel is
byte-for-byte what Triton alone would produce.

How the stage knows a compile is fused, without global state: :class:`SyncopateSource`
(``python/syncopate/compiler.py``) attaches its :class:`FuseRequest` to the ``ir.module``
object it returns from ``make_ir``; ``make_ttir`` hands the same object on to our stage.  The
fused compile's cache key includes the request (schedule hash, operands, backend, comm
programs, pipeline version) through the source's ``hash()``, so the two compiles never share a
cache entry.

Installing is idempotent and chains a hook that was installed before ours.
"""

from __future__ import annotations

import re
from pathlib import Path

from syncopate import settings

from .bridge import text_to_ttir
from .pipeline import run_pipeline

STAGE_NAME = "syncopate"
REQUEST_ATTR = "syncopate_request"

def _stage(mod, metadata):
    request = getattr(mod, REQUEST_ATTR, None)
    if request is None:
        return mod
    result = run_pipeline(mod.str(), request)
    new = text_to_ttir(result.text, mod.context, name=request.kernel_name)
    metadata["syncopate"] = {"abi": result.abi.to_json(), "pipeline": result.pipeline_version,
                             "passes": list(result.ir_after)}
    if request.keep_ir:
        metadata["syncopate_ir"] = dict(result.ir_after)
    metadata["syncopate_times_ms"] = dict(result.times_ms)
    dump_dir = settings.DUMP_IR.get()
    if dump_dir:
        dump_ir(dump_dir, request.kernel_name, metadata.get("hash", ""), result.ir_after)
    return new


def dump_ir(directory: str, name: str, key: str, ir_after: dict[str, str]) -> None:
    """Write the IR after each pass to ``directory/<kernel>-<key>/NN-<pass>.mlir``."""
    out = Path(directory) / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}-{key[:10]}"
    out.mkdir(parents=True, exist_ok=True)
    write_stages(out, ir_after)


def write_stages(out: Path, ir_after: dict[str, str]) -> None:
    """``out/NN-<pass>.mlir``, the IR after each pass in order, numbered from 01 (the n-th pass).

    The one naming of stage files: ``SYNCOPATE_DUMP_IR`` and ``syncopate compile -o`` both
    write through here, so a file name means the same pass in either directory."""
    for i, (pass_name, text) in enumerate(ir_after.items(), start=1):
        (out / f"{i:02d}-{pass_name}.mlir").write_text(text)


def _insert_stage(stages) -> None:
    if "ttir" not in stages or STAGE_NAME in stages:
        return
    items = list(stages.items())
    stages.clear()
    for key, fn in items:
        stages[key] = fn
        if key == "ttir":
            stages[STAGE_NAME] = _stage


class _Hook:
    def __init__(self, previous):
        self.previous = previous

    def __call__(self, backend, stages, options, language, capability):
        if self.previous is not None:
            self.previous(backend, stages, options, language, capability)
        _insert_stage(stages)


def install() -> None:
    """Install the stage hook (idempotent; chains any hook installed before)."""
    import triton

    runtime = triton.knobs.runtime
    if not isinstance(runtime.add_stages_inspection_hook, _Hook):
        runtime.add_stages_inspection_hook = _Hook(runtime.add_stages_inspection_hook)


def installed() -> bool:
    import triton

    return isinstance(triton.knobs.runtime.add_stages_inspection_hook, _Hook)


def uninstall() -> None:
    """Remove our hook, restoring the one it chained."""
    import triton

    runtime = triton.knobs.runtime
    if isinstance(runtime.add_stages_inspection_hook, _Hook):
        runtime.add_stages_inspection_hook = runtime.add_stages_inspection_hook.previous
