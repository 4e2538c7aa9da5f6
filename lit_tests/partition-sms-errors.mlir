// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=0},append-abi-params,partition-sms' 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-two-tensors.json" operands="a_ptr:A" backend=sm comm-programs=4},append-abi-params,partition-sms' 2>&1 | filecheck %s --check-prefix=UNBOUND
// RUN: not syncopate-opt %S/Inputs/join-cfg.mlir -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="out_ptr:A" backend=sm comm-programs=4},append-abi-params,structurize-returns,partition-sms' 2>&1 | filecheck %s --check-prefix=JOIN

// The sm backend moves data with comm programs inside the kernel: it needs at least one.
// ZERO: syncopate-opt: error: backend 'sm' needs comm_programs >= 1 (programs that move the data inside the fused kernel); got 0

// Every tensor the schedule moves must be held by a kernel operand (the comm programs copy
// from and into its buffer): here chunks 2 and 3 move B, which no parameter is bound to.
// UNBOUND: syncopate-opt: error: chunk 2 moves tensor 'B', which no kernel operand holds; pass operand={param: 'B'}

// A kernel whose control flow structurize-returns cannot make one block (two branches join):
// the comm programs cannot be placed beside its body.
// JOIN: syncopate-opt: error: the comm programs need the kernel as one block that ends in its return, and this kernel's control flow cannot be made one (a block has 2 incoming branches (a join or a loop, not a tree)). Write the early exits as guards

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
