// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A"},append-abi-params,insert-waits' 2>&1 | filecheck %s

// When the analysis cannot derive the box a load of a communicated tensor reads, it must not
// skip the load (it would read a chunk without waiting for it): a CompileError names the load
// (its source location), what stopped the analysis (and where), and the annotation that fixes
// it: syncopate.language.hint_region2(ptr, lo0, hi0, lo1, hi1) right before the access.

// The base pointer goes through an integer: tt.ptr_to_int / tt.int_to_ptr.
// CHECK: syncopate-opt: error: copy.py:12:16: cannot derive which region of tensor 'A' (a_ptr) this tt.load reads: cannot follow pointer arithmetic through 'tt.int_to_ptr' (at copy.py:10:47). Add `syncopate.language.hint_region2(a_ptr, lo0, hi0, lo1, hi1)` right before it, giving the box [lo, hi) of the global tensor the access touches, or rewrite the address arithmetic with make_range/splat/+/*.

module {
  tt.func public @int_to_ptr(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rm_0 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_1 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_2 = arith.addi %rm_1, %rm_0 : tensor<64xi32>
    %base = tt.ptr_to_int %a_ptr : !tt.ptr<bf16> -> i64
    %base_3 = tt.int_to_ptr %base : i64 -> !tt.ptr<bf16> loc(#loc2)
    %a = tt.expand_dims %rm_2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %a_4 = arith.muli %a, %cst : tensor<64x1xi32>
    %a_5 = tt.splat %base_3 : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %a_6 = tt.addptr %a_5, %a_4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %a_7 = tt.expand_dims %rm_0 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %a_8 = tt.broadcast %a_6 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %a_9 = tt.broadcast %a_7 : tensor<1x64xi32> -> tensor<64x64xi32>
    %a_10 = tt.addptr %a_8, %a_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %a_11 = tt.load %a_10 : tensor<64x64x!tt.ptr<bf16>> loc(#loc3)
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %a_4 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %a_9 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %3, %a_11 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
#loc = loc("copy.py":10:47)
#loc1 = loc("copy.py":12:16)
#loc2 = loc("base"(#loc))
#loc3 = loc("a"(#loc1))

// -----

// A gather: the rows come from a tensor loaded from idx_ptr, which the analysis cannot see.
// CHECK: syncopate-opt: error: gather.py:13:16: cannot derive which region of tensor 'A' (a_ptr) this tt.load reads: cannot follow index arithmetic through 'tt.load' (at gather.py:11:19). Add `syncopate.language.hint_region2(a_ptr, lo0, hi0, lo1, hi1)` right before it

module {
  tt.func public @gather(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %idx_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rm_0 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_1 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_2 = arith.addi %rm_1, %rm_0 : tensor<64xi32>
    %rows = tt.splat %idx_ptr : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>>
    %rows_3 = tt.addptr %rows, %rm_2 : tensor<64x!tt.ptr<i32>>, tensor<64xi32>
    %rows_4 = tt.load %rows_3 : tensor<64x!tt.ptr<i32>> loc(#loc2)
    %a = tt.expand_dims %rows_4 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %a_5 = arith.muli %a, %cst : tensor<64x1xi32>
    %a_6 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %a_7 = tt.addptr %a_6, %a_5 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %a_8 = tt.expand_dims %rm_0 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %a_9 = tt.broadcast %a_7 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %a_10 = tt.broadcast %a_8 : tensor<1x64xi32> -> tensor<64x64xi32>
    %a_11 = tt.addptr %a_9, %a_10 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %a_12 = tt.load %a_11 : tensor<64x64x!tt.ptr<bf16>> loc(#loc3)
    %0 = tt.expand_dims %rm_2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %1 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %4 = tt.broadcast %3 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %5 = tt.addptr %4, %a_10 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %5, %a_12 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
#loc = loc("gather.py":11:19)
#loc1 = loc("gather.py":13:16)
#loc2 = loc("rows"(#loc))
#loc3 = loc("a"(#loc1))
