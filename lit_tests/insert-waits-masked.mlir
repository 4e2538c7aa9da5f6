// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=ce},append-abi-params,insert-waits' | filecheck %s

// A masked, ragged kernel (rows >= M are neither read nor written) with no loop: the wait goes
// right before the load and its token is and-ed into the existing mask (mask & token == 0),
// which keeps the load after the wait.  The mask only shrinks the box: the wait still names the
// whole tile, the chunk tests of the lowering clip it to the tensor.

// CHECK-LABEL: tt.func public @ragged
// CHECK:         %mask_{{[0-9]+}} = arith.cmpi slt, %mask, %mask_{{[0-9]+}} : tensor<64x1xi32>
// CHECK:         %[[MASK:.+]] = tt.broadcast %mask_{{[0-9]+}} : tensor<64x1xi1> -> tensor<64x64xi1>
// CHECK-NEXT:    %[[BM:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[LO:.+]] = arith.muli %pid, %[[BM]] : i32
// CHECK:         %[[TOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[LO]], %{{.+}}] to[%{{.+}}, %{{.+}}] {tensor = "A"} : !tt.ptr<i32>
// CHECK-NEXT:    %[[C0:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[OK:.+]] = arith.cmpi eq, %[[TOK]], %[[C0]] : i32
// CHECK-NEXT:    %[[OKT:.+]] = tt.splat %[[OK]] : i1 -> tensor<64x64xi1>
// CHECK-NEXT:    %[[BOTH:.+]] = arith.andi %[[MASK]], %[[OKT]] : tensor<64x64xi1>
// CHECK-NEXT:    %a_{{[0-9]+}} = tt.load %a_{{[0-9]+}}, %[[BOTH]], %a : tensor<64x64x!tt.ptr<bf16>>
// The store keeps its own mask.
// CHECK:         tt.store %{{.+}}, %{{.+}}, %[[MASK]] : tensor<64x64x!tt.ptr<bf16>>

module {
  tt.func public @ragged(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %M: i32) attributes {noinline = false} {
    %a = arith.constant dense<0.000000e+00> : tensor<64x64xbf16>
    %cst = arith.constant dense<2.000000e+00> : tensor<64x64xbf16>
    %cst_0 = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rm_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_2 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_3 = arith.addi %rm_2, %rm_1 : tensor<64xi32>
    %mask = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %mask_4 = tt.splat %M : i32 -> tensor<64x1xi32>
    %mask_5 = arith.cmpi slt, %mask, %mask_4 : tensor<64x1xi32>
    %a_6 = arith.muli %mask, %cst_0 : tensor<64x1xi32>
    %a_7 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %a_8 = tt.addptr %a_7, %a_6 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %a_9 = tt.expand_dims %rm_1 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %a_10 = tt.broadcast %a_8 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %a_11 = tt.broadcast %a_9 : tensor<1x64xi32> -> tensor<64x64xi32>
    %a_12 = tt.addptr %a_10, %a_11 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %a_13 = tt.broadcast %mask_5 : tensor<64x1xi1> -> tensor<64x64xi1>
    %a_14 = tt.load %a_12, %a_13, %a : tensor<64x64x!tt.ptr<bf16>>
    %0 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %1 = tt.addptr %0, %a_6 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %2 = tt.broadcast %1 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %a_11 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %4 = arith.mulf %a_14, %cst : tensor<64x64xbf16>
    tt.store %3, %4, %a_13 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
