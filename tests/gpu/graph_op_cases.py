"""The ops' CUDA-graph cases (tests/gpu/test_cuda_graphs.py, driver ``graph_workers.
graph_op_replays``): for each op, its static inputs, the call that is captured, fresh inputs
per replay, and the eager unfused reference on the same inputs with the op's own promise
(bitwise or a tolerance).

A case is built by ``CASES[name](comm, gen)`` and has:

* ``call()`` -- the op on the static inputs, writing into static outputs where the op takes
  ``out`` (what is captured; the eager warm-up calls it too); returns the outputs;
* ``refresh()`` -- new random inputs copied into the static inputs (eager, between replays);
* ``reference()`` -- the unfused path, eagerly, on the static inputs (its kernels are loaded
  by the first call, before any fused kernel spins: loopback, docs/loopback.md);
* ``mismatches(outs, ref)`` -- a device int64 count of elements off the promise (no host read
  in the replay loop);
* ``poison(outs)`` -- NaN into the outputs before a replay (an unwritten tile shows).

Shapes keep every program of every rank co-resident in loopback (W ranks on one GPU), as the
eager tests' shapes for these ops (tests/gpu/test_multi_gpu.py) do.
"""

from __future__ import annotations


def _count_tol(got, ref, atol, rtol):
    """Elements with ``|got - ref| > atol + rtol |ref|``, NaN/Inf in ``got`` included."""
    import torch
    g, r = got.float(), ref.float()
    return ((g - r).abs() > atol + rtol * r.abs()).sum() + (~torch.isfinite(g)).sum()


def _count_ne(got, ref):
    """Bitwise: elements that differ (NaN never equals itself, so an unwritten one counts)."""
    return (got != ref).sum()


class Case:
    """Defaults for the pieces a case may not need."""

    exact = True

    def poison(self, outs):
        for t in outs:
            if t.is_floating_point():
                t.fill_(float("nan"))

    def mismatches(self, outs, ref):
        return sum(_count_ne(o, r) for o, r in zip(outs, ref))


# ------------------------------------------------------------------------------------------
# GEMM + all-reduce (bf16, sm)
# ------------------------------------------------------------------------------------------

class GemmAr(Case):
    """``gemm_ar`` sm, split 2: bitwise the unfused path (local kernel + all-reduce in fp32,
    one rounding) at W = 2; beyond, the owner rounds after each added partial."""

    def __init__(self, comm, gen, M=256, N=320, Kl=192):
        import torch

        from syncopate.ops.driver import resolve_config
        self.comm, self.gen, dev = comm, gen, comm.device
        self.dtype = torch.bfloat16
        self.cfg = resolve_config("tma", M, N, Kl, self.dtype)
        self.a = torch.empty((M, Kl), device=dev, dtype=self.dtype)
        self.b = torch.randn(Kl, N, generator=gen, device=dev).to(self.dtype)
        self.out = torch.empty((M, N), device=dev, dtype=self.dtype)
        self.exact = comm.world_size == 2

    def call(self):
        from syncopate.ops import gemm_ar
        gemm_ar(self.a, self.b, self.comm, backend="sm", split=2, order="swizzle",
                kernel="tma", config=self.cfg, out=self.out, fused=True)
        return (self.out,)

    def refresh(self):
        import torch
        self.a.copy_(torch.randn(self.a.shape, generator=self.gen, device=self.a.device))

    def reference(self):
        from syncopate.ops import gemm_ar
        return (gemm_ar(self.a, self.b, self.comm, kernel="tma", config=self.cfg, fused=False),)

    def mismatches(self, outs, ref):
        if self.exact:
            return _count_ne(outs[0], ref[0])
        # the owner rounds after each added partial, NCCL's ring after each hop (gemm_rs's
        # bound, tests/gpu/gpu_workers.py gemm_rs_stress); stale data is far off
        tol = (self.comm.world_size - 1) * 2.0 ** -7 * ref[0].float().abs().amax()
        return _count_tol(outs[0], ref[0], tol, 0.0)


# ------------------------------------------------------------------------------------------
# FP8 ops (sm)
# ------------------------------------------------------------------------------------------

def _quant_rows(x):
    from syncopate.bench.local_fp8 import quantize
    q, s = quantize(x, 1)
    return q, s.reshape(-1, 1)


