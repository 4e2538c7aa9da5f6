// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,tile-remap' | filecheck %s

// tile-remap and tile coordinates that a loop carries (docs/soundness.md, "What tile-remap may
// rewrite"; the same kernels compiled and emulated: tests/test_remap_loop_carried.py).

// The row-tile counter t advances by a loaded step: it is not a pure function of program ids
// and tile loops (purity follows what the loop yields, not only its initial value), so it is
// never remapped.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate depends on a loop-carried value that is not pure (only pure functions of program ids and tile loops are remapped); tile order left as written"
// CHECK-LABEL: tt.func public @loaded_step_rows
// CHECK-NOT: syncopate.remap

module {
  tt.func public @loaded_step_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %step_ptr: !tt.ptr<i32>, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %t = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %t_0 = scf.for %i = %c0_i32 to %c2_i32 step %c1_i32 iter_args(%t_1 = %t) -> (i32)  : i32 {
      %rows = arith.muli %t_1, %c64_i32 : i32
      %rows_2 = tt.splat %rows : i32 -> tensor<64xi32>
      %rows_3 = arith.addi %rows_2, %cols : tensor<64xi32>
      %m = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %m_4 = tt.splat %M : i32 -> tensor<64x1xi32>
      %m_5 = arith.cmpi slt, %m, %m_4 : tensor<64x1xi32>
      %m_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %m_7 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
      %m_8 = arith.cmpi slt, %m_6, %m_7 : tensor<1x64xi32>
      %m_9 = tt.broadcast %m_5 : tensor<64x1xi1> -> tensor<64x64xi1>
      %m_10 = tt.broadcast %m_8 : tensor<1x64xi1> -> tensor<64x64xi1>
      %m_11 = arith.andi %m_9, %m_10 : tensor<64x64xi1>
      %x = tt.splat %stride : i32 -> tensor<64x1xi32>
      %x_12 = arith.muli %m, %x : tensor<64x1xi32>
      %x_13 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %x_14 = tt.addptr %x_13, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %x_15 = tt.broadcast %x_14 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %x_16 = tt.broadcast %m_6 : tensor<1x64xi32> -> tensor<64x64xi32>
      %x_17 = tt.addptr %x_15, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %x_18 = tt.load %x_17, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_18, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %t_19 = tt.addptr %step_ptr, %i : !tt.ptr<i32>, i32
      %t_20 = tt.load %t_19 : !tt.ptr<i32>
      %t_21 = arith.addi %t_1, %t_20 : i32
      scf.yield %t_21 : i32
    }
    tt.return
  }
}


// -----

// The loop only adds loaded steps to t; the access after it uses the loop's result.  Remapped
// (purity ignoring the yielded value), rank 1 computed other tiles than the unfused kernel.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate depends on a loop result that is not pure (only pure functions of program ids and tile loops are remapped); tile order left as written"
// CHECK-LABEL: tt.func public @loaded_offset_rows
// CHECK-NOT: syncopate.remap

module {
  tt.func public @loaded_offset_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %step_ptr: !tt.ptr<i32>, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %t = tt.get_program_id x : i32
    %t_0 = scf.for %i = %c0_i32 to %c2_i32 step %c1_i32 iter_args(%t_18 = %t) -> (i32)  : i32 {
      %t_19 = tt.addptr %step_ptr, %i : !tt.ptr<i32>, i32
      %t_20 = tt.load %t_19 : !tt.ptr<i32>
      %t_21 = arith.addi %t_18, %t_20 : i32
      scf.yield %t_21 : i32
    }
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rows = arith.muli %t_0, %c64_i32 : i32
    %rows_1 = tt.splat %rows : i32 -> tensor<64xi32>
    %rows_2 = arith.addi %rows_1, %cols : tensor<64xi32>
    %m = tt.expand_dims %rows_2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %m_3 = tt.splat %M : i32 -> tensor<64x1xi32>
    %m_4 = arith.cmpi slt, %m, %m_3 : tensor<64x1xi32>
    %m_5 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %m_6 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
    %m_7 = arith.cmpi slt, %m_5, %m_6 : tensor<1x64xi32>
    %m_8 = tt.broadcast %m_4 : tensor<64x1xi1> -> tensor<64x64xi1>
    %m_9 = tt.broadcast %m_7 : tensor<1x64xi1> -> tensor<64x64xi1>
    %m_10 = arith.andi %m_8, %m_9 : tensor<64x64xi1>
    %x = tt.splat %stride : i32 -> tensor<64x1xi32>
    %x_11 = arith.muli %m, %x : tensor<64x1xi32>
    %x_12 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %x_13 = tt.addptr %x_12, %x_11 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %x_14 = tt.broadcast %x_13 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %x_15 = tt.broadcast %m_5 : tensor<1x64xi32> -> tensor<64x64xi32>
    %x_16 = tt.addptr %x_14, %x_15 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %x_17 = tt.load %x_16, %m_10 : tensor<64x64x!tt.ptr<bf16>>
    %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %x_11 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %x_15 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %3, %x_17, %m_10 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}


