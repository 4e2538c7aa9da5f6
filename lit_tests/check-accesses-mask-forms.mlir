// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' | filecheck %s

// Masks written otherwise than `offs < n` (tests/corpus/unseen2.py, mask_styles): `~(offs >= n)`
// (an xori with true) and `tl.where(offs < n, True, False)` (a select) bound the access like
// `offs < n` (A [512, 64]: a launch-time n_cols <= 64). Before, both were refused as reading
// indices [0, 128) "past the end of the dim ... or mask the access" -- while masked.

// CHECK: upper_bounds = {n_cols = 64}
// CHECK-LABEL: tt.func public @negated_mask

module {
  tt.func public @negated_mask(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %m = arith.constant dense<true> : tensor<128xi1>
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %m_0 = tt.splat %n_cols : i32 -> tensor<128xi32>
    %m_1 = arith.cmpi sge, %cols, %m_0 : tensor<128xi32>
    %m_2 = arith.xori %m_1, %m : tensor<128xi1>
    %x = arith.muli %row, %c64_i32 : i32
    %x_3 = tt.addptr %inp_ptr, %x : !tt.ptr<bf16>, i32
    %x_4 = tt.splat %x_3 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_5 = tt.addptr %x_4, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_6 = tt.load %x_5, %m_2 : tensor<128x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %2, %x_6, %m_2 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// CHECK: upper_bounds = {n_cols = 64}
// CHECK-LABEL: tt.func public @where_mask

module {
  tt.func public @where_mask(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %m = arith.constant dense<false> : tensor<128xi1>
    %m_0 = arith.constant dense<true> : tensor<128xi1>
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %m_1 = tt.splat %n_cols : i32 -> tensor<128xi32>
    %m_2 = arith.cmpi slt, %cols, %m_1 : tensor<128xi32>
    %m_3 = arith.select %m_2, %m_0, %m : tensor<128xi1>, tensor<128xi1>
    %x = arith.muli %row, %c64_i32 : i32
    %x_4 = tt.addptr %inp_ptr, %x : !tt.ptr<bf16>, i32
    %x_5 = tt.splat %x_4 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_6 = tt.addptr %x_5, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_7 = tt.load %x_6, %m_3 : tensor<128x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %2, %x_7, %m_3 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}
