"""``syncopate.ops.moe_dispatch_gemm`` on a CPU: the typed errors for bad routing and sizes
(issue 12: ids out of range, wrong dtype/shape, capacity overflow, sizes the fused kernel
cannot take), raised before anything is launched; and the device-side packing it uses
(capacity layout, per-destination counts, counted drops). The fused and unfused paths run on
GPUs only (tests/gpu/test_multi_gpu.py); the kernel and schedule are emulated in
tests/test_emulate_moe.py."""

from __future__ import annotations

import importlib
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.ops import moe_dispatch_gemm  # noqa: E402
from syncopate.ops.moe_routing import pack_dispatch  # noqa: E402

COMM = SimpleNamespace(world_size=2, rank=0, device=torch.device("cpu"), group=None, cache={})


def _inputs(T=8, H=32, El=2, N=16, k=2):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(T, H, generator=g).to(torch.bfloat16)
    ids = torch.stack([torch.randperm(El * 2, generator=g)[:k] for _ in range(T)])
    return x, ids, torch.rand(T, k, generator=g), torch.randn(El, H, N).to(torch.bfloat16)


@pytest.mark.parametrize("mutate,match", [
    (lambda x, i, w, wl: (x[0], i, w, wl), "x must be a 2-D"),
    (lambda x, i, w, wl: (x, i.float(), w, wl), "int32 or int64"),
    (lambda x, i, w, wl: (x, i[:3], w, wl), "topk_ids must be"),
    (lambda x, i, w, wl: (x, i, w[:, :1], wl), "topk_weights must be"),
    (lambda x, i, w, wl: (x, i, w, wl[0]), "w_local must be"),
    (lambda x, i, w, wl: (x, i, w, wl.half()), "must both be bfloat16 or both float16"),
    (lambda x, i, w, wl: (x[:, :16], i, w, wl), "hidden size"),
    (lambda x, i, w, wl: (x, i + 7, w, wl), "outside \\[0, 4\\)"),
])
@pytest.mark.parametrize("fused", [False, True])
def test_bad_inputs_are_typed_errors(mutate, match, fused):
    args = mutate(*_inputs())
    with pytest.raises(LaunchError, match=match):
        moe_dispatch_gemm(*args, COMM, capacity=128, fused=fused)


def test_capacity_overflow_is_a_typed_error():
    x, ids, w, wl = _inputs(T=200)
    ids[:, 0] = 1  # 200 tokens for expert 1, capacity 128; the others get ~67 each
    ids[:, 1] = torch.tensor([0, 2, 3])[torch.arange(200) % 3]
    with pytest.raises(LaunchError, match="expert 1 was routed 200 tokens, more than the "
                                          "capacity 128"):
        moe_dispatch_gemm(x, ids, w, wl, COMM, capacity=128, fused=False)


@pytest.mark.parametrize("kwargs,match", [
    (dict(capacity=100), "multiple of the grouped GEMM's BLOCK_M=128"),
    (dict(capacity=128, on_overflow="ignore"), "on_overflow must be"),
    (dict(capacity=128, backend="ce", fused=True), "comm programs in the kernel"),
])
def test_bad_options_are_typed_errors(kwargs, match):
    with pytest.raises(LaunchError, match=match):
        moe_dispatch_gemm(*_inputs(), COMM, **kwargs)


def test_pack_dispatch_layout_counts_and_drops():
    """Expert 1 gets tokens 0..4 (capacity 3: 3 and 4 are dropped); experts 0, 1 belong to
    rank 0 and 2, 3 to rank 1, so each destination's row of counts is zero off its experts."""
    x = torch.arange(12.).reshape(6, 2)
    ids = torch.tensor([[1, 0], [1, 2], [1, 3], [1, 0], [1, 2], [0, 3]])
    p = pack_dispatch(x, ids, 4, 2, 3)
    assert p.counts.tolist() == [[3, 3, 0, 0], [0, 0, 2, 2]]
    assert p.dropped.tolist() == [0, 2, 0, 0]
    assert p.slot[:, 0].tolist() == [3, 4, 5, -1, -1, 2]  # token 5 is expert 0's third
    assert torch.equal(p.send[1], x[:3])                      # expert 1: tokens 0, 1, 2
    assert torch.equal(p.send[0], x[[0, 3, 5]])               # expert 0: tokens 0, 3, 5
    assert torch.equal(p.send[2, :2], x[[1, 4]]) and not p.send[2, 2].any()


