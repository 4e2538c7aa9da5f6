// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C"},check-accesses' 2>&1 | filecheck %s

// Atomics into a tensor the kernel produces for a reduce-scatter (C [256, 128] bf16 partials):
// a chunk leaves once its elements are written, counted one store per element, so an update
// that may come any number of times is refused with what to do (docs/soundness.md, "Atomics").

// Store the partial, then count the tile in C[0, 0]: the increments after the chunk's signal
// were lost (0.23, -2.77 or 1.23 instead of 3.23, issue 28).
// CHECK: syncopate-opt: error: this tt.atomic_rmw (tl.atomic_add/max/min/and/or/xor/xchg) updates 'c_ptr' in place, and the kernel produces tensor 'C' for the schedule: a produced chunk leaves (or is reduced) once its elements are written, counted one store per element, but an atomic may update an element any number of times (split-K), so the chunk could leave before its last update

module {
  tt.func public @store_then_count(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %true = arith.constant true
    %cst = arith.constant 1.000000e+00 : bf16
    %c128_i32 = arith.constant 128 : i32
    %offs = tt.get_program_id x : i32
    %offs_0 = arith.muli %offs, %c128_i32 : i32
    %offs_1 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<128xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<128xi32>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %2 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %4 = tt.load %3 : tensor<128x!tt.ptr<bf16>>
    tt.store %1, %4 : tensor<128x!tt.ptr<bf16>>
    %5 = tt.atomic_rmw fadd, acq_rel, gpu, %c_ptr, %cst, %true : (!tt.ptr<bf16>, bf16, i1) -> bf16
    tt.return
  }
}

// -----

// An atomic-only output (split-K): before, "the kernel never loads or stores through 'c_ptr'"
// -- untrue; now the message says what the atomic is and why it cannot be fused.
// CHECK: syncopate-opt: error: this tt.atomic_rmw (tl.atomic_add/max/min/and/or/xor/xchg) updates 'c_ptr' in place, and the kernel produces tensor 'C'

module {
  tt.func public @splitk_partial(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
    %offs = tt.get_program_id x : i32
    %offs_0 = arith.muli %offs, %c128_i32 : i32
    %offs_1 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<128xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<128xi32>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %2 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %4 = tt.load %3 : tensor<128x!tt.ptr<bf16>>
    %5 = tt.atomic_rmw fadd, relaxed, gpu, %1, %4 : (tensor<128x!tt.ptr<bf16>>, tensor<128xbf16>) -> tensor<128xbf16>
    tt.return
  }
}
