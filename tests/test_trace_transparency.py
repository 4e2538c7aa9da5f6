"""A traced kernel is the untraced kernel plus writes into its trace buffer -- checked on CPU.

Why: the emulator runs a fused module before the lowering, and ``insert-trace`` works on the
lowered kernel, so by itself the emulator never sees what tracing adds. The pass therefore
checks every traced compile (``passes/insert_trace.py``, ``check_transparent``): removing the
events gives back the module it was given. These tests show (1) the traced AG+GEMM and MoE
dispatch pass the check and emulate clean (``emulate(..., trace=True)``), and (2) the check
catches each way a trace could change the kernel: an event written through a flag or an
operand instead of the trace buffer, a buffer read from another peers-table row than the one
the runtime fills, a wait's result rewired through event code, a signal dropped.
"""

from __future__ import annotations

import pytest

from syncopate.emulate import emulate, fuse_module
from syncopate.errors import CompileError
from syncopate.kernels import kernel_fn
from syncopate_mlir.passes import insert_trace as it

from emulate_helpers import compile_kw, gemm_args, grid, schedule

PTR = "matmul_ptr_kernel"


def _ag_gemm(**kw):
    sched, operand = schedule("all_gather")
    return dict(kernel=kernel_fn(PTR), schedule=sched, operand=operand, backend="sm",
                comm_programs=2, **compile_kw(PTR), **kw)


def _fuse_traced(**kw):
    args = _ag_gemm(**kw)
    return fuse_module(args.pop("kernel"), trace=True, **args)


@pytest.mark.parametrize("lowering", ["unrolled", "table"])
def test_traced_ag_gemm_emulates_clean(lowering):
    """AG+GEMM as ``gpu_trace.py`` records it (pull and push, both lowerings): the trace
    passes the check and the kernel it leaves is emulated clean against the unfused GEMM."""
    for mode in ("pull", "push"):
        sched, operand = schedule("all_gather", mode=mode)
        emulate(kernel_fn(PTR), schedule=sched, operand=operand, grid=grid(PTR),
                args=gemm_args(), backend="sm", comm_programs=2, lowering=lowering,
                policies=("in-order", "late", "random:1"), launches=2, trace=True,
                **compile_kw(PTR))


def test_events_are_all_removed_and_nothing_else():
    """``strip_events`` of a traced kernel leaves no clock read and no atomic on the buffer,
    and keeps every wait and every flag release of the kernel."""
    from syncopate.compiler import fuse_request
    from syncopate.emulate.modules import kernel_ttir
    from syncopate_mlir.dialects.tt import AtomicRMWOp, CallOp, ElementwiseInlineAsmOp
    from syncopate_mlir.pipeline import run_pipeline_until
    a = _ag_gemm()
    kernel = a.pop("kernel")
    opts = a.pop("options")
    attrs = a.pop("attrs")
    req = fuse_request(kernel, trace=True, keep_ir=False, **a)
    ttir = kernel_ttir(kernel, a["signature"], a["constexprs"], attrs, opts)
    traced, _ = run_pipeline_until(ttir, req, "insert-trace")
    stripped = it.strip_events(traced)

    def count(m, pred):
        return sum(1 for o in m.walk() if pred(o))

    def timer(o):
        return isinstance(o, ElementwiseInlineAsmOp) and o.asm_string.data == it.TIMER_ASM

    def wait(o):
        return isinstance(o, CallOp) and o.callee.string_value().startswith("syncopate_wait")

    def release(o):
        return isinstance(o, AtomicRMWOp) and o.mem_semantic.name == "RELEASE"

    assert count(traced, timer) > 0 and count(stripped, timer) == 0
    assert count(stripped, wait) == count(traced, wait) > 0
    assert count(stripped, release) == count(traced, release) > 0


# -- mutations of the pass: each must be refused -------------------------------------------------


def test_an_event_written_through_a_flag_is_refused(monkeypatch):
    """An event whose counter is one of the kernel's flags (a trace aliasing a flag)."""
    from syncopate_mlir.dialects.tt import AtomicRMWOp
    from syncopate_mlir.passes.abi_info import abi_args
    from syncopate_mlir.passes.ir_utils import kernel_func

    orig = it.InsertTrace._insert

    def insert(self, op):
        orig(self, op)
        flags = abi_args(kernel_func(op))["syn_flags"]
        from syncopate_mlir.passes.builder import Builder
        first = next(o for o in kernel_func(op).walk() if isinstance(o, AtomicRMWOp)
                     and o.ptr is not flags)  # the first event's slot claim
        b = Builder(first.next_op)
        b.insert(AtomicRMWOp("add", flags, b.const(1), sem="relaxed", scope="gpu"))
    monkeypatch.setattr(it.InsertTrace, "_insert", insert)
    with pytest.raises(CompileError, match="insert-trace changed the kernel"):
        _fuse_traced()


def test_a_buffer_from_another_peers_row_is_refused(monkeypatch):
    """The pass reading the buffer's address from the operand's row (one row early): its
    events would land in A's peer addresses. The check finds the buffer through the row the
    runtime fills (from the ABI), so none of these events is removed."""
    monkeypatch.setattr(it, "trace_row", lambda m: 1 + len(it.operands_of(m)) - 1)
    with pytest.raises(CompileError, match="insert-trace changed the kernel"):
        _fuse_traced()


def test_a_wait_result_rewired_through_event_code_is_refused(monkeypatch):
    """Event code that takes the place of a wait's result (a loop-carried value or an
    ``scf.if`` result then depends on the trace)."""
    from syncopate_mlir.dialects.tt import CallOp
    from syncopate_mlir.passes.builder import Builder
    from syncopate_mlir.passes.ir_utils import kernel_func

    orig = it.InsertTrace._insert

    def insert(self, op):
        orig(self, op)
        for call in [o for o in kernel_func(op).walk() if isinstance(o, CallOp)
                     and o.callee.string_value().startswith("syncopate_wait")]:
            if call.results and call.results[0].uses:
                b = Builder(call.next_op)
                twisted = b.add(call.results[0], b.const(0))
                for use in list(call.results[0].uses):
                    if use.operation is not twisted.owner:
                        use.operation.operands[use.index] = twisted
                return
        raise AssertionError("no wait whose result is used")
    monkeypatch.setattr(it.InsertTrace, "_insert", insert)
    with pytest.raises(CompileError, match="insert-trace changed the kernel"):
        _fuse_traced(lowering="table")


def test_a_dropped_signal_is_refused(monkeypatch):
    from syncopate_mlir.dialects.tt import AtomicRMWOp, MemSemantic
    from syncopate_mlir.passes.ir_utils import kernel_func

    orig = it.InsertTrace._insert

    def insert(self, op):
        orig(self, op)
        sig = next(o for o in kernel_func(op).walk() if isinstance(o, AtomicRMWOp)
                   and o.mem_semantic == MemSemantic.RELEASE and not o.results[0].uses)
        sig.detach()
        sig.erase()
    monkeypatch.setattr(it.InsertTrace, "_insert", insert)
    with pytest.raises(CompileError, match="insert-trace changed the kernel"):
        _fuse_traced()
