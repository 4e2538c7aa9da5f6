"""Compile a corpus kernel with the TTIR replaced by its Triton -> xDSL -> Triton round trip.

:func:`compile_roundtrip` runs :func:`triton.compile` (CPU only, for the entry's target) with a
stages-inspection hook that wraps Triton's ``ttir`` stage: the frontend module (before
``make_ttir``) and the TTIR after it are each read into xDSL, printed, and parsed back into
Triton's MLIR context; the round-tripped TTIR is what the later stages (ttgir, llir, ptx,
cubin) compile.  The Triton cache is redirected to a private directory and bypassed, so the
round-tripped compile never poisons (or hits) the cache of an ordinary compile.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field

import triton


@dataclass
class RoundTrip:
    name: str
    frontend: str = ""            # Triton's print of the module before make_ttir
    frontend_back: str = ""       # ... after xDSL and a Triton reparse
    ttir: str = ""                # Triton's print of the TTIR (after make_ttir)
    ttir_back: str = ""           # ... after xDSL and a Triton reparse (what gets compiled)
    xdsl_text: str = ""           # what xDSL printed for the TTIR
    generic_back: str = ""        # Triton's print of the TTIR printed by xDSL in generic form
    timings: dict = field(default_factory=dict)
    kernel: object = None         # the CompiledKernel (asm: ttir, ttgir, llir, ptx, cubin)


def compile_roundtrip(entry, *, generic: bool = True, cache_dir: str | None = None) -> RoundTrip:
    from triton._C.libtriton import ir

    from syncopate_mlir.bridge import text_to_ttir, ttir_to_xdsl, xdsl_to_text, xdsl_to_ttir

    rt = RoundTrip(entry.name)

    def hook(backend, stages, options, language, capability):
        make_ttir = stages["ttir"]

        def ttir_stage(src, metadata):
            rt.frontend = src.str()
            fctx = ir.context()
            ir.load_dialects(fctx)
            backend.load_dialects(fctx)
            rt.frontend_back = text_to_ttir(xdsl_to_text(ttir_to_xdsl(rt.frontend)), fctx).str()

            mod = make_ttir(src, metadata)
            rt.ttir = mod.str()
            t0 = time.perf_counter()
            xmod = ttir_to_xdsl(mod)
            t1 = time.perf_counter()
            rt.xdsl_text = xdsl_to_text(xmod)
            t2 = time.perf_counter()
            back = xdsl_to_ttir(xmod, mod.context)
            t3 = time.perf_counter()
            rt.timings = {"xdsl_parse_ms": (t1 - t0) * 1e3, "xdsl_print_ms": (t2 - t1) * 1e3,
                          "triton_parse_ms": (t3 - t2) * 1e3}
            rt.ttir_back = back.str()
            if generic:
                gctx = ir.context()
                ir.load_dialects(gctx)
                backend.load_dialects(gctx)
                rt.generic_back = text_to_ttir(xdsl_to_text(xmod, generic=True), gctx).str()
            return back

        stages["ttir"] = ttir_stage

    with tempfile.TemporaryDirectory(prefix="syncopate-rt-cache-") as tmp, \
            triton.knobs.cache.scope(), triton.knobs.compilation.scope(), triton.knobs.runtime.scope():
        triton.knobs.cache.dir = cache_dir or tmp
        triton.knobs.compilation.always_compile = True
        triton.knobs.runtime.add_stages_inspection_hook = hook
        rt.kernel = triton.compile(entry.source(), target=entry.target(), options=entry.options)
    return rt


def compile_plain(entry, cache_dir: str | None = None):
    """An ordinary compile of the entry (private cache), for comparison."""
    with tempfile.TemporaryDirectory(prefix="syncopate-plain-cache-") as tmp, \
            triton.knobs.cache.scope(), triton.knobs.compilation.scope(), triton.knobs.runtime.scope():
        triton.knobs.cache.dir = cache_dir or tmp
        triton.knobs.compilation.always_compile = True
        triton.knobs.runtime.add_stages_inspection_hook = None
        return triton.compile(entry.source(), target=entry.target(), options=entry.options)