class AgGemmFp8(Case):
    """``ag_gemm_fp8`` sm, split 2, row-wise scales: bitwise the unfused path (NCCL all-gather
    of A and its scales + the same FP8 kernel)."""

    def __init__(self, comm, gen, Ms=128, N=256, K=128):
        import torch
        self.comm, self.gen, dev = comm, gen, comm.device
        W = comm.world_size
        self.a = torch.empty((Ms, K), device=dev, dtype=torch.float8_e4m3fn)
        self.sa = torch.empty((Ms, 1), device=dev, dtype=torch.float32)
        bt, sbt = _quant_rows(torch.randn(N, K, generator=gen, device=dev))
        self.b, self.sb = bt.t(), sbt.t().contiguous()
        self.out = torch.empty((Ms * W, N), device=dev, dtype=torch.bfloat16)

    def call(self):
        from syncopate.ops import ag_gemm_fp8
        ag_gemm_fp8(self.a, self.b, self.sa, self.sb, self.comm, backend="sm", split=2,
                    kernel="tma", out=self.out, fused=True)
        return (self.out,)

    def refresh(self):
        import torch
        x = torch.randn(self.a.shape, generator=self.gen, device=self.a.device)
        x *= 1 + self.comm.rank  # per-rank amax: per-rank scales
        q, s = _quant_rows(x)
        self.a.copy_(q)
        self.sa.copy_(s)

    def reference(self):
        from syncopate.ops import ag_gemm_fp8
        return (ag_gemm_fp8(self.a, self.b, self.sa, self.sb, self.comm, kernel="tma",
                            fused=False),)


