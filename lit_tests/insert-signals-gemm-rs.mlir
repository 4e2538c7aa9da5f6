// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C"},append-abi-params,insert-signals' | filecheck %s

// GEMM + reduce-scatter: C [256, 128] holds partial sums on every rank and its chunks (rows
// 128..255 from rank 0, rows 0..127 from rank 1) leave after the tiles that produce them.
// insert-signals puts a syncopate.signal_region right after each store to C with the exact box
// the store wrote; the producer counts are the chunks' volumes (128 x 128 elements: a chunk
// is complete when PRODUCED[c] reaches epoch * |c|, however the kernel tiles its stores).

// CHECK:       syncopate.state = #syncopate.state<produced = {"0" = 16384, "1" = 16384}, signals = 1>
// CHECK-LABEL: tt.func public @gemm_rs
// CHECK-NOT:     syncopate.signal_region
// CHECK:         tt.store %[[PTRS:.+]], %{{.+}} : tensor<64x64x!tt.ptr<bf16>>
// CHECK-NEXT:    %[[BM:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[LO0:.+]] = arith.muli %pid_m, %[[BM]] : i32
// CHECK-NEXT:    %[[E0:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[HI0:.+]] = arith.addi %[[LO0]], %[[E0]] : i32
// CHECK-NEXT:    %[[BN:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[LO1:.+]] = arith.muli %pid_n, %[[BN]] : i32
// CHECK-NEXT:    %[[E1:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[HI1:.+]] = arith.addi %[[LO1]], %[[E1]] : i32
// CHECK-NEXT:    syncopate.signal_region %syn_flags, %syn_epoch, %syn_rank[%[[LO0]], %[[LO1]]] to[%[[HI0]], %[[HI1]]] {tensor = "C"} : !tt.ptr<i32>
// CHECK-NEXT:    tt.return

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

// -----

// Persistent TMA GEMM + RS: the signal follows the descriptor store inside the tile loop; its
// box is [off_m, off_m + 64) x [off_n, off_n + 64) of the tile the iteration wrote.
// CHECK-LABEL: tt.func public @tma_persistent_rs
// CHECK:         scf.for %tile_id = %start to %c8_i32 step %nprog : i32 {
// CHECK:           %off_m = arith.divsi %tile_id, %c2_i32 : i32
// CHECK:           %off_n = arith.remsi %tile_id, %c2_i32 : i32
// CHECK:           tt.descriptor_store %c_desc[%off_m_{{[0-9]+}}, %off_n_{{[0-9]+}}], %{{.+}}
// CHECK-NEXT:      %[[BM:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[LO0:.+]] = arith.muli %off_m, %[[BM]] : i32
// CHECK-NEXT:      %[[E0:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[HI0:.+]] = arith.addi %[[LO0]], %[[E0]] : i32
// CHECK-NEXT:      %[[BN:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[LO1:.+]] = arith.muli %off_n, %[[BN]] : i32
// CHECK-NEXT:      %[[E1:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[HI1:.+]] = arith.addi %[[LO1]], %[[E1]] : i32
// CHECK-NEXT:      syncopate.signal_region %syn_flags, %syn_epoch, %syn_rank[%[[LO0]], %[[LO1]]] to[%[[HI0]], %[[HI1]]] {tensor = "C"} : !tt.ptr<i32>
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

module {
  tt.func public @tma_persistent_rs(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %c8_i32 = arith.constant 8 : i32
    %c2_i32 = arith.constant 2 : i32
    %c128_i64 = arith.constant 128 : i64
    %c128_i32 = arith.constant 128 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %a_desc = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc_0 = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%a_desc, %c1_i64] : <bf16>, <tensor<64x32xbf16>>
    %b_desc = tt.make_tensor_descriptor %b_ptr, [%c64_i32, %c128_i32], [%c128_i64, %c1_i64] : <bf16>, <tensor<32x64xbf16>>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c128_i32], [%c128_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %start = tt.get_program_id x : i32
    %nprog = tt.get_num_programs x : i32
    scf.for %tile_id = %start to %c8_i32 step %nprog  : i32 {
      %off_m = arith.divsi %tile_id, %c2_i32 : i32
      %off_m_1 = arith.muli %off_m, %c64_i32 : i32
      %off_n = arith.remsi %tile_id, %c2_i32 : i32
      %off_n_2 = arith.muli %off_n, %c64_i32 : i32
      %acc = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_3 = %cst) -> (tensor<64x64xf32>)  : i32 {
        %a = tt.descriptor_load %a_desc_0[%off_m_1, %k] : !tt.tensordesc<tensor<64x32xbf16>> -> tensor<64x32xbf16>
        %b = tt.descriptor_load %b_desc[%k, %off_n_2] : !tt.tensordesc<tensor<32x64xbf16>> -> tensor<32x64xbf16>
        %acc_4 = tt.dot %a, %b, %acc_3, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
        scf.yield %acc_4 : tensor<64x64xf32>
      }
      %0 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>
      tt.descriptor_store %c_desc[%off_m_1, %off_n_2], %0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    }
    tt.return
  }
}
