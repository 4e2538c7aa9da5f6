// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4 lowering=table},append-abi-params,partition-sms' | filecheck %s --check-prefix=PUSH
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=sm comm-programs=2 lowering=table},append-abi-params,partition-sms' | filecheck %s --check-prefix=PULL
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag4-ring.json" operands="a_ptr:A" backend=sm comm-programs=4},append-abi-params,partition-sms' | filecheck %s --check-prefix=RING
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-two-tensors.json" operands="a_ptr:A;c_ptr:B" backend=sm comm-programs=4 lowering=table},append-abi-params,partition-sms' | filecheck %s --check-prefix=TWO

// partition-sms with lowering="table" (issue 10): the comm programs and the compute programs
// are split as in partition-sms.mlir, but the comm plan in the syncopate.comm region is not one
// syncopate.transfer per chunk: after syncopate.enter it is ONE scf.for over this rank's EXEC
// list of the chunk table (%syn_table), whose body is one syncopate.transfer_chunk of the chunk
// id read from the list, with the communicated operands' base pointers as `bases` (in operand
// order: bases[i] is peer-table row 1 + i).  Push schedules: comm program 0 then awaits the
// chunks pushed to this rank with ONE scf.for over its PUSHED list (a chunk wait per id read);
// pull schedules end with syncopate.drain instead.  List lengths are clamped (arith.minsi) to
// the longest list of any rank, a compile-time constant.
//
// ag2-push.json / ag2-pull.json: C = 4 chunks, 1 tensor, W = 2.  Table: header 8 words, 4
// records of 16 -> the directory starts at word 72; per rank 4 lists (RECV(A), SEND(A), EXEC,
// PUSHED) of [start, count]: rank r's EXEC entry is word 72 + 4 + 8 r, its PUSHED entry
// 72 + 6 + 8 r.  Each rank executes 2 chunks and (push) receives 2.

