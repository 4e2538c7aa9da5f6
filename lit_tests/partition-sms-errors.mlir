// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=0},append-abi-params,partition-sms' 2>&1 | filecheck %s --check-prefix=ZERO
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-two-tensors.json" operands="a_ptr:A" backend=sm comm-programs=4},append-abi-params,partition-sms' 2>&1 | filecheck %s --check-prefix=UNBOUND

// The sm backend moves data with comm programs inside the kernel: it needs at least one.
// ZERO: syncopate-opt: error: backend 'sm' needs comm_programs >= 1 (programs that move the data inside the fused kernel); got 0

// Every tensor the schedule moves must be held by a kernel operand (the comm programs copy
// from and into its buffer): here chunks 2 and 3 move B, which no parameter is bound to.
// UNBOUND: syncopate-opt: error: chunk 2 moves tensor 'B', which no kernel operand holds; pass operand={param: 'B'}

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
