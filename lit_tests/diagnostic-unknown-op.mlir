// RUN: not syncopate-opt %s 2>&1 | filecheck %s
// RUN: not syncopate-opt %s --split-input-file 2>&1 | filecheck %s --check-prefix=SPLIT

// An op the tt mirror does not know is an error naming the op and its line, never a silent
// pass-through.

// CHECK: syncopate-opt: error: {{.*}}diagnostic-unknown-op.mlir:11:8: unknown op 'tt.frobnicate'
// CHECK-SAME: (kernel source /src/k.py:7:3)
tt.func public @f(%x: i32) {
  %y = arith.addi %x, %x : i32
  %z = tt.frobnicate %y : i32 loc("/src/k.py":7:3)
  tt.return
}

// -----

// SPLIT: diagnostic-unknown-op.mlir:11:8: unknown op 'tt.frobnicate'
// SPLIT: diagnostic-unknown-op.mlir:20:4: unknown op 'ttg.local_alloc'
tt.func public @g() {
  "ttg.local_alloc"() : () -> ()
  tt.return
}
