module {
  tt.func public @ops(%p: !tt.ptr<f16> {tt.divisibility = 16 : i32}, %q: !tt.ptr<i32, 3>, %bp: !tt.ptr<tensor<64x32xf16>>, %i: i32, %l: i64, %f: f32, %t: tensor<64xf32>, %ti: tensor<64xi32>, %m: tensor<64xi1>, %d: !tt.tensordesc<tensor<64x32xf16>>, %raw: !tt.ptr<i8>, %b8: tensor<128x64xf8E4M3FN>, %sc: tensor<128x2xi8>, %acc: tensor<128x64xf32>, %b82: tensor<64x64xf8E5M2>, %dg: !tt.tensordesc<tensor<1x32xf16>>) -> f32 attributes {noinline = false} {
    %c0 = arith.constant 0 : i32
    %c1 = arith.constant 1 : i64
    %pid = tt.get_program_id y : i32
    %np = tt.get_num_programs z : i32
    %r = tt.make_range {end = 64 : i32, start = 0 : i32} : tensor<64xi32>
    %ps = tt.splat %p : !tt.ptr<f16> -> tensor<64x!tt.ptr<f16>>
    %pa = tt.addptr %ps, %r : tensor<64x!tt.ptr<f16>>, tensor<64xi32>
    %v0 = tt.load %pa, %m cacheModifier = cg evictionPolicy = evict_last {isVolatile = true} : tensor<64x!tt.ptr<f16>>
    %v1 = tt.load %pa evictionPolicy = evict_first : tensor<64x!tt.ptr<f16>>
    %v2 = tt.load %p cacheModifier = ca : !tt.ptr<f16>
    tt.store %pa, %v0, %m cacheModifier = wt evictionPolicy = evict_first : tensor<64x!tt.ptr<f16>>
    tt.store %pa, %v1 cacheModifier = cs : tensor<64x!tt.ptr<f16>>
    %bp2 = tt.make_tensor_ptr %p, [%l, %l], [%l, %c1], [%c0, %i] {order = array<i32: 1, 0>} : <tensor<64x32xf16>>
    %bp3 = tt.advance %bp2, [%i, %c0] : <tensor<64x32xf16>>
    %bv = tt.load %bp3 {boundaryCheck = array<i32: 0, 1>, padding = 2 : i32} : !tt.ptr<tensor<64x32xf16>>
    tt.store %bp, %bv {boundaryCheck = array<i32: 1>} : !tt.ptr<tensor<64x32xf16>>
    %qi = tt.addptr %q, %i : !tt.ptr<i32, 3>, i32
    %pi = tt.ptr_to_int %p : !tt.ptr<f16> -> i64
    %ip = tt.int_to_ptr %pi : i64 -> !tt.ptr<i32>
    %a0 = tt.atomic_rmw umax, relaxed, cta, %ip, %i : (!tt.ptr<i32>, i32) -> i32
    %a1 = tt.atomic_cas acquire, sys, %ip, %c0, %i : (!tt.ptr<i32>, i32, i32) -> i32
    %ipt = tt.splat %ip : !tt.ptr<i32> -> tensor<64x!tt.ptr<i32>>
    %a2 = tt.atomic_rmw add, release, gpu, %ipt, %ti, %m : (tensor<64x!tt.ptr<i32>>, tensor<64xi32>, tensor<64xi1>) -> tensor<64xi32>
    %bc = tt.bitcast %ip : !tt.ptr<i32> -> !tt.ptr<f32>
    %h = tt.fp_to_fp %t, rounding = rtz : tensor<64xf32> -> tensor<64xf16>
    %e = tt.fp_to_fp %h : tensor<64xf16> -> tensor<64xf32>
    %cl = tt.clampf %t, %t, %t, propagateNan = all : tensor<64xf32>
    %sq = tt.precise_sqrt %t : tensor<64xf32>
    %dv = tt.precise_divf %t, %sq : tensor<64xf32>
    %mh = tt.mulhiui %ti, %ti : tensor<64xi32>
    %u = tt.reshape %t : tensor<64xf32> -> tensor<1x64xf32>
    %u2 = tt.reshape %t allow_reorder efficient_layout : tensor<64xf32> -> tensor<8x8xf32>
    %ed = tt.expand_dims %t {axis = 0 : i32} : tensor<64xf32> -> tensor<1x64xf32>
    %bd = tt.broadcast %ed : tensor<1x64xf32> -> tensor<4x64xf32>
    %tr = tt.trans %bd {order = array<i32: 1, 0>} : tensor<4x64xf32> -> tensor<64x4xf32>
    %j = tt.join %t, %t : tensor<64xf32> -> tensor<64x2xf32>
    %s0, %s1 = tt.split %j : tensor<64x2xf32> -> tensor<64xf32>
    %ct = tt.cat %t, %t : tensor<64xf32> -> tensor<128xf32>
    %one = tt.reshape %t : tensor<64xf32> -> tensor<64xf32>
    %hs = tt.histogram %ti, %m : tensor<64xi32> -> tensor<16xi32>
    %hs2 = tt.histogram %ti : tensor<64xi32> -> tensor<8xi32>
    %g = tt.gather %t[%ti] {axis = 0 : i32, efficient_layout} : (tensor<64xf32>, tensor<64xi32>) -> tensor<64xf32>
    %x = tt.extern_elementwise %t, %t {libname = "", libpath = "", pure = false, symbol = "__nv_powf"} : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %ia:2 = tt.elementwise_inline_asm "mov.b32 $0, $2; mov.b32 $1, $3;" {constraints = "=r,=r,r,r", packed_element = 1 : i32, pure = true} %ti, %ti : tensor<64xi32>, tensor<64xi32> -> tensor<64xi32>, tensor<64xi32>
    %ia0 = tt.elementwise_inline_asm "mov.u32 $0, %clock;" {constraints = "=r", packed_element = 1 : i32, pure = false}  -> i32
    tt.print " pid: " {hex = true, isSigned = array<i32: 1, 0>} : %pid, %ti : i32, tensor<64xi32>
    tt.print "hello" {hex = false, isSigned = array<i32>}
    tt.assert %m, "oops" : tensor<64xi1>
    %dl = tt.descriptor_load %d[%c0, %i] cacheModifier = cg evictionPolicy = evict_last : !tt.tensordesc<tensor<64x32xf16>> -> tensor<64x32xf16>
    tt.descriptor_store %d[%i, %c0], %dl : !tt.tensordesc<tensor<64x32xf16>>, tensor<64x32xf16>
    tt.descriptor_reduce max, %d[%i, %c0], %dl : !tt.tensordesc<tensor<64x32xf16>>, tensor<64x32xf16>
    %md = tt.make_tensor_descriptor %p, [%i, %i], [%l, %c1] {padding = 2 : i32} : <f16>, <tensor<64x32xf16>>
    %ds = tt.dot_scaled %b8 scale %sc, %b82, %acc lhs = e4m3 rhs = e5m2 {fastMath = false} : tensor<128x64xf8E4M3FN>, tensor<128x2xi8> * tensor<64x64xf8E5M2> -> tensor<128x64xf32>
    %tt = tt.dot %b8, %b82, %acc, inputPrecision = tf32 {maxNumImpreciseAcc = 32 : i32} : tensor<128x64xf8E4M3FN> * tensor<64x64xf8E5M2> -> tensor<128x64xf32>
    %ft = tt.fp_to_fp %tt, rounding = rtne : tensor<128x64xf32> -> tensor<128x64xf16>
    %one1 = tt.reshape %t : tensor<64xf32> -> tensor<64x1xf32>
    %red = "tt.reduce"(%one1) <{axis = 0 : i32}> ({
    ^bb0(%a: f32, %b: f32):
      %mx = arith.maximumf %a, %b : f32
      tt.reduce.return %mx : f32
    }) : (tensor<64x1xf32>) -> tensor<1xf32>
    %us = tt.unsplat %red : tensor<1xf32>
    %sc0:2 = "tt.scan"(%t, %ti) <{axis = 0 : i32, reverse = true}> ({
    ^bb0(%a: f32, %ai: i32, %b: f32, %bi: i32):
      %s = arith.addf %a, %b : f32
      %si = arith.addi %ai, %bi : i32
      tt.scan.return %s, %si : f32, i32
    }) : (tensor<64xf32>, tensor<64xi32>) -> (tensor<64xf32>, tensor<64xi32>)
    %gg = tt.descriptor_gather %dg[%ti, %i] : (!tt.tensordesc<tensor<1x32xf16>>, tensor<64xi32>, i32) -> tensor<64x32xf16>
    tt.descriptor_scatter %dg[%ti, %c0], %gg : !tt.tensordesc<tensor<1x32xf16>>, tensor<64xi32>, i32, tensor<64x32xf16>
    %me = "tt.map_elementwise"(%t, %t) <{pack = 1 : i32}> ({
    ^bb0(%e0: f32, %e1: f32):
      %cz = arith.constant 0.000000e+00 : f32
      %cmp = arith.cmpf ogt, %e0, %cz : f32
      cf.cond_br %cmp, ^bb2(%e0 : f32), ^bb1
    ^bb1:
      %ex = math.exp %e1 : f32
      cf.br ^bb2(%ex : f32)
    ^bb2(%r0: f32):
      tt.map_elementwise.return %r0 : f32
    }) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
    %pos = arith.cmpi sgt, %i, %c0 : i32
    %ds2 = tt.dot_scaled %b8, %b82, %acc lhs = e4m3 rhs = e5m2 {fastMath = true, lhs_k_pack = false, rhs_k_pack = false} : tensor<128x64xf8E4M3FN> * tensor<64x64xf8E5M2> -> tensor<128x64xf32>
    %ia4 = tt.elementwise_inline_asm "cvt.rn.f16x2.f32 $0, $1, $2;" {constraints = "=r,r,r", packed_element = 4 : i32, pure = true} %ti : tensor<64xi32> -> tensor<64xi32>
    %ov = arith.addi %i, %c0 overflow<nuw> : i32
    %ov2 = arith.muli %ti, %ti overflow<nsw> : tensor<64xi32>
    %tru = arith.constant true
    %dtru = arith.constant dense<true> : tensor<64xi1>
    %cbf = arith.constant dense<1.500000e+00> : tensor<64xbf16>
    %cf16 = arith.constant -2.500000e-01 : f16
    %cinf = arith.constant 0x7F800000 : f32
    %cnan = arith.constant dense<0x7FC00000> : tensor<64xf32>
    %ci64 = arith.constant -9223372036854775808 : i64
    %fm = math.fma %t, %t, %t fastmath<fast> : tensor<64xf32>
    %e2 = math.exp2 %t fastmath<nnan,ninf> : tensor<64xf32>
    %lg = math.log %t : tensor<64xf32>
    %rs = math.rsqrt %t : tensor<64xf32>
    %ab = math.absf %t : tensor<64xf32>
    %iab = math.absi %ti : tensor<64xi32>
    %mx = arith.maxnumf %t, %t : tensor<64xf32>
    %mn = arith.minimumf %t, %t : tensor<64xf32>
    %dsi = arith.divsi %ti, %ti : tensor<64xi32>
    %rsi = arith.remsi %ti, %ti : tensor<64xi32>
    %dui = arith.divui %ti, %ti : tensor<64xi32>
    %shr = arith.shrui %ti, %ti : tensor<64xi32>
    %shl = arith.shli %ti, %ti : tensor<64xi32>
    %an = arith.andi %m, %dtru : tensor<64xi1>
    %xo = arith.xori %ti, %ti : tensor<64xi32>
    %neg = arith.negf %t : tensor<64xf32>
    %rmf = arith.remf %t, %t fastmath<fast> : tensor<64xf32>
    %mxs = arith.maxsi %ti, %ti : tensor<64xi32>
    %mnu = arith.minui %ti, %ti : tensor<64xi32>
    %cdv = arith.ceildivsi %i, %i : i32
    scf.if %pos {
      tt.store %pa, %v1 : tensor<64x!tt.ptr<f16>>
    }
    llvm.intr.assume %pos : i1
    llvm.intr.assume %pos ["align"(%l, %i : i64, i32), "nonnull"()] : i1 {note = "bundle"}
    gpu.barrier
    %wsel = arith.select %m, %t, %t : tensor<64xi1>, tensor<64xf32>
    %ssel = arith.select %pos, %i, %c0 : i32
    %fcmp = arith.cmpf oge, %t, %t fastmath<nnan> {tag = 1 : i32} : tensor<64xf32>
    %ext = arith.extui %ti : tensor<64xi32> to tensor<64xi64>
    %tr2 = arith.trunci %ext : tensor<64xi64> to tensor<64xi16>
    %sf = arith.sitofp %ti : tensor<64xi32> to tensor<64xf32>
    %uf = arith.uitofp %ti : tensor<64xi32> to tensor<64xf32>
    %fs = arith.fptosi %t : tensor<64xf32> to tensor<64xi32>
    %fu = arith.fptoui %t : tensor<64xf32> to tensor<64xi8>
    %fe = arith.extf %t : tensor<64xf32> to tensor<64xf64>
    %ft2 = arith.truncf %t : tensor<64xf32> to tensor<64xbf16>
    %bcast = arith.bitcast %t : tensor<64xf32> to tensor<64xi32>
    %es = arith.extsi %ti : tensor<64xi32> to tensor<64xi64>
    scf.while : () -> () {
      scf.condition(%pos)
    } do {
      scf.yield
    }
    %call = tt.call @helper(%f) : (f32) -> f32
    %call2 = tt.call @helper(%f) {arg_attrs = [{tt.divisibility = 16 : i32}], res_attrs = [{tt.bar}]} : (f32) -> f32
    tt.return %us : f32
  }
  tt.func private @helper(%x: f32) -> (f32 {tt.res = 1 : i32}) attributes {noinline = true} {
    tt.return %x : f32
  }
}
