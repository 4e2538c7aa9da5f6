// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// scf.for with i32 bounds (`: i32`) and iter_args, scf.while (with and without loop-carried
// values), scf.if with results, cf branches, calls, ub.poison.

// CHECK-LABEL: tt.func public @loops(
tt.func public @loops(%n: i32, %acc0: tensor<64xf32>, %flag: i1) -> tensor<64xf32> {
  %c0_i32 = arith.constant 0 : i32
  %c1_i32 = arith.constant 1 : i32
  // CHECK: %acc:2 = scf.for %k = %c0_i32 to %n step %c1_i32 iter_args(%a = %acc0, %cnt = %c0_i32) -> (tensor<64xf32>, i32)  : i32 {
  // CHECK-NEXT:   %a2 = arith.addf %a, %a : tensor<64xf32>
  // CHECK-NEXT:   %cnt2 = arith.addi %cnt, %k : i32
  // CHECK-NEXT:   scf.yield %a2, %cnt2 : tensor<64xf32>, i32
  // CHECK-NEXT: }
  %acc:2 = scf.for %k = %c0_i32 to %n step %c1_i32 iter_args(%a = %acc0, %cnt = %c0_i32) -> (tensor<64xf32>, i32) : i32 {
    %a2 = arith.addf %a, %a : tensor<64xf32>
    %cnt2 = arith.addi %cnt, %k : i32
    scf.yield %a2, %cnt2 : tensor<64xf32>, i32
  }
  // CHECK: scf.for %j = %c0_i32 to %n step %c1_i32  : i32 {
  scf.for %j = %c0_i32 to %n step %c1_i32 : i32 {
    %u = arith.addi %j, %j : i32
  }
  // CHECK: %w = scf.while (%i = %c0_i32) : (i32) -> i32 {
  // CHECK-NEXT:   %lt = arith.cmpi slt, %i, %n : i32
  // CHECK-NEXT:   scf.condition(%lt) %i : i32
  // CHECK-NEXT: } do {
  // CHECK-NEXT: ^bb0(%i2: i32):
  // CHECK-NEXT:   %inc = arith.addi %i2, %c1_i32 : i32
  // CHECK-NEXT:   scf.yield %inc : i32
  // CHECK-NEXT: }
  %w = scf.while (%i = %c0_i32) : (i32) -> i32 {
    %lt = arith.cmpi slt, %i, %n : i32
    scf.condition(%lt) %i : i32
  } do {
  ^bb0(%i2: i32):
    %inc = arith.addi %i2, %c1_i32 : i32
    scf.yield %inc : i32
  }
  // a spin loop without loop-carried values, as Triton prints it
  // CHECK: scf.while : () -> () {
  // CHECK-NEXT:   scf.condition(%flag)
  // CHECK-NEXT: } do {
  // CHECK-NEXT:   scf.yield
  // CHECK-NEXT: }
  scf.while : () -> () {
    scf.condition(%flag)
  } do {
    scf.yield
  }
  // CHECK: %r = scf.if %flag -> (tensor<64xf32>) {
  // CHECK-NEXT:   scf.yield %acc#0 : tensor<64xf32>
  // CHECK-NEXT: } else {
  // CHECK-NEXT:   %p = ub.poison : tensor<64xf32>
  // CHECK-NEXT:   scf.yield %p : tensor<64xf32>
  // CHECK-NEXT: }
  %r = scf.if %flag -> (tensor<64xf32>) {
    scf.yield %acc#0 : tensor<64xf32>
  } else {
    %p = ub.poison : tensor<64xf32>
    scf.yield %p : tensor<64xf32>
  }
  // CHECK: cf.cond_br %flag, ^bb1, ^bb2
  // CHECK-NEXT: ^bb1:
  // CHECK-NEXT:   %h = tt.call @helper(%w) : (i32) -> i32
  // CHECK-NEXT:   cf.br ^bb2
  // CHECK-NEXT: ^bb2:
  // CHECK-NEXT:   tt.return %r : tensor<64xf32>
  cf.cond_br %flag, ^bb1, ^bb2
^bb1:
  %h = tt.call @helper(%w) : (i32) -> i32
  cf.br ^bb2
^bb2:
  tt.return %r : tensor<64xf32>
}

// CHECK-LABEL: tt.func private @helper(%x: i32) -> i32 attributes {noinline = true} {
tt.func private @helper(%x: i32) -> i32 attributes {noinline = true} {
  tt.return %x : i32
}
