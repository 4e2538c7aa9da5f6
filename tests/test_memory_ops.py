"""Default deny over every memory op (issue 28): the table of ``passes/memory_ops.py`` covers
every op class the IR can hold, and ``check-accesses`` treats every member of the access class
-- load, store, each atomic kind, each descriptor op -- on a communicated tensor by its role:
a read of a delivered tensor and a write of a produced one are proven; everything else is
refused with the op's line and what to do.  Uses of a communicated pointer the analysis does
not model (a call, inline assembly, the address stored to memory) are refused too; atomics on
tensors that are not communicated stay as they are."""

from __future__ import annotations

import re

import pytest
import triton
import triton.language as tl

from syncopate.compiler import fuse_request
from syncopate.emulate.modules import kernel_ttir
from syncopate.errors import CompileError
from syncopate.language import hint_region2
from syncopate.schedule import all_gather, reduce_scatter
from syncopate_mlir.context import _dialects
from syncopate_mlir.dialects.tt import RMWOp
from syncopate_mlir.passes import memory_ops
from syncopate_mlir.pipeline import run_pipeline_until

M, N = 128, 64
BM = 32


def test_every_op_class_that_may_touch_memory_is_classified():
    """An op added to the mirror (or to a dialect the context loads) that may touch memory
    must be put in a table before a kernel can use it on a communicated tensor."""
    missing, seen = [], 0
    for dialect in _dialects():
        for cls in dialect.operations:
            seen += 1
            if memory_ops.may_touch_memory(cls) and memory_ops.classification(cls) is None:
                missing.append(cls.name)
    assert seen > 150
    assert missing == []
    # and every tt op with a memory-effect trait is an access or explicitly not one
    from syncopate_mlir.dialects.tt import TT_OPS
    from xdsl.traits import MemoryReadEffect, MemoryWriteEffect
    for cls in TT_OPS:
        if any(isinstance(t, (MemoryReadEffect, MemoryWriteEffect)) for t in cls.traits):
            assert memory_ops.classification(cls) in ("access", "no-access"), cls.name


def test_every_access_class_member_has_a_kernel_below():
    """The kernels below exercise every op of the access table."""
    assert {c.name for c in memory_ops.ACCESSES} == set(EXPECTED)


# ----------------------------------------------------------------------------- kernels

@triton.jit
def k_load(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))


@triton.jit
def k_store(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(y_ptr + offs))


@triton.jit
def k_atomic(x_ptr, y_ptr, N: tl.constexpr, KIND: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    v = tl.load(y_ptr + offs)
    if KIND == "add":
        tl.atomic_add(x_ptr + offs, v)
    elif KIND == "max":
        tl.atomic_max(x_ptr + offs, v)
    elif KIND == "min":
        tl.atomic_min(x_ptr + offs, v)
    elif KIND == "and":
        tl.atomic_and(x_ptr + offs, v)
    elif KIND == "or":
        tl.atomic_or(x_ptr + offs, v)
    elif KIND == "xor":
        tl.atomic_xor(x_ptr + offs, v)
    elif KIND == "xchg":
        tl.atomic_xchg(x_ptr + offs, v)
    else:
        tl.atomic_cas(x_ptr + offs, v, v + 1)


@triton.jit
def k_desc(x_ptr, y_ptr, M: tl.constexpr, N: tl.constexpr, BM: tl.constexpr, OP: tl.constexpr,
           HINT: tl.constexpr):
    d = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[BM, N])
    rows = tl.program_id(0) * BM + tl.arange(0, BM)
    offs = rows[:, None] * N + tl.arange(0, N)[None, :]
    if OP == "load":
        tl.store(y_ptr + offs, d.load([tl.program_id(0) * BM, 0]))
    elif OP == "store":
        d.store([tl.program_id(0) * BM, 0], tl.load(y_ptr + offs))
    elif OP == "reduce":
        d.atomic_add([tl.program_id(0) * BM, 0], tl.load(y_ptr + offs))
    elif OP == "gather":
        if HINT:
            hint_region2(x_ptr, tl.program_id(0) * BM, tl.program_id(0) * BM + BM, 0, N)
        g = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, N])
        tl.store(y_ptr + offs, g.gather(rows, 0))
    else:
        if HINT:
            hint_region2(x_ptr, tl.program_id(0) * BM, tl.program_id(0) * BM + BM, 0, N)
        g = tl.make_tensor_descriptor(x_ptr, shape=[M, N], strides=[N, 1], block_shape=[1, N])
        g.scatter(tl.load(y_ptr + offs), rows, 0)


