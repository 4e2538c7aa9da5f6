// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},append-abi-params,tile-remap,insert-waits' | filecheck %s

// TMA kernels: the analysis reads the box of a tt.descriptor_load from its indices and the
// descriptor's block shape (its shape and strides are checked against the schedule's tensor).

// Persistent GEMM: the rows depend on the tile loop's (remapped) induction variable but not on
// the K loop, so the wait sits inside the tile loop, in front of the K loop.
// CHECK-LABEL: tt.func public @tma_persistent
// CHECK:         scf.for %tile_id = %start to %c4_i32 step %nprog : i32 {
// CHECK-NEXT:      %[[T:.+]] = syncopate.remap %tile_id
// CHECK-NEXT:      %off_m = arith.muli %[[T]], %c64_i32 : i32
// CHECK-NEXT:      %[[BM:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[LO:.+]] = arith.muli %[[T]], %[[BM]] : i32
// CHECK:           %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %{{.+}}] to[%{{.+}}, %{{.+}}] {tensor = "A"} : !tt.ptr<i32>
// CHECK-NEXT:      %[[LB:.+]] = arith.addi %c0_i32, %[[TOK]] : i32
// CHECK-NEXT:      %acc = scf.for %k = %[[LB]] to %c64_i32 step %c32_i32
// CHECK-NEXT:        tt.descriptor_load %a_desc[%off_m, %k]
// CHECK-NOT:     syncopate.wait_region
// CHECK:         tt.return

module {
  tt.func public @tma_persistent(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c4_i32 = arith.constant 4 : i32
    %c0_i32 = arith.constant 0 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x32xbf16>>
    %b_desc = tt.make_tensor_descriptor %b_ptr, [%c64_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<32x64xbf16>>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %start = tt.get_program_id x : i32
    %nprog = tt.get_num_programs x : i32
    scf.for %tile_id = %start to %c4_i32 step %nprog  : i32 {
      %off_m = arith.muli %tile_id, %c64_i32 : i32
      %acc = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_0 = %cst) -> (tensor<64x64xf32>)  : i32 {
        %a = tt.descriptor_load %a_desc[%off_m, %k] : !tt.tensordesc<tensor<64x32xbf16>> -> tensor<64x32xbf16>
        %b = tt.descriptor_load %b_desc[%k, %c0_i32] : !tt.tensordesc<tensor<32x64xbf16>> -> tensor<32x64xbf16>
        %acc_1 = tt.dot %a, %b, %acc_0, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
        scf.yield %acc_1 : tensor<64x64xf32>
      }
      %0 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>
      tt.descriptor_store %c_desc[%off_m, %c0_i32], %0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    }
    tt.return
  }
}

// -----

// One tile per program, no loop: the token is added to the first index of the descriptor load
// (the row offset), which the load cannot be scheduled above.  The store keeps the plain index.
// CHECK-LABEL: tt.func public @tma_tile
// CHECK:         %a = arith.muli %[[PID:.+]], %c64_i32 : i32
// CHECK:         %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank
// CHECK-NEXT:    %[[ROW:.+]] = arith.addi %a, %[[TOK]] : i32
// CHECK-NEXT:    %{{.+}} = tt.descriptor_load %a_desc[%[[ROW]], %c0_i32] : !tt.tensordesc<tensor<64x64xbf16>> -> tensor<64x64xbf16>
// CHECK-NEXT:    tt.descriptor_store %c_desc[%a, %c0_i32]

module {
  tt.func public @tma_tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %pid = tt.get_program_id x : i32
    %a = arith.muli %pid, %c64_i32 : i32
    %a_0 = tt.descriptor_load %a_desc[%a, %c0_i32] : !tt.tensordesc<tensor<64x64xbf16>> -> tensor<64x64xbf16>
    tt.descriptor_store %c_desc[%a, %c0_i32], %a_0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    tt.return
  }
}
