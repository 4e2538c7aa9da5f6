// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// A descriptor whose shape comes from kernel arguments (`shape=[M, K]`): the analysis takes the
// schedule's tensor A [256, 64] for it and records M == 256 and K == 64 as launch requirements
// (syncopate.abi.check_launch refuses a launch that breaks them).

// CHECK: requirements = {M = 256, K = 64}
// CHECK-LABEL: tt.func public @tma_shape_args

module {
  tt.func public @tma_shape_args(%a_ptr: !tt.ptr<bf16>, %c_ptr: !tt.ptr<bf16>, %M: i32, %K: i32) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %a = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %a_desc = arith.constant 1 : i64
    %pid = tt.get_program_id x : i32
    %a_desc_0 = arith.extsi %K : i32 to i64
    %a_desc_1 = tt.make_tensor_descriptor %a_ptr, [%M, %K], [%a_desc_0, %a_desc] : <bf16>, <tensor<64x64xbf16>>
    %a_2 = arith.muli %pid, %c64_i32 : i32
    %a_3 = tt.descriptor_load %a_desc_1[%a_2, %a] : !tt.tensordesc<tensor<64x64xbf16>> -> tensor<64x64xbf16>
    %0 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %1 = tt.splat %a_2 : i32 -> tensor<64xi32>
    %2 = arith.addi %1, %0 : tensor<64xi32>
    %3 = tt.expand_dims %2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %4 = arith.muli %3, %cst : tensor<64x1xi32>
    %5 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %6 = tt.addptr %5, %4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %7 = tt.expand_dims %0 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %8 = tt.broadcast %6 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %9 = tt.broadcast %7 : tensor<1x64xi32> -> tensor<64x64xi32>
    %10 = tt.addptr %8, %9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %10, %a_3 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
