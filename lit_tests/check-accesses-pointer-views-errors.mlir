// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' 2>&1 | filecheck %s

// A view of a communicated tensor (A [512, 64] bf16) with elements of another size counts
// other units: refused, saying so (the same-size view: check-accesses-pointer-views.mlir).

// CHECK: syncopate-opt: error: cannot derive which region of tensor 'A' (inp_ptr) this tt.load reads: a pointer cast from 16-bit to 8-bit elements (its offsets count elements of another size)

module {
  tt.func public @i8_view(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %b = tt.splat %n_cols : i32 -> tensor<64xi32>
    %b_0 = arith.cmpi slt, %cols, %b : tensor<64xi32>
    %b_1 = tt.bitcast %inp_ptr : !tt.ptr<bf16> -> !tt.ptr<i8>
    %b_2 = arith.muli %row, %c128_i32 : i32
    %b_3 = tt.addptr %b_1, %b_2 : !tt.ptr<i8>, i32
    %b_4 = tt.splat %b_3 : !tt.ptr<i8> -> tensor<64x!tt.ptr<i8>>
    %b_5 = tt.addptr %b_4, %cols : tensor<64x!tt.ptr<i8>>, tensor<64xi32>
    %b_6 = tt.load %b_5, %b_0 : tensor<64x!tt.ptr<i8>>
    %0 = tt.bitcast %out_ptr : !tt.ptr<bf16> -> !tt.ptr<i8>
    %1 = tt.addptr %0, %b_2 : !tt.ptr<i8>, i32
    %2 = tt.splat %1 : !tt.ptr<i8> -> tensor<64x!tt.ptr<i8>>
    %3 = tt.addptr %2, %cols : tensor<64x!tt.ptr<i8>>, tensor<64xi32>
    tt.store %3, %b_6, %b_0 : tensor<64x!tt.ptr<i8>>
    tt.return
  }
}
