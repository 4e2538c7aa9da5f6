// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,tile-remap' | filecheck %s

// tile-remap runs each program as if its tile coordinate X were table[rank][X]. That renumbers
// the tiles a launch computes only if the programs visit every X with the same other
// coordinates, which depends on the grid: so the pass records, beside each remap, the slice
// that computes X and every other value through which a program's work depends on its program
// id (`rest`), and the runtime and the emulator evaluate it per launch
// (syncopate.tiling.check_remaps, docs/soundness.md). Where it cannot build that slice, the
// tile order stays as written.

// Two programs per row (t = pid // 2, h = pid % 2), each adding its program id to its values:
// rest holds the column start h * 32 (step 3) and the program id itself (step 0, the
// sitofp's operand), so every (table[t], rest) is computed only when the table is the
// identity: a launch on another rank is refused (before: the rows of rank 1 carried other
// programs' ids; tests/corpus/unseen4.py's pid_in_data).
// CHECK:       remap_checks = [{tensor = "A", dim = 0, at = "?", tiles = 512, table = [{{[0-9, ]+}}], steps = [{op = "pid", bits = 32}, {op = "const", value = 2, bits = 32}, {op = "divs", args = [0, 1], bits = 32}, {op = "rems", args = [0, 1], bits = 32}, {op = "const", value = 32, bits = 32}, {op = "mul", args = [3, 4], bits = 32}], coord = 2, rest = [0, 5]}]
// CHECK-LABEL: tt.func public @pid_in_data
// CHECK:         syncopate.remap

module {
  tt.func public @pid_in_data(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c32_i32 = arith.constant 32 : i32
    %c2_i32 = arith.constant 2 : i32
    %pid = tt.get_program_id x : i32
    %t = arith.divsi %pid, %c2_i32 : i32
    %h = arith.remsi %pid, %c2_i32 : i32
    %cols = arith.muli %h, %c32_i32 : i32
    %cols_0 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %cols_1 = tt.splat %cols : i32 -> tensor<32xi32>
    %cols_2 = arith.addi %cols_1, %cols_0 : tensor<32xi32>
    %x = tt.splat %n_cols : i32 -> tensor<32xi32>
    %x_3 = arith.cmpi slt, %cols_2, %x : tensor<32xi32>
    %x_4 = arith.muli %t, %stride : i32
    %x_5 = tt.addptr %inp_ptr, %x_4 : !tt.ptr<bf16>, i32
    %x_6 = tt.splat %x_5 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
    %x_7 = tt.addptr %x_6, %cols_2 : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
    %x_8 = tt.load %x_7, %x_3 : tensor<32x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x_4 : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols_2 : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
    %3 = arith.sitofp %pid : i32 to f32
    %4 = arith.extf %x_8 : tensor<32xbf16> to tensor<32xf32>
    %5 = tt.splat %3 : f32 -> tensor<32xf32>
    %6 = arith.addf %4, %5 : tensor<32xf32>
    %7 = arith.truncf %6 : tensor<32xf32> to tensor<32xbf16>
    tt.store %2, %7, %x_3 : tensor<32x!tt.ptr<bf16>>
    tt.return
  }
}


// -----

// A tile loop that carries a running count from one tile to the next: remapping its tiles
// would count other tiles' data into each row (before: rank 1's rows came out wrong;
// tests/corpus/unseen4.py's carried_count_rows), so it is not remapped.
// CHECK:       "tile-remap: A dim 0 not remapped: the launch check cannot be built: the tile loop carries a value from one tile to the next (the tiles' order would change what it carries); tile order left as written"
// CHECK-LABEL: tt.func public @carried_tile_loop
// CHECK-NOT:     syncopate.remap

module {
  tt.func public @carried_tile_loop(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_tiles: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %total = arith.constant dense<0> : tensor<64xi32>
    %cst = arith.constant dense<0.000000e+00> : tensor<64xf32>
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %0 = tt.get_program_id x : i32
    %1 = tt.get_num_programs x : i32
    %total_0 = scf.for %t = %0 to %n_tiles step %1 iter_args(%total_1 = %total) -> (tensor<64xi32>)  : i32 {
      %x = tt.splat %n_cols : i32 -> tensor<64xi32>
      %x_2 = arith.cmpi slt, %cols, %x : tensor<64xi32>
      %x_3 = arith.muli %t, %stride : i32
      %x_4 = tt.addptr %inp_ptr, %x_3 : !tt.ptr<bf16>, i32
      %x_5 = tt.splat %x_4 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
      %x_6 = tt.addptr %x_5, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
      %x_7 = tt.load %x_6, %x_2 : tensor<64x!tt.ptr<bf16>>
      %total_8 = arith.extf %x_7 : tensor<64xbf16> to tensor<64xf32>
      %total_9 = arith.cmpf ogt, %total_8, %cst : tensor<64xf32>
      %total_10 = arith.extui %total_9 : tensor<64xi1> to tensor<64xi32>
      %total_11 = arith.addi %total_1, %total_10 : tensor<64xi32>
      %2 = tt.addptr %out_ptr, %x_3 : !tt.ptr<bf16>, i32
      %3 = tt.splat %2 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
      %4 = tt.addptr %3, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
      %5 = arith.sitofp %total_11 : tensor<64xi32> to tensor<64xbf16>
      tt.store %4, %5, %x_2 : tensor<64x!tt.ptr<bf16>>
      scf.yield %total_11 : tensor<64xi32>
    }
    tt.return
  }
}
