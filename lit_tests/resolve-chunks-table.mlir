// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=sm comm-programs=4 lowering=table},resolve-chunks' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=sm comm-programs=4 lowering=table},resolve-chunks' | filecheck %s --check-prefix=ONCE
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=sm comm-programs=4},resolve-chunks' | filecheck %s --check-prefix=UNROLLED
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=ce lowering=table},resolve-chunks' | filecheck %s --check-prefix=CE

// resolve-chunks with lowering="table" (issue 10): the region wait and the region signal
// become loops over this rank's lists of the chunk table (%syn_table, chunk_table.py), so the
// tile's code does not grow with the chunk count; resolve-chunks-wait.mlir and
// resolve-chunks-signal.mlir show the unrolled form of the same ops.
// * wait_region of A -> load [start, count] of this rank's RECV(A) list from the directory,
//   clamp count to the longest RECV(A) list (a constant: a corrupt table cannot run away),
//   then one scf.for over the list: read the chunk id, its record's LO/HI along the chunked
//   dim (dim 0), test that the box meets it, and wait on its flag under an scf.if; the tokens
//   are summed through the loop's iter_args into the token the region wait returned.
// * signal_region of C -> one syncopate.release_fence (the barrier every signal of the store
//   shares), then one scf.for over this rank's SEND(C) list adding the box's intersection with
//   each chunk, max(min(hi, HI) - max(lo, LO), 0) per dim, to PRODUCED[c]; the signal is
//   `fenced` (the lowering puts no barrier of its own before it).
//
// ag-rs2.json: C = 8 chunks, 2 tensors (slot 0 = A, slot 1 = C), W = 2.  Table words: header 8,
// records 8 x 16 -> the directory starts at word 136; per rank 6 lists (RECV(A), RECV(C),
// SEND(A), SEND(C), EXEC, PUSHED) of 2 words: rank r's RECV(A) entry is 136 + 12 r, its SEND(C)
// entry 136 + 6 + 12 r.  A record starts at 8 + 16 c; LO[0] is its word 8, HI[0] word 12,
// LO[1] word 9, HI[1] word 13.  Each rank receives 2 chunks of A (clamp 2) and signals 4 of C
// (2 it sends, 2 reducing into it: clamp 4).  Flags: PRODUCED[c] = 8 + 2 + 1 + c = 11 + c.

