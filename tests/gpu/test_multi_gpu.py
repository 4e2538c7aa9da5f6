"""Multi-GPU tests of the runtime and the fused ops (>= 2 CUDA GPUs; skipped otherwise), or
W virtual ranks on one GPU with ``SYNCOPATE_GPU_LOOPBACK=W`` (docs/loopback.md).

Every test spawns one process per GPU through dist_harness.run_ranks, which kills the ranks
after a hard timeout, so a hang fails the test instead of eating the GPU lease. Each worker
checks many cases in one process group and returns the list of failing cases.

Order matters when reading a failing run: test_sync_kernels checks the runtime's own
PTX (flags, watchdog) without the compiler; the op tests then need the compiler.
"""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.dirname(__file__))
from dist_harness import loopback_world, run_ranks  # noqa: E402

#: W virtual ranks on one GPU (SYNCOPATE_GPU_LOOPBACK=W), or 0: one process per GPU
LOOPBACK = loopback_world()

if not torch.cuda.is_available():
    pytest.skip("needs 2 CUDA GPUs (or 1 with SYNCOPATE_GPU_LOOPBACK=2); this torch sees none "
                "(CPU-only build or no driver). The CPU-side runtime tests are "
                "tests/runtime/ and tests/test_loopback_cpu.py", allow_module_level=True)
if not LOOPBACK and torch.cuda.device_count() < 2:
    pytest.skip(f"needs 2 CUDA GPUs, found {torch.cuda.device_count()}; on one GPU run the same "
                f"tests in loopback: SYNCOPATE_GPU_LOOPBACK=2 (docs/loopback.md)",
                allow_module_level=True)

import gpu_workers as w  # noqa: E402

pytestmark = pytest.mark.gpu
#: ranks per test: every visible GPU (2 on the lent H200 pair; 4 or 8 when such machines are
#: lent), or SYNCOPATE_GPU_WORLD; in loopback, SYNCOPATE_GPU_LOOPBACK virtual ranks on GPU 0.
#: Shapes below keep M a multiple of 8 where it is split.
W = LOOPBACK or int(os.environ.get("SYNCOPATE_GPU_WORLD", torch.cuda.device_count()))
#: NVSHMEM has one PE per process: it cannot run W ranks in one process
NO_NVSHMEM_IN_LOOPBACK = pytest.mark.skipif(
    bool(LOOPBACK), reason="loopback runs every rank in one process and NVSHMEM has one PE per "
                           "process (one heap, one nvshmem_my_pe): the nvshmem backend needs one "
                           "process per GPU")
HOPPER = torch.cuda.get_device_capability(0)[0] >= 9
QUICK = os.environ.get("SYNCOPATE_GPU_QUICK", "0") == "1"


def _assert_clean(results):
    problems = [p for r in results for p in r]
    assert not problems, "\n".join(problems)


def test_sync_kernels():
    _assert_clean(run_ranks(w.sync_kernels, world_size=W, timeout=90))


# Ragged shapes: M/W, N, K not multiples of the tiles; row strides stay 16-byte aligned for
# TMA (N and K multiples of 8 for 2-byte dtypes).
def _ag_cases():
    cases = []
    for backend in ("sm", "ce"):
        for split in (1, 2, 4):
            cases.append((backend, "bfloat16", 200, 328, 136, split, "tma"))
        cases.append((backend, "float16", 130, 264, 200, 2, "tma"))
        cases.append((backend, "bfloat16", 77, 150, 93, 2, "ptr"))  # any strides: ptr kernel
    if not QUICK:
        cases.append(("sm", "bfloat16", 1024, 2048, 1024, 4, "tma"))
        cases.append(("ce", "float16", 1024, 1032, 520, 1, "tma"))
    return cases


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_ag_gemm_correct_and_bitwise():
    _assert_clean(run_ranks(w.ag_gemm_cases, _ag_cases(), world_size=W, timeout=240))


