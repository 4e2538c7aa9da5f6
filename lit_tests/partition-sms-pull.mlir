// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=sm comm-programs=2},append-abi-params,partition-sms' | filecheck %s

// Pull mode: each destination rank's comm programs read the chunks from the source's buffer,
// so the comm plan ends with syncopate.drain (wait until the peers have read ours before the
// launch may complete).  Every comm program adds 1 to the source's CONSUMED per chunk it reads
// from: 2 chunks x 2 comm programs = 4 reads per source rank and epoch.
// Axis 1 program ids are not shifted (only axis 0 carries the comm programs).

// CHECK:       syncopate.state = #syncopate.state<mode = pull, reads_per_src = {"0" = 4, "1" = 4}>
// CHECK-LABEL: tt.func public @copy2d
// CHECK:           syncopate.transfer %a_ptr, %[[PID:.+]], %[[N:.+]], %syn_epoch, %syn_rank, %syn_flags {chunk = 3 : i32, operand = 1 : i32}
// CHECK-NEXT:      syncopate.drain %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags {reads = 0 : i32} : !tt.ptr<i32>
// CHECK-NEXT:    }
// CHECK-NEXT:    }
// CHECK-NEXT:  } else {
// CHECK:         %pid_m = tt.get_program_id x : i32
// CHECK-NEXT:    %[[M:.+]] = arith.subi %pid_m, %[[N]] : i32
// CHECK-NEXT:    %pid_n = tt.get_program_id y : i32
// CHECK-NEXT:    %rm = arith.muli %[[M]], %c64_i32 : i32
// CHECK-NEXT:    %rn = arith.muli %pid_n, %c32_i32 : i32

module {
  tt.func public @copy2d(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c32_i32 = arith.constant 32 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %rm = arith.muli %pid_m, %c64_i32 : i32
    %rn = arith.muli %pid_n, %c32_i32 : i32
    %rm_0 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_1 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_2 = arith.addi %rm_1, %rm_0 : tensor<64xi32>
    %rn_3 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %rn_4 = tt.splat %rn : i32 -> tensor<32xi32>
    %rn_5 = arith.addi %rn_4, %rn_3 : tensor<32xi32>
    %0 = tt.expand_dims %rm_2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.expand_dims %rn_5 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
    %3 = tt.broadcast %1 : tensor<64x1xi32> -> tensor<64x32xi32>
    %4 = tt.broadcast %2 : tensor<1x32xi32> -> tensor<64x32xi32>
    %offs = arith.addi %3, %4 : tensor<64x32xi32>
    %a_ptrs = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x32x!tt.ptr<bf16>>
    %a_ptrs_6 = tt.addptr %a_ptrs, %offs : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
    %a = tt.load %a_ptrs_6 : tensor<64x32x!tt.ptr<bf16>>
    %c_ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x32x!tt.ptr<bf16>>
    %c_ptrs_7 = tt.addptr %c_ptrs, %offs : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
    tt.store %c_ptrs_7, %a : tensor<64x32x!tt.ptr<bf16>>
    tt.return
  }
}