// -----

// The same walk with a pure step (a kernel argument).  Replacing every use of the carried t
// replaced its use in the loop's own advance too: the next iteration started from
// table[t] + step and left the grid.  A carried coordinate is refused.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate is a value the loop carries from one iteration to the next (remapping it would advance the loop from the remapped tile; write the tile loop as `for tile in range(start, tiles, step)`); tile order left as written"
// CHECK-LABEL: tt.func public @arg_step_rows
// CHECK-NOT: syncopate.remap

module {
  tt.func public @arg_step_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %step: i32, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %t = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %t_0 = scf.for %i = %c0_i32 to %c2_i32 step %c1_i32 iter_args(%t_1 = %t) -> (i32)  : i32 {
      %rows = arith.muli %t_1, %c64_i32 : i32
      %rows_2 = tt.splat %rows : i32 -> tensor<64xi32>
      %rows_3 = arith.addi %rows_2, %cols : tensor<64xi32>
      %m = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %m_4 = tt.splat %M : i32 -> tensor<64x1xi32>
      %m_5 = arith.cmpi slt, %m, %m_4 : tensor<64x1xi32>
      %m_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %m_7 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
      %m_8 = arith.cmpi slt, %m_6, %m_7 : tensor<1x64xi32>
      %m_9 = tt.broadcast %m_5 : tensor<64x1xi1> -> tensor<64x64xi1>
      %m_10 = tt.broadcast %m_8 : tensor<1x64xi1> -> tensor<64x64xi1>
      %m_11 = arith.andi %m_9, %m_10 : tensor<64x64xi1>
      %x = tt.splat %stride : i32 -> tensor<64x1xi32>
      %x_12 = arith.muli %m, %x : tensor<64x1xi32>
      %x_13 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %x_14 = tt.addptr %x_13, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %x_15 = tt.broadcast %x_14 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %x_16 = tt.broadcast %m_6 : tensor<1x64xi32> -> tensor<64x64xi32>
      %x_17 = tt.addptr %x_15, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %x_18 = tt.load %x_17, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_18, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %t_19 = arith.addi %t_1, %step : i32
      scf.yield %t_19 : i32
    }
    tt.return
  }
}

// -----

// The same walk as a while loop (scf.while, Triton's `while t < TILES`): t is an argument of
// the loop's body, carried by its yield; refused for the same reason.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate is a value the loop carries from one iteration to the next (remapping it would advance the loop from the remapped tile; write the tile loop as `for tile in range(start, tiles, step)`); tile order left as written"
// CHECK-LABEL: tt.func public @while_tiles
// CHECK-NOT: syncopate.remap

module {
  tt.func public @while_tiles(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %step: i32, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %c8_i32 = arith.constant 8 : i32
    %t = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %t_0 = scf.while (%t_1 = %t) : (i32) -> i32 {
      %0 = arith.cmpi slt, %t_1, %c8_i32 : i32
      scf.condition(%0) %t_1 : i32
    } do {
    ^bb0(%t_1: i32):
      %rows = arith.muli %t_1, %c64_i32 : i32
      %rows_2 = tt.splat %rows : i32 -> tensor<64xi32>
      %rows_3 = arith.addi %rows_2, %cols : tensor<64xi32>
      %m = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %m_4 = tt.splat %M : i32 -> tensor<64x1xi32>
      %m_5 = arith.cmpi slt, %m, %m_4 : tensor<64x1xi32>
      %m_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %m_7 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
      %m_8 = arith.cmpi slt, %m_6, %m_7 : tensor<1x64xi32>
      %m_9 = tt.broadcast %m_5 : tensor<64x1xi1> -> tensor<64x64xi1>
      %m_10 = tt.broadcast %m_8 : tensor<1x64xi1> -> tensor<64x64xi1>
      %m_11 = arith.andi %m_9, %m_10 : tensor<64x64xi1>
      %x = tt.splat %stride : i32 -> tensor<64x1xi32>
      %x_12 = arith.muli %m, %x : tensor<64x1xi32>
      %x_13 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %x_14 = tt.addptr %x_13, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %x_15 = tt.broadcast %x_14 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %x_16 = tt.broadcast %m_6 : tensor<1x64xi32> -> tensor<64x64xi32>
      %x_17 = tt.addptr %x_15, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %x_18 = tt.load %x_17, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_18, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %t_19 = arith.addi %t_1, %step : i32
      scf.yield %t_19 : i32
    }
    tt.return
  }
}

