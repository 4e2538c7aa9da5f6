// RUN: syncopate-opt --split-input-file %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=sm comm-programs=4 lowering=table},resolve-chunks' | filecheck %s

// resolve-chunks, lowering="table", a region wait inside a loop (ring attention's K/V waits sit
// inside the KV loop): instead of a loop over this rank's RECV list -- a loop inside the loop,
// which stops Triton from software-pipelining the outer loop's loads -- the wait reads the
// chunk of each cell its box can touch from the table's cell map (chunk_table.cell_map), one
// scalar load per cell, no loop.  How many cells is proven here: the box's extent along the
// chunked dim is a constant E (hi = lo + E, as insert-waits builds it), its start a multiple
// of a power of two P (from the arith ops computing it), the map's cells G rows:
// n = (G - gcd(P, G) + E - 1) / G + 1 lookups, at most 2; else the scan loop stays.
//
// ag-rs2.json: A is [256, 64], chunks of 64 rows along dim 0 (G = 64, 4 cells).  Table v3:
// 193 words, then the cell directory (slot A: [209, 1, 0, 64, 4, 0, 0, 0]: one cell dim), so
// rank r's row of A's map is words 209 + 4 r .. 209 + 4 r + 3 (rank 0: -1 -1 0 1, rank 1:
// 2 3 -1 -1).
//
// * aligned: lo = 64 i, E = 64: one lookup.  The box is clamped to [0, 256); its first cell
//   lo / 64, its end (hi + 63) / 64; under "first < end" the chunk id is loaded from the row
//   (the cell clamped to the map) and waited on under "id >= 0" (-1: no chunk comes to this
//   rank there: local rows).  The load sits under an scf.if, so Triton's pipeliner leaves it
//   a plain load and gives the outer loop's own loads all num_stages buffers.
// CHECK-LABEL: tt.func public @aligned
// CHECK:         scf.for %i =
// CHECK:           %lo0 = arith.muli %i, %c64_i32 : i32
// CHECK-NEXT:      %hi0 = arith.addi %lo0, %c64_i32 : i32
// CHECK-NEXT:      %[[W:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[TARGET:.+]] = arith.muli %syn_epoch, %[[W]] : i32
// CHECK-NEXT:      %[[Z0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[LOP:.+]] = arith.maxsi %lo0, %[[Z0]] : i32
// CHECK-NEXT:      %[[S0:.+]] = arith.constant 256 : i32
// CHECK-NEXT:      %[[LO:.+]] = arith.minsi %[[LOP]], %[[S0]] : i32
// CHECK-NEXT:      %[[Z1:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[HIP:.+]] = arith.maxsi %hi0, %[[Z1]] : i32
// CHECK-NEXT:      %[[S1:.+]] = arith.constant 256 : i32
// CHECK-NEXT:      %[[HI:.+]] = arith.minsi %[[HIP]], %[[S1]] : i32
// CHECK-NEXT:      %[[G0:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[FIRST:.+]] = arith.divsi %[[LO]], %[[G0]] : i32
// CHECK-NEXT:      %[[G1:.+]] = arith.constant 63 : i32
// CHECK-NEXT:      %[[HIR:.+]] = arith.addi %[[HI]], %[[G1]] : i32
// CHECK-NEXT:      %[[G2:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[END:.+]] = arith.divsi %[[HIR]], %[[G2]] : i32
// CHECK-NEXT:      %[[MAP:.+]] = arith.constant 209 : i32
// CHECK-NEXT:      %[[NC:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[ROFF:.+]] = arith.muli %syn_rank, %[[NC]] : i32
// CHECK-NEXT:      %[[ROW:.+]] = arith.addi %[[MAP]], %[[ROFF]] : i32
// CHECK-NEXT:      %[[IN:.+]] = arith.cmpi slt, %[[FIRST]], %[[END]] : i32
// CHECK-NEXT:      %token = scf.if %[[IN]] -> (i32) {
// CHECK-NEXT:        %[[LAST:.+]] = arith.constant 3 : i32
// CHECK-NEXT:        %[[K:.+]] = arith.minsi %[[FIRST]], %[[LAST]] : i32
// CHECK-NEXT:        %[[AT:.+]] = arith.addi %[[ROW]], %[[K]] : i32
// CHECK-NEXT:        %[[P:.+]] = tt.addptr %syn_table, %[[AT]] : !tt.ptr<i32>, i32
// CHECK-NEXT:        %[[CID:.+]] = tt.load %[[P]] : !tt.ptr<i32>
// CHECK-NEXT:        %[[Z2:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        %[[HAS:.+]] = arith.cmpi sge, %[[CID]], %[[Z2]] : i32
// CHECK-NEXT:        %[[T:.+]] = scf.if %[[HAS]] -> (i32) {
// CHECK-NEXT:          %[[WT:.+]] = syncopate.wait chunk %syn_flags[%[[CID]]], target %[[TARGET]] : !tt.ptr<i32>
// CHECK-NEXT:          scf.yield %[[WT]] : i32
// CHECK-NEXT:        } else {
// CHECK:             }
// CHECK-NEXT:        scf.yield %[[T]] : i32
// CHECK-NEXT:      } else {
// CHECK:           }
// CHECK-NEXT:      %next = arith.addi %acc, %token : i32
// CHECK-NEXT:      scf.yield %next : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

