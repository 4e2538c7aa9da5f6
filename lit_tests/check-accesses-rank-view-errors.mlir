// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/a2a-rank-view.json" operands="a_ptr:A"},check-accesses' 2>&1 | filecheck %s

// A view="rank" tensor: each rank's kernel addresses only its part [2, 4, 64] of the global
// [2, 8, 64] (docs/soundness.md).  Every access must stay inside the part: past it lie the
// rows of another rank's part, which no wait of this rank covers.

// h = pid % 8 may reach head 7 of a part 4 heads wide.
// CHECK: syncopate-opt: error: this tt.load of 'a_ptr' (tensor 'A', dim 1 of size 4 in the part each rank addresses) may touch index 7 (its start is at most 7), past the end of the dim; make the schedule's shape match what the kernel indexes

module {
  tt.func public @too_many_heads(%a_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c8_i32 = arith.constant 8 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %h = arith.remsi %pid, %c8_i32 : i32
    %1 = arith.muli %h, %c64_i32 : i32
    %row = tt.addptr %a_ptr, %1 : !tt.ptr<bf16>, i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %3 = tt.splat %row : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %4 = tt.addptr %3, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x = tt.load %4 : tensor<64x!tt.ptr<bf16>>
    %6 = tt.addptr %out_ptr, %1 : !tt.ptr<bf16>, i32
    %7 = tt.splat %6 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %8 = tt.addptr %7, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %8, %x : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// h = pid // 2 has no bound: it could index the next rank's heads.
// CHECK: syncopate-opt: error: cannot prove that this tt.load of 'a_ptr' (tensor 'A', dim 1 of size 4 in the part each rank addresses) stays inside the dim

module {
  tt.func public @unbounded_head(%a_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c2_i32 = arith.constant 2 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %h = arith.divsi %pid, %c2_i32 : i32
    %1 = arith.muli %h, %c64_i32 : i32
    %row = tt.addptr %a_ptr, %1 : !tt.ptr<bf16>, i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %3 = tt.splat %row : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %4 = tt.addptr %3, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x = tt.load %4 : tensor<64x!tt.ptr<bf16>>
    %6 = tt.addptr %out_ptr, %1 : !tt.ptr<bf16>, i32
    %7 = tt.splat %6 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %8 = tt.addptr %7, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %8, %x : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}
