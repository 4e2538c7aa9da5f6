// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// Row tiles visited in reverse order, rows (7 - pid) * 64 + [0, 64): the index is a
// subtraction, which the evaluator follows like a sum -- the wait covers rows
// [448 - 64 * pid, 512 - 64 * pid).

// CHECK-LABEL: tt.func public @reversed_rows
// CHECK:         %[[M:.+]] = arith.constant -64 : i32
// CHECK-NEXT:    %[[P:.+]] = arith.muli %pid, %[[M]] : i32
// CHECK-NEXT:    %[[C:.+]] = arith.constant 448 : i32
// CHECK-NEXT:    %[[LO:.+]] = arith.addi %[[P]], %[[C]] : i32
// CHECK-NEXT:    %[[E:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[HI:.+]] = arith.addi %[[LO]], %[[E]] : i32
// CHECK:         syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %{{.+}}] to[%[[HI]], %{{.+}}] {tensor = "A"}

module {
  tt.func public @reversed_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %c7_i32 = arith.constant 7 : i32
    %pid = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rows = arith.subi %c7_i32, %pid : i32
    %rows_0 = arith.muli %rows, %c64_i32 : i32
    %rows_1 = tt.splat %rows_0 : i32 -> tensor<64xi32>
    %rows_2 = arith.addi %rows_1, %cols : tensor<64xi32>
    %x = tt.expand_dims %rows_2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %x_3 = arith.muli %x, %cst : tensor<64x1xi32>
    %x_4 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %x_5 = tt.addptr %x_4, %x_3 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %x_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %x_7 = tt.broadcast %x_5 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %x_8 = tt.broadcast %x_6 : tensor<1x64xi32> -> tensor<64x64xi32>
    %x_9 = tt.addptr %x_7, %x_8 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %x_10 = tt.load %x_9 : tensor<64x64x!tt.ptr<bf16>>
    %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %x_3 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %x_8 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %3, %x_10 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
