// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4},lower-sm' | filecheck %s

// syncopate.wait becomes a call to one private noinline spin function per flag width (a call
// is opaque: no load of the chunk can be scheduled above it), whose body is one inline-asm
// block (docs/fused-abi.md, watchdog):
// * thread 0 polls the flag with ld.acquire.sys (nanosleep between polls) until
//   (int)(flag - target) >= 0 (serial-number compare: flags only grow, and may wrap); every
//   thread meets it at bar.sync 0;
// * %globaltimer watchdog, |syn_timeout_ns| ns (0 = none); on timeout, claim the diag record
//   with an acq_rel CAS on word 0, write rank, flag index, value, expected, kind, program, then
//   the epoch word last (release); trap when syn_timeout_ns < 0, else leave;
// * every 256 polls, leave if another spin already timed out (diag word 0 != 0);
// then the token: an opaque zero after fence.proxy.async (TMA reads see the acquired data).

// CHECK-LABEL: tt.func private @syncopate_wait_b32(%flag: !tt.ptr<i32>, %index: i32, %target: i32, %kind: i32, %diag: !tt.ptr<i32>, %rank: i32, %epoch: i32, %timeout_ns: i64) -> i32 attributes {noinline = true} {
// CHECK:         %[[NEG:.+]] = arith.subi %{{.+}}, %timeout_ns : i64
// CHECK-NEXT:    %[[LIMIT:.+]] = arith.maxsi %timeout_ns, %[[NEG]] : i64
// CHECK:         %[[TRAP:.+]] = arith.cmpi slt, %timeout_ns, %{{.+}} : i64
// CHECK-NEXT:    scf.if %[[TRAP]] -> (i32) {
// CHECK-NEXT:      tt.elementwise_inline_asm "{{.*}}mov.u32 sy_pid, %tid.x;\0Asetp.ne.u32 sy_p, sy_pid, 0;\0A@sy_p bra SY_DONE;
// CHECK-SAME:      mov.u64 sy_t0, %globaltimer;\0ASY_SPIN:\0Ald.acquire.sys.global.b32 sy_v, [$1];\0Asub.s32 sy_d, sy_v, $2;\0Asetp.ge.s32 sy_p, sy_d, 0;\0A@sy_p bra SY_DONE;\0Ananosleep.u32 64;
// CHECK-SAME:      mov.u64 sy_t1, %globaltimer;
// CHECK-SAME:      and.b32 sy_st, sy_cnt, 255;
// CHECK-SAME:      ld.relaxed.sys.global.b32 sy_st, [$3];
// CHECK-SAME:      SY_EXPIRED:\0Aatom.acq_rel.sys.global.cas.b32 sy_st, [$3], sy_zero, sy_one;
// CHECK-SAME:      st.relaxed.sys.global.b32 [$3+4], $5;
// CHECK-SAME:      fence.sc.sys;\0Ast.release.sys.global.b32 [$3+28], $8;\0Atrap;
// CHECK-SAME:      SY_DONE:\0Abar.sync 0;
// CHECK-SAME:      {constraints = "=r,l,r,l,l,r,r,r,r", packed_element = 1 : i32, pure = false} %{{.+}}, %target, %{{.+}}, %[[LIMIT]], %rank, %index, %kind, %epoch
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    } else {
// CHECK-NEXT:      tt.elementwise_inline_asm "{{.*}}ld.acquire.sys.global.b32
// CHECK-NOT:       trap;
// CHECK-SAME:      pure = false
// CHECK-NEXT:      scf.yield
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[TOKEN:.+]] = tt.elementwise_inline_asm "fence.proxy.async.global;\0A\09mov.b32 $0, 0;" {constraints = "=r", packed_element = 1 : i32, pure = false} -> i32
// CHECK-NEXT:    tt.return %[[TOKEN]] : i32
// CHECK-NEXT:  }
// Both waits call the one function: the flag pointer, the index and kind for the record
// (0 chunk, 1 entry), the target, and the ABI's diag/rank/epoch/timeout.
// CHECK-NOT:   tt.func private
// CHECK-LABEL: tt.func public @tile
// CHECK:         %[[P1:.+]] = tt.addptr %syn_flags, %c1_i32 : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[K0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %token = tt.call @syncopate_wait_b32(%[[P1]], %c1_i32, %target, %[[K0]], %syn_diag, %syn_rank, %syn_epoch, %syn_timeout_ns) : (!tt.ptr<i32>, i32, i32, i32, !tt.ptr<i32>, i32, i32, i64) -> i32
// CHECK-NEXT:    %[[P2:.+]] = tt.addptr %syn_flags, %c5_i32 : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[K1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:    %entered = tt.call @syncopate_wait_b32(%[[P2]], %c5_i32, %syn_epoch, %[[K1]], %syn_diag, %syn_rank, %syn_epoch, %syn_timeout_ns)
// CHECK-NEXT:    %row = arith.addi %token, %entered : i32
// CHECK-NOT:     syncopate.
// CHECK:         tt.return

module {
  tt.func public @tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c4_i32 = arith.constant 4 : i32
    %c5_i32 = arith.constant 5 : i32
    %target = arith.muli %syn_epoch, %c4_i32 : i32
    %token = syncopate.wait chunk %syn_flags[%c1_i32], target %target {chunk = 1 : i32} : !tt.ptr<i32>
    %entered = syncopate.wait entry %syn_flags[%c5_i32], target %syn_epoch : !tt.ptr<i32>
    %row = arith.addi %token, %entered : i32
    tt.return
  }
}
