// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag-rs2.json" operands="a_ptr:A,c_ptr:C"},check-accesses' 2>&1 | filecheck %s

// A kernel reading A [256, 64] (all-gathered) and storing C [256, 128] (reduce-scattered), both
// masked by `cols < K`: the read needs K <= 64, the produced store K == 128 (its mask must
// reach the end of the row, or the signal counts columns nothing stores). No launch does both.

// CHECK: syncopate-opt: error: a store of a produced tensor needs the launch argument K == 128 (its mask `index < K` must reach the end of the dim it bounds), but an access of another communicated tensor needs K <= 64: no launch satisfies both

module {
  tt.func public @shared_bound(%a_ptr: !tt.ptr<bf16>, %c_ptr: !tt.ptr<bf16>, %K: i32) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %x = tt.splat %K : i32 -> tensor<128xi32>
    %x_0 = arith.cmpi slt, %cols, %x : tensor<128xi32>
    %x_1 = arith.muli %row, %c64_i32 : i32
    %x_2 = tt.addptr %a_ptr, %x_1 : !tt.ptr<bf16>, i32
    %x_3 = tt.splat %x_2 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_4 = tt.addptr %x_3, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_5 = tt.load %x_4, %x_0 : tensor<128x!tt.ptr<bf16>>
    %0 = arith.muli %row, %c128_i32 : i32
    %1 = tt.addptr %c_ptr, %0 : !tt.ptr<bf16>, i32
    %2 = tt.splat %1 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %3, %x_5, %x_0 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}
