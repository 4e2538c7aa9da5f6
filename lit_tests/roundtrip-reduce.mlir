// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// Reductions and scans print in MLIR's generic form (Triton 3.6 gives them no custom syntax);
// their combine regions keep their block arguments and terminators.

// CHECK-LABEL: tt.func public @reduce(
tt.func public @reduce(%x: tensor<32x64xf32>, %idx: tensor<32x64xi32>) -> tensor<32xf32> {
  // CHECK: %s = "tt.reduce"(%x) <{axis = 1 : i32}> ({
  // CHECK-NEXT: ^bb0(%a: f32, %b: f32):
  // CHECK-NEXT:   %sum = arith.addf %a, %b : f32
  // CHECK-NEXT:   tt.reduce.return %sum : f32
  // CHECK-NEXT: }) : (tensor<32x64xf32>) -> tensor<32xf32>
  %s = "tt.reduce"(%x) <{axis = 1 : i32}> ({
  ^bb0(%a: f32, %b: f32):
    %sum = arith.addf %a, %b : f32
    tt.reduce.return %sum : f32
  }) : (tensor<32x64xf32>) -> tensor<32xf32>
  // argmax: two operands, two results, a result group %am:2 and its uses %am#0, %am#1
  // CHECK: %am:2 = "tt.reduce"(%x, %idx) <{axis = 0 : i32}> ({
  // CHECK-NEXT: ^bb0(%v0: f32, %i0: i32, %v1: f32, %i1: i32):
  // CHECK:        tt.reduce.return %v, %i : f32, i32
  // CHECK-NEXT: }) : (tensor<32x64xf32>, tensor<32x64xi32>) -> (tensor<64xf32>, tensor<64xi32>)
  // CHECK-NEXT: %use = arith.addi %am#1, %am#1 : tensor<64xi32>
  %am:2 = "tt.reduce"(%x, %idx) <{axis = 0 : i32}> ({
  ^bb0(%v0: f32, %i0: i32, %v1: f32, %i1: i32):
    %gt = arith.cmpf ogt, %v0, %v1 : f32
    %v = arith.select %gt, %v0, %v1 : f32
    %i = arith.select %gt, %i0, %i1 : i32
    tt.reduce.return %v, %i : f32, i32
  }) : (tensor<32x64xf32>, tensor<32x64xi32>) -> (tensor<64xf32>, tensor<64xi32>)
  %use = arith.addi %am#1, %am#1 : tensor<64xi32>
  // CHECK: %c = "tt.scan"(%x) <{axis = 1 : i32, reverse = true}> ({
  // CHECK-NEXT: ^bb0(%p: f32, %q: f32):
  // CHECK-NEXT:   %m = arith.mulf %p, %q : f32
  // CHECK-NEXT:   tt.scan.return %m : f32
  // CHECK-NEXT: }) : (tensor<32x64xf32>) -> tensor<32x64xf32>
  %c = "tt.scan"(%x) <{axis = 1 : i32, reverse = true}> ({
  ^bb0(%p: f32, %q: f32):
    %m = arith.mulf %p, %q : f32
    tt.scan.return %m : f32
  }) : (tensor<32x64xf32>) -> tensor<32x64xf32>
  // CHECK: tt.return %s : tensor<32xf32>
  tt.return %s : tensor<32xf32>
}

// tl.map_elementwise: a scalar region with several blocks (cf branches)
// CHECK-LABEL: tt.func public @map(
tt.func public @map(%x: tensor<128xf32>, %alpha: tensor<128xf32>) -> tensor<128xf32> {
  // CHECK: %r = "tt.map_elementwise"(%x, %alpha) <{pack = 1 : i32}> ({
  // CHECK-NEXT: ^bb0(%e: f32, %al: f32):
  // CHECK:        cf.cond_br %pos, ^bb2(%e : f32), ^bb1
  // CHECK-NEXT: ^bb1:
  // CHECK:        cf.br ^bb2(%y : f32)
  // CHECK-NEXT: ^bb2(%out: f32):
  // CHECK-NEXT:   tt.map_elementwise.return %out : f32
  // CHECK-NEXT: }) : (tensor<128xf32>, tensor<128xf32>) -> tensor<128xf32>
  %r = "tt.map_elementwise"(%x, %alpha) <{pack = 1 : i32}> ({
  ^bb0(%e: f32, %al: f32):
    %zero = arith.constant 0.000000e+00 : f32
    %pos = arith.cmpf ogt, %e, %zero : f32
    cf.cond_br %pos, ^bb2(%e : f32), ^bb1
  ^bb1:
    %ex = math.exp %e : f32
    %y = arith.mulf %al, %ex : f32
    cf.br ^bb2(%y : f32)
  ^bb2(%out: f32):
    tt.map_elementwise.return %out : f32
  }) : (tensor<128xf32>, tensor<128xf32>) -> tensor<128xf32>
  tt.return %r : tensor<128xf32>
}