@NO_NVSHMEM_IN_LOOPBACK
@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_ag_gemm_nvshmem():
    from torch.distributed import _symmetric_memory as symm_mem
    if not symm_mem.is_nvshmem_available():
        pytest.skip("torch reports NVSHMEM unavailable (nvidia-nvshmem-cu13 missing?)")
    cases = [("nvshmem", "bfloat16", 200, 328, 136, s, "tma") for s in (1, 2, 4)]
    _assert_clean(run_ranks(w.ag_gemm_cases, cases, "nvshmem", world_size=W, timeout=180))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_ag_gemm_fallback_is_bitwise_equal():
    cases = [("sm", "bfloat16", 200, 328, 136, 2, "tma"), ("ce", "float16", 77, 150, 93, 1, "ptr")]
    _assert_clean(run_ranks(w.ag_gemm_fallback, cases, world_size=W, timeout=120))


def _agw_cases():
    """(backend, dtype, M, N, K, sharded dim of the [K, N] weight, split, kernel): N or K a
    multiple of W * 8 along the sharded dim, the rest ragged against the tiles."""
    cases = []
    for backend in ("sm", "ce"):
        for dim in (1, 0):
            N, K = (W * 104, 136) if dim == 1 else (328, W * 72)
            cases.append((backend, "bfloat16", 200, N, K, dim, 2, "tma"))
            cases.append((backend, "float16", 77, N, K, dim, 1, "ptr"))
    if not QUICK:
        cases.append(("sm", "bfloat16", 1024, W * 512, 1024, 1, 4, "tma"))
        cases.append(("ce", "bfloat16", 1024, 1024, W * 512, 0, 2, "tma"))
    return cases


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_ag_weight_gemm_correct_and_bitwise():
    _assert_clean(run_ranks(w.ag_weight_gemm_cases, _agw_cases(), world_size=W, timeout=300))


def _rs_cases():
    cases = []
    for backend in ("sm", "ce"):
        for split in (1, 2, 4):
            cases.append((backend, "bfloat16", 400, 328, 136, split, "tma"))
        cases.append((backend, "float16", 264, 264, 200, 2, "tma"))
        cases.append((backend, "bfloat16", 152, 150, 93, 1, "ptr"))
    # ce+epilogue (the owner's tiles add the slots): M/W whole groups of tiles (the op refuses
    # other M, see gemm_rs._check_epilogue_order); N and K stay ragged
    M = W * 1024
    for split in (1, 2, 4):
        cases.append(("ce+epilogue", "bfloat16", M, 328, 136, split, "tma"))
    cases.append(("ce+epilogue", "float16", M, 264, 200, 2, "tma"))
    cases.append(("ce+epilogue", "bfloat16", M, 150, 93, 1, "ptr"))
    # few tiles per rank: the op lowers the default config's GROUP_M to keep whole groups
    cases.append(("ce+epilogue", "bfloat16", W * 256, 328, 136, 2, "tma"))
    # the op's own choice (no backend, split or reduce; the worker checks which it picked): the
    # epilogue variant for a GEMM long enough to hide its host time, sm where the GEMM is short
    # or the tiles do not fit
    cases.append(("default:ce+epilogue", "bfloat16", M, 8192, 7168, None, "tma"))
    cases.append(("default:sm", "bfloat16", M, 328, 136, None, "tma"))
    cases.append(("default:sm", "bfloat16", 400, 328, 136, None, "tma"))
    return cases


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_gemm_rs_correct():
    _assert_clean(run_ranks(w.gemm_rs_cases, _rs_cases(), world_size=W, timeout=240))


@NO_NVSHMEM_IN_LOOPBACK
@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_gemm_rs_nvshmem():
    from torch.distributed import _symmetric_memory as symm_mem
    if not symm_mem.is_nvshmem_available():
        pytest.skip("torch reports NVSHMEM unavailable (nvidia-nvshmem-cu13 missing?)")
    cases = [("nvshmem", "bfloat16", 400, 328, 136, s, "tma") for s in (1, 2, 4)]
    _assert_clean(run_ranks(w.gemm_rs_cases, cases, "nvshmem", world_size=W, timeout=180))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
@pytest.mark.parametrize("backend", ["ce", "sm", "ce+epilogue"])
def test_gemm_rs_1000_launches_no_stale_data(backend):
    shape = (W * 1024, 320, 192) if backend == "ce+epilogue" else (256, 320, 192)
    _assert_clean(run_ranks(w.gemm_rs_stress, backend, 1000, shape, world_size=W, timeout=180))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
