// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm},append-abi-params' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=nvshmem},append-abi-params,append-abi-params' | filecheck %s --check-prefix=NVSHMEM

// append-abi-params appends the seven parameters of the fused ABI (docs/fused-abi.md), in order,
// after the user's parameters; pointers are 16-byte aligned like Triton marks them.  The
// function type grows with them; the body is unchanged.

// CHECK-LABEL: tt.func public @copy(
// CHECK-SAME:    %a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32},
// CHECK-SAME:    %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32},
// CHECK-SAME:    %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32},
// CHECK-SAME:    %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32},
// CHECK-SAME:    %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32},
// CHECK-SAME:    %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64)
// CHECK-SAME:    attributes {noinline = false} {
// CHECK-NEXT:    arith.constant dense<64> : tensor<64x1xi32>
// CHECK-NOT:     syncopate.
// CHECK:         tt.store %c_ptrs{{.*}}, %a : tensor<64x64x!tt.ptr<bf16>>
// CHECK-NEXT:    tt.return

// NVSHMEM signals are 64-bit, so the flag array is *i64 there; running the pass twice adds
// nothing (it recognises the parameters by name).
// NVSHMEM-LABEL: tt.func public @copy(
// NVSHMEM-SAME:    %syn_flags: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64)
// NVSHMEM-NOT:     %syn_flags_

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rk = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_0 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_1 = arith.addi %rm_0, %rk : tensor<64xi32>
    %0 = tt.expand_dims %rm_1 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.expand_dims %rk {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %3 = tt.broadcast %1 : tensor<64x1xi32> -> tensor<64x64xi32>
    %4 = tt.broadcast %2 : tensor<1x64xi32> -> tensor<64x64xi32>
    %offs = arith.addi %3, %4 : tensor<64x64xi32>
    %a_ptrs = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
    %a_ptrs_2 = tt.addptr %a_ptrs, %offs : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %a = tt.load %a_ptrs_2 : tensor<64x64x!tt.ptr<bf16>>
    %c_ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
    %c_ptrs_3 = tt.addptr %c_ptrs, %offs : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %c_ptrs_3, %a : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
