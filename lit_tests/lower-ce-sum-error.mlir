// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=ce},append-abi-params,insert-signals,resolve-chunks,lower-ce' 2>&1 | filecheck %s

// The copy engine cannot add: a reduce-scatter schedule (sum chunks) is refused with the
// chunks it cannot move and the backend to use instead.

// CHECK: syncopate-opt: error: the ce backend moves chunks with the copy engine, which cannot add: chunks [0, 1] reduce with 'sum'. Use backend='sm' (or 'nvshmem') for reduce-scatter and all-reduce schedules.

module {
  tt.func public @store(%c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<128xbf16>
    %c128_i32 = arith.constant 128 : i32
    %pid = tt.get_program_id x : i32
    %row = arith.muli %pid, %c128_i32 : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %offs = tt.splat %row : i32 -> tensor<128xi32>
    %offs_0 = arith.addi %offs, %cols : tensor<128xi32>
    %ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %ptrs_1 = tt.addptr %ptrs, %offs_0 : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %ptrs_1, %cst : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}
