// RUN: not syncopate-opt %s --split-input-file 2>&1 | filecheck %s

// The syncopate dialect's verifiers: each case below is rejected with a message that names the
// op (or the position) and what is wrong.  Flag kinds and signal updates are enum attributes
// (a wrong keyword is a parse error listing the choices); pointer operands are constrained to
// !tt.ptr by IRDL.

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

// CHECK: syncopate-opt: error: {{.*}}:33:25: cannot read TTIR: Expected `chunk`, `entry`, `consumed`, or `produced`.
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %t = syncopate.wait chunks %flags[%rank], target %rank : !tt.ptr<i32>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: {{.*}}:43:5: cannot read TTIR: 'syncopate.wait': i64 should be of base attribute tt.ptr
module {
  tt.func public @f(%flags: i64, %rank: i32) {
    %t = syncopate.wait chunk %flags[%rank], target %rank : i64
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: {{.*}}:53:22: cannot read TTIR: Expected `add`, or `set`.
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    syncopate.signal max chunk %flags[%rank], %rank : !tt.ptr<i32>
    tt.return
  }
}

// -----

// CHECK: syncopate-opt: error: {{.*}}:63:26: cannot read TTIR: Expected `chunk`, `entry`, `consumed`, or `produced`.
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    syncopate.signal add bogus %flags[%rank], %rank : !tt.ptr<i32>
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

// CHECK: syncopate-opt: error: {{.*}}:83:5: cannot read TTIR: 'syncopate.peer_ptr': i32 should be of base attribute tt.ptr
module {
  tt.func public @f(%flags: !tt.ptr<i32>, %rank: i32) {
    %p = syncopate.peer_ptr %rank, %rank {buffer = 1 : i32} : i32 -> i32
    tt.return
  }
}
