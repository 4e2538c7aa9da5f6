// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=ce},append-abi-params,partition-sms,lower-ce' 2>&1 | filecheck %s

// With the ce backend the grid has no comm programs: a module that went through
// partition-sms cannot be lowered for it.

// CHECK: syncopate-opt: error: the ce backend has no comm programs: do not run partition-sms before lower-ce

module {
  tt.func public @noop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
