"""The syncopate pass pipeline: TTIR text in, fused TTIR text out.

Used three ways: by the Triton compile hook (``hook.py``), by ``syncopate.compile``, and by
tests.  The request carries everything the passes need beyond the TTIR; it is attached to the
module as attributes (``syncopate.schedule``, ``syncopate.operands``, ``syncopate.backend``,
``syncopate.comm_programs``, ``syncopate.params``) so that every pass reads one source of truth
and lit tests can set the same attributes by hand.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, StringAttr, i32

import syncopate.abi
import syncopate_mlir
import syncopate_mlir.passes
from syncopate import backends, settings
from syncopate.abi import ABI_VERSION, FusedABI
from syncopate.errors import CompileError
from syncopate_mlir.bridge import ttir_to_xdsl, xdsl_to_text
from syncopate_mlir.context import make_context
from syncopate_mlir.passes import registry
from syncopate_mlir.passes.abi_info import read_abi, strip_syncopate_attrs


def _source_digest() -> str:
    """Hash of the compiler's own sources (passes, dialects, bridge), like Triton hashes its
    own: a changed pass never serves a stale fused binary from the cache."""


    h = hashlib.sha256()
    # the backends too: each names its passes and checks its options
    roots = [Path(syncopate_mlir.__file__).parent, Path(syncopate_mlir.passes.__file__).parent,
             Path(backends.__file__).parent]
    files = sorted({p for r in roots for p in r.rglob("*.py")}) + [Path(syncopate.abi.__file__)]
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


PIPELINE_VERSION = f"1.{ABI_VERSION}-{_source_digest()}"


@dataclass(frozen=True)
class FuseRequest:
    """What to fuse: attached by ``SyncopateSource`` to the module it hands to Triton."""

    kernel_name: str
    schedule_json: str               # canonical JSON v1 of the verified schedule
    operands: tuple[tuple[str, str], ...]  # (kernel parameter, schedule tensor)
    backend: str
    comm_programs: int
    params: tuple[str, ...]          # non-constexpr user parameter names, in order
    keep_ir: bool = True             # print the IR after each pass (costs a print per pass)
    reduce: str = "comm"             # where sum chunks are added: "comm" | "epilogue"
    withhold: str = ""               # fault injection: "c,c" chunks never signalled (tests)
    remap: bool = True               # False: tile-remap keeps the kernel's tile order
    reorder_reductions: bool = False  # True: loops accumulating floats may be renumbered
    lowering: str = "auto"           # chunk-level code: "unrolled" | "table" | "auto"
    trace: bool = False              # True: timestamped events into a buffer (insert-trace)
    self_advance: str = "off"        # "on": the kernel advances its epoch word itself;
    #                                  "auto": where it can (not when it returns from a branch)

    def key(self) -> str:
        blob = json.dumps({"schedule": self.schedule_json, "operands": self.operands,
                           "backend": self.backend, "comm_programs": self.comm_programs,
                           "keep_ir": self.keep_ir, "reduce": self.reduce,
                           "withhold": self.withhold, "remap": self.remap,
                           "reorder_reductions": self.reorder_reductions,
                           "lowering": self.lowering, "trace": self.trace,
                           "self_advance": self.self_advance,
                           "pipeline": PIPELINE_VERSION},
                          sort_keys=True)
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


def attach_request(module: ModuleOp, request: FuseRequest) -> None:
    compact = json.dumps(json.loads(request.schedule_json), separators=(",", ":"))
    module.attributes["syncopate.schedule"] = StringAttr(compact)
    module.attributes["syncopate.operands"] = DictionaryAttr(
        {p: StringAttr(t) for p, t in request.operands})
    module.attributes["syncopate.backend"] = StringAttr(request.backend)
    module.attributes["syncopate.comm_programs"] = IntegerAttr(request.comm_programs, i32)
    module.attributes["syncopate.params"] = ArrayAttr([StringAttr(p) for p in request.params])
    if request.reduce != "comm":  # absent means "comm"
        module.attributes["syncopate.reduce"] = StringAttr(request.reduce)
    if request.withhold:
        module.attributes["syncopate.test_withhold"] = StringAttr(request.withhold)
    if not request.remap:
        module.attributes["syncopate.remap"] = StringAttr("off")
    if request.reorder_reductions:  # absent means off: the unfused kernel's bits
        module.attributes["syncopate.reorder_reductions"] = StringAttr("on")
    if request.lowering != "auto":  # absent means "auto"
        module.attributes["syncopate.lowering"] = StringAttr(request.lowering)
    if request.trace:  # absent means off: insert-trace changes nothing
        module.attributes["syncopate.trace"] = StringAttr("on")
    if request.self_advance != "off":  # absent means off: self-advance-epoch changes nothing
        module.attributes["syncopate.self_advance"] = StringAttr(request.self_advance)


def run_pipeline(ttir_text: str, request: FuseRequest) -> PipelineResult:
    """Run the syncopate passes over a kernel's TTIR; return the fused TTIR and its ABI."""

    ctx = make_context()
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    module = ttir_to_xdsl(ttir_text, ctx)
    times["parse"] = (time.perf_counter() - t0) * 1e3
    attach_request(module, request)
    passes = registry()
    ir_after: dict[str, str] = {}
    keep = request.keep_ir or settings.DUMP_IR.get() is not None
    for name in pass_names(request.backend, request.reduce):
        t0 = time.perf_counter()
        passes[name]().apply(ctx, module)
        times[name] = (time.perf_counter() - t0) * 1e3
        if keep:
            ir_after[name] = xdsl_to_text(module)
    abi = read_abi(module)
    abi.user_params = list(request.params)
    strip_syncopate_attrs(module)
    t0 = time.perf_counter()
    text = xdsl_to_text(module)
    times["print"] = (time.perf_counter() - t0) * 1e3
    return PipelineResult(text, abi, ir_after, times)


def run_pipeline_until(ttir_text: str, request: FuseRequest, until: str = "resolve-chunks"):
    """Run the passes of ``pass_names(request.backend, request.reduce)`` up to and including
    ``until`` and return ``(module, ctx)``: the xDSL module itself, with its ``syncopate.*``
    attributes (schedule, backend, ABI state) kept, for tools that read the module at a
    backend-independent level -- the CPU emulator (``syncopate.emulate``) executes it after
    ``resolve-chunks``, before any ``lower-*`` pass turns flags into inline PTX."""

    names = pass_names(request.backend, request.reduce)
    if until not in names:
        raise CompileError(f"no pass {until!r} in the {request.backend} pipeline "
                           f"({', '.join(names)})")
    ctx = make_context()
    module = ttir_to_xdsl(ttir_text, ctx)
    attach_request(module, request)
    passes = registry()
    for name in names[:names.index(until) + 1]:
        passes[name]().apply(ctx, module)
    return module, ctx
