// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-kv.json" operands="k_ptr:K"},append-abi-params,tile-remap' | filecheck %s

// Attention-like: every program reads all of K, 64 rows per iteration of its KV loop
// (rows [start_n, start_n + 64)).  No tile coordinate selects the chunk a program reads (the
// loop does).  The loop's iterations are the blocks, but it accumulates floats, so without
// reorder_reductions tile-remap leaves the order alone and records why (tile-remap-loop.mlir
// renumbers it with the option); the waits inside the loop keep the kernel correct.

// CHECK:     syncopate.state = #syncopate.state<remarks = ["tile-remap: K dim 0 not remapped: the tile coordinate counts the iterations of a loop that accumulates floating-point values: visiting them in another order would change the rounding (the fused kernel must give the unfused kernel's bits; reorder_reductions=True allows it); tile order left as written"]>
// CHECK-NOT: syncopate.remap

module {
  tt.func public @attention(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c256_i32 = arith.constant 256 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %cst_0 = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rm_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_2 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_3 = arith.addi %rm_2, %rm_1 : tensor<64xi32>
    %q = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %q_4 = arith.muli %q, %cst_0 : tensor<64x1xi32>
    %q_5 = tt.splat %q_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %q_6 = tt.addptr %q_5, %q_4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %q_7 = tt.expand_dims %rm_1 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %q_8 = tt.broadcast %q_6 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %q_9 = tt.broadcast %q_7 : tensor<1x64xi32> -> tensor<64x64xi32>
    %q_10 = tt.addptr %q_8, %q_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %q_11 = tt.load %q_10 : tensor<64x64x!tt.ptr<bf16>>
    %acc = scf.for %start_n = %c0_i32 to %c256_i32 step %c64_i32 iter_args(%acc_12 = %cst) -> (tensor<64x64xf32>)  : i32 {
      %rn = tt.splat %start_n : i32 -> tensor<64xi32>
      %rn_13 = arith.addi %rn, %rm_1 : tensor<64xi32>
      %k = tt.expand_dims %rn_13 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %k_14 = arith.muli %k, %cst_0 : tensor<64x1xi32>
      %k_15 = tt.splat %k_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %k_16 = tt.addptr %k_15, %k_14 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %k_17 = tt.broadcast %k_16 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %k_18 = tt.addptr %k_17, %q_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %k_19 = tt.load %k_18 : tensor<64x64x!tt.ptr<bf16>>
      %s = tt.trans %k_19 {order = array<i32: 1, 0>} : tensor<64x64xbf16> -> tensor<64x64xbf16>
      %s_20 = tt.dot %q_11, %s, %cst, inputPrecision = tf32 : tensor<64x64xbf16> * tensor<64x64xbf16> -> tensor<64x64xf32>
      %acc_21 = arith.truncf %s_20 : tensor<64x64xf32> to tensor<64x64xbf16>
      %acc_22 = tt.dot %acc_21, %k_19, %acc_12, inputPrecision = tf32 : tensor<64x64xbf16> * tensor<64x64xbf16> -> tensor<64x64xf32>
      scf.yield %acc_22 : tensor<64x64xf32>
    }
    %0 = tt.splat %o_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %q_4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %q_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %4 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>
    tt.store %3, %4 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
