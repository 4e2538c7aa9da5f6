// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,tile-remap' | filecheck %s

// Two reads of the gathered tensor at two different tile coordinates, i = pid // 2 and
// j = pid % 2: no single coordinate to renumber, so the tile order is left as written (the waits
// keep it correct); remapping either one would move one read and not the other.

// CHECK:     "tile-remap: no single tile coordinate for A dim 0; tile order left as written"
// CHECK-LABEL: tt.func public @two_coordinates
// CHECK-NOT: syncopate.remap

module {
  tt.func public @two_coordinates(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %c2_i32 = arith.constant 2 : i32
    %pid = tt.get_program_id x : i32
    %i = arith.divsi %pid, %c2_i32 : i32
    %j = arith.remsi %pid, %c2_i32 : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %ri = arith.muli %i, %c64_i32 : i32
    %ri_0 = tt.splat %ri : i32 -> tensor<64xi32>
    %ri_1 = arith.addi %ri_0, %cols : tensor<64xi32>
    %rj = arith.muli %j, %c64_i32 : i32
    %rj_2 = tt.splat %rj : i32 -> tensor<64xi32>
    %rj_3 = arith.addi %rj_2, %cols : tensor<64xi32>
    %m = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %m_4 = tt.splat %n_cols : i32 -> tensor<1x64xi32>
    %m_5 = arith.cmpi slt, %m, %m_4 : tensor<1x64xi32>
    %x = tt.expand_dims %ri_1 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %x_6 = tt.splat %M : i32 -> tensor<64x1xi32>
    %x_7 = arith.cmpi slt, %x, %x_6 : tensor<64x1xi32>
    %x_8 = tt.broadcast %x_7 : tensor<64x1xi1> -> tensor<64x64xi1>
    %x_9 = tt.broadcast %m_5 : tensor<1x64xi1> -> tensor<64x64xi1>
    %x_10 = arith.andi %x_8, %x_9 : tensor<64x64xi1>
    %x_11 = tt.splat %stride : i32 -> tensor<64x1xi32>
    %x_12 = arith.muli %x, %x_11 : tensor<64x1xi32>
    %x_13 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %x_14 = tt.addptr %x_13, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %x_15 = tt.broadcast %x_14 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %x_16 = tt.broadcast %m : tensor<1x64xi32> -> tensor<64x64xi32>
    %x_17 = tt.addptr %x_15, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %x_18 = tt.load %x_17, %x_10 : tensor<64x64x!tt.ptr<bf16>>
    %y = tt.expand_dims %rj_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %y_19 = arith.cmpi slt, %y, %x_6 : tensor<64x1xi32>
    %y_20 = tt.broadcast %y_19 : tensor<64x1xi1> -> tensor<64x64xi1>
    %y_21 = arith.andi %y_20, %x_9 : tensor<64x64xi1>
    %y_22 = arith.muli %y, %x_11 : tensor<64x1xi32>
    %y_23 = tt.addptr %x_13, %y_22 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %y_24 = tt.broadcast %y_23 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %y_25 = tt.addptr %y_24, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %y_26 = tt.load %y_25, %y_21 : tensor<64x64x!tt.ptr<bf16>>
    %rows = arith.muli %pid, %c64_i32 : i32
    %rows_27 = tt.splat %rows : i32 -> tensor<64xi32>
    %rows_28 = arith.addi %rows_27, %cols : tensor<64xi32>
    %0 = tt.expand_dims %rows_28 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.cmpi slt, %0, %x_6 : tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1xi1> -> tensor<64x64xi1>
    %3 = arith.andi %2, %x_9 : tensor<64x64xi1>
    %4 = arith.muli %0, %x_11 : tensor<64x1xi32>
    %5 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %6 = tt.addptr %5, %4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %7 = tt.broadcast %6 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %8 = tt.addptr %7, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %9 = arith.addf %x_18, %y_26 : tensor<64x64xbf16>
    tt.store %8, %9, %3 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
