// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=sm comm-programs=4},lower-sm' | filecheck %s

// syncopate.signal (a release of PRODUCED[c] += volume) becomes: wait for this program's bulk
// (TMA) stores (the kernel has a tt.descriptor_store), gpu.barrier so every thread's stores
// precede the signal, then one scalar tt.atomic_rmw with release semantics at system scope,
// masked off when there is nothing to add.  Signals back to back share the first one's
// barrier; a signal after another store gets its own.

// CHECK-LABEL: tt.func public @tile
// CHECK:         tt.descriptor_store %c_desc[%lo0, %lo1], %tile
// CHECK-NEXT:    %c5_i32 = arith.constant 5 : i32
// CHECK-NEXT:    %[[P5:.+]] = tt.addptr %syn_flags, %c5_i32 : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[Z0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[ANY0:.+]] = arith.cmpi ne, %vol0, %[[Z0]] : i32
// CHECK-NEXT:    %{{.+}} = tt.elementwise_inline_asm "cp.async.bulk.wait_group 0;\0A\09mov.b32 $0, 0;" {constraints = "=r", packed_element = 1 : i32, pure = false} -> i32
// CHECK-NEXT:    "gpu.barrier"() : () -> ()
// CHECK-NEXT:    %{{.+}} = tt.atomic_rmw add, release, sys, %[[P5]], %vol0, %[[ANY0]] : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK-NEXT:    %c6_i32 = arith.constant 6 : i32
// CHECK-NEXT:    %[[P6:.+]] = tt.addptr %syn_flags, %c6_i32 : !tt.ptr<i32>, i32
// CHECK-NEXT:    %[[Z1:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[ANY1:.+]] = arith.cmpi ne, %vol1, %[[Z1]] : i32
// CHECK-NEXT:    %{{.+}} = tt.atomic_rmw add, release, sys, %[[P6]], %vol1, %[[ANY1]] : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK-NEXT:    tt.descriptor_store %c_desc[%lo0, %lo1], %tile
// CHECK:         cp.async.bulk.wait_group 0;
// CHECK-NEXT:    "gpu.barrier"() : () -> ()
// CHECK-NEXT:    tt.atomic_rmw add, release, sys
// CHECK-NOT:     syncopate.
// CHECK:         tt.return

module {
  tt.func public @tile(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %vol0: i32, %vol1: i32, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c1_i64 = arith.constant 1 : i64
    %c128_i64 = arith.constant 128 : i64
    %c128_i32 = arith.constant 128 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %tile = arith.constant dense<0.000000e+00> : tensor<64x64xbf16>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c128_i32], [%c128_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %lo0 = arith.muli %pid_m, %c64_i32 : i32
    %lo1 = arith.muli %pid_n, %c64_i32 : i32
    tt.descriptor_store %c_desc[%lo0, %lo1], %tile : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    %c5_i32 = arith.constant 5 : i32
    syncopate.signal add produced %syn_flags[%c5_i32], %vol0 : !tt.ptr<i32>
    %c6_i32 = arith.constant 6 : i32
    syncopate.signal add produced %syn_flags[%c6_i32], %vol1 : !tt.ptr<i32>
    tt.descriptor_store %c_desc[%lo0, %lo1], %tile : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    syncopate.signal add produced %syn_flags[%c5_i32], %vol0 : !tt.ptr<i32>
    tt.return
  }
}
