// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=ce},append-abi-params,insert-waits' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=ce},append-abi-params,insert-waits,resolve-chunks,lower-ce' | filecheck %s --check-prefix=LOWER

// The gather of access-unanalysable-error.mlir, annotated as the error asks:
//   hint_region2(a_ptr, pid * BM, pid * BM + BM, 0, 64)
// Triton keeps the hint as a call to a noinline function; the constexpr bounds (0, 64) are
// specialised into its mangled name, the runtime ones (pid * 64, pid * 64 + 64) are operands.
// The analysis takes the box from the hint, so the A load gets its wait (guarding its mask).

// CHECK-LABEL: tt.func public @gather_hint
// CHECK:         tt.call @"syncopate.language.syncopate_hint_region2__Pbf16_i32_i32__(3,)cconstexpr_0__(4,)cconstexpr_64_"(%a_ptr, %rm, %{{.+}})
// CHECK:         %[[BM:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[LO:.+]] = arith.muli %pid, %[[BM]] : i32
// CHECK-NEXT:    %[[EXT:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[HI:.+]] = arith.addi %[[LO]], %[[EXT]] : i32
// CHECK-NEXT:    %[[ZERO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[D:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %[[ZERO]]] to[%[[HI]], %[[D]]] {tensor = "A"} : !tt.ptr<i32>
// CHECK:         %a_{{[0-9]+}} = tt.load %a_{{[0-9]+}}, %{{.+}} : tensor<64x64x!tt.ptr<bf16>>

// The lowering erases the hint calls and their empty callees: Triton never sees them.
// LOWER-NOT:   syncopate_hint_region
// LOWER-LABEL: tt.func public @gather_hint
// LOWER-NOT:     syncopate.
// LOWER:         tt.return
// LOWER-NOT:   syncopate_hint_region

module {
  tt.func public @gather_hint(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %idx_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rm_0 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_1 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_2 = arith.addi %rm_1, %rm_0 : tensor<64xi32>
    %rows = tt.splat %idx_ptr : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>>
    %rows_3 = tt.addptr %rows, %rm_2 : tensor<64x!tt.ptr<i32>>, tensor<64xi32>
    %rows_4 = tt.load %rows_3 : tensor<64x!tt.ptr<i32>>
    %0 = arith.addi %rm, %c64_i32 : i32
    tt.call @"syncopate.language.syncopate_hint_region2__Pbf16_i32_i32__(3,)cconstexpr_0__(4,)cconstexpr_64_"(%a_ptr, %rm, %0) : (!tt.ptr<bf16>, i32, i32) -> ()
    %a = tt.expand_dims %rows_4 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %a_5 = arith.muli %a, %cst : tensor<64x1xi32>
    %a_6 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %a_7 = tt.addptr %a_6, %a_5 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %a_8 = tt.expand_dims %rm_0 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %a_9 = tt.broadcast %a_7 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %a_10 = tt.broadcast %a_8 : tensor<1x64xi32> -> tensor<64x64xi32>
    %a_11 = tt.addptr %a_9, %a_10 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %a_12 = tt.load %a_11 : tensor<64x64x!tt.ptr<bf16>>
    %1 = tt.expand_dims %rm_2 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %2 = arith.muli %1, %cst : tensor<64x1xi32>
    %3 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %4 = tt.addptr %3, %2 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %5 = tt.broadcast %4 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %6 = tt.addptr %5, %a_10 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %6, %a_12 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
  tt.func private @"syncopate.language.syncopate_hint_region2__Pbf16_i32_i32__(3,)cconstexpr_0__(4,)cconstexpr_64_"(%ptr: !tt.ptr<bf16>, %lo0: i32, %hi0: i32) attributes {noinline = true} {
    tt.return
  }
}
