// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4}' | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" backend=sm comm-programs=4}' | syncopate-opt | filecheck %s
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/rs2.json" operands="c_ptr:C" backend=nvshmem comm-programs=8}' | filecheck %s --check-prefix=RS
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-two-tensors.json" operands="a_ptr:A;c_ptr:B" backend=ce}' | filecheck %s --check-prefix=TWO
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" lowering=table}' | filecheck %s --check-prefix=TABLE
// RUN: syncopate-opt %s -p 'attach-schedule{file="%S/Inputs/ag2-push.json" operands="a_ptr:A" lowering=auto}' | filecheck %s --check-prefix=AUTO

// attach-schedule reads a JSON schedule, verifies it, and records it on the module as two typed
// attributes: syncopate.schedule holds the schedule (printed as its compact JSON), and
// syncopate.request the kernel-parameter -> tensor bindings, the backend and the number of comm
// programs (options at their default, such as backend "sm", are not printed); both read back
// as they print (the second RUN line).  The kernel itself is left untouched (the ABI
// parameters come from append-abi-params).

// CHECK:      module attributes {syncopate.schedule = #syncopate.schedule<"{{.*}}\22world_size\22:2,
// CHECK-SAME:   \22chunks\22:[
// CHECK-SAME:   {\22id\22:0,\22tensor\22:\22A\22,\22offsets\22:[128,0],\22sizes\22:[64,64],\22src\22:1,\22dst\22:0,\22mode\22:\22push\22,\22step\22:0
// CHECK-SAME:   syncopate.request = #syncopate.request<operands = {a_ptr = "A"}, comm_programs = 4>} {
// CHECK-NEXT:   tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
// CHECK-NOT:    syn_
// CHECK:        tt.return

// RS:      \22reduce\22:\22sum\22
// RS-SAME: syncopate.request = #syncopate.request<operands = {c_ptr = "C"}, backend = "nvshmem", comm_programs = 8>}

// lowering=table|unrolled sets the request's lowering (how resolve-chunks, partition-sms and
// the lower-* passes emit chunk-level code: loops over the chunk table, or code per chunk);
// "auto", the default, is not printed (the passes then choose by the chunk count).
// TABLE: syncopate.request = #syncopate.request<operands = {a_ptr = "A"}, comm_programs = 4, lowering = table>} {
// AUTO-NOT: lowering =

// TWO: syncopate.request = #syncopate.request<operands = {a_ptr = "A", c_ptr = "B"}, backend = "ce", comm_programs = 4>}

module {
  tt.func public @copy(%a_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}, %c_ptr: !tt.ptr<bf16> {tt.divisibility = 16 : i32}) attributes {noinline = false} {
    %cst = arith.constant dense<64> : tensor<64x1xi32>
    %c64_i32 = arith.constant 64 : i32
    %pid = tt.get_program_id x : i32
    %rm = arith.muli %pid, %c64_i32 : i32
    %rk = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %rm_0 = tt.splat %rm : i32 -> tensor<64xi32>
    %rm_1 = arith.addi %rm_0, %rk : tensor<64xi32>
    %0 = tt.expand_dims %rm_1 {axis = 1 : i32} : tensor<64xi32> -> tensor<64x1xi32>
    %1 = arith.muli %0, %cst : tensor<64x1xi32>
    %2 = tt.expand_dims %rk {axis = 0 : i32} : tensor<64xi32> -> tensor<1x64xi32>
    %3 = tt.broadcast %1 : tensor<64x1xi32> -> tensor<64x64xi32>
    %4 = tt.broadcast %2 : tensor<1x64xi32> -> tensor<64x64xi32>
    %offs = arith.addi %3, %4 : tensor<64x64xi32>
    %a_ptrs = tt.splat %a_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
    %a_ptrs_2 = tt.addptr %a_ptrs, %offs : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    %a = tt.load %a_ptrs_2 : tensor<64x64x!tt.ptr<bf16>>
    %c_ptrs = tt.splat %c_ptr : !tt.ptr<bf16> -> tensor<64x64x!tt.ptr<bf16>>
    %c_ptrs_3 = tt.addptr %c_ptrs, %offs : tensor<64x64x!tt.ptr<bf16>>, tensor<64x64xi32>
    tt.store %c_ptrs_3, %a : tensor<64x64x!tt.ptr<bf16>>
    tt.return
  }
}
