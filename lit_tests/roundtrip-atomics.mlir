// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// Atomics: every RMW op keyword, semantics and scopes, scalar and tensor, masked; CAS.

// CHECK-LABEL: tt.func public @atomics(
tt.func public @atomics(%p: !tt.ptr<i32>, %f: !tt.ptr<f32>, %v: i32, %fv: f32, %t: tensor<64xi32>, %m: tensor<64xi1>) {
  %true = arith.constant true
  // CHECK: %a = tt.atomic_rmw add, acq_rel, gpu, %p, %v, %true : (!tt.ptr<i32>, i32, i1) -> i32
  // CHECK-NEXT: %b = tt.atomic_rmw fadd, relaxed, cta, %f, %fv : (!tt.ptr<f32>, f32) -> f32
  // CHECK-NEXT: %c = tt.atomic_rmw max, release, sys, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %d = tt.atomic_rmw umin, acquire, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %e = tt.atomic_rmw exch, acq_rel, sys, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %g = tt.atomic_rmw and, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %h = tt.atomic_rmw or, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %i = tt.atomic_rmw xor, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %j = tt.atomic_rmw min, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %k = tt.atomic_rmw umax, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %a = tt.atomic_rmw add, acq_rel, gpu, %p, %v, %true : (!tt.ptr<i32>, i32, i1) -> i32
  %b = tt.atomic_rmw fadd, relaxed, cta, %f, %fv : (!tt.ptr<f32>, f32) -> f32
  %c = tt.atomic_rmw max, release, sys, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %d = tt.atomic_rmw umin, acquire, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %e = tt.atomic_rmw exch, acq_rel, sys, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %g = tt.atomic_rmw and, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %h = tt.atomic_rmw or, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %i = tt.atomic_rmw xor, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %j = tt.atomic_rmw min, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  %k = tt.atomic_rmw umax, relaxed, gpu, %p, %v : (!tt.ptr<i32>, i32) -> i32
  // CHECK-NEXT: %ps = tt.splat %p : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>>
  // CHECK-NEXT: %tv = tt.atomic_rmw add, release, sys, %ps, %t, %m : (tensor<64x!tt.ptr<i32>>, tensor<64xi32>, tensor<64xi1>) -> tensor<64xi32>
  // CHECK-NEXT: %old = tt.atomic_cas acq_rel, gpu, %p, %v, %a : (!tt.ptr<i32>, i32, i32) -> i32
  // CHECK-NEXT: %tc = tt.atomic_cas relaxed, cta, %ps, %t, %tv : (tensor<64x!tt.ptr<i32>>, tensor<64xi32>, tensor<64xi32>) -> tensor<64xi32>
  %ps = tt.splat %p : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>>
  %tv = tt.atomic_rmw add, release, sys, %ps, %t, %m : (tensor<64x!tt.ptr<i32>>, tensor<64xi32>, tensor<64xi1>) -> tensor<64xi32>
  %old = tt.atomic_cas acq_rel, gpu, %p, %v, %a : (!tt.ptr<i32>, i32, i32) -> i32
  %tc = tt.atomic_cas relaxed, cta, %ps, %t, %tv : (tensor<64x!tt.ptr<i32>>, tensor<64xi32>, tensor<64xi32>) -> tensor<64xi32>
  tt.return
}
