"""Every op under CUDA-graph capture, on the CPU (docs/cuda-graphs.md, "Per op"): what each op
refuses under capture (typed, before anything is enqueued, saying what to pass instead) and
that the path it takes under capture reads nothing back to the host.

Capture is faked as in test_graph_capture.py (the thread marked as capturing); host reads are
recorded by host_syncs.py (on a GPU they would fail the capture). The GPU-only pieces -- the
FusedKernel, the local kernels -- are stand-ins that record their launches; the GPU half
(1000 replays with changing inputs, every output checked) is tests/gpu/test_cuda_graphs.py.
"""

from __future__ import annotations

import importlib

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import GraphCaptureError, LaunchError  # noqa: E402
from syncopate.runtime import graphs  # noqa: E402
from host_syncs import host_syncs  # noqa: E402
from runtime_fakes import fake_comm  # noqa: E402
from test_graph_capture import FakeGraph, capture  # noqa: E402
from test_ops_cpu import _op_fixture  # noqa: E402

BF = torch.bfloat16


def test_the_probe_sees_the_host_reads_capture_refuses():
    """The no-host-read assertions below are worth something only if the probe sees them."""
    t = torch.arange(6)
    m = t > 2
    for read in (lambda: bool(m.any()), lambda: t[m], lambda: t.tolist(), lambda: int(t[0]),
                 lambda: torch.bincount(t), lambda: m.nonzero(), lambda: t.sum().item(),
                 lambda: t.__setitem__(m, 0)):
        with host_syncs() as seen:
            read()
        assert seen, read
    with host_syncs() as seen:
        torch.sort(t, stable=True)
        t[t.flip(0)] = t.clone()
        torch.zeros(7, dtype=torch.int64).scatter_add_(0, t, torch.ones_like(t))
    assert seen == []


# ------------------------------------------------------------------------------------------
# GEMM ops: the prepared (fused) path after a warm-up
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op,a_shape,b_shape", [("ag_gemm", (32, 64), (64, 48)),
                                                ("gemm_rs", (64, 32), (32, 48)),
                                                ("gemm_ar", (64, 32), (32, 48))])
def test_gemm_ops_after_warm_up_capture_without_host_reads(monkeypatch, op, a_shape, b_shape):
    """After an eager call, a call with a new ``a`` of the same layout under capture takes the
    prepared path: one launch, this call's tensors swapped in, the result written into the
    caller's ``out``, nothing read back."""
    mod, calls, fk = _op_fixture(monkeypatch, f"syncopate.ops.{op}")
    c = fake_comm()
    b = torch.randn(*b_shape).to(BF)
    out = torch.empty(*(mod.__dict__[op](torch.randn(*a_shape).to(BF), b, c, backend="sm",
                                         split=2, comm_programs=8).shape), dtype=BF)
    kw = dict(backend="sm", split=2, comm_programs=8, out=out)
    mod.__dict__[op](torch.randn(*a_shape).to(BF), b, c, **kw)  # warm-up with the static out
    a = torch.randn(*a_shape).to(BF)
    n = len(calls["launches"])
    with capture(), host_syncs() as seen:
        assert mod.__dict__[op](a, b, c, **kw) is out
    assert seen == [] and len(calls["launches"]) == n + 1 and calls["gemm_call"] == 2


def test_world_size_one_refuses_a_cold_layout_under_capture(monkeypatch):
    """World size 1 runs the local GEMM alone: its first call per layout decides the path and
    compiles and loads the kernel, which a graph cannot capture -- refused, saying to call it
    eagerly first; after that the same layout is captured with no host read."""
    from syncopate.ops import driver, ag_gemm, gemm_ar, gemm_rs
    ran = []
    monkeypatch.setattr(driver, "local_gemm", lambda k, a, b, out, cfg: ran.append(k))
    monkeypatch.setattr(driver, "_W1_PLANS", {})
    c = fake_comm(W=1)
    a, b = torch.randn(24, 40).to(BF), torch.randn(40, 16).to(BF)
    # gemm_ar at world size 1 is the local GEMM too: no collective for the identity all-reduce
    from syncopate.runtime import collectives
    monkeypatch.setattr(collectives, "all_reduce",
                        lambda *a, **k: (_ for _ in ()).throw(AssertionError("all_reduce")))
    for op in (ag_gemm, gemm_rs, gemm_ar):
        with capture(), pytest.raises(GraphCaptureError, match="never called eagerly"):
            op(a, b, c)
        assert ran == []
        op(a, b, c)  # eager: decides, compiles
        with capture(), host_syncs() as seen:
            op(a, b, c)
        assert seen == [] and len(ran) == 2
        ran.clear()


