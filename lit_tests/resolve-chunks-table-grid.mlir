// RUN: syncopate-opt --split-input-file %s -p 'attach-schedule{file="%S/Inputs/ulysses2.json" operands="q_ptr:Q;k_ptr:K;v_ptr:V;o_ptr:O" backend=sm comm-programs=4 lowering=table},resolve-chunks' | filecheck %s

// resolve-chunks, lowering="table", a region wait inside a loop whose tensor's chunks cut TWO
// dims (the Ulysses all-to-all: every chunk is one head of one source's sequence block): the
// table's cell map is a grid over both (chunk_table.CellGrid, row-major, the last dim
// fastest), and the pass bounds the cells the box touches along each -- a constant extent
// and a power-of-two alignment per dim -- and emits their product of lookups, at most 2,
// each one table load under scf.if and no loop (so Triton still pipelines the K/V loads of
// the loop around it).  Otherwise the RECV scan loop stays.
//
// ulysses2.json (ulysses_all_to_all B=1, Hq=Hkv=2, S=32, D=8, W=2, push): K is [1, 2, 32, 8];
// K's chunks cut dims 1 (heads, grain 1, 2 cells) and 2 (sequence, grain 16, 2 cells).  Table
// v3: the cell directory at 210 (8 words per slot; K is slot 1: [250, 2, 1, 1, 2, 2, 16, 2]),
// so rank r's row of K's grid is words 250 + 4 r .. 250 + 4 r + 3, cell (h, n) at 2 h + n
// (rank 0: -1 0 -1 -1 -- chunk 0 is head 0, rows 16..31 from rank 1; rank 1: -1 -1 3 -1).
//
// * aligned: the box is one head wide (hi = h + 1) and a KV block of 16 rows starting at the
//   loop's induction variable, which starts at 0 and steps by 16: a multiple of 16 (the
//   induction-variable rule of pow2_multiple), so 1 x 1 cells, one lookup.  Per grid dim the
//   box is clamped to the tensor, its first cell lo / G and end cell (hi + G - 1) / G; under
//   "cell < end" along both dims the chunk id is loaded from word row + min(kh, 1) * 2 +
//   min(kn, 1), and waited on under "id >= 0".
// CHECK-LABEL: tt.func public @aligned
// CHECK:         scf.for %start_n =
// CHECK:           %[[TARGET:.+]] = arith.muli %syn_epoch, %{{.+}} : i32
// CHECK:           %[[HLO:.+]] = arith.minsi %{{.+}}, %{{.+}} : i32
// CHECK:           %[[HHI:.+]] = arith.minsi %{{.+}}, %{{.+}} : i32
// CHECK-NEXT:      %[[G1:.+]] = arith.constant 1 : i32
// CHECK-NEXT:      %[[HFIRST:.+]] = arith.divsi %[[HLO]], %[[G1]] : i32
// CHECK-NEXT:      %[[G1M:.+]] = arith.constant 0 : i32
// CHECK-NEXT:      %[[HHIR:.+]] = arith.addi %[[HHI]], %[[G1M]] : i32
// CHECK-NEXT:      %[[G1B:.+]] = arith.constant 1 : i32
// CHECK-NEXT:      %[[HEND:.+]] = arith.divsi %[[HHIR]], %[[G1B]] : i32
// CHECK:           %[[NLO:.+]] = arith.minsi %{{.+}}, %{{.+}} : i32
// CHECK:           %[[NHI:.+]] = arith.minsi %{{.+}}, %{{.+}} : i32
// CHECK-NEXT:      %[[G2:.+]] = arith.constant 16 : i32
// CHECK-NEXT:      %[[NFIRST:.+]] = arith.divsi %[[NLO]], %[[G2]] : i32
// CHECK-NEXT:      %[[G2M:.+]] = arith.constant 15 : i32
// CHECK-NEXT:      %[[NHIR:.+]] = arith.addi %[[NHI]], %[[G2M]] : i32
// CHECK-NEXT:      %[[G2B:.+]] = arith.constant 16 : i32
// CHECK-NEXT:      %[[NEND:.+]] = arith.divsi %[[NHIR]], %[[G2B]] : i32
// CHECK-NEXT:      %[[MAP:.+]] = arith.constant 250 : i32
// CHECK-NEXT:      %[[NC:.+]] = arith.constant 4 : i32
// CHECK-NEXT:      %[[ROFF:.+]] = arith.muli %syn_rank, %[[NC]] : i32
// CHECK-NEXT:      %[[ROW:.+]] = arith.addi %[[MAP]], %[[ROFF]] : i32
// CHECK-NEXT:      %[[HIN:.+]] = arith.cmpi slt, %[[HFIRST]], %[[HEND]] : i32
// CHECK-NEXT:      %[[NIN:.+]] = arith.cmpi slt, %[[NFIRST]], %[[NEND]] : i32
// CHECK-NEXT:      %[[IN:.+]] = arith.andi %[[HIN]], %[[NIN]] : i1
// CHECK-NEXT:      %[[TOK:.+]] = scf.if %[[IN]] -> (i32) {
// CHECK-NEXT:        %[[HLAST:.+]] = arith.constant 1 : i32
// CHECK-NEXT:        %[[KH:.+]] = arith.minsi %[[HFIRST]], %[[HLAST]] : i32
// CHECK-NEXT:        %[[HSTRIDE:.+]] = arith.constant 2 : i32
// CHECK-NEXT:        %[[HOFF:.+]] = arith.muli %[[KH]], %[[HSTRIDE]] : i32
// CHECK-NEXT:        %[[AT0:.+]] = arith.addi %[[ROW]], %[[HOFF]] : i32
// CHECK-NEXT:        %[[NLAST:.+]] = arith.constant 1 : i32
// CHECK-NEXT:        %[[KN:.+]] = arith.minsi %[[NFIRST]], %[[NLAST]] : i32
// CHECK-NEXT:        %[[AT:.+]] = arith.addi %[[AT0]], %[[KN]] : i32
// CHECK-NEXT:        %[[P:.+]] = tt.addptr %syn_table, %[[AT]] : !tt.ptr<i32>, i32
// CHECK-NEXT:        %[[CID:.+]] = tt.load %[[P]] : !tt.ptr<i32>
// CHECK-NEXT:        %[[Z:.+]] = arith.constant 0 : i32
// CHECK-NEXT:        %[[HAS:.+]] = arith.cmpi sge, %[[CID]], %[[Z]] : i32
// CHECK-NEXT:        %[[T:.+]] = scf.if %[[HAS]] -> (i32) {
// CHECK-NEXT:          %[[WT:.+]] = syncopate.wait chunk %syn_flags[%[[CID]]], target %[[TARGET]] : !tt.ptr<i32>
// CHECK-NEXT:          scf.yield %[[WT]] : i32
// CHECK-NEXT:        } else {
// CHECK:             }
// CHECK-NEXT:        scf.yield %[[T]] : i32
// CHECK-NEXT:      } else {
// CHECK:           }
// CHECK-NEXT:      %next = arith.addi %acc, %[[TOK]] : i32
// CHECK-NEXT:      scf.yield %next : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