// -----

// A while loop whose condition region forwards t plus a loaded step to its body: the body's
// argument is what the condition forwards (not the loop's initial value, what the body
// yields, or the condition itself, which tests t alone), and that is loaded -- not pure.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate depends on a while-loop value that is not pure (only pure functions of program ids and tile loops are remapped); tile order left as written"
// CHECK-LABEL: tt.func public @while_loaded_forward
// CHECK-NOT: syncopate.remap

module {
  tt.func public @while_loaded_forward(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %step_ptr: !tt.ptr<i32>, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %c8_i32 = arith.constant 8 : i32
    %t = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %t_0 = scf.while (%t_1 = %t) : (i32) -> i32 {
      %s = tt.load %step_ptr : !tt.ptr<i32>
      %t_2 = arith.addi %t_1, %s : i32
      %0 = arith.cmpi slt, %t_1, %c8_i32 : i32
      scf.condition(%0) %t_2 : i32
    } do {
    ^bb0(%t_1: i32):
      %rows = arith.muli %t_1, %c64_i32 : i32
      %rows_2 = tt.splat %rows : i32 -> tensor<64xi32>
      %rows_3 = arith.addi %rows_2, %cols : tensor<64xi32>
      %m = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %m_4 = tt.splat %M : i32 -> tensor<64x1xi32>
      %m_5 = arith.cmpi slt, %m, %m_4 : tensor<64x1xi32>
      %m_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %m_7 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
      %m_8 = arith.cmpi slt, %m_6, %m_7 : tensor<1x64xi32>
      %m_9 = tt.broadcast %m_5 : tensor<64x1xi1> -> tensor<64x64xi1>
      %m_10 = tt.broadcast %m_8 : tensor<1x64xi1> -> tensor<64x64xi1>
      %m_11 = arith.andi %m_9, %m_10 : tensor<64x64xi1>
      %x = tt.splat %stride : i32 -> tensor<64x1xi32>
      %x_12 = arith.muli %m, %x : tensor<64x1xi32>
      %x_13 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %x_14 = tt.addptr %x_13, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %x_15 = tt.broadcast %x_14 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %x_16 = tt.broadcast %m_6 : tensor<1x64xi32> -> tensor<64x64xi32>
      %x_17 = tt.addptr %x_15, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %x_18 = tt.load %x_17, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_18, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      scf.yield %t_1 : i32
    }
    tt.return
  }
}

// -----

// Triton's `while t < TILES: ...; t += tl.load(step_ptr)`: the condition region forwards t
// unchanged, and t is what the body yields -- t plus a loaded step: not pure.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate depends on a while-loop value that is not pure (only pure functions of program ids and tile loops are remapped); tile order left as written"
// CHECK-LABEL: tt.func public @while_loaded_step
// CHECK-NOT: syncopate.remap

module {
  tt.func public @while_loaded_step(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %step_ptr: !tt.ptr<i32>, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %c8_i32 = arith.constant 8 : i32
    %t = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %t_0 = scf.while (%t_1 = %t) : (i32) -> i32 {
      %0 = arith.cmpi slt, %t_1, %c8_i32 : i32
      scf.condition(%0) %t_1 : i32
    } do {
    ^bb0(%t_1: i32):
      %rows = arith.muli %t_1, %c64_i32 : i32
      %rows_2 = tt.splat %rows : i32 -> tensor<64xi32>
      %rows_3 = arith.addi %rows_2, %cols : tensor<64xi32>
      %m = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %m_4 = tt.splat %M : i32 -> tensor<64x1xi32>
      %m_5 = arith.cmpi slt, %m, %m_4 : tensor<64x1xi32>
      %m_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %m_7 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
      %m_8 = arith.cmpi slt, %m_6, %m_7 : tensor<1x64xi32>
      %m_9 = tt.broadcast %m_5 : tensor<64x1xi1> -> tensor<64x64xi1>
      %m_10 = tt.broadcast %m_8 : tensor<1x64xi1> -> tensor<64x64xi1>
      %m_11 = arith.andi %m_9, %m_10 : tensor<64x64xi1>
      %x = tt.splat %stride : i32 -> tensor<64x1xi32>
      %x_12 = arith.muli %m, %x : tensor<64x1xi32>
      %x_13 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %x_14 = tt.addptr %x_13, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %x_15 = tt.broadcast %x_14 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %x_16 = tt.broadcast %m_6 : tensor<1x64xi32> -> tensor<64x64xi32>
      %x_17 = tt.addptr %x_15, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %x_18 = tt.load %x_17, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_18, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %t_19 = tt.load %step_ptr : !tt.ptr<i32>
      %t_20 = arith.addi %t_1, %t_19 : i32
      scf.yield %t_20 : i32
    }
    tt.return
  }
}