FLOAT_SIG = {"x_ptr": "*fp32", "y_ptr": "*fp32"}
INT_SIG = {"x_ptr": "*i32", "y_ptr": "*i32"}


class Case:
    """A kernel compiled to TTIR once, checked against a schedule per role."""

    def __init__(self, kernel, constexprs, sig=FLOAT_SIG):
        self.kernel, self.constexprs, self.sig = kernel, dict(constexprs), dict(sig)
        self.sig.update({n: "i32" for n in kernel.arg_names
                         if n not in self.sig and n not in self.constexprs})
        self.ttir = kernel_ttir(kernel, self.sig, self.constexprs)

    def check(self, role, until="check-accesses", operand="x_ptr"):
        dtype = "fp32" if self.sig[operand] == "*fp32" else "i32"
        if role == "consumed":
            sched = all_gather([M, N], dtype, 2, mode="pull")
        else:
            sched = reduce_scatter([M, N], dtype, 2)
        request = fuse_request(self.kernel, signature=self.sig, constexprs=self.constexprs,
                               schedule=sched, operand=operand, backend="sm", comm_programs=2)
        return run_pipeline_until(self.ttir, request, until)[0]


#: the expected outcome per access op and role: None = proven (accepted), else a phrase of the
#: refusal
EXPECTED = {
    "tt.load": {"consumed": None, "produced": "the kernel reads 'x_ptr'"},
    "tt.store": {"consumed": "the kernel writes 'x_ptr'", "produced": None},
    "tt.atomic_rmw": {"consumed": "updates 'x_ptr' in place, but the schedule delivers",
                      "produced": "an atomic may update an element any number of times"},
    "tt.atomic_cas": {"consumed": "updates 'x_ptr' in place, but the schedule delivers",
                      "produced": "an atomic may update an element any number of times"},
    "tt.descriptor_load": {"consumed": None, "produced": "the kernel reads 'x_ptr'"},
    "tt.descriptor_store": {"consumed": "the kernel writes 'x_ptr'", "produced": None},
    "tt.descriptor_reduce": {"consumed": "updates 'x_ptr' in place, but the schedule delivers",
                             "produced": "an atomic may update an element any number of times"},
    "tt.descriptor_gather": {"consumed": None, "produced": "the kernel reads 'x_ptr'"},
    "tt.descriptor_scatter": {"consumed": "the kernel writes 'x_ptr'", "produced": None},
}


def _expect(case: Case, op_name: str, role: str):
    assert op_name in case.ttir
    want = EXPECTED[op_name][role]
    if want is None:
        case.check(role)
        return
    with pytest.raises(CompileError) as e:
        case.check(role)
    assert want in str(e.value)
    assert e.value.location is not None and "test_memory_ops.py" in e.value.location


# ----------------------------------------------------------------------------- pointer ops

@pytest.mark.parametrize("role", ["consumed", "produced"])
@pytest.mark.parametrize("kernel,op_name", [(k_load, "tt.load"), (k_store, "tt.store")])
def test_load_and_store_by_role(kernel, op_name, role):
    _expect(Case(kernel, {"N": N}), op_name, role)


