// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// Nested loops: the outer loop advances the row pointer (a loop-carried pointer, so the rows read
// depend on the outer loop's iteration count); the inner loop walks column blocks, which no
// chunk cuts.  The wait goes in front of the inner loop -- once per row block, not once per
// column block -- and its token feeds the inner loop's lower bound.

// CHECK-LABEL: tt.func public @nested_rows
// CHECK:         scf.for %i = %c0_i32 to %c8_i32 step %c1_i32 iter_args({{.*}} = %inp_ptr)
// CHECK:           %[[T:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[{{.*}}] to[{{.*}}] {tensor = "A"}
// CHECK:           %[[LB:.+]] = arith.addi %c0_i32, %[[T]] : i32
// CHECK-NEXT:      scf.for %j = %[[LB]] to %c2_i32 step %c1_i32 : i32 {
// CHECK-NOT:         syncopate.wait_region
// CHECK:             tt.load
// CHECK:           scf.yield

module {
  tt.func public @nested_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %stride: i32) attributes {noinline = false} {
    %c2_i32 = arith.constant 2 : i32
    %c1_i32 = arith.constant 1 : i32
    %c8_i32 = arith.constant 8 : i32
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %c32_i32 = arith.constant 32 : i32
    %rows = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %a = scf.for %i = %c0_i32 to %c8_i32 step %c1_i32 iter_args(%a_0 = %inp_ptr) -> (!tt.ptr<bf16>)  : i32 {
      scf.for %j = %c0_i32 to %c2_i32 step %c1_i32  : i32 {
        %cols = arith.muli %j, %c32_i32 : i32
        %cols_3 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
        %cols_4 = tt.splat %cols : i32 -> tensor<32xi32>
        %cols_5 = arith.addi %cols_4, %cols_3 : tensor<32xi32>
        %x = tt.expand_dims %rows {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
        %x_6 = tt.splat %stride : i32 -> tensor<64x1xi32>
        %x_7 = arith.muli %x, %x_6 : tensor<64x1xi32>
        %x_8 = tt.splat %a_0 : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
        %x_9 = tt.addptr %x_8, %x_7 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
        %x_10 = tt.expand_dims %cols_5 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
        %x_11 = tt.broadcast %x_9 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x32x!tt.ptr<bf16>>
        %x_12 = tt.broadcast %x_10 : tensor<1x32xi32> -> tensor<64x32xi32>
        %x_13 = tt.addptr %x_11, %x_12 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
        %x_14 = tt.load %x_13 : tensor<64x32x!tt.ptr<bf16>>
        %0 = arith.muli %i, %c64_i32 : i32
        %1 = tt.splat %0 : i32 -> tensor<64xi32>
        %2 = arith.addi %1, %rows : tensor<64xi32>
        %3 = tt.expand_dims %2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
        %4 = arith.muli %3, %x_6 : tensor<64x1xi32>
        %5 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
        %6 = tt.addptr %5, %4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
        %7 = tt.broadcast %6 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x32x!tt.ptr<bf16>>
        %8 = tt.addptr %7, %x_12 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
        tt.store %8, %x_14 : tensor<64x32x!tt.ptr<bf16>>
      }
      %a_1 = arith.muli %stride, %c64_i32 : i32
      %a_2 = tt.addptr %a_0, %a_1 : !tt.ptr<bf16>, i32
      scf.yield %a_2 : !tt.ptr<bf16>
    }
    tt.return
  }
}
