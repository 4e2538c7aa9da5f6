// RUN: not syncopate-opt %s -p 'attach-schedule{file=%S/Inputs/ag2-push.json operands=a_ptr:A}' 2>&1 | filecheck %s --check-prefix=QUOTE
// RUN: not syncopate-opt %s -p 'insert-wait' 2>&1 | filecheck %s --check-prefix=UNKNOWN
// RUN: not syncopate-opt %s -p 'tile-remap' 2>&1 | filecheck %s --check-prefix=NOSCHED

// Pipeline mistakes are diagnostics (exit code 1), never tracebacks.

// xDSL's pipeline syntax needs quotes around option values holding paths or ':'.
// QUOTE:      syncopate-opt: error: Error parsing pass pipeline specification:
// QUOTE:      Unknown token
// QUOTE:      quote option values that hold paths or punctuation, e.g. attach-schedule{file="Inputs/ag.json" operands="a_ptr:A"}
// QUOTE-NOT:  Traceback

// UNKNOWN: syncopate-opt: error: Unrecognized passes: ['insert-wait'] (registered passes: append-abi-params, attach-schedule, check-accesses, fuse, insert-epilogue-reduce, insert-signals, insert-trace, insert-waits, load-epoch, lower-ce, lower-nvshmem, lower-sm, partition-sms, resolve-chunks, self-advance-epoch, structurize-returns, tile-remap)

// A pass that reads the schedule says how to attach one.
// NOSCHED: syncopate-opt: error: the module has no 'syncopate.schedule' attribute: attach a schedule (syncopate.compile does; lit tests set it by hand)

module {
  tt.func public @noop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
