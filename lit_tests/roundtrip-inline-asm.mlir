// RUN: syncopate-opt %s --verify-triton | filecheck %s
// RUN: syncopate-opt %s | syncopate-opt | filecheck %s

// Inline PTX, libdevice / NVSHMEM-style extern calls, device print and assert, fp8 casts.

// CHECK-LABEL: tt.func public @asm(
tt.func public @asm(%x: tensor<256xi32>, %y: tensor<256xi32>, %f: tensor<256xf32>, %p: !tt.ptr<i32>) {
  // CHECK: %z = tt.elementwise_inline_asm "shf.l.wrap.b32 $0, $1, $2, $3;" {constraints = "=r,r,r,r", packed_element = 1 : i32, pure = true} %x, %y, %y : tensor<256xi32>, tensor<256xi32>, tensor<256xi32> -> tensor<256xi32>
  %z = tt.elementwise_inline_asm "shf.l.wrap.b32 $0, $1, $2, $3;" {constraints = "=r,r,r,r", packed_element = 1 : i32, pure = true} %x, %y, %y : tensor<256xi32>, tensor<256xi32>, tensor<256xi32> -> tensor<256xi32>
  // CHECK-NEXT: %two:2 = tt.elementwise_inline_asm "mov.b32 $0, $2; mov.b32 $1, $3;" {constraints = "=r,=r,r,r", packed_element = 1 : i32, pure = false} %z, %x : tensor<256xi32>, tensor<256xi32> -> tensor<256xi32>, tensor<256xi32>
  %two:2 = tt.elementwise_inline_asm "mov.b32 $0, $2; mov.b32 $1, $3;" {constraints = "=r,=r,r,r", packed_element = 1 : i32, pure = false} %z, %x : tensor<256xi32>, tensor<256xi32> -> tensor<256xi32>, tensor<256xi32>
  // an acquire load of a flag through a scalar address (no tensor operands)
  // CHECK-NEXT: %addr = tt.ptr_to_int %p : !tt.ptr<i32> -> i64
  // CHECK-NEXT: %flag = tt.elementwise_inline_asm "ld.acquire.sys.global.u32 $0, [$1];" {constraints = "=r,l", packed_element = 1 : i32, pure = false} %addr : i64 -> i32
  // CHECK-NEXT: %clk = tt.elementwise_inline_asm "mov.u64 $0, %globaltimer;" {constraints = "=l", packed_element = 1 : i32, pure = false} -> i64
  %addr = tt.ptr_to_int %p : !tt.ptr<i32> -> i64
  %flag = tt.elementwise_inline_asm "ld.acquire.sys.global.u32 $0, [$1];" {constraints = "=r,l", packed_element = 1 : i32, pure = false} %addr : i64 -> i32
  %clk = tt.elementwise_inline_asm "mov.u64 $0, %globaltimer;" {constraints = "=l", packed_element = 1 : i32, pure = false} -> i64
  // CHECK-NEXT: %t = tt.extern_elementwise %f {libname = "", libpath = "", pure = true, symbol = "__nv_tanhf"} : (tensor<256xf32>) -> tensor<256xf32>
  // CHECK-NEXT: %q = tt.extern_elementwise %addr, %flag {libname = "libnvshmem_device", libpath = "/path/libnvshmem_device.bc", pure = false, symbol = "nvshmem_signal_wait_until"} : (i64, i32) -> i64
  %t = tt.extern_elementwise %f {libname = "", libpath = "", pure = true, symbol = "__nv_tanhf"} : (tensor<256xf32>) -> tensor<256xf32>
  %q = tt.extern_elementwise %addr, %flag {libname = "libnvshmem_device", libpath = "/path/libnvshmem_device.bc", pure = false, symbol = "nvshmem_signal_wait_until"} : (i64, i32) -> i64
  // CHECK-NEXT: tt.print " x: " {hex = false, isSigned = array<i32: 1>} : %x : tensor<256xi32>
  // CHECK-NEXT: tt.print "done" {hex = true, isSigned = array<i32>}
  // CHECK-NEXT: %ok = arith.cmpi sge, %x, %y : tensor<256xi32>
  // CHECK-NEXT: tt.assert %ok, "x must be >= y" : tensor<256xi1>
  tt.print " x: " {hex = false, isSigned = array<i32: 1>} : %x : tensor<256xi32>
  tt.print "done" {hex = true, isSigned = array<i32>}
  %ok = arith.cmpi sge, %x, %y : tensor<256xi32>
  tt.assert %ok, "x must be >= y" : tensor<256xi1>
  // CHECK-NEXT: %f8 = tt.fp_to_fp %f, rounding = rtne : tensor<256xf32> -> tensor<256xf8E4M3FN>
  // CHECK-NEXT: %f32 = tt.fp_to_fp %f8 : tensor<256xf8E4M3FN> -> tensor<256xf32>
  // CHECK-NEXT: %bf = arith.truncf %f32 : tensor<256xf32> to tensor<256xbf16>
  // CHECK-NEXT: %u = tt.mulhiui %x, %y : tensor<256xi32>
  // CHECK-NEXT: %c = tt.clampf %f, %f32, %f, propagateNan = all : tensor<256xf32>
  %f8 = tt.fp_to_fp %f, rounding = rtne : tensor<256xf32> -> tensor<256xf8E4M3FN>
  %f32 = tt.fp_to_fp %f8 : tensor<256xf8E4M3FN> -> tensor<256xf32>
  %bf = arith.truncf %f32 : tensor<256xf32> to tensor<256xbf16>
  %u = tt.mulhiui %x, %y : tensor<256xi32>
  %c = tt.clampf %f, %f32, %f, propagateNan = all : tensor<256xf32>
  tt.return
}
