// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},insert-waits' 2>&1 | filecheck %s
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A"},partition-sms' 2>&1 | filecheck %s

// Every pass after append-abi-params finds the fused ABI's parameters by name; without them it
// says which pass to run first instead of failing somewhere inside.

// CHECK: syncopate-opt: error: the kernel's last parameters are not the syncopate ABI parameters (syn_flags, syn_peers, syn_table, syn_diag, syn_rank, syn_epoch, syn_timeout_ns): run append-abi-params first

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %n0: i32, %n1: i32, %n2: i32, %n3: i32, %n4: i32) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rk = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_0 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_1 = arith.addi %rm_0, %rk : tensor<64xi32>
    %a_ptrs = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %a_ptrs_2 = tt.addptr %a_ptrs, %rm_1 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %a = tt.load %a_ptrs_2 : tensor<64x!tt.ptr<bf16>>
    %c_ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %c_ptrs_3 = tt.addptr %c_ptrs, %rm_1 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %c_ptrs_3, %a : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}
