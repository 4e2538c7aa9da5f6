"""``syncopate.compile``: a local Triton kernel + a chunk schedule -> one fused kernel.

CPU-only: it runs Triton's own pipeline (``make_ttir`` ... ``make_cubin``) with the syncopate
stage inserted after ``ttir`` (``syncopate_mlir/hook.py``), so it works on a machine without a
GPU when given a target.  The result carries Triton's ``asm`` (``ttir`` is the local kernel's
TTIR, ``syncopate`` the fused TTIR, then ``ttgir``, ``llir``, ``ptx``, ``cubin``), the IR after
each syncopate pass, and the :class:`~syncopate.abi.FusedABI` the runtime launches it with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from syncopate.schedule import as_schedule, verify
from syncopate_mlir import hook
from syncopate_mlir.hook import REQUEST_ATTR, dump_ir
from syncopate_mlir.passes.attach_schedule import withhold_chunks as checked
from syncopate_mlir.pipeline import FuseRequest
from . import backends, dtypes, settings
from .abi import FusedABI, extra_params
from .chunk_table import LOWERINGS, TABLE_MIN_CHUNKS
from .compile_checks import check_signature_types, check_target, compilation_error
from .errors import CompileError


@dataclass
class FusedCompile:
    """A compiled fused kernel: Triton's ``CompiledKernel`` plus what the runtime needs."""

    kernel: Any                      # triton.compiler.CompiledKernel
    abi: FusedABI
    ir_after: dict[str, str] = field(default_factory=dict)
    times_ms: dict[str, float] = field(default_factory=dict)

    @property
    def asm(self) -> dict:
        return self.kernel.asm

    @property
    def metadata(self):
        return self.kernel.metadata


def _source_class():
    from triton.compiler import ASTSource

    class SyncopateSource(ASTSource):
        """An ``ASTSource`` whose signature is extended by the fused ABI's parameters.

        The frontend sees the user's signature (``make_ir``); the launcher sees the extended
        one; the cache key includes the fuse request, so fused and unfused compiles of one
        kernel never share a cache entry."""

        def __init__(self, fn, signature, constexprs, attrs, request):
            super().__init__(fn, dict(signature), constexprs, attrs)
            self.user_signature = dict(signature)
            self.request = request
            self.signature = {**signature, **dict(extra_params(request.backend))}

        def hash(self):
            import hashlib

            base = super().hash()
            return hashlib.sha256(f"{base}-syncopate-{self.request.key()}".encode()).hexdigest()

        def make_ir(self, target, options, codegen_fns, module_map, context):
            extended = self.signature
            self.signature = self.user_signature
            try:
                module = super().make_ir(target, options, codegen_fns, module_map, context)
            finally:
                self.signature = extended
            setattr(module, REQUEST_ATTR, self.request)
            return module

    return SyncopateSource


def resolve_operands(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any],
                     schedule, operand) -> dict[str, str]:
    """Kernel parameter -> schedule tensor, validated (typed errors saying what to change)."""
    names = list(kernel.arg_names)
    if isinstance(operand, str):
        if len(schedule.tensors) != 1:
            raise CompileError(
                f"the schedule moves {len(schedule.tensors)} tensors "
                f"({', '.join(schedule.tensors)}): pass operand={{param: tensor}} to say which "
                f"kernel parameter holds each")
        operand = {operand: next(iter(schedule.tensors))}
    if not isinstance(operand, Mapping) or not operand:
        raise CompileError("operand must name the kernel parameter holding the communicated "
                           "tensor (a string) or map parameters to schedule tensors (a dict)")
    out = {}
    for param, tensor in operand.items():
        if param not in names:
            raise CompileError(f"unknown operand {param!r}: kernel {kernel.__name__} has "
                               f"parameters {', '.join(names)}")
        if param in (constexprs or {}) or signature.get(param) == "constexpr":
            raise CompileError(f"operand {param!r} is a constexpr; it must be a pointer parameter")
        sig = signature.get(param)
        if sig is None or not (sig.startswith("*") or sig.startswith("tensordesc")):
            raise CompileError(f"operand {param!r} has signature {sig!r}; it must be a pointer "
                               f"(e.g. '*bf16') or a tensor descriptor")
        if tensor not in schedule.tensors:
            raise CompileError(f"operand {param!r} is bound to tensor {tensor!r}, which the "
                               f"schedule does not have ({', '.join(schedule.tensors)})")
        spec = schedule.tensors[tensor]
        if sig.startswith("*"):
            elem = sig[1:]
            if not dtypes.is_known(elem):
                raise CompileError(f"operand {param!r} points to {elem}, a dtype Syncopate does "
                                   f"not know; use one of {', '.join(dtypes.DTYPES)}")
            if dtypes.canonical(elem) != spec.dtype:
                raise CompileError(f"operand {param!r} points to {elem} but the schedule's tensor "
                                   f"{tensor!r} is {spec.dtype}: make the dtypes agree")
        out[param] = tensor
    return out


