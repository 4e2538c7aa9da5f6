// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' | filecheck %s

// A communicated tensor read through a pointer of another element type (A [512, 64] bf16):
// `inp_ptr.to(tl.pointer_type(tl.int16))`, a view of the same elements, has the same offsets, so
// the access gets its box (before: "cannot follow pointer arithmetic through 'tt.bitcast'",
// tests/corpus/unseen2.py bitcast_read). A view with elements of another size:
// check-accesses-pointer-views-errors.mlir.

// CHECK: upper_bounds = {n_cols = 64}
// CHECK-LABEL: tt.func public @i16_view

module {
  tt.func public @i16_view(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %bits = tt.splat %n_cols : i32 -> tensor<64xi32>
    %bits_0 = arith.cmpi slt, %cols, %bits : tensor<64xi32>
    %bits_1 = tt.bitcast %inp_ptr : !tt.ptr<bf16> -> !tt.ptr<i16>
    %bits_2 = arith.muli %row, %c64_i32 : i32
    %bits_3 = tt.addptr %bits_1, %bits_2 : !tt.ptr<i16>, i32
    %bits_4 = tt.splat %bits_3 : !tt.ptr<i16> -> tensor<64x!tt.ptr<i16>>
    %bits_5 = tt.addptr %bits_4, %cols : tensor<64x!tt.ptr<i16>>, tensor<64xi32>
    %bits_6 = tt.load %bits_5, %bits_0 : tensor<64x!tt.ptr<i16>>
    %0 = tt.bitcast %out_ptr : !tt.ptr<bf16> -> !tt.ptr<i16>
    %1 = tt.addptr %0, %bits_2 : !tt.ptr<i16>, i32
    %2 = tt.splat %1 : !tt.ptr<i16> -> tensor<64x!tt.ptr<i16>>
    %3 = tt.addptr %2, %cols : tensor<64x!tt.ptr<i16>>, tensor<64xi32>
    tt.store %3, %bits_6, %bits_0 : tensor<64x!tt.ptr<i16>>
    tt.return
  }
}
