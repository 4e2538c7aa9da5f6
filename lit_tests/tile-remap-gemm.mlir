// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},append-abi-params,tile-remap' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag4-ring.json" operands="a_ptr:A"},append-abi-params,tile-remap' | filecheck %s --check-prefix=RING

// A grid-per-tile GEMM reads rows [pid_m * 64, pid_m * 64 + 64) of A: the tile coordinate is
// pid_m.  tile-remap inserts syncopate.remap right after it and replaces its uses, so program
// pid_m works on tile table[rank][pid_m]: local tiles first, then tiles in chunk-arrival order.

// A [256, 64] all-gathered over 2 ranks, 2 chunks per shard (ag2-push.json): rank 0 holds rows
// 0..127 (tiles 0, 1) and receives 128..191 then 192..255 (tiles 2, 3): identity.  Rank 1 holds
// tiles 2, 3 and receives tile 0 then tile 1: a rotation by 2.

// The launch check (docs/soundness.md): per program, the coordinate (pid_m, step 0) and the
// program's one other coordinate, pid_n * 64 (step 3); a launch must compute every tile of
// table[rank][pid_m] with each pid_n (syncopate.tiling.check_remaps).
// CHECK:       syncopate.state = #syncopate.state<remap = {A = {dim = 0, block = 64, tiles = 4, role = "consumer"}}, remap_checks = [{tensor = "A", dim = 0, at = "?", tiles = 4, table = [0, 1, 2, 3, 2, 3, 0, 1], steps = [{op = "pid", bits = 32}, {op = "pid", value = 1, bits = 32}, {op = "const", value = 64, bits = 32}, {op = "mul", args = [1, 2], bits = 32}], coord = 0, rest = [3]}]>
// CHECK-LABEL: tt.func public @gemm
// CHECK:         %pid_m = tt.get_program_id x : i32
// CHECK-NEXT:    %[[M:.+]] = syncopate.remap %pid_m, %syn_rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
// CHECK-NEXT:    %pid_n = tt.get_program_id y : i32
// CHECK-NEXT:    %rm = arith.muli %[[M]], %c64_i32 : i32
// pid_n (the column of B and C) is not a coordinate of A: untouched.
// CHECK:         %rn = arith.muli %pid_n, %c64_i32 : i32
// Only the remap still reads the raw program id.
// CHECK-NOT:     %pid_m{{[ ,]}}
// CHECK:         tt.return

// Ring all-gather over 4 ranks, one 64-row shard each (ag4-ring.json): rank r holds tile r and
// receives its predecessors' tiles one hop per step: r-1, r-2, r-3.
// RING:      syncopate.remap %pid_m, %syn_rank
// RING-SAME: table = array<i32: 0, 3, 2, 1, 1, 0, 3, 2, 2, 1, 0, 3, 3, 2, 1, 0>

module {
  tt.func public @gemm(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %stride_am: i32) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %cst_0 = arith.constant dense<64> : tensor<32x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %rm = arith.muli %pid_m, %c64_i32 : i32
    %rm_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_2 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_3 = arith.addi %rm_2, %rm_1 : tensor<64xi32>
    %rn = arith.muli %pid_n, %c64_i32 : i32
    %rn_4 = tt.splat %rn : i32 -> tensor<64xi32>
    %rn_5 = arith.addi %rn_4, %rm_1 : tensor<64xi32>
    %rk = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %acc_6 = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_7 = %acc) -> (tensor<64x64xf32>)  : i32 {
      %a = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %a_8 = tt.splat %stride_am : i32 -> tensor<64x1xi32>
      %a_9 = arith.muli %a, %a_8 : tensor<64x1xi32>
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
      %b_22 = tt.expand_dims %rn_5 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %b_23 = tt.broadcast %b_21 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
      %b_24 = tt.broadcast %b_22 : tensor<1x64xi32> -> tensor<32x64xi32>
      %b_25 = tt.addptr %b_23, %b_24 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
      %b_26 = tt.load %b_25 : tensor<32x64x!tt.ptr<bf16>>
      %acc_27 = tt.dot %a_18, %b_26, %acc_7, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
      scf.yield %acc_27 : tensor<64x64xf32>
    }
    %0 = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %1 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %4 = tt.expand_dims %rn_5 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %5 = tt.broadcast %3 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %6 = tt.broadcast %4 : tensor<1x64xi32> -> tensor<64x64xi32>
    %7 = tt.addptr %5, %6 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %8 = arith.truncf %acc_6 : tensor<64x64xf32> to tensor<64x64xbf16>
    tt.store %7, %8 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
