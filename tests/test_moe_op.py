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


def test_fused_launch_passes_exactly_the_kernels_arguments(monkeypatch):
    """The fused path's launch arguments bind to ``grouped_gemm_kernel``'s parameters, every
    constexpr of the config included (a constexpr added to the kernel and its config but not
    to the op's launch failed only on a GPU). The fused kernel is stood in for by one that
    binds the arguments as ``FusedKernel.launch`` does, on a CPU communicator."""
    from syncopate.kernels.grouped_gemm import grouped_gemm_kernel
    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    mod = importlib.import_module("syncopate.ops.moe_dispatch_gemm")
    from syncopate.runtime.specialize import bind_args, param_names

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

    comm = SimpleNamespace(world_size=2, rank=1, device=torch.device("cpu"), group=None,
                           cache={}, empty=lambda shape, dt: torch.zeros(shape, dtype=dt))
    monkeypatch.setattr(mod, "moe_dispatch_gemm_fused_kernel", lambda *a, **k: FakeFused())
    cfg = GroupedGemmConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=4)
    x, ids, w, wl = _inputs()
    moe_dispatch_gemm(x, ids, w, wl, comm, capacity=128, config=cfg, fused=True)
    v = bound["values"]
    assert {k: v[k] for k in cfg.constexprs()} == cfg.constexprs()
    assert (v["a_base"], v["cnt_base"], v["C"]) == (2, 4 + 2, 128)  # rank 1 of 2, E = 4, El = 2
    assert bound["grid"] == (2 * 2 * (128 // 64) * 1,)