def test_pack_dispatch_discards_bad_ids_when_not_validating():
    x = torch.ones(4, 2)
    ids = torch.tensor([[0, 9], [-1, 1], [1, 2], [3, 0]])
    p = pack_dispatch(x, ids, 4, 2, 3, validate=False)
    assert int(p.invalid) == 2
    assert p.counts.tolist() == [[2, 2, 0, 0], [0, 0, 1, 1]]
    assert p.slot[0, 1] == -1 and p.slot[1, 0] == -1


def _bind_fused_launch(monkeypatch, module, fused_kernel_fn, call):
    """Run ``call()`` with ``module.fused_kernel_fn`` replaced by a stand-in that binds the
    launch's arguments to ``grouped_gemm_kernel`` as ``FusedKernel.launch`` does; returns
    (parameter name -> value, grid)."""
    from syncopate.kernels.grouped_gemm import grouped_gemm_kernel
    from syncopate.runtime.specialize import bind_args, param_names
    mod = importlib.import_module(module)
    bound = {}

    class FakeFused:
        def before_staging(self):
            pass

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                values, _ = bind_args(grouped_gemm_kernel, args, kwargs)
                bound["values"] = dict(zip(param_names(grouped_gemm_kernel), values))
                bound["grid"] = grid
            return launch

    monkeypatch.setattr(mod, fused_kernel_fn, lambda *a, **k: FakeFused())
    call()
    return bound["values"], bound["grid"]


def _cpu_comm(rank):
    return SimpleNamespace(world_size=2, rank=rank, device=torch.device("cpu"), group=None,
                           cache={}, empty=lambda shape, dt: torch.zeros(shape, dtype=dt))


