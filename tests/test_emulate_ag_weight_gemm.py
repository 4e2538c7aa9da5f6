"""``ag_weight_gemm`` (the weight all-gather of FSDP / ZeRO-3 fused with its GEMM) in the CPU
emulator: the local GEMMs fused with the op's own schedule -- its spec's template over the
``[K, N]`` weight, sharded along N (columns) or K (rows) -- at W = 2 and 3, both kernels, sm
and ce, two launches (the second with fresh random inputs). Every rank's C must be **bitwise**
the local kernel's on the gathered weight (the emulator's reference: the unfused kernel on the
collected inputs), under several interleavings, with the race checker clean. The schedule's
placement is checked against the op's own layout (which block of the weight a rank's shard is,
``OpSpec.gemm.dims`` / ``schedule_shape``), so a spec that cut the weight along the other dim
fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

from syncopate.emulate import PerRank, emulate
from syncopate.kernels import GemmConfig, compile_args, compile_attrs, kernel_fn
from syncopate.ops import REGISTRY, driver
from syncopate.schedule import TEMPLATES
from syncopate.schedule.model import Region

CFG = GemmConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
NUM_SMS = 4
POLICIES = ("in-order", "reverse", "late", "behind:0", "random:1")
SPEC = REGISTRY["ag_weight_gemm"]


class _Shard:
    """A weight shard's shape, all the op's spec reads of it (no torch here)."""

    def __init__(self, *shape):
        self.shape = shape


def _case(W, dim, M=128):
    """The local GEMM ``[M, K] x [K, N]`` and the schedule the op fuses for a weight sharded
    along ``dim`` (0: K, 1: N); each rank's shard is 64 wide along the sharded dim."""
    K, N = (32 * W, 64) if dim == 0 else (64, 64 * W)
    shard = _Shard(K // W, N) if dim == 0 else _Shard(K, N // W)
    dims = SPEC.gemm.dims(_Shard(M, K), shard, W)
    assert dims == (M, N, K, dim)  # the op reads the sharded dim from the shard's shape
    s = dict(zip(SPEC.shape, dims))
    shape, d = SPEC.gemm.schedule_shape(s, W)
    return M, N, K, shape, d


def _emulate(kernel, W, dim, backend, split=1):
    M, N, K, shape, d = _case(W, dim)
    sched = TEMPLATES[SPEC.gemm.template](list(shape), "bf16", W, dim=d, split=split,
                                          mode=driver.template_mode(SPEC.gemm.kind, backend))
    # rank r starts with its shard: rows (dim 0) or columns (dim 1) r of the [K, N] weight
    for r, placement in enumerate(sched.tensors[sched.meta["template"]["tensor"]].initial):
        offsets, sizes = [0, 0], [K, N]
        offsets[dim], sizes[dim] = r * (K, N)[dim] // W, (K, N)[dim] // W
        assert placement.rank == r and placement.region == Region(tuple(offsets), tuple(sizes))
    rng = np.random.default_rng(7 + W + dim)
    args = dict(a_ptr=PerRank([rng.standard_normal((M, K)).astype(np.float32) for _ in range(W)]),
                b_ptr=rng.standard_normal((K, N)).astype(np.float32),
                c_ptr=np.zeros((M, N), np.float32), M=M, N=N, K=K, stride_am=K, stride_bk=N,
                stride_cm=N)
    sig, cx = compile_args(kernel, "bf16", CFG, num_sms=NUM_SMS)
    grid = (NUM_SMS,) if "tma" in kernel else ((M // CFG.BLOCK_M) * (N // CFG.BLOCK_N),)
    return emulate(kernel_fn(kernel), signature=sig, constexprs=cx, attrs=compile_attrs(kernel),
                   options=CFG.options(), schedule=sched, operand=SPEC.gemm.operand, grid=grid,
                   args=args, backend=backend, comm_programs=2, policies=POLICIES, launches=2,
                   check=True)


@pytest.mark.parametrize("dim", [1, 0], ids=["N-sharded", "K-sharded"])
@pytest.mark.parametrize("W", [2, 3])
@pytest.mark.parametrize("kernel", ["matmul_tma_persistent_kernel", "matmul_ptr_kernel"])
def test_ag_weight_gemm_is_bitwise_the_local_kernel_on_the_gathered_weight(kernel, W, dim):
    res = _emulate(kernel, W, dim, "sm", split=2)
    assert res.ok, res.summary()
    assert set(res.stats) == set(POLICIES)
    assert sum(s["transfers"] for s in res.stats.values()) > 0


@pytest.mark.parametrize("dim", [1, 0], ids=["N-sharded", "K-sharded"])
def test_ag_weight_gemm_on_the_copy_engine(dim):
    res = _emulate("matmul_tma_persistent_kernel", 3, dim, "ce")
    assert res.ok, res.summary()
