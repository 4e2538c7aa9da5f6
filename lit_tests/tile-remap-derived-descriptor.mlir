// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},append-abi-params,tile-remap' | filecheck %s

// The persistent TMA GEMM of tile-remap-persistent.mlir, scaled by a row block of W chosen by a
// second coordinate computed from the tile: j = tile_id % 2, read through the *first* index of
// a descriptor load.  Remapping tile_id would move j with it (another block of W): refused, as
// for pointer accesses -- the check reads every index of a descriptor load, the first included.

// CHECK:     "tile-remap: A dim 0 not remapped: the tt.descriptor_load uses a value computed from the tile coordinate (remapping would move that coordinate too); tile order left as written"
// CHECK-LABEL: tt.func public @tma_derived_row
// CHECK-NOT: syncopate.remap

module {
  tt.func public @tma_derived_row(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %w_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
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
    %w_desc = tt.make_tensor_descriptor %w_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %c2_i32 = arith.constant 2 : i32
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
      %j = arith.remsi %tile_id, %c2_i32 : i32
      %off_w = arith.muli %j, %c64_i32 : i32
      %w = tt.descriptor_load %w_desc[%off_w, %c0_i32] : !tt.tensordesc<tensor<64x64xbf16>> -> tensor<64x64xbf16>
      %wf = arith.extf %w : tensor<64x64xbf16> to tensor<64x64xf32>
      %scaled = arith.mulf %acc, %wf : tensor<64x64xf32>
      %0 = arith.truncf %scaled : tensor<64x64xf32> to tensor<64x64xbf16>
      tt.descriptor_store %c_desc[%off_m, %c0_i32], %0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    }
    tt.return
  }
}
