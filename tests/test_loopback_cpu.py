"""Loopback (W virtual ranks in one process, docs/loopback.md), everything a CPU can check:
the loopback group's collectives with CPU tensors in threads, its failure modes (mismatch,
a failed rank, a rank that never comes), the symmetric-memory exchange behind the real
Communicator registry, the co-residency arithmetic and its refusal, the ops' grid sizing,
the bench's refusal, and the dispatch to torch.distributed outside loopback."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import CoResidencyError, LaunchError, LoopbackError  # noqa: E402
from syncopate.runtime import collectives, residency  # noqa: E402
from syncopate.runtime import diag  # noqa: E402
from syncopate.runtime.loopback import (LoopbackSymmetricMemory, LoopbackWorld,  # noqa: E402
                                        eager_module_loading, run_loopback)


def _ok(results):
    bad = [v for st, v in results if st != "ok"]
    assert not bad, "\n".join(bad)
    return [v for _, v in results]


# ---------------------------------------------------------------------------- collectives

def _collectives_body(rank, W):
    dist = collectives
    out = {}
    out["rank"], out["size"], out["init"] = dist.get_rank(), dist.get_world_size(), dist.is_initialized()
    g = torch.empty(W * 3)
    dist.all_gather_into_tensor(g, torch.full((3,), float(rank)))
    out["gather"] = g.tolist()
    rs = torch.empty(2)
    dist.reduce_scatter_tensor(rs, torch.arange(2 * W, dtype=torch.float32) * (rank + 1))
    out["rs"] = rs.tolist()
    x = torch.tensor([rank + 1.0])
    dist.all_reduce(x)
    out["sum"] = float(x)
    m = torch.tensor([rank * 10], dtype=torch.int64)
    dist.all_reduce(m, op=dist.ReduceOp.MAX)
    out["max"] = int(m)
    n = torch.tensor([rank + 5.0])
    dist.all_reduce(n, op=dist.ReduceOp.MIN)
    out["min"] = float(n)
    b = torch.tensor([float(rank)])
    dist.broadcast(b, 1)
    out["bcast"] = float(b)
    lst = [torch.empty(1) for _ in range(W)]
    dist.all_gather(lst, torch.tensor([rank * 2.0]))
    out["all_gather"] = [float(t) for t in lst]
    a2a = torch.empty(W * 2)
    dist.all_to_all_single(a2a, torch.arange(W * 2, dtype=torch.float32) + 100 * rank)
    out["a2a"] = a2a.tolist()
    dist.barrier()
    return out


@pytest.mark.parametrize("W", [2, 3])
def test_collectives_in_threads(W):
    res = _ok(run_loopback(_collectives_body, W, timeout_s=30))
    tri = sum(range(1, W + 1))
    for r, o in enumerate(res):
        assert (o["rank"], o["size"], o["init"]) == (r, W, True)
        assert o["gather"] == [float(s) for s in range(W) for _ in range(3)]
        assert o["rs"] == [float(2 * r + j) * tri for j in range(2)]
        assert o["sum"] == tri and o["max"] == (W - 1) * 10 and o["min"] == 5.0
        assert o["bcast"] == 1.0 and o["all_gather"] == [2.0 * s for s in range(W)]
        # block s of every rank's input went to rank s; block q of the output came from q
        assert o["a2a"] == [100.0 * q + 2 * r + j for q in range(W) for j in range(2)]


def _bf16_sum_body(rank, W, vals):
    out = torch.empty(1, dtype=torch.bfloat16)
    collectives.reduce_scatter_tensor(out, torch.tensor([vals[rank]] * W, dtype=torch.bfloat16))
    return out.float().item()


def test_reduce_scatter_rounds_once():
    """fp32 accumulation, one rounding: for two ranks bitwise the fused kernels' sum."""
    a, b = 1.0, 2.0 ** -9  # 1 + 2^-9 is not a bf16; the sum of the bf16 inputs rounds once
    res = _ok(run_loopback(_bf16_sum_body, 2, [a, b], timeout_s=30))
    want = torch.tensor(a + b, dtype=torch.float32).to(torch.bfloat16).float().item()
    assert res == [want, want]


def _mismatch_body(rank, W):
    if rank == 0:
        collectives.barrier()
    else:
        collectives.all_reduce(torch.ones(1))


def test_mismatched_collectives_raise_in_every_rank():
    t0 = time.monotonic()
    res = run_loopback(_mismatch_body, 2, timeout_s=30)
    assert time.monotonic() - t0 < 10
    assert all(st == "err" and "LoopbackError" in v for st, v in res)
    assert any("same collectives in the same order" in v for _, v in res)