def fuse_request(kernel, *, signature: Mapping[str, str], constexprs: Mapping[str, Any],
                 schedule, operand, backend: str, comm_programs: int | None, reduce: str = "comm",
                 withhold_chunks=(), remap: bool = True, keep_ir: bool = True,
                 check_withhold: bool = True, lowering: str = "auto",
                 reorder_reductions: bool = False, trace: bool = False,
                 self_advance: bool | str = False):
    """The validated :class:`~syncopate_mlir.pipeline.FuseRequest` for fusing ``kernel`` with
    ``schedule``: the one place the compile API and the emulator check their inputs (schedule
    verified, signature complete, operands bound, backend options). ``check_withhold=False``
    lets the emulator withhold chunks on any backend."""
    be = backends.get(backend)
    sched = as_schedule(schedule)
    verify(sched)
    # a parameter given a value in ``constexprs`` needs no signature entry (it is a constexpr)
    missing = [n for n in kernel.arg_names if n not in signature and n not in constexprs]
    if missing:
        raise CompileError(f"signature misses parameters {', '.join(missing)} of kernel "
                           f"{kernel.__name__} (give constexprs the type 'constexpr')")
    check_signature_types(kernel.__name__, signature)
    operands = resolve_operands(kernel, signature, constexprs, sched, operand)
    comm_programs = be.check_options(comm_programs=comm_programs, reduce=reduce,
                                     withhold_chunks=withhold_chunks if check_withhold else ())
    if lowering == "auto":
        # SYNCOPATE_LOWERING=table|unrolled forces a form for every fused compile (the GPU
        # suites run with it to check both forms through the ops)
        lowering = settings.LOWERING.get()
    if lowering not in LOWERINGS:
        raise CompileError(f"lowering={lowering!r}: choose one of {', '.join(LOWERINGS)} "
                           f"('table': code size independent of the chunk count; 'unrolled': "
                           f"code per chunk; 'auto': unrolled up to "
                           f"{TABLE_MIN_CHUNKS - 1} chunks)")
    withhold = checked(withhold_chunks, sched) if withhold_chunks else ()
    params = tuple(n for n in kernel.arg_names
                   if signature.get(n) != "constexpr" and n not in constexprs)
    return FuseRequest(kernel_name=kernel.__name__, schedule=sched,
                       operands=dict(sorted(operands.items())), backend=backend,
                       comm_programs=int(comm_programs), params=params, keep_ir=keep_ir,
                       reduce=reduce, withhold=withhold, remap=bool(remap),
                       lowering=lowering, reorder_reductions=bool(reorder_reductions),
                       trace=bool(trace), self_advance=self_advance_mode(self_advance))


def self_advance_mode(value) -> str:
    """The request's mode of ``self_advance``: ``True``/``"on"`` -> ``"on"`` (refuse a kernel
    that cannot count itself done), ``False``/``None``/``"off"`` -> ``"off"``, ``"auto"`` (the
    runtime's default: self-advancing where the kernel allows it, docs/cuda-graphs.md)."""
    if value is True or value == "on":
        return "on"
    if value is False or value is None or value == "off":
        return "off"
    if value == "auto":
        return "auto"
    raise CompileError(f"self_advance={value!r}: choose True, False or 'auto'")


