// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/moe-combine-w2.json" operands="c_ptr:Y,count_ptr:CNT"},check-accesses,append-abi-params,insert-signals' | filecheck %s

// The grouped GEMM (python/syncopate/kernels/grouped_gemm.py, BLOCK 16x32x16, bf16) producing
// the MoE combine's expert outputs (docs/moe.md section 7; Inputs/moe-combine-w2.json =
// moe_combine(2, 4, 16, 32): Y is produced, view="rank", its chunks have run-time extents).
// What the design relies on:
//  * check-accesses proves the store inside the rank's part by the mask's `offs_cm < M_out`
//    conjunct (a launch-time requirement M_out <= 64, the part's rows), although the other
//    conjunct, `offs_r < count`, bounds the row by a loaded value it cannot use;
//  * the store sits after the `first row < count` branch (the branch only computes the
//    accumulator), so every tile -- past the count too, storing nothing -- reaches the one
//    signal_region, which releases the tile's whole box (16 rows x 32 columns, offset by the
//    rank's part: syn_rank * 64): each chunk's PRODUCED flag reaches its static volume (512)
//    whatever the counts;
//  * the kernel waits for nothing (CNT is held whole by every rank before the launch).
// (The order of the operands of the box's `g * C` follows the polynomial's term order, which
// is not fixed from one run to the next: either is accepted.)

// CHECK:       syncopate.state = #syncopate.state<grid_axes = [0], upper_bounds = {M_out = 64, N = 32}, stores = [{tensor = "Y", {{.*}}, start = [{{[0-9]+}}, {{[0-9]+}}], extent = [16, 32]}], requirements = {N = 32}, produced = {"0" = 512, "1" = 512, "2" = 512, "3" = 512}, signals = 1>
// CHECK-LABEL: tt.func public @grouped_gemm_kernel
// CHECK-NOT:     syncopate.wait_region
// CHECK-NOT:     syncopate.signal_region
// CHECK:         %[[ACC:.+]] = scf.if
// CHECK:           scf.for
// CHECK-NOT:     syncopate.signal_region
// CHECK:         } else {
// CHECK-NEXT:      scf.yield %acc : tensor<16x32xf32>
// CHECK-NEXT:    }
// CHECK:         %[[BOUND:.+]] = arith.cmpi slt, %offs_cm_{{[0-9]+}}, %mask_c : tensor<16xi32>
// CHECK:         %[[VAL:.+]] = arith.truncf %[[ACC]] : tensor<16x32xf32> to tensor<16x32xbf16>
// CHECK-NEXT:    tt.store %{{.+}}, %[[VAL]], %{{.+}} : tensor<16x32x!tt.ptr<bf16>>
// CHECK-NEXT:    %[[G:.+]] = arith.muli {{%g, %C_[0-9]+|%C_[0-9]+, %g}} : i32
// CHECK-NEXT:    %[[BM:.+]] = arith.constant 16 : i32
// CHECK-NEXT:    %[[M0:.+]] = arith.muli %pid_m, %[[BM]] : i32
// CHECK-NEXT:    %[[LO:.+]] = arith.addi %[[G]], %[[M0]] : i32
// CHECK-NEXT:    %[[PART:.+]] = arith.constant 64 : i32
// CHECK-NEXT:    %[[OFF:.+]] = arith.muli %syn_rank, %[[PART]] : i32
// CHECK-NEXT:    %[[LO0:.+]] = arith.addi %[[LO]], %[[OFF]] : i32
// CHECK-NEXT:    %[[E0:.+]] = arith.constant 16 : i32
// CHECK-NEXT:    %[[HI0:.+]] = arith.addi %[[LO0]], %[[E0]] : i32
// CHECK-NEXT:    %[[BN:.+]] = arith.constant 32 : i32
// CHECK-NEXT:    %[[LO1:.+]] = arith.muli %pid_n, %[[BN]] : i32
// CHECK-NEXT:    %[[E1:.+]] = arith.constant 32 : i32
// CHECK-NEXT:    %[[HI1:.+]] = arith.addi %[[LO1]], %[[E1]] : i32
// CHECK-NEXT:    syncopate.signal_region %syn_flags, %syn_epoch, %syn_rank[%[[LO0]], %[[LO1]]] to[%[[HI0]], %[[HI1]]] {tensor = "Y"} : !tt.ptr<i32>
// CHECK-NEXT:    tt.return