@pytest.mark.parametrize("backend", ["ce", "sm"])
def test_ag_gemm_1000_launches_no_stale_data(backend):
    _assert_clean(run_ranks(w.ag_gemm_stress, backend, 1000, world_size=W, timeout=180))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
@pytest.mark.parametrize("backend", ["ce", "sm"])
def test_fault_withheld_chunk_raises_comm_timeout(backend):
    t = 2.0
    _assert_clean(run_ranks(w.fault_withheld_chunk, backend, t, world_size=W, timeout=90,
                            env={"SYNCOPATE_TIMEOUT_S": str(t)}))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
@pytest.mark.parametrize("backend", ["ce", "sm"])
def test_fault_missing_rank_raises_comm_timeout(backend):
    t = 2.0
    _assert_clean(run_ranks(w.fault_missing_rank, backend, t, world_size=W, timeout=90,
                            env={"SYNCOPATE_TIMEOUT_S": str(t)}))


def test_unseen_kernels_fused_correct_over_launches():
    """Kernels written in other styles than ours (issue 8's classes: a coordinate derived from
    another, a 2-D grid, loaded row indices, a mask bound, a row-major persistent loop), fused
    with an all-gather on sm (pull and push) and ce; 5 launches each with fresh inputs, every
    output poisoned first and compared with the unfused kernel on the gathered tensor."""
    names = ["bp_gemm_derived", "xt_gemm_2d", "row_gather", "row_gather_hinted", "masked_rows",
             "persistent_rowmajor_gemm"]
    cases = [(n, b, m) for n in names for b, m in (("sm", "pull"), ("sm", "push"), ("ce", "pull"))]
    _assert_clean(run_ranks(w.unseen_kernels, cases, world_size=W, timeout=240))


def _ring_cases():
    small = dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=2)
    # (causal, dtype, B, Hq, Hkv, tokens per rank, D, order, config)
    # (sizes keep W x (tiles + 4 comm programs) co-resident in loopback with W = 4)
    cases = [(False, "bfloat16", 2, 2, 1, 256, 64, "swizzle", small),
             (True, "bfloat16", 1, 8, 2, 256, 128, "swizzle", None),
             (True, "float16", 1, 4, 1, 128, 64, "ring", small)]
    if not QUICK:
        cases.append((False, "bfloat16", 1, 4, 1, 512, 128, "ring", None))
    return cases


def test_ring_attention_correct_over_launches():
    """Ring attention (issue 11): K/V all-gathered inside the KV loop (inner-loop remap, waits
    per block), non-causal and causal with the zigzag layout, GQA, both orders; 3 launches each
    with fresh inputs, outputs poisoned; against SDPA (fp32) on the whole sequence and against
    the unfused path (NCCL all-gather + the same local kernel)."""
    _assert_clean(run_ranks(w.ring_attention_cases, _ring_cases(), world_size=W, timeout=300))


def test_moe_dispatch_gemm_correct_over_launches():
    """MoE dispatch fused with the grouped GEMM (issue 12): random and hot-expert routings
    (capacity overflow dropped and counted), 3 launches each; the fused op against the unfused
    path (all-gather + the same grouped GEMM, bitwise) and per-expert fp32 matmuls."""
    import moe_workers
    cases = [("random", 2 * W, 128, 256, 128, 96, 2), ("hot", 2 * W, 64, 128, 128, 96, 2)]
    _assert_clean(run_ranks(moe_workers.moe_dispatch_cases, cases, world_size=W, timeout=300))


def test_moe_layer_dispatch_combine_correct_over_launches():
    """The whole MoE layer (issue 12): fused dispatch, SiLU, fused combine (push and pull),
    3 launches each with fresh routings -- uniform, one hot expert (drops counted), empty
    experts -- against the unfused layer (bitwise: the same grouped GEMMs and weighted sum)
    and the fp32 torch layer computed from the routing alone."""
    import moe_workers
    E = 2 * W
    cases = [("uniform", "push", E, 128, 128, 256, 96, 2), ("hot", "push", E, 64, 128, 128, 96, 2),
             ("empty", "pull", E, 64, 128, 128, 64, 2)]
    _assert_clean(run_ranks(moe_workers.moe_layer_cases, cases, world_size=W, timeout=300))


