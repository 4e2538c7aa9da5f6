"""``self-advance-epoch`` (``passes/self_advance_epoch.py``): the fused kernel advances its own
epoch word, so the runtime enqueues no advance kernel before it.

CPU only: the pass on fused modules, the emulator running several launches of self-advancing
kernels (every backend, both GEMM kernels, interleavings that delay programs), the compile
option's plumbing into the ABI, and the runtime skipping the advance.
"""

from __future__ import annotations

import pytest

from emulate_helpers import KERNELS, compile_kw, fused, gemm_args, grid, schedule
from syncopate.emulate import emulate
from syncopate.errors import CompileError
from syncopate.kernels import kernel_fn
from syncopate_mlir.dialects.syncopate import state_of

POLICIES = ("in-order", "reverse", "late", "random:1", "random:2")


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend, template", [("sm", "all_gather"), ("sm", "reduce_scatter"),
                                               ("ce", "all_gather"), ("nvshmem", "all_gather")])
def test_three_launches_of_a_self_advancing_kernel_match_the_reference(kernel, backend, template):
    """Each launch runs with the previous launch's epoch + 1 with no host advance: fresh inputs
    every launch, every output equal to the unfused kernel's, no race, and the word, its
    done-counter and the mirror at 3, 0, 3 on every rank afterwards (the emulator checks)."""
    sched, operand = schedule(template)
    res = emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                  args=gemm_args(), backend=backend, comm_programs=2, policies=POLICIES,
                  launches=3, check=False, self_advance=True, **compile_kw(kernel))
    assert res.ok, (res.races[:3], res.mismatches[:3])


def test_a_kernel_that_never_stores_the_next_epoch_is_caught(monkeypatch):
    """The checks have teeth: with the last program's stores taken out (the counter still
    counts), every launch runs with epoch 1 -- launch 2's waits are satisfied by launch 1's
    flags -- and the emulation reports it (stale outputs or a race, and the word left at 0)."""
    from syncopate_mlir.passes import self_advance_epoch as sae
    from syncopate_mlir.dialects.tt import AtomicRMWOp, GetNumProgramsOp

    def count_only(b, word, epoch):
        n = b.const(1)
        for axis in (0, 1, 2):
            n = b.mul(n, b.insert(GetNumProgramsOp(axis)).result)
        b.insert(AtomicRMWOp("add", sae.addptr(b, word, b.const(sae.WORD_DONE)), b.const(1),
                             sem="acq_rel", scope="gpu"))

    monkeypatch.setattr(sae, "_count_done", count_only)
    kernel = "matmul_ptr_kernel"
    sched, operand = schedule("all_gather")
    res = emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                  args=gemm_args(), backend="sm", comm_programs=2, policies=("in-order",),
                  launches=2, check=False, self_advance=True, **compile_kw(kernel))
    assert not res.ok
    assert any("self-advancing epoch word is 0" in m for m in res.mismatches)


def _ask(module, mode: str):
    """``module`` with its request's ``self_advance`` set to ``mode``."""
    from dataclasses import replace

    from syncopate_mlir.dialects.syncopate import ATTR_REQUEST, RequestAttr, request_of
    module.attributes[ATTR_REQUEST] = RequestAttr(replace(request_of(module), self_advance=mode))
    return module


def _applied(kernel="matmul_ptr_kernel", template="all_gather", backend="sm"):
    from syncopate_mlir.passes.load_epoch import LoadEpoch
    from syncopate_mlir.passes.self_advance_epoch import SelfAdvanceEpoch
    module, _ = fused(kernel, template, backend)
    module = _ask(module.clone(), "on")
    LoadEpoch().apply(None, module)
    SelfAdvanceEpoch().apply(None, module)
    return module


def test_the_pass_increments_the_loaded_epoch_and_counts_programs_before_each_return():
    from syncopate_mlir.dialects.tt import AtomicRMWOp, LoadOp, ReturnOp, StoreOp
    from syncopate_mlir.passes.abi_info import abi_args
    from syncopate_mlir.passes.ir_utils import func_body, kernel_func
    module = _applied()
    func = kernel_func(module)
    word = abi_args(func)["syn_epoch"]
    body = list(func_body(func).ops)
    load = body[0]
    assert isinstance(load, LoadOp) and load.operands[0] is word
    # the load's only user is the increment; everything else uses the incremented epoch
    (use,) = list(load.results[0].uses)
    inc = use.operation
    assert inc.name == "arith.addi"
    atomics = [o for o in func.walk() if isinstance(o, AtomicRMWOp)
               and o.ptr.owner.name == "tt.addptr" and o.ptr.owner.ptr is word]
    rets = [o for o in func.walk() if isinstance(o, ReturnOp)]
    assert len(atomics) == len(rets) >= 1
    stores = [o for o in func.walk() if isinstance(o, StoreOp) and o.operands[1] is inc.results[0]]
    assert len(stores) == 2 * len(rets)  # the word and the mirror, masked to the last program
    assert state_of(module).self_advanced
    again = module.clone()
    from syncopate_mlir.passes.self_advance_epoch import SelfAdvanceEpoch
    SelfAdvanceEpoch().apply(None, again)  # applied once only
    assert len([o for o in kernel_func(again).walk() if isinstance(o, AtomicRMWOp)]) == \
        len([o for o in func.walk() if isinstance(o, AtomicRMWOp)])


