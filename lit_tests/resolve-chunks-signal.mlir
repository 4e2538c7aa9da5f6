// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=sm comm-programs=4},resolve-chunks' | filecheck %s

// resolve-chunks turns a region signal (this tile wrote C[lo0:hi0, lo1:hi1]) into one
// syncopate.signal per chunk of C that leaves this rank or reduces into it, adding the number
// of elements of the box inside the chunk to PRODUCED[c]: the volume is
//   max(min(hi0, c.hi0) - max(lo0, c.lo0), 0) * max(min(hi1, c.hi1) - max(lo1, c.lo1), 0)
// selected to 0 on ranks the chunk does not concern (predicated, not branched).  The volumes
// come first, then the signals back to back (so the lowering can share one barrier).
// rs2.json: C [256, 128], chunk 0 = rows 128..255 (rank 0 -> 1, sum), chunk 1 = rows 0..127
// (rank 1 -> 0, sum).  Flag layout: 2 chunks, 2 ranks: PRODUCED[c] is word 2 + 2 + 1 + c.

// CHECK-LABEL: tt.func public @tile
// CHECK:         %hi1 = arith.addi %lo1, %c64_i32 : i32
// CHECK-NEXT:    %[[SRC:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[ON_SRC:.+]] = arith.cmpi eq, %syn_rank, %[[SRC]] : i32
// CHECK-NEXT:    %[[DST:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[ON_DST:.+]] = arith.cmpi eq, %syn_rank, %[[DST]] : i32
// CHECK-NEXT:    %[[ON:.+]] = arith.ori %[[ON_SRC]], %[[ON_DST]] : i1
// CHECK-NEXT:    %[[CHI0:.+]] = arith.constant 256 : i32
// CHECK-NEXT:    %[[H0:.+]] = arith.minsi %hi0, %[[CHI0]] : i32
// CHECK-NEXT:    %[[CLO0:.+]] = arith.constant 128 : i32
// CHECK-NEXT:    %[[L0:.+]] = arith.maxsi %lo0, %[[CLO0]] : i32
// CHECK-NEXT:    %[[D0:.+]] = arith.subi %[[H0]], %[[L0]] : i32
// CHECK-NEXT:    %[[Z0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[E0:.+]] = arith.maxsi %[[D0]], %[[Z0]] : i32
// CHECK-NEXT:    %[[CHI1:.+]] = arith.constant 128 : i32
// CHECK-NEXT:    %[[H1:.+]] = arith.minsi %hi1, %[[CHI1]] : i32
// CHECK-NEXT:    %[[CLO1:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[L1:.+]] = arith.maxsi %lo1, %[[CLO1]] : i32
// CHECK-NEXT:    %[[D1:.+]] = arith.subi %[[H1]], %[[L1]] : i32
// CHECK-NEXT:    %[[Z1:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[E1:.+]] = arith.maxsi %[[D1]], %[[Z1]] : i32
// CHECK-NEXT:    %[[VOL:.+]] = arith.muli %[[E0]], %[[E1]] : i32
// CHECK-NEXT:    %[[ZERO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[VOL0:.+]] = arith.select %[[ON]], %[[VOL]], %[[ZERO]] : i32
// Chunk 1: rows 0..127.
// CHECK:         arith.constant 128 : i32
// CHECK-NEXT:    arith.minsi %hi0
// CHECK-NEXT:    arith.constant 0 : i32
// CHECK-NEXT:    arith.maxsi %lo0
// CHECK:         %[[VOL1:.+]] = arith.select %{{.+}}, %{{.+}}, %{{.+}} : i32
// CHECK-NEXT:    %[[P0:.+]] = arith.constant 5 : i32
// CHECK-NEXT:    syncopate.signal add produced %syn_flags[%[[P0]]], %[[VOL0]] : !tt.ptr<i32>
// CHECK-NEXT:    %[[P1:.+]] = arith.constant 6 : i32
// CHECK-NEXT:    syncopate.signal add produced %syn_flags[%[[P1]]], %[[VOL1]] : !tt.ptr<i32>
// CHECK-NEXT:    tt.return

module {
  tt.func public @tile(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %lo0 = arith.muli %pid_m, %c64_i32 : i32
    %hi0 = arith.addi %lo0, %c64_i32 : i32
    %lo1 = arith.muli %pid_n, %c64_i32 : i32
    %hi1 = arith.addi %lo1, %c64_i32 : i32
    syncopate.signal_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %lo1] to[%hi0, %hi1] {tensor = "C"} : !tt.ptr<i32>
    tt.return
  }
}
