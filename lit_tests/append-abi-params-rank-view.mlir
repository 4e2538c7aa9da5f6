// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/a2a-rank-view.json" operands="a_ptr:A" backend=sm},check-accesses,append-abi-params,insert-waits' | filecheck %s

// A view="rank" tensor (docs/soundness.md, "Kernels that address their rank's part"): the
// kernel reads only the part its rank holds -- here A[b, h, :] of the part [2, 4, 64] at
// offset rank * (0, 4, 0) of the global [2, 8, 64] -- at coordinates relative to that part.
// check-accesses bounds h = pid % 4 by the constant (the head dim is an inner dim of the part),
// append-abi-params advances the operand by syn_rank * 256 elements (4 rows of 64) at the top
// of the kernel, and the waits name the global box: dim 1 starts at h + 4 * syn_rank.

// CHECK-LABEL: tt.func public @rows_of_my_heads(
// CHECK:         %[[STEP:.*]] = arith.constant 256 : i32
// CHECK-NEXT:    %[[OFF:.*]] = arith.muli %syn_rank, %[[STEP]] : i32
// CHECK-NEXT:    %[[PART:.*]] = tt.addptr %a_ptr, %[[OFF]] : !tt.ptr<bf16>, i32
// CHECK:         %b = arith.divsi %pid, %c4_i32 : i32
// CHECK-NEXT:    %h = arith.remsi %pid, %c4_i32 : i32
// CHECK:         tt.addptr %[[PART]], %{{.*}} : !tt.ptr<bf16>, i32
// CHECK:         %[[R4:.*]] = arith.muli %syn_rank, %{{.*}} : i32
// CHECK-NEXT:    %[[LO1:.*]] = arith.addi %h, %[[R4]] : i32
// CHECK:         syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%{{.*}}, %[[LO1]], %{{.*}}] to
// CHECK:         tt.load
// CHECK-NOT:     %a_ptr

module {
  tt.func public @rows_of_my_heads(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %out_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c4_i32 = arith.constant 4 : i32
    %c512_i32 = arith.constant 512 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %b = arith.divsi %pid, %c4_i32 : i32
    %h = arith.remsi %pid, %c4_i32 : i32
    %0 = arith.muli %b, %c512_i32 : i32
    %1 = arith.muli %h, %c64_i32 : i32
    %2 = arith.addi %0, %1 : i32
    %row = tt.addptr %a_ptr, %2 : !tt.ptr<bf16>, i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %3 = tt.splat %row : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %4 = tt.addptr %3, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x = tt.load %4 : tensor<64x!tt.ptr<bf16>>
    %5 = arith.muli %pid, %c64_i32 : i32
    %6 = tt.addptr %out_ptr, %5 : !tt.ptr<bf16>, i32
    %7 = tt.splat %6 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %8 = tt.addptr %7, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %8, %x : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}