// * straddling: the induction variable steps by 8, so a 16-row block can start mid-cell and
//   touch 2 sequence cells: 1 x 2 lookups (cells (h, n) and (h, n + 1)), still no loop.
// CHECK-LABEL: tt.func public @straddling
// CHECK:         scf.for %start_n =
// CHECK-NOT:       scf.for
// CHECK-COUNT-2:   syncopate.wait chunk %syn_flags[%{{.+}}], target
// CHECK-NOT:       syncopate.wait
// CHECK-NOT:       scf.for
// CHECK:           %next = arith.addi %acc, %{{.+}} : i32
// CHECK-NEXT:      scf.yield %next : i32
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

// * two_heads: two heads wide (hi = h + 2) and an aligned block: 2 x 1 lookups.
// CHECK-LABEL: tt.func public @two_heads
// CHECK:         scf.for %start_n =
// CHECK-NOT:       scf.for
// CHECK-COUNT-2:   syncopate.wait chunk %syn_flags[%{{.+}}], target
// CHECK-NOT:       syncopate.wait
// CHECK-NOT:       scf.for
// CHECK:           tt.return

// * two_heads_straddling: 2 x 2 = 4 cells, more than MAX_LOOKUPS = 2: the RECV scan stays.
// * unknown_heads: hi = h + h along the heads is no constant extent: nothing proven along that
//   dim, so the scan stays although the sequence dim is aligned.
// CHECK-LABEL: tt.func public @two_heads_straddling
// CHECK:         scf.for %start_n =
// CHECK:           scf.for
// CHECK:             syncopate.wait chunk
// CHECK-LABEL: tt.func public @unknown_heads
// CHECK:         scf.for %start_n =
// CHECK:           scf.for
// CHECK:             syncopate.wait chunk

