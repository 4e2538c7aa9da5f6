// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push-split1.json" operands="a_ptr:A" backend=nvshmem comm-programs=4},append-abi-params,partition-sms,lower-nvshmem' | filecheck %s --check-prefix=PUSH
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-pull.json" operands="a_ptr:A" backend=nvshmem comm-programs=2},append-abi-params,partition-sms,lower-nvshmem' | filecheck %s --check-prefix=PULL

// The NVSHMEM backend: flags are 64-bit (NVSHMEM signals are uint64_t), so the flag array is
// *i64 and the spin function is the b64 one.  Contiguous chunks move with one block-scoped
// NVSHMEM call per comm program, as tt.extern_elementwise ops resolved against
// libnvshmem_device.bc: each comm program takes a contiguous share of the chunk's rows,
// [lo + pid * per, min(hi, lo + (pid + 1) * per)), per = ceil(rows / count).

// Push: ENTRY is published with nvshmemx_signal_op(SET = 0); chunk 0 (rows 128..255, 128 B a
// row) goes with nvshmemx_putmem_signal_block(dest, src, bytes, &CHUNK[0], 1, ADD = 5, pe 0),
// which also adds to the destination's flag, so no separate release follows it.
// PUSH:       tt.func private @syncopate_wait_b64(%flag: !tt.ptr<i64>, %index: i32, %target: i64,
// PUSH:         ld.acquire.sys.global.b64
// PUSH-LABEL: tt.func public @noop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %syn_flags: !tt.ptr<i64> {tt.divisibility = 16 : i32},
// PUSH:         %[[ENTRY:.+]] = tt.addptr %syn_flags, %{{.+}} : !tt.ptr<i64>, i32
// PUSH-NEXT:    %[[SIG:.+]] = tt.ptr_to_int %[[ENTRY]] : !tt.ptr<i64> -> i64
// PUSH-NEXT:    %[[EPOCH:.+]] = arith.extsi %syn_epoch : i32 to i64
// PUSH-NEXT:    %[[SET:.+]] = arith.constant 0 : i32
// PUSH-NEXT:    tt.extern_elementwise %[[SIG]], %[[EPOCH]], %[[SET]], %{{.+}} {libname = "", libpath = "", pure = false, symbol = "nvshmemx_signal_op"} : (i64, i64, i32, i32) -> i32
// PUSH:         tt.call @syncopate_wait_b64(
// PUSH:         %[[BYTES:.+]] = arith.extsi %{{.+}} : i32 to i64
// PUSH:         %[[SRC:.+]] = tt.addptr %a_ptr, %{{.+}} : !tt.ptr<bf16>, i32
// PUSH-NEXT:    %[[ADDR:.+]] = tt.ptr_to_int %[[SRC]] : !tt.ptr<bf16> -> i64
// PUSH-NEXT:    %[[C0:.+]] = arith.constant 0 : i32
// PUSH-NEXT:    %[[FLAG:.+]] = tt.addptr %syn_flags, %[[C0]] : !tt.ptr<i64>, i32
// PUSH-NEXT:    %[[FLAGADDR:.+]] = tt.ptr_to_int %[[FLAG]] : !tt.ptr<i64> -> i64
// PUSH-NEXT:    %[[ONE:.+]] = arith.constant 1 : i64
// PUSH-NEXT:    %[[ADD:.+]] = arith.constant 5 : i32
// PUSH-NEXT:    tt.extern_elementwise %[[ADDR]], %[[ADDR]], %[[BYTES]], %[[FLAGADDR]], %[[ONE]], %[[ADD]], %{{.+}} {libname = "", libpath = "", pure = false, symbol = "nvshmemx_putmem_signal_block"} : (i64, i64, i64, i64, i64, i32, i32) -> i32
// PUSH-NOT:     tt.atomic_rmw
// PUSH-NOT:     syncopate.
// PUSH:         tt.return

// Pull: nvshmemx_getmem_block(dest, src, bytes, pe 1) from the source, then CHUNK[0] += 1
// locally and CONSUMED += 1 on the source (64-bit release atomics).
// PULL-LABEL: tt.func public @noop
// PULL:         tt.extern_elementwise %[[ADDR:.+]], %[[ADDR]], %{{.+}}, %[[PE:.+]] {libname = "", libpath = "", pure = false, symbol = "nvshmemx_getmem_block"} : (i64, i64, i64, i32) -> i32
// PULL:         "gpu.barrier"() : () -> ()
// PULL-NEXT:    %[[ONE:.+]] = arith.extsi %{{.+}} : i32 to i64
// PULL-NEXT:    tt.atomic_rmw add, release, sys, %{{.+}}, %[[ONE]] : (!tt.ptr<i64>, i64) -> i64
// PULL:         %[[CONSUMED:.+]] = tt.int_to_ptr %{{.+}} : i64 -> !tt.ptr<i64>
// PULL-NEXT:    "gpu.barrier"() : () -> ()
// PULL-NEXT:    %[[ONE2:.+]] = arith.extsi %{{.+}} : i32 to i64
// PULL-NEXT:    tt.atomic_rmw add, release, sys, %[[CONSUMED]], %[[ONE2]] : (!tt.ptr<i64>, i64) -> i64
// PULL-NOT:     syncopate.
// PULL:         tt.return

module {
  tt.func public @noop(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    tt.return
  }
}
