// Not a test (lit_tests/structurize-returns.mlir runs it): two branches join in ^bb3.
module {
  tt.func public @join(%out_ptr: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %M: i32) attributes {noinline = false} {
    %c1_i32 = arith.constant 1 : i32
    %c2_i32 = arith.constant 2 : i32
    %pid = tt.get_program_id x : i32
    %0 = arith.cmpi sge, %pid, %M : i32
    cf.cond_br %0, ^bb1, ^bb2
  ^bb1:
    cf.br ^bb3(%c1_i32 : i32)
  ^bb2:
    cf.br ^bb3(%c2_i32 : i32)
  ^bb3(%v: i32):
    %p = tt.addptr %out_ptr, %pid : !tt.ptr<i32>, i32
    tt.store %p, %v : !tt.ptr<i32>
    tt.return
  }
}
