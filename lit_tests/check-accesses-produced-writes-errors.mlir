// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C"},check-accesses' 2>&1 | filecheck %s

// Stores into a tensor the kernel produces for a reduce-scatter (C [256, 128] bf16 partials).
// insert-signals counts one store per element and the whole box of each store as written, so
// check-accesses refuses what would make a chunk leave before its elements hold their values:
// two stores of one element, a store repeated by a loop, a mask that skips part of the box.
// (docs/soundness.md, "What it refuses"; tests/test_probe_unseen2.py runs the kernels.)

// A tile zero-filled, then stored: each element is stored twice, so its chunk would leave after
// the zeros (found by the probe kernels: `gemm_init_then_store`, tests/corpus/unseen2.py).
// CHECK: syncopate-opt: error: this tt.store and the one at {{.*}} may both store the same elements of 'c_ptr' (tensor 'C', which the kernel produces for the schedule): a produced chunk leaves once its elements are stored, counted one store per element, so it would leave after the first of them

module {
  tt.func public @init_then_store(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xbf16>
    %c128_i32 = arith.constant 128 : i32
    %offs = tt.get_program_id x : i32
    %offs_0 = arith.muli %offs, %c128_i32 : i32
    %offs_1 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<128xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<128xi32>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %1, %cst : tensor<128x!tt.ptr<bf16>>
    %2 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %4 = tt.load %3 : tensor<128x!tt.ptr<bf16>>
    tt.store %1, %4 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// Only the positive elements stored (`mask=x > 0`): the signal counts the whole box, so the
// skipped elements would leave holding stale data (`relu_sparse_store`).
// CHECK: syncopate-opt: error: this tt.store of 'c_ptr' (tensor 'C', which the kernel produces for the schedule) is masked by a condition the compiler does not read as `index < bound` (the arith.cmpf

module {
  tt.func public @relu_store(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xf32>
    %c128_i32 = arith.constant 128 : i32
    %offs = tt.get_program_id x : i32
    %offs_0 = arith.muli %offs, %c128_i32 : i32
    %offs_1 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<128xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<128xi32>
    %x = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_4 = tt.addptr %x, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_5 = tt.load %x_4 : tensor<128x!tt.ptr<bf16>>
    %0 = arith.extf %x_5 : tensor<128xbf16> to tensor<128xf32>
    %1 = arith.cmpf ogt, %0, %cst : tensor<128xf32>
    %2 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %3, %x_5, %1 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// The running value stored into the same box in every iteration (`running_output_rows`).
// CHECK: syncopate-opt: error: this tt.store stores the same box of 'c_ptr' (tensor 'C', which the kernel produces for the schedule) in every iteration of the loop

module {
  tt.func public @store_in_loop(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>, %steps: i32) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<2.000000e+00> : tensor<128xbf16>
    %c128_i32 = arith.constant 128 : i32
    %offs = tt.get_program_id x : i32
    %offs_0 = arith.muli %offs, %c128_i32 : i32
    %offs_1 = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<128xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<128xi32>
    %x = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_4 = tt.addptr %x, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_5 = tt.load %x_4 : tensor<128x!tt.ptr<bf16>>
    %x_6 = scf.for %_ = %c0_i32 to %steps step %c1_i32 iter_args(%x_7 = %x_5) -> (tensor<128xbf16>)  : i32 {
      %x_8 = arith.mulf %x_7, %cst : tensor<128xbf16>
      %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %offs_3 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
      tt.store %1, %x_8 : tensor<128x!tt.ptr<bf16>>
      scf.yield %x_8 : tensor<128xbf16>
    }
    tt.return
  }
}

// -----

// A box of 4 rows masked to 3 by a bound that follows the program id (`halo_rows`): the signal
// counted rows nothing stored.
// CHECK: syncopate-opt: error: this tt.store of 'c_ptr' (tensor 'C', which the kernel produces for the schedule) is masked along dim 0 by `index < 3 + 2*%pid`, a bound that is not the dim's end (256) nor a kernel argument

module {
  tt.func public @halo_store(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<128> : tensor<4x1xi32>
    %c2_i32 = arith.constant 2 : i32
    %pid = tt.get_program_id x : i32
    %rows = arith.muli %pid, %c2_i32 : i32
    %rows_0 = tt.make_range {end = 4 : i32, start = 0 : i32} : tensor<4xi32>
    %rows_1 = tt.splat %rows : i32 -> tensor<4xi32>
    %rows_2 = arith.addi %rows_1, %rows_0 : tensor<4xi32>
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %m = tt.expand_dims %rows_2 {axis = 1 : i32} : tensor<4xi32> -> tensor<4x1xi32>
    %m_3 = arith.addi %rows, %c2_i32 : i32
    %m_4 = tt.splat %m_3 : i32 -> tensor<4x1xi32>
    %m_5 = arith.cmpi sle, %m, %m_4 : tensor<4x1xi32>
    %x = arith.muli %m, %cst : tensor<4x1xi32>
    %x_6 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<4x1x!tt.ptr<bf16>>
    %x_7 = tt.addptr %x_6, %x : tensor<4x1x!tt.ptr<bf16>>, tensor<4x1xi32>
    %x_8 = tt.expand_dims %cols {axis = 0 : i32} : tensor<128xi32> -> tensor<1x128xi32>
    %x_9 = tt.broadcast %x_7 : tensor<4x1x!tt.ptr<bf16>> -> tensor<4x128x!tt.ptr<bf16>>
    %x_10 = tt.broadcast %x_8 : tensor<1x128xi32> -> tensor<4x128xi32>
    %x_11 = tt.addptr %x_9, %x_10 : tensor<4x128x!tt.ptr<bf16>>, tensor<4x128xi32>
    %x_12 = tt.broadcast %m_5 : tensor<4x1xi1> -> tensor<4x128xi1>
    %x_13 = tt.load %x_11, %x_12 : tensor<4x128x!tt.ptr<bf16>>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<4x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %x : tensor<4x1x!tt.ptr<bf16>>, tensor<4x1xi32>
    %2 = tt.broadcast %1 : tensor<4x1x!tt.ptr<bf16>> -> tensor<4x128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %x_10 : tensor<4x128x!tt.ptr<bf16>>, tensor<4x128xi32>
    tt.store %3, %x_13, %x_12 : tensor<4x128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// A row masked to its first 100 of 128 columns by a constant.
// CHECK: syncopate-opt: error: this tt.store of 'c_ptr' (tensor 'C', which the kernel produces for the schedule) is masked to indices < 100 along dim 1, inside the dim of size 128

module {
  tt.func public @cut_store(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<100> : tensor<128xi32>
    %c128_i32 = arith.constant 128 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %x = arith.muli %row, %c128_i32 : i32
    %x_0 = tt.addptr %y_ptr, %x : !tt.ptr<bf16>, i32
    %x_1 = tt.splat %x_0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_2 = tt.addptr %x_1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_3 = tt.load %x_2 : tensor<128x!tt.ptr<bf16>>
    %0 = arith.cmpi slt, %cols, %cst : tensor<128xi32>
    %1 = tt.addptr %c_ptr, %x : !tt.ptr<bf16>, i32
    %2 = tt.splat %1 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %3, %x_3, %0 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// One argument bounding two dims of different sizes (`rows < n & cols < n` over [256, 128]):
// no launch stores the tile whole.
// CHECK: syncopate-opt: error: this tt.store of 'c_ptr' (tensor 'C', which the kernel produces for the schedule) is masked along dim 1 by `index < %n`, which makes the launch need n == 128, but the bound of another dim or store of a produced tensor needs n == 256

module {
  tt.func public @square_mask(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>, %n: i32) attributes {noinline = false} {
    %cst = arith.constant dense<128> : tensor<16x1xi32>
    %c16_i32 = arith.constant 16 : i32
    %rows = tt.get_program_id x : i32
    %rows_0 = arith.muli %rows, %c16_i32 : i32
    %rows_1 = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %rows_2 = tt.splat %rows_0 : i32 -> tensor<16xi32>
    %rows_3 = arith.addi %rows_2, %rows_1 : tensor<16xi32>
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %m = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
    %m_4 = tt.splat %n : i32 -> tensor<16x1xi32>
    %m_5 = arith.cmpi slt, %m, %m_4 : tensor<16x1xi32>
    %m_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<128xi32> -> tensor<1x128xi32>
    %m_7 = tt.splat %n : i32 -> tensor<1x128xi32>
    %m_8 = arith.cmpi slt, %m_6, %m_7 : tensor<1x128xi32>
    %m_9 = tt.broadcast %m_5 : tensor<16x1xi1> -> tensor<16x128xi1>
    %m_10 = tt.broadcast %m_8 : tensor<1x128xi1> -> tensor<16x128xi1>
    %m_11 = arith.andi %m_9, %m_10 : tensor<16x128xi1>
    %x = arith.muli %m, %cst : tensor<16x1xi32>
    %x_12 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<16x1x!tt.ptr<bf16>>
    %x_13 = tt.addptr %x_12, %x : tensor<16x1x!tt.ptr<bf16>>, tensor<16x1xi32>
    %x_14 = tt.broadcast %x_13 : tensor<16x1x!tt.ptr<bf16>> -> tensor<16x128x!tt.ptr<bf16>>
    %x_15 = tt.broadcast %m_6 : tensor<1x128xi32> -> tensor<16x128xi32>
    %x_16 = tt.addptr %x_14, %x_15 : tensor<16x128x!tt.ptr<bf16>>, tensor<16x128xi32>
    %x_17 = tt.load %x_16, %m_11 : tensor<16x128x!tt.ptr<bf16>>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<16x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %x : tensor<16x1x!tt.ptr<bf16>>, tensor<16x1xi32>
    %2 = tt.broadcast %1 : tensor<16x1x!tt.ptr<bf16>> -> tensor<16x128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %x_15 : tensor<16x128x!tt.ptr<bf16>>, tensor<16x128xi32>
    tt.store %3, %x_17, %m_11 : tensor<16x128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// A row stored in 64-wide pieces by a loop that runs up to a loaded length: the mask ends at the
// dim's end, but the loop stops early on the data, so the rest of the row is never stored and
// its chunk never leaves -- the fused kernel hung (`while_loaded_bound`, tests/corpus/unseen3.py).
// CHECK: syncopate-opt: error: this tt.store stores a box of 'c_ptr' (tensor 'C', which the kernel produces for the schedule) that moves with the loop at {{.*}}, whose number of iterations depends on a value loaded from memory: which elements are stored is then decided by the data

module {
  tt.func public @rows_to_loaded_len(%c_ptr: !tt.ptr<bf16>, %x_ptr: !tt.ptr<bf16>, %len_ptr: !tt.ptr<i32>) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<128> : tensor<64xi32>
    %c128_i32 = arith.constant 128 : i32
    %row = tt.get_program_id x : i32
    %n = tt.addptr %len_ptr, %row : !tt.ptr<i32>, i32
    %n_0 = tt.load %n : !tt.ptr<i32>
    scf.for %c0 = %c0_i32 to %n_0 step %c64_i32  : i32 {
      %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
      %cols_1 = tt.splat %c0 : i32 -> tensor<64xi32>
      %cols_2 = arith.addi %cols_1, %cols : tensor<64xi32>
      %x = arith.cmpi slt, %cols_2, %cst : tensor<64xi32>
      %x_3 = arith.muli %row, %c128_i32 : i32
      %x_4 = tt.addptr %x_ptr, %x_3 : !tt.ptr<bf16>, i32
      %x_5 = tt.splat %x_4 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
      %x_6 = tt.addptr %x_5, %cols_2 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
      %x_7 = tt.load %x_6, %x : tensor<64x!tt.ptr<bf16>>
      %0 = tt.addptr %c_ptr, %x_3 : !tt.ptr<bf16>, i32
      %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
      %2 = tt.addptr %1, %cols_2 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
      tt.store %2, %x_7, %x : tensor<64x!tt.ptr<bf16>>
    }
    tt.return
  }
}
