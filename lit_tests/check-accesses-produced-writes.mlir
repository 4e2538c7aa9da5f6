// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C"},check-accesses' | filecheck %s

// Stores into a produced tensor (C [256, 128] bf16, reduce-scatter) that write their whole box:
// masked by `index < argument` along each dim (a launch-time equality: a smaller M would leave
// rows unstored but counted) and a lower bound no index goes under; two stores of disjoint
// halves; stores on the two sides of a branch.

// CHECK: requirements = {M = 256, n_cols = 128}
// CHECK-LABEL: tt.func public @rows_masked

module {
  tt.func public @rows_masked(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>, %M: i32, %n_cols: i32) attributes {noinline = false} {
    %cst = arith.constant dense<128> : tensor<16x1xi32>
    %m = arith.constant dense<0> : tensor<1x128xi32>
    %c16_i32 = arith.constant 16 : i32
    %rows = tt.get_program_id x : i32
    %rows_0 = arith.muli %rows, %c16_i32 : i32
    %rows_1 = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %rows_2 = tt.splat %rows_0 : i32 -> tensor<16xi32>
    %rows_3 = arith.addi %rows_2, %rows_1 : tensor<16xi32>
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %m_4 = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
    %m_5 = tt.splat %M : i32 -> tensor<16x1xi32>
    %m_6 = arith.cmpi slt, %m_4, %m_5 : tensor<16x1xi32>
    %m_7 = tt.expand_dims %cols {axis = 0 : i32} : tensor<128xi32> -> tensor<1x128xi32>
    %m_8 = tt.splat %n_cols : i32 -> tensor<1x128xi32>
    %m_9 = arith.cmpi slt, %m_7, %m_8 : tensor<1x128xi32>
    %m_10 = tt.broadcast %m_6 : tensor<16x1xi1> -> tensor<16x128xi1>
    %m_11 = tt.broadcast %m_9 : tensor<1x128xi1> -> tensor<16x128xi1>
    %m_12 = arith.andi %m_10, %m_11 : tensor<16x128xi1>
    %m_13 = arith.cmpi sge, %m_7, %m : tensor<1x128xi32>
    %m_14 = tt.broadcast %m_13 : tensor<1x128xi1> -> tensor<16x128xi1>
    %m_15 = arith.andi %m_12, %m_14 : tensor<16x128xi1>
    %x = arith.muli %m_4, %cst : tensor<16x1xi32>
    %x_16 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<16x1x!tt.ptr<bf16>>
    %x_17 = tt.addptr %x_16, %x : tensor<16x1x!tt.ptr<bf16>>, tensor<16x1xi32>
    %x_18 = tt.broadcast %x_17 : tensor<16x1x!tt.ptr<bf16>> -> tensor<16x128x!tt.ptr<bf16>>
    %x_19 = tt.broadcast %m_7 : tensor<1x128xi32> -> tensor<16x128xi32>
    %x_20 = tt.addptr %x_18, %x_19 : tensor<16x128x!tt.ptr<bf16>>, tensor<16x128xi32>
    %x_21 = tt.load %x_20, %m_15 : tensor<16x128x!tt.ptr<bf16>>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<16x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %x : tensor<16x1x!tt.ptr<bf16>>, tensor<16x1xi32>
    %2 = tt.broadcast %1 : tensor<16x1x!tt.ptr<bf16>> -> tensor<16x128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %x_19 : tensor<16x128x!tt.ptr<bf16>>, tensor<16x128xi32>
    tt.store %3, %x_21, %m_15 : tensor<16x128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// CHECK-LABEL: tt.func public @two_halves

module {
  tt.func public @two_halves(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<2.000000e+00> : tensor<64xbf16>
    %c64_i32 = arith.constant 64 : i32
    %c128_i32 = arith.constant 128 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = arith.muli %row, %c128_i32 : i32
    %x_0 = tt.addptr %y_ptr, %x : !tt.ptr<bf16>, i32
    %x_1 = tt.splat %x_0 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %x_2 = tt.addptr %x_1, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x_3 = tt.load %x_2 : tensor<64x!tt.ptr<bf16>>
    %0 = tt.addptr %c_ptr, %x : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %2, %x_3 : tensor<64x!tt.ptr<bf16>>
    %3 = tt.addptr %0, %c64_i32 : !tt.ptr<bf16>, i32
    %4 = tt.splat %3 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %5 = tt.addptr %4, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %6 = arith.mulf %x_3, %cst : tensor<64xbf16>
    tt.store %5, %6 : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// CHECK-LABEL: tt.func public @branch_stores

module {
  tt.func public @branch_stores(%c_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>, %flag: i32) attributes {noinline = false} {
    %cst = arith.constant dense<2.000000e+00> : tensor<128xbf16>
    %c0_i32 = arith.constant 0 : i32
    %c128_i32 = arith.constant 128 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %x = arith.muli %row, %c128_i32 : i32
    %x_0 = tt.addptr %y_ptr, %x : !tt.ptr<bf16>, i32
    %x_1 = tt.splat %x_0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_2 = tt.addptr %x_1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_3 = tt.load %x_2 : tensor<128x!tt.ptr<bf16>>
    %0 = arith.cmpi sgt, %flag, %c0_i32 : i32
    scf.if %0 {
      %1 = tt.addptr %c_ptr, %x : !tt.ptr<bf16>, i32
      %2 = tt.splat %1 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
      tt.store %3, %x_3 : tensor<128x!tt.ptr<bf16>>
    } else {
      %1 = tt.addptr %c_ptr, %x : !tt.ptr<bf16>, i32
      %2 = tt.splat %1 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
      %4 = arith.mulf %x_3, %cst : tensor<128xbf16>
      tt.store %3, %4 : tensor<128x!tt.ptr<bf16>>
    }
    tt.return
  }
}

// -----

// One element per program, C[b, m] with b = pid_y, m = pid_x, masked by `m < n_cols`: a
// conjunct each dim reads (dim 0 as `b < b - m + n_cols`, which proves nothing); dim 1 reads
// it as `m < n_cols`, a launch-time equality. Before, the first reading refused the store
// (tests/corpus/unseen4.py's perm3d_rows_masked).
// CHECK: requirements = {n_cols = 128}
// CHECK-LABEL: tt.func public @one_element

module {
  tt.func public @one_element(%c_ptr: !tt.ptr<bf16>, %x: f32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %m = tt.get_program_id x : i32
    %b = tt.get_program_id y : i32
    %0 = arith.cmpi slt, %m, %n_cols : i32
    %1 = arith.muli %b, %stride : i32
    %2 = tt.addptr %c_ptr, %1 : !tt.ptr<bf16>, i32
    %3 = tt.addptr %2, %m : !tt.ptr<bf16>, i32
    %4 = arith.truncf %x : f32 to bf16
    tt.store %3, %4, %0 : !tt.ptr<bf16>
    tt.return
  }
}
