"""The modules an emulation runs: the kernel's TTIR (:func:`kernel_ttir`, Triton's frontend on
the CPU), the fused module (:func:`fuse_module`, the pass pipeline through ``resolve-chunks``,
the last backend-independent stage) and the unfused reference module (:func:`local_module`).

The ``lower-*`` passes after ``resolve-chunks`` only turn chunk-level waits, signals and copies
into inline PTX and atomics whose semantics the emulator implements directly (``comm.py``), so
what is emulated is exactly what the backends lower. A traced kernel (``trace=True``) is that
lowered kernel plus event writes into a private buffer: :func:`fuse_module` runs the rest of the
pipeline through ``insert-trace``, whose transparency check (``passes/insert_trace.py``) refuses
a trace that changes anything else, and emulates the same module as untraced.
"""

from __future__ import annotations

from typing import Any, Mapping

from syncopate.compile_checks import compilation_error
from syncopate.compiler import fuse_request
from syncopate_mlir.bridge import ttir_to_xdsl
from syncopate_mlir.context import make_context
from syncopate_mlir.pipeline import fuse_pipeline, run_pipeline_until
from ..errors import CompileError

__all__ = ["fuse_module", "kernel_ttir", "local_module"]


class _StopAfterTtir(Exception):
    pass


def kernel_ttir(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None,
                attrs=None, options: Mapping | None = None, target=("cuda", 90)) -> str:
    """The TTIR of a ``@triton.jit`` kernel on this CPU: Triton's frontend and ``make_ttir``
    only (a stage hook stops the compile there, nothing is cached)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.compiler.errors import CompilationError

    box: dict = {}

    def hook(backend, stages, options_, language, capability):
        make_ttir = stages["ttir"]

        def stage(src, metadata):
            box["ttir"] = make_ttir(src, metadata).str()
            raise _StopAfterTtir()
        stages["ttir"] = stage

    sig = dict(signature)
    for n in constexprs or {}:
        sig.setdefault(n, "constexpr")
    if isinstance(target, tuple):
        target = GPUTarget(target[0], target[1], 32)
    with triton.knobs.compilation.scope(), triton.knobs.runtime.scope():
        triton.knobs.compilation.always_compile = True
        triton.knobs.runtime.add_stages_inspection_hook = hook
        try:
            triton.compile(ASTSource(kernel, sig, dict(constexprs or {}), attrs),
                           target=target, options=dict(options or {}))
        except _StopAfterTtir:
            pass
        except CompilationError as e:  # an error in the user's kernel: its file:line, one line
            raise compilation_error(kernel, e) from e
    if "ttir" not in box:
        raise CompileError(f"could not get the TTIR of {kernel.__name__}")
    return box["ttir"]


def fuse_module(kernel, *, signature, constexprs=None, attrs=None, schedule, operand,
                backend: str = "sm", comm_programs: int | None = None, reduce: str = "comm",
                options=None, withhold_chunks=(), lowering: str = "auto", remap: bool = True,
                reorder_reductions: bool = False, trace: bool = False,
                self_advance: bool | str = False):
    """``(fused module after resolve-chunks, local TTIR text)`` with the validation of
    :func:`syncopate.compile` (the same typed refusals); ``lowering``, ``remap`` and
    ``reorder_reductions`` are the compiler's. ``trace=True`` also lowers a copy and inserts
    the trace events into it, which raises :class:`CompileError` unless the events leave the
    kernel otherwise unchanged (the module returned is the same either way)."""
    constexprs = dict(constexprs or {})
    # the compiler's checks; withheld chunks are emulated on every backend
    request = fuse_request(kernel, signature=dict(signature), constexprs=constexprs,
                           schedule=schedule, operand=operand, backend=backend,
                           comm_programs=comm_programs, reduce=reduce,
                           withhold_chunks=withhold_chunks, keep_ir=False, check_withhold=False,
                           lowering=lowering, remap=remap,
                           reorder_reductions=reorder_reductions, trace=trace,
                           self_advance=self_advance)
    ttir = kernel_ttir(kernel, signature, constexprs, attrs, options)
    module, ctx = run_pipeline_until(ttir, request, "resolve-chunks")
    if trace:
        fuse_pipeline(request.backend, request.reduce, after="resolve-chunks",
                      until="insert-trace").apply(ctx, module.clone())
    return module, ttir


def local_module(local):
    """``local`` (TTIR text or an xDSL module) as an xDSL module."""
    return ttir_to_xdsl(local, make_context()) if isinstance(local, str) else local

