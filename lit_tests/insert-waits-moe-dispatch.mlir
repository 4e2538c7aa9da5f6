// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/moe-dispatch-w2.json" operands="a_ptr:X,count_ptr:CNT"},append-abi-params,insert-waits' | filecheck %s

// The grouped GEMM (python/syncopate/kernels/grouped_gemm.py, BLOCK 16x32x16, bf16) fused with
// the MoE dispatch schedule (docs/moe.md; Inputs/moe-dispatch-w2.json = moe_dispatch(2, 4, 16,
// 32)). What the design relies on:
//  * the count load waits for the one CNT element it reads (its box is computed from the
//    group's opaque index scalars: cnt_base + seg * cnt_seg + expert, one element);
//  * the tile's wait for its rows of X is INSIDE the `first row < count` branch, before the K
//    loop (the box does not change with k), so a tile past the count waits for nothing but its
//    count, and a tile with rows waits for exactly its group's capacity box (16 rows of one
//    group, all 32 columns): the data chunk that carries its expert's tokens.

// CHECK-LABEL: tt.func public @grouped_gemm_kernel
// CHECK:         %[[CLO:[0-9]+]] = arith.addi %{{[0-9]+}}, %expert : i32
// CHECK:         %[[CHI:[0-9]+]] = arith.addi %[[CLO]], %{{.+}} : i32
// CHECK-NEXT:    %[[CTOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%[[CLO]]] to[%[[CHI]]] {tensor = "CNT"}
// CHECK:         %[[COUNT:.+]] = tt.load %count_{{[0-9]+}}, %{{.+}} : !tt.ptr<i32>
// CHECK-NOT:     syncopate.wait_region
// CHECK:         scf.if
// CHECK:         %[[XTOK:.+]] = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%{{.+}}, %{{.+}}] to[%{{.+}}, %{{.+}}] {tensor = "X"}
// CHECK-NEXT:    %[[LB:.+]] = arith.addi %c0_i32, %[[XTOK]] : i32
// CHECK-NEXT:    scf.for %k = %[[LB]] to
// CHECK-NOT:     syncopate.wait_region
// CHECK:         tt.return

