// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// Pointer arithmetic, masked and scalar loads/stores, cache modifiers, block pointers.

// CHECK-LABEL: tt.func public @vector_add(
// CHECK-SAME:    %x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y_ptr: !tt.ptr<f32, 3>, %n: i32)
// CHECK-SAME:    attributes {noinline = false}
tt.func public @vector_add(%x_ptr: !tt.ptr<f32> {tt.divisibility = 16 : i32}, %y_ptr: !tt.ptr<f32, 3>, %n: i32) attributes {noinline = false} {
  // CHECK: %c1024_i32 = arith.constant 1024 : i32
  // CHECK-NEXT: %pid = tt.get_program_id x : i32
  // CHECK-NEXT: %nprog = tt.get_num_programs z : i32
  // CHECK-NEXT: %base = arith.muli %pid, %c1024_i32 : i32
  // CHECK-NEXT: %range = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32>
  // CHECK-NEXT: %splat = tt.splat %base : i32 -> tensor<1024xi32>
  // CHECK-NEXT: %offs = arith.addi %splat, %range : tensor<1024xi32>
  // CHECK-NEXT: %nsplat = tt.splat %n : i32 -> tensor<1024xi32>
  // CHECK-NEXT: %mask = arith.cmpi slt, %offs, %nsplat : tensor<1024xi32>
  // CHECK-NEXT: %ptrs = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
  // CHECK-NEXT: %addr = tt.addptr %ptrs, %offs : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
  // CHECK-NEXT: %other = arith.constant dense<0xFF800000> : tensor<1024xf32>
  // CHECK-NEXT: %x = tt.load %addr, %mask, %other cacheModifier = cg evictionPolicy = evict_last : tensor<1024x!tt.ptr<f32>>
  // CHECK-NEXT: %x2 = tt.load %addr, %mask {isVolatile = true} : tensor<1024x!tt.ptr<f32>>
  // CHECK-NEXT: %s = tt.load %x_ptr : !tt.ptr<f32>
  // CHECK-NEXT: %sum = arith.addf %x, %x2 fastmath<fast> : tensor<1024xf32>
  // CHECK-NEXT: tt.store %addr, %sum, %mask cacheModifier = wt : tensor<1024x!tt.ptr<f32>>
  // CHECK-NEXT: %y1 = tt.addptr %y_ptr, %pid : !tt.ptr<f32, 3>, i32
  // CHECK-NEXT: tt.store %y1, %s evictionPolicy = evict_first : !tt.ptr<f32, 3>
  // CHECK-NEXT: %i = tt.ptr_to_int %x_ptr : !tt.ptr<f32> -> i64
  // CHECK-NEXT: %p = tt.int_to_ptr %i : i64 -> !tt.ptr<i32>
  // CHECK-NEXT: %q = tt.bitcast %p : !tt.ptr<i32> -> !tt.ptr<f32>
  // CHECK-NEXT: tt.return
  %c1024_i32 = arith.constant 1024 : i32
  %pid = tt.get_program_id x : i32
  %nprog = tt.get_num_programs z : i32
  %base = arith.muli %pid, %c1024_i32 : i32
  %range = tt.make_range {end = 1024 : i32, start = 0 : i32} : tensor<1024xi32>
  %splat = tt.splat %base : i32 -> tensor<1024xi32>
  %offs = arith.addi %splat, %range : tensor<1024xi32>
  %nsplat = tt.splat %n : i32 -> tensor<1024xi32>
  %mask = arith.cmpi slt, %offs, %nsplat : tensor<1024xi32>
  %ptrs = tt.splat %x_ptr : !tt.ptr<f32> -> tensor<1024x!tt.ptr<f32>>
  %addr = tt.addptr %ptrs, %offs : tensor<1024x!tt.ptr<f32>>, tensor<1024xi32>
  %other = arith.constant dense<0xFF800000> : tensor<1024xf32>
  %x = tt.load %addr, %mask, %other evictionPolicy = evict_last cacheModifier = cg : tensor<1024x!tt.ptr<f32>>
  %x2 = tt.load %addr, %mask {isVolatile = true} : tensor<1024x!tt.ptr<f32>>
  %s = tt.load %x_ptr : !tt.ptr<f32>
  %sum = arith.addf %x, %x2 fastmath<fast> : tensor<1024xf32>
  tt.store %addr, %sum, %mask cacheModifier = wt : tensor<1024x!tt.ptr<f32>>
  %y1 = tt.addptr %y_ptr, %pid : !tt.ptr<f32, 3>, i32
  tt.store %y1, %s evictionPolicy = evict_first : !tt.ptr<f32, 3>
  %i = tt.ptr_to_int %x_ptr : !tt.ptr<f32> -> i64
  %p = tt.int_to_ptr %i : i64 -> !tt.ptr<i32>
  %q = tt.bitcast %p : !tt.ptr<i32> -> !tt.ptr<f32>
  tt.return
}

// CHECK-LABEL: tt.func public @block_ptr(
tt.func public @block_ptr(%a: !tt.ptr<f16>, %m: i64, %k: i64, %off: i32) {
  // CHECK: %bp = tt.make_tensor_ptr %a, [%m, %k], [%k, %c1_i64], [%off, %c0_i32] {order = array<i32: 1, 0>} : <tensor<128x64xf16>>
  // CHECK-NEXT: %tile = tt.load %bp {boundaryCheck = array<i32: 0, 1>, padding = 1 : i32} : !tt.ptr<tensor<128x64xf16>>
  // CHECK-NEXT: %bp2 = tt.advance %bp, [%c0_i32, %off] : <tensor<128x64xf16>>
  // CHECK-NEXT: tt.store %bp2, %tile {boundaryCheck = array<i32: 1>} : !tt.ptr<tensor<128x64xf16>>
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %bp = tt.make_tensor_ptr %a, [%m, %k], [%k, %c1_i64], [%off, %c0_i32] {order = array<i32: 1, 0>} : <tensor<128x64xf16>>
  %tile = tt.load %bp {boundaryCheck = array<i32: 0, 1>, padding = 1 : i32} : !tt.ptr<tensor<128x64xf16>>
  %bp2 = tt.advance %bp, [%c0_i32, %off] : <tensor<128x64xf16>>
  tt.store %bp2, %tile {boundaryCheck = array<i32: 1>} : !tt.ptr<tensor<128x64xf16>>
  tt.return
}
