"""The interpreter on its own: op semantics that the GPU fixes and numpy does not (C integer
division, bf16 rounding), reductions, typed errors for what it cannot run, and the unfused
GEMMs against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import triton
import triton.language as tl

from syncopate.emulate.interpreter import Machine, ModuleCode, ProgramCtx, _c_div, _c_rem
from syncopate.emulate.memory import Buffer, Ptr, etype_named, round_bf16
from syncopate.errors import EmulationError


def _module(text):
    from syncopate_mlir.bridge import ttir_to_xdsl
    from syncopate_mlir.context import make_context
    return ttir_to_xdsl(text, make_context())


def _run(code, args, grid=(1, 1, 1)):
    m = Machine()
    for pid in range(grid[0]):
        pc = ProgramCtx(m, 0, (pid, 0, 0), grid, 1, "compute")
        env = code.new_env()
        for s, v in zip(code.arg_slots, args):
            env[s] = v
        if code.body_yields:
            for _ in code.body(env, pc):
                pass
        else:
            code.body(env, pc)


def test_c_division_truncates_toward_zero():
    assert (_c_div(-7, 2, "x"), _c_rem(-7, 2, "x")) == (-3, -1)
    a = np.array([-7, 7, -7], np.int32)
    b = np.array([2, -2, -2], np.int32)
    assert _c_div(a, b, "x").tolist() == [-3, -3, 3]
    assert _c_rem(a, b, "x").tolist() == [-1, 1, -1]
    with pytest.raises(EmulationError, match="division by zero"):
        _c_div(1, 0, "here")


def test_bf16_rounds_to_nearest_even():
    x = np.array([1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -9], np.float32)
    assert round_bf16(x).tolist() == [1.0, 1.0 + 2 ** -6, 1.0]


KERNEL = """
module {
  tt.func public @k(%x: !tt.ptr<f32>, %y: !tt.ptr<i32>) {
    %r = tt.make_range {end = 8 : i32, start = 0 : i32} : tensor<8xi32>
    %p = tt.splat %x : !tt.ptr<f32> -> tensor<8x!tt.ptr<f32>>
    %pp = tt.addptr %p, %r : tensor<8x!tt.ptr<f32>>, tensor<8xi32>
    %v = tt.load %pp : tensor<8x!tt.ptr<f32>>
    %s = "tt.reduce"(%v) <{axis = 0 : i32}> ({
    ^bb0(%a: f32, %b: f32):
      %m = arith.maxnumf %a, %b : f32
      tt.reduce.return %m : f32
    }) : (tensor<8xf32>) -> f32
    %c3 = arith.constant -3 : i32
    %c2 = arith.constant 2 : i32
    %q = arith.divsi %c3, %c2 : i32
    tt.store %x, %s : !tt.ptr<f32>
    tt.store %y, %q : !tt.ptr<i32>
    tt.return
  }
}
"""


def test_reduce_region_and_scalar_ops():
    code = ModuleCode(_module(KERNEL)).kernel
    xb = Buffer("x", 0, etype_named("f32"), np.arange(8, dtype=np.float32) - 2)
    yb = Buffer("y", 0, etype_named("i32"), np.zeros(1, np.int32))
    _run(code, [Ptr(xb, 0), Ptr(yb, 0)])
    assert xb.data[0] == 5.0 and yb.data[0] == -1


def test_unknown_op_is_a_typed_error_naming_the_op():
    text = KERNEL.replace("%m = arith.maxnumf %a, %b : f32", "%m = math.atan2 %a, %b : f32")
    with pytest.raises(EmulationError, match="math.atan2"):
        ModuleCode(_module(text)).kernel


def test_out_of_bounds_access_is_reported():
    code = ModuleCode(_module(KERNEL)).kernel
    xb = Buffer("x", 0, etype_named("f32"), np.zeros(4, np.float32))
    yb = Buffer("y", 0, etype_named("i32"), np.zeros(1, np.int32))
    with pytest.raises(EmulationError, match="out-of-bounds"):
        _run(code, [Ptr(xb, 0), Ptr(yb, 0)])


@pytest.mark.parametrize("kernel", ["matmul_ptr_kernel", "matmul_tma_persistent_kernel"])
def test_unfused_gemm_matches_numpy(kernel):
    from syncopate.emulate import kernel_ttir
    from syncopate.kernels import GemmConfig, compile_args, compile_attrs, kernel_fn

    cfg = GemmConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
    sig, cx = compile_args(kernel, "bf16", cfg, num_sms=3)
    code = ModuleCode(_module(kernel_ttir(kernel_fn(kernel), sig, cx, compile_attrs(kernel),
                                          cfg.options()))).kernel
    M, N, K = 192, 128, 96  # a 3 x 2 tile grid, three K steps
    rng = np.random.default_rng(0)
    a = round_bf16(rng.standard_normal((M, K)).astype(np.float32))
    b = round_bf16(rng.standard_normal((K, N)).astype(np.float32))
    bufs = [Buffer(n, 0, etype_named("bf16"), d.reshape(-1).copy())
            for n, d in (("a", a), ("b", b), ("c", np.zeros((M, N), np.float32)))]
    grid = (3, 1, 1) if "tma" in kernel else (6, 1, 1)
    _run(code, [Ptr(x, 0) for x in bufs] + [M, N, K, K, N, N], grid)
    np.testing.assert_allclose(bufs[2].data.reshape(M, N), round_bf16(a @ b), rtol=2 ** -7,
                               atol=1e-2)



@triton.jit
def _dot_layouts(a_ptr, at_ptr, b_ptr, bt_ptr, c_ptr, M: tl.constexpr, K: tl.constexpr,
                 N: tl.constexpr):
    """``C[i] = A @ B`` from A and B loaded as stored (i = 0) or from ``A^T`` and/or ``B^T``
    loaded and transposed (strided views: other memory layouts of the same values)."""
    rm, rk, rn = tl.arange(0, M), tl.arange(0, K), tl.arange(0, N)
    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])
    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])
    at = tl.trans(tl.load(at_ptr + rk[:, None] * M + rm[None, :]))
    bt = tl.trans(tl.load(bt_ptr + rn[:, None] * K + rk[None, :]))
    c = c_ptr + rm[:, None] * N + rn[None, :]
    tl.store(c, tl.dot(a, b, input_precision="ieee"))
    tl.store(c + M * N, tl.dot(at, b, input_precision="ieee"))
    tl.store(c + 2 * M * N, tl.dot(a, bt, input_precision="ieee"))
    tl.store(c + 3 * M * N, tl.dot(at, bt, input_precision="ieee"))


def test_dot_does_not_depend_on_the_operands_memory_layout():
    """Found by the fuzzer (seed 1809, docs/fuzzing.md): numpy's float32 matmul sums in an order
    that depends on its operands' memory layout, and a loaded tile's layout follows its offsets
    (a transposed tile is a strided view), so a fused GEMM whose tiles came out in another
    layout than the unfused kernel's differed by one bf16 ulp.  The same values in two layouts
    must give the same bits."""
    from syncopate.emulate import kernel_ttir
    M, K, N = 32, 32, 16
    sig = {n: "*fp32" for n in ("a_ptr", "at_ptr", "b_ptr", "bt_ptr", "c_ptr")}
    code = ModuleCode(_module(kernel_ttir(_dot_layouts, sig, {"M": M, "K": K, "N": N}))).kernel
    rng = np.random.default_rng(1809)
    a = rng.standard_normal((M, K)).astype(np.float32)
    b = rng.standard_normal((K, N)).astype(np.float32)
    bufs = [Buffer(n, 0, etype_named("f32"), d.reshape(-1).copy()) for n, d in (
        ("a", a), ("at", a.T.copy()), ("b", b), ("bt", b.T.copy()),
        ("c", np.zeros(4 * M * N, np.float32)))]
    _run(code, [Ptr(x, 0) for x in bufs])
    c = bufs[4].data.reshape(4, M, N)
    np.testing.assert_allclose(c[0], a @ b, rtol=1e-5, atol=1e-5)
    for i in (1, 2, 3):
        assert np.array_equal(c[0], c[i]), i
