// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=sm comm-programs=4 lowering=table},partition-sms,resolve-chunks,lower-sm' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A;c_ptr:C" backend=sm comm-programs=4 lowering=table withhold="0"},partition-sms,resolve-chunks,lower-sm' | filecheck %s --check-prefix=HOLD

// lower-sm with lowering="table" (issue 10; passes/comm_table.py): the comm programs' loop
// over the EXEC list (partition-sms-table.mlir) gets real code that does not grow with the
// chunk count.  syncopate.transfer_chunk becomes: read the chunk's record from %syn_table
// (tensor slot, FLAGS & 3), then ONE scf.if per kind of chunk the schedule has (slot and
// sum/on-destination bits), each holding the steps lower-sm-comm.mlir shows for one chunk,
// with the chunk's ends, box, volume and `after` list loaded from its record: waits through
// tt.call @syncopate_wait_b32, the copy loop (an scf.for marked {tt.num_stages = 1}: Triton
// must not software-pipeline a loop whose tiles it would multi-buffer), and releases through
// tt.atomic_rmw.  syncopate.enter becomes a loop over the ranks; the drain reads this rank's
// CONSUMED target from the table's reads section.  In the compute programs, syncopate.remap
// is one load from a remap section appended to the table (recorded in the state as
// table_remaps), the chunk waits of the RECV loop become spin calls, the release_fence one
// gpu.barrier, and the fenced PRODUCED signals masked atomics with no barrier of their own.
//
// ag-rs2.json (C = 8, W = 2), three kinds:
// * A, push (slot 0, bits 0): chunks 0, 1 (rank 1 -> 0), run on the source;
// * A, pull (slot 0, bits 2): chunks 2, 3 (rank 0 -> 1), run on the destination; chunk 3
//   comes after chunk 0 (its source's copy of rows 128..191 must have arrived first);
// * C, sum (slot 1, bits 3): chunks 4..7, run on the destination.
// Flags: CHUNK[c] = c, ENTRY[p] = 8 + p, CONSUMED = 10, PRODUCED[c] = 11 + c.  Table: records
// at 8 + 16 c (SRC word 1, DST 2, FLAGS 3, VOLUME 4, AFTER start/count 5/6, LO[0] 8); the
// directory at 136, 12 words per rank: EXEC entry 136 + 8, PUSHED 136 + 10; the reads section
// at 160; the pool at 162; the cell section (chunk_table VERSION 3) at 193: 2 x 8 directory
// words, then one 2 x 4 cell map per tensor (grain 64 rows); the table is 225 words before the
// remap section.  Peer table rows: 0 flags, 1 A, 2 C.

