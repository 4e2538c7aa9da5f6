// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A"},append-abi-params,insert-waits' 2>&1 | filecheck %s

// A tensor descriptor with constant shape and strides must describe the schedule's tensor
// (A [256, 64], row-major): otherwise the box the analysis derives would be in the wrong
// coordinates.  The error names the access's source location and the expected value.

// CHECK: syncopate-opt: error: tma.py:31:20: descriptor shape[0] is 512 but the schedule's tensor needs 256
// CHECK: syncopate-opt: error: tma.py:39:20: descriptor stride[0] is 128 but the schedule's tensor needs 64

module {
  tt.func public @tma_bad_shape(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c512_i32 = arith.constant 512 : i32
    %c64_i32 = arith.constant 64 : i32
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c512_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %pid = tt.get_program_id x : i32
    %a = arith.muli %pid, %c64_i32 : i32
    %a_0 = tt.descriptor_load %a_desc[%a, %c0_i32] : !tt.tensordesc<tensor<64x64xbf16>> -> tensor<64x64xbf16> loc(#loc1)
    tt.return
  }
}
#loc1 = loc("a"("tma.py":31:20))

// -----

module {
  tt.func public @tma_bad_stride(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %c128_i64 = arith.constant 128 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%c128_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %pid = tt.get_program_id x : i32
    %a = arith.muli %pid, %c64_i32 : i32
    %a_0 = tt.descriptor_load %a_desc[%a, %c0_i32] : !tt.tensordesc<tensor<64x64xbf16>> -> tensor<64x64xbf16> loc(#loc1)
    tt.return
  }
}
#loc1 = loc("a"("tma.py":39:20))
