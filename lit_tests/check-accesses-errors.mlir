// RUN: not syncopate-opt %s --split-input-file -p 'attach-schedule{file="%S/Inputs/ag2-rows.json" operands="inp_ptr:A"},check-accesses' 2>&1 | filecheck %s

// What the compiler cannot prove it refuses, naming the access and what to change
// (docs/soundness.md).  The schedule's tensor A is [512, 64] bf16, all-gathered on rows.

// A copy of 128 columns per row: the box [0, 128) leaves dim 1 (64 wide), so it would read the
// next row, which may belong to a chunk that has not arrived.
// CHECK: syncopate-opt: error: this tt.load of 'inp_ptr' (tensor 'A', dim 1 of size 64) reads indices [0, 128), past the end of the dim and has no mask; make the schedule's shape match what the kernel indexes, or mask the access by `index < bound` along dim 1

module {
  tt.func public @wide_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c128_i32 = arith.constant 128 : i32
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 128 : i32, start = 0 : i32} : tensor<128xi32>
    %x = arith.muli %row, %c128_i32 : i32
    %x_0 = tt.addptr %inp_ptr, %x : !tt.ptr<bf16>, i32
    %x_1 = tt.splat %x_0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %x_2 = tt.addptr %x_1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    %x_3 = tt.load %x_2 : tensor<128x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<128x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols : tensor<128x!tt.ptr<bf16>>, tensor<128xi32>
    tt.store %2, %x_3 : tensor<128x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// A kernel that writes the tensor the schedule delivers to it would race with the copies.
// CHECK: syncopate-opt: error: the kernel writes 'inp_ptr', but the schedule delivers tensor 'A' to it (a consumed tensor: chunks of it are copied between ranks while the kernel runs, so this store would race with those copies). Bind operand= to a tensor the kernel only reads, or use a schedule that produces 'A' (reduce_scatter / all_reduce)