// CHECK:       table_remaps = {{\[\[}}225, 4{{\]\]}}>
// CHECK-LABEL: tt.func public @tile
// CHECK-SAME:    %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64)
// CHECK-NEXT:    %[[PID:.+]] = tt.get_program_id x : i32
// CHECK-NEXT:    %[[COUNT:.+]] = arith.constant 4 : i32
// CHECK:         scf.if %{{.+}} {
// CHECK-NEXT:      scf.if %{{.+}} {
// enter: comm program 0 sets ENTRY[rank] = epoch on every other rank, a loop over q < W.
// CHECK-NEXT:        %[[Z:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        %[[FIRST:.+]] = arith.cmpi eq, %[[PID]], %[[Z]] : i32
// CHECK-NEXT:        scf.if %[[FIRST]] {
// CHECK-NEXT:          %[[E0:.+]] = arith.constant 8 : i32
// CHECK-NEXT:          %[[ENTRY:.+]] = arith.addi %[[E0]], %syn_rank : i32
// CHECK-NEXT:          %[[QLB:.+]] = arith.constant 0 : i32
// CHECK-NEXT:          %[[W:.+]] = arith.constant 2 : i32
// CHECK-NEXT:          %[[QSTEP:.+]] = arith.constant 1 : i32
// CHECK-NEXT:          scf.for %[[Q:.+]] = %[[QLB]] to %[[W]] step %[[QSTEP]] : i32 {
// CHECK-NEXT:            %[[NOT_ME:.+]] = arith.cmpi ne, %syn_rank, %[[Q]] : i32
// CHECK-NEXT:            scf.if %[[NOT_ME]] {
// CHECK-NEXT:              %[[MINE:.+]] = tt.addptr %syn_flags, %[[ENTRY]] : !tt.ptr<i32>, i32
// CHECK:                   arith.addi %{{.+}}, %[[Q]] : i32
// CHECK:                   %[[PEER:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// CHECK-NEXT:              "gpu.barrier"() : () -> ()
// CHECK-NEXT:              tt.atomic_rmw exch, release, sys, %[[PEER]], %syn_epoch : (!tt.ptr<i32>, i32) -> i32
// CHECK-NEXT:            } else {
// CHECK-NEXT:            }
// CHECK-NEXT:          }
// CHECK-NEXT:        } else {
// CHECK-NEXT:        }
// The EXEC loop (clamp: rank 1 runs 6 chunks).
// CHECK-NEXT:        arith.constant 144 : i32
// CHECK:             arith.constant 6 : i32
// CHECK-NEXT:        arith.minsi
// CHECK:             scf.for
// CHECK-NEXT:          %[[IDX:.+]] = arith.addi
// CHECK-NEXT:          %[[PCID:.+]] = tt.addptr %syn_table, %[[IDX]] : !tt.ptr<i32>, i32
// CHECK-NEXT:          %[[CID:.+]] = tt.load %[[PCID]] : !tt.ptr<i32>
// The record, its tensor slot and kind bits.
// CHECK-NEXT:          %[[R0:.+]] = arith.constant 8 : i32
// CHECK-NEXT:          %[[RW:.+]] = arith.constant 16 : i32
// CHECK-NEXT:          %[[ROFF:.+]] = arith.muli %[[CID]], %[[RW]] : i32
// CHECK-NEXT:          %[[REC:.+]] = arith.addi %[[R0]], %[[ROFF]] : i32
// CHECK-NEXT:          %[[F0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:          %[[AT0:.+]] = arith.addi %[[REC]], %[[F0]] : i32
// CHECK-NEXT:          %[[PSLOT:.+]] = tt.addptr %syn_table, %[[AT0]] : !tt.ptr<i32>, i32
// CHECK-NEXT:          %[[SLOT:.+]] = tt.load %[[PSLOT]] : !tt.ptr<i32>
// CHECK-NEXT:          %[[F3:.+]] = arith.constant 3 : i32
// CHECK-NEXT:          %[[AT3:.+]] = arith.addi %[[REC]], %[[F3]] : i32
// CHECK-NEXT:          %[[PFLAGS:.+]] = tt.addptr %syn_table, %[[AT3]] : !tt.ptr<i32>, i32
// CHECK-NEXT:          %[[FLAGS:.+]] = tt.load %[[PFLAGS]] : !tt.ptr<i32>
// CHECK-NEXT:          %[[MASK3:.+]] = arith.constant 3 : i32
// CHECK-NEXT:          %[[BITS:.+]] = arith.andi %[[FLAGS]], %[[MASK3]] : i32
//
// Kind 1: A, push (slot 0, bits 0).  On the source: wait ENTRY[dst] (kind 1), copy into the
// destination's A (peer row 1), release CHUNK[c] += 1 on the destination.
// CHECK-NEXT:          %[[S0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:          %[[IS_S0:.+]] = arith.cmpi eq, %[[SLOT]], %[[S0]] : i32
// CHECK-NEXT:          %[[B0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:          %[[IS_B0:.+]] = arith.cmpi eq, %[[BITS]], %[[B0]] : i32
// CHECK-NEXT:          %[[K1:.+]] = arith.andi %[[IS_S0]], %[[IS_B0]] : i1
// CHECK-NEXT:          scf.if %[[K1]] {
// CHECK-NEXT:            arith.constant 1 : i32
// CHECK-NEXT:            arith.addi %[[REC]]
// CHECK-NEXT:            tt.addptr %syn_table
// CHECK-NEXT:            %[[SRC1:.+]] = tt.load
// CHECK-NEXT:            arith.constant 2 : i32
// CHECK-NEXT:            arith.addi %[[REC]]
// CHECK-NEXT:            tt.addptr %syn_table
// CHECK-NEXT:            %[[DST1:.+]] = tt.load
// CHECK-NEXT:            arith.constant 4 : i32
// CHECK-NEXT:            arith.muli %syn_epoch
// CHECK-NEXT:            %[[EB1:.+]] = arith.constant 8 : i32
// CHECK-NEXT:            %[[EI1:.+]] = arith.addi %[[EB1]], %[[DST1]] : i32
// CHECK-NEXT:            %[[EP1:.+]] = tt.addptr %syn_flags, %[[EI1]] : !tt.ptr<i32>, i32
// CHECK-NEXT:            %[[KE1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            tt.call @syncopate_wait_b32(%[[EP1]], %[[EI1]], %syn_epoch, %[[KE1]], %syn_diag, %syn_rank, %syn_epoch, %syn_timeout_ns)
// CHECK-NEXT:            %[[AROW:.+]] = arith.constant 2 : i32
// CHECK-NEXT:            arith.addi %[[AROW]], %syn_rank : i32
// CHECK:                 arith.addi %[[AROW]], %[[DST1]] : i32
// CHECK:                 %[[DST_A:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<bf16>
// The box: rows [LO[0], LO[0] + 64) from the record (every chunk of the kind is 64 rows:
// the extent is a constant), all 64 columns; one 64 x 64 tile, no mask.
// CHECK-NEXT:            %[[F8:.+]] = arith.constant 8 : i32
// CHECK-NEXT:            %[[AT8:.+]] = arith.addi %[[REC]], %[[F8]] : i32
// CHECK-NEXT:            %[[PLO:.+]] = tt.addptr %syn_table, %[[AT8]] : !tt.ptr<i32>, i32
// CHECK-NEXT:            %[[LO1:.+]] = tt.load %[[PLO]] : !tt.ptr<i32>
// CHECK-NEXT:            %[[EXT:.+]] = arith.constant 64 : i32
// CHECK-NEXT:            arith.addi %[[LO1]], %[[EXT]] : i32
// CHECK-NEXT:            %[[NT1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            scf.for %{{.+}} = %[[PID]] to %[[NT1]] step %[[COUNT]] : i32 {
// CHECK:                   tt.addptr %a_ptr, %[[CORNER:.+]] : !tt.ptr<bf16>, i32
// CHECK:                   tt.addptr %[[DST_A]], %[[CORNER]] : !tt.ptr<bf16>, i32
// CHECK:                   %[[V1:.+]] = tt.load %{{.+}} : tensor<64x64x!tt.ptr<bf16>>
// CHECK-NEXT:              tt.store %{{.+}}, %[[V1]] : tensor<64x64x!tt.ptr<bf16>>
// CHECK-NEXT:            } {tt.num_stages = 1 : i32}
// CHECK-NEXT:            %[[ONE1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            %[[CP1:.+]] = tt.addptr %syn_flags, %[[CID]] : !tt.ptr<i32>, i32
// CHECK:                 arith.addi %{{.+}}, %[[DST1]] : i32
// CHECK:                 %[[CHUNK_DST:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// CHECK-NEXT:            "gpu.barrier"() : () -> ()
// CHECK-NEXT:            tt.atomic_rmw add, release, sys, %[[CHUNK_DST]], %[[ONE1]] : (!tt.ptr<i32>, i32) -> i32
// CHECK-NEXT:          } else {
// CHECK-NEXT:          }
//
// Kind 2: A, pull (slot 0, bits 2).  On the destination: wait ENTRY[src], then the chunks of
// the record's after-list (clamp 1) on the source (peer flags, kind 0, target epoch * 4),
// copy from the source's A into ours, CHUNK[c] += 1 here, CONSUMED += 1 on the source.
// CHECK-NEXT:          arith.constant 0 : i32
// CHECK-NEXT:          arith.cmpi eq, %[[SLOT]]
// CHECK-NEXT:          %[[B2:.+]] = arith.constant 2 : i32
// CHECK-NEXT:          arith.cmpi eq, %[[BITS]], %[[B2]] : i32
// CHECK-NEXT:          %[[K2:.+]] = arith.andi
// CHECK-NEXT:          scf.if %[[K2]] {
// CHECK-NEXT:            arith.constant 1 : i32
// CHECK-NEXT:            arith.addi %[[REC]]
// CHECK-NEXT:            tt.addptr %syn_table
// CHECK-NEXT:            %[[SRC2:.+]] = tt.load
// CHECK:                 %[[CT2:.+]] = arith.muli %syn_epoch, %{{.+}} : i32
// CHECK-NEXT:            %[[EB2:.+]] = arith.constant 8 : i32
// CHECK-NEXT:            %[[EI2:.+]] = arith.addi %[[EB2]], %[[SRC2]] : i32
// CHECK-NEXT:            %[[EP2:.+]] = tt.addptr %syn_flags, %[[EI2]] : !tt.ptr<i32>, i32
// CHECK-NEXT:            %[[KE2:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            tt.call @syncopate_wait_b32(%[[EP2]], %[[EI2]], %syn_epoch, %[[KE2]],
// CHECK-NEXT:            %[[F5:.+]] = arith.constant 5 : i32
// CHECK-NEXT:            arith.addi %[[REC]], %[[F5]] : i32
// CHECK-NEXT:            tt.addptr %syn_table
// CHECK-NEXT:            %[[ASTART:.+]] = tt.load
// CHECK-NEXT:            %[[F6:.+]] = arith.constant 6 : i32
// CHECK-NEXT:            arith.addi %[[REC]], %[[F6]] : i32
// CHECK-NEXT:            tt.addptr %syn_table
// CHECK-NEXT:            %[[ARAW:.+]] = tt.load
// CHECK-NEXT:            %[[ALONG:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            %[[ACOUNT:.+]] = arith.minsi %[[ARAW]], %[[ALONG]] : i32
// CHECK-NEXT:            %[[ALB:.+]] = arith.constant 0 : i32
// CHECK-NEXT:            %[[ASTEP:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            scf.for %[[J:.+]] = %[[ALB]] to %[[ACOUNT]] step %[[ASTEP]] : i32 {
// CHECK-NEXT:              %[[AIDX:.+]] = arith.addi %[[ASTART]], %[[J]] : i32
// CHECK-NEXT:              %[[PA:.+]] = tt.addptr %syn_table, %[[AIDX]] : !tt.ptr<i32>, i32
// CHECK-NEXT:              %[[AFTER:.+]] = tt.load %[[PA]] : !tt.ptr<i32>
// CHECK-NEXT:              tt.addptr %syn_flags, %[[AFTER]] : !tt.ptr<i32>, i32
// CHECK:                   arith.addi %{{.+}}, %[[SRC2]] : i32
// CHECK:                   %[[AP:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// CHECK-NEXT:              %[[KC:.+]] = arith.constant 0 : i32
// CHECK-NEXT:              tt.call @syncopate_wait_b32(%[[AP]], %[[AFTER]], %[[CT2]], %[[KC]],
// CHECK-NEXT:            }
// CHECK:                 %[[SRC_A:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<bf16>
// CHECK:                 scf.for %{{.+}} = %[[PID]] to %{{.+}} step %[[COUNT]] : i32 {
// CHECK:                   tt.addptr %[[SRC_A]], %[[CORNER2:.+]] : !tt.ptr<bf16>, i32
// CHECK:                   tt.addptr %a_ptr, %[[CORNER2]] : !tt.ptr<bf16>, i32
// CHECK:                   tt.load
// CHECK-NEXT:              tt.store
// CHECK-NEXT:            } {tt.num_stages = 1 : i32}
// CHECK-NEXT:            %[[ONE2:.+]] = arith.constant 1 : i32
// CHECK-NEXT:            %[[CP2:.+]] = tt.addptr %syn_flags, %[[CID]] : !tt.ptr<i32>, i32
// CHECK-NEXT:            "gpu.barrier"() : () -> ()
// CHECK-NEXT:            tt.atomic_rmw add, release, sys, %[[CP2]], %[[ONE2]] : (!tt.ptr<i32>, i32) -> i32
// CHECK-NEXT:            %[[CONSUMED:.+]] = arith.constant 10 : i32
// CHECK-NEXT:            tt.addptr %syn_flags, %[[CONSUMED]] : !tt.ptr<i32>, i32
// CHECK:                 arith.addi %{{.+}}, %[[SRC2]] : i32
// CHECK:                 %[[THEIR_C:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// CHECK-NEXT:            "gpu.barrier"() : () -> ()
// CHECK-NEXT:            tt.atomic_rmw add, release, sys, %[[THEIR_C]], %[[ONE2]] : (!tt.ptr<i32>, i32) -> i32
// CHECK-NEXT:          } else {
// CHECK-NEXT:          }
//
// Kind 3: C, sum (slot 1, bits 3).  On the destination: wait ENTRY[src], PRODUCED[c] >=
// epoch * VOLUME on the source (kind 3) and here; add the source's C into ours in fp32 (one
// 64 x 128 tile); CHUNK[c] here, CONSUMED on the source.
// CHECK-NEXT:          %[[S1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:          arith.cmpi eq, %[[SLOT]], %[[S1]] : i32
// CHECK-NEXT:          %[[B3:.+]] = arith.constant 3 : i32
// CHECK-NEXT:          arith.cmpi eq, %[[BITS]], %[[B3]] : i32
// CHECK-NEXT:          %[[K3:.+]] = arith.andi
// CHECK-NEXT:          scf.if %[[K3]] {
// CHECK:                 tt.call @syncopate_wait_b32(
// CHECK-NEXT:            %[[F4:.+]] = arith.constant 4 : i32
// CHECK-NEXT:            arith.addi %[[REC]], %[[F4]] : i32
// CHECK-NEXT:            tt.addptr %syn_table
// CHECK-NEXT:            %[[VOLUME:.+]] = tt.load
// CHECK-NEXT:            %[[VT:.+]] = arith.muli %syn_epoch, %[[VOLUME]] : i32
// CHECK-NEXT:            %[[P0:.+]] = arith.constant 11 : i32
// CHECK-NEXT:            %[[PI:.+]] = arith.addi %[[P0]], %[[CID]] : i32
// CHECK:                 %[[THEIR_P:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i32>
// CHECK-NEXT:            %[[KP:.+]] = arith.constant 3 : i32
// CHECK-NEXT:            tt.call @syncopate_wait_b32(%[[THEIR_P]], %[[PI]], %[[VT]], %[[KP]],
// CHECK-NEXT:            %[[MY_P:.+]] = tt.addptr %syn_flags, %[[PI]] : !tt.ptr<i32>, i32
// CHECK-NEXT:            %[[KP2:.+]] = arith.constant 3 : i32
// CHECK-NEXT:            tt.call @syncopate_wait_b32(%[[MY_P]], %[[PI]], %[[VT]], %[[KP2]],
// CHECK-NEXT:            %[[CROW:.+]] = arith.constant 4 : i32
// CHECK-NEXT:            arith.addi %[[CROW]], %syn_rank : i32
// CHECK:                 tt.ptr_to_int %c_ptr : !tt.ptr<bf16> -> i64
// CHECK:                 %[[SRC_C:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<bf16>
// CHECK:                 scf.for %{{.+}} = %[[PID]] to %{{.+}} step %[[COUNT]] : i32 {
// CHECK:                   tt.addptr %[[SRC_C]], %{{.+}} : !tt.ptr<bf16>, i32
// CHECK:                   %[[THEIRS:.+]] = tt.load %{{.+}} : tensor<64x128x!tt.ptr<bf16>>
// CHECK-NEXT:              %[[OURS:.+]] = tt.load %[[DP:.+]] : tensor<64x128x!tt.ptr<bf16>>
// CHECK-NEXT:              %[[X:.+]] = arith.extf %[[THEIRS]] : tensor<64x128xbf16> to tensor<64x128xf32>
// CHECK-NEXT:              %[[Y:.+]] = arith.extf %[[OURS]] : tensor<64x128xbf16> to tensor<64x128xf32>
// CHECK-NEXT:              %[[S:.+]] = arith.addf %[[X]], %[[Y]] : tensor<64x128xf32>
// CHECK-NEXT:              %[[T:.+]] = arith.truncf %[[S]] : tensor<64x128xf32> to tensor<64x128xbf16>
// CHECK-NEXT:              tt.store %[[DP]], %[[T]] : tensor<64x128x!tt.ptr<bf16>>
// CHECK-NEXT:            } {tt.num_stages = 1 : i32}
// CHECK:                 tt.atomic_rmw add, release, sys, %{{.+}} : (!tt.ptr<i32>, i32) -> i32
// CHECK:                 tt.atomic_rmw add, release, sys, %{{.+}} : (!tt.ptr<i32>, i32) -> i32
// CHECK-NEXT:          } else {
// CHECK-NEXT:          }
// No fourth kind, and nothing else in the EXEC loop.
// CHECK-NEXT:        }
//
// Comm program 0 awaits the chunks pushed to this rank (PUSHED entry 146 + 12 rank, clamp 2).
// CHECK-NEXT:        %[[Z2:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        arith.cmpi eq, %[[PID]], %[[Z2]] : i32
// CHECK-NEXT:        scf.if
// CHECK-NEXT:          %[[PW:.+]] = arith.constant 4 : i32
// CHECK-NEXT:          %[[PT:.+]] = arith.muli %syn_epoch, %[[PW]] : i32
// CHECK-NEXT:          arith.constant 146 : i32
// CHECK:               scf.for
// CHECK:                 %[[PCH:.+]] = tt.load %{{.+}} : !tt.ptr<i32>
// CHECK-NEXT:            %[[PP:.+]] = tt.addptr %syn_flags, %[[PCH]] : !tt.ptr<i32>, i32
// CHECK-NEXT:            %[[KPUSH:.+]] = arith.constant 0 : i32
// CHECK-NEXT:            tt.call @syncopate_wait_b32(%[[PP]], %[[PCH]], %[[PT]], %[[KPUSH]],
// CHECK-NEXT:          }
// CHECK-NEXT:        } else {
// CHECK-NEXT:        }
// The drain: CONSUMED >= epoch * reads[rank], reads[rank] loaded from word 160 + rank.
// CHECK-NEXT:        %[[Z3:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        arith.cmpi eq, %[[PID]], %[[Z3]] : i32
// CHECK-NEXT:        scf.if
// CHECK-NEXT:          %[[READS:.+]] = arith.constant 160 : i32
// CHECK-NEXT:          %[[RI:.+]] = arith.addi %[[READS]], %syn_rank : i32
// CHECK-NEXT:          %[[PR:.+]] = tt.addptr %syn_table, %[[RI]] : !tt.ptr<i32>, i32
// CHECK-NEXT:          %[[N:.+]] = tt.load %[[PR]] : !tt.ptr<i32>
// CHECK-NEXT:          %[[CI:.+]] = arith.constant 10 : i32
// CHECK-NEXT:          %[[DT:.+]] = arith.muli %syn_epoch, %[[N]] : i32
// CHECK-NEXT:          %[[CPTR:.+]] = tt.addptr %syn_flags, %[[CI]] : !tt.ptr<i32>, i32
// CHECK-NEXT:          %[[KD:.+]] = arith.constant 2 : i32
// CHECK-NEXT:          tt.call @syncopate_wait_b32(%[[CPTR]], %[[CI]], %[[DT]], %[[KD]],
// CHECK-NEXT:        } else {
// CHECK-NEXT:        }
// CHECK-NEXT:      }
// CHECK-NEXT:    } else {
//
// The compute programs.  remap: table[225 + 4 rank + coord] for 0 <= coord < 4 (the section
// the state records as table_remaps [[225, 4]]), the coordinate itself outside.
// CHECK:           %pid = tt.get_program_id x : i32
// CHECK-NEXT:      %[[COORD:.+]] = arith.subi %pid, %[[COUNT]] : i32
// CHECK-NEXT:      %[[L:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[GE:.+]] = arith.cmpi sge, %[[COORD]], %[[L]] : i32
// CHECK-NEXT:      %[[TILES:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[LT:.+]] = arith.cmpi slt, %[[COORD]], %[[TILES]] : i32
// CHECK-NEXT:      %[[IN:.+]] = arith.andi %[[GE]], %[[LT]] : i1
// CHECK-NEXT:      %[[Z4:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[SAFE:.+]] = arith.select %[[IN]], %[[COORD]], %[[Z4]] : i32
// CHECK-NEXT:      %[[SEC:.+]] = arith.constant 225 : i32
// CHECK-NEXT:      %[[ROWLEN:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[ROWOFF:.+]] = arith.muli %syn_rank, %[[ROWLEN]] : i32
// CHECK-NEXT:      %[[ROWAT:.+]] = arith.addi %[[SEC]], %[[ROWOFF]] : i32
// CHECK-NEXT:      %[[RAT:.+]] = arith.addi %[[ROWAT]], %[[SAFE]] : i32
// CHECK-NEXT:      %[[RP:.+]] = tt.addptr %syn_table, %[[RAT]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[MOVED:.+]] = tt.load %[[RP]] : !tt.ptr<i32>
// CHECK-NEXT:      %tile = arith.select %[[IN]], %[[MOVED]], %[[COORD]] : i32
// The RECV(A) loop of resolve-chunks-table.mlir, its wait now a spin call (kind 0).
// CHECK:           %token = scf.for
// CHECK:             scf.if %{{.+}} -> (i32) {
// CHECK-NEXT:          tt.addptr %syn_flags
// CHECK-NEXT:          arith.constant 0 : i32
// CHECK-NEXT:          %[[TW:.+]] = tt.call @syncopate_wait_b32(
// CHECK-NEXT:          scf.yield %[[TW]] : i32
// CHECK:           tt.store %y, %v : !tt.ptr<bf16>
// The release fence: one barrier for all the signals of the store, then the SEND(C) loop of
// masked atomics (value != 0), without a barrier each.
// CHECK-NEXT:      "gpu.barrier"() : () -> ()
// CHECK-NEXT:      arith.constant 142 : i32
// CHECK:           scf.for
// CHECK-NOT:         gpu.barrier
// CHECK:             %[[PROD0:.+]] = arith.constant 11 : i32
// CHECK-NEXT:        %[[PRODI:.+]] = arith.addi %[[PROD0]], %{{.+}} : i32
// CHECK-NEXT:        %[[PRODP:.+]] = tt.addptr %syn_flags, %[[PRODI]] : !tt.ptr<i32>, i32
// CHECK-NEXT:        %[[ZV:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        %[[NZ:.+]] = arith.cmpi ne, %[[VOL:.+]], %[[ZV]] : i32
// CHECK-NEXT:        tt.atomic_rmw add, release, sys, %[[PRODP]], %[[VOL]], %[[NZ]] : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return
// CHECK-NOT:     syncopate.

