// RUN: sed 's/lowering = bogus/lowering = auto/' %s | not syncopate-opt -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" lowering=bogus}' 2>&1 | filecheck %s --check-prefix=OPTION
// RUN: not syncopate-opt %s -p 'resolve-chunks' 2>&1 | filecheck %s --check-prefix=ATTR

// How chunk-level code is lowered is "auto", "unrolled" or "table" (chunk_table.LOWERINGS);
// anything else is a typed error naming the choices, not a silent fallback to one form:
// * from attach-schedule's `lowering` option (like its `reduce` and `backend` options);
// * from a request written by hand (this module carries one): the request's lowering is an
//   enum, so the module does not even parse, and the message names the field and the choices.

// OPTION: syncopate-opt: error: attach-schedule: lowering='bogus': choose one of auto, unrolled, table

// ATTR: syncopate-opt: error: {{.*}}lowering-errors.mlir:14:58: cannot read TTIR: #syncopate.request: lowering='bogus': choose one of auto, unrolled, table

module attributes {syncopate.request = #syncopate.request<operands = {a_ptr = "A"}, lowering = bogus>} {
  tt.func public @tile(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_peers: !tt.ptr<i64> {tt.divisibility = 16 : i32}, %syn_table: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_diag: !tt.ptr<i32> {tt.divisibility = 16 : i32}, %syn_rank: i32, %syn_epoch: i32, %syn_timeout_ns: i64) attributes {noinline = false} {
    %c0_i32 = arith.constant 0 : i32
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %lo = arith.muli %pid, %c64_i32 : i32
    %hi = arith.addi %lo, %c64_i32 : i32
    %token = syncopate.wait_region %syn_flags, %syn_epoch, %syn_rank[%lo, %c0_i32] to[%hi, %c64_i32] {tensor = "A"} : !tt.ptr<i32>
    tt.return
  }
}
