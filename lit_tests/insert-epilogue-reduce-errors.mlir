// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=ce reduce=epilogue},append-abi-params,insert-signals,insert-epilogue-reduce' 2>&1 | filecheck %s

// One program stores the whole C [256, 128]: its tile holds rows of both owners (rank 0 owns
// rows 0..127, rank 1 rows 128..255), so it would both send and wait -- and the other rank's
// tile waits for it. The epilogue reduction refuses, naming the boundary and what to change.

// CHECK: error: the epilogue reduction needs every tile of 'C' inside one rank's rows: tiles of 256 along dim 0 straddle the boundary at 128 (rank 0), and such a tile would wait for a peer tile that waits for it. Use a block size dividing 128, or reduce='comm'

module {
  tt.func public @store(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<1.000000e+00> : tensor<256x128xbf16>
    %c128_i32 = arith.constant 128 : i32
    %rows = tt.make_range {end = 256 : i32, start = 0 : i32} : tensor<256xi32>
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %r2 = tt.expand_dims %rows {axis = 1 : i32} : tensor<256xi32> -> tensor<256x1xi32>
    %st = tt.splat %c128_i32 : i32 -> tensor<256x1xi32>
    %rm = arith.muli %r2, %st : tensor<256x1xi32>
    %rb = tt.broadcast %rm : tensor<256x1xi32> -> tensor<256x128xi32>
    %c2 = tt.expand_dims %cols {axis = 0 : i32} : tensor<128xi32> -> tensor<1x128xi32>
    %cb = tt.broadcast %c2 : tensor<1x128xi32> -> tensor<256x128xi32>
    %offs = arith.addi %rb, %cb : tensor<256x128xi32>
    %ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<256x128x!tt.ptr<bf16>>
    %ptrs_1 = tt.addptr %ptrs, %offs : tensor<256x128x!tt.ptr<bf16>>, tensor<256x128xi32>
    tt.store %ptrs_1, %cst : tensor<256x128x!tt.ptr<bf16>>
    tt.return
  }
}
