// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// tt.func: declarations, visibility, argument and result attributes, multiple results, calls.

module {
  // CHECK: tt.func private @decl(i32, i32) -> f32
  tt.func private @decl(i32, i32) -> f32
  // CHECK: tt.func @novis(%a: i32 {tt.divisibility = 16 : i32}) -> (i32 {tt.foo = 1 : i32}, f32) {
  // CHECK-NEXT:   %f = arith.constant 1.000000e+00 : f32
  // CHECK-NEXT:   tt.return %a, %f : i32, f32
  tt.func @novis(%a: i32 {tt.divisibility = 16 : i32}) -> (i32 {tt.foo = 1 : i32}, f32) {
    %f = arith.constant 1.0 : f32
    tt.return %a, %f : i32, f32
  }
  // CHECK: tt.func public @user(%a: i32) -> i32 attributes {noinline = false} {
  // CHECK-NEXT:   %r:2 = tt.call @novis(%a) : (i32) -> (i32, f32)
  // CHECK-NEXT:   %d = tt.call @decl(%a, %r#0) : (i32, i32) -> f32
  // CHECK-NEXT:   tt.return %r#0 : i32
  tt.func public @user(%a: i32) -> i32 attributes {noinline = false} {
    %r:2 = tt.call @novis(%a) : (i32) -> (i32, f32)
    %d = tt.call @decl(%a, %r#0) : (i32, i32) -> f32
    tt.return %r#0 : i32
  }
}