#: every atomic the language offers, with the dtype it is legal on; together they lower to
#: every tt.atomic_rmw kind (fp32 max/min become max/umin and min/umax on the bits)
ATOMICS = [("add", FLOAT_SIG), ("add", INT_SIG), ("max", FLOAT_SIG), ("min", FLOAT_SIG),
           ("max", INT_SIG), ("and", INT_SIG), ("or", INT_SIG), ("xor", INT_SIG),
           ("xchg", FLOAT_SIG), ("cas", INT_SIG)]


@pytest.mark.parametrize("role", ["consumed", "produced"])
@pytest.mark.parametrize("kind,sig", ATOMICS, ids=[f"{k}-{s['x_ptr'][1:]}" for k, s in ATOMICS])
def test_every_atomic_on_a_communicated_tensor_is_refused(kind, sig, role):
    _expect(Case(k_atomic, {"N": N, "KIND": kind}, sig),
            "tt.atomic_cas" if kind == "cas" else "tt.atomic_rmw", role)


def test_the_atomics_above_cover_every_rmw_kind():
    seen = set()
    for kind, sig in ATOMICS:
        seen.update(re.findall(r"tt\.atomic_rmw (\w+),", Case(k_atomic, {"N": N, "KIND": kind},
                                                                sig).ttir))
    every = set(RMWOp._KEYWORDS.values())
    assert len(every) == len(RMWOp)
    assert seen == every, sorted(every - seen)


def test_atomic_on_a_tensor_that_is_not_communicated_stays():
    """``y`` is not bound by operand=: its atomics are the kernel's business (a counter)."""
    text = str(Case(k_atomic, {"N": N, "KIND": "add"}).check("consumed", "resolve-chunks",
                                                             operand="y_ptr"))
    assert "tt.atomic_rmw" in text and "syncopate" in text


# ----------------------------------------------------------------------------- descriptors

DESC = {"tt.descriptor_load": "load", "tt.descriptor_store": "store",
        "tt.descriptor_reduce": "reduce", "tt.descriptor_gather": "gather",
        "tt.descriptor_scatter": "scatter"}


@pytest.mark.parametrize("role", ["consumed", "produced"])
@pytest.mark.parametrize("op_name", list(DESC))
def test_descriptor_ops_by_role(op_name, role):
    hint = op_name in ("tt.descriptor_gather", "tt.descriptor_scatter")
    _expect(Case(k_desc, {"M": M, "N": N, "BM": BM, "OP": DESC[op_name], "HINT": hint}),
            op_name, role)


@pytest.mark.parametrize("op,role", [("gather", "consumed"), ("scatter", "produced")])
def test_descriptor_gather_scatter_without_a_hint_ask_for_one(op, role):
    """Their rows come from a tensor of offsets: no box, so a hint (was: not analysed at all,
    so a gather of an all-gathered tensor got no wait)."""
    case = Case(k_desc, {"M": M, "N": N, "BM": BM, "OP": op, "HINT": False})
    with pytest.raises(CompileError, match="tensor of offsets.*hint_region2"):
        case.check(role)


def test_hinted_descriptor_gather_waits_and_is_ordered_after_its_wait():
    text = str(Case(k_desc, {"M": M, "N": N, "BM": BM, "OP": "gather", "HINT": True})
               .check("consumed", "insert-waits"))
    assert "syncopate.wait_region" in text
    gather = next(l for l in text.splitlines() if "tt.descriptor_gather" in l)
    # the column offset is the wait's token added to 0, not the constant 0
    assert not re.search(r"\[%\S+, %c0_i32\]", gather), gather


# ----------------------------------------------------------------------------- other uses

@triton.jit(noinline=True)
def _first(p, row):
    return tl.load(p + row)


@triton.jit
def k_call(x_ptr, y_ptr, N: tl.constexpr):
    row = tl.program_id(0) * N
    tl.store(y_ptr + row + tl.arange(0, N), tl.load(x_ptr + row + tl.arange(0, N)))
    tl.store(y_ptr + row, _first(x_ptr, row))


