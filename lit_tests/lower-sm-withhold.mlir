// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=2},append-abi-params,partition-sms,lower-sm' | filecheck %s --check-prefix=ALL
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=2 withhold="1"},append-abi-params,partition-sms,lower-sm' | filecheck %s --check-prefix=HOLD
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm withhold="7"}' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm withhold="x"}' 2>&1 | filecheck %s --check-prefix=NOTINT

// Fault injection (syncopate.test_withhold): the rank that executes a withheld chunk still
// copies it but never releases CHUNK[c] on the destination, so the destination's watchdog
// fires on that chunk -- how the GPU tests check that a hang is reported, on the sm backend.
// ag2-push.json has 4 push chunks (0, 1: rank 1 -> 0; 2, 3: rank 0 -> 1): 4 copies and
// 4 releases; withholding chunk 1 keeps its copy and drops its release.

// Transfers are emitted in step order: chunks 0, 2 (step 0), then 1, 3 (step 1).
// ALL-LABEL: tt.func public @noop
// ALL:         tt.store
// ALL:         tt.atomic_rmw add, release, sys
// ALL:         tt.store
// ALL:         tt.atomic_rmw add, release, sys
// ALL:         tt.store
// ALL:         tt.atomic_rmw add, release, sys
// ALL:         tt.store
// ALL:         tt.atomic_rmw add, release, sys
// ALL-NOT:     tt.atomic_rmw add

// HOLD-LABEL: tt.func public @noop
// HOLD:         tt.store
// HOLD:         tt.atomic_rmw add, release, sys
// HOLD:         tt.store
// HOLD:         tt.atomic_rmw add, release, sys
// HOLD:         tt.store
// HOLD-NOT:     tt.atomic_rmw
// HOLD:         tt.store
// HOLD:         tt.atomic_rmw add, release, sys
// HOLD-NOT:     tt.atomic_rmw add

// UNKNOWN: withhold: chunks [7] are not in the schedule
// NOTINT: withhold: {{.*}} are not chunk ids

module {
  tt.func public @noop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
