// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4},resolve-chunks' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=ce},resolve-chunks' | filecheck %s --check-prefix=CE

// resolve-chunks turns a region wait into chunk waits.  For each rank d that receives chunks
// of A there is an `scf.if rank == d`; inside, one `scf.if` per chunk delivered to d, testing
// that the box [lo, hi) meets the chunk along the chunked dim (dim 0; dim 1 is whole), around
// a syncopate.wait on the chunk's flag.  With the sm backend 4 comm programs each add 1 to a
// chunk's flag per epoch: the target is epoch * 4.  The tokens are summed into the token the
// region wait returned.
// ag2-push.json: rank 0 receives chunk 0 (rows 128..191) and chunk 1 (rows 192..255), rank 1
// receives chunk 2 (rows 0..63) and chunk 3 (rows 64..127).

// CHECK-LABEL: tt.func public @tile
// CHECK:         %hi = arith.addi %lo, %c64_i32 : i32
// CHECK-NEXT:    %[[W:.+]] = arith.constant 4 : i32
// CHECK-NEXT:    %[[TARGET:.+]] = arith.muli %syn_epoch, %[[W]] : i32
// CHECK-NEXT:    %[[T0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[R0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[IS0:.+]] = arith.cmpi eq, %syn_rank, %[[R0]] : i32
// CHECK-NEXT:    %[[TOK0:.+]] = scf.if %[[IS0]] -> (i32) {
// CHECK-NEXT:      %[[Z:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[C0HI:.+]] = arith.constant 192 : i32
// CHECK-NEXT:      %[[A:.+]] = arith.cmpi slt, %lo, %[[C0HI]] : i32
// CHECK-NEXT:      %[[C0LO:.+]] = arith.constant 128 : i32
// CHECK-NEXT:      %[[B:.+]] = arith.cmpi slt, %[[C0LO]], %hi : i32
// CHECK-NEXT:      %[[MEETS:.+]] = arith.andi %[[A]], %[[B]] : i1
// CHECK-NEXT:      %[[W0:.+]] = scf.if %[[MEETS]] -> (i32) {
// CHECK-NEXT:        %[[IDX:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        %[[WT:.+]] = syncopate.wait chunk %syn_flags[%[[IDX]]], target %[[TARGET]] {chunk = 0 : i32} : !tt.ptr<i32>
// CHECK-NEXT:        scf.yield %[[WT]] : i32
// CHECK-NEXT:      } else {
// CHECK-NEXT:        %[[NO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        scf.yield %[[NO]] : i32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[S0:.+]] = arith.addi %[[Z]], %[[W0]] : i32
// CHECK-NEXT:      arith.constant 256 : i32
// CHECK-NEXT:      arith.cmpi slt, %lo
// CHECK-NEXT:      arith.constant 192 : i32
// CHECK:           syncopate.wait chunk %syn_flags[%{{.+}}], target %[[TARGET]] {chunk = 1 : i32} : !tt.ptr<i32>
// CHECK:           %[[S1:.+]] = arith.addi %[[S0]], %{{.+}} : i32
// CHECK-NEXT:      scf.yield %[[S1]] : i32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %[[NOT0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      scf.yield %[[NOT0]] : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[SUM0:.+]] = arith.addi %[[T0]], %[[TOK0]] : i32
// CHECK-NEXT:    %[[R1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[IS1:.+]] = arith.cmpi eq, %syn_rank, %[[R1]] : i32
// CHECK-NEXT:    %[[TOK1:.+]] = scf.if %[[IS1]] -> (i32) {
// CHECK:           arith.constant 64 : i32
// CHECK:           syncopate.wait chunk %syn_flags[%{{.+}}], target %[[TARGET]] {chunk = 2 : i32}
// CHECK:           arith.constant 128 : i32
// CHECK:           syncopate.wait chunk %syn_flags[%{{.+}}], target %[[TARGET]] {chunk = 3 : i32}
// CHECK:           %[[S3:.+]] = arith.addi %{{.+}}, %{{.+}} : i32
// CHECK-NEXT:      scf.yield %[[S3]] : i32
// CHECK-NEXT:    } else {
// CHECK-NEXT:      arith.constant 0 : i32
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %token = arith.addi %[[SUM0]], %[[TOK1]] : i32
// (the pattern walker also drops %row, a pure op nothing uses)
// CHECK-NEXT:    tt.return
// CHECK-NOT:     syncopate.wait_region

// The copy engine writes each chunk's flag once per epoch, with the epoch: target epoch * 1.
// CE:      %[[W:.+]] = arith.constant 1 : i32
// CE-NEXT: %[[TARGET:.+]] = arith.muli %syn_epoch, %[[W]] : i32
// CE:      syncopate.wait chunk %syn_flags[%{{.+}}], target %[[TARGET]] {chunk = 0 : i32}

module {
  tt.func public @tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %lo = arith.muli %pid, %c64_i32 : i32
    %hi = arith.addi %lo, %c64_i32 : i32
    %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo, %c0_i32] to[%hi, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
    %row = arith.addi %lo, %token : i32
    tt.return
  }
}
