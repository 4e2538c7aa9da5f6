// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' | filecheck %s

// check-accesses changes no op: it is the soundness gate that runs before the other passes.
// A row copy masked by a runtime column count (`cols < n_cols`) reads only columns below
// n_cols, so it is sound exactly when n_cols <= 64, the schedule's row length: that becomes a
// launch-time upper bound the runtime checks before every launch.  The kernel reads program
// id axis 0 only, so the runtime will refuse a grid larger than 1 along axes 1 and 2.

// CHECK:       syncopate.state = #syncopate.state<grid_axes = [0], upper_bounds = {n_cols = 64}>
// CHECK-LABEL: tt.func public @masked_rows
// CHECK-NOT:   syncopate.

module {
  tt.func public @masked_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = tt.splat %n_cols : i32 -> tensor<64xi32>
    %x_0 = arith.cmpi slt, %cols, %x : tensor<64xi32>
    %x_1 = arith.muli %row, %stride : i32
    %x_2 = tt.addptr %inp_ptr, %x_1 : !tt.ptr<bf16>, i32
    %x_3 = tt.splat %x_2 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %x_4 = tt.addptr %x_3, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x_5 = tt.load %x_4, %x_0 : tensor<64x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x_1 : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %2, %x_5, %x_0 : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}