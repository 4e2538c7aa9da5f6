// RUN: syncopate-opt %s --verify-triton -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=ce},append-abi-params,tile-remap,insert-signals,resolve-chunks,lower-ce' | filecheck %s

// Reduce-scatter on the copy engine: the kernel only announces what it produced. Each program
// adds the number of elements of every chunk it stored to that chunk's PRODUCED flag (release,
// system scope, after a CTA barrier so every thread's stores are ordered before it); the host's
// side stream waits on PRODUCED with cuStreamWaitValue32, pushes the chunk into the owner's
// per-source slot with a copy, and the owner sums the slots after the kernel (the copy engine
// cannot add, so no addition happens in flight). No wait, no comm program, no syncopate op.

// CHECK-LABEL: tt.func public @store
// CHECK:         tt.store %ptrs_1, %cst
// CHECK-NOT:     syncopate_wait
// CHECK:         "gpu.barrier"() : () -> ()
// CHECK-NEXT:    tt.atomic_rmw add, release, sys, %{{.+}}, %{{.+}}, %{{.+}} : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK:         tt.atomic_rmw add, release, sys, %{{.+}}, %{{.+}}, %{{.+}} : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK-NEXT:    tt.return
// CHECK-NOT:     syncopate.

module {
  tt.func public @store(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xbf16>
    %c128_i32 = arith.constant 128 : i32
    %pid = tt.get_program_id x : i32
    %row = arith.muli %pid, %c128_i32 : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs = tt.splat %row : i32 -> tensor<128xi32>
    %offs_0 = arith.addi %offs, %cols : tensor<128xi32>
    %ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %ptrs_1 = tt.addptr %ptrs, %offs_0 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %ptrs_1, %cst : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}
