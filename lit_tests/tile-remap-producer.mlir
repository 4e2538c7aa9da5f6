// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2-split2.json" operands="c_ptr:C"},append-abi-params,tile-remap' | filecheck %s

// GEMM + reduce-scatter: C [256, 128] is produced (partial sums on every rank), two chunks per
// shard: rank 0 sends rows 128..191 (step 0) and 192..255 (step 1) to rank 1, rank 1 sends rows
// 0..63 (step 0) and 64..127 (step 1) to rank 0.  The destination adds its own partial, so it
// needs those rows as early as the source: every rank computes the bands of step 0 first
// (tiles 0 and 2), then step 1 (tiles 1 and 3), and the step-0 reductions overlap the rest.

// CHECK:       remap = {C = {dim = 0, block = 64, tiles = 4, role = "producer"}}
// CHECK-LABEL: tt.func public @gemm_rs
// CHECK:         %pid_m = tt.get_program_id x : i32
// CHECK-NEXT:    %[[M:.+]] = syncopate.remap %pid_m, %syn_rank {tensor = "C", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 2, 1, 3, 0, 2, 1, 3>}
// CHECK:         %rm = arith.muli %[[M]], %c64_i32 : i32

module {
  tt.func public @gemm_rs(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<128> : tensor<64x1xi32>
    %cst_0 = arith.constant dense<128> : tensor<32x1xi32>
    %cst_1 = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %rm = arith.muli %pid_m, %c64_i32 : i32
    %rm_2 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_3 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_4 = arith.addi %rm_3, %rm_2 : tensor<64xi32>
    %rn = arith.muli %pid_n, %c64_i32 : i32
    %rn_5 = tt.splat %rn : i32 -> tensor<64xi32>
    %rn_6 = arith.addi %rn_5, %rm_2 : tensor<64xi32>
    %rk = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %acc_7 = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_8 = %acc) -> (tensor<64x64xf32>)  : i32 {
      %a = tt.expand_dims %rm_4 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %a_9 = arith.muli %a, %cst_1 : tensor<64x1xi32>
      %a_10 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %a_11 = tt.addptr %a_10, %a_9 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %a_12 = tt.splat %k : i32 -> tensor<32xi32>
      %a_13 = arith.addi %a_12, %rk : tensor<32xi32>
      %a_14 = tt.expand_dims %a_13 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
      %a_15 = tt.broadcast %a_11 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x32x!tt.ptr<bf16>>
      %a_16 = tt.broadcast %a_14 : tensor<1x32xi32> -> tensor<64x32xi32>
      %a_17 = tt.addptr %a_15, %a_16 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
      %a_18 = tt.load %a_17 : tensor<64x32x!tt.ptr<bf16>>
      %b = tt.expand_dims %a_13 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
      %b_19 = arith.muli %b, %cst_0 : tensor<32x1xi32>
      %b_20 = tt.splat %b_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
      %b_21 = tt.addptr %b_20, %b_19 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
      %b_22 = tt.expand_dims %rn_6 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %b_23 = tt.broadcast %b_21 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
      %b_24 = tt.broadcast %b_22 : tensor<1x64xi32> -> tensor<32x64xi32>
      %b_25 = tt.addptr %b_23, %b_24 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
      %b_26 = tt.load %b_25 : tensor<32x64x!tt.ptr<bf16>>
      %acc_27 = tt.dot %a_18, %b_26, %acc_8, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
      scf.yield %acc_27 : tensor<64x64xf32>
    }
    %0 = tt.expand_dims %rm_4 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %1 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %4 = tt.expand_dims %rn_6 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %5 = tt.broadcast %3 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %6 = tt.broadcast %4 : tensor<1x64xi32> -> tensor<64x64xi32>
    %7 = tt.addptr %5, %6 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %8 = arith.truncf %acc_7 : tensor<64x64xf32> to tensor<64x64xbf16>
    tt.store %7, %8 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
