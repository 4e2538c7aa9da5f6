// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=ce reduce=epilogue},append-abi-params,tile-remap,insert-signals,insert-epilogue-reduce' | filecheck %s
// RUN: syncopate-opt %s --verify-triton -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=ce reduce=epilogue},append-abi-params,tile-remap,insert-signals,insert-epilogue-reduce,resolve-chunks,lower-ce' | filecheck %s --check-prefix=LOWERED
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=sm reduce=epilogue},append-abi-params,insert-signals,insert-epilogue-reduce' 2>&1 | filecheck %s --check-prefix=SM

// The epilogue reduction of a reduce-scatter (C [256, 128], 2 ranks, rank r owns rows
// [128 r, 128 r + 128)): before each 64-row tile's store, a wait for the chunks that reduce into
// the tile's box (tiles of the other rank's rows wait for nothing once resolved), then, per source
// rank s, a masked load of the box from this rank's slot buffer [2, 256, 128] (row 2 of
// syn_peers: flags, c_ptr, then the slots), derived from the 16-byte aligned %c_ptr so Triton can
// vectorise it, with the wait's token in the mask; the store writes
// truncf(extf(value) + sum_s extf(slot_s)). Tiles run sends-first: rank 0 computes rows
// 128..255 (rank 1's) before its own (the remap row for rank 0 is [2, 3, 0, 1]).

// CHECK:       syncopate.state = #syncopate.state<{{.*}}epilogue_slots = ["C"]
// CHECK-LABEL: tt.func public @store
// CHECK:         syncopate.remap %pid, %syn_rank {tensor = "C", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 2, 3, 0, 1, 0, 1, 2, 3>}
// CHECK:         %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[
// CHECK:         %[[SLOTADDR:.+]] = tt.load %{{.+}} : !tt.ptr<i64>
// CHECK:         %[[HERE:.+]] = tt.ptr_to_int %c_ptr : !tt.ptr<bf16> -> i64
// CHECK:         %[[DIFF:.+]] = arith.subi %[[SLOTADDR]], %[[HERE]] : i64
// CHECK:         arith.shrsi %[[DIFF]]
// CHECK:         %[[BASE:.+]] = tt.addptr %c_ptr, %{{.+}} : !tt.ptr<bf16>, i64
// CHECK:         arith.cmpi eq, %[[TOK]], %{{.+}} : i32
// CHECK:         %[[ACC:.+]] = arith.extf %cst : tensor<64x128xbf16> to tensor<64x128xf32>
// CHECK:         %[[L0:.+]] = tt.load %{{.+}}, %{{.+}}, %{{.+}} : tensor<64x128x!tt.ptr<bf16>>
// CHECK:         %[[E0:.+]] = arith.extf %[[L0]]
// CHECK:         %[[S0:.+]] = arith.addf %[[ACC]], %[[E0]] : tensor<64x128xf32>
// CHECK:         %[[L1:.+]] = tt.load %{{.+}}, %{{.+}}, %{{.+}} : tensor<64x128x!tt.ptr<bf16>>
// CHECK:         %[[E1:.+]] = arith.extf %[[L1]]
// CHECK:         %[[S1:.+]] = arith.addf %[[S0]], %[[E1]] : tensor<64x128xf32>
// CHECK:         %[[V:.+]] = arith.truncf %[[S1]] : tensor<64x128xf32> to tensor<64x128xbf16>
// CHECK-NEXT:    tt.store %ptrs_1, %[[V]] : tensor<64x128x!tt.ptr<bf16>>
// CHECK:         syncopate.signal_region

// LOWERED-LABEL: tt.func public @store
// LOWERED:         tt.call @syncopate_wait_b32
// LOWERED:         tt.load %{{.+}}, %{{.+}}, %{{.+}} : tensor<64x128x!tt.ptr<bf16>>
// LOWERED:         tt.store %ptrs_1
// LOWERED:         tt.atomic_rmw add, release, sys
// LOWERED-NOT:     syncopate.

// SM: error: the epilogue reduction needs backend 'ce'

module {
  tt.func public @store(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<1.000000e+00> : tensor<64x128xbf16>
    %c64_i32 = arith.constant 64 : i32
    %c128_i32 = arith.constant 128 : i32
    %pid = tt.get_program_id x : i32
    %row = arith.muli %pid, %c64_i32 : i32
    %rr = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rs = tt.splat %row : i32 -> tensor<64xi32>
    %rows = arith.addi %rs, %rr : tensor<64xi32>
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %r2 = tt.expand_dims %rows {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %st = tt.splat %c128_i32 : i32 -> tensor<64x1xi32>
    %rm = arith.muli %r2, %st : tensor<64x1xi32>
    %rb = tt.broadcast %rm : tensor<64x1xi32> -> tensor<64x128xi32>
    %c2 = tt.expand_dims %cols {axis = 0 : i32} : tensor<128xi32> -> tensor<1x128xi32>
    %cb = tt.broadcast %c2 : tensor<1x128xi32> -> tensor<64x128xi32>
    %offs = arith.addi %rb, %cb : tensor<64x128xi32>
    %ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x128x!tt.ptr<bf16>>
    %ptrs_1 = tt.addptr %ptrs, %offs : tensor<64x128x!tt.ptr<bf16>>, tensor<64x128xi32>
    tt.store %ptrs_1, %cst : tensor<64x128x!tt.ptr<bf16>>
    tt.return
  }
}
