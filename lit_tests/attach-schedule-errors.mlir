// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/missing.json" operands="a_ptr:A"}' 2>&1 | filecheck %s --check-prefix=NOFILE
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/bad-json.json" operands="a_ptr:A"}' 2>&1 | filecheck %s --check-prefix=JSON
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-out-of-bounds.json" operands="a_ptr:A"}' 2>&1 | filecheck %s --check-prefix=VERIFY
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=tpu}' 2>&1 | filecheck %s --check-prefix=BACKEND
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr"}' 2>&1 | filecheck %s --check-prefix=BINDING
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:X"}' 2>&1 | filecheck %s --check-prefix=TENSOR

// attach-schedule refuses what later passes could not use, and says what to change.

// NOFILE: syncopate-opt: error: attach-schedule: no schedule file '{{.*}}Inputs/missing.json'

// JSON: syncopate-opt: error: {{.*}}bad-json.json: not valid JSON: Expecting property name enclosed in double quotes at line 6 column 1; fix the syntax there

// The schedule is verified before it is attached: the error names the chunk and the region.
// VERIFY: syncopate-opt: error: chunk 0 (A rank 1 -> 0, pull, step 0, offsets [128, 0] sizes [256, 64]): region offsets [128, 0] sizes [256, 64] is out of bounds of tensor A (shape [256, 64]): dim 0 ends at 384 > 256; make offsets[0] + sizes[0] <= 256

// BACKEND: syncopate-opt: error: attach-schedule: unknown backend 'tpu'; choose one of sm, ce, nvshmem

// BINDING: syncopate-opt: error: attach-schedule: operand binding 'a_ptr' is not param:tensor

// TENSOR: syncopate-opt: error: attach-schedule: operand binding 'a_ptr:X' names tensor 'X', which the schedule does not have (its tensors: A)

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