def _fail_body(rank, W):
    if rank == 1:
        raise ValueError("rank one is broken")
    collectives.barrier()  # would wait for rank 1 forever without the abort
    return rank


def test_failed_rank_aborts_the_waiting_ones():
    t0 = time.monotonic()
    res = run_loopback(_fail_body, 2, timeout_s=30)
    assert time.monotonic() - t0 < 10
    assert res[1][0] == "err" and "rank one is broken" in res[1][1]
    assert res[0][0] == "err" and "rank 1 failed" in res[0][1]


def test_collective_timeout_names_the_missing_rank():
    world = LoopbackWorld(2, timeout_s=0.3)
    with pytest.raises(LoopbackError, match=r"ranks \[1\] never joined"):
        world.collective(0, "barrier")
    with pytest.raises(LoopbackError, match="aborted"):
        world.collective(1, "barrier")


def test_world_size_and_rank_checks():
    with pytest.raises(LoopbackError, match=">= 1 rank"):
        LoopbackWorld(0)
    with pytest.raises(LoopbackError, match="out of range"):
        LoopbackWorld(2).collective(5, "barrier")


def test_dispatch_outside_loopback_goes_to_torch_distributed(monkeypatch):
    import torch.distributed as dist
    seen = []
    monkeypatch.setattr(dist, "all_gather_into_tensor",
                        lambda o, i, group=None, async_op=False: seen.append(("ag", group)))
    monkeypatch.setattr(dist, "barrier", lambda group=None, async_op=False, **kw: seen.append(("b", kw)))
    assert collectives.current_loopback() is None and not collectives.is_loopback()
    collectives.all_gather_into_tensor(torch.empty(2), torch.empty(1), group="G")
    collectives.barrier(device_ids=[0])
    assert seen == [("ag", "G"), ("b", {"device_ids": [0]})]


# ---------------------------------------------------------------------------- symmetric memory

def _loopback_comm(group):
    """The real Communicator's registry and views over the loopback backend (its __init__ needs
    a CUDA device; everything after it is what runs on the GPU)."""
    from syncopate.runtime.communicator import Communicator
    c = Communicator.__new__(Communicator)
    c.group, c.loopback = group, True
    c.rank, c.world_size, c.device = group.rank, group.size(), torch.device("cpu")
    c.group_name, c.symm_backend = group.group_name, "cuda"
    c._allocs, c._closed, c.cache, c._streams, c._fused = {}, False, {}, {}, {}
    c.diag, c.diag_addr = diag.new_record()
    c._diag_state = diag.state_word(c.diag)
    c._rebuild_probes()
    c._symm = c._init_symm_mem("cuda")
    return c


def _symm_body(rank, W):
    c = _loopback_comm(collectives.current_loopback())
    assert isinstance(c._symm, LoopbackSymmetricMemory) and c.colocated == W
    A = c.empty((8, 4), torch.float32)
    A.fill_(float(rank))
    flags = c.empty((16,), torch.int32)
    flags.zero_()
    collectives.barrier()
    ptrs = c.peer_ptrs(A)
    rows = c.peer_ptrs(A[2:4])
    peer = (rank + 1) % W
    v = c.peer_view(A[2:4], peer)  # the next rank's rows 2..3
    seen = float(v[0, 0])
    collectives.barrier()
    v.fill_(100.0 + rank)  # write into the next rank's buffer
    c.flag_view_u32(flags, peer)[3] = rank + 7  # and its flag 3
    collectives.barrier()
    return dict(ptrs=ptrs, own=A.data_ptr(), rows=rows, seen=seen, mine=A.tolist(),
                flag3=int(flags[3]), symmetric=c.is_symmetric(A[1:3]))


def test_rendezvous_points_at_the_other_ranks_buffers():
    W = 3
    res = _ok(run_loopback(_symm_body, W, timeout_s=30))
    owns = [o["own"] for o in res]
    for r, o in enumerate(res):
        assert o["ptrs"] == owns  # same table on every rank: each rank's own tensor
        assert o["rows"] == [p + 2 * 4 * 4 for p in owns]
        assert o["seen"] == float((r + 1) % W)
        prev = (r - 1) % W
        assert o["mine"][2] == [100.0 + prev] * 4 and o["mine"][0] == [float(r)] * 4
        assert o["flag3"] == prev + 7 and o["symmetric"]


