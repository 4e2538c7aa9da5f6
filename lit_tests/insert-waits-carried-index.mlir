// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// A row *index tensor* carried by the loop (`rows += BM`, not a pointer): the evaluator takes
// it as its start plus the step times the iteration count, so iteration i reads rows
// [64 i, 64 i + 64) and waits for exactly those, inside the loop.

// CHECK-LABEL: tt.func public @carried_index_rows
// CHECK:         scf.for %i = %c0_i32 to %c8_i32 step %c1_i32 iter_args(%rows_1 = %cols)
// CHECK:           %[[IT:.+]] = arith.subi %i, %c0_i32 : i32
// CHECK-NEXT:      %[[S:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[LO:.+]] = arith.muli %[[IT]], %[[S]] : i32
// CHECK-NEXT:      %[[E:.+]] = arith.constant 64 : i32
// CHECK-NEXT:      %[[HI:.+]] = arith.addi %[[LO]], %[[E]] : i32
// CHECK:           syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %{{.+}}] to[%[[HI]], %{{.+}}] {tensor = "A"}

module {
  tt.func public @carried_index_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c8_i32 = arith.constant 8 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<64> : tensor<64xi32>
    %cst_0 = arith.constant dense<64> : tensor<64x1xi32>
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rows = scf.for %i = %c0_i32 to %c8_i32 step %c1_i32 iter_args(%rows_1 = %cols) -> (tensor<64xi32>)  : i32 {
      %x = tt.expand_dims %rows_1 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %x_2 = arith.muli %x, %cst_0 : tensor<64x1xi32>
      %x_3 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %x_4 = tt.addptr %x_3, %x_2 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %x_5 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %x_6 = tt.broadcast %x_4 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %x_7 = tt.broadcast %x_5 : tensor<1x64xi32> -> tensor<64x64xi32>
      %x_8 = tt.addptr %x_6, %x_7 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      %x_9 = tt.load %x_8 : tensor<64x64x!tt.ptr<bf16>>
      %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %1 = tt.addptr %0, %x_2 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
      %3 = tt.addptr %2, %x_7 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
      tt.store %3, %x_9 : tensor<64x64x!tt.ptr<bf16>>
      %rows_10 = arith.addi %rows_1, %cst : tensor<64xi32>
      scf.yield %rows_10 : tensor<64xi32>
    }
    tt.return
  }
}