def _ar_cases():
    # (backend, dtype, M, N, K per rank, split, order, kernel); ragged M/W, N, K; decode rows;
    # "default": the op's own choice (cost model). Sizes keep W x programs co-resident in
    # loopback (the persistent TMA grid is the rank's SM share; the ptr kernel has 4 tiles).
    cases = [("sm", "bfloat16", 400, 328, 136, s, "swizzle", "tma") for s in (1, 2, 4)]
    cases += [("sm", "bfloat16", 400, 328, 136, 2, "ring", "tma"),
              ("sm", "float16", 264, 264, 200, 2, "swizzle", "tma"),
              ("sm", "bfloat16", 152, 150, 93, 1, "ring", "ptr"),
              ("sm", "bfloat16", 1, 1024, 512, 1, "swizzle", "tma"),
              ("sm", "bfloat16", 7, 1024, 512, 2, "ring", "tma"),
              ("default", "bfloat16", 64, 2048, 1024, None, None, "tma")]
    if not QUICK:
        cases.append(("default", "bfloat16", 1024, 2048, 1024, None, None, "tma"))
    return cases


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_gemm_ar_correct_and_identical_on_every_rank():
    """GEMM + all-reduce (issue 12): every rank's [M, N] against torch (fp32 matmul +
    all_reduce), bitwise equal across ranks and to a repeat of the call, bitwise equal to the
    NCCL fallback for 2 ranks; 3 launches with fresh inputs then a new weight, outputs
    poisoned with NaN."""
    import gemm_ar_workers as ar
    _assert_clean(run_ranks(ar.gemm_ar_cases, _ar_cases(), world_size=W, timeout=300))


@NO_NVSHMEM_IN_LOOPBACK
@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_gemm_ar_nvshmem():
    from torch.distributed import _symmetric_memory as symm_mem
    if not symm_mem.is_nvshmem_available():
        pytest.skip("torch reports NVSHMEM unavailable (nvidia-nvshmem-cu13 missing?)")
    import gemm_ar_workers as ar
    cases = [("nvshmem", "bfloat16", 400, 328, 136, s, "swizzle", "tma") for s in (1, 2)]
    _assert_clean(run_ranks(ar.gemm_ar_cases, cases, "nvshmem", world_size=W, timeout=180))


@pytest.mark.skipif(not HOPPER, reason="the TMA kernel needs sm_90+")
def test_gemm_ar_500_launches_identical_on_every_rank():
    import gemm_ar_workers as ar
    _assert_clean(run_ranks(ar.gemm_ar_stress, 500, world_size=W, timeout=180))


def _ulysses_cases():
    # (B, Hq, Hkv, S/W, D, dtype, causal, mode): heads divisible by W, GQA, ragged tiles
    # (S not a multiple of BLOCK_M), both chunk modes.  In loopback every program of every rank
    # must be resident at once (a non-persistent grid: S/128 row blocks x heads per rank, plus
    # the comm programs, on 128 / W SMs per rank), so beyond W = 2 the rows shrink with W.
    def rows(n):
        return n if not LOOPBACK or W <= 2 else max(64, n * 2 // W)
    cases = [(1, 4 * W, 2 * W, rows(256), 128, "bfloat16", False, "push"),
             (2, 2 * W, W, 200, 64, "float16", True, "pull"),
             (1, 4 * W, W, rows(384), 128, "bfloat16", True, "push")]
    if not QUICK:
        cases.append((1, 4 * W, 2 * W, rows(448) if LOOPBACK else 2048, 128, "bfloat16", False,
                      "pull"))
    return cases


@pytest.mark.skipif(not HOPPER, reason="the attention kernel is tuned for sm_90+")
def test_ulysses_attention_against_sdpa_and_reference():
    """Ulysses attention fused (both all-to-alls inside the attention kernel) against SDPA on
    the gathered sequence (relative error <= 1e-2) and bitwise against the unfused path (NCCL
    all_to_all_single + the same local kernel + all_to_all_single back), 3 launches each."""
    import ulysses_workers as uw
    results = run_ranks(uw.ulysses_cases, _ulysses_cases(), world_size=W, timeout=300)
    for line in results[0]:
        if line.startswith("INFO"):
            print(line)
    _assert_clean([[p for p in r if not p.startswith("INFO")] for r in results])