def _bad_alloc_body(rank, W):
    c = _loopback_comm(collectives.current_loopback())
    c.empty((4 + rank,), torch.float32)


def test_rendezvous_refuses_different_shapes():
    res = run_loopback(_bad_alloc_body, 2, timeout_s=30)
    assert all(st == "err" and "same shape and dtype" in v for st, v in res)


def _nvshmem_body(rank, W):
    from syncopate.runtime.communicator import Communicator
    c = Communicator.__new__(Communicator)
    c.group, c.loopback = collectives.current_loopback(), True
    with pytest.raises(LaunchError, match="one PE per process"):
        c._init_symm_mem("nvshmem")
    return True


def test_nvshmem_is_refused_in_loopback():
    assert _ok(run_loopback(_nvshmem_body, 2, timeout_s=30)) == [True, True]


# ---------------------------------------------------------------------------- co-residency

H200 = residency.DeviceLimits(sms=132)


# ---------------------------------------------------------------------------- module loading

def test_module_loading_is_made_eager_before_cuda_starts():
    """Loopback shares one CUDA context: a kernel loaded lazily at its first launch may wait
    for a peer's spinning kernel (the likely cause of the MoE dispatch's first-launch timeout
    in gpu_trace.py). Before CUDA initialises the variable is set; a user's explicit EAGER is
    kept; afterwards, or with a user's LAZY, the answer says what to do instead."""
    env = {}
    assert eager_module_loading(False, env) is None and env["CUDA_MODULE_LOADING"] == "EAGER"
    assert eager_module_loading(True, {"CUDA_MODULE_LOADING": "eager"}) is None
    late = {}
    why = eager_module_loading(True, late)
    assert "CUDA_MODULE_LOADING=EAGER" in why and "first torch.cuda call" in why
    assert late == {}  # too late to matter: not touched
    chosen = {"CUDA_MODULE_LOADING": "LAZY"}
    assert "LAZY" in eager_module_loading(False, chosen)
    assert chosen == {"CUDA_MODULE_LOADING": "LAZY"}  # the user's choice stays


