// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4},append-abi-params,partition-sms' | filecheck %s

// partition-sms makes programs 0..3 of axis 0 comm programs (on a grid of more than one
// dimension only those with program_id(1) == program_id(2) == 0; the others are idle): they run the comm plan in a
// syncopate.comm region (publish ENTRY, then one transfer per chunk in schedule order: step,
// then id), and every other program runs the original body, which sees
// program_id(0) - 4 and num_programs(0) - 4: exactly the grid the kernel was written for.
// Push mode: nobody reads a peer's buffer, so no drain.

// CHECK:       syncopate.state = #syncopate.state<mode = push, reads_per_src = {"0" = 0, "1" = 0}>
// CHECK-LABEL: tt.func public @tma_persistent
// CHECK-NEXT:    %[[PID:.+]] = tt.get_program_id x : i32
// CHECK-NEXT:    %[[N:.+]] = arith.constant 4 : i32
// CHECK-NEXT:    %[[IS_COMM:.+]] = arith.cmpi slt, %[[PID]], %[[N]] : i32
// CHECK-NEXT:    %[[ZERO:.+]] = arith.constant 0 : i32
// CHECK-NEXT:    %[[Y:.+]] = tt.get_program_id y : i32
// CHECK-NEXT:    %[[Y0:.+]] = arith.cmpi eq, %[[Y]], %[[ZERO]] : i32
// CHECK-NEXT:    %[[Z:.+]] = tt.get_program_id z : i32
// CHECK-NEXT:    %[[Z0:.+]] = arith.cmpi eq, %[[Z]], %[[ZERO]] : i32
// CHECK-NEXT:    %[[LEAD:.+]] = arith.andi %[[Y0]], %[[Z0]] : i1
// CHECK-NEXT:    scf.if %[[IS_COMM]] {
// CHECK-NEXT:    scf.if %[[LEAD]] {
// CHECK-NEXT:      syncopate.comm %[[PID]], %[[N]] {
// CHECK-NEXT:        syncopate.enter %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags : !tt.ptr<i32>
// CHECK-NEXT:        syncopate.transfer %a_ptr, %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags {chunk = 0 : i32, operand = 1 : i32} : !tt.ptr<bf16>, !tt.ptr<i32>
// CHECK-NEXT:        syncopate.transfer %a_ptr, %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags {chunk = 2 : i32, operand = 1 : i32} : !tt.ptr<bf16>, !tt.ptr<i32>
// CHECK-NEXT:        syncopate.transfer %a_ptr, %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags {chunk = 1 : i32, operand = 1 : i32} : !tt.ptr<bf16>, !tt.ptr<i32>
// CHECK-NEXT:        syncopate.transfer %a_ptr, %[[PID]], %[[N]], %syn_epoch, %syn_rank, %syn_flags {chunk = 3 : i32, operand = 1 : i32} : !tt.ptr<bf16>, !tt.ptr<i32>
// Then comm program 0 of each destination waits for the chunks pushed to it: the launch ends
// only with all of its data in place (rank 0 receives chunks 0 and 1, rank 1 chunks 2 and 3).
// CHECK:             %[[T:.+]] = arith.muli %syn_epoch, %{{.+}} : i32
// CHECK:             syncopate.wait chunk %syn_flags[%{{.+}}], target %[[T]] {chunk = 0 : i32}
// CHECK:             syncopate.wait chunk %syn_flags[%{{.+}}], target %[[T]] {chunk = 1 : i32}
// CHECK:             syncopate.wait chunk %syn_flags[%{{.+}}], target %[[T]] {chunk = 2 : i32}
// CHECK:             syncopate.wait chunk %syn_flags[%{{.+}}], target %[[T]] {chunk = 3 : i32}
// CHECK:         } else {
// CHECK:           %start = tt.get_program_id x : i32
// CHECK-NEXT:      %[[START:.+]] = arith.subi %start, %[[N]] : i32
// CHECK-NEXT:      %nprog = tt.get_num_programs x : i32
// CHECK-NEXT:      %[[NPROG:.+]] = arith.subi %nprog, %[[N]] : i32
// CHECK-NEXT:      scf.for %tile_id = %[[START]] to %c4_i32 step %[[NPROG]] : i32 {
// CHECK:             tt.descriptor_store
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

module {
  tt.func public @tma_persistent(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<64x64xf32>
    %c32_i32 = arith.constant 32 : i32
    %c4_i32 = arith.constant 4 : i32
    %c0_i32 = arith.constant 0 : i32
    %c256_i32 = arith.constant 256 : i32
    %c64_i32 = arith.constant 64 : i32
    %c64_i64 = arith.constant 64 : i64
    %c1_i64 = arith.constant 1 : i64
    %a_desc = tt.make_tensor_descriptor %a_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x32xbf16>>
    %b_desc = tt.make_tensor_descriptor %b_ptr, [%c64_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<32x64xbf16>>
    %c_desc = tt.make_tensor_descriptor %c_ptr, [%c256_i32, %c64_i32], [%c64_i64, %c1_i64] : <bf16>, <tensor<64x64xbf16>>
    %start = tt.get_program_id x : i32
    %nprog = tt.get_num_programs x : i32
    scf.for %tile_id = %start to %c4_i32 step %nprog  : i32 {
      %off_m = arith.muli %tile_id, %c64_i32 : i32
      %acc = scf.for %k = %c0_i32 to %c64_i32 step %c32_i32 iter_args(%acc_0 = %cst) -> (tensor<64x64xf32>)  : i32 {
        %a = tt.descriptor_load %a_desc[%off_m, %k] : !tt.tensordesc<tensor<64x32xbf16>> -> tensor<64x32xbf16>
        %b = tt.descriptor_load %b_desc[%k, %c0_i32] : !tt.tensordesc<tensor<32x64xbf16>> -> tensor<32x64xbf16>
        %acc_1 = tt.dot %a, %b, %acc_0, inputPrecision = tf32 : tensor<64x32xbf16> * tensor<32x64xbf16> -> tensor<64x64xf32>
        scf.yield %acc_1 : tensor<64x64xf32>
      }
      %0 = arith.truncf %acc : tensor<64x64xf32> to tensor<64x64xbf16>
      tt.descriptor_store %c_desc[%off_m, %c0_i32], %0 : !tt.tensordesc<tensor<64x64xbf16>>, tensor<64x64xbf16>
    }
    tt.return
  }
}