// * unaligned: lo = 32 i (a multiple of 32 only), E = 64: the box can straddle two cells, so
//   two lookups (cells first and first + 1), their tokens summed; still no loop.
// CHECK-LABEL: tt.func public @unaligned
// CHECK:         scf.for %i =
// CHECK-NOT:       scf.for
// CHECK-COUNT-2:   syncopate.wait chunk %syn_flags[%{{.+}}], target
// CHECK-NOT:       syncopate.wait
// CHECK-NOT:       scf.for
// CHECK:           %next = arith.addi %acc, %token : i32
// CHECK-NEXT:      scf.yield %next : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

// * wide: E = 256 can touch 4 cells (more than MAX_LOOKUPS = 2), and
// * unknown_extent: hi = lo + i is no constant extent: nothing proven, so the RECV scan loop
//   stays inside the loop (and the loop around it will not pipeline: docs/attention.md).
// CHECK-LABEL: tt.func public @wide
// CHECK:         scf.for %i =
// CHECK:           scf.for
// CHECK:             syncopate.wait chunk
// CHECK-LABEL: tt.func public @unknown_extent
// CHECK:         scf.for %i =
// CHECK:           scf.for
// CHECK:             syncopate.wait chunk

module {
  tt.func public @aligned(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c4_i32 = arith.constant 4 : i32
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %c256_i32 = arith.constant 256 : i32
    %sum = scf.for %i = %c0_i32 to %c4_i32 step %c1_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %lo0 = arith.muli %i, %c64_i32 : i32
      %hi0 = arith.addi %lo0, %c64_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %c0_i32] to[%hi0, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @unaligned(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c4_i32 = arith.constant 4 : i32
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %c256_i32 = arith.constant 256 : i32
    %sum = scf.for %i = %c0_i32 to %c4_i32 step %c1_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %lo0 = arith.muli %i, %c32_i32 : i32
      %hi0 = arith.addi %lo0, %c64_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %c0_i32] to[%hi0, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @wide(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c4_i32 = arith.constant 4 : i32
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %c256_i32 = arith.constant 256 : i32
    %sum = scf.for %i = %c0_i32 to %c4_i32 step %c1_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %lo0 = arith.muli %i, %c64_i32 : i32
      %hi0 = arith.addi %lo0, %c256_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %c0_i32] to[%hi0, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @unknown_extent(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c4_i32 = arith.constant 4 : i32
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %c256_i32 = arith.constant 256 : i32
    %sum = scf.for %i = %c0_i32 to %c4_i32 step %c1_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %lo0 = arith.muli %i, %c64_i32 : i32
      %hi0 = arith.addi %lo0, %i : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %c0_i32] to[%hi0, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}
