// RUN: not syncopate-opt %s -p 'load-epoch,self-advance-epoch' 2>&1 | filecheck %s
// RUN: sed 's/self_advance = on/self_advance = auto/' %s | syncopate-opt -p 'load-epoch,self-advance-epoch' | filecheck %s --check-prefix=AUTO

// self-advance-epoch counts each program done before its return; a kernel whose programs can
// return from a branch (a tt.return outside the entry block, Triton's early `return` inside
// an `if`) is refused with a diagnostic saying what to do, never compiled with a counter some
// exit path skips (the epoch would then never advance).

// CHECK: syncopate-opt: error: self_advance=True: the kernel returns from inside a branch (tt.return outside its entry block)
// CHECK-SAME: compile without self_advance
// CHECK-NOT: Traceback

// With "auto" (the runtime's default) the same kernel compiles without the counter: the module's
// state records no self_advanced (the ABI then has no self_advance and the runtime enqueues the
// advance kernel), and nothing is added.
// AUTO: module attributes {syncopate.request = #syncopate.request<self_advance = auto>} {
// AUTO-NOT: tt.atomic_rmw
// AUTO-NOT: arith.addi

module attributes {syncopate.request = #syncopate.request<self_advance = on>} {
  tt.func public @k(%syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0 = arith.constant 0 : i32
    %cond = arith.cmpi eq, %syn_rank, %c0 : i32
    cf.cond_br %cond, ^bb1, ^bb2
  ^bb1:
    tt.store %syn_flags, %syn_epoch : !tt.ptr<i32>
    tt.return
  ^bb2:
    tt.return
  }
}
