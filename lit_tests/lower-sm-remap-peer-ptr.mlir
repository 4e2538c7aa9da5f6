// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4},lower-sm' | filecheck %s

// syncopate.remap becomes a select chain over the runs of the permutation table: row 0
// (rank 0) is the identity and costs nothing; row 1 is [2, 3, 0, 1]: coordinates 0..1 move by
// +2, coordinates 2..3 by -2.  Coordinates outside the table are left unchanged.
// syncopate.peer_ptr %a_ptr, 1 {buffer = 1} becomes a_ptr - peers[1][rank] + peers[1][1]
// (the syn_peers table is [NBUF, W] row-major: entry 1 * 2 + r).

// CHECK-LABEL: tt.func public @tile
// CHECK:         %pid = tt.get_program_id x : i32
// CHECK-NEXT:    %[[R1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[IS1:.+]] = arith.cmpi eq, %syn_rank, %[[R1]] : i32
// CHECK-NEXT:    %[[L0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[GE0:.+]] = arith.cmpi sge, %pid, %[[L0]] : i32
// CHECK-NEXT:    %[[H0:.+]] = arith.constant 2 : i32
// CHECK-NEXT:    %[[LT0:.+]] = arith.cmpi slt, %pid, %[[H0]] : i32
// CHECK-NEXT:    %[[IN0:.+]] = arith.andi %[[GE0]], %[[LT0]] : i1
// CHECK-NEXT:    %[[C0:.+]] = arith.andi %[[IS1]], %[[IN0]] : i1
// CHECK-NEXT:    %[[D0:.+]] = arith.constant 2 : i32
// CHECK-NEXT:    %[[M0:.+]] = arith.addi %pid, %[[D0]] : i32
// CHECK-NEXT:    %[[S0:.+]] = arith.select %[[C0]], %[[M0]], %pid : i32
// CHECK-NEXT:    %[[L1:.+]] = arith.constant 2 : i32
// CHECK-NEXT:    %[[GE1:.+]] = arith.cmpi sge, %pid, %[[L1]] : i32
// CHECK-NEXT:    %[[H1:.+]] = arith.constant 4 : i32
// CHECK-NEXT:    %[[LT1:.+]] = arith.cmpi slt, %pid, %[[H1]] : i32
// CHECK-NEXT:    %[[IN1:.+]] = arith.andi %[[GE1]], %[[LT1]] : i1
// CHECK-NEXT:    %[[C1:.+]] = arith.andi %[[IS1]], %[[IN1]] : i1
// CHECK-NEXT:    %[[D1:.+]] = arith.constant -2 : i32
// CHECK-NEXT:    %[[M1:.+]] = arith.addi %pid, %[[D1]] : i32
// CHECK-NEXT:    %tile = arith.select %[[C1]], %[[M1]], %[[S0]] : i32
// CHECK-NEXT:    %[[ROW:.+]] = arith.constant 2 : i32
// CHECK-NEXT:    %[[I_ME:.+]] = arith.addi %[[ROW]], %syn_rank : i32
// CHECK-NEXT:    %[[P_ME:.+]] = tt.addptr %syn_peers, %[[I_ME]] : !tt.ptr<i64>, i32
// CHECK-NEXT:    %[[MINE:.+]] = tt.load %[[P_ME]] : !tt.ptr<i64>
// CHECK-NEXT:    %[[I_PEER:.+]] = arith.addi %[[ROW]], %c1_i32 : i32
// CHECK-NEXT:    %[[P_PEER:.+]] = tt.addptr %syn_peers, %[[I_PEER]] : !tt.ptr<i64>, i32
// CHECK-NEXT:    %[[THEIRS:.+]] = tt.load %[[P_PEER]] : !tt.ptr<i64>
// CHECK-NEXT:    %[[ADDR:.+]] = tt.ptr_to_int %a_ptr : !tt.ptr<bf16> -> i64
// CHECK-NEXT:    %[[OFF:.+]] = arith.subi %[[ADDR]], %[[MINE]] : i64
// CHECK-NEXT:    %[[PEER:.+]] = arith.addi %[[OFF]], %[[THEIRS]] : i64
// CHECK-NEXT:    %peer = tt.int_to_ptr %[[PEER]] : i64 -> !tt.ptr<bf16>
// CHECK-NEXT:    %x = tt.addptr %peer, %tile : !tt.ptr<bf16>, i32
// CHECK-NOT:     syncopate.
// CHECK:         tt.return

module {
  tt.func public @tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %pid = tt.get_program_id x : i32
    %tile = syncopate.remap %pid, %syn_rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
    %peer = syncopate.peer_ptr %a_ptr, %c1_i32 {buffer = 1 : i32} : !tt.ptr<bf16> -> !tt.ptr<bf16>
    %x = tt.addptr %peer, %tile : !tt.ptr<bf16>, i32
    tt.return
  }
}