def test_fused_launch_passes_exactly_the_kernels_arguments(monkeypatch):
    """Both MoE ops' fused launches bind to ``grouped_gemm_kernel``'s parameters, every
    constexpr of the config included (a constexpr added to the kernel and its config but not
    to an op's launch failed only on a GPU), on a CPU communicator."""
    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import moe_gemm_combine
    cfg = GroupedGemmConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    x, ids, w, wl = _inputs()
    v, grid = _bind_fused_launch(
        monkeypatch, "syncopate.ops.moe_dispatch_gemm", "moe_dispatch_gemm_fused_kernel",
        lambda: moe_dispatch_gemm(x, ids, w, wl, _cpu_comm(1), capacity=128, config=cfg,
                                  fused=True))
    assert {k: v[k] for k in cfg.constexprs()} == cfg.constexprs()
    assert (v["a_base"], v["cnt_base"], v["C"]) == (2, 4 + 2, 128)  # rank 1 of 2, E = 4, El = 2
    assert grid == (2 * 2 * (128 // 64) * 1,)
    h, w2, d = _combine_inputs()
    v, grid = _bind_fused_launch(
        monkeypatch, "syncopate.ops.moe_gemm_combine", "moe_gemm_combine_fused_kernel",
        lambda: moe_gemm_combine(h, w2, d, _cpu_comm(0), config=cfg, fused=True))
    assert {k: v[k] for k in cfg.constexprs()} == cfg.constexprs()
    assert v["C"] == 128 and grid[0] == 2 * 2 * (128 // 64) * 1


# ------------------------------------------------------------------------------------------
# moe_gemm_combine: typed errors before anything is launched
# ------------------------------------------------------------------------------------------

def _combine_inputs(T=8, El=2, C=128, F=32, H=16, k=2, W=2):
    """A consistent (h, w_local, routing) for rank 0 of 2, built from a real packing."""
    from syncopate.ops import MoEDispatch
    x, ids, wts, _ = _inputs(T=T, El=El, k=k)
    E = El * W
    p = pack_dispatch(x, ids, E, W, C)
    cnt = torch.cat([p.counts.reshape(-1)] * W)   # every rank's block (the same tokens)
    counts = cnt.view(W, W, E)[:, 0, :El].contiguous()
    h = torch.randn(W * El, C, F).to(torch.bfloat16)
    w2 = torch.randn(El, F, H).to(torch.bfloat16)
    return h, w2, MoEDispatch(None, counts, p.slot, p.dropped, wts, cnt)


def _replace(d, **kw):
    import dataclasses
    return dataclasses.replace(d, **kw)


@pytest.mark.parametrize("mutate,match", [
    (lambda h, w, d: (h, w, "routing"), "routing must be the MoEDispatch"),
    (lambda h, w, d: (h, w[0], d), "w_local must be"),
    (lambda h, w, d: (h[:1], w, d), "h must be"),
    (lambda h, w, d: (h[:, :, :8], w, d), "h must be"),
    (lambda h, w, d: (h.half(), w, d), "must both be bfloat16 or both float16"),
    (lambda h, w, d: (h, w, _replace(d, counts=d.counts.long())), "routing.counts must be"),
    (lambda h, w, d: (h, w, _replace(d, counts=d.counts[:, :1])), "was the dispatch run"),
    (lambda h, w, d: (h, w, _replace(d, cnt=d.cnt[:4])), "routing.cnt must be"),
    (lambda h, w, d: (h, w, _replace(d, slot=d.slot.int())), "routing.slot must be"),
    (lambda h, w, d: (h, w, _replace(d, slot=d.slot[:, 0])), "routing.slot must be"),
    (lambda h, w, d: (h, w, _replace(d, topk_weights=d.topk_weights[:, :1])),
     "topk_weights must be"),
    (lambda h, w, d: (h, w, _replace(d, topk_weights=d.topk_weights.long())),
     "topk_weights must be"),
    (lambda h, w, d: (h, w, _replace(d, slot=d.slot + 1000)), "outside \\[-1, 512\\)"),
    (lambda h, w, d: (h, w, _replace(d, slot=d.slot - 5)), "outside \\[-1, 512\\)"),
])
@pytest.mark.parametrize("fused", [False, True])
def test_combine_bad_inputs_are_typed_errors(mutate, match, fused):
    from syncopate.ops import moe_gemm_combine
    h, w, d = mutate(*_combine_inputs())
    with pytest.raises(LaunchError, match=match):
        moe_gemm_combine(h, w, d, COMM, fused=fused)


@pytest.mark.parametrize("kwargs,match", [
    (dict(fused=True, backend="ce"), "backend 'sm' only"),
    (dict(fused=True, backend="nvshmem"), "backend 'sm' only"),
    (dict(fused=True, mode="both"), "mode must be"),
])
def test_combine_bad_options_are_typed_errors(kwargs, match):
    from syncopate.ops import moe_gemm_combine
    with pytest.raises(LaunchError, match=match):
        moe_gemm_combine(*_combine_inputs(), COMM, **kwargs)


def test_combine_capacity_must_be_a_multiple_of_the_tile():
    from syncopate.ops import moe_gemm_combine
    h, w, d = _combine_inputs(C=96)
    with pytest.raises(LaunchError, match="multiple of the grouped GEMM's BLOCK_M=128"):
        moe_gemm_combine(h, w, d, COMM, fused=True)


def test_combine_rows_leave_dropped_choices_and_padding_out():
    """A dropped choice (row -1) contributes nothing even when the row it would alias holds
    NaN (padding); the weighted sum runs in fp32 in choice order."""
    from syncopate.ops.moe_gemm_combine import combine_rows, fused_rows
    y = torch.tensor([[float("nan"), float("nan")], [1.0, 2.0], [3.0, 4.0]])
    rows = torch.tensor([[1, -1], [2, 1]])
    w = torch.tensor([[0.5, 9.0], [0.25, 1.0]])
    out = combine_rows(y, rows, w, torch.float32)
    assert out.tolist() == [[0.5, 1.0], [1.75, 3.0]]
    # rank 1 of 2, 4 experts, capacity 2: slot x*C + j lands in group (d, 1, x) of Y
    slot = torch.tensor([[0 * 2 + 1, 3 * 2 + 0, -1]])
    assert fused_rows(slot, 1, 2, 4, 2).tolist() == [[(0 * 4 + 1 * 2 + 0) * 2 + 1,
                                                      (1 * 4 + 1 * 2 + 1) * 2 + 0, -1]]
