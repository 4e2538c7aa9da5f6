// RUN: syncopate-opt %s -p 'structurize-returns' | filecheck %s
// RUN: syncopate-opt %S/Inputs/join-cfg.mlir -p 'structurize-returns' | filecheck %s --check-prefix=JOIN

// structurize-returns (passes/structurize_returns.py): Triton lowers `if pid * 16 >= M:
// return` to a cf.cond_br to a block holding only tt.return; the kernel becomes one block
// whose rest sits in the else branch of an scf.if, with one tt.return at its end. A second
// guard nested in the first's continuation becomes a nested scf.if, and a cf.br's block
// argument is replaced by the value the branch passes (%off -> %x). A CFG with a join (two
// branches into one block, Inputs/join-cfg.mlir) is not a tree and is left as it is.

// CHECK-LABEL: tt.func public @k(
// CHECK:         %[[C:.*]] = arith.cmpi sge, %{{.*}}, %M : i32
// CHECK-NEXT:    scf.if %[[C]] {
// CHECK-NEXT:    } else {
// CHECK-NEXT:      %[[X:.*]] = arith.addi %{{.*}}, %c1_i32 : i32
// CHECK-NEXT:      %[[D:.*]] = arith.cmpi sge, %[[X]], %N : i32
// CHECK-NEXT:      scf.if %[[D]] {
// CHECK-NEXT:      } else {
// CHECK-NEXT:        %p = tt.addptr %out_ptr, %[[X]] : !tt.ptr<i32>, i32
// CHECK-NEXT:        tt.store %p, %[[X]] : !tt.ptr<i32>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return
// CHECK-NEXT:  }
// CHECK-NOT:   cf.
// CHECK-NOT:   ^bb

// JOIN-LABEL: tt.func public @join(
// JOIN:         cf.cond_br
// JOIN:         cf.br ^bb3
// JOIN:         cf.br ^bb3
// JOIN:         tt.return

module {
  tt.func public @k(%out_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %M: i32, %N: i32) attributes {noinline = false} {
    %c16_i32 = arith.constant 16 : i32
    %c1_i32 = arith.constant 1 : i32
    %pid = tt.get_program_id x : i32
    %0 = arith.muli %pid, %c16_i32 : i32
    %1 = arith.cmpi sge, %0, %M : i32
    cf.cond_br %1, ^bb1, ^bb2
  ^bb1:
    tt.return
  ^bb2:
    %x = arith.addi %0, %c1_i32 : i32
    cf.br ^bb3(%x : i32)
  ^bb3(%off: i32):
    %2 = arith.cmpi sge, %off, %N : i32
    cf.cond_br %2, ^bb4, ^bb5
  ^bb4:
    tt.return
  ^bb5:
    %p = tt.addptr %out_ptr, %off : !tt.ptr<i32>, i32
    tt.store %p, %off : !tt.ptr<i32>
    tt.return
  }
}
