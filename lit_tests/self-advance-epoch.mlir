// RUN: syncopate-opt %s -p 'load-epoch,self-advance-epoch' | filecheck %s
// RUN: syncopate-opt %s -p 'load-epoch,self-advance-epoch,self-advance-epoch' | filecheck %s
// RUN: sed 's/self_advance = on//' %s | syncopate-opt -p 'load-epoch,self-advance-epoch' | filecheck %s --check-prefix=OFF

// self-advance-epoch (compile option self_advance=True, docs/cuda-graphs.md): the word holds
// the last finished launch's epoch, so the launch runs with word[0] + 1 -- every use of the
// loaded value takes the increment.  Before the return each program meets at a barrier (every
// warp has loaded word[0]) and adds 1 to word[1]
// (acq_rel, gpu scope); the one that reads num_programs - 1 is the last: it resets the counter
// and stores the epoch into word[0] and into the host mirror whose address is word[2:4]
// (low, high, zero-extended), and the module's state records that it did: a second run changes
// nothing more.  Without self_advance in the module's request the pass changes nothing.

// CHECK:       module attributes {syncopate.request = #syncopate.request<self_advance = on>, syncopate.state = #syncopate.state<self_advanced = true>}
// CHECK:         %last_epoch = tt.load %syn_epoch : !tt.ptr<i32>
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : i32
// CHECK-NEXT:    %epoch = arith.addi %last_epoch, %[[ONE]] : i32
// CHECK:         %target = arith.muli %epoch, %c4_i32 : i32
// CHECK:         tt.store %p, %epoch : !tt.ptr<i32>
// CHECK:         %[[NX:.*]] = tt.get_num_programs x : i32
// CHECK:         %[[NY:.*]] = tt.get_num_programs y : i32
// CHECK:         %[[NZ:.*]] = tt.get_num_programs z : i32
// CHECK:         %[[N:.*]] = arith.muli %{{.*}}, %[[NZ]] : i32
// CHECK:         %[[DONE:.*]] = tt.addptr %syn_epoch, %{{.*}} : !tt.ptr<i32>, i32
// CHECK-NEXT:    gpu.barrier
// CHECK:         %[[BEFORE:.*]] = tt.atomic_rmw add, acq_rel, gpu, %[[DONE]], %{{.*}} : (!tt.ptr<i32>, i32) -> i32
// CHECK:         %[[NM1:.*]] = arith.subi %[[N]], %{{.*}} : i32
// CHECK-NEXT:    %[[LAST:.*]] = arith.cmpi eq, %[[BEFORE]], %[[NM1]] : i32
// CHECK:         tt.store %[[DONE]], %{{.*}}, %[[LAST]] : !tt.ptr<i32>
// CHECK-NEXT:    tt.store %syn_epoch, %epoch, %[[LAST]] : !tt.ptr<i32>
// CHECK:         %[[LO:.*]] = arith.extui %{{.*}} : i32 to i64
// CHECK-NEXT:    %[[HI:.*]] = arith.extui %{{.*}} : i32 to i64
// CHECK:         %[[SH:.*]] = arith.shli %[[HI]], %{{.*}} : i64
// CHECK-NEXT:    %[[ADDR:.*]] = arith.ori %[[SH]], %[[LO]] : i64
// CHECK-NEXT:    %[[MIRROR:.*]] = tt.int_to_ptr %[[ADDR]] : i64 -> !tt.ptr<i32>
// CHECK-NEXT:    tt.store %[[MIRROR]], %epoch, %[[LAST]] : !tt.ptr<i32>
// CHECK-NEXT:    tt.return
// CHECK-NOT:     tt.atomic_rmw

// OFF:         %epoch = tt.load %syn_epoch : !tt.ptr<i32>
// OFF-NOT:     arith.addi
// OFF-NOT:     tt.atomic_rmw
// OFF:         tt.return

module attributes {syncopate.request = #syncopate.request<self_advance = on>} {
  tt.func public @k(%syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c4_i32 = arith.constant 4 : i32
    %target = arith.muli %syn_epoch, %c4_i32 : i32
    %p = tt.addptr %syn_flags, %target : !tt.ptr<i32>, i32
    tt.store %p, %syn_epoch : !tt.ptr<i32>
    tt.return
  }
}