@triton.jit
def k_asm(x_ptr, y_ptr, N: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    v = tl.inline_asm_elementwise("ld.global.b32 $0, [$1];", "=r,l", [x_ptr + offs],
                                  dtype=tl.int32, is_pure=False, pack=1)
    tl.store(y_ptr + offs, v.to(tl.float32, bitcast=True))


@triton.jit
def k_escape(x_ptr, y_ptr, z_ptr, N: tl.constexpr):
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs))
    tl.store(z_ptr + offs, (x_ptr + offs).to(tl.int64, bitcast=True))


@pytest.mark.parametrize("kernel,phrase", [
    (k_call, "this tt.call takes a value computed from 'x_ptr'"),
    (k_asm, "this tt.elementwise_inline_asm takes a value computed from 'x_ptr'"),
    (k_escape, "it stores an address into the communicated tensor to memory"),
])
def test_uses_the_analysis_does_not_model_are_refused(kernel, phrase):
    sig = dict(FLOAT_SIG)
    if "z_ptr" in kernel.arg_names:
        sig["z_ptr"] = "*i64"
    case = Case(kernel, {"N": N}, sig)
    with pytest.raises(CompileError) as e:
        case.check("consumed")
    assert phrase in str(e.value)
    assert e.value.location is not None


# ----------------------------------------------------------------------------- issue 28's cases

@triton.jit
def rowsum_then_bump(x_ptr, y_ptr, N: tl.constexpr, MIN: tl.constexpr):
    """Item 1: reads its rows of the gathered x, stores their sums, then bumps the rows."""
    row = tl.program_id(0)
    offs = row * N + tl.arange(0, N)
    tl.store(y_ptr + row, tl.sum(tl.load(x_ptr + offs)))
    if MIN:
        tl.atomic_min(x_ptr + offs, 0.0)
    else:
        tl.atomic_add(x_ptr + offs, 100.0)


@triton.jit
def store_then_count(x_ptr, y_ptr, N: tl.constexpr):
    """Item 2: stores its partial C (x), then counts itself in C[0, 0]."""
    offs = tl.program_id(0) * N + tl.arange(0, N)
    tl.store(x_ptr + offs, tl.load(y_ptr + offs))
    tl.atomic_add(x_ptr, 1.0)


@triton.jit
def splitk_atomic(a_ptr, b_ptr, x_ptr, K: tl.constexpr, N: tl.constexpr, BM: tl.constexpr,
                  BK: tl.constexpr):
    """Item 3: a split-K GEMM whose only access to the reduce-scattered C (x) is an atomic."""
    pid_m, pid_k = tl.program_id(0), tl.program_id(1)
    rm = pid_m * BM + tl.arange(0, BM)
    rk = pid_k * BK + tl.arange(0, BK)
    rn = tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    tl.atomic_add(x_ptr + rm[:, None] * N + rn[None, :], tl.dot(a, b))


@pytest.mark.parametrize("use_min", [False, True])
def test_atomic_into_the_gathered_tensor_is_refused(use_min):
    case = Case(rowsum_then_bump, {"N": N, "MIN": use_min})
    with pytest.raises(CompileError, match="updates 'x_ptr' in place, but the schedule delivers"):
        case.check("consumed")


def test_store_and_atomic_into_a_reduce_scattered_output_is_refused():
    with pytest.raises(CompileError, match="chunk could leave before its last update"):
        Case(store_then_count, {"N": N}).check("produced")


def test_atomic_only_split_k_output_gets_a_true_message():
    sig = {"a_ptr": "*fp32", "b_ptr": "*fp32", "x_ptr": "*fp32"}
    case = Case(splitk_atomic, {"K": 64, "N": N, "BM": BM, "BK": 32}, sig)
    with pytest.raises(CompileError) as e:
        case.check("produced")
    msg = str(e.value)
    assert "never accesses" not in msg and "never loads or stores" not in msg
    assert "tt.atomic_rmw" in msg and "split-K" in msg