# ------------------------------------------------------------------------------------------
# The unfused path in loopback
# ------------------------------------------------------------------------------------------

def _collective_under_capture(rank, W):
    from syncopate.runtime import collectives as dist
    x = torch.full((4,), float(rank + 1))
    out = torch.empty(4 * W)
    errors = []
    graphs._LOCAL.active = []
    try:
        for call in (lambda: dist.all_gather_into_tensor(out, x), lambda: dist.all_reduce(x),
                     lambda: dist.barrier()):
            try:
                call()
            except GraphCaptureError as e:
                errors.append(str(e))
    finally:
        graphs._LOCAL.active = None
    dist.all_reduce(x)  # no rank entered a refused collective: the group is in step
    return errors, float(x[0])


def test_loopback_collectives_are_refused_under_capture():
    """A loopback collective meets the other ranks on the host at every call, which a replay
    would skip: refused under capture on every rank before any rendezvous (so the group stays
    usable), saying to capture the fused path instead."""
    from syncopate.runtime.loopback import run_loopback
    res = run_loopback(_collective_under_capture, 2)
    for status, value in res:
        assert status == "ok", value
        errors, total = value
        assert len(errors) == 3 and total == 3.0
        assert all("fused=True, backend='sm'" in e for e in errors)
        assert "all_gather_into_tensor" in errors[0] and "barrier" in errors[2]


# ------------------------------------------------------------------------------------------
# Attention ops
# ------------------------------------------------------------------------------------------

class _RecordingKernel:
    """A FusedKernel stand-in: records launches and writes 7 into the output argument."""

    _poisoned = None

    def __init__(self, out_index):
        self.launches = []
        self.out_index = out_index

    def before_staging(self):
        pass

    def __getitem__(self, grid):
        def run(*args):
            self.launches.append((grid, args))
            args[self.out_index].fill_(7.0)
        return run

    def launch(self, grid, args):  # the ops' prepared calls launch without the closure
        return self[grid](*args)


def _qkv(B, Hq, Hkv, Sl, D):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(B, Hq, Sl, D, generator=g).to(BF),
            torch.randn(B, Hkv, Sl, D, generator=g).to(BF),
            torch.randn(B, Hkv, Sl, D, generator=g).to(BF))


def test_ulysses_writes_into_out_and_captures_without_host_reads(monkeypatch):
    mod = importlib.import_module("syncopate.ops.ulysses")
    fk = _RecordingKernel(3)
    monkeypatch.setattr(mod, "ulysses_fused_kernel", lambda *a, **kw: fk)
    W, rank, B, Hq, Hkv, Sl, D = 2, 1, 1, 4, 2, 16, 64
    c = fake_comm(W=W, rank=rank)
    q, k, v = _qkv(B, Hq, Hkv, Sl, D)
    cfg = dict(BLOCK_M=16, BLOCK_N=16)
    mod.ulysses_attention(q, k, v, c, fused=True, config=cfg)  # warm-up: allocates buffers
    out = torch.zeros(B, Hq, Sl, D, dtype=BF)
    with capture(), host_syncs() as seen:
        assert mod.ulysses_attention(q, k, v, c, fused=True, config=cfg, out=out) is out
    assert seen == [] and bool((out == 7).all()) and len(fk.launches) == 2
    for bad in (torch.zeros(B, Hq, Sl + 1, D, dtype=BF), torch.zeros(B, Hq, Sl, D)):
        with pytest.raises(LaunchError, match=r"out must be this rank's \[B, Hq, S/W, D\]"):
            mod.ulysses_attention(q, k, v, c, fused=True, config=cfg, out=bad)


