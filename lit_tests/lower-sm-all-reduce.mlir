// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ar2.json" operands="c_ptr:C" backend=sm comm-programs=4},append-abi-params,partition-sms,lower-sm' | filecheck %s

// GEMM + all-reduce (ops/gemm_ar.py), ar2.json: the all_reduce template on 2 ranks, split 1.
// Chunks 0 and 1 are the reduce-scatter (0: rank 0 adds its partial of rows 128..255 into
// rank 1; 1: rank 1 adds rows 0..127 into rank 0; run by the destination), chunks 2 and 3 the
// all-gather of the reduced pieces (2: rank 1 pushes rows 128..255 to rank 0, after [0];
// 3: rank 0 pushes rows 0..127 to rank 1, after [1]). C = 4 chunks, W = 2: ENTRY[p] is word
// 4 + p, PRODUCED[c] word 7 + c.
//
// The all-gather chunk 2, on its source rank 1, waits (in this order, before its copy):
// ENTRY[0] (rank 0 entered the epoch: its previous launch no longer reads C, kind 1), then
// CHUNK[0] >= epoch * 4 on rank 1's own flags -- every one of the 4 comm programs finished
// adding rank 0's partial into these rows (kind 0): without it a half-summed piece would be
// forwarded (tests/test_emulate_gemm_ar.py mutates exactly this) -- then PRODUCED[2] (kind 3:
// its own GEMM tiles stored the rows). Then CHUNK[2] += 1 on rank 0.

// CHECK-LABEL: tt.func public @noop
// Comm program 0 publishes ENTRY; then the two reduce-scatter chunks, each on its
// destination, accumulating in fp32 (one rounding per added partial).
// CHECK:         tt.atomic_rmw exch, release, sys
// CHECK:           arith.extf
// CHECK:           arith.addf
// CHECK:           arith.truncf
// CHECK:           arith.extf
// CHECK:           arith.addf
// CHECK:           arith.truncf
// Then chunk 2 on its source, rank 1.
// CHECK:         %[[ON_S1:.+]] = arith.cmpi eq, %syn_rank, %{{.+}} : i32
// CHECK-NEXT:    scf.if %[[ON_S1]] {
// CHECK:           %[[E:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[EP:.+]] = tt.addptr %syn_flags, %[[E]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[K1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:      tt.call @syncopate_wait_b32(%[[EP]], %[[E]], %syn_epoch, %[[K1]],
// CHECK-NEXT:      %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[WR:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[T0:.+]] = arith.muli %syn_epoch, %[[WR]] : i32
// CHECK-NEXT:      %[[CP:.+]] = tt.addptr %syn_flags, %[[C0]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[K0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      tt.call @syncopate_wait_b32(%[[CP]], %[[C0]], %[[T0]], %[[K0]],
// CHECK-NEXT:      %[[P2:.+]] = arith.constant 9 : i32
// CHECK-NEXT:      %[[VOL:.+]] = arith.constant 16384 : i32
// CHECK-NEXT:      %[[T2:.+]] = arith.muli %syn_epoch, %[[VOL]] : i32
// CHECK-NEXT:      %[[PP:.+]] = tt.addptr %syn_flags, %[[P2]] : !tt.ptr<i32>, i32
// CHECK-NEXT:      %[[K3:.+]] = arith.constant 3 : i32
// CHECK-NEXT:      tt.call @syncopate_wait_b32(%[[PP]], %[[P2]], %[[T2]], %[[K3]],
// The copy (a plain load and store: no sum), then CHUNK[2] += 1 on rank 0.
// CHECK:           %[[V:.+]] = tt.load %{{.+}}, %{{.+}} : tensor<128x128x!tt.ptr<bf16>>
// CHECK-NEXT:      tt.store %{{.+}}, %[[V]]
// CHECK:           %[[ONE:.+]] = arith.constant 1 : i32
// CHECK-NEXT:      %[[C2:.+]] = arith.constant 2 : i32
// CHECK-NEXT:      tt.addptr %syn_flags, %[[C2]] : !tt.ptr<i32>, i32
// CHECK:           "gpu.barrier"() : () -> ()
// CHECK-NEXT:      tt.atomic_rmw add, release, sys, %{{.+}}, %[[ONE]] : (!tt.ptr<i32>, i32) -> i32
// CHECK-NOT:     syncopate.
// CHECK:         tt.return

module {
  tt.func public @noop(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
