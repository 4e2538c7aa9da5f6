// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A"},append-abi-params,insert-waits' 2>&1 | filecheck %s

// A 3-d descriptor over the schedule's 2-d tensor A [256, 64] (a leading dim of 1 added): the
// analysis matches descriptor dims to tensor dims one to one, so it refuses rather than guess.

// CHECK: syncopate-opt: error: tma.py:31:20: cannot derive which region of tensor 'A' (a_ptr) this tt.descriptor_load reads: a 3-d descriptor over a 2-d tensor

module {
  tt.func public @tma_rank3(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %c16384_i64 = arith.constant 16384 : i64
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c1_i32, %c256_i32, %c64_i32], [%c16384_i64, %c64_i64, %c1_i64] : <bf16>, <tensor<1x64x64xbf16>>
    %pid = tt.get_program_id x : i32
    %a = arith.muli %pid, %c64_i32 : i32
    %a_0 = tt.descriptor_load %a_desc[%c0_i32, %a, %c0_i32] : !tt.tensordesc<tensor<1x64x64xbf16>> -> tensor<1x64x64xbf16> loc(#loc1)
    tt.return
  }
}
#loc1 = loc("a"("tma.py":31:20))