def test_hardware_queues_are_raised_before_cuda_starts():
    from syncopate.runtime.loopback import more_hardware_queues
    env = {}
    assert more_hardware_queues(False, env) and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "32"
    chosen = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}  # the user's choice stays
    assert not more_hardware_queues(False, chosen) and chosen["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    late = {}
    assert not more_hardware_queues(True, late) and late == {}  # CUDA read it already


def test_blocks_per_sm_arithmetic():
    # persistent TMA GEMM: 8 warps, ~168 regs, ~160 KB shared memory -> one per SM
    assert residency.blocks_per_sm(H200, num_warps=8, n_regs=168, shared=160 * 1024) == 1
    # a small kernel: threads limit (2048 / 128 = 16)
    assert residency.blocks_per_sm(H200, num_warps=4, n_regs=32, shared=0) == 16
    # registers: 255 regs x 32 threads -> 8192 per warp (rounded to 256) x 4 warps -> 2
    assert residency.blocks_per_sm(H200, num_warps=4, n_regs=255, shared=0) == 2
    # shared memory: 100 KB + 1 KB reserved each -> 2
    assert residency.blocks_per_sm(H200, num_warps=1, n_regs=32, shared=100 * 1024) == 2
    # the one-warp sync kernels: the 32-blocks limit
    assert residency.blocks_per_sm(H200, num_warps=1, n_regs=16, shared=0) == 32


def test_sm_share_and_check():
    assert residency.sm_share(132, 1) == 132
    assert residency.sm_share(132, 2) == 65 and residency.sm_share(132, 4) == 32
    for W in (2, 4):
        residency.check(residency.sm_share(132, W), W, H200, 1)  # the ops' grids fit
    with pytest.raises(CoResidencyError, match=r"at most 65 programs per rank"):
        residency.check(66, 2, H200, 1)
    with pytest.raises(CoResidencyError, match=r"2 x 200 programs.*2 per SM x 130 SMs"):
        residency.check(200, 2, H200, 2)
    with pytest.raises(CoResidencyError, match="more resources than one SM"):
        residency.check(1, 2, H200, 0)
    residency.check(10_000, 1, H200, 1)  # one rank per GPU: never refused


def test_reserve_sms_knob(monkeypatch):
    """SYNCOPATE_LOOPBACK_RESERVE_SMS keeps more SMs free (never fewer than W): the shares and
    the check follow it, and a bad value is a typed error."""
    monkeypatch.setenv("SYNCOPATE_LOOPBACK_RESERVE_SMS", "8")
    assert residency.reserve_sms(2) == 8 and residency.sm_share(132, 2) == 62
    residency.check(62, 2, H200, 1)
    with pytest.raises(CoResidencyError, match=r"132 minus 8 kept.*at most 62 programs"):
        residency.check(63, 2, H200, 1)
    monkeypatch.setenv("SYNCOPATE_LOOPBACK_RESERVE_SMS", "1")  # below W: W
    assert residency.reserve_sms(4) == 4 and residency.sm_share(132, 4) == 32
    monkeypatch.setenv("SYNCOPATE_LOOPBACK_RESERVE_SMS", "lots")
    with pytest.raises(CoResidencyError, match="give a number of SMs"):
        residency.sm_share(132, 2)


class _Md:
    num_warps, shared = 8, 160 * 1024


class _Ck:
    metadata, n_regs, function = _Md(), 168, None

    def _init_handles(self):
        pass


def test_fused_kernel_refuses_a_grid_that_is_not_co_resident(monkeypatch):
    from syncopate.runtime import fused
    monkeypatch.setattr(residency.DeviceLimits, "of", classmethod(lambda cls, d: H200))
    fk = fused.FusedKernel.__new__(fused.FusedKernel)
    fk.kernel, fk.backend = _collectives_body, "sm"

    class _Comm:
        colocated, device = 2, torch.device("cpu")
    fk.comm = _Comm()

    class _Fc:
        kernel = _Ck()
    # an ABI without comm programs: the grid's programs are all counted (the check reads
    # abi.comm_programs since comm programs on rows y, z > 0 exit at once)
    from syncopate import abi as abimod
    cfg = fused._Config(compiled=_Fc(), abi=abimod.FusedABI("sm", 2, 2, 0, "push"))
    fk._check_coresident(cfg, (65, 1, 1))
    assert (65, 1, 1) in cfg.resident
    with pytest.raises(CoResidencyError, match=r"2 x 80 programs of _collectives_body \(backend sm, "
                                               r"8 warps"):
        fk._check_coresident(cfg, (80, 1, 1))
    fk.comm.colocated = 1
    fk._check_coresident(cfg, (10_000, 1, 1))  # one rank per GPU: nothing to check


def _aligned_launch(rank, W, events, names):
    """One virtual rank's start of a fused launch as ``FusedKernel.launch`` makes it (the host
    meeting while ``meets_peers``, SYNCOPATE_LOOPBACK_ALIGN): rank 0 arrives late, rank 1
    must not leave before it arrives."""
    from types import SimpleNamespace

    from syncopate.runtime import fused
    from syncopate.runtime.loopback import current_loopback
    fk = fused.FusedKernel.__new__(fused.FusedKernel)
    fk.kernel = SimpleNamespace(__name__=names[rank])
    fk.comm = SimpleNamespace(group=current_loopback(), colocated=W)
    if rank == 0:
        time.sleep(0.3)
        events.append("rank 0 arrives")
    if fk.meets_peers:
        fk._meet_peers("start")
    events.append(f"rank {rank} leaves")


def test_loopback_align_meets_before_every_fused_launch(monkeypatch):
    """With SYNCOPATE_LOOPBACK_ALIGN every rank's launch waits on the host for every other
    rank's (so no rank's fused kernel spins while a peer still compiles or loads one); a
    rank at another kernel's launch is a LoopbackError in every rank; off, nothing waits."""
    monkeypatch.setenv("SYNCOPATE_LOOPBACK_ALIGN", "1")
    events: list = []
    res = run_loopback(_aligned_launch, 2, events, ("attn", "attn"), timeout_s=30)
    assert [st for st, _ in res] == ["ok", "ok"], res
    assert events.index("rank 0 arrives") < events.index("rank 1 leaves")
    res = run_loopback(_aligned_launch, 2, [], ("attn", "gemm"), timeout_s=30)
    assert all(st == "err" and "LoopbackError" in v for st, v in res), res
    assert any("start of fused launch gemm" in v and "start of fused launch attn" in v
               for _, v in res)
    from types import SimpleNamespace

    from syncopate.runtime import fused
    one = fused.FusedKernel.__new__(fused.FusedKernel)
    one.comm = SimpleNamespace(colocated=1)
    assert not one.meets_peers  # one rank per GPU: nothing to meet
    monkeypatch.setenv("SYNCOPATE_LOOPBACK_ALIGN", "0")
    events = []
    res = run_loopback(_aligned_launch, 2, events, ("attn", "gemm"), timeout_s=30)
    assert [st for st, _ in res] == ["ok", "ok"], res
    assert events.index("rank 1 leaves") < events.index("rank 0 arrives")


def test_comm_programs_count_once_on_a_2d_grid(monkeypatch):
    """An attention grid (tiles, batch x heads) with 16 comm programs along x: the comm
    programs' other rows exit at once, so 2 x 8 tiles + 16 comm programs = 32 per rank must be
    resident, not 18 x 8 = 144 (2 ranks: 64 <= 130 fits; 144 x 2 would not)."""
    from types import SimpleNamespace

    from syncopate.runtime import fused
    monkeypatch.setattr(residency.DeviceLimits, "of", classmethod(lambda cls, d: H200))
    fk = fused.FusedKernel.__new__(fused.FusedKernel)
    fk.kernel, fk.backend = _collectives_body, "sm"

    class _Comm:
        colocated, device = 2, torch.device("cpu")
    fk.comm = _Comm()

    class _Fc:
        kernel = _Ck()
    cfg = fused._Config(compiled=_Fc(), abi=SimpleNamespace(comm_programs=16))
    fk._check_coresident(cfg, (2 + 16, 8, 1))
    assert (18, 8, 1) in cfg.resident
    with pytest.raises(CoResidencyError, match=r"2 x 76 programs"):  # 60 tiles + 16
        fk._check_coresident(cfg, (6 + 16, 10, 1))


def test_ops_size_persistent_grids_by_the_share(monkeypatch):
    import syncopate.kernels as kernels
    from syncopate.ops import driver
    monkeypatch.setattr(kernels, "num_sms", lambda device=None: 132)

    class _C:
        device, colocated = None, 1
    c = _C()
    assert driver.compute_programs(c, 16) == 116
    assert driver.loopback_comm_programs(c, 32, None) == 32
    c.colocated = 2
    assert driver.compute_programs(c, 16) == 49  # 65 - 16
    assert driver.loopback_comm_programs(c, 48, None) == 32  # capped at half the share
    assert driver.loopback_comm_programs(c, 48, 48) == 48  # the caller's choice is kept
    assert driver.loopback_comm_programs(c, 0, None) == 0  # ce: none
    c.colocated = 4
    assert driver.compute_programs(c, 16) == 16 and driver.loopback_comm_programs(c, 32, None) == 16


# ---------------------------------------------------------------------------- bench

def test_bench_refuses_loopback(monkeypatch, capsys):
    import importlib
    bench = importlib.import_module("syncopate.bench.__main__")
    assert bench.loopback_refusal({}, in_loopback=False) is None
    assert "refuses loopback" in bench.loopback_refusal({}, in_loopback=True)
    assert "refuses loopback" in bench.loopback_refusal({"SYNCOPATE_GPU_LOOPBACK": "2"},
                                                        in_loopback=False)
    assert bench.loopback_refusal({"SYNCOPATE_GPU_LOOPBACK": "0"}, in_loopback=False) is None
    msg = bench.loopback_refusal({"LOCAL_WORLD_SIZE": "2"}, in_loopback=False, device_count=1)
    assert "--nproc-per-node 1" in msg
    assert bench.loopback_refusal({"LOCAL_WORLD_SIZE": "2"}, in_loopback=False, device_count=2) is None
    monkeypatch.setenv("SYNCOPATE_GPU_LOOPBACK", "2")
    assert bench.main([]) == 2
    assert "refuses loopback" in capsys.readouterr().err


def _generation_body(rank, W):
    c = _loopback_comm(collectives.current_loopback())
    g0 = c.generation
    A = c.empty((8,), torch.float32)
    after_alloc = c.generation
    c.empty((4,), torch.int32)  # a later buffer (another op's): A's cached tables stay valid
    after_second = c.generation
    c.release(A)  # A's address may now come back for another buffer: caches must miss
    return g0, after_alloc, after_second, c.generation


def test_only_a_release_invalidates_launch_caches():
    """A fused kernel's peers table and fast launch path key on the registry generation. A new
    allocation must not change it (a CUDA-graph capture of an MoE layer was refused because the
    combine's first allocation came after the dispatch's warm-up launch: 'operand buffers were
    never launched eagerly'); a release must."""
    for g0, a, b, rel in _ok(run_loopback(_generation_body, 2, timeout_s=30)):
        assert g0 == a == b and rel == g0 + 1
