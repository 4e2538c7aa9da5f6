// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},check-accesses' | filecheck %s

// check-accesses reads a mask written from a loop's induction variable against an address
// advanced by a loop-carried pointer (Triton's tutorial GEMM: `a_ptrs += BK * stride_ak` with
// `mask=offs_k < K - k * BK`). The address's column start is 32 * iter(loop), the mask's bound
// n_cols - 32 * k; with k written as its iteration count (passes/loop_remap.py,
// ivs_as_iterations) the two cancel to `index < n_cols`, a launch-time bound n_cols <= 64
// (A is [256, 64]). Without it the start was "not bounded" and the kernel was refused.

// CHECK: upper_bounds = {n_cols = 64}

module {
  tt.func public @rowsum_carried(%a_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<f32>, %n_cols: i32, %stride_am: i32, %stride_ak: i32) attributes {noinline = false} {
    %c31_i32 = arith.constant 31 : i32
    %acc = arith.constant dense<0.000000e+00> : tensor<32xf32>
    %cst = arith.constant dense<0.000000e+00> : tensor<32x32xbf16>
    %c1_i32 = arith.constant 1 : i32
    %c0_i32 = arith.constant 0 : i32
    %c32_i32 = arith.constant 32 : i32
    %pid = tt.get_program_id x : i32
    %rows = arith.muli %pid, %c32_i32 : i32
    %rows_0 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %rows_1 = tt.splat %rows : i32 -> tensor<32xi32>
    %rows_2 = arith.addi %rows_1, %rows_0 : tensor<32xi32>
    %a_ptrs = tt.expand_dims %rows_2 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %a_ptrs_3 = tt.splat %stride_am : i32 -> tensor<32x1xi32>
    %a_ptrs_4 = arith.muli %a_ptrs, %a_ptrs_3 : tensor<32x1xi32>
    %a_ptrs_5 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
    %a_ptrs_6 = tt.addptr %a_ptrs_5, %a_ptrs_4 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
    %a_ptrs_7 = tt.expand_dims %rows_0 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
    %a_ptrs_8 = tt.splat %stride_ak : i32 -> tensor<1x32xi32>
    %a_ptrs_9 = arith.muli %a_ptrs_7, %a_ptrs_8 : tensor<1x32xi32>
    %a_ptrs_10 = tt.broadcast %a_ptrs_6 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x32x!tt.ptr<bf16>>
    %a_ptrs_11 = tt.broadcast %a_ptrs_9 : tensor<1x32xi32> -> tensor<32x32xi32>
    %a_ptrs_12 = tt.addptr %a_ptrs_10, %a_ptrs_11 : tensor<32x32x!tt.ptr<bf16>>, tensor<32x32xi32>
    %0 = arith.addi %n_cols, %c31_i32 : i32
    %1 = arith.divsi %0, %c32_i32 : i32
    %acc_13:2 = scf.for %k = %c0_i32 to %1 step %c1_i32 iter_args(%a_ptrs_14 = %a_ptrs_12, %acc_15 = %acc) -> (tensor<32x32x!tt.ptr<bf16>>, tensor<32xf32>)  : i32 {
      %x = arith.muli %k, %c32_i32 : i32
      %x_16 = arith.subi %n_cols, %x : i32
      %x_17 = tt.splat %x_16 : i32 -> tensor<1x32xi32>
      %x_18 = arith.cmpi slt, %a_ptrs_7, %x_17 : tensor<1x32xi32>
      %x_19 = tt.broadcast %x_18 : tensor<1x32xi1> -> tensor<32x32xi1>
      %x_20 = tt.load %a_ptrs_14, %x_19, %cst : tensor<32x32x!tt.ptr<bf16>>
      %acc_21 = arith.extf %x_20 : tensor<32x32xbf16> to tensor<32x32xf32>
      %acc_22 = "tt.reduce"(%acc_21) <{axis = 1 : i32}> ({
      ^bb0(%acc_27: f32, %acc_28: f32):
        %acc_29 = arith.addf %acc_27, %acc_28 : f32
        tt.reduce.return %acc_29 : f32
      }) : (tensor<32x32xf32>) -> tensor<32xf32>
      %acc_23 = arith.addf %acc_15, %acc_22 : tensor<32xf32>
      %a_ptrs_24 = arith.muli %stride_ak, %c32_i32 : i32
      %a_ptrs_25 = tt.splat %a_ptrs_24 : i32 -> tensor<32x32xi32>
      %a_ptrs_26 = tt.addptr %a_ptrs_14, %a_ptrs_25 : tensor<32x32x!tt.ptr<bf16>>, tensor<32x32xi32>
      scf.yield %a_ptrs_26, %acc_23 : tensor<32x32x!tt.ptr<bf16>>, tensor<32xf32>
    }
    %2 = tt.splat %out_ptr : !tt.ptr<f32> -> tensor<32x!tt.ptr<f32>>
    %3 = tt.addptr %2, %rows_2 : tensor<32x!tt.ptr<f32>>, tensor<32xi32>
    tt.store %3, %acc_13#1 : tensor<32x!tt.ptr<f32>>
    tt.return
  }
}