// CHECK-LABEL: tt.func public @tile
// CHECK-SAME:    %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64)
// CHECK:         %hi1 = arith.addi %lo1, %c64_i32 : i32
// 4 comm programs each add 1 to a chunk's flag per epoch: target epoch * 4.
// CHECK-NEXT:    %[[W:.+]] = arith.constant 4 : i32
// CHECK-NEXT:    %[[TARGET:.+]] = arith.muli %syn_epoch, %[[W]] : i32
// The RECV(A) entry of this rank: [start, count].
// CHECK-NEXT:    %[[DIR:.+]] = arith.constant 136 : i32
// CHECK-NEXT:    %[[STRIDE:.+]] = arith.constant 12 : i32
// CHECK-NEXT:    %[[OFF:.+]] = arith.muli %syn_rank, %[[STRIDE]] : i32
// CHECK-NEXT:    %[[AT:.+]] = arith.addi %[[DIR]], %[[OFF]] : i32
// CHECK-NEXT:    %[[PSTART:.+]] = tt.addptr %syn_table, %[[AT]] : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[START:.+]] = tt.load %[[PSTART]] : !tt.ptr<i32>
// CHECK-NEXT:    %[[ONE:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[ATN:.+]] = arith.addi %[[AT]], %[[ONE]] : i32
// CHECK-NEXT:    %[[PCOUNT:.+]] = tt.addptr %syn_table, %[[ATN]] : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[RAW:.+]] = tt.load %[[PCOUNT]] : !tt.ptr<i32>
// CHECK-NEXT:    %[[LONGEST:.+]] = arith.constant 2 : i32
// CHECK-NEXT:    %[[COUNT:.+]] = arith.minsi %[[RAW]], %[[LONGEST]] : i32
// CHECK-NEXT:    %[[TOK0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[LB:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[STEP:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %token = scf.for %[[K:.+]] = %[[LB]] to %[[COUNT]] step %[[STEP]] iter_args(%[[ACC:.+]] = %[[TOK0]]) -> (i32) : i32 {
// The chunk id at list[k], then its record.
// CHECK-NEXT:      %[[IDX:.+]] = arith.addi %[[START]], %[[K]] : i32
// CHECK-NEXT:      %[[PID:.+]] = tt.addptr %syn_table, %[[IDX]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[CID:.+]] = tt.load %[[PID]] : !tt.ptr<i32>
// CHECK-NEXT:      %[[R0:.+]] = arith.constant 8 : i32
// CHECK-NEXT:      %[[RW:.+]] = arith.constant 16 : i32
// CHECK-NEXT:      %[[ROFF:.+]] = arith.muli %[[CID]], %[[RW]] : i32
// CHECK-NEXT:      %[[REC:.+]] = arith.addi %[[R0]], %[[ROFF]] : i32
// lo < HI[0] and LO[0] < hi: the same interval test as the unrolled form, bounds loaded.
// CHECK-NEXT:      %[[FHI:.+]] = arith.constant 12 : i32
// CHECK-NEXT:      %[[AHI:.+]] = arith.addi %[[REC]], %[[FHI]] : i32
// CHECK-NEXT:      %[[PHI:.+]] = tt.addptr %syn_table, %[[AHI]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[CHI:.+]] = tt.load %[[PHI]] : !tt.ptr<i32>
// CHECK-NEXT:      %[[A:.+]] = arith.cmpi slt, %lo0, %[[CHI]] : i32
// CHECK-NEXT:      %[[FLO:.+]] = arith.constant 8 : i32
// CHECK-NEXT:      %[[ALO:.+]] = arith.addi %[[REC]], %[[FLO]] : i32
// CHECK-NEXT:      %[[PLO:.+]] = tt.addptr %syn_table, %[[ALO]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[CLO:.+]] = tt.load %[[PLO]] : !tt.ptr<i32>
// CHECK-NEXT:      %[[B:.+]] = arith.cmpi slt, %[[CLO]], %hi0 : i32
// CHECK-NEXT:      %[[MEETS:.+]] = arith.andi %[[A]], %[[B]] : i1
// CHECK-NEXT:      %[[WT:.+]] = scf.if %[[MEETS]] -> (i32) {
// The flag of chunk c is word c: the wait's index is the id read from the table.
// CHECK-NEXT:        %[[T:.+]] = syncopate.wait chunk %syn_flags[%[[CID]]], target %[[TARGET]] : !tt.ptr<i32>
// CHECK-NEXT:        scf.yield %[[T]] : i32
// CHECK-NEXT:      } else {
// CHECK-NEXT:        %[[NO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        scf.yield %[[NO]] : i32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[SUM:.+]] = arith.addi %[[ACC]], %[[WT]] : i32
// CHECK-NEXT:      scf.yield %[[SUM]] : i32
// CHECK-NEXT:    }
// The signal: one fence, then the SEND(C) list (entry 136 + 6 + 12 rank, clamp 4).
// CHECK-NEXT:    syncopate.release_fence
// CHECK-NEXT:    %[[SDIR:.+]] = arith.constant 142 : i32
// CHECK-NEXT:    %[[SSTRIDE:.+]] = arith.constant 12 : i32
// CHECK-NEXT:    %[[SOFF:.+]] = arith.muli %syn_rank, %[[SSTRIDE]] : i32
// CHECK-NEXT:    %[[SAT:.+]] = arith.addi %[[SDIR]], %[[SOFF]] : i32
// CHECK-NEXT:    %[[PSSTART:.+]] = tt.addptr %syn_table, %[[SAT]] : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[SSTART:.+]] = tt.load %[[PSSTART]] : !tt.ptr<i32>
// CHECK-NEXT:    %[[SONE:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %[[SATN:.+]] = arith.addi %[[SAT]], %[[SONE]] : i32
// CHECK-NEXT:    %[[PSCOUNT:.+]] = tt.addptr %syn_table, %[[SATN]] : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[SRAW:.+]] = tt.load %[[PSCOUNT]] : !tt.ptr<i32>
// CHECK-NEXT:    %[[SLONGEST:.+]] = arith.constant 4 : i32
// CHECK-NEXT:    %[[SCOUNT:.+]] = arith.minsi %[[SRAW]], %[[SLONGEST]] : i32
// CHECK-NEXT:    %[[SLB:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[SSTEP:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    scf.for %[[J:.+]] = %[[SLB]] to %[[SCOUNT]] step %[[SSTEP]] : i32 {
// CHECK-NEXT:      %[[SIDX:.+]] = arith.addi %[[SSTART]], %[[J]] : i32
// CHECK-NEXT:      %[[PSID:.+]] = tt.addptr %syn_table, %[[SIDX]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[SCID:.+]] = tt.load %[[PSID]] : !tt.ptr<i32>
// CHECK-NEXT:      arith.constant 8 : i32
// CHECK-NEXT:      arith.constant 16 : i32
// CHECK-NEXT:      arith.muli %[[SCID]]
// CHECK-NEXT:      %[[SREC:.+]] = arith.addi
// Dim 0: max(min(hi0, HI[0]) - max(lo0, LO[0]), 0).
// CHECK-NEXT:      %[[F12:.+]] = arith.constant 12 : i32
// CHECK-NEXT:      %[[A12:.+]] = arith.addi %[[SREC]], %[[F12]] : i32
// CHECK-NEXT:      %[[P12:.+]] = tt.addptr %syn_table, %[[A12]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[HI0:.+]] = tt.load %[[P12]] : !tt.ptr<i32>
// CHECK-NEXT:      %[[H0:.+]] = arith.minsi %hi0, %[[HI0]] : i32
// CHECK-NEXT:      %[[F8:.+]] = arith.constant 8 : i32
// CHECK-NEXT:      %[[A8:.+]] = arith.addi %[[SREC]], %[[F8]] : i32
// CHECK-NEXT:      %[[P8:.+]] = tt.addptr %syn_table, %[[A8]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[LO0:.+]] = tt.load %[[P8]] : !tt.ptr<i32>
// CHECK-NEXT:      %[[L0:.+]] = arith.maxsi %lo0, %[[LO0]] : i32
// CHECK-NEXT:      %[[D0:.+]] = arith.subi %[[H0]], %[[L0]] : i32
// CHECK-NEXT:      %[[Z0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[E0:.+]] = arith.maxsi %[[D0]], %[[Z0]] : i32
// Dim 1: the same with HI[1] (word 13) and LO[1] (word 9).
// CHECK-NEXT:      %[[F13:.+]] = arith.constant 13 : i32
// CHECK-NEXT:      arith.addi %[[SREC]], %[[F13]] : i32
// CHECK-NEXT:      tt.addptr %syn_table
// CHECK-NEXT:      %[[HI1:.+]] = tt.load
// CHECK-NEXT:      %[[H1:.+]] = arith.minsi %hi1, %[[HI1]] : i32
// CHECK-NEXT:      %[[F9:.+]] = arith.constant 9 : i32
// CHECK-NEXT:      arith.addi %[[SREC]], %[[F9]] : i32
// CHECK-NEXT:      tt.addptr %syn_table
// CHECK-NEXT:      %[[LO1:.+]] = tt.load
// CHECK-NEXT:      %[[L1:.+]] = arith.maxsi %lo1, %[[LO1]] : i32
// CHECK-NEXT:      %[[D1:.+]] = arith.subi %[[H1]], %[[L1]] : i32
// CHECK-NEXT:      %[[Z1:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[E1:.+]] = arith.maxsi %[[D1]], %[[Z1]] : i32
// CHECK-NEXT:      %[[VOL:.+]] = arith.muli %[[E0]], %[[E1]] : i32
// PRODUCED[c] = word 11 + c.
// CHECK-NEXT:      %[[P0:.+]] = arith.constant 11 : i32
// CHECK-NEXT:      %[[PIDX:.+]] = arith.addi %[[P0]], %[[SCID]] : i32
// CHECK-NEXT:      syncopate.signal add produced %syn_flags[%[[PIDX]]], %[[VOL]] {fenced} : !tt.ptr<i32>
// CHECK-NEXT:    }
// (the pattern walker drops %row, a pure op nothing uses)
// CHECK-NEXT:    tt.return
// CHECK-NOT:     syncopate.signal
// CHECK-NOT:     _region

