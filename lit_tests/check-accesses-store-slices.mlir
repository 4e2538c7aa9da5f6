// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C"},check-accesses' | filecheck %s

// check-accesses records, for every store of a produced tensor (C [256, 128], reduce-scatter
// partials), the pure scalar slice of its box (passes/store_slices.py), which the runtime and
// the emulator evaluate per launch to refuse one that stores an element twice
// (syncopate.tiling, docs/soundness.md).

// A persistent loop over tiles `t = pid, pid + num_programs, ...` storing row t when t is
// even: the loop is a `for` step (bounds pid, n_tiles, num_programs; iteration k), its counter
// lb + k * step, the branch a `where` step on `t % 2 == 0`, the box [t, +1) x [0, +128). It is
// the tensor's one store and has a slice (`whole`): a launch must also store every element,
// or the chunks holding the others never leave (here: the odd rows are refused at launch).
// CHECK-LABEL: stores = [{tensor = "C", at = "?", shape = [256, 128], steps = [
// CHECK-SAME: {op = "pid", bits = 32}, {op = "arg", name = "n_tiles", bits = 32}, {op = "nprogs", bits = 32},
// CHECK-SAME: {op = "for", args = [0, 1, 2], bits = 32}, {op = "mul", args = [3, 2], bits = 32}, {op = "add", args = [0, 4], bits = 32},
// CHECK-SAME: {op = "const", value = 2, bits = 32}, {op = "rems", args = [5, 6], bits = 32}, {op = "const", bits = 32}, {op = "cmp", args = [7, 8], bits = 1}, {op = "where", args = [9]},
// CHECK-SAME: {op = "const"}], start = [5, 11], extent = [1, 128], whole = true}]

module {
  tt.func public @every_other_tile(%c_ptr: !tt.ptr<bf16>, %x_ptr: !tt.ptr<bf16>, %n_tiles: i32) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
    %c0_i32 = arith.constant 0 : i32
    %c2_i32 = arith.constant 2 : i32
    %0 = tt.get_program_id x : i32
    %1 = tt.get_num_programs x : i32
    scf.for %t = %0 to %n_tiles step %1  : i32 {
      %2 = arith.remsi %t, %c2_i32 : i32
      %3 = arith.cmpi eq, %2, %c0_i32 : i32
      scf.if %3 {
        %offs = arith.muli %t, %c128_i32 : i32
        %offs_0 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
        %offs_1 = tt.splat %offs : i32 -> tensor<128xi32>
        %offs_2 = arith.addi %offs_1, %offs_0 : tensor<128xi32>
        %4 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
        %5 = tt.addptr %4, %offs_2 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
        %6 = tt.splat %x_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
        %7 = tt.addptr %6, %offs_2 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
        %8 = tt.load %7 : tensor<128x!tt.ptr<bf16>>
        tt.store %5, %8 : tensor<128x!tt.ptr<bf16>>
      }
    }
    tt.return
  }
}

// -----

// A row loaded from memory (a routed row): the store is left unchecked, and the remarks say
// why -- the one case docs/soundness.md keeps as an assumption.
// CHECK-LABEL: remarks = ["check-accesses: the tt.store of tensor 'C' is not checked at launch for elements stored twice: its box depends on a value loaded from memory"]

module {
  tt.func public @loaded_row(%c_ptr: !tt.ptr<bf16>, %x_ptr: !tt.ptr<bf16>, %row_ptr: !tt.ptr<i32>) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
    %r = tt.get_program_id x : i32
    %r_0 = tt.addptr %row_ptr, %r : !tt.ptr<i32>, i32
    %r_1 = tt.load %r_0 : !tt.ptr<i32>
    %offs = arith.muli %r_1, %c128_i32 : i32
    %offs_2 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs_3 = tt.splat %offs : i32 -> tensor<128xi32>
    %offs_4 = arith.addi %offs_3, %offs_2 : tensor<128xi32>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %offs_4 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %2 = tt.splat %x_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %offs_4 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %4 = tt.load %3 : tensor<128x!tt.ptr<bf16>>
    tt.store %1, %4 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// Two stores an iteration at rows r and r + 1 of the program's rows: disjoint within an
// iteration, but the second is the next iteration's first. Their starts are not a constant
// apart across iterations, so the compiler no longer decides (before: "may both store the same
// elements", a refusal also of the sound unrolled loop of tests/corpus/unseen3.py's
// flattened_loops): both slices are recorded, and the launch check refuses this kernel's
// launches (its kind is refused in tests/test_probe_unseen3.py: `shifted_pair`).
// CHECK-LABEL: stores = [{tensor = "C"
// CHECK-SAME: extent = [1, 128], whole = true}, {tensor = "C"
// CHECK-SAME: extent = [1, 128], whole = true}]

module {
  tt.func public @shifted_pair(%c_ptr: !tt.ptr<bf16>, %x_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<128> : tensor<128xi32>
    %c128_i32 = arith.constant 128 : i32
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %pid = tt.get_program_id x : i32
    %first = arith.muli %pid, %c2_i32 : i32
    scf.for %r = %c0_i32 to %c2_i32 step %c1_i32  : i32 {
      %row = arith.addi %first, %r : i32
      %offs = arith.muli %row, %c128_i32 : i32
      %offs_2 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
      %offs_3 = tt.splat %offs : i32 -> tensor<128xi32>
      %offs_4 = arith.addi %offs_3, %offs_2 : tensor<128xi32>
      %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %offs_4 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
      %2 = tt.splat %x_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %offs_4 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
      %4 = tt.load %3 : tensor<128x!tt.ptr<bf16>>
      tt.store %1, %4 : tensor<128x!tt.ptr<bf16>>
      %5 = tt.addptr %1, %cst : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
      tt.store %5, %4 : tensor<128x!tt.ptr<bf16>>
    }
    tt.return
  }
}