class GemmRsFp8(Case):
    """``gemm_rs_fp8`` sm, split 2: bitwise the unfused path at W = 2 (one rounding of a
    two-term fp32 sum either way), to rounding beyond."""

    def __init__(self, comm, gen, M=256, N=256, Kl=128):
        import torch
        self.comm, self.gen, dev = comm, gen, comm.device
        W = comm.world_size
        self.a = torch.empty((M, Kl), device=dev, dtype=torch.float8_e4m3fn)
        self.sa = torch.empty((M, 1), device=dev, dtype=torch.float32)
        bt, sbt = _quant_rows(torch.randn(N, Kl, generator=gen, device=dev))
        self.b, self.sb = bt.t(), sbt.t().contiguous()
        self.out = torch.empty((M // W, N), device=dev, dtype=torch.bfloat16)
        self.exact = W == 2

    def call(self):
        from syncopate.ops import gemm_rs_fp8
        gemm_rs_fp8(self.a, self.b, self.sa, self.sb, self.comm, backend="sm", reduce="comm",
                    split=2, kernel="tma", out=self.out, fused=True)
        return (self.out,)

    refresh = AgGemmFp8.refresh

    def reference(self):
        from syncopate.ops import gemm_rs_fp8
        return (gemm_rs_fp8(self.a, self.b, self.sa, self.sb, self.comm, kernel="tma",
                            fused=False),)

    def mismatches(self, outs, ref):
        if self.exact:
            return _count_ne(outs[0], ref[0])
        tol = (self.comm.world_size - 1) * 2.0 ** -7 * ref[0].float().abs().amax()
        return _count_tol(outs[0], ref[0], tol, 0.0)


# ------------------------------------------------------------------------------------------
# Attention
# ------------------------------------------------------------------------------------------

class RingAttention(Case):
    """``ring_attention`` sm into static ``(o, lse)``: the fused KV loop visits blocks in
    arrival order (``reorder_reductions``), so it agrees with the unfused path to rounding --
    the eager tests' bounds: ``|o - o_ref| <= 1.6e-2``, ``|lse - lse_ref| <= 1e-3``. Stale K/V
    of the previous replay (fresh random inputs each time) would be far off."""

    exact = False

    def __init__(self, comm, gen, causal, B, Hq, Hkv, Sl, D, order, dtype="bfloat16"):
        import torch
        self.comm, self.gen, dev = comm, gen, comm.device
        self.causal, self.order = causal, order
        self.config = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
        dt = getattr(torch, dtype)
        self.q = torch.empty((B, Hq, Sl, D), device=dev, dtype=dt)
        self.k = torch.empty((B, Hkv, Sl, D), device=dev, dtype=dt)
        self.v = torch.empty((B, Hkv, Sl, D), device=dev, dtype=dt)
        self.o = torch.empty((B, Hq, Sl, D), device=dev, dtype=dt)
        self.lse = torch.empty((B, Hq, Sl), device=dev, dtype=torch.float32)

    def call(self):
        from syncopate.ops import ring_attention
        ring_attention(self.q, self.k, self.v, self.comm, causal=self.causal, order=self.order,
                       config=self.config, comm_programs=4, out=(self.o, self.lse), fused=True)
        return (self.o, self.lse)

    def refresh(self):
        import torch
        for t in (self.q, self.k, self.v):
            t.copy_(torch.randn(t.shape, generator=self.gen, device=t.device))

    def reference(self):
        from syncopate.ops import ring_attention_reference
        return ring_attention_reference(self.q, self.k, self.v, self.comm, causal=self.causal,
                                        config=self.config)

    def mismatches(self, outs, ref):
        return _count_tol(outs[0], ref[0], 1.6e-2, 0.0) + _count_tol(outs[1], ref[1], 1e-3, 0.0)


class Ulysses(Case):
    """``ulysses_attention`` sm into a static ``out``: bitwise the unfused path (all-to-all,
    the same local kernel and config, all-to-all back)."""

    def __init__(self, comm, gen, B=1, Sl=256, D=128, causal=True):
        import torch
        W = comm.world_size
        self.comm, self.gen, dev = comm, gen, comm.device
        self.causal = causal
        Hq, Hkv = 4 * W, 2 * W
        self.q = torch.empty((B, Hq, Sl, D), device=dev, dtype=torch.bfloat16)
        self.k = torch.empty((B, Hkv, Sl, D), device=dev, dtype=torch.bfloat16)
        self.v = torch.empty((B, Hkv, Sl, D), device=dev, dtype=torch.bfloat16)
        self.out = torch.empty((B, Hq, Sl, D), device=dev, dtype=torch.bfloat16)

    def call(self):
        from syncopate.ops import ulysses_attention
        ulysses_attention(self.q, self.k, self.v, self.comm, causal=self.causal, fused=True,
                          out=self.out)
        return (self.out,)

    refresh = RingAttention.refresh

    def reference(self):
        from syncopate.ops import ulysses_attention_reference
        return (ulysses_attention_reference(self.q, self.k, self.v, self.comm,
                                            causal=self.causal),)


# ------------------------------------------------------------------------------------------
# MoE layer: dispatch -> SiLU -> combine, one graph
# ------------------------------------------------------------------------------------------

class MoELayer(Case):
    """The capturable MoE layer (``on_overflow='drop', validate=False``): fused dispatch, SiLU,
    fused combine, captured as one graph; a new routing each replay -- every other one with a
    hot expert, so drops vary. Bitwise against the unfused layer on the same routing (the same
    grouped GEMMs and weighted sum), and the device-side counts (``counts``, ``dropped``,
    ``invalid``) equal."""

    def __init__(self, comm, gen, E_per_rank=2, C=64, Hd=128, F=256, T=96, k=2, mode="push"):
        import torch

        from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
        W, r, dev = comm.world_size, comm.rank, comm.device
        self.comm, self.gen, self.mode, self.C = comm, gen, mode, C
        self.E, self.k = E_per_rank * W, k
        self.cfg = GroupedGemmConfig(64, 64, 64, 4, 3)
        g = torch.Generator(device=dev)
        g.manual_seed(77)  # the same experts' weights on every rank
        w1 = (torch.randn(self.E, Hd, F, generator=g, device=dev) / Hd ** 0.5).to(torch.bfloat16)
        w2 = (torch.randn(self.E, F, Hd, generator=g, device=dev) / F ** 0.5).to(torch.bfloat16)
        mine = slice(r * E_per_rank, (r + 1) * E_per_rank)
        self.w1, self.w2 = w1[mine].contiguous(), w2[mine].contiguous()
        self.x = torch.empty((T, Hd), device=dev, dtype=torch.bfloat16)
        self.ids = torch.zeros((T, k), device=dev, dtype=torch.int64)
        self.wts = torch.empty((T, k), device=dev, dtype=torch.float32)
        self.step = 0

    def _layer(self, fused):
        import torch

        from syncopate.ops import moe_dispatch_gemm, moe_gemm_combine
        d = moe_dispatch_gemm(self.x, self.ids, self.wts, self.w1, self.comm, capacity=self.C,
                              config=self.cfg, on_overflow="drop", validate=False,
                              comm_programs=2, fused=fused)
        h = torch.nn.functional.silu(d.out.float()).to(torch.bfloat16)
        y = moe_gemm_combine(h, self.w2, d, self.comm, config=self.cfg, mode=self.mode,
                             validate=False, comm_programs=2, fused=fused)
        return (y, d.counts, d.dropped, d.invalid)

    def call(self):
        return self._layer(True)

    def refresh(self):
        import torch
        T, dev = self.x.shape[0], self.x.device
        self.x.copy_(torch.randn((T, self.x.shape[1]), generator=self.gen, device=dev))
        scores = torch.rand((T, self.E), generator=self.gen, device=dev)
        if self.step % 2:
            scores[:, self.step % self.E] += 1.0  # a hot expert: T > C of its choices drop
        self.step += 1
        self.ids.copy_(scores.topk(self.k, dim=1).indices)
        self.wts.copy_(torch.rand((T, self.k), generator=self.gen, device=dev))

    def reference(self):
        return self._layer(False)

    def poison(self, outs):
        pass  # graph-pool outputs, rewritten by the replay (rows past a count are never read)

    def mismatches(self, outs, ref):
        y, counts, dropped, invalid = outs
        return (_count_ne(y, ref[0]) + _count_ne(counts, ref[1]) + _count_ne(dropped, ref[2])
                + invalid.long() + ref[3].long())


CASES = {
    "gemm_ar": GemmAr,
    "ag_gemm_fp8": AgGemmFp8,
    "gemm_rs_fp8": GemmRsFp8,
    "ring_attention": lambda comm, gen: RingAttention(comm, gen, False, 2, 2, 1, 256, 64,
                                                      "swizzle"),
    "ring_attention_causal": lambda comm, gen: RingAttention(comm, gen, True, 1, 4, 1, 128, 64,
                                                             "ring", "float16"),
    "ulysses_attention": Ulysses,
    "moe_layer": MoELayer,
}


# ------------------------------------------------------------------------------------------
# World size 1: the ops' local paths (the choice made before capture, fixed in the graph)
# ------------------------------------------------------------------------------------------

class WorldSizeOne(Case):
    """Every op at world size 1 in one graph: ``ag_gemm`` and ``gemm_rs`` on the op's own
    choice of local GEMM (ours or cuBLAS, decided at the eager warm-up), ``gemm_ar`` (ours or cuBLAS, as ``ag_gemm``),
    ``ring_attention`` (the local kernel) and the MoE layer (packing, grouped GEMMs, weighted
    sum: no collective). The reference is the same calls made eagerly on the same inputs:
    bitwise (the same kernels; cuBLAS is deterministic for one shape on one GPU)."""

    def __init__(self, comm, gen):
        import torch
        dev = comm.device
        self.comm, self.gen = comm, gen
        bf = torch.bfloat16
        self.a = torch.empty((512, 256), device=dev, dtype=bf)
        self.b = torch.randn(256, 384, generator=gen, device=dev).to(bf)
        self.ag_out = torch.empty((512, 384), device=dev, dtype=bf)
        self.rs_out = torch.empty((512, 384), device=dev, dtype=bf)
        self.ar_out = torch.empty((512, 384), device=dev, dtype=bf)
        self.ring = RingAttention(comm, gen, True, 1, 4, 2, 256, 64, "swizzle")
        self.moe = MoELayer(comm, gen, E_per_rank=4)

    def _all(self, eager):
        from syncopate.ops import ag_gemm, gemm_ar, gemm_rs
        outs = [self.ag_out, self.rs_out, self.ar_out] if not eager else [None] * 3
        r = [ag_gemm(self.a, self.b, self.comm, out=outs[0]),
             gemm_rs(self.a, self.b, self.comm, kernel="tma", out=outs[1]),
             gemm_ar(self.a, self.b, self.comm, out=outs[2])]
        if eager:
            from syncopate.ops import ring_attention
            r += list(ring_attention(self.ring.q, self.ring.k, self.ring.v, self.comm,
                                     causal=True, config=self.ring.config))
        else:
            r += list(self.ring.call())
        return tuple(r) + self.moe._layer(None)

    def call(self):
        return self._all(False)

    def refresh(self):
        import torch
        self.a.copy_(torch.randn(self.a.shape, generator=self.gen, device=self.a.device))
        self.ring.refresh()
        self.moe.refresh()

    def reference(self):
        return self._all(True)

    def poison(self, outs):
        for t in (self.ag_out, self.rs_out, self.ar_out, self.ring.o, self.ring.lse):
            t.fill_(float("nan"))

    def mismatches(self, outs, ref):
        n = sum(_count_ne(o, r) for o, r in zip(outs[:5], ref[:5]))
        return n + self.moe.mismatches(outs[5:], ref[5:])