module {
  tt.func public @grouped_gemm_kernel(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %count_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %C: i32 {tt.divisibility = 16 : i32}, %N: i32 {tt.divisibility = 16 : i32}, %K: i32 {tt.divisibility = 16 : i32}, %E: i32 {tt.divisibility = 16 : i32}, %M_out: i32, %a_base: i32, %a_seg: i32, %cnt_base: i32, %cnt_seg: i32, %stride_am: i32 {tt.divisibility = 16 : i32}, %stride_be: i32 {tt.divisibility = 16 : i32}, %stride_bk: i32 {tt.divisibility = 16 : i32}, %stride_cm: i32 {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %acc = arith.constant dense<0.000000e+00> : tensor<16x32xf32>
    %num_pid_n = arith.constant 31 : i32
    %c15_i32 = arith.constant 15 : i32
    %cst = arith.constant dense<0.000000e+00> : tensor<16x32xbf16>
    %cst_0 = arith.constant dense<0.000000e+00> : tensor<16x16xbf16>
    %c1_i32 = arith.constant 1 : i32
    %c32_i32 = arith.constant 32 : i32
    %c16_i32 = arith.constant 16 : i32
    %c0_i32 = arith.constant 0 : i32
    %C_1 = arith.maxsi %C, %c0_i32 : i32
    %a_base_2 = arith.maxsi %a_base, %c0_i32 : i32
    %a_seg_3 = arith.maxsi %a_seg, %c0_i32 : i32
    %cnt_base_4 = arith.maxsi %cnt_base, %c0_i32 : i32
    %cnt_seg_5 = arith.maxsi %cnt_seg, %c0_i32 : i32
    %pid = tt.get_program_id x : i32
    %num_pid_m = arith.addi %C_1, %c15_i32 : i32
    %num_pid_m_6 = arith.divsi %num_pid_m, %c16_i32 : i32
    %num_pid_n_7 = arith.addi %N, %num_pid_n : i32
    %num_pid_n_8 = arith.divsi %num_pid_n_7, %c32_i32 : i32
    %tiles_per_group = arith.muli %num_pid_m_6, %num_pid_n_8 : i32
    %g = arith.divsi %pid, %tiles_per_group : i32
    %t = arith.remsi %pid, %tiles_per_group : i32
    %pid_m = arith.divsi %t, %num_pid_n_8 : i32
    %pid_n = arith.remsi %t, %num_pid_n_8 : i32
    %seg = arith.divsi %g, %E : i32
    %expert = arith.remsi %g, %E : i32
    %count = arith.muli %seg, %cnt_seg_5 : i32
    %count_9 = arith.addi %cnt_base_4, %count : i32
    %count_10 = arith.addi %count_9, %expert : i32
    %count_11 = tt.addptr %count_ptr, %count_10 : !tt.ptr<i32>, i32
    %count_12 = tt.load %count_11 : !tt.ptr<i32>
    %count_13 = arith.minsi %count_12, %C_1 : i32
    %offs_r = arith.muli %pid_m, %c16_i32 : i32
    %offs_r_14 = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
    %offs_r_15 = tt.splat %offs_r : i32 -> tensor<16xi32>
    %offs_r_16 = arith.addi %offs_r_15, %offs_r_14 : tensor<16xi32>
    %offs_n = arith.muli %pid_n, %c32_i32 : i32
    %offs_n_17 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %offs_n_18 = tt.splat %offs_n : i32 -> tensor<32xi32>
    %offs_n_19 = arith.addi %offs_n_18, %offs_n_17 : tensor<32xi32>
    %mask_m = tt.splat %count_13 : i32 -> tensor<16xi32>
    %mask_m_20 = arith.cmpi slt, %offs_r_16, %mask_m : tensor<16xi32>
    %mask_n = tt.splat %N : i32 -> tensor<32xi32>
    %mask_n_21 = arith.cmpi slt, %offs_n_19, %mask_n : tensor<32xi32>
    %0 = arith.cmpi slt, %offs_r, %count_13 : i32
    %1 = scf.if %0 -> (tensor<16x32xf32>) {
      %row0 = arith.muli %seg, %a_seg_3 : i32
      %row0_34 = arith.addi %a_base_2, %row0 : i32
      %row0_35 = arith.addi %row0_34, %expert : i32
      %row0_36 = arith.muli %row0_35, %C_1 : i32
      %row0_37 = arith.addi %row0_36, %offs_r : i32
      %offs_am = tt.splat %row0_37 : i32 -> tensor<16xi32>
      %offs_am_38 = arith.addi %offs_am, %offs_r_14 : tensor<16xi32>
      %b_base = arith.muli %expert, %stride_be : i32
      %b_base_39 = tt.addptr %b_ptr, %b_base : !tt.ptr<bf16>, i32
      %8 = arith.addi %K, %c15_i32 : i32
      %9 = arith.divsi %8, %c16_i32 : i32
      %acc_40 = scf.for %k = %c0_i32 to %9 step %c1_i32 iter_args(%acc_41 = %acc) -> (tensor<16x32xf32>)  : i32 {
        %offs_kk = arith.muli %k, %c16_i32 : i32
        %offs_kk_42 = tt.splat %offs_kk : i32 -> tensor<16xi32>
        %offs_kk_43 = arith.addi %offs_kk_42, %offs_r_14 : tensor<16xi32>
        %mask_k = tt.splat %K : i32 -> tensor<16xi32>
        %mask_k_44 = arith.cmpi slt, %offs_kk_43, %mask_k : tensor<16xi32>
        %a_ptrs = tt.expand_dims %offs_am_38 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
        %a_ptrs_45 = tt.splat %stride_am : i32 -> tensor<16x1xi32>
        %a_ptrs_46 = arith.muli %a_ptrs, %a_ptrs_45 : tensor<16x1xi32>
        %a_ptrs_47 = tt.expand_dims %offs_kk_43 {axis = 0 : i32} : tensor<16xi32> -> tensor<1x16xi32>
        %a_ptrs_48 = tt.broadcast %a_ptrs_46 : tensor<16x1xi32> -> tensor<16x16xi32>
        %a_ptrs_49 = tt.broadcast %a_ptrs_47 : tensor<1x16xi32> -> tensor<16x16xi32>
        %a_ptrs_50 = arith.addi %a_ptrs_48, %a_ptrs_49 : tensor<16x16xi32>
        %a_ptrs_51 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<16x16x!tt.ptr<bf16>>
        %a_ptrs_52 = tt.addptr %a_ptrs_51, %a_ptrs_50 : tensor<16x16x!tt.ptr<bf16>>, tensor<16x16xi32>
        %b_ptrs = tt.expand_dims %offs_kk_43 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
        %b_ptrs_53 = tt.splat %stride_bk : i32 -> tensor<16x1xi32>
        %b_ptrs_54 = arith.muli %b_ptrs, %b_ptrs_53 : tensor<16x1xi32>
        %b_ptrs_55 = tt.expand_dims %offs_n_19 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
        %b_ptrs_56 = tt.broadcast %b_ptrs_54 : tensor<16x1xi32> -> tensor<16x32xi32>
        %b_ptrs_57 = tt.broadcast %b_ptrs_55 : tensor<1x32xi32> -> tensor<16x32xi32>
        %b_ptrs_58 = arith.addi %b_ptrs_56, %b_ptrs_57 : tensor<16x32xi32>
        %b_ptrs_59 = tt.splat %b_base_39 : !tt.ptr<bf16> -> tensor<16x32x!tt.ptr<bf16>>
        %b_ptrs_60 = tt.addptr %b_ptrs_59, %b_ptrs_58 : tensor<16x32x!tt.ptr<bf16>>, tensor<16x32xi32>
        %a = tt.expand_dims %mask_m_20 {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
        %a_61 = tt.expand_dims %mask_k_44 {axis = 0 : i32} : tensor<16xi1> -> tensor<1x16xi1>
        %a_62 = tt.broadcast %a : tensor<16x1xi1> -> tensor<16x16xi1>
        %a_63 = tt.broadcast %a_61 : tensor<1x16xi1> -> tensor<16x16xi1>
        %a_64 = arith.andi %a_62, %a_63 : tensor<16x16xi1>
        %a_65 = tt.load %a_ptrs_52, %a_64, %cst_0 : tensor<16x16x!tt.ptr<bf16>>
        %b = tt.expand_dims %mask_k_44 {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
        %b_66 = tt.expand_dims %mask_n_21 {axis = 0 : i32} : tensor<32xi1> -> tensor<1x32xi1>
        %b_67 = tt.broadcast %b : tensor<16x1xi1> -> tensor<16x32xi1>
        %b_68 = tt.broadcast %b_66 : tensor<1x32xi1> -> tensor<16x32xi1>
        %b_69 = arith.andi %b_67, %b_68 : tensor<16x32xi1>
        %b_70 = tt.load %b_ptrs_60, %b_69, %cst : tensor<16x32x!tt.ptr<bf16>>
        %acc_71 = tt.dot %a_65, %b_70, %acc_41, inputPrecision = tf32 : tensor<16x16xbf16> * tensor<16x32xbf16> -> tensor<16x32xf32>
        scf.yield %acc_71 : tensor<16x32xf32>
      }
      scf.yield %acc_40 : tensor<16x32xf32>
    } else {
      scf.yield %acc : tensor<16x32xf32>
    }
    %offs_cm = arith.muli %g, %C_1 : i32
    %offs_cm_22 = tt.splat %offs_cm : i32 -> tensor<16xi32>
    %offs_cm_23 = arith.addi %offs_cm_22, %offs_r_16 : tensor<16xi32>
    %mask_c = tt.splat %M_out : i32 -> tensor<16xi32>
    %mask_c_24 = arith.cmpi slt, %offs_cm_23, %mask_c : tensor<16xi32>
    %mask_c_25 = arith.andi %mask_m_20, %mask_c_24 : tensor<16xi1>
    %c_ptrs = tt.expand_dims %offs_cm_23 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
    %c_ptrs_26 = tt.splat %stride_cm : i32 -> tensor<16x1xi32>
    %c_ptrs_27 = arith.muli %c_ptrs, %c_ptrs_26 : tensor<16x1xi32>
    %c_ptrs_28 = tt.expand_dims %offs_n_19 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
    %c_ptrs_29 = tt.broadcast %c_ptrs_27 : tensor<16x1xi32> -> tensor<16x32xi32>
    %c_ptrs_30 = tt.broadcast %c_ptrs_28 : tensor<1x32xi32> -> tensor<16x32xi32>
    %c_ptrs_31 = arith.addi %c_ptrs_29, %c_ptrs_30 : tensor<16x32xi32>
    %c_ptrs_32 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<16x32x!tt.ptr<bf16>>
    %c_ptrs_33 = tt.addptr %c_ptrs_32, %c_ptrs_31 : tensor<16x32x!tt.ptr<bf16>>, tensor<16x32xi32>
    %2 = tt.expand_dims %mask_c_25 {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
    %3 = tt.expand_dims %mask_n_21 {axis = 0 : i32} : tensor<32xi1> -> tensor<1x32xi1>
    %4 = tt.broadcast %2 : tensor<16x1xi1> -> tensor<16x32xi1>
    %5 = tt.broadcast %3 : tensor<1x32xi1> -> tensor<16x32xi1>
    %6 = arith.andi %4, %5 : tensor<16x32xi1>
    %7 = arith.truncf %1 : tensor<16x32xf32> to tensor<16x32xbf16>
    tt.store %c_ptrs_33, %7, %6 : tensor<16x32x!tt.ptr<bf16>>
    tt.return
  }
}

