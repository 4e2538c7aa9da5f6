// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// Two loads of A in the K loop (two 16-column halves of each 32-wide k step) read the same rows
// [pid_m * 64, pid_m * 64 + 64): along the chunked dim their boxes are equal, so they share one
// wait, in front of the loop.

// CHECK:       syncopate.state = #syncopate.state<waits = 1>
// CHECK-LABEL: tt.func public @two_loads
// CHECK:         %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%{{.+}}, %{{.+}}] to[%{{.+}}, %{{.+}}] {tensor = "A"} : !tt.ptr<i32>
// CHECK-NEXT:    %[[LB:.+]] = arith.addi %c0_i32, %[[TOK]] : i32
// CHECK-NEXT:    scf.for %k = %[[LB]] to %c64_i32 step %c32_i32
// CHECK-NOT:       syncopate.wait_region
// CHECK:           %a_lo{{.*}} = tt.load %a_lo{{.*}} : tensor<64x16x!tt.ptr<bf16>>
// CHECK-NOT:       syncopate.wait_region
// CHECK:           %a_hi{{.*}} = tt.load %a_hi{{.*}} : tensor<64x16x!tt.ptr<bf16>>
// CHECK-NOT:     syncopate.wait_region

module {
  tt.func public @two_loads(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x16xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<16> : tensor<64x1xi32>
    %c16_i32 = arith.constant 16 : i32
    %cst_0 = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %rm = arith.muli %pid_m, %c64_i32 : i32
    %rm_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_2 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_3 = arith.addi %rm_2, %rm_1 : tensor<64xi32>
    %rk = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %acc_4 = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_5 = %acc) -> (tensor<64x16xf32>)  : i32 {
      %a_lo = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %a_lo_6 = arith.muli %a_lo, %cst_0 : tensor<64x1xi32>
      %a_lo_7 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %a_lo_8 = tt.addptr %a_lo_7, %a_lo_6 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %a_lo_9 = tt.splat %k : i32 -> tensor<16xi32>
      %a_lo_10 = arith.addi %a_lo_9, %rk : tensor<16xi32>
      %a_lo_11 = tt.expand_dims %a_lo_10 {axis = 0 : i32} : tensor<16xi32> -> tensor<1x16xi32>
      %a_lo_12 = tt.broadcast %a_lo_8 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x16x!tt.ptr<bf16>>
      %a_lo_13 = tt.broadcast %a_lo_11 : tensor<1x16xi32> -> tensor<64x16xi32>
      %a_lo_14 = tt.addptr %a_lo_12, %a_lo_13 : tensor<64x16x!tt.ptr<bf16>>, tensor<64x16xi32>
      %a_lo_15 = tt.load %a_lo_14 : tensor<64x16x!tt.ptr<bf16>>
      %a_hi = arith.addi %k, %c16_i32 : i32
      %a_hi_16 = tt.splat %a_hi : i32 -> tensor<16xi32>
      %a_hi_17 = arith.addi %a_hi_16, %rk : tensor<16xi32>
      %a_hi_18 = tt.expand_dims %a_hi_17 {axis = 0 : i32} : tensor<16xi32> -> tensor<1x16xi32>
      %a_hi_19 = tt.broadcast %a_hi_18 : tensor<1x16xi32> -> tensor<64x16xi32>
      %a_hi_20 = tt.addptr %a_lo_12, %a_hi_19 : tensor<64x16x!tt.ptr<bf16>>, tensor<64x16xi32>
      %a_hi_21 = tt.load %a_hi_20 : tensor<64x16x!tt.ptr<bf16>>
      %acc_22 = arith.extf %a_lo_15 : tensor<64x16xbf16> to tensor<64x16xf32>
      %acc_23 = arith.extf %a_hi_21 : tensor<64x16xbf16> to tensor<64x16xf32>
      %acc_24 = arith.addf %acc_22, %acc_23 : tensor<64x16xf32>
      %acc_25 = arith.addf %acc_5, %acc_24 : tensor<64x16xf32>
      scf.yield %acc_25 : tensor<64x16xf32>
    }
    %0 = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.splat %c_ptr : !tt.ptr<f32> -> tensor<64x1x!tt.ptr<f32>>
    %3 = tt.addptr %2, %1 : tensor<64x1x!tt.ptr<f32>>, tensor<64x1xi32>
    %4 = tt.expand_dims %rk {axis = 0 : i32} : tensor<16xi32> -> tensor<1x16xi32>
    %5 = tt.broadcast %3 : tensor<64x1x!tt.ptr<f32>> -> tensor<64x16x!tt.ptr<f32>>
    %6 = tt.broadcast %4 : tensor<1x16xi32> -> tensor<64x16xi32>
    %7 = tt.addptr %5, %6 : tensor<64x16x!tt.ptr<f32>>, tensor<64x16xi32>
    tt.store %7, %acc_4 : tensor<64x16x!tt.ptr<f32>>
    tt.return
  }
}
