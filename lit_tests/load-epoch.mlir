// RUN: syncopate-opt %s -p 'load-epoch' | filecheck %s
// RUN: syncopate-opt %s -p 'load-epoch,load-epoch' | filecheck %s

// load-epoch (ABI version 3, docs/cuda-graphs.md): the i32 parameter syn_epoch the earlier
// passes compute with becomes a 16-byte aligned pointer to the configuration's device epoch
// word, loaded once, first thing in the kernel; every former use of the scalar (the wait's
// target, the signal's epoch) takes the loaded value, so a CUDA-graph replay never runs with
// the epoch baked in at capture.  Running the pass twice changes nothing more.

// CHECK-LABEL: tt.func public @k(
// CHECK-SAME:    %syn_rank: i32, %syn_epoch: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_timeout_ns: i64)
// CHECK-NEXT:    %epoch = tt.load %syn_epoch : !tt.ptr<i32>
// CHECK-NEXT:    %c4_i32 = arith.constant 4 : i32
// CHECK-NEXT:    %target = arith.muli %epoch, %c4_i32 : i32
// CHECK-NEXT:    %p = tt.addptr %syn_flags, %target : !tt.ptr<i32>, i32
// CHECK-NEXT:    tt.store %p, %epoch : !tt.ptr<i32>
// CHECK-NOT:     tt.load %syn_epoch
// CHECK:         tt.return

module {
  tt.func public @k(%syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c4_i32 = arith.constant 4 : i32
    %target = arith.muli %syn_epoch, %c4_i32 : i32
    %p = tt.addptr %syn_flags, %target : !tt.ptr<i32>, i32
    tt.store %p, %syn_epoch : !tt.ptr<i32>
    tt.return
  }
}
