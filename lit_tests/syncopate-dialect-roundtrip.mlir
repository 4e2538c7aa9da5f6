// RUN: syncopate-opt %s | syncopate-opt | filecheck %s
// RUN: syncopate-opt %s --print-op-generic | syncopate-opt | filecheck %s

// Every op of the syncopate dialect parses, verifies and prints back in its custom form (and
// from MLIR's generic form), so the IR between passes can be written and read by hand; so do
// the request and state module attributes (fields at their default are not printed).

// CHECK:       module attributes {syncopate.request = #syncopate.request<operands = {a_ptr = "A"}, backend = "nvshmem", comm_programs = 4, params = ["a_ptr", "flags"], reduce = epilogue, lowering = table, remap = false, reorder_reductions = true, trace = true, self_advance = auto, withhold = [1, 3]>,
// CHECK-SAME:    syncopate.state = #syncopate.state<grid_axes = [0], upper_bounds = {n = 64}, remap = {A = {dim = 0, block = 64, tiles = 4, role = "consumer", loop = true}}, remarks = ["a \22quoted\22 remark"], reordered = true, requirements = {stride_am = 64}, waits = 2, produced = {"0" = 16384}, signals = 1, epilogue_slots = ["C"], mode = mixed, reads_per_src = {"0" = 4, "1" = 0}, table = [1, 2, 3], table_remaps = {{\[\[}}3, 4{{\]\]}}, self_advanced = true>}

// CHECK-LABEL: tt.func public @ops(%a_ptr: !tt.ptr<bf16>, %flags: !tt.ptr<i32>, %rank: i32, %epoch: i32) {
// CHECK:         %tile = syncopate.remap %pid, %rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
// CHECK:         %t0 = syncopate.wait_region %flags, %epoch, %rank[%lo, %c0] to[%hi, %c64] {tensor = "A"} : !tt.ptr<i32>
// CHECK-NEXT:    %t1 = syncopate.wait chunk %flags[%c0], target %epoch {chunk = 0 : i32} : !tt.ptr<i32>
// CHECK-NEXT:    syncopate.signal_region %flags, %epoch, %rank[%lo, %c0] to[%hi, %c64] {tensor = "A"} : !tt.ptr<i32>
// CHECK-NEXT:    syncopate.signal add produced %flags[%c4], %c64 : !tt.ptr<i32>
// CHECK-NEXT:    %peer = syncopate.peer_ptr %a_ptr, %rank {buffer = 1 : i32} : !tt.ptr<bf16> -> !tt.ptr<bf16>
// CHECK-NEXT:    syncopate.comm %pid, %c4 {
// CHECK-NEXT:      syncopate.enter %pid, %c4, %epoch, %rank, %flags : !tt.ptr<i32>
// CHECK-NEXT:      syncopate.transfer %a_ptr, %pid, %c4, %epoch, %rank, %flags {chunk = 0 : i32, operand = 1 : i32} : !tt.ptr<bf16>, !tt.ptr<i32>
// CHECK-NEXT:      syncopate.drain %pid, %c4, %epoch, %rank, %flags {reads = 2 : i32} : !tt.ptr<i32>
// CHECK-NEXT:    }
// CHECK-NEXT:    tt.return

module attributes {syncopate.request = #syncopate.request<operands = {a_ptr = "A"}, backend = "nvshmem", comm_programs = 4, params = ["a_ptr", "flags"], reduce = epilogue, lowering = table, remap = false, reorder_reductions = true, trace = true, self_advance = auto, withhold = [1, 3]>, syncopate.state = #syncopate.state<grid_axes = [0], upper_bounds = {n = 64}, remap = {A = {dim = 0, block = 64, tiles = 4, role = "consumer", loop = true}}, remarks = ["a \22quoted\22 remark"], reordered = true, requirements = {stride_am = 64}, waits = 2, produced = {"0" = 16384}, signals = 1, epilogue_slots = ["C"], mode = mixed, reads_per_src = {"0" = 4, "1" = 0}, table = [1, 2, 3], table_remaps = [[3, 4]], self_advanced = true>} {
  tt.func public @ops(%a_ptr: !tt.ptr<bf16>, %flags: !tt.ptr<i32>, %rank: i32, %epoch: i32) {
    %c0 = arith.constant 0 : i32
    %c64 = arith.constant 64 : i32
    %c4 = arith.constant 4 : i32
    %pid = tt.get_program_id x : i32
    %tile = syncopate.remap %pid, %rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3, 0, 1>}
    %lo = arith.muli %tile, %c64 : i32
    %hi = arith.addi %lo, %c64 : i32
    %t0 = syncopate.wait_region %flags, %epoch, %rank[%lo, %c0] to[%hi, %c64] {tensor = "A"} : !tt.ptr<i32>
    %t1 = syncopate.wait chunk %flags[%c0], target %epoch {chunk = 0 : i32} : !tt.ptr<i32>
    syncopate.signal_region %flags, %epoch, %rank[%lo, %c0] to[%hi, %c64] {tensor = "A"} : !tt.ptr<i32>
    syncopate.signal add produced %flags[%c4], %c64 : !tt.ptr<i32>
    %peer = syncopate.peer_ptr %a_ptr, %rank {buffer = 1 : i32} : !tt.ptr<bf16> -> !tt.ptr<bf16>
    syncopate.comm %pid, %c4 {
      syncopate.enter %pid, %c4, %epoch, %rank, %flags : !tt.ptr<i32>
      syncopate.transfer %a_ptr, %pid, %c4, %epoch, %rank, %flags {chunk = 0 : i32, operand = 1 : i32} : !tt.ptr<bf16>, !tt.ptr<i32>
      syncopate.drain %pid, %c4, %epoch, %rank, %flags {reads = 2 : i32} : !tt.ptr<i32>
    }
    tt.return
  }
}
