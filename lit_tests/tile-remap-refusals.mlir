// RUN: syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,tile-remap' | filecheck %s

// tile-remap rewrites a tile coordinate only when the rewrite is a consistent renumbering of
// tiles (docs/soundness.md); otherwise it leaves the order as written and says why in the
// remarks (the waits keep the kernel correct in any order).

// A gather: the row read is a loaded value.  Remapping it through the per-rank table made rank
// 1 read other rows than the index names; it must stay as loaded.
// CHECK:     "tile-remap: A dim 0 not remapped: the tile coordinate depends on a value loaded from memory (only pure functions of program ids and tile loops are remapped); tile order left as written"
// CHECK-NOT: syncopate.remap
// CHECK-LABEL: tt.func public @row_gather

module {
  tt.func public @row_gather(%inp_ptr: !tt.ptr<bf16>, %idx_ptr: !tt.ptr<i32>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32, %stride_in: i32, %stride_out: i32) attributes {noinline = false} {
    %row = tt.get_program_id x : i32
    %src = tt.addptr %idx_ptr, %row : !tt.ptr<i32>, i32
    %src_0 = tt.load %src : !tt.ptr<i32>
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = tt.splat %n_cols : i32 -> tensor<64xi32>
    %x_1 = arith.cmpi slt, %cols, %x : tensor<64xi32>
    %x_2 = arith.muli %src_0, %stride_in : i32
    %x_3 = tt.addptr %inp_ptr, %x_2 : !tt.ptr<bf16>, i32
    %x_4 = tt.splat %x_3 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %x_5 = tt.addptr %x_4, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x_6 = tt.load %x_5, %x_1 : tensor<64x!tt.ptr<bf16>>
    %0 = arith.muli %row, %stride_out : i32
    %1 = tt.addptr %out_ptr, %0 : !tt.ptr<bf16>, i32
    %2 = tt.splat %1 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %3, %x_6, %x_1 : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// The block-pointer GEMM idiom `i = pid // n; j = pid - i * n`: the column coordinate j is
// computed from the row coordinate i.  Replacing i everywhere moved j off the grid on rank 1
// (its output was never written); the remap is refused.
// CHECK:     "tile-remap: A dim 0 not remapped: the tt.load uses a value computed from the tile coordinate (remapping would move that coordinate too); tile order left as written"
// CHECK-NOT: syncopate.remap
// CHECK-LABEL: tt.func public @bp_gemm_derived

module {
  tt.func public @bp_gemm_derived(%inp_ptr: !tt.ptr<bf16>, %b_ptr: !tt.ptr<bf16>, %c_ptr: !tt.ptr<bf16>, %M: i32, %N: i32, %K: i32, %stride_am: i32, %stride_ak: i32, %stride_bk: i32, %stride_bn: i32, %stride_cm: i32, %stride_cn: i32) attributes {noinline = false} {
    %c32_i64 = arith.constant 32 : i64
    %cst = arith.constant dense<0.000000e+00> : tensor<32x64xbf16>
    %cst_0 = arith.constant dense<0> : tensor<1x64xi64>
    %cst_1 = arith.constant dense<0> : tensor<32x1xi64>
    %cst_2 = arith.constant dense<0.000000e+00> : tensor<64x32xbf16>
    %cst_3 = arith.constant dense<0> : tensor<1x32xi64>
    %cst_4 = arith.constant dense<0> : tensor<64x1xi64>
    %c0_i64 = arith.constant 0 : i64
    %c31_i32 = arith.constant 31 : i32
    %acc = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %n_tiles_n = arith.constant 63 : i32
    %c1_i32 = arith.constant 1 : i32
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %n_tiles_n_5 = arith.addi %N, %n_tiles_n : i32
    %n_tiles_n_6 = arith.divsi %n_tiles_n_5, %c64_i32 : i32
    %i = arith.divsi %pid, %n_tiles_n_6 : i32
    %j = arith.muli %i, %n_tiles_n_6 : i32
    %j_7 = arith.subi %pid, %j : i32
    %a_bp = arith.muli %i, %c64_i32 : i32
    %a_bp_8 = arith.extsi %M : i32 to i64
    %a_bp_9 = arith.extsi %K : i32 to i64
    %a_bp_10 = arith.extsi %stride_am : i32 to i64
    %a_bp_11 = arith.extsi %stride_ak : i32 to i64
    %a_bp_12 = arith.extsi %a_bp : i32 to i64
    %b_bp = arith.muli %j_7, %c64_i32 : i32
    %b_bp_13 = arith.extsi %N : i32 to i64
    %b_bp_14 = arith.extsi %stride_bk : i32 to i64
    %b_bp_15 = arith.extsi %stride_bn : i32 to i64
    %b_bp_16 = arith.extsi %b_bp : i32 to i64
    %0 = arith.addi %K, %c31_i32 : i32
    %1 = arith.divsi %0, %c32_i32 : i32
    %acc_17:3 = scf.for %acc_19 = %c0_i32 to %1 step %c1_i32 iter_args(%a_bp_20 = %c0_i64, %b_bp_21 = %c0_i64, %acc_22 = %acc) -> (i64, i64, tensor<64x64xf32>)  : i32 {
      %a = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x32x!tt.ptr<bf16>>
      %a_23 = tt.splat %a_bp_12 : i64 -> tensor<64xi64>
      %a_24 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
      %a_25 = arith.extsi %a_24 : tensor<64xi32> to tensor<64xi64>
      %a_26 = arith.addi %a_23, %a_25 : tensor<64xi64>
      %a_27 = tt.expand_dims %a_26 {axis = 1 : i32} : tensor<64xi64> -> tensor<64x1xi64>
      %a_28 = tt.splat %a_bp_10 : i64 -> tensor<64x1xi64>
      %a_29 = arith.muli %a_27, %a_28 : tensor<64x1xi64>
      %a_30 = tt.broadcast %a_29 : tensor<64x1xi64> -> tensor<64x32xi64>
      %a_31 = tt.splat %a_bp_20 : i64 -> tensor<32xi64>
      %a_32 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
      %a_33 = arith.extsi %a_32 : tensor<32xi32> to tensor<32xi64>
      %a_34 = arith.addi %a_31, %a_33 : tensor<32xi64>
      %a_35 = tt.expand_dims %a_34 {axis = 0 : i32} : tensor<32xi64> -> tensor<1x32xi64>
      %a_36 = tt.splat %a_bp_11 : i64 -> tensor<1x32xi64>
      %a_37 = arith.muli %a_35, %a_36 : tensor<1x32xi64>
      %a_38 = tt.broadcast %a_37 : tensor<1x32xi64> -> tensor<64x32xi64>
      %a_39 = arith.addi %a_30, %a_38 : tensor<64x32xi64>
      %a_40 = tt.addptr %a, %a_39 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi64>
      %a_41 = arith.cmpi sge, %a_27, %cst_4 : tensor<64x1xi64>
      %a_42 = tt.splat %a_bp_8 : i64 -> tensor<64x1xi64>
      %a_43 = arith.cmpi slt, %a_27, %a_42 : tensor<64x1xi64>
      %a_44 = arith.andi %a_41, %a_43 : tensor<64x1xi1>
      %a_45 = tt.broadcast %a_44 : tensor<64x1xi1> -> tensor<64x32xi1>
      %a_46 = arith.cmpi sge, %a_35, %cst_3 : tensor<1x32xi64>
      %a_47 = tt.splat %a_bp_9 : i64 -> tensor<1x32xi64>
      %a_48 = arith.cmpi slt, %a_35, %a_47 : tensor<1x32xi64>
      %a_49 = arith.andi %a_46, %a_48 : tensor<1x32xi1>
      %a_50 = tt.broadcast %a_49 : tensor<1x32xi1> -> tensor<64x32xi1>
      %a_51 = arith.andi %a_45, %a_50 : tensor<64x32xi1>
      %a_52 = tt.load %a_40, %a_51, %cst_2 : tensor<64x32x!tt.ptr<bf16>>
      %b = tt.splat %b_ptr : !tt.ptr<bf16> -> tensor<32x64x!tt.ptr<bf16>>
      %b_53 = tt.splat %b_bp_21 : i64 -> tensor<32xi64>
      %b_54 = arith.addi %b_53, %a_33 : tensor<32xi64>
      %b_55 = tt.expand_dims %b_54 {axis = 1 : i32} : tensor<32xi64> -> tensor<32x1xi64>
      %b_56 = tt.splat %b_bp_14 : i64 -> tensor<32x1xi64>
      %b_57 = arith.muli %b_55, %b_56 : tensor<32x1xi64>
      %b_58 = tt.broadcast %b_57 : tensor<32x1xi64> -> tensor<32x64xi64>
      %b_59 = tt.splat %b_bp_16 : i64 -> tensor<64xi64>
      %b_60 = arith.addi %b_59, %a_25 : tensor<64xi64>
      %b_61 = tt.expand_dims %b_60 {axis = 0 : i32} : tensor<64xi64> -> tensor<1x64xi64>
      %b_62 = tt.splat %b_bp_15 : i64 -> tensor<1x64xi64>
      %b_63 = arith.muli %b_61, %b_62 : tensor<1x64xi64>
      %b_64 = tt.broadcast %b_63 : tensor<1x64xi64> -> tensor<32x64xi64>
      %b_65 = arith.addi %b_58, %b_64 : tensor<32x64xi64>
      %b_66 = tt.addptr %b, %b_65 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi64>
      %b_67 = arith.cmpi sge, %b_55, %cst_1 : tensor<32x1xi64>
      %b_68 = tt.splat %a_bp_9 : i64 -> tensor<32x1xi64>
      %b_69 = arith.cmpi slt, %b_55, %b_68 : tensor<32x1xi64>
      %b_70 = arith.andi %b_67, %b_69 : tensor<32x1xi1>
      %b_71 = tt.broadcast %b_70 : tensor<32x1xi1> -> tensor<32x64xi1>
      %b_72 = arith.cmpi sge, %b_61, %cst_0 : tensor<1x64xi64>
      %b_73 = tt.splat %b_bp_13 : i64 -> tensor<1x64xi64>
      %b_74 = arith.cmpi slt, %b_61, %b_73 : tensor<1x64xi64>
      %b_75 = arith.andi %b_72, %b_74 : tensor<1x64xi1>
      %b_76 = tt.broadcast %b_75 : tensor<1x64xi1> -> tensor<32x64xi1>
      %b_77 = arith.andi %b_71, %b_76 : tensor<32x64xi1>
      %b_78 = tt.load %b_66, %b_77, %cst : tensor<32x64x!tt.ptr<bf16>>
      %acc_79 = tt.dot %a_52, %b_78, %acc_22, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
      %a_bp_80 = arith.addi %a_bp_20, %c32_i64 : i64
      %b_bp_81 = arith.addi %b_bp_21, %c32_i64 : i64
      scf.yield %a_bp_80, %b_bp_81, %acc_79 : i64, i64, tensor<64x64xf32>
    }
    %c_bp = arith.extsi %stride_cm : i32 to i64
    %c_bp_18 = arith.extsi %stride_cn : i32 to i64
    %2 = arith.truncf %acc_17#2 : tensor<64x64xf32> to tensor<64x64xbf16>
    %3 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
    %4 = tt.splat %a_bp_12 : i64 -> tensor<64xi64>
    %5 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %6 = arith.extsi %5 : tensor<64xi32> to tensor<64xi64>
    %7 = arith.addi %4, %6 : tensor<64xi64>
    %8 = tt.expand_dims %7 {axis = 1 : i32} : tensor<64xi64> -> tensor<64x1xi64>
    %9 = tt.splat %c_bp : i64 -> tensor<64x1xi64>
    %10 = arith.muli %8, %9 : tensor<64x1xi64>
    %11 = tt.broadcast %10 : tensor<64x1xi64> -> tensor<64x64xi64>
    %12 = tt.splat %b_bp_16 : i64 -> tensor<64xi64>
    %13 = arith.addi %12, %6 : tensor<64xi64>
    %14 = tt.expand_dims %13 {axis = 0 : i32} : tensor<64xi64> -> tensor<1x64xi64>
    %15 = tt.splat %c_bp_18 : i64 -> tensor<1x64xi64>
    %16 = arith.muli %14, %15 : tensor<1x64xi64>
    %17 = tt.broadcast %16 : tensor<1x64xi64> -> tensor<64x64xi64>
    %18 = arith.addi %11, %17 : tensor<64x64xi64>
    %19 = tt.addptr %3, %18 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi64>
    %20 = arith.cmpi sge, %8, %cst_4 : tensor<64x1xi64>
    %21 = tt.splat %a_bp_8 : i64 -> tensor<64x1xi64>
    %22 = arith.cmpi slt, %8, %21 : tensor<64x1xi64>
    %23 = arith.andi %20, %22 : tensor<64x1xi1>
    %24 = tt.broadcast %23 : tensor<64x1xi1> -> tensor<64x64xi1>
    %25 = arith.cmpi sge, %14, %cst_0 : tensor<1x64xi64>
    %26 = tt.splat %b_bp_13 : i64 -> tensor<1x64xi64>
    %27 = arith.cmpi slt, %14, %26 : tensor<1x64xi64>
    %28 = arith.andi %25, %27 : tensor<1x64xi1>
    %29 = tt.broadcast %28 : tensor<1x64xi1> -> tensor<64x64xi1>
    %30 = arith.andi %24, %29 : tensor<64x64xi1>
    tt.store %19, %2, %30 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
