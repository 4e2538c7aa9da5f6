// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="x_ptr:A"},check-accesses' 2>&1 | filecheck %s

// Default deny (passes/memory_ops.py): every use of a communicated pointer is one the analysis
// understands, and an atomic is a write.  The schedule's tensor A is [512, 64] bf16,
// all-gathered on rows (consumed: its chunks are copied while the kernel runs).

// A row kernel that sums its rows of the gathered x, then bumps them: the atomic writes the
// tensor the comm programs are copying (it compiled before issue 28).
// CHECK: syncopate-opt: error: this tt.atomic_rmw (tl.atomic_add/max/min/and/or/xor/xchg) updates 'x_ptr' in place, but the schedule delivers tensor 'A' to the kernel

module {
  tt.func public @rowsum_then_bump(%x_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %cst = arith.constant dense<true> : tensor<64xi1>
    %cst_0 = arith.constant dense<1.000000e+02> : tensor<64xbf16>
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %offs = arith.muli %row, %c64_i32 : i32
    %offs_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %offs_2 = tt.splat %offs : i32 -> tensor<64xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<64xi32>
    %1 = tt.splat %x_ptr : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %offs_3 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %3 = tt.load %2 : tensor<64x!tt.ptr<bf16>>
    %4 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %5 = tt.addptr %4, %offs_3 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    tt.store %5, %3 : tensor<64x!tt.ptr<bf16>>
    %6 = tt.atomic_rmw fadd, acq_rel, gpu, %2, %cst_0, %cst : (tensor<64x!tt.ptr<bf16>>, tensor<64xbf16>, tensor<64xi1>) -> tensor<64xbf16>
    tt.return
  }
}

// -----

// A compare-and-swap is a read-modify-write too.
// CHECK: syncopate-opt: error: this tt.atomic_cas (tl.atomic_cas) updates 'x_ptr' in place, but the schedule delivers tensor 'A' to the kernel

module {
  tt.func public @claim_row(%x_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %zero = arith.constant 0.000000e+00 : bf16
    %one = arith.constant 1.000000e+00 : bf16
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %offs = arith.muli %row, %c64_i32 : i32
    %p = tt.addptr %x_ptr, %offs : !tt.ptr<bf16>, i32
    %old = tt.atomic_cas acq_rel, gpu, %p, %zero, %one : (!tt.ptr<bf16>, bf16, bf16) -> bf16
    %q = tt.addptr %y_ptr, %row : !tt.ptr<bf16>, i32
    tt.store %q, %old : !tt.ptr<bf16>
    tt.return
  }
}

// -----

// A noinline function that reads through the communicated pointer: the analysis cannot see
// the load inside it, so nothing would wait for the row it reads.
// CHECK: syncopate-opt: error: this tt.call takes a value computed from 'x_ptr', which operand= binds to the communicated tensor 'A': the callee may load or store through the pointer, which the analysis cannot see: let Triton inline the function (drop noinline=True), or pass the callee only values loaded before the call. The compiler must see every access of a communicated tensor to place its waits and signals

module {
  tt.func public @k_call(%x_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %row = tt.get_program_id x : i32
    %row_0 = arith.muli %row, %c64_i32 : i32
    %0 = tt.addptr %y_ptr, %row_0 : !tt.ptr<bf16>, i32
    %1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %2 = tt.splat %0 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %1 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %4 = tt.addptr %x_ptr, %row_0 : !tt.ptr<bf16>, i32
    %5 = tt.splat %4 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %6 = tt.addptr %5, %1 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %7 = tt.load %6 : tensor<64x!tt.ptr<bf16>>
    tt.store %3, %7 : tensor<64x!tt.ptr<bf16>>
    %8 = tt.call @first(%x_ptr, %row_0) : (!tt.ptr<bf16>, i32) -> bf16
    tt.store %0, %8 : !tt.ptr<bf16>
    tt.return
  }
  tt.func private @first(%p: !tt.ptr<bf16>, %row: i32) -> bf16 attributes {noinline = true} {
    %0 = tt.addptr %p, %row : !tt.ptr<bf16>, i32
    %1 = tt.load %0 : !tt.ptr<bf16>
    tt.return %1 : bf16
  }
}

// -----

// The addresses of the communicated rows stored to memory: any later access through them would
// be unseen.
// CHECK: syncopate-opt: error: this tt.store takes a value computed from 'x_ptr', which operand= binds to the communicated tensor 'A': it stores an address into the communicated tensor to memory

module {
  tt.func public @k_escape(%x_ptr: !tt.ptr<bf16>, %y_ptr: !tt.ptr<bf16>, %z_ptr: !tt.ptr<i64>) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %offs = tt.get_program_id x : i32
    %offs_0 = arith.muli %offs, %c64_i32 : i32
    %offs_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %offs_2 = tt.splat %offs_0 : i32 -> tensor<64xi32>
    %offs_3 = arith.addi %offs_2, %offs_1 : tensor<64xi32>
    %0 = tt.splat %y_ptr : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %offs_3 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %2 = tt.splat %x_ptr : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %offs_3 : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %4 = tt.load %3 : tensor<64x!tt.ptr<bf16>>
    tt.store %1, %4 : tensor<64x!tt.ptr<bf16>>
    %5 = tt.splat %z_ptr : !tt.ptr<i64> -> tensor<64x!tt.ptr<i64>>
    %6 = tt.addptr %5, %offs_3 : tensor<64x!tt.ptr<i64>>, tensor<64xi32>
    %7 = tt.ptr_to_int %3 : tensor<64x!tt.ptr<bf16>> -> tensor<64xi64>
    tt.store %6, %7 : tensor<64x!tt.ptr<i64>>
    tt.return
  }
}