// Fault injection works per chunk id in the table form: withholding chunk 0 puts the push
// kind's release under `chunk != 0` (the data still moves).
// HOLD-LABEL: tt.func public @tile
// HOLD:         } {tt.num_stages = 1 : i32}
// HOLD-NEXT:    %[[ONE:.+]] = arith.constant 1 : i32
// HOLD-NEXT:    %[[W:.+]] = arith.constant 0 : i32
// HOLD-NEXT:    %[[KEEP:.+]] = arith.cmpi ne, %[[CID:.+]], %[[W]] : i32
// HOLD-NEXT:    scf.if %[[KEEP]] {
// HOLD-NEXT:      tt.addptr %syn_flags, %[[CID]] : !tt.ptr<i32>, i32
// HOLD:           "gpu.barrier"() : () -> ()
// HOLD-NEXT:      tt.atomic_rmw add, release, sys, %{{.+}}, %[[ONE]] : (!tt.ptr<i32>, i32) -> i32
// HOLD-NEXT:    } else {
// HOLD-NEXT:    }

module {
  tt.func public @tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %c128_i32 = arith.constant 128 : i32
    %pid = tt.get_program_id x : i32
    %tile = syncopate.remap %pid, %syn_rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
    %lo = arith.muli %tile, %c64_i32 : i32
    %hi = arith.addi %lo, %c64_i32 : i32
    %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo, %c0_i32] to[%hi, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
    %row = arith.addi %lo, %token : i32
    %x = tt.addptr %a_ptr, %row : !tt.ptr<bf16>, i32
    %v = tt.load %x : !tt.ptr<bf16>
    %y = tt.addptr %c_ptr, %row : !tt.ptr<bf16>, i32
    tt.store %y, %v : !tt.ptr<bf16>
    syncopate.signal_region %syn_flags, %syn_epoch, %syn_rank[%lo, %c0_i32] to[%hi, %c128_i32] {tensor = "C"} : !tt.ptr<i32>
    tt.return
  }
}