module {
  tt.func public @aligned(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %v_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c8_i32 = arith.constant 8 : i32
    %c16_i32 = arith.constant 16 : i32
    %c32_i32 = arith.constant 32 : i32
    %h = tt.get_program_id y : i32
    %sum = scf.for %start_n = %c0_i32 to %c32_i32 step %c16_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %hhi = arith.addi %h, %c1_i32 : i32
      %nhi = arith.addi %start_n, %c16_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%c0_i32, %h, %start_n, %c0_i32] to[%c1_i32, %hhi, %nhi, %c8_i32] {tensor = "K"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @straddling(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %v_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c8_i32 = arith.constant 8 : i32
    %c16_i32 = arith.constant 16 : i32
    %c32_i32 = arith.constant 32 : i32
    %h = tt.get_program_id y : i32
    %sum = scf.for %start_n = %c0_i32 to %c32_i32 step %c8_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %hhi = arith.addi %h, %c1_i32 : i32
      %nhi = arith.addi %start_n, %c16_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%c0_i32, %h, %start_n, %c0_i32] to[%c1_i32, %hhi, %nhi, %c8_i32] {tensor = "K"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @two_heads(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %v_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c8_i32 = arith.constant 8 : i32
    %c16_i32 = arith.constant 16 : i32
    %c32_i32 = arith.constant 32 : i32
    %h = tt.get_program_id y : i32
    %sum = scf.for %start_n = %c0_i32 to %c32_i32 step %c16_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %hhi = arith.addi %h, %c2_i32 : i32
      %nhi = arith.addi %start_n, %c16_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%c0_i32, %h, %start_n, %c0_i32] to[%c1_i32, %hhi, %nhi, %c8_i32] {tensor = "K"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @two_heads_straddling(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %v_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c8_i32 = arith.constant 8 : i32
    %c16_i32 = arith.constant 16 : i32
    %c32_i32 = arith.constant 32 : i32
    %h = tt.get_program_id y : i32
    %sum = scf.for %start_n = %c0_i32 to %c32_i32 step %c8_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %hhi = arith.addi %h, %c2_i32 : i32
      %nhi = arith.addi %start_n, %c16_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%c0_i32, %h, %start_n, %c0_i32] to[%c1_i32, %hhi, %nhi, %c8_i32] {tensor = "K"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}

// -----

module {
  tt.func public @unknown_heads(%q_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %k_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %v_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %o_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %c8_i32 = arith.constant 8 : i32
    %c16_i32 = arith.constant 16 : i32
    %c32_i32 = arith.constant 32 : i32
    %h = tt.get_program_id y : i32
    %sum = scf.for %start_n = %c0_i32 to %c32_i32 step %c16_i32 iter_args(%acc = %c0_i32) -> (i32) : i32 {
      %hhi = arith.addi %h, %h : i32
      %nhi = arith.addi %start_n, %c16_i32 : i32
      %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%c0_i32, %h, %start_n, %c0_i32] to[%c1_i32, %hhi, %nhi, %c8_i32] {tensor = "K"} : !tt.ptr<i32>
      %next = arith.addi %acc, %token : i32
      scf.yield %next : i32
    }
    tt.return
  }
}
