// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// The loop-carried pointer idiom (a_ptrs += BK each k step): the analysis reads the A load
// inside the loop as a_ptrs_init + k_iter * 32, so its rows are still pid_m * 64 .. + 64 and
// do not depend on the loop: one wait before the loop, guarding its lower bound.

// CHECK:       syncopate.state = #syncopate.state<waits = 1>
// CHECK-LABEL: tt.func public @gemm_loop_ptr
// CHECK:         %b_ptrs{{.*}} = tt.addptr %b_ptrs{{.*}} : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
// CHECK-NEXT:    %[[BM:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[LO:.+]] = arith.muli %pid_m, %[[BM]] : i32
// CHECK-NEXT:    %[[EXT:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[HI:.+]] = arith.addi %[[LO]], %[[EXT]] : i32
// CHECK-NEXT:    %[[ZERO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[K:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %[[ZERO]]] to[%[[HI]], %[[K]]] {tensor = "A"}
// CHECK-NEXT:    %[[LB:.+]] = arith.addi %c0_i32, %[[TOK]] : i32
// CHECK-NEXT:    scf.for %k = %[[LB]] to %c64_i32 step %c32_i32 iter_args(%a_ptrs{{.*}} = %a_ptrs{{.*}}, %b_ptrs{{.*}} = %b_ptrs{{.*}}, %acc{{.*}} = %acc)
// CHECK-NOT:       syncopate.wait_region
// CHECK:           tt.addptr %a_ptrs{{.*}}, %cst_1 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
// CHECK:         tt.return

module {
  tt.func public @gemm_loop_ptr(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<2048> : tensor<32x64xi32>
    %cst_0 = arith.constant dense<32> : tensor<64x32xi32>
    %b_ptrs = arith.constant dense<64> : tensor<32x1xi32>
    %cst_1 = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %rm = arith.muli %pid_m, %c64_i32 : i32
    %rm_2 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_3 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_4 = arith.addi %rm_3, %rm_2 : tensor<64xi32>
    %rk = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %a_ptrs = tt.expand_dims %rm_4 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %a_ptrs_5 = arith.muli %a_ptrs, %cst_1 : tensor<64x1xi32>
    %a_ptrs_6 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %a_ptrs_7 = tt.addptr %a_ptrs_6, %a_ptrs_5 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %a_ptrs_8 = tt.expand_dims %rk {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
    %a_ptrs_9 = tt.broadcast %a_ptrs_7 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x32x!tt.ptr<bf16>>
    %a_ptrs_10 = tt.broadcast %a_ptrs_8 : tensor<1x32xi32> -> tensor<64x32xi32>
    %a_ptrs_11 = tt.addptr %a_ptrs_9, %a_ptrs_10 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
    %b_ptrs_12 = tt.expand_dims %rk {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %b_ptrs_13 = arith.muli %b_ptrs_12, %b_ptrs : tensor<32x1xi32>
    %b_ptrs_14 = tt.splat %b_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
    %b_ptrs_15 = tt.addptr %b_ptrs_14, %b_ptrs_13 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
    %b_ptrs_16 = tt.expand_dims %rm_2 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %b_ptrs_17 = tt.broadcast %b_ptrs_15 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
    %b_ptrs_18 = tt.broadcast %b_ptrs_16 : tensor<1x64xi32> -> tensor<32x64xi32>
    %b_ptrs_19 = tt.addptr %b_ptrs_17, %b_ptrs_18 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
    %acc_20:3 = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%a_ptrs_21 = %a_ptrs_11, %b_ptrs_22 = %b_ptrs_19, %acc_23 = %acc) -> (tensor<64x32x!tt.ptr<bf16>>, tensor<32x64x!tt.ptr<bf16>>, tensor<64x64xf32>)  : i32 {
      %a = tt.load %a_ptrs_21 : tensor<64x32x!tt.ptr<bf16>>
      %b = tt.load %b_ptrs_22 : tensor<32x64x!tt.ptr<bf16>>
      %acc_24 = tt.dot %a, %b, %acc_23, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
      %a_ptrs_25 = tt.addptr %a_ptrs_21, %cst_0 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
      %b_ptrs_26 = tt.addptr %b_ptrs_22, %cst : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
      scf.yield %a_ptrs_25, %b_ptrs_26, %acc_24 : tensor<64x32x!tt.ptr<bf16>>, tensor<32x64x!tt.ptr<bf16>>, tensor<64x64xf32>
    }
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %a_ptrs_5 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.broadcast %b_ptrs_16 : tensor<1x64xi32> -> tensor<64x64xi32>
    %4 = tt.addptr %2, %3 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %5 = arith.truncf %acc_20#2 : tensor<64x64xf32> to tensor<64x64xbf16>
    tt.store %4, %5 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