@pytest.mark.parametrize("causal", [False, True])
def test_ring_attention_captures_without_host_reads(monkeypatch, causal):
    mod = importlib.import_module("syncopate.ops.ring_attention")
    fk = _RecordingKernel(3)
    monkeypatch.setattr(mod, "ring_attention_fused_kernel", lambda *a, **kw: fk)
    W, B, Hq, Hkv, Sl, D = 2, 1, 4, 2, 64, 64
    c = fake_comm(W=W, rank=1)
    q, k, v = _qkv(B, Hq, Hkv, Sl, D)
    cfg = dict(BLOCK_M=16, BLOCK_N=16)
    mod.ring_attention(q, k, v, c, causal=causal, config=cfg, comm_programs=2)  # warm-up
    out = (torch.zeros(B, Hq, Sl, D, dtype=BF), torch.zeros(B, Hq, Sl))
    with capture(), host_syncs() as seen:
        o, lse = mod.ring_attention(q, k, v, c, causal=causal, config=cfg, comm_programs=2,
                                    out=out)
    assert seen == [] and o is out[0] and lse is out[1] and bool((o == 7).all())
    kbuf, _ = mod.kv_buffers(c, B, Hkv, Sl * W, D, BF)
    assert torch.equal(kbuf.view(B, Hkv, W * Sl, D)[:, :, Sl:], k)  # this call's K staged


# ------------------------------------------------------------------------------------------
# MoE: data-dependent routing
# ------------------------------------------------------------------------------------------

def _moe_inputs(T=20, H=32, El=2, N=16, k=2, W=2, bad_ids=False):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(T, H, generator=g).to(BF)
    ids = torch.stack([torch.randperm(El * W, generator=g)[:k] for _ in range(T)])
    ids[:, 0] = 1  # expert 1 is hot: T > 16 choices, with capacity 16 some are dropped
    if bad_ids:
        ids[0, 1], ids[3, 1] = El * W + 3, -2
    return x, ids, torch.rand(T, k, generator=g), torch.randn(El, H, N).to(BF)


def _pack_before(x, topk_ids, E, W, C):
    """The packing as it was before it had to be capturable (bincount and boolean masks): the
    capturable one must give the same tensors."""
    T, H = x.shape
    ids = topk_ids.reshape(-1).long()
    bad = (ids < 0) | (ids >= E)
    ids = torch.where(bad, torch.full_like(ids, E), ids)
    order = torch.sort(ids, stable=True).indices
    per_expert = torch.bincount(ids, minlength=E + 1)
    first = torch.cumsum(per_expert, 0) - per_expert
    rank_in_expert = torch.empty_like(ids)
    rank_in_expert[order] = torch.arange(ids.numel()) - first[ids[order]]
    keep = (rank_in_expert < C) & ~bad
    slot = torch.where(keep, ids * C + rank_in_expert, torch.full_like(ids, -1))
    send = torch.zeros((E * C, H), dtype=x.dtype)
    tok = torch.arange(T).repeat_interleave(topk_ids.shape[1])
    send[slot[keep]] = x[tok[keep]]
    return send.reshape(E, C, H), slot.reshape(topk_ids.shape), per_expert