def compile(kernel, *, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
            schedule, operand, backend: str = "sm", comm_programs: int | None = None,
            target=("cuda", 90), attrs=None, keep_ir: bool = True, reduce: str = "comm",
            withhold_chunks=(), remap: bool = True, lowering: str = "auto",
            reorder_reductions: bool = False, trace: bool = False,
            self_advance: bool | str = False, **options) -> FusedCompile:
    """Compile ``kernel`` fused with ``schedule`` for ``target`` (no GPU needed).

    ``signature``/``constexprs``/``attrs`` are those of ``triton.compiler.ASTSource``;
    ``operand`` names the kernel parameter holding the communicated tensor (or maps several);
    ``schedule`` is a Schedule, a JSON text or the path of a JSON file; ``options`` go to
    Triton (``num_warps``, ``num_stages``, ...); ``keep_ir=False`` skips printing the IR after
    each pass (the runtime's choice: it saves a print per pass). ``reduce``: where a
    reduce-scatter's ``sum`` chunks are added -- ``"comm"`` (comm programs; after the kernel on
    ``ce``) or ``"epilogue"`` (``ce`` only: the owner's tiles add the copied partials before
    their store, see ``passes/insert_epilogue_reduce.py``). ``withhold_chunks`` (fault
    injection for tests and for rehearsing a hang; ``sm``/``nvshmem``): the rank executing each
    of these chunks moves its data but never signals it, so its readers' watchdog fires and
    names it (``ce`` withholds at run time: ``FusedKernel.test_skip_chunks``). ``remap=False``
    keeps the kernel's own tile order (tile-remap does nothing): the escape hatch for a tiling
    the remap's rules accept but that is not a grid (docs/soundness.md, "Known limits").
    ``reorder_reductions=True`` lets tile-remap renumber a loop that accumulates floats (the
    KV loop of attention over all-gathered K/V visits local blocks first): the results are then
    no longer bitwise the unfused kernel's (docs/soundness.md, "Loops"); off by default.
    ``lowering``: ``"table"`` makes the chunk-level code (waits, signals, the comm programs'
    transfers) loops over a chunk table in device memory, so code size and compile time do not
    grow with the chunk count; ``"unrolled"`` emits code per chunk; ``"auto"`` (default) picks
    unrolled for schedules of fewer than ``TABLE_MIN_CHUNKS`` chunks (docs/fused-abi.md).
    ``trace=True`` records timestamped program, wait and signal events into a device buffer
    (``insert-trace``, docs/tracing.md); off, the kernel is exactly the untraced one.
    ``self_advance=True``: the kernel advances its own epoch word, so the runtime enqueues no
    advance kernel before it (``self-advance-epoch``, docs/cuda-graphs.md; a kernel returning
    from a branch is refused); ``"auto"`` (what the runtime asks for): self-advancing where
    the kernel allows it, the ABI says which; ``False`` (this function's default): the advance
    kernel runs before each launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.errors import CompilationError

    check_target(target)
    be = backends.get(backend)
    signature = dict(signature)
    constexprs = dict(constexprs or {})
    request = fuse_request(kernel, signature=signature, constexprs=constexprs, schedule=schedule,
                           operand=operand, backend=backend, comm_programs=comm_programs,
                           reduce=reduce, withhold_chunks=withhold_chunks, remap=remap,
                           keep_ir=keep_ir, lowering=lowering,
                           reorder_reductions=reorder_reductions, trace=trace,
                           self_advance=self_advance)
    for n in constexprs:
        signature.setdefault(n, "constexpr")
    hook.install()
    source = _source_class()(kernel, signature, constexprs, attrs, request)
    be.compile_options(options)
    if isinstance(target, tuple):
        target = GPUTarget(target[0], target[1], 32)
    try:
        compiled = triton.compile(source, target=target, options=options)
    except CompilationError as e:  # an error in the user's kernel: its file:line, one line
        raise compilation_error(kernel, e) from e
    meta = compiled.metadata
    info = getattr(meta, "syncopate", None)
    if not info:
        raise CompileError("the syncopate stage did not run: another compile hook replaced ours")
    abi = FusedABI.from_json(info["abi"])
    abi.user_params = list(kernel.arg_names)
    ir_after = dict(getattr(meta, "syncopate_ir", {}) or {})
    dump_dir = settings.DUMP_IR.get()
    if dump_dir and ir_after:
        # the stage dumps when it runs; a cache hit runs no stage, so dump from the metadata
        dump_ir(dump_dir, kernel.__name__, compiled.hash, ir_after)
    return FusedCompile(compiled, abi, ir_after,
                        dict(getattr(meta, "syncopate_times_ms", {}) or {}))

