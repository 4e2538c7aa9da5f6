// RUN: not syncopate-opt %s --split-input-file 2>&1 | filecheck %s

// The syncopate dialect's verifiers: each case below is rejected with a message that names the
// op and what is wrong.

// CHECK: syncopate-opt: error: 'syncopate.remap' row 1 of the table is not a permutation of 0..3
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %pid = tt.get_program_id x : i32
    %t = syncopate.remap %pid, %rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 2, 0, 1>}
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.remap' table length must be a multiple of tiles
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %pid = tt.get_program_id x : i32
    %t = syncopate.remap %pid, %rank {tensor = "A", dim = 0 : i32, block = 64 : i32, tiles = 4 : i32, table = array<i32: 0, 1, 2, 3, 2, 3>}
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.wait' kind must be one of ('chunk', 'entry', 'consumed', 'produced'), got 'chunks'
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %t = syncopate.wait %flags[%rank], target %rank {kind = "chunks"} : !tt.ptr<i32>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.wait' operand 'flags' must be a !tt.ptr, got i64
module {
  tt.func public @f(%flags: i64, %rank: i32) {
    %t = syncopate.wait %flags[%rank], target %rank {kind = "chunk"} : i64
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.signal' op must be one of ('add', 'set')
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    syncopate.signal %flags[%rank], %rank {op = "max", kind = "chunk"} : !tt.ptr<i32>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.signal' kind must be one of ('chunk', 'entry', 'consumed', 'produced')
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    syncopate.signal %flags[%rank], %rank {op = "add", kind = "bogus"} : !tt.ptr<i32>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.wait_region' needs one lower and one upper bound per tensor dim (got 2 and 1)
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %t = syncopate.wait_region %flags, %rank, %rank[%rank, %rank] to[%rank] {tensor = "A"} : !tt.ptr<i32>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: 'syncopate.peer_ptr' operand 'ptr' must be a !tt.ptr, got i32
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %p = syncopate.peer_ptr %rank, %rank {buffer = 1 : i32} : i32 -> i32
    tt.return
  }
}
