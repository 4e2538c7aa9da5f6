// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A"},append-abi-params,insert-waits' 2>&1 | filecheck %s

// A descriptor whose constant shape is *smaller* than the schedule's tensor (A [256, 64]) is
// refused like a larger one (access-descriptor-mismatch-error.mlir): rows of 32 columns would
// put every box in the wrong coordinates (the row stride alone is right here).

// CHECK: syncopate-opt: error: tma.py:31:20: descriptor shape[1] is 32 but the schedule's tensor needs 64

module {
  tt.func public @tma_narrow_shape(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c256_i32 = arith.constant 256 : i32
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c32_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x32xbf16>>
    %pid = tt.get_program_id x : i32
    %a = arith.muli %pid, %c64_i32 : i32
    %a_0 = tt.descriptor_load %a_desc[%a, %c0_i32] : !tt.tensordesc<tensor<64x32xbf16>> -> tensor<64x32xbf16> loc(#loc1)
    tt.return
  }
}
#loc1 = loc("a"("tma.py":31:20))
