// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses,append-abi-params,insert-waits' | filecheck %s

// Interleaved complex rows of A [512, 64] loaded as a [32, 2] tile (`2 * k[:, None] +
// arange(0, 2)[None, :]`, then tl.split): two tile axes with steps 2 and 1 that together
// enumerate the 64 indices of the row, a box of 64 columns (the wait is for [row, 0] to
// [row + 1, 64]). Before, the step of 2 was refused
// as "a strided tile, whose elements the analysis does not enumerate" (tests/corpus/unseen2.py,
// complex_rows): untrue, the tile is contiguous.

// CHECK-LABEL: tt.func public @interleaved_pairs
// CHECK:         %[[ONE:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[END:.+]] = arith.addi %row, %[[ONE]] : i32
// CHECK-NEXT:    %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[C64:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%row, %[[C0]]] to[%[[END]], %[[C64]]] {tensor = "A"}

module {
  tt.func public @interleaved_pairs(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %offs = arith.constant dense<2> : tensor<32x1xi32>
    %row = tt.get_program_id x : i32
    %k = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %offs_0 = tt.expand_dims %k {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %offs_1 = arith.muli %offs_0, %offs : tensor<32x1xi32>
    %offs_2 = tt.make_range {end = 2 : i32, start = 0 : i32} : tensor<2xi32>
    %offs_3 = tt.expand_dims %offs_2 {axis = 0 : i32} : tensor<2xi32> -> tensor<1x2xi32>
    %offs_4 = tt.broadcast %offs_1 : tensor<32x1xi32> -> tensor<32x2xi32>
    %offs_5 = tt.broadcast %offs_3 : tensor<1x2xi32> -> tensor<32x2xi32>
    %offs_6 = arith.addi %offs_4, %offs_5 : tensor<32x2xi32>
    %z = arith.muli %row, %c64_i32 : i32
    %z_7 = tt.addptr %inp_ptr, %z : !tt.ptr<bf16>, i32
    %z_8 = tt.splat %z_7 : !tt.ptr<bf16> -> tensor<32x2x!tt.ptr<bf16>>
    %z_9 = tt.addptr %z_8, %offs_6 : tensor<32x2x!tt.ptr<bf16>>, tensor<32x2xi32>
    %z_10 = tt.load %z_9 : tensor<32x2x!tt.ptr<bf16>>
    %outLHS, %outRHS = tt.split %z_10 : tensor<32x2xbf16> -> tensor<32xbf16>
    %0 = arith.muli %row, %c32_i32 : i32
    %1 = tt.addptr %out_ptr, %0 : !tt.ptr<bf16>, i32
    %2 = tt.splat %1 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %k : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
    %4 = arith.mulf %outLHS, %outLHS : tensor<32xbf16>
    %5 = arith.mulf %outRHS, %outRHS : tensor<32xbf16>
    %6 = arith.addf %4, %5 : tensor<32xbf16>
    tt.store %3, %6 : tensor<32x!tt.ptr<bf16>>
    tt.return
  }
}
