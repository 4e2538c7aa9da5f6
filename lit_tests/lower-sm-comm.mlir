// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push-split1.json" operands="a_ptr:A" backend=sm comm-programs=4},append-abi-params,partition-sms,lower-sm' | filecheck %s --check-prefix=PUSH
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=sm comm-programs=2},append-abi-params,partition-sms,lower-sm' | filecheck %s --check-prefix=PULL

// lower-sm gives the comm programs' steps real code (peer-to-peer loads and stores):
// * enter: comm program 0 stores ENTRY[rank] = epoch into every peer's flag array (release,
//   system scope); a peer's address is ptr - peers[buf][rank] + peers[buf][peer], read from
//   the syn_peers table (row 0: flags, row 1: A);
// * transfer c, on the rank that executes it: wait until the data may be touched, copy this
//   comm program's tiles (tile t goes to program t % count), then release CHUNK[c] += 1 on the
//   destination (and, pull, CONSUMED += 1 on the source);
// * drain (pull): comm program 0 waits CONSUMED >= epoch * reads(rank).
// Nothing of the syncopate dialect is left.

// Push, ag2-push-split1.json: chunk 0 = rows 128..255 from rank 1 to rank 0 (C = 2 chunks,
// W = 2 ranks: ENTRY[p] is word 2 + p).
// PUSH-LABEL: tt.func public @noop
// PUSH:         %[[PID:.+]] = tt.get_program_id x : i32
// PUSH-NEXT:    %[[COUNT:.+]] = arith.constant 4 : i32
// PUSH:         scf.if %{{.+}} {
// PUSH-NEXT:      scf.if %{{.+}} {
// PUSH-NEXT:      %[[Z:.+]] = arith.constant 0 : i32
// PUSH-NEXT:      %[[FIRST:.+]] = arith.cmpi eq, %[[PID]], %[[Z]] : i32
// PUSH-NEXT:      scf.if %[[FIRST]] {
// PUSH-NEXT:        %[[E0:.+]] = arith.constant 2 : i32
// PUSH-NEXT:        %[[ENTRY:.+]] = arith.addi %[[E0]], %syn_rank : i32
// PUSH-NEXT:        %[[Q0:.+]] = arith.constant 0 : i32
// PUSH-NEXT:        %[[NOT_ME:.+]] = arith.cmpi ne, %syn_rank, %[[Q0]] : i32
// PUSH-NEXT:        scf.if %[[NOT_ME]] {
// PUSH-NEXT:          %[[Q:.+]] = arith.constant 0 : i32
// PUSH-NEXT:          %[[MINE:.+]] = tt.addptr %syn_flags, %[[ENTRY]] : !tt.ptr<i32>, i32
// PUSH-NEXT:          %[[ROW:.+]] = arith.constant 0 : i32
// PUSH-NEXT:          %[[I_ME:.+]] = arith.addi %[[ROW]], %syn_rank : i32
// PUSH-NEXT:          %[[P_ME:.+]] = tt.addptr %syn_peers, %[[I_ME]] : !tt.ptr<i64>, i32
// PUSH-NEXT:          %[[BASE_ME:.+]] = tt.load %[[P_ME]] : !tt.ptr<i64>
// PUSH-NEXT:          %[[I_Q:.+]] = arith.addi %[[ROW]], %[[Q]] : i32
// PUSH-NEXT:          %[[P_Q:.+]] = tt.addptr %syn_peers, %[[I_Q]] : !tt.ptr<i64>, i32
// PUSH-NEXT:          %[[BASE_Q:.+]] = tt.load %[[P_Q]] : !tt.ptr<i64>
// PUSH-NEXT:          %[[ADDR:.+]] = tt.ptr_to_int %[[MINE]] : !tt.ptr<i32> -> i64
// PUSH-NEXT:          %[[OFF:.+]] = arith.subi %[[ADDR]], %[[BASE_ME]] : i64
// PUSH-NEXT:          %[[THEIRS:.+]] = arith.addi %[[OFF]], %[[BASE_Q]] : i64
// PUSH-NEXT:          %[[PEER:.+]] = tt.int_to_ptr %[[THEIRS]] : i64 -> !tt.ptr<i32>
// PUSH-NEXT:          "gpu.barrier"() : () -> ()
// PUSH-NEXT:          %{{.+}} = tt.atomic_rmw exch, release, sys, %[[PEER]], %syn_epoch : (!tt.ptr<i32>, i32) -> i32
// The transfer of chunk 0 runs on its source, rank 1: wait ENTRY[0] (rank 0 entered epoch e,
// so its launch e-1 no longer reads A), kind 1 (entry) in the watchdog record.
// PUSH:             tt.atomic_rmw exch, release, sys
// PUSH-NEXT:        } else {
// PUSH-NEXT:        }
// PUSH-NEXT:      } else {
// PUSH-NEXT:      }
// PUSH-NEXT:      %[[R1:.+]] = arith.constant 1 : i32
// PUSH-NEXT:      %[[ON_SRC:.+]] = arith.cmpi eq, %syn_rank, %[[R1]] : i32
// PUSH-NEXT:      scf.if %[[ON_SRC]] {
// PUSH:             %[[W0:.+]] = arith.constant 2 : i32
// PUSH-NEXT:        %[[WP:.+]] = tt.addptr %syn_flags, %[[W0]] : !tt.ptr<i32>, i32
// PUSH-NEXT:        %[[KIND:.+]] = arith.constant 1 : i32
// PUSH-NEXT:        tt.call @syncopate_wait_b32(%[[WP]], %[[W0]], %syn_epoch, %[[KIND]], %syn_diag, %syn_rank, %syn_epoch, %syn_timeout_ns)
// Rank 0's copy of A: row 1 of the peer table (entries 2 + rank).
// PUSH-NEXT:        %[[AROW:.+]] = arith.constant 2 : i32
// PUSH-NEXT:        arith.addi %[[AROW]], %syn_rank : i32
// PUSH:             %[[DST_A:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<bf16>
// One 128 x 64 tile: comm programs pid, pid + 4, ... < 1.
// PUSH-NEXT:        %[[NT:.+]] = arith.constant 1 : i32
// PUSH-NEXT:        scf.for %[[T:.+]] = %[[PID]] to %[[NT]] step %[[COUNT]] : i32 {
// PUSH:               tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
// PUSH:               %[[SRCP:.+]] = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<128x64x!tt.ptr<bf16>>
// PUSH:               %[[DSTP:.+]] = tt.splat %[[DST_A]] : !tt.ptr<bf16> -> tensor<128x64x!tt.ptr<bf16>>
// PUSH:               %[[V:.+]] = tt.load %{{.+}}, %[[MASK:.+]] : tensor<128x64x!tt.ptr<bf16>>
// PUSH-NEXT:          tt.store %{{.+}}, %[[V]], %[[MASK]] : tensor<128x64x!tt.ptr<bf16>>
// PUSH-NEXT:        }
// Then CHUNK[0] += 1 on rank 0 (4 comm programs: complete at 4 * epoch).
// PUSH:             %[[CH:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// PUSH-NEXT:        "gpu.barrier"() : () -> ()
// PUSH-NEXT:        tt.atomic_rmw add, release, sys, %[[CH]], %{{.+}} : (!tt.ptr<i32>, i32) -> i32
// PUSH-NOT:     syncopate.
// PUSH:         tt.return

