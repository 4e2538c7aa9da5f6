"""The syncopate pass pipeline: TTIR text in, fused TTIR text out.

One xDSL ``PassPipeline`` (:func:`fuse_pipeline`: the backend-independent passes, the backend's
tail, then the epoch passes, built from the pass registry) serves the Triton compile hook
(``hook.py`` -> :func:`run_pipeline`), ``syncopate-opt`` (its ``fuse`` pass) and the emulator
(:func:`run_pipeline_until`: the same passes through a given one).  The request carries
everything the passes need beyond the TTIR; it is attached to the module as two typed
attributes (``syncopate.schedule``: the Schedule object itself, ``syncopate.request``: the
options) so that every pass reads one source of truth, and lit tests attach the same with
``attach-schedule``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass, PassPipeline, PassPipelineCallbackType

import syncopate.abi
import syncopate.tiling
import syncopate_mlir
import syncopate_mlir.passes
from syncopate import backends, settings
from syncopate.abi import ABI_VERSION, FusedABI
from syncopate.errors import CompileError
from syncopate.schedule.model import Schedule
from syncopate_mlir.bridge import ttir_to_xdsl, xdsl_to_text
from syncopate_mlir.context import make_context
from syncopate_mlir.dialects.syncopate import (
    ATTR_REQUEST,
    ATTR_SCHEDULE,
    Request,
    RequestAttr,
    ScheduleAttr,
    request_of,
    strip_module_state,
)
from syncopate_mlir.passes import REGISTRY
from syncopate_mlir.passes.abi_info import read_abi


def _source_digest() -> str:
    """Hash of the compiler's own sources (passes, dialects, bridge), like Triton hashes its
    own: a changed pass never serves a stale fused binary from the cache."""
    h = hashlib.sha256()
    # the backends too: each names its passes and checks its options
    roots = [Path(syncopate_mlir.__file__).parent, Path(syncopate_mlir.passes.__file__).parent,
             Path(backends.__file__).parent]
    # the ABI and the store slices it carries (the launch check reads them from the cache)
    files = sorted({p for r in roots for p in r.rglob("*.py")}) + [
        Path(m.__file__) for m in (syncopate.abi, syncopate.tiling)]
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


PIPELINE_VERSION = f"1.{ABI_VERSION}-{_source_digest()}"


@dataclass(frozen=True)
class FuseRequest(Request):
    """What to fuse: the module's :class:`Request` (the options the passes read) plus what the
    compile hook needs; attached by ``SyncopateSource`` to the module it hands to Triton."""

    kernel_name: str = ""
    schedule: Schedule | None = None  # verified
    keep_ir: bool = True             # print the IR after each pass (costs a print per pass)

    def module_request(self) -> Request:
        return Request(**{f.name: getattr(self, f.name) for f in dataclasses.fields(Request)})

    def key(self) -> str:
        blob = json.dumps({"schedule": self.schedule.content_hash(),
                           "request": repr(self.module_request()), "keep_ir": self.keep_ir,
                           "pipeline": PIPELINE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


@dataclass
class PipelineResult:
    text: str
    abi: FusedABI
    ir_after: dict[str, str] = field(default_factory=dict)
    times_ms: dict[str, float] = field(default_factory=dict)
    pipeline_version: str = PIPELINE_VERSION


def pass_names(backend: str, reduce: str = "comm") -> list[str]:
    """The passes of a fused compile, in order: the backend-independent ones, then the
    backend's tail (``BackendSpec.pipeline_tail``: ``partition-sms`` for comm programs,
    ``resolve-chunks``, ``lower-<name>``)."""
    # structurize-returns first: every later pass takes the kernel as one block
    names = ["structurize-returns", "check-accesses", "append-abi-params", "tile-remap",
             "insert-waits", "insert-signals"]
    if reduce == "epilogue":
        names.append("insert-epilogue-reduce")
    # insert-trace (a no-op unless trace=True) then load-epoch: every pass before it treats
    # the epoch as an i32 value (passes/load_epoch.py), the trace events included; then
    # self-advance-epoch (a no-op when self_advance is off), which needs the loaded word
    return names + backends.get(backend).pipeline_tail() + ["insert-trace", "load-epoch",
                                                            "self-advance-epoch"]


def fuse_pipeline(backend: str, reduce: str = "comm", *, after: str | None = None,
                  until: str | None = None,
                  callback: PassPipelineCallbackType | None = None) -> PassPipeline:
    """The passes of :func:`pass_names` as one ``PassPipeline``; only those after ``after``
    and through ``until`` when given (the emulator stops after ``resolve-chunks``)."""
    names = pass_names(backend, reduce)
    for name in (after, until):
        if name is not None and name not in names:
            raise CompileError(f"no pass {name!r} in the {backend} pipeline ({', '.join(names)})")
    lo = names.index(after) + 1 if after else 0
    hi = names.index(until) + 1 if until else len(names)
    return PassPipeline(tuple(REGISTRY[n]() for n in names[lo:hi]), callback)


@dataclass(frozen=True)
class Fuse(ModulePass):
    """The compile's whole pipeline for the module's request (``until``: stop after that pass),
    e.g. ``syncopate-opt -p 'attach-schedule{...},fuse'``."""

    name: ClassVar[str] = "fuse"
    until: str | None = None

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        request = request_of(op)
        fuse_pipeline(request.backend, request.reduce, until=self.until).apply(ctx, op)


#: what ``syncopate-opt -p`` runs: every pass, and ``fuse``
OPT_PASSES = {**REGISTRY, Fuse.name: Fuse}


def _parsed(ttir_text: str, ctx: Context, request: FuseRequest) -> ModuleOp:
    """The kernel's TTIR as an xDSL module carrying the request's schedule and options."""
    module = ttir_to_xdsl(ttir_text, ctx)
    module.attributes[ATTR_SCHEDULE] = ScheduleAttr(request.schedule)
    module.attributes[ATTR_REQUEST] = RequestAttr(request.module_request())
    return module


def run_pipeline(ttir_text: str, request: FuseRequest) -> PipelineResult:
    """Run the syncopate passes over a kernel's TTIR; return the fused TTIR and its ABI."""
    ctx = make_context()
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    module = _parsed(ttir_text, ctx, request)
    times["parse"] = (time.perf_counter() - t0) * 1e3
    ir_after: dict[str, str] = {}
    keep = request.keep_ir or settings.DUMP_IR.get() is not None

    def after(done, mod, _next):  # times each pass (not the printing of the IR after it)
        nonlocal t0
        if done is not None:
            times[done.name] = (time.perf_counter() - t0) * 1e3
            if keep:
                ir_after[done.name] = xdsl_to_text(mod)
        t0 = time.perf_counter()

    fuse_pipeline(request.backend, request.reduce, callback=after).apply(ctx, module)
    abi = read_abi(module)
    abi.user_params = list(request.params)
    strip_module_state(module)
    t0 = time.perf_counter()
    text = xdsl_to_text(module)
    times["print"] = (time.perf_counter() - t0) * 1e3
    return PipelineResult(text, abi, ir_after, times)


def run_pipeline_until(ttir_text: str, request: FuseRequest, until: str = "resolve-chunks"):
    """Run the pipeline's passes up to and including ``until`` and return ``(module, ctx)``:
    the xDSL module itself, its ``syncopate.*`` attributes (schedule, request, state) kept, for
    tools that read the module at a backend-independent level -- the CPU emulator
    (``syncopate.emulate``) executes it after ``resolve-chunks``, before any ``lower-*`` pass
    turns flags into inline PTX."""
    pipeline = fuse_pipeline(request.backend, request.reduce, until=until)
    ctx = make_context()
    module = _parsed(ttir_text, ctx, request)
    pipeline.apply(ctx, module)
    return module, ctx
