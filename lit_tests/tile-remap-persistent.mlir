// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},append-abi-params,tile-remap' | filecheck %s

// A persistent TMA GEMM: each program walks tiles tile_id = pid, pid + nprog, ... and reads
// rows [tile_id * 64, tile_id * 64 + 64) of A through a tensor descriptor.  The tile coordinate
// is the induction variable of the tile loop (a block argument): the remap goes at the top of
// the loop body and every use of tile_id inside it reads the remapped tile.  The loop itself
// (bounds, step) is unchanged, so every tile is still visited exactly once.

// CHECK-LABEL: tt.func public @tma_persistent
// CHECK:         %start = tt.get_program_id x : i32
// CHECK-NEXT:    %nprog = tt.get_num_programs x : i32
// CHECK-NEXT:    scf.for %tile_id = %start to %c4_i32 step %nprog : i32 {
// CHECK-NEXT:      %[[T:.+]] = syncopate.remap %tile_id, %syn_rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
// CHECK-NEXT:      %off_m = arith.muli %[[T]], %c64_i32 : i32
// CHECK:           tt.descriptor_load %a_desc[%off_m, %k]
// The C store uses the same coordinate, so results land where they belong.
// CHECK:           tt.descriptor_store %c_desc[%off_m, %c0_i32]

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