// Pull, ag2-pull.json (C = 4, W = 2: ENTRY[p] = word 4 + p, CONSUMED = word 6): chunk 0 (rows
// 128..191 of rank 1) runs on its destination, rank 0: wait ENTRY[1] (rank 1 staged its A),
// load from rank 1's copy, store locally, CHUNK[0] += 1 locally, CONSUMED += 1 on rank 1.
// PULL-LABEL: tt.func public @noop
// PULL-NEXT:    %[[PID:.+]] = tt.get_program_id x : i32
// PULL:             tt.atomic_rmw exch, release, sys
// PULL:             tt.atomic_rmw exch, release, sys
// PULL-NEXT:        } else {
// PULL-NEXT:        }
// PULL-NEXT:      } else {
// PULL-NEXT:      }
// PULL-NEXT:      %[[R0:.+]] = arith.constant 0 : i32
// PULL-NEXT:      %[[ON_DST:.+]] = arith.cmpi eq, %syn_rank, %[[R0]] : i32
// PULL-NEXT:      scf.if %[[ON_DST]] {
// PULL-NEXT:        %[[SRC:.+]] = arith.constant 1 : i32
// PULL-NEXT:        arith.constant 0 : i32
// PULL-NEXT:        %[[E1:.+]] = arith.constant 5 : i32
// PULL-NEXT:        %[[EP:.+]] = tt.addptr %syn_flags, %[[E1]] : !tt.ptr<i32>, i32
// PULL-NEXT:        %[[KIND:.+]] = arith.constant 1 : i32
// PULL-NEXT:        tt.call @syncopate_wait_b32(%[[EP]], %[[E1]], %syn_epoch, %[[KIND]],
// PULL:             %[[SRC_A:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<bf16>
// PULL:             scf.for
// PULL:               tt.splat %[[SRC_A]] : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
// PULL:               tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
// PULL:               tt.load
// PULL-NEXT:          tt.store
// PULL-NEXT:        }
// PULL-NEXT:        %[[ONE:.+]] = arith.constant 1 : i32
// PULL-NEXT:        %[[C0:.+]] = arith.constant 0 : i32
// PULL-NEXT:        %[[CP:.+]] = tt.addptr %syn_flags, %[[C0]] : !tt.ptr<i32>, i32
// PULL-NEXT:        "gpu.barrier"() : () -> ()
// PULL-NEXT:        tt.atomic_rmw add, release, sys, %[[CP]], %[[ONE]] : (!tt.ptr<i32>, i32) -> i32
// PULL-NEXT:        %[[CONSUMED:.+]] = arith.constant 6 : i32
// PULL-NEXT:        %[[MY_C:.+]] = tt.addptr %syn_flags, %[[CONSUMED]] : !tt.ptr<i32>, i32
// PULL:             %[[THEIR_C:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// PULL-NEXT:        "gpu.barrier"() : () -> ()
// PULL-NEXT:        tt.atomic_rmw add, release, sys, %[[THEIR_C]], %[[ONE]] : (!tt.ptr<i32>, i32) -> i32
// The drain: each rank's 2 chunks are read by 2 comm programs: CONSUMED >= epoch * 4, kind 2.
// PULL:           %[[DRAINER:.+]] = arith.cmpi eq, %[[PID]], %{{.+}} : i32
// PULL-NEXT:      scf.if %[[DRAINER]] {
// PULL-NEXT:        %[[N0:.+]] = arith.constant 0 : i32
// PULL-NEXT:        arith.constant 0 : i32
// PULL-NEXT:        %[[IS0:.+]] = arith.cmpi eq, %syn_rank, %{{.+}} : i32
// PULL-NEXT:        %[[R4:.+]] = arith.constant 4 : i32
// PULL-NEXT:        %[[N1:.+]] = arith.select %[[IS0]], %[[R4]], %[[N0]] : i32
// PULL:             %[[N:.+]] = arith.select %{{.+}}, %{{.+}}, %[[N1]] : i32
// PULL-NEXT:        %[[TARGET:.+]] = arith.muli %syn_epoch, %[[N]] : i32
// PULL-NEXT:        %[[CI:.+]] = arith.constant 6 : i32
// PULL-NEXT:        %[[CPTR:.+]] = tt.addptr %syn_flags, %[[CI]] : !tt.ptr<i32>, i32
// PULL-NEXT:        %[[K2:.+]] = arith.constant 2 : i32
// PULL-NEXT:        tt.call @syncopate_wait_b32(%[[CPTR]], %[[CI]], %[[TARGET]], %[[K2]],
// PULL-NOT:     syncopate.
// PULL:         tt.return

module {
  tt.func public @noop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
