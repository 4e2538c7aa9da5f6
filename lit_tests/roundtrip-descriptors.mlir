// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// Device-side TMA descriptors: make_tensor_descriptor prints its types stripped (<T>,
// <tensor<..>>), loads/stores/reduces print them qualified.

// CHECK-LABEL: tt.func public @tma(
tt.func public @tma(%a: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %g: !tt.ptr<i32>, %M: i32, %K: i32 {tt.divisibility = 16 : i32}, %rows: tensor<32xi32>) {
  %c0_i32 = arith.constant 0 : i32
  %c1_i64 = arith.constant 1 : i64
  %k64 = arith.extsi %K : i32 to i64
  // CHECK: %desc = tt.make_tensor_descriptor %a, [%M, %K], [%k64, %c1_i64] : <bf16>, <tensor<128x64xbf16>>
  // CHECK-NEXT: %nan = tt.make_tensor_descriptor %a, [%M, %K], [%k64, %c1_i64] {padding = 2 : i32} : <bf16>, <tensor<128x64xbf16>>
  // CHECK-NEXT: %tile = tt.descriptor_load %desc[%M, %c0_i32] : !tt.tensordesc<tensor<128x64xbf16>> -> tensor<128x64xbf16>
  // CHECK-NEXT: %tile2 = tt.descriptor_load %nan[%M, %K] cacheModifier = cg evictionPolicy = evict_first : !tt.tensordesc<tensor<128x64xbf16>> -> tensor<128x64xbf16>
  // CHECK-NEXT: tt.descriptor_store %desc[%c0_i32, %K], %tile : !tt.tensordesc<tensor<128x64xbf16>>, tensor<128x64xbf16>
  // CHECK-NEXT: tt.descriptor_reduce add, %desc[%c0_i32, %c0_i32], %tile2 : !tt.tensordesc<tensor<128x64xbf16>>, tensor<128x64xbf16>
  %desc = tt.make_tensor_descriptor %a, [%M, %K], [%k64, %c1_i64] : <bf16>, <tensor<128x64xbf16>>
  %nan = tt.make_tensor_descriptor %a, [%M, %K], [%k64, %c1_i64] {padding = 2 : i32} : <bf16>, <tensor<128x64xbf16>>
  %tile = tt.descriptor_load %desc[%M, %c0_i32] : !tt.tensordesc<tensor<128x64xbf16>> -> tensor<128x64xbf16>
  %tile2 = tt.descriptor_load %nan[%M, %K] evictionPolicy = evict_first cacheModifier = cg : !tt.tensordesc<tensor<128x64xbf16>> -> tensor<128x64xbf16>
  tt.descriptor_store %desc[%c0_i32, %K], %tile : !tt.tensordesc<tensor<128x64xbf16>>, tensor<128x64xbf16>
  tt.descriptor_reduce add, %desc[%c0_i32, %c0_i32], %tile2 : !tt.tensordesc<tensor<128x64xbf16>>, tensor<128x64xbf16>
  // Signed element types appear in descriptors made from signed pointers.
  // CHECK: %gd = tt.make_tensor_descriptor %g, [%M, %K], [%k64, %c1_i64] : <i32>, <tensor<1x64xsi32>>
  // CHECK-NEXT: %rowsv = tt.descriptor_gather %gd[%rows, %c0_i32] : (!tt.tensordesc<tensor<1x64xsi32>>, tensor<32xi32>, i32) -> tensor<32x64xi32>
  // CHECK-NEXT: tt.descriptor_scatter %gd[%rows, %K], %rowsv : !tt.tensordesc<tensor<1x64xsi32>>, tensor<32xi32>, i32, tensor<32x64xi32>
  %gd = tt.make_tensor_descriptor %g, [%M, %K], [%k64, %c1_i64] : <i32>, <tensor<1x64xsi32>>
  %rowsv = tt.descriptor_gather %gd[%rows, %c0_i32] : (!tt.tensordesc<tensor<1x64xsi32>>, tensor<32xi32>, i32) -> tensor<32x64xi32>
  tt.descriptor_scatter %gd[%rows, %K], %rowsv : !tt.tensordesc<tensor<1x64xsi32>>, tensor<32xi32>, i32, tensor<32x64xi32>
  tt.return
}

// A descriptor passed as a kernel argument (host-side TensorDescriptor)
// CHECK-LABEL: tt.func public @desc_arg(%d: !tt.tensordesc<tensor<64x64xf16>>, %i: i32)
tt.func public @desc_arg(%d: !tt.tensordesc<tensor<64x64xf16>>, %i: i32) {
  // CHECK-NEXT: %t = tt.descriptor_load %d[%i, %i] : !tt.tensordesc<tensor<64x64xf16>> -> tensor<64x64xf16>
  %t = tt.descriptor_load %d[%i, %i] : !tt.tensordesc<tensor<64x64xf16>> -> tensor<64x64xf16>
  tt.return
}