// The code does not repeat per chunk: 4 chunks of A and 4 of C, one wait and one signal.
// ONCE-LABEL: tt.func public @tile
// ONCE:      syncopate.wait
// ONCE-NOT:  syncopate.wait
// ONCE:      syncopate.release_fence
// ONCE:      syncopate.signal
// ONCE-NOT:  syncopate.signal
// ONCE:      tt.return

// Without the option (lowering "auto") a schedule of 8 chunks is below
// chunk_table.TABLE_MIN_CHUNKS (9) and stays unrolled: a wait per chunk of A (2 per rank) and
// a signal per chunk of C, no table loads and no fence.
// UNROLLED-LABEL: tt.func public @tile
// UNROLLED-NOT:     tt.addptr %syn_table
// UNROLLED-COUNT-4: syncopate.wait chunk %syn_flags[%{{.+}}], target %{{.+}} {chunk = {{[0-3]}} : i32}
// UNROLLED-NOT:     syncopate.wait
// UNROLLED-NOT:     syncopate.release_fence
// UNROLLED-COUNT-4: syncopate.signal add produced %syn_flags[%{{.+}}], %{{.+}} : !tt.ptr<i32>
// UNROLLED-NOT:     syncopate.signal
// UNROLLED:         tt.return

// The copy engine writes a chunk's flag once per epoch: target epoch * 1; the loops are the same.
// CE:      %[[W:.+]] = arith.constant 1 : i32
// CE-NEXT: %[[TARGET:.+]] = arith.muli %syn_epoch, %[[W]] : i32
// CE-NEXT: arith.constant 136 : i32
// CE:      scf.for
// CE:      syncopate.wait chunk %syn_flags[%{{.+}}], target %[[TARGET]] : !tt.ptr<i32>
// CE-NOT:  syncopate.wait
// CE:      syncopate.release_fence
// CE:      scf.for
// CE:      syncopate.signal add produced %syn_flags[%{{.+}}], %{{.+}} {fenced} : !tt.ptr<i32>
// CE-NOT:  syncopate.signal

module {
  tt.func public @tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %lo0 = arith.muli %pid_m, %c64_i32 : i32
    %hi0 = arith.addi %lo0, %c64_i32 : i32
    %lo1 = arith.muli %pid_n, %c64_i32 : i32
    %hi1 = arith.addi %lo1, %c64_i32 : i32
    // the tile reads A[lo0:hi0, 0:64] (an all-gathered operand) ...
    %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %c0_i32] to[%hi0, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
    %row = arith.addi %lo0, %token : i32
    // ... and writes C[lo0:hi0, lo1:hi1] (a reduce-scattered partial)
    syncopate.signal_region %syn_flags, %syn_epoch, %syn_rank[%lo0, %lo1] to[%hi0, %hi1] {tensor = "C"} : !tt.ptr<i32>
    tt.return
  }
}
