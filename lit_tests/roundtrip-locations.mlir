// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s --strip-debuginfo | filecheck %s --check-prefix=STRIP

// Locations as Triton prints them (aliases before and after the module, name locations,
// call sites) come back as aliases after the module; --strip-debuginfo drops them.

#loc = loc("/src/kernel.py":10:0)
#loc1 = loc("x_ptr"(#loc))
module {
  // CHECK: tt.func public @k(%x_ptr: !tt.ptr<f32> loc([[ARG:#loc[0-9]*]])) {
  tt.func public @k(%x_ptr: !tt.ptr<f32> loc("x_ptr"(#loc))) {
    // CHECK-NEXT: %pid = tt.get_program_id x : i32 loc([[PID:#loc[0-9]*]])
    // CHECK-NEXT: %c0_i32 = arith.constant 0 : i32 loc([[UNK:#loc[0-9]*]])
    // CHECK-NEXT: %v = tt.load %x_ptr : !tt.ptr<f32> loc([[LOAD:#loc[0-9]*]])
    // CHECK-NEXT: %t = tt.splat %v : f32 -> tensor<4xf32> loc([[LOAD]])
    // CHECK-NEXT: %s = "tt.reduce"
    // CHECK-NEXT: ^bb0(%a: f32 loc([[LOAD]]), %b: f32 loc([[LOAD]])):
    // CHECK:      }) : (tensor<4xf32>) -> f32 loc([[CALL:#loc[0-9]*]])
    // CHECK:      tt.return loc([[RET:#loc[0-9]*]])
    // CHECK-NEXT: } loc([[FUNC:#loc[0-9]*]])
    // CHECK-NEXT: } loc([[FUNC]])
    %pid = tt.get_program_id x : i32 loc(#loc3)
    %c0_i32 = arith.constant 0 : i32 loc(#loc2)
    %v = tt.load %x_ptr : !tt.ptr<f32> loc(#loc4)
    %t = tt.splat %v : f32 -> tensor<4xf32> loc(#loc4)
    %s = "tt.reduce"(%t) <{axis = 0 : i32}> ({
    ^bb0(%a: f32 loc(#loc4), %b: f32 loc(#loc4)):
      %sum = arith.addf %a, %b : f32 loc(#loc6)
      tt.reduce.return %sum : f32 loc(#loc6)
    }) : (tensor<4xf32>) -> f32 loc(#loc7)
    tt.return loc(#loc5)
  } loc(#loc)
} loc(#loc)
// CHECK-DAG: [[ARG]] = loc("x_ptr"("/src/kernel.py":10:0))
// CHECK-DAG: [[PID]] = loc("pid"("/src/kernel.py":11:24))
// CHECK-DAG: [[UNK]] = loc(unknown)
// CHECK-DAG: [[LOAD]] = loc("v"("/src/kernel.py":12:8))
// CHECK-DAG: [[CALL]] = loc(callsite("/lib/standard.py":293:36 at "s"("/src/kernel.py":13:12)))
// CHECK-DAG: [[RET]] = loc("/src/kernel.py":14:4)
// CHECK-DAG: [[FUNC]] = loc("/src/kernel.py":10:0)
#loc2 = loc(unknown)
#loc3 = loc("pid"(#loc8))
#loc4 = loc("v"(#loc9))
#loc5 = loc("/src/kernel.py":14:4)
#loc6 = loc("/lib/standard.py":263:15)
#loc7 = loc(callsite(#loc10 at #loc11))
#loc8 = loc("/src/kernel.py":11:24)
#loc9 = loc("/src/kernel.py":12:8)
#loc10 = loc("/lib/standard.py":293:36)
#loc11 = loc("s"(#loc12))
#loc12 = loc("/src/kernel.py":13:12)

// STRIP-NOT: loc(
// STRIP: tt.func public @k(%x_ptr: !tt.ptr<f32>) {
