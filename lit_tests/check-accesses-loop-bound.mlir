// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-kv3.json" operands="k_ptr:K"},check-accesses' | filecheck %s
// RUN: not syncopate-opt %S/Inputs/kv3-past.mlir -p 'attach-schedule{file="%S/Inputs/ag2-kv3.json" operands="k_ptr:K"},check-accesses' 2>&1 | filecheck %s --check-prefix=PAST

// check-accesses bounds an unmasked access by the constant bounds of its loop
// (passes/check_accesses.py, _loop_span): K is [4, 256, 64], all-gathered along dim 1 (the
// sequence); the KV loop "for start_n in range(0, SEQ, 64)" reads rows start_n + [0, 64) of
// dim 1 with no mask.  SEQ = 256: the last iteration reads [192, 256), inside the dim, so the
// access is accepted.  SEQ = 320 (Inputs/kv3-past.mlir): the last iteration reads up to 320,
// past the dim (into the next head's rows, which may belong to a chunk that has not arrived):
// refused, naming the access.

// CHECK-LABEL: tt.func public @kv3
// CHECK:       scf.for %start_n = %c0_i32 to %c256_i32 step %c64_i32
// PAST: error: {{.*}}this tt.load of 'k_ptr' (tensor 'K', dim 1 of size 256) reads up to index 320 in the last iteration of its loop, past the end of the dim

module {
  tt.func public @kv3(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c256_i32 = arith.constant 256 : i32
    %c0_i32 = arith.constant 0 : i32
    %c16384_i32 = arith.constant 16384 : i32
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %bh = tt.get_program_id y : i32
    %rm = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %q = arith.muli %pid, %c64_i32 : i32
    %q_0 = tt.splat %q : i32 -> tensor<64xi32>
    %q_1 = arith.addi %q_0, %rm : tensor<64xi32>
    %q_2 = tt.expand_dims %q_1 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %q_3 = arith.muli %q_2, %cst : tensor<64x1xi32>
    %q_4 = tt.splat %q_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %q_5 = tt.addptr %q_4, %q_3 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %q_6 = tt.expand_dims %rm {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %q_7 = tt.broadcast %q_5 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %q_8 = tt.broadcast %q_6 : tensor<1x64xi32> -> tensor<64x64xi32>
    %q_9 = tt.addptr %q_7, %q_8 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %q_10 = tt.load %q_9 : tensor<64x64x!tt.ptr<bf16>>
    %acc_11 = scf.for %start_n = %c0_i32 to %c256_i32 step %c64_i32 iter_args(%acc_12 = %acc) -> (tensor<64x64xf32>)  : i32 {
      %k = arith.muli %bh, %c16384_i32 : i32
      %k_13 = tt.addptr %k_ptr, %k : !tt.ptr<bf16>, i32
      %k_14 = tt.splat %start_n : i32 -> tensor<64xi32>
      %k_15 = arith.addi %k_14, %rm : tensor<64xi32>
      %k_16 = tt.expand_dims %k_15 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %k_17 = arith.muli %k_16, %cst : tensor<64x1xi32>
      %k_18 = tt.splat %k_13 : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %k_19 = tt.addptr %k_18, %k_17 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %k_20 = tt.broadcast %k_19 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %k_21 = tt.addptr %k_20, %q_8 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %k_22 = tt.load %k_21 : tensor<64x64x!tt.ptr<bf16>>
      %acc_23 = tt.trans %k_22 {order = array<i32: 1, 0>} : tensor<64x64xbf16> -> tensor<64x64xbf16>
      %acc_24 = tt.dot %q_10, %acc_23, %acc_12, inputPrecision = tf32 : tensor<64x64xbf16> * tensor<64x64xbf16> -> tensor<64x64xf32>
      scf.yield %acc_24 : tensor<64x64xf32>
    }
    %0 = tt.splat %o_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %q_3 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %q_8 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %4 = arith.truncf %acc_11 : tensor<64x64xf32> to tensor<64x64xbf16>
    tt.store %3, %4 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
