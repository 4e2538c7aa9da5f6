// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},append-abi-params,insert-waits' | filecheck %s

// A tile's rows read last first, rows = 64 pid + (63 - [0, 64)): the lane axis runs backwards
// (step -1), so the box starts 63 rows below the first lane's row -- still [64 pid, 64 pid + 64).

// CHECK-LABEL: tt.func public @reversed_lanes
// CHECK:         %[[S:[0-9]+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[LO:[0-9]+]] = arith.muli %pid, %[[S]] : i32
// CHECK-NEXT:    %[[E:[0-9]+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[HI:[0-9]+]] = arith.addi %[[LO]], %[[E]] : i32
// CHECK:         syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %{{.+}}] to[%[[HI]], %{{.+}}] {tensor = "A"}

module {
  tt.func public @reversed_lanes(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %rows = arith.constant dense<63> : tensor<64xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rows_0 = arith.muli %pid, %c64_i32 : i32
    %rows_1 = arith.subi %rows, %cols : tensor<64xi32>
    %rows_2 = tt.splat %rows_0 : i32 -> tensor<64xi32>
    %rows_3 = arith.addi %rows_2, %rows_1 : tensor<64xi32>
    %x = tt.expand_dims %rows_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %x_4 = arith.muli %x, %cst : tensor<64x1xi32>
    %x_5 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %x_6 = tt.addptr %x_5, %x_4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %x_7 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %x_8 = tt.broadcast %x_6 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %x_9 = tt.broadcast %x_7 : tensor<1x64xi32> -> tensor<64x64xi32>
    %x_10 = tt.addptr %x_8, %x_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %x_11 = tt.load %x_10 : tensor<64x64x!tt.ptr<bf16>>
    %0 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %x_4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %x_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %3, %x_11 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
