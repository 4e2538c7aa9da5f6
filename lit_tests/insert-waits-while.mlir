// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=ce},append-abi-params,insert-waits' | filecheck %s

// A K loop written as a `while` (scf.while): the rows of A do not depend on the loop, so the
// wait goes in front of it, like for an scf.for.  A while loop has no lower bound to carry the
// token, so the token guards the load inside the loop through its mask instead (the wait
// dominates it): the load still cannot be scheduled above the wait.

// CHECK-LABEL: tt.func public @wloop
// CHECK:         %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%{{.+}}, %{{.+}}] to[%{{.+}}, %{{.+}}] {tensor = "A"} : !tt.ptr<i32>
// CHECK-NEXT:    %{{.+}} = scf.while
// CHECK-NOT:       syncopate.wait_region
// CHECK:         } do {
// CHECK:           %[[Z:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[OK:.+]] = arith.cmpi eq, %[[TOK]], %[[Z]] : i32
// CHECK-NEXT:      %[[MASK:.+]] = tt.splat %[[OK]] : i1 -> tensor<64x32xi1>
// CHECK-NEXT:      %a_{{[0-9]+}} = tt.load %a_{{[0-9]+}}, %[[MASK]] : tensor<64x32x!tt.ptr<bf16>>
// CHECK-NOT:     syncopate.wait_region

module {
  tt.func public @wloop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %K: i32) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x32xf32>
    %cst = arith.constant dense<32> : tensor<64x1xi32>
    %c32_i32 = arith.constant 32 : i32
    %cst_0 = arith.constant dense<64> : tensor<64x1xi32>
    %k = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rm_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_2 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_3 = arith.addi %rm_2, %rm_1 : tensor<64xi32>
    %rk = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %k_4:2 = scf.while (%acc_5 = %acc, %k_6 = %k) : (tensor<64x32xf32>, i32) -> (tensor<64x32xf32>, i32) {
      %8 = arith.cmpi slt, %k_6, %K : i32
      scf.condition(%8) %acc_5, %k_6 : tensor<64x32xf32>, i32
    } do {
    ^bb0(%acc_5: tensor<64x32xf32>, %k_6: i32):
      %a = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %a_7 = arith.muli %a, %cst_0 : tensor<64x1xi32>
      %a_8 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %a_9 = tt.addptr %a_8, %a_7 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %a_10 = tt.splat %k_6 : i32 -> tensor<32xi32>
      %a_11 = arith.addi %a_10, %rk : tensor<32xi32>
      %a_12 = tt.expand_dims %a_11 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
      %a_13 = tt.broadcast %a_9 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x32x!tt.ptr<bf16>>
      %a_14 = tt.broadcast %a_12 : tensor<1x32xi32> -> tensor<64x32xi32>
      %a_15 = tt.addptr %a_13, %a_14 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
      %a_16 = tt.load %a_15 : tensor<64x32x!tt.ptr<bf16>>
      %acc_17 = arith.extf %a_16 : tensor<64x32xbf16> to tensor<64x32xf32>
      %acc_18 = arith.addf %acc_5, %acc_17 : tensor<64x32xf32>
      %k_19 = arith.addi %k_6, %c32_i32 : i32
      scf.yield %acc_18, %k_19 : tensor<64x32xf32>, i32
    }
    %0 = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.splat %c_ptr : !tt.ptr<f32> -> tensor<64x1x!tt.ptr<f32>>
    %3 = tt.addptr %2, %1 : tensor<64x1x!tt.ptr<f32>>, tensor<64x1xi32>
    %4 = tt.expand_dims %rk {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
    %5 = tt.broadcast %3 : tensor<64x1x!tt.ptr<f32>> -> tensor<64x32x!tt.ptr<f32>>
    %6 = tt.broadcast %4 : tensor<1x32xi32> -> tensor<64x32xi32>
    %7 = tt.addptr %5, %6 : tensor<64x32x!tt.ptr<f32>>, tensor<64x32xi32>
    tt.store %7, %k_4#0 : tensor<64x32x!tt.ptr<f32>>
    tt.return
  }
}
