// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-kv.json" operands="k_ptr:K" reorder_reductions=true},append-abi-params,tile-remap' | filecheck %s
// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-kv.json" operands="k_ptr:K"},append-abi-params,tile-remap' | filecheck %s --check-prefix=OFF

// The inner-loop remap (passes/loop_remap.py, docs/soundness.md "Loops"): every program reads
// all of K in its KV loop, block [start_n, start_n + 64) per iteration; the loop itself is
// renumbered so that iteration t reads block table[rank][t] (rank 1 holds rows 128..255: its
// blocks 2 and 3 come first).  The loop accumulates floats, so only with reorder_reductions.

// CHECK:     "tile-remap: the loop visits the blocks of K dim 0 in arrival order (reorder_reductions=True: its floating-point reductions run in another order, so results are no longer bitwise the unfused kernel's)"], reordered = true
// CHECK-LABEL: tt.func public @attention
// CHECK:       scf.for %start_n = %c0_i32 to %c256_i32 step %c64_i32
// CHECK-NEXT:    %[[C:.*]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[T:.*]] = arith.divui %start_n, %[[C]] : i32
// CHECK-NEXT:    %[[R:.*]] = syncopate.remap %[[T]], %syn_rank {tensor = "K", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
// CHECK-NEXT:    %[[C2:.*]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[N:.*]] = arith.muli %[[R]], %[[C2]] : i32
// CHECK-NEXT:    tt.splat %[[N]] : i32 -> tensor<64xi32>
// CHECK-NOT:     %start_n
// CHECK:       scf.yield
// OFF:       reorder_reductions=True allows it); tile order left as written
// OFF-NOT:   syncopate.remap

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

// -----

// A loop over part of the blocks (causal attention's bound): the table permutes all 4 blocks,
// so the remap would visit others.  Refused.
// CHECK: "tile-remap: K dim 0 not remapped: the loop runs 2 iterations, not the 4 blocks of the dim (the remap would visit other blocks); tile order left as written"
// CHECK-NOT: syncopate.remap
// CHECK-LABEL: @half
module {
  tt.func public @half(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
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
    %acc = scf.for %start_n = %c0_i32 to %c128_i32 step %c64_i32 iter_args(%acc_12 = %cst) -> (tensor<64x64xf32>)  : i32 {
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

// -----

// A bound only known at run time: refused.
// CHECK: the trip count of the loop is not a compile-time constant
// CHECK-NOT: syncopate.remap
// CHECK-LABEL: @runtime_bound
module {
  tt.func public @runtime_bound(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %n: i32) attributes {noinline = false} {
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
    %acc = scf.for %start_n = %c0_i32 to %n step %c64_i32 iter_args(%acc_12 = %cst) -> (tensor<64x64xf32>)  : i32 {
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

// -----

// A store inside the loop: the order of the iterations is the order of its writes.  Refused.
// CHECK: "tile-remap: K dim 0 not remapped: the loop writes memory (tt.store): the order of its iterations is the order of its writes; tile order left as written"
// CHECK-NOT: syncopate.remap
// CHECK-LABEL: @store_in_loop
module {
  tt.func public @store_in_loop(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
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
      %o = tt.splat %o_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
      %o_1 = tt.addptr %o, %q_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %o_1, %acc_21 : tensor<64x64x!tt.ptr<bf16>>
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

// -----

// An integer carried from one iteration to the next (a counter) would keep the written order
// while the blocks move.  Refused.
// CHECK: "tile-remap: K dim 0 not remapped: the loop carries a i32 from one iteration to the next (a counter or pointer keeps the written order while the blocks move); tile order left as written"
// CHECK-NOT: syncopate.remap
// CHECK-LABEL: @carried_counter
module {
  tt.func public @carried_counter(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
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
    %acc, %cnt = scf.for %start_n = %c0_i32 to %c256_i32 step %c64_i32 iter_args(%acc_12 = %cst, %cnt_0 = %c0_i32) -> (tensor<64x64xf32>, i32)  : i32 {
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
      %cnt_1 = arith.addi %cnt_0, %c64_i32 : i32
      scf.yield %acc_22, %cnt_1 : tensor<64x64xf32>, i32
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