// The kernel gets the seven ABI parameters, %syn_table third.
// PUSH:       lowering = table>, syncopate.state = #syncopate.state<mode = push, reads_per_src = {"0" = 0, "1" = 0}>
// PUSH-LABEL: tt.func public @tma_persistent
// PUSH-SAME:    %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64)
// PUSH-NEXT:    %[[PID:.+]] = tt.get_program_id x : i32
// PUSH-NEXT:    %[[N:.+]] = arith.constant 4 : i32
// PUSH-NEXT:    %[[IS_COMM:.+]] = arith.cmpi slt, %[[PID]], %[[N]] : i32
// PUSH:         scf.if %[[IS_COMM]] {
// PUSH-NEXT:    scf.if %{{.+}} {
// PUSH-NEXT:      syncopate.comm %[[PID]], %[[N]] {
// PUSH-NEXT:        syncopate.enter %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags : !tt.ptr<i32>
// This rank's EXEC entry: [start, count], count clamped to 2.
// PUSH-NEXT:        %[[EDIR:.+]] = arith.constant 76 : i32
// PUSH-NEXT:        %[[ESTRIDE:.+]] = arith.constant 8 : i32
// PUSH-NEXT:        %[[EOFF:.+]] = arith.muli %syn_rank, %[[ESTRIDE]] : i32
// PUSH-NEXT:        %[[EAT:.+]] = arith.addi %[[EDIR]], %[[EOFF]] : i32
// PUSH-NEXT:        %[[PES:.+]] = tt.addptr %syn_table, %[[EAT]] : !tt.ptr<i32>, i32
// PUSH-NEXT:        %[[ESTART:.+]] = tt.load %[[PES]] : !tt.ptr<i32>
// PUSH-NEXT:        %[[E1:.+]] = arith.constant 1 : i32
// PUSH-NEXT:        %[[EATN:.+]] = arith.addi %[[EAT]], %[[E1]] : i32
// PUSH-NEXT:        %[[PEN:.+]] = tt.addptr %syn_table, %[[EATN]] : !tt.ptr<i32>, i32
// PUSH-NEXT:        %[[ERAW:.+]] = tt.load %[[PEN]] : !tt.ptr<i32>
// PUSH-NEXT:        %[[ELONG:.+]] = arith.constant 2 : i32
// PUSH-NEXT:        %[[ECOUNT:.+]] = arith.minsi %[[ERAW]], %[[ELONG]] : i32
// PUSH-NEXT:        %[[ELB:.+]] = arith.constant 0 : i32
// PUSH-NEXT:        %[[ESTEP:.+]] = arith.constant 1 : i32
// PUSH-NEXT:        scf.for %[[K:.+]] = %[[ELB]] to %[[ECOUNT]] step %[[ESTEP]] : i32 {
// PUSH-NEXT:          %[[EIDX:.+]] = arith.addi %[[ESTART]], %[[K]] : i32
// PUSH-NEXT:          %[[PCID:.+]] = tt.addptr %syn_table, %[[EIDX]] : !tt.ptr<i32>, i32
// PUSH-NEXT:          %[[CID:.+]] = tt.load %[[PCID]] : !tt.ptr<i32>
// PUSH-NEXT:          syncopate.transfer_chunk %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags, %syn_table, %[[CID]] bases(%a_ptr) : !tt.ptr<i32>, !tt.ptr<i32>, !tt.ptr<bf16>
// PUSH-NEXT:        }
// Comm program 0 awaits the chunks pushed to this rank: CHUNK[c] >= epoch * 4 for each c of
// its PUSHED list (entry 78 + 8 rank, clamp 2).
// PUSH-NEXT:        %[[Z:.+]] = arith.constant 0 : i32
// PUSH-NEXT:        %[[FIRST:.+]] = arith.cmpi eq, %[[PID]], %[[Z]] : i32
// PUSH-NEXT:        scf.if %[[FIRST]] {
// PUSH-NEXT:          %[[W:.+]] = arith.constant 4 : i32
// PUSH-NEXT:          %[[T:.+]] = arith.muli %syn_epoch, %[[W]] : i32
// PUSH-NEXT:          %[[PDIR:.+]] = arith.constant 78 : i32
// PUSH-NEXT:          %[[PSTRIDE:.+]] = arith.constant 8 : i32
// PUSH-NEXT:          %[[POFF:.+]] = arith.muli %syn_rank, %[[PSTRIDE]] : i32
// PUSH-NEXT:          %[[PAT:.+]] = arith.addi %[[PDIR]], %[[POFF]] : i32
// PUSH-NEXT:          %[[PPS:.+]] = tt.addptr %syn_table, %[[PAT]] : !tt.ptr<i32>, i32
// PUSH-NEXT:          %[[PSTART:.+]] = tt.load %[[PPS]] : !tt.ptr<i32>
// PUSH-NEXT:          %[[P1:.+]] = arith.constant 1 : i32
// PUSH-NEXT:          %[[PATN:.+]] = arith.addi %[[PAT]], %[[P1]] : i32
// PUSH-NEXT:          %[[PPN:.+]] = tt.addptr %syn_table, %[[PATN]] : !tt.ptr<i32>, i32
// PUSH-NEXT:          %[[PRAW:.+]] = tt.load %[[PPN]] : !tt.ptr<i32>
// PUSH-NEXT:          %[[PLONG:.+]] = arith.constant 2 : i32
// PUSH-NEXT:          %[[PCOUNT:.+]] = arith.minsi %[[PRAW]], %[[PLONG]] : i32
// PUSH-NEXT:          %[[PLB:.+]] = arith.constant 0 : i32
// PUSH-NEXT:          %[[PSTEP:.+]] = arith.constant 1 : i32
// PUSH-NEXT:          scf.for %[[J:.+]] = %[[PLB]] to %[[PCOUNT]] step %[[PSTEP]] : i32 {
// PUSH-NEXT:            %[[PIDX:.+]] = arith.addi %[[PSTART]], %[[J]] : i32
// PUSH-NEXT:            %[[PPC:.+]] = tt.addptr %syn_table, %[[PIDX]] : !tt.ptr<i32>, i32
// PUSH-NEXT:            %[[PCID:.+]] = tt.load %[[PPC]] : !tt.ptr<i32>
// PUSH-NEXT:            %{{.+}} = syncopate.wait chunk %syn_flags[%[[PCID]]], target %[[T]] : !tt.ptr<i32>
// PUSH-NEXT:          }
// PUSH-NEXT:        } else {
// PUSH-NEXT:        }
// Push: nobody reads a peer's buffer, no drain.
// PUSH-NEXT:      }
// PUSH-NEXT:    }
// PUSH-NEXT:  } else {
// The compute programs see the grid they were written for, as in the unrolled form.
// PUSH:           %start = tt.get_program_id x : i32
// PUSH-NEXT:      %[[START:.+]] = arith.subi %start, %[[N]] : i32
// PUSH-NEXT:      %nprog = tt.get_num_programs x : i32
// PUSH-NEXT:      %[[NPROG:.+]] = arith.subi %nprog, %[[N]] : i32
// PUSH-NEXT:      scf.for %tile_id = %[[START]] to %c4_i32 step %[[NPROG]] : i32 {
// PUSH:             tt.descriptor_store
// PUSH-NEXT:      }
// PUSH-NEXT:    }
// PUSH-NEXT:    tt.return
// PUSH-NOT:     syncopate.transfer
// PUSH-NOT:     syncopate.drain

