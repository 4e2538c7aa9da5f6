// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' 2>&1 | filecheck %s

// A masked access the mask does not prove inside the dim (A [512, 64]) is refused saying why the
// mask does not help. Before, `cols != n` was refused as "reads indices [0, 128), past the end
// of the dim; ... or mask the access" (it is masked), and a bound loaded from memory as "the
// access has no mask `index < bound` along it" (it has one) -- tests/corpus/unseen2.py,
// mask_styles STYLE=4 and ragged_rows.

// CHECK: syncopate-opt: error: this tt.load of 'inp_ptr' (tensor 'A', dim 1 of size 64) reads indices [0, 128), past the end of the dim; its mask does not bound the index along it: only signed compares `index < bound` (or <=, >, >=, and their &) do (the arith.cmpi ne is not one)

module {
  tt.func public @ne_mask(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %m = tt.splat %n_cols : i32 -> tensor<128xi32>
    %m_0 = arith.cmpi ne, %cols, %m : tensor<128xi32>
    %x = arith.muli %row, %c64_i32 : i32
    %x_1 = tt.addptr %inp_ptr, %x : !tt.ptr<bf16>, i32
    %x_2 = tt.splat %x_1 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_3 = tt.addptr %x_2, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_4 = tt.load %x_3, %m_0 : tensor<128x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %2, %x_4, %m_0 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: cannot prove that this tt.load of 'inp_ptr' (tensor 'A', dim 1 of size 64) stays inside the dim: its start %c0 is not bounded; its mask bounds the index along it only by `%n`, not a kernel argument or a constant

module {
  tt.func public @loaded_bound(%inp_ptr: !tt.ptr<bf16>, %len_ptr: !tt.ptr<i32>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %n = tt.addptr %len_ptr, %row : !tt.ptr<i32>, i32
    %n_0 = tt.load %n : !tt.ptr<i32>
    scf.for %c0 = %c0_i32 to %n_0 step %c32_i32  : i32 {
      %cols = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
      %cols_1 = tt.splat %c0 : i32 -> tensor<32xi32>
      %cols_2 = arith.addi %cols_1, %cols : tensor<32xi32>
      %x = tt.splat %n_0 : i32 -> tensor<32xi32>
      %x_3 = arith.cmpi slt, %cols_2, %x : tensor<32xi32>
      %x_4 = arith.muli %row, %c64_i32 : i32
      %x_5 = tt.addptr %inp_ptr, %x_4 : !tt.ptr<bf16>, i32
      %x_6 = tt.splat %x_5 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
      %x_7 = tt.addptr %x_6, %cols_2 : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
      %x_8 = tt.load %x_7, %x_3 : tensor<32x!tt.ptr<bf16>>
      %0 = tt.addptr %out_ptr, %x_4 : !tt.ptr<bf16>, i32
      %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
      %2 = tt.addptr %1, %cols_2 : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
      tt.store %2, %x_8, %x_3 : tensor<32x!tt.ptr<bf16>>
    }
    tt.return
  }
}