module {
  tt.func public @scale_rows_inplace(%inp_ptr: !tt.ptr<bf16>, %scale: f32, %n_cols: i32, %stride: i32) attributes {noinline = false} {
    %row = tt.get_program_id x : i32
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = tt.splat %n_cols : i32 -> tensor<64xi32>
    %x_0 = arith.cmpi slt, %cols, %x : tensor<64xi32>
    %x_1 = arith.muli %row, %stride : i32
    %x_2 = tt.addptr %inp_ptr, %x_1 : !tt.ptr<bf16>, i32
    %x_3 = tt.splat %x_2 : !tt.ptr<bf16> -> tensor<64x!tt.ptr<bf16>>
    %x_4 = tt.addptr %x_3, %cols : tensor<64x!tt.ptr<bf16>>, tensor<64xi32>
    %x_5 = tt.load %x_4, %x_0 : tensor<64x!tt.ptr<bf16>>
    %0 = arith.extf %x_5 : tensor<64xbf16> to tensor<64xf32>
    %1 = tt.splat %scale : f32 -> tensor<64xf32>
    %2 = arith.mulf %0, %1 : tensor<64xf32>
    %3 = arith.truncf %2 : tensor<64xf32> to tensor<64xbf16>
    tt.store %x_4, %3, %x_0 : tensor<64x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// An unmasked column tile whose start (pid_n * 32) nothing bounds.
// CHECK: syncopate-opt: error: cannot prove that this tt.load of 'inp_ptr' (tensor 'A', dim 1 of size 64) stays inside the dim: its start 32*%pid_n is not bounded and the access has no mask `index < bound` along it, so it could touch the next row, which may belong to a chunk that has not arrived. Mask the access along dim 1 by a kernel argument or a constant (e.g. `offs < 64`), or state its box with syncopate.language.hint_region2(inp_ptr, lo0, hi0, ...) before it

module {
  tt.func public @col_tiles(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>) attributes {noinline = false} {
    %c64_i32 = arith.constant 64 : i32
    %c32_i32 = arith.constant 32 : i32
    %row = tt.get_program_id x : i32
    %pid_n = tt.get_program_id y : i32
    %cols = arith.muli %pid_n, %c32_i32 : i32
    %cols_0 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %cols_1 = tt.splat %cols : i32 -> tensor<32xi32>
    %cols_2 = arith.addi %cols_1, %cols_0 : tensor<32xi32>
    %x = arith.muli %row, %c64_i32 : i32
    %x_3 = tt.addptr %inp_ptr, %x : !tt.ptr<bf16>, i32
    %x_4 = tt.splat %x_3 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
    %x_5 = tt.addptr %x_4, %cols_2 : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
    %x_6 = tt.load %x_5 : tensor<32x!tt.ptr<bf16>>
    %0 = tt.addptr %out_ptr, %x : !tt.ptr<bf16>, i32
    %1 = tt.splat %0 : !tt.ptr<bf16> -> tensor<32x!tt.ptr<bf16>>
    %2 = tt.addptr %1, %cols_2 : tensor<32x!tt.ptr<bf16>>, tensor<32xi32>
    tt.store %2, %x_6 : tensor<32x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// A decoupled look-back: program pid spins until program pid - 1 has set its flag
// (`lookback_scan_rows`, tests/corpus/unseen3.py).  The fused kernel adds comm programs and
// reorders tiles, so the program waited for may not be running: refused, whatever the schedule.
// CHECK: syncopate-opt: error: this while loop repeats until a value it reads atomically or volatilely changes: a program waiting for another (a look-back flag, a lock, a grid barrier). The fused kernel adds comm programs to the grid and runs tiles in the order chunks arrive, so the program it waits for may not be running and the kernel could hang. Move the waiting part into a kernel of its own, launched after the fused one


module {
  tt.func public @lookback_rows(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %flag_ptr: !tt.ptr<i32>) attributes {noinline = false} {
    %c-1_i32 = arith.constant -1 : i32
    %true = arith.constant true
    %c1_i32 = arith.constant 1 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<64> : tensor<32x1xi32>
    %c32_i32 = arith.constant 32 : i32
    %pid = tt.get_program_id x : i32
    %rows = arith.muli %pid, %c32_i32 : i32
    %rows_0 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %rows_1 = tt.splat %rows : i32 -> tensor<32xi32>
    %rows_2 = arith.addi %rows_1, %rows_0 : tensor<32xi32>
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = tt.expand_dims %rows_2 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %x_3 = arith.muli %x, %cst : tensor<32x1xi32>
    %x_4 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
    %x_5 = tt.addptr %x_4, %x_3 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
    %x_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %x_7 = tt.broadcast %x_5 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
    %x_8 = tt.broadcast %x_6 : tensor<1x64xi32> -> tensor<32x64xi32>
    %x_9 = tt.addptr %x_7, %x_8 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
    %x_10 = tt.load %x_9 : tensor<32x64x!tt.ptr<bf16>>
    %0 = arith.cmpi sgt, %pid, %c0_i32 : i32
    scf.if %0 {
      scf.while : () -> () {
        %7 = tt.addptr %flag_ptr, %pid : !tt.ptr<i32>, i32
        %8 = tt.addptr %7, %c-1_i32 : !tt.ptr<i32>, i32
        %9 = tt.atomic_rmw add, acq_rel, gpu, %8, %c0_i32, %true : (!tt.ptr<i32>, i32, i1) -> i32
        %10 = arith.cmpi eq, %9, %c0_i32 : i32
        scf.condition(%10)
      } do {
        scf.yield
      }
    }
    %1 = tt.addptr %flag_ptr, %pid : !tt.ptr<i32>, i32
    %2 = tt.atomic_rmw exch, acq_rel, gpu, %1, %c1_i32, %true : (!tt.ptr<i32>, i32, i1) -> i32
    %3 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
    %4 = tt.addptr %3, %x_3 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
    %5 = tt.broadcast %4 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
    %6 = tt.addptr %5, %x_8 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
    tt.store %6, %x_10 : tensor<32x64x!tt.ptr<bf16>>
    tt.return
  }
}

// -----

// The same wait with the polled atomic inside a branch whose result the condition reads: the
// branch's yields are followed too.
// CHECK: syncopate-opt: error: this while loop repeats until a value it reads atomically or volatilely changes: a program waiting for another (a look-back flag, a lock, a grid barrier). The fused kernel adds comm programs to the grid and runs tiles in the order chunks arrive, so the program it waits for may not be running and the kernel could hang. Move the waiting part into a kernel of its own, launched after the fused one
module {
  tt.func public @lookback_rows_branch(%inp_ptr: !tt.ptr<bf16>, %out_ptr: !tt.ptr<bf16>, %flag_ptr: !tt.ptr<i32>) attributes {noinline = false} {
    %c-1_i32 = arith.constant -1 : i32
    %true = arith.constant true
    %c1_i32 = arith.constant 1 : i32
    %c0_i32 = arith.constant 0 : i32
    %cst = arith.constant dense<64> : tensor<32x1xi32>
    %c32_i32 = arith.constant 32 : i32
    %pid = tt.get_program_id x : i32
    %rows = arith.muli %pid, %c32_i32 : i32
    %rows_0 = tt.make_range {end = 32 : i32, start = 0 : i32} : tensor<32xi32>
    %rows_1 = tt.splat %rows : i32 -> tensor<32xi32>
    %rows_2 = arith.addi %rows_1, %rows_0 : tensor<32xi32>
    %cols = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %x = tt.expand_dims %rows_2 {axis = 1 : i32} : tensor<32xi32> -> tensor<32x1xi32>
    %x_3 = arith.muli %x, %cst : tensor<32x1xi32>
    %x_4 = tt.splat %inp_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
    %x_5 = tt.addptr %x_4, %x_3 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
    %x_6 = tt.expand_dims %cols {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %x_7 = tt.broadcast %x_5 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
    %x_8 = tt.broadcast %x_6 : tensor<1x64xi32> -> tensor<32x64xi32>
    %x_9 = tt.addptr %x_7, %x_8 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
    %x_10 = tt.load %x_9 : tensor<32x64x!tt.ptr<bf16>>
    %0 = arith.cmpi sgt, %pid, %c0_i32 : i32
    scf.if %0 {
      scf.while : () -> () {
        %7 = tt.addptr %flag_ptr, %pid : !tt.ptr<i32>, i32
        %8 = tt.addptr %7, %c-1_i32 : !tt.ptr<i32>, i32
        %9 = scf.if %true -> (i32) {
          %11 = tt.atomic_rmw add, acq_rel, gpu, %8, %c0_i32, %true : (!tt.ptr<i32>, i32, i1) -> i32
          scf.yield %11 : i32
        } else {
          scf.yield %c1_i32 : i32
        }
        %10 = arith.cmpi eq, %9, %c0_i32 : i32
        scf.condition(%10)
      } do {
        scf.yield
      }
    }
    %1 = tt.addptr %flag_ptr, %pid : !tt.ptr<i32>, i32
    %2 = tt.atomic_rmw exch, acq_rel, gpu, %1, %c1_i32, %true : (!tt.ptr<i32>, i32, i1) -> i32
    %3 = tt.splat %out_ptr : !tt.ptr<bf16> -> tensor<32x1x!tt.ptr<bf16>>
    %4 = tt.addptr %3, %x_3 : tensor<32x1x!tt.ptr<bf16>>, tensor<32x1xi32>
    %5 = tt.broadcast %4 : tensor<32x1x!tt.ptr<bf16>> -> tensor<32x64x!tt.ptr<bf16>>
    %6 = tt.addptr %5, %x_8 : tensor<32x64x!tt.ptr<bf16>>, tensor<32x64xi32>
    tt.store %6, %x_10 : tensor<32x64x!tt.ptr<bf16>>
    tt.return
  }
}
