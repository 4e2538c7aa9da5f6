// RUN: syncopate-opt %s --verify-triton -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4},fuse' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4},fuse{until=resolve-chunks}' | filecheck %s --check-prefix=UNTIL
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm},fuse{until=lower-ce}' 2>&1 | filecheck %s --check-prefix=OTHER

// `fuse` runs the compile's own pipeline (syncopate_mlir/pipeline.py: one xDSL PassPipeline
// built from the pass registry and the backend's tail, the one syncopate.compile and the
// emulator run) for the module's request: structurize-returns through self-advance-epoch.
// The result has no syncopate op left and parses and verifies in Triton.

// CHECK:       syncopate.state = #syncopate.state<grid_axes = [0, 1], remap = {A = {dim = 0, block = 64, tiles = 4, role = "consumer"}}, remap_checks = [{{.*}}], requirements = {stride_am = 64}, waits = 1, mode = push, reads_per_src = {"0" = 0, "1" = 0}>
// CHECK:       tt.func private @syncopate_wait_b32(
// CHECK-LABEL: tt.func public @gemm(
// CHECK-NEXT:    %epoch = tt.load %syn_epoch : !tt.ptr<i32>
// CHECK-NOT:     syncopate.
// CHECK:         tt.return

// fuse{until=PASS} stops after PASS, as the emulator does after resolve-chunks: the chunk-level
// ops are there, not yet lowered, and the epoch is still the i32 parameter.
// UNTIL:       tt.func public @gemm(
// UNTIL-SAME:    %syn_epoch: i32
// UNTIL:         syncopate.comm
// UNTIL:         syncopate.wait chunk
// UNTIL-NOT:     tt.func private @syncopate_wait_b32

// A pass the backend's pipeline does not have is named with the pipeline's passes.
// OTHER: syncopate-opt: error: no pass 'lower-ce' in the sm pipeline (structurize-returns, check-accesses, append-abi-params, tile-remap, insert-waits, insert-signals, partition-sms, resolve-chunks, lower-sm, insert-trace, load-epoch, self-advance-epoch)

module {
  tt.func public @gemm(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %stride_am: i32) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %cst_0 = arith.constant dense<64> : tensor<32x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid_m = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %rm = arith.muli %pid_m, %c64_i32 : i32
    %rm_1 = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_2 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_3 = arith.addi %rm_2, %rm_1 : tensor<64xi32>
    %rn = arith.muli %pid_n, %c64_i32 : i32
    %rn_4 = tt.splat %rn : i32 -> tensor<64xi32>
    %rn_5 = arith.addi %rn_4, %rm_1 : tensor<64xi32>
    %rk = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %acc_6 = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_7 = %acc) -> (tensor<64x64xf32>)  : i32 {
      %a = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
      %a_8 = tt.splat %stride_am : i32 -> tensor<64x1xi32>
      %a_9 = arith.muli %a, %a_8 : tensor<64x1xi32>
      %a_10 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
      %a_11 = tt.addptr %a_10, %a_9 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
      %a_12 = tt.splat %k : i32 -> tensor<32xi32>
      %a_13 = arith.addi %a_12, %rk : tensor<32xi32>
      %a_14 = tt.expand_dims %a_13 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
      %a_15 = tt.broadcast %a_11 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x32x!tt.ptr<bf16>>
      %a_16 = tt.broadcast %a_14 : tensor<1x32xi32> -> tensor<64x32xi32>
      %a_17 = tt.addptr %a_15, %a_16 : tensor<64x32x!tt.ptr<bf16>>, tensor<64x32xi32>
      %a_18 = tt.load %a_17 : tensor<64x32x!tt.ptr<bf16>>
      %b = tt.expand_dims %a_13 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
      %b_19 = arith.muli %b, %cst_0 : tensor<32x1xi32>
      %b_20 = tt.splat %b_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
      %b_21 = tt.addptr %b_20, %b_19 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
      %b_22 = tt.expand_dims %rn_5 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
      %b_23 = tt.broadcast %b_21 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
      %b_24 = tt.broadcast %b_22 : tensor<1x64xi32> -> tensor<32x64xi32>
      %b_25 = tt.addptr %b_23, %b_24 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
      %b_26 = tt.load %b_25 : tensor<32x64x!tt.ptr<bf16>>
      %acc_27 = tt.dot %a_18, %b_26, %acc_7, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
      scf.yield %acc_27 : tensor<64x64xf32>
    }
    %0 = tt.expand_dims %rm_3 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x1x!tt.ptr<bf16>>
    %3 = tt.addptr %2, %1 : tensor<64x1x!tt.ptr<bf16>>, tensor<64x1xi32>
    %4 = tt.expand_dims %rn_5 {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %5 = tt.broadcast %3 : tensor<64x1x!tt.ptr<bf16>> -> tensor<64x64x!tt.ptr<bf16>>
    %6 = tt.broadcast %4 : tensor<1x64xi32> -> tensor<64x64xi32>
    %7 = tt.addptr %5, %6 : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %8 = arith.truncf %acc_6 : tensor<64x64xf32> to tensor<64x64xbf16>
    tt.store %7, %8 : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