@pytest.mark.parametrize("seed", range(4))
def test_capturable_packing_is_the_same_packing_without_host_reads(seed):
    from syncopate.ops.moe_routing import pack_dispatch
    g = torch.Generator().manual_seed(seed)
    T, H, E, W, C, k = 40, 8, 8, 2, 6, 3
    x = torch.randn(T, H, generator=g)
    ids = torch.randint(-1, E + 1, (T, k), generator=g)  # out-of-range ids and hot experts
    ids[: T // 2, 0] = seed % E
    with host_syncs() as seen:
        p = pack_dispatch(x, ids, E, W, C, validate=False)
    assert seen == []
    send, slot, per_expert = _pack_before(x, ids, E, W, C)
    assert torch.equal(p.send, send) and torch.equal(p.slot, slot)
    assert torch.equal(p.dropped, (per_expert[:E] - per_expert[:E].clamp(max=C)).int())
    assert int(p.invalid) == int(((ids < 0) | (ids >= E)).sum())


def _fake_fused(monkeypatch, module, name):
    mod = importlib.import_module(module)
    launches = []

    class FakeFused:
        _poisoned = None

        def before_staging(self):
            pass

        def __getitem__(self, grid):
            return lambda *args: launches.append(grid)

        def launch(self, grid, args):
            return self[grid](*args)
    monkeypatch.setattr(mod, name, lambda *a, **k: FakeFused())
    return launches


def _moe_comm(rank=0):
    return fake_comm(W=2, rank=rank)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("on_overflow,validate,says", [
    ("error", False, ["on_overflow='drop'", "MoEDispatch.dropped"]),
    ("drop", True, ["validate=False", "MoEDispatch.invalid"]),
    ("error", True, ["on_overflow='drop'", "validate=False"])])
def test_dispatch_refuses_host_reads_under_capture(monkeypatch, fused, on_overflow, validate,
                                                   says):
    """``on_overflow='error'`` and ``validate`` read the drop count and the ids' range back to
    the host: refused under capture before anything is packed or launched, naming what to pass
    instead and where the device counts what the host read would have raised."""
    from syncopate.ops import moe_dispatch_gemm
    launches = _fake_fused(monkeypatch, "syncopate.ops.moe_dispatch_gemm",
                           "moe_dispatch_gemm_fused_kernel")
    x, ids, w, wl = _moe_inputs()
    with capture(), host_syncs() as seen, pytest.raises(GraphCaptureError) as ei:
        moe_dispatch_gemm(x, ids, w, wl, _moe_comm(), capacity=64, on_overflow=on_overflow,
                          validate=validate, fused=fused)
    assert all(s in str(ei.value) for s in says) and "moe_dispatch_gemm" in str(ei.value)
    assert launches == [] and seen == []


def test_dispatch_and_combine_capture_without_host_reads(monkeypatch):
    """The capturable MoE layer -- ``on_overflow='drop', validate=False`` in the dispatch,
    ``validate=False`` in the combine -- reads nothing back on the fused path; drops and bad
    ids are counted on the device (``dropped``, ``invalid``)."""
    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import moe_dispatch_gemm, moe_gemm_combine
    d_launches = _fake_fused(monkeypatch, "syncopate.ops.moe_dispatch_gemm",
                             "moe_dispatch_gemm_fused_kernel")
    c_launches = _fake_fused(monkeypatch, "syncopate.ops.moe_gemm_combine",
                             "moe_gemm_combine_fused_kernel")
    cfg = GroupedGemmConfig(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16, GROUP_M=1)
    x, ids, w, wl = _moe_inputs(bad_ids=True)
    comm = _moe_comm(rank=1)
    w2 = torch.randn(2, 16, 32).to(BF)
    kw = dict(capacity=16, config=cfg, on_overflow="drop", validate=False, fused=True)
    d = moe_dispatch_gemm(x, ids, w, wl, comm, **kw)  # warm-up
    moe_gemm_combine(d.out, w2, d, comm, config=cfg, validate=False, fused=True)
    with capture(), host_syncs() as seen:
        d = moe_dispatch_gemm(x, ids, w, wl, comm, **kw)
        y = moe_gemm_combine(d.out, w2, d, comm, config=cfg, validate=False, fused=True)
    assert seen == [] and len(d_launches) == len(c_launches) == 2
    assert int(d.invalid) == 2 and int(d.dropped.sum()) > 0 and y.shape == (20, 32)
    with capture(), pytest.raises(GraphCaptureError, match="validate=False") as ei:
        moe_gemm_combine(d.out, w2, d, comm, config=cfg, fused=True)
    assert "moe_gemm_combine" in str(ei.value) and len(c_launches) == 2


# ------------------------------------------------------------------------------------------
# FusedGraph at world size 1
# ------------------------------------------------------------------------------------------

def test_fused_graph_takes_a_capture_without_fused_kernels_when_told(monkeypatch):
    """World size 1 has no fused kernel by design: ``require_fused=False`` keeps one replay
    loop for every world size; by default an empty capture stays refused."""
    import contextlib
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)
    monkeypatch.setattr(torch.cuda, "graph",
                        lambda g, pool=None, stream=None, capture_error_mode="global":
                        contextlib.nullcontext())
    with pytest.raises(GraphCaptureError, match="require_fused=False"):
        graphs.FusedGraph.capture(lambda: "out")
    fg = graphs.FusedGraph.capture(lambda: "out", require_fused=False)
    assert fg.kernels == [] and fg.output == "out"
    fg.replay()
    assert fg.graph.replays == 1