// Pull: the same EXEC loop (every chunk runs on its destination), no pushed chunks to await,
// and the plan ends with the drain (the CONSUMED handshake; lower-sm reads its target from
// the table's reads section).
// PULL:       syncopate.state = #syncopate.state<mode = pull, reads_per_src = {"0" = 4, "1" = 4}>
// PULL-LABEL: tt.func public @tma_persistent
// PULL:           syncopate.enter %[[PID:.+]], %[[N:.+]], %syn_epoch, %syn_rank, %syn_flags : !tt.ptr<i32>
// PULL-NEXT:      %[[EDIR:.+]] = arith.constant 76 : i32
// PULL:           arith.minsi %{{.+}}, %{{.+}} : i32
// PULL:           scf.for
// PULL:             %[[CID:.+]] = tt.load %{{.+}} : !tt.ptr<i32>
// PULL-NEXT:        syncopate.transfer_chunk %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags, %syn_table, %[[CID]] bases(%a_ptr) : !tt.ptr<i32>, !tt.ptr<i32>, !tt.ptr<bf16>
// PULL-NEXT:      }
// PULL-NEXT:      syncopate.drain %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags {reads = 0 : i32} : !tt.ptr<i32>
// PULL-NEXT:    }
// PULL-NEXT:    }
// PULL-NEXT:  } else {
// PULL-NOT:   syncopate.

// ag4-ring.json has 12 chunks: with no lowering option ("auto") a schedule of at least
// chunk_table.TABLE_MIN_CHUNKS (9) chunks is lowered through the table.  W = 4: the directory
// starts at 8 + 12 * 16 = 200; EXEC entry 204 + 8 rank, PUSHED 206 + 8 rank; each rank runs 3
// chunks and receives 3.  Still one transfer_chunk and one wait in the code.
// RING-LABEL: tt.func public @tma_persistent
// RING:         syncopate.enter
// RING-NEXT:    arith.constant 204 : i32
// RING:         %[[LONG:.+]] = arith.constant 3 : i32
// RING-NEXT:    arith.minsi %{{.+}}, %[[LONG]] : i32
// RING:         scf.for
// RING:           syncopate.transfer_chunk
// RING-NEXT:    }
// RING-NOT:     syncopate.transfer
// RING:         arith.constant 206 : i32
// RING:         arith.constant 3 : i32
// RING-NEXT:    arith.minsi
// RING:         scf.for
// RING:           syncopate.wait chunk %syn_flags[%{{.+}}], target %{{.+}}
// RING-NEXT:    }
// RING-NOT:     syncopate.wait
// RING:         tt.return

// Two communicated tensors: still one transfer_chunk, with both operands as bases in operand
// order (A -> %a_ptr, row 1; B -> %c_ptr, row 2).  2 tensor slots: 6 lists per rank, EXEC
// entry 72 + 8 + 12 rank.
// TWO-LABEL: tt.func public @tma_persistent
// TWO:         syncopate.enter
// TWO-NEXT:    arith.constant 80 : i32
// TWO-NEXT:    arith.constant 12 : i32
// TWO:         syncopate.transfer_chunk %{{.+}}, %{{.+}}, %syn_epoch, %syn_rank, %syn_flags, %syn_table, %{{.+}} bases(%a_ptr, %c_ptr) : !tt.ptr<i32>, !tt.ptr<i32>, !tt.ptr<bf16>, !tt.ptr<bf16>
// TWO-NOT:     syncopate.transfer
// TWO:         arith.constant 82 : i32
// TWO:         tt.return

module {
  tt.func public @tma_persistent(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c4_i32 = arith.constant 4 : i32
    %c0_i32 = arith.constant 0 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x32xbf16>>
    %b_desc = tt.make_tensor_descriptor %b_ptr, [%c64_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<32x64xbf16>>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %start = tt.get_program_id x : i32
    %nprog = tt.get_num_programs x : i32
    scf.for %tile_id = %start to %c4_i32 step %nprog  : i32 {
      %off_m = arith.muli %tile_id, %c64_i32 : i32
      %acc = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_0 = %cst) -> (tensor<64x64xf32>)  : i32 {
        %a = tt.descriptor_load %a_desc[%off_m, %k] : !tt.tensordesc<tensor<64x32xbf16>> -> tensor<64x32xbf16>
        %b = tt.descriptor_load %b_desc[%k, %c0_i32] : !tt.tensordesc<tensor<32x64xbf16>> -> tensor<32x64xbf16>
        %acc_1 = tt.dot %a, %b, %acc_0, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
        scf.yield %acc_1 : tensor<64x64xf32>
      }
      %0 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>
      tt.descriptor_store %c_desc[%off_m, %c0_i32], %0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    }
    tt.return
  }
}
