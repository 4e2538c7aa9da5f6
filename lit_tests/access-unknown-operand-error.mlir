// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="x_ptr:A"},append-abi-params,insert-waits' 2>&1 | filecheck %s

// The operand binding must name a kernel parameter (by its Python name, which Triton keeps as
// the SSA name of the argument); the error lists the parameters there are.

// CHECK: syncopate-opt: error: operand 'x_ptr' is not a (non-constexpr) parameter of kernel copy; its parameters are a_ptr, c_ptr, syn_flags, syn_peers, syn_table, syn_diag, syn_rank, syn_epoch, syn_timeout_ns

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
