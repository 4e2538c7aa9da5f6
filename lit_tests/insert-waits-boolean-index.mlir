// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// The row of a program from a comparison turned into an integer, t = (pid >= 4) * 4 + pid % 4
// (tests/corpus/unseen4.py's bool_split_rows). The zero-extended boolean is 0 or 1; the i1
// itself, sign-extended where the wait rebuilds the row, is 0 or -1: the wait used to test
// rows 4 * sext(pid >= 4) + pid % 4, the row 8 before the tile's, and the tile read its rows
// before they arrived. The extended value is the index's leaf, not the i1.

// CHECK-LABEL: tt.func public @bool_rows
// CHECK:         %[[B:.+]] = arith.extui %t : i1 to i32
// CHECK-NOT:     arith.extsi
// CHECK:         %[[F:.+]] = arith.constant 4 : i32
// CHECK-NEXT:    %[[S:.+]] = arith.muli %[[B]], %[[F]] : i32
// CHECK-NEXT:    %[[LO:.+]] = arith.addi %[[S]], %t_{{[0-9]+}} : i32
// CHECK:         syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %{{.+}}] to[

module {
  tt.func public @bool_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %c4_i32 = arith.constant 4 : i32
    %pid = tt.get_program_id x : i32
    %t = arith.cmpi sge, %pid, %c4_i32 : i32
    %t_0 = arith.extui %t : i1 to i32
    %t_1 = arith.muli %t_0, %c4_i32 : i32
    %t_2 = arith.remsi %pid, %c4_i32 : i32
    %t_3 = arith.addi %t_1, %t_2 : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = tt.splat %n_cols : i32 -> tensor<64xi32>
    %x_4 = arith.cmpi slt, %cols, %x : tensor<64xi32>
    %x_5 = arith.muli %t_3, %stride : i32
    %x_6 = tt.addptr %inp_ptr, %x_5 : !tt.ptr<bf16>, i32
    %x_7 = tt.splat %x_6 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %x_8 = tt.addptr %x_7, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x_9 = tt.load %x_8, %x_4 : tensor<64x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x_5 : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %2, %x_9, %x_4 : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}

