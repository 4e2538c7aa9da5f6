"""The tt mirror dialect: types, enums, every op's custom syntax against Triton's own printer,
ODS property names (generic form), builders, accessors and verifiers."""

from __future__ import annotations

import os

import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import (
    IntegerAttr,
    ModuleOp,
    NameLoc,
    TensorType,
    f16,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.utils.exceptions import VerifyException

from syncopate_mlir.bridge import normalize_ttir, parse_ttir_text, text_to_ttir, xdsl_to_text, xdsl_to_ttir
from syncopate_mlir.context import make_context
from syncopate_mlir.dialects import tt

OPS_FILE = os.path.join(os.path.dirname(__file__), "corpus", "tt_ops.mlir")


def triton_ctx():
    from triton._C.libtriton import ir

    ctx = ir.context()
    ir.load_dialects(ctx)
    return ctx


def parse(text: str) -> ModuleOp:
    m = parse_ttir_text(text)
    m.verify()
    return m


# ---------------------------------------------------------------------------------------------
# enums and types
# ---------------------------------------------------------------------------------------------

ENUM_PAIRS = [
    (tt.CacheModifier, "CACHE_MODIFIER"), (tt.MemSemantic, "MEM_SEMANTIC"),
    (tt.MemSyncScope, "MEM_SYNC_SCOPE"), (tt.EvictionPolicy, "EVICTION_POLICY"),
    (tt.RMWOp, "ATOMIC_OP"), (tt.RoundingMode, "ROUNDING_MODE"), (tt.PropagateNan, "PROPAGATE_NAN"),
    (tt.InputPrecision, "INPUT_PRECISION"), (tt.PaddingOption, "PADDING_OPTION"),
    (tt.ScaleDotElemType, "ScaleDotElemTypeTY"), (tt.DescriptorReduceKind, "DESCRIPTOR_REDUCE_KIND"),
]


@pytest.mark.parametrize("ours,theirs", ENUM_PAIRS, ids=[p[1] for p in ENUM_PAIRS])
def test_enum_values_match_triton(ours, theirs):
    from triton._C.libtriton import ir

    t = {k: int(v) for k, v in getattr(ir, theirs).__members__.items()}
    assert {m.name: int(m) for m in ours} == t


def test_enum_keywords_and_coercion():
    assert tt.MemSemantic.ACQUIRE_RELEASE.keyword == "acq_rel"
    assert tt.MemSyncScope.coerce("sys") is tt.MemSyncScope.SYSTEM
    assert tt.RMWOp.coerce("exch") is tt.RMWOp.XCHG
    assert tt.CacheModifier.coerce("CG") is tt.CacheModifier.CG
    assert tt.EvictionPolicy.coerce(IntegerAttr(3, i32)) is tt.EvictionPolicy.EVICT_LAST
    assert tt.CacheModifier.CG.attr() == IntegerAttr(3, i32)


@pytest.mark.parametrize("text", [
    "!tt.ptr<f16>", "!tt.ptr<i32, 3>", "!tt.ptr<tensor<128x64xf16>>", "!tt.ptr<!tt.ptr<f32>>",
    "!tt.tensordesc<tensor<64x32xbf16>>", "!tt.tensordesc<tensor<1x64xsi32>>",
    "tensor<128x64x!tt.ptr<f8E4M3FN>>",
])
def test_type_roundtrip(text):
    from xdsl.parser import Parser
    from xdsl.printer import Printer
    import io

    t = Parser(make_context(), text).parse_type()
    out = io.StringIO()
    Printer(out).print_attribute(t)
    assert out.getvalue() == text


def test_pointer_type_helpers():
    p = tt.PointerType(f16)
    tp = TensorType(p, [4, 8])
    assert tt.pointee_type(p) == f16
    assert tt.pointee_type(tp) == TensorType(f16, [4, 8])
    assert tt.pointer_type_like(TensorType(f32, [8])) == TensorType(tt.PointerType(f32), [8])
    assert tt.pointee_type(tt.PointerType(TensorType(f16, [2, 2]))) == TensorType(f16, [2, 2])
    assert tt.PointerType(i32, 3).address_space.data == 3
    assert tt.is_ptr_like(tp) and not tt.is_ptr_like(TensorType(i32, [4]))


# ---------------------------------------------------------------------------------------------
# custom syntax of every op, checked against Triton's printer
# ---------------------------------------------------------------------------------------------


def test_every_op_prints_like_triton():
    """tt_ops.mlir has every tt op (and the arith/scf forms Triton emits): xDSL reads it and
    prints exactly what Triton prints for it (up to value names)."""
    text = open(OPS_FILE).read()
    triton_print = text_to_ttir(text, triton_ctx()).str_nodebug()
    ours = xdsl_to_text(parse(text), locations=False)
    assert normalize_ttir(ours) == normalize_ttir(triton_print)
    # and printing is a fixed point of parsing
    assert xdsl_to_text(parse(ours), locations=False) == ours


def test_every_op_generic_form_parses_in_triton():
    """Generic form with properties: Triton reads xDSL's property names and types as its own."""
    text = open(OPS_FILE).read()
    m = parse(text)
    generic = xdsl_to_text(m, generic=True, locations=False)
    assert '"tt.load"' in generic and "operandSegmentSizes = array<i32: 1, 1, 0>" in generic
    assert "isVolatile = true" in generic and "cache = 3 : i32" in generic
    back = text_to_ttir(generic, triton_ctx()).str_nodebug()
    assert normalize_ttir(back) == normalize_ttir(text_to_ttir(text, triton_ctx()).str_nodebug())


def test_every_property_is_exercised_with_a_non_default_value():
    """Triton ignores property names it does not know in the generic form: every property of
    every op has a non-default value somewhere in tt_ops.mlir, so a misspelt name would show
    as a difference in the two tests above."""
    m = parse(open(OPS_FILE).read())
    seen: dict = {}
    for op in m.walk():
        for name, p in type(op).get_irdl_definition().properties.items() if hasattr(
                type(op), "get_irdl_definition") else ():
            v = op.properties.get(name)
            if v is not None and (p.default_value is None or v != p.default_value):
                seen.setdefault(type(op), set()).add(name)
    missing = {cls.__name__: sorted(n for n in cls.get_irdl_definition().properties
                                    if n != "operandSegmentSizes" and n not in seen.get(cls, set()))
               for cls in tt.TT_OPS + tt.OVERRIDE_OPS}
    assert {k: v for k, v in missing.items() if v} == {}


def test_dialect_covers_every_op_in_the_file():
    text = open(OPS_FILE).read()
    names = {op.name for op in parse(text).walk() if op.name.startswith("tt.")}
    defined = {op.name for op in tt.TT.operations}
    assert names <= defined
    # every op the dialect defines appears in the file, and every override of xDSL's ops
    assert defined - names == set()
    all_names = {op.name for op in parse(text).walk()}
    assert {op.name for op in tt.OVERRIDE_OPS} <= all_names


# ---------------------------------------------------------------------------------------------
# accessors
# ---------------------------------------------------------------------------------------------


def test_accessors():
    m = parse(open(OPS_FILE).read())
    by = {}
    for op in m.walk():
        by.setdefault(type(op), []).append(op)
    ld = by[tt.LoadOp][0]
    assert ld.mask is not None and ld.other is None
    assert ld.cache_modifier is tt.CacheModifier.CG and ld.eviction_policy is tt.EvictionPolicy.EVICT_LAST
    assert ld.volatile and ld.is_volatile == IntegerAttr(1, i1)
    assert ld.properties["operandSegmentSizes"].get_values() == (1, 1, 0)
    bl = next(o for o in by[tt.LoadOp] if o.boundary_check.get_values())
    assert bl.boundary_check.get_values() == (0, 1) and bl.padding_option is tt.PaddingOption.PAD_NAN
    st = by[tt.StoreOp][0]
    assert st.ptr.type == TensorType(tt.PointerType(f16), [64]) and st.value.type == TensorType(f16, [64])
    assert st.mask is not None and st.cache_modifier is tt.CacheModifier.WT
    dot = by[tt.DotOp][0]
    assert dot.a.type.get_shape() == (128, 64) and dot.b.type.get_shape() == (64, 64)
    assert dot.c.type == dot.d.type and dot.precision is tt.InputPrecision.TF32
    assert dot.max_num_imprecise_acc.value.data == 32
    ap = by[tt.AddPtrOp][0]
    assert tt.is_ptr_like(ap.ptr.type) and ap.offset.type == TensorType(i32, [64])
    dl = by[tt.DescriptorLoadOp][0]
    assert isinstance(dl.desc.type, tt.TensorDescType) and len(dl.indices) == 2
    md = by[tt.MakeTensorDescOp][0]
    assert len(md.shape) == 2 and len(md.strides) == 2 and md.padding_option is tt.PaddingOption.PAD_NAN
    assert md.base.type == tt.PointerType(f16)
    mp = by[tt.MakeTensorPtrOp][0]
    assert len(mp.shape) == len(mp.strides) == len(mp.offsets) == 2 and mp.order.get_values() == (1, 0)
    sp = by[tt.SplatOp][0]
    assert sp.src.type == tt.PointerType(f16)
    pid = by[tt.GetProgramIdOp][0]
    assert pid.axis_dim is tt.ProgramIDDim.Y and pid.axis_int == 1
    assert by[tt.GetNumProgramsOp][0].axis_int == 2
    rmw = by[tt.AtomicRMWOp][0]
    assert (rmw.rmw_op, rmw.mem_semantic, rmw.mem_scope) == (tt.RMWOp.UMAX, tt.MemSemantic.RELAXED,
                                                              tt.MemSyncScope.CTA)
    cas = by[tt.AtomicCASOp][0]
    assert cas.mem_semantic is tt.MemSemantic.ACQUIRE and cas.mem_scope is tt.MemSyncScope.SYSTEM
    asm = by[tt.ElementwiseInlineAsmOp][0]
    assert asm.asm_string.data.startswith("mov.b32") and asm.is_pure and len(asm.result) == 2
    red = by[tt.ReduceOp][0]
    assert red.axis.value.data == 0 and isinstance(red.combineOp.block.last_op, tt.ReduceReturnOp)
    f = next(o for o in by[tt.FuncOp] if o.sym_name.data == "ops")
    assert f.sym_visibility.data == "public" and f.get_arg_attrs(0)["tt.divisibility"] == IntegerAttr(16, i32)
    assert f.arg_index("i") == 3  # by SSA name hint (no locations in this file)
    call = by[tt.CallOp][0]
    assert call.callee.root_reference.data == "helper"


# ---------------------------------------------------------------------------------------------
# builders: a kernel assembled from Python compiles through Triton to PTX
# ---------------------------------------------------------------------------------------------


def build_kernel():
    div16 = {"tt.divisibility": IntegerAttr(16, i32)}
    func = tt.FuncOp("built", ([tt.PointerType(f32), tt.PointerType(i32), i32], []),
                     arg_attrs=[div16, div16, {}])
    x, flags, n = func.args
    # a new kernel argument appended by a pass, named like Triton names arguments
    rank = func.append_arg(i32, name="syn_rank")
    peers = func.append_arg(tt.PointerType(i64), name="syn_peers", attrs=div16)
    block = func.entry_block
    ops = []

    def add(op):
        ops.append(op)
        return op

    pid = add(tt.GetProgramIdOp(0)).result
    nprog = add(tt.GetNumProgramsOp("x")).result
    c128 = add(arith.ConstantOp(IntegerAttr(128, i32))).result
    c0 = add(arith.ConstantOp(IntegerAttr(0, i32))).result
    c1 = add(arith.ConstantOp(IntegerAttr(1, i32))).result
    base = add(arith.MuliOp(pid, c128)).result
    rng = add(tt.MakeRangeOp(0, 128)).result
    idx = add(arith.AddiOp(add(tt.SplatOp(base, [128])).result, rng)).result
    ptrs = add(tt.AddPtrOp(add(tt.SplatOp(x, [128])).result, idx)).result
    mask = add(tt.CmpiOp(idx, add(tt.SplatOp(n, [128])).result, "slt")).result
    vals = add(tt.LoadOp(ptrs, mask, evict="evict_first")).result
    flag = add(tt.AddPtrOp(flags, add(arith.AddiOp(pid, rank)).result)).result
    old = add(tt.AtomicRMWOp("add", flag, c1, sem="release", scope="sys")).result
    seen = add(tt.AtomicCASOp(flag, c0, old, sem=tt.MemSemantic.ACQUIRE, scope=tt.MemSyncScope.GPU)).result
    addr = add(tt.PtrToIntOp(flag, i64)).result
    ld = add(tt.ElementwiseInlineAsmOp("ld.acquire.sys.global.u32 $0, [$1];", "=r,l", [addr], [i32],
                                       pure=False, packed_element=1)).result[0]
    back = add(tt.IntToPtrOp(addr, tt.PointerType(i32))).result
    peer = add(tt.LoadOp(add(tt.AddPtrOp(peers, rank)).result)).result
    add(tt.StoreOp(back, add(arith.AddiOp(ld, add(arith.AddiOp(seen, nprog)).result)).result))
    add(tt.StoreOp(ptrs, vals, mask, cache="wt"))
    add(tt.StoreOp(add(tt.IntToPtrOp(peer, tt.PointerType(i64))).result, peer))
    add(tt.ReturnOp())
    for op in ops:
        block.add_op(op)
    func.attributes["noinline"] = IntegerAttr(0, i1)
    return ModuleOp([func])


def test_builders_make_a_verified_triton_module():
    mod = build_kernel()
    mod.verify()
    text = xdsl_to_text(mod, locations=False)
    assert "tt.atomic_rmw add, release, sys" in text
    assert "tt.atomic_cas acquire, gpu" in text
    assert 'tt.elementwise_inline_asm "ld.acquire.sys.global.u32 $0, [$1];"' in text
    assert "tt.load %8, %11 evictionPolicy = evict_first" in text or "evictionPolicy = evict_first :" in text
    tmod = xdsl_to_ttir(mod, triton_ctx())
    printed = tmod.str()
    # appended arguments carry their names (NameLoc) and attributes into Triton
    assert "%syn_rank: i32" in printed and "%syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}" in printed
    assert "tt.get_num_programs x" in printed


def test_builders_compile_to_ptx(tmp_path):
    import triton
    from triton.backends.compiler import GPUTarget

    mod = build_kernel()
    path = tmp_path / "built.ttir"
    path.write_text(xdsl_to_text(mod))
    with triton.knobs.cache.scope(), triton.knobs.compilation.scope():
        triton.knobs.cache.dir = str(tmp_path / "cache")
        triton.knobs.compilation.always_compile = True
        k = triton.compile(str(path), target=GPUTarget("cuda", 90, 32))
    ptx = k.asm["ptx"]
    assert ".entry built" in ptx
    assert "ld.acquire.sys.global.u32" in ptx
    assert "atom.global.sys.release.add.u32" in ptx
    assert "atom.global.acquire.gpu.cas.b32" in ptx
    assert "ld.global.L1::evict_first" in ptx and "st.global.wt.b32" in ptx


def test_insert_arg_keeps_function_consistent():
    mod = build_kernel()
    func = mod.body.block.first_op
    n = len(func.function_type.inputs.data)
    arg = func.insert_arg(1, i32, name="syn_epoch")
    assert func.args[1] is arg and arg.name_hint == "syn_epoch"
    assert isinstance(arg.location, NameLoc) and arg.location.desc.data == "syn_epoch"
    assert len(func.function_type.inputs.data) == n + 1 == len(func.arg_attrs.data)
    assert func.function_type.inputs.data[1] == i32
    assert func.get_arg_attrs(2) == {"tt.divisibility": IntegerAttr(16, i32)}  # flags moved to 2
    assert func.arg_index("syn_epoch") == 1
    func.set_arg_attr(1, "tt.divisibility", IntegerAttr(8, i32))
    mod.verify()
    assert "%syn_epoch: i32 {tt.divisibility = 8 : i32}" in xdsl_to_ttir(mod, triton_ctx()).str()


def test_builder_defaults_and_inference():
    p = tt.FuncOp("f", ([tt.PointerType(f16), TensorType(i1, [8])], [])).args
    splat = tt.SplatOp(p[0], [8])
    assert splat.result.type == TensorType(tt.PointerType(f16), [8])
    ld = tt.LoadOp(splat.result, p[1])
    assert ld.result.type == TensorType(f16, [8]) and ld.cache_modifier is tt.CacheModifier.NONE
    assert ld.properties["operandSegmentSizes"].get_values() == (1, 1, 0)
    ed = tt.ExpandDimsOp(ld.result, 1)
    assert ed.result.type == TensorType(f16, [8, 1])
    tr = tt.TransOp(ed.result, [1, 0])
    assert tr.result.type == TensorType(f16, [1, 8])
    j = tt.JoinOp(ld.result, ld.result)
    s = tt.SplitOp(j.result)
    assert s.outLHS.type == s.outRHS.type == TensorType(f16, [8])
    mr = tt.MakeRangeOp(4, 12)
    assert mr.result.type == TensorType(i32, [8])
    dot = tt.DotOp(ed.result, tr.result, tt.SplatOp(
        arith.ConstantOp(IntegerAttr(0, i32)).result, [8, 8]).result)
    assert dot.precision is tt.InputPrecision.IEEE and dot.d.type == TensorType(i32, [8, 8])
    red = tt.ReduceOp([mr.result], 0)
    assert red.result[0].type == i32 and len(red.combineOp.block.args) == 2
    desc = tt.MakeTensorDescOp(p[0], [], [], [16, 32])
    assert desc.result.type == tt.TensorDescType(TensorType(f16, [16, 32]))


# ---------------------------------------------------------------------------------------------
# verifiers
# ---------------------------------------------------------------------------------------------


def _module_with(body: str, args: str = "%p: !tt.ptr<f32>, %t: tensor<8xi32>") -> str:
    return f"module {{\n  tt.func public @f({args}) {{\n{body}\n    tt.return\n  }}\n}}\n"


@pytest.mark.parametrize("body,msg", [
    ('    %s = tt.splat %p : !tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>\n'
     '    %x = "tt.load"(%s) <{operandSegmentSizes = array<i32: 1, 0, 0>}> : (tensor<8x!tt.ptr<f32>>) -> tensor<8xf16>',
     "does not match"),
    ("    %r = tt.make_range {end = 4 : i32, start = 8 : i32} : tensor<4xi32>", "make_range"),
    ("    %e = tt.expand_dims %t {axis = 3 : i32} : tensor<8xi32> -> tensor<8x1xi32>", "expand_dims"),
    ("    %b = tt.broadcast %t : tensor<8xi32> -> tensor<16xi32>", "broadcast"),
    ('    %a = "tt.addptr"(%p, %t) : (!tt.ptr<f32>, tensor<8xi32>) -> !tt.ptr<f32>', "offset"),
    ("    %g = tt.get_program_id x : i64", "i32"),
])
def test_verifier_rejects(body, msg):
    m = parse_ttir_text(_module_with(body))
    with pytest.raises(VerifyException, match=msg):
        m.verify()


def test_return_type_checked():
    text = "module {\n  tt.func public @f(%a: i32) -> f32 {\n    tt.return %a : i32\n  }\n}\n"
    with pytest.raises(VerifyException, match="tt.return"):
        parse_ttir_text(text).verify()


def test_arith_overrides_keep_xdsl_classes():
    """The arith overrides subclass xDSL's ops, so passes' isinstance checks still hold."""
    m = parse(_module_with("    %c = arith.constant dense<3> : tensor<8xi32>\n"
                           "    %m = arith.cmpi slt, %t, %c : tensor<8xi32>\n"
                           "    %s = arith.select %m, %t, %c : tensor<8xi1>, tensor<8xi32>\n"
                           "    %e = arith.extsi %t : tensor<8xi32> to tensor<8xi64>\n"))
    ops = {op.name: op for op in m.walk()}
    assert isinstance(ops["arith.cmpi"], arith.CmpiOp) and ops["arith.cmpi"].result.type == TensorType(i1, [8])
    assert isinstance(ops["arith.select"], arith.SelectOp)
    assert isinstance(ops["arith.extsi"], arith.ExtSIOp)
    assert ops["arith.select"].cond.type == TensorType(i1, [8])


# ---------------------------------------------------------------------------------------------
# the context
# ---------------------------------------------------------------------------------------------


def test_context_dialects_and_no_unregistered_ops():
    ctx = make_context()
    assert not ctx.allow_unregistered
    names = {d.name for d in ctx.loaded_dialects}
    assert {"builtin", "arith", "scf", "math", "cf", "ub", "gpu", "llvm", "tt"} <= names
    # the overrides are the ops the context resolves
    assert ctx.get_op("arith.select") is tt.SelectOp and ctx.get_op("scf.while") is tt.WhileOp
    assert ctx.get_op("llvm.intr.assume") is tt.LLVMAssumeOp
    try:
        from syncopate_mlir.dialects import syncopate as syn
    except ImportError:
        syn = None
    if syn is not None and hasattr(syn, "SYNCOPATE"):
        assert "syncopate" in names
        assert all(ctx.get_op(op.name) is op for op in syn.SYNCOPATE.operations)


def test_memory_effects_follow_triton():
    """Effects as Triton's getEffects: volatile loads and impure asm/extern calls also write,
    so passes never hoist, merge or drop them; calls have unknown effects."""
    from xdsl.traits import MemoryEffectKind, get_effects, is_side_effect_free

    m = parse(open(OPS_FILE).read())

    def kinds(op):
        eff = get_effects(op)
        return None if eff is None else {e.kind for e in eff}

    R, W = MemoryEffectKind.READ, MemoryEffectKind.WRITE
    ops = list(m.walk())
    loads = [o for o in ops if isinstance(o, tt.LoadOp)]
    assert {kinds(o) == {R, W} for o in loads if o.volatile} == {True}
    assert {kinds(o) == {R} for o in loads if not o.volatile} == {True}
    for o in ops:
        if isinstance(o, (tt.ElementwiseInlineAsmOp, tt.ExternElementwiseOp)):
            assert kinds(o) == (set() if o.is_pure else {R, W})
        if isinstance(o, (tt.StoreOp, tt.PrintOp, tt.AssertOp)):
            assert W in kinds(o)
        if isinstance(o, (tt.AtomicRMWOp, tt.AtomicCASOp, tt.DescriptorStoreOp)):
            assert kinds(o) == {R, W}
        if isinstance(o, (tt.SplatOp, tt.AddPtrOp, tt.GetProgramIdOp, tt.MakeRangeOp, tt.DotOp)):
            assert is_side_effect_free(o)
        if isinstance(o, tt.CallOp):
            assert get_effects(o) is None
