// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' 2>&1 | filecheck %s

// A grid-stride walk whose row *index tensor* is carried by a while loop (scf.while): the
// evaluator follows inductions of scf.for only, so it cannot bound the rows read and the access
// is refused (a scalar carried the same way is a leaf the waits evaluate at run time, and is
// accepted: `while_rows` in tests/corpus/unseen.py).

// CHECK: syncopate-opt: error: cannot derive which region of tensor 'A' (inp_ptr) this tt.load reads: a loop-carried pointer or index tensor that is not carried by an scf.for.

module {
  tt.func public @while_index_tensor(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %M: i32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xbf16>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %nprog = tt.get_num_programs x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rows = arith.muli %pid, %c64_i32 : i32
    %rows_0 = tt.splat %rows : i32 -> tensor<64xi32>
    %rows_1 = arith.addi %rows_0, %cols : tensor<64xi32>
    %rows_2 = scf.while (%rows_3 = %rows_1) : (tensor<64xi32>) -> tensor<64xi32> {
      %0 = tt.reshape %rows_3 allow_reorder : tensor<64xi32> -> tensor<64xi32>
      %1 = "tt.reduce"(%0) <{axis = 0 : i32}> ({
      ^bb0(%arg6: i32, %arg7: i32):
        %3 = arith.minsi %arg6, %arg7 : i32
        tt.reduce.return %3 : i32
      }) : (tensor<64xi32>) -> i32
      %2 = arith.cmpi slt, %1, %M : i32
      scf.condition(%2) %rows_3 : tensor<64xi32>
    } do {
    ^bb0(%rows_3: tensor<64xi32>):
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
      %x_18 = tt.load %x_17, %m_11, %cst : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_12 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_16 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_18, %m_11 : tensor<64x64x!tt.ptr<bf16>>
      %rows_19 = arith.muli %nprog, %c64_i32 : i32
      %rows_20 = tt.splat %rows_19 : i32 -> tensor<64xi32>
      %rows_21 = arith.addi %rows_3, %rows_20 : tensor<64xi32>
      scf.yield %rows_21 : tensor<64xi32>
    }
    tt.return
  }
}