def test_without_the_option_the_pass_changes_nothing():
    from syncopate_mlir.passes.load_epoch import LoadEpoch
    from syncopate_mlir.passes.self_advance_epoch import SelfAdvanceEpoch
    module, _ = fused("matmul_ptr_kernel", "all_gather", "sm")
    a = module.clone()
    LoadEpoch().apply(None, a)
    b = a.clone()
    SelfAdvanceEpoch().apply(None, b)
    assert a.is_structurally_equivalent(b)


def test_the_pass_refuses_before_load_epoch():
    from syncopate_mlir.passes.self_advance_epoch import SelfAdvanceEpoch
    module, _ = fused("matmul_ptr_kernel", "all_gather", "sm")
    module = _ask(module.clone(), "on")
    with pytest.raises(CompileError, match="after load-epoch"):
        SelfAdvanceEpoch().apply(None, module)


def test_the_compile_option_reaches_the_abi_and_the_cache_key():
    """``compile(..., self_advance=True)`` -> the request's key differs, the full pipeline
    (down to PTX) runs the pass, and the ABI says so (the runtime reads it)."""
    import syncopate
    from syncopate.kernels import compile_args, compile_attrs, default_config
    from syncopate.schedule import all_gather
    name = "matmul_ptr_kernel"
    cfg = default_config(512, 256, 256, "bf16", "ptr")
    sig, cx = compile_args(name, "bf16", cfg)
    kw = dict(signature=sig, constexprs=cx, schedule=all_gather([512, 256], "bf16", 2, split=2),
              operand="a_ptr", backend="sm", comm_programs=4, attrs=compile_attrs(name),
              **cfg.options())
    on = syncopate.compile(kernel_fn(name), self_advance=True, **kw)
    off = syncopate.compile(kernel_fn(name), **kw)
    auto = syncopate.compile(kernel_fn(name), self_advance="auto", **kw)
    assert on.abi.self_advance and not off.abi.self_advance
    assert auto.abi.self_advance  # the runtime's default: this kernel can count itself done
    assert on.abi.to_json()["self_advance"] is True
    ptx = on.kernel.asm["ptx"]
    assert "atom" in ptx and ptx != off.kernel.asm["ptx"]
    assert auto.kernel.asm["ptx"] == ptx


def test_self_advance_modes():
    """True/"on", False/None/"off" and "auto"; anything else is a typed error naming it."""
    from syncopate.compiler import self_advance_mode
    assert [self_advance_mode(v) for v in (True, "on", False, None, "off", "auto")] == \
        ["on", "on", "off", "off", "off", "auto"]
    with pytest.raises(CompileError, match="self_advance=1"):
        self_advance_mode(1)


def test_auto_leaves_a_kernel_it_cannot_count_to_the_advance_kernel():
    """A return from a branch: ``on`` refuses it, ``auto`` marks the module ``off`` (the ABI
    then has no self_advance and the runtime enqueues the advance kernel) and adds nothing."""
    from xdsl.dialects import cf
    from xdsl.ir import Block

    from syncopate_mlir.dialects.tt import ReturnOp
    from syncopate_mlir.passes.ir_utils import kernel_func
    from syncopate_mlir.passes.load_epoch import LoadEpoch
    from syncopate_mlir.passes.self_advance_epoch import SelfAdvanceEpoch
    module, _ = fused("matmul_ptr_kernel", "all_gather", "sm")
    module = module.clone()
    LoadEpoch().apply(None, module)
    # the entry block's return becomes a branch to a block that returns
    func = kernel_func(module)
    ret = next(o for o in func.walk() if isinstance(o, ReturnOp))
    tail = Block()
    func.body.add_block(tail)
    ret.detach()
    tail.add_op(ret)
    func.body.blocks[0].add_op(cf.BranchOp(tail))
    for mode, raises in (("on", True), ("auto", False)):
        m = _ask(module.clone(), mode)
        if raises:
            with pytest.raises(CompileError, match="returns from inside a branch"):
                SelfAdvanceEpoch().apply(None, m)
            continue
        SelfAdvanceEpoch().apply(None, m)
        assert not state_of(m).self_advanced
        assert m.is_structurally_equivalent(_ask(module.clone(), mode))


def test_the_stale_epoch_fault_is_refused_for_a_self_advancing_kernel():
    """The fault skips the host's advance, which a self-advancing kernel does not have: a
    typed error instead of a fault that silently does nothing."""
    from syncopate.emulate.comm import Faults
    from syncopate.errors import EmulationError
    kernel = "matmul_ptr_kernel"
    sched, operand = schedule("all_gather")
    with pytest.raises(EmulationError, match="self_advance"):
        emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                args=gemm_args(), backend="sm", comm_programs=2, policies=("in-order",),
                launches=2, check=False, self_advance=True, faults=Faults(stale_epoch=True),
                **compile_kw(kernel))