module {
  tt.func public @grouped_gemm_kernel(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %b_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %count_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %C: i32 {tt.divisibility = 16 : i32}, %N: i32 {tt.divisibility = 16 : i32}, %K: i32 {tt.divisibility = 16 : i32}, %E: i32 {tt.divisibility = 16 : i32}, %a_base: i32, %a_seg: i32, %cnt_base: i32, %cnt_seg: i32, %stride_am: i32 {tt.divisibility = 16 : i32}, %stride_be: i32 {tt.divisibility = 16 : i32}, %stride_bk: i32 {tt.divisibility = 16 : i32}, %stride_cm: i32 {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<0.000000e+00> : tensor<16x32xf32>
    %num_pid_n = arith.constant 31 : i32
    %c15_i32 = arith.constant 15 : i32
    %cst_0 = arith.constant dense<0.000000e+00> : tensor<16x32xbf16>
    %cst_1 = arith.constant dense<0.000000e+00> : tensor<16x16xbf16>
    %c1_i32 = arith.constant 1 : i32
    %c32_i32 = arith.constant 32 : i32
    %c16_i32 = arith.constant 16 : i32
    %c0_i32 = arith.constant 0 : i32
    %C_2 = arith.maxsi %C, %c0_i32 : i32
    %a_base_3 = arith.maxsi %a_base, %c0_i32 : i32
    %a_seg_4 = arith.maxsi %a_seg, %c0_i32 : i32
    %cnt_base_5 = arith.maxsi %cnt_base, %c0_i32 : i32
    %cnt_seg_6 = arith.maxsi %cnt_seg, %c0_i32 : i32
    %pid = tt.get_program_id x : i32
    %num_pid_m = arith.addi %C_2, %c15_i32 : i32
    %num_pid_m_7 = arith.divsi %num_pid_m, %c16_i32 : i32
    %num_pid_n_8 = arith.addi %N, %num_pid_n : i32
    %num_pid_n_9 = arith.divsi %num_pid_n_8, %c32_i32 : i32
    %tiles_per_group = arith.muli %num_pid_m_7, %num_pid_n_9 : i32
    %g = arith.divsi %pid, %tiles_per_group : i32
    %t = arith.remsi %pid, %tiles_per_group : i32
    %pid_m = arith.divsi %t, %num_pid_n_9 : i32
    %pid_n = arith.remsi %t, %num_pid_n_9 : i32
    %seg = arith.divsi %g, %E : i32
    %expert = arith.remsi %g, %E : i32
    %count = arith.muli %seg, %cnt_seg_6 : i32
    %count_10 = arith.addi %cnt_base_5, %count : i32
    %count_11 = arith.addi %count_10, %expert : i32
    %count_12 = tt.addptr %count_ptr, %count_11 : !tt.ptr<i32>, i32
    %count_13 = tt.load %count_12 : !tt.ptr<i32>
    %count_14 = arith.minsi %count_13, %C_2 : i32
    %0 = arith.muli %pid_m, %c16_i32 : i32
    %1 = arith.cmpi slt, %0, %count_14 : i32
    scf.if %1 {
      %row0 = arith.muli %seg, %a_seg_4 : i32
      %row0_15 = arith.addi %a_base_3, %row0 : i32
      %row0_16 = arith.addi %row0_15, %expert : i32
      %row0_17 = arith.muli %row0_16, %C_2 : i32
      %row0_18 = arith.addi %row0_17, %0 : i32
      %offs_r = tt.make_range {end = 16 : i32, start = 0 : i32} : tensor<16xi32>
      %offs_r_19 = tt.splat %0 : i32 -> tensor<16xi32>
      %offs_r_20 = arith.addi %offs_r_19, %offs_r : tensor<16xi32>
      %offs_am = tt.splat %row0_18 : i32 -> tensor<16xi32>
      %offs_am_21 = arith.addi %offs_am, %offs_r : tensor<16xi32>
      %offs_n = arith.muli %pid_n, %c32_i32 : i32
      %offs_n_22 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
      %offs_n_23 = tt.splat %offs_n : i32 -> tensor<32xi32>
      %offs_n_24 = arith.addi %offs_n_23, %offs_n_22 : tensor<32xi32>
      %mask_m = tt.splat %count_14 : i32 -> tensor<16xi32>
      %mask_m_25 = arith.cmpi slt, %offs_r_20, %mask_m : tensor<16xi32>
      %mask_n = tt.splat %N : i32 -> tensor<32xi32>
      %mask_n_26 = arith.cmpi slt, %offs_n_24, %mask_n : tensor<32xi32>
      %b_base = arith.muli %expert, %stride_be : i32
      %b_base_27 = tt.addptr %b_ptr, %b_base : !tt.ptr<bf16>, i32
      %2 = arith.addi %K, %c15_i32 : i32
      %3 = arith.divsi %2, %c16_i32 : i32
      %acc = scf.for %k = %c0_i32 to %3 step %c1_i32 iter_args(%acc_38 = %cst) -> (tensor<16x32xf32>)  : i32 {
        %offs_kk = arith.muli %k, %c16_i32 : i32
        %offs_kk_39 = tt.splat %offs_kk : i32 -> tensor<16xi32>
        %offs_kk_40 = arith.addi %offs_kk_39, %offs_r : tensor<16xi32>
        %mask_k = tt.splat %K : i32 -> tensor<16xi32>
        %mask_k_41 = arith.cmpi slt, %offs_kk_40, %mask_k : tensor<16xi32>
        %a_ptrs = tt.expand_dims %offs_am_21 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
        %a_ptrs_42 = tt.splat %stride_am : i32 -> tensor<16x1xi32>
        %a_ptrs_43 = arith.muli %a_ptrs, %a_ptrs_42 : tensor<16x1xi32>
        %a_ptrs_44 = tt.expand_dims %offs_kk_40 {axis = 0 : i32} : tensor<16xi32> -> tensor<1x16xi32>
        %a_ptrs_45 = tt.broadcast %a_ptrs_43 : tensor<16x1xi32> -> tensor<16x16xi32>
        %a_ptrs_46 = tt.broadcast %a_ptrs_44 : tensor<1x16xi32> -> tensor<16x16xi32>
        %a_ptrs_47 = arith.addi %a_ptrs_45, %a_ptrs_46 : tensor<16x16xi32>
        %a_ptrs_48 = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<16x16x!tt.ptr<bf16>>
        %a_ptrs_49 = tt.addptr %a_ptrs_48, %a_ptrs_47 : tensor<16x16x!tt.ptr<bf16>>, tensor<16x16xi32>
        %b_ptrs = tt.expand_dims %offs_kk_40 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
        %b_ptrs_50 = tt.splat %stride_bk : i32 -> tensor<16x1xi32>
        %b_ptrs_51 = arith.muli %b_ptrs, %b_ptrs_50 : tensor<16x1xi32>
        %b_ptrs_52 = tt.expand_dims %offs_n_24 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
        %b_ptrs_53 = tt.broadcast %b_ptrs_51 : tensor<16x1xi32> -> tensor<16x32xi32>
        %b_ptrs_54 = tt.broadcast %b_ptrs_52 : tensor<1x32xi32> -> tensor<16x32xi32>
        %b_ptrs_55 = arith.addi %b_ptrs_53, %b_ptrs_54 : tensor<16x32xi32>
        %b_ptrs_56 = tt.splat %b_base_27 : !tt.ptr<bf16> -> tensor<16x32x!tt.ptr<bf16>>
        %b_ptrs_57 = tt.addptr %b_ptrs_56, %b_ptrs_55 : tensor<16x32x!tt.ptr<bf16>>, tensor<16x32xi32>
        %a = tt.expand_dims %mask_m_25 {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
        %a_58 = tt.expand_dims %mask_k_41 {axis = 0 : i32} : tensor<16xi1> -> tensor<1x16xi1>
        %a_59 = tt.broadcast %a : tensor<16x1xi1> -> tensor<16x16xi1>
        %a_60 = tt.broadcast %a_58 : tensor<1x16xi1> -> tensor<16x16xi1>
        %a_61 = arith.andi %a_59, %a_60 : tensor<16x16xi1>
        %a_62 = tt.load %a_ptrs_49, %a_61, %cst_1 : tensor<16x16x!tt.ptr<bf16>>
        %b = tt.expand_dims %mask_k_41 {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
        %b_63 = tt.expand_dims %mask_n_26 {axis = 0 : i32} : tensor<32xi1> -> tensor<1x32xi1>
        %b_64 = tt.broadcast %b : tensor<16x1xi1> -> tensor<16x32xi1>
        %b_65 = tt.broadcast %b_63 : tensor<1x32xi1> -> tensor<16x32xi1>
        %b_66 = arith.andi %b_64, %b_65 : tensor<16x32xi1>
        %b_67 = tt.load %b_ptrs_57, %b_66, %cst_0 : tensor<16x32x!tt.ptr<bf16>>
        %acc_68 = tt.dot %a_62, %b_67, %acc_38, inputPrecision = tf32 : tensor<16x16xbf16> * tensor<16x32xbf16> -> tensor<16x32xf32>
        scf.yield %acc_68 : tensor<16x32xf32>
      }
      %offs_cm = arith.muli %g, %C_2 : i32
      %offs_cm_28 = tt.splat %offs_cm : i32 -> tensor<16xi32>
      %offs_cm_29 = arith.addi %offs_cm_28, %offs_r_20 : tensor<16xi32>
      %c_ptrs = tt.expand_dims %offs_cm_29 {axis = 1 : i32} : tensor<16xi32> -> tensor<16x1xi32>
      %c_ptrs_30 = tt.splat %stride_cm : i32 -> tensor<16x1xi32>
      %c_ptrs_31 = arith.muli %c_ptrs, %c_ptrs_30 : tensor<16x1xi32>
      %c_ptrs_32 = tt.expand_dims %offs_n_24 {axis = 0 : i32} : tensor<32xi32> -> tensor<1x32xi32>
      %c_ptrs_33 = tt.broadcast %c_ptrs_31 : tensor<16x1xi32> -> tensor<16x32xi32>
      %c_ptrs_34 = tt.broadcast %c_ptrs_32 : tensor<1x32xi32> -> tensor<16x32xi32>
      %c_ptrs_35 = arith.addi %c_ptrs_33, %c_ptrs_34 : tensor<16x32xi32>
      %c_ptrs_36 = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<16x32x!tt.ptr<bf16>>
      %c_ptrs_37 = tt.addptr %c_ptrs_36, %c_ptrs_35 : tensor<16x32x!tt.ptr<bf16>>, tensor<16x32xi32>
      %4 = tt.expand_dims %mask_m_25 {axis = 1 : i32} : tensor<16xi1> -> tensor<16x1xi1>
      %5 = tt.expand_dims %mask_n_26 {axis = 0 : i32} : tensor<32xi1> -> tensor<1x32xi1>
      %6 = tt.broadcast %4 : tensor<16x1xi1> -> tensor<16x32xi1>
      %7 = tt.broadcast %5 : tensor<1x32xi1> -> tensor<16x32xi1>
      %8 = arith.andi %6, %7 : tensor<16x32xi1>
      %9 = arith.truncf %acc : tensor<16x32xf32> to tensor<16x32xbf16>
      tt.store %c_ptrs_37, %9, %8 : tensor<16x32x!tt.ptr<bf16>>
    }
    tt.return
  }
}
