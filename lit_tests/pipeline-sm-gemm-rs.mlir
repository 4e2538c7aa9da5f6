// RUN: syncopate-opt %s --verify-triton -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=sm comm-programs=4},append-abi-params,tile-remap,insert-waits,insert-signals,partition-sms,resolve-chunks,lower-sm' | filecheck %s

// The whole sm pipeline on a persistent TMA GEMM + reduce-scatter of C [256, 128]: the tiles
// that leave first run first (remap of the row coordinate), each tile counts its elements
// into PRODUCED after its bulk store has completed (cp.async.bulk.wait_group, barrier, masked
// release atomics sharing one barrier), and the comm programs wait for PRODUCED on both sides
// of a sum chunk before they add the peer's partial tile into the local one in fp32.

// CHECK-LABEL: tt.func public @tma_persistent_rs(
// CHECK:         scf.if %{{.+}} {
// Comm programs: the sum transfer of chunk 0 runs on its destination (rank 1).
// CHECK:           tt.call @syncopate_wait_b32(
// CHECK:           scf.for
// CHECK:             %[[THEIRS:.+]] = arith.extf %{{.+}} : tensor<128x128xbf16> to tensor<128x128xf32>
// CHECK-NEXT:        %[[MINE:.+]] = arith.extf %{{.+}} : tensor<128x128xbf16> to tensor<128x128xf32>
// CHECK-NEXT:        %[[SUM:.+]] = arith.addf %[[THEIRS]], %[[MINE]] : tensor<128x128xf32>
// CHECK-NEXT:        %[[OUT:.+]] = arith.truncf %[[SUM]] : tensor<128x128xf32> to tensor<128x128xbf16>
// CHECK-NEXT:        tt.store %{{.+}}, %[[OUT]], %{{.+}} : tensor<128x128x!tt.ptr<bf16>>
// CHECK:         } else {
// CHECK:           %start = tt.get_program_id x : i32
// CHECK-NEXT:      %[[START:.+]] = arith.subi %start, %{{.+}} : i32
// CHECK-NEXT:      %nprog = tt.get_num_programs x : i32
// CHECK-NEXT:      %[[NPROG:.+]] = arith.subi %nprog, %{{.+}} : i32
// CHECK-NEXT:      scf.for %tile_id = %[[START]] to %c8_i32 step %[[NPROG]] : i32 {
// CHECK:             %off_m = arith.divsi %tile_id, %c2_i32 : i32
// With one chunk per shard every rank computes its bands in natural order (each band is both
// sent and reduced into at step 0), so tile-remap leaves the order alone: no select chain.
// CHECK-NOT:         arith.select
// CHECK:             %[[OFF_M:.+]] = arith.muli %off_m, %c64_i32 : i32
// CHECK:             tt.descriptor_store %c_desc[%[[OFF_M]], %{{.+}}], %{{.+}}
// CHECK:             tt.elementwise_inline_asm "cp.async.bulk.wait_group 0;
// CHECK-NEXT:        "gpu.barrier"() : () -> ()
// CHECK-NEXT:        tt.atomic_rmw add, release, sys, %{{.+}}, %{{.+}}, %{{.+}} : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK-NEXT:        %{{.+}} = arith.constant 6 : i32
// CHECK-NEXT:        tt.addptr %syn_flags
// CHECK-NEXT:        arith.constant 0 : i32
// CHECK-NEXT:        arith.cmpi ne
// CHECK-NEXT:        tt.atomic_rmw add, release, sys, %{{.+}}, %{{.+}}, %{{.+}} : (!tt.ptr<i32>, i32, i1) -> i32
// CHECK-NEXT:      }
// CHECK-NOT:     syncopate.
// CHECK:         tt.return

module {
  tt.func public @tma_persistent_rs(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %c8_i32 = arith.constant 8 : i32
    %c2_i32 = arith.constant 2 : i32
    %c128_i64 = arith.constant 128 : i64
    %c128_i32 = arith.constant 128 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %a_desc = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc_0 = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%a_desc, %c1_i64] : <bf16>, <tensor<64x32xbf16>>
    %b_desc = tt.make_tensor_descriptor %b_ptr, [%c64_i32, %c128_i32], [%c128_i64, %c1_i64] : <bf16>, <tensor<32x64xbf16>>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c128_i32], [%c128_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %start = tt.get_program_id x : i32
    %nprog = tt.get_num_programs x : i32
    scf.for %tile_id = %start to %c8_i32 step %nprog  : i32 {
      %off_m = arith.divsi %tile_id, %c2_i32 : i32
      %off_m_1 = arith.muli %off_m, %c64_i32 : i32
      %off_n = arith.remsi %tile_id, %c2_i32 : i32
      %off_n_2 = arith.muli %off_n, %c64_i32 : i32
      %acc = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_3 = %cst) -> (tensor<64x64xf32>)  : i32 {
        %a = tt.descriptor_load %a_desc_0[%off_m_1, %k] : !tt.tensordesc<tensor<64x32xbf16>> -> tensor<64x32xbf16>
        %b = tt.descriptor_load %b_desc[%k, %off_n_2] : !tt.tensordesc<tensor<32x64xbf16>> -> tensor<32x64xbf16>
        %acc_4 = tt.dot %a, %b, %acc_3, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
        scf.yield %acc_4 : tensor<64x64xf32>
      }
      %0 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>
      tt.descriptor_store %c_desc[%off_m_1, %off_n_2], %0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    }
    tt.return
  }
}
