"""The cost model: how far its peer-copy constants (assumptions, schedule/cost.py) are from the
figures they rest on, and that it ranks chunk splits sensibly (it is a ranking model, not a
predictor)."""

from __future__ import annotations

import pytest

from syncopate.calibration.fit import fit_alpha_beta
from syncopate.errors import ScheduleError
from syncopate.schedule import (Chunk, Placement, Region, Schedule, TensorSpec, all_gather,
                                all_reduce, best_split, chunk_time, estimate, gemm_time,
                                link_model, reduce_scatter)
from syncopate.schedule.cost import (REPORTED_CE_COPY, REPORTED_SM_COPY, choose_gemm_plan,
                                     overlap_time)

MB = 1_000_000
AG_SHAPE = (8192, 4096)  # bf16: 32 MiB per rank at W = 2

#: the stated errors: the model's bandwidth may leave a reported range by this fraction of it;
#: the constants may differ from the least-squares fit of the reported figures by these
CE_RANGE_ERROR = 0.03
CE_FIT_ALPHA_ERROR, CE_FIT_BETA_ERROR = 0.15, 0.02


def _ag(n: int, W: int = 2) -> Schedule:
    return all_gather(AG_SHAPE, "bf16", W, split=n)


def test_copy_engine_constants_fit_the_reported_figures():
    """The copy engine's alpha and beta against the reported figures, two ways: the project's
    own least-squares fit of those figures (calibration/fit.py, the midpoint of each range)
    gives nearly the same constants, and the model's bandwidth at each reported size lies in
    the reported range up to the stated error (at 16 MB it is 320 GB/s against 290-318)."""
    m = link_model("ce")
    alpha, beta = fit_alpha_beta([(n, n / ((lo + hi) / 2)) for n, lo, hi in REPORTED_CE_COPY])
    assert m.alpha_s == pytest.approx(alpha, rel=CE_FIT_ALPHA_ERROR)
    assert m.beta_bps == pytest.approx(beta, rel=CE_FIT_BETA_ERROR)
    for nbytes, lo, hi in REPORTED_CE_COPY:
        bw = m.bandwidth(nbytes)
        assert lo * (1 - CE_RANGE_ERROR) <= bw <= hi * (1 + CE_RANGE_ERROR), (nbytes, bw)


@pytest.mark.parametrize("programs, reported", REPORTED_SM_COPY)
def test_sm_bandwidth_passes_through_the_reported_figures(programs, reported):
    """beta interpolates the reported figures; the assumed 3 us alpha must not pull a large
    chunk's bandwidth away from them (no figure constrains alpha itself)."""
    m = link_model("sm", programs)
    assert m.beta_bps == pytest.approx(reported, rel=0.01)
    assert m.bandwidth(256 * MB) == pytest.approx(reported, rel=0.05)


def test_sm_bandwidth_monotone_and_bounded():
    bws = [link_model("sm", p).beta_bps for p in (1, 2, 4, 8, 16, 32, 66, 100, 132, 200)]
    assert bws == sorted(bws) and bws[-1] <= 400e9
    assert link_model("nvshmem", 16).beta_bps == link_model("sm", 16).beta_bps
    assert link_model("nvshmem").alpha_s > link_model("sm").alpha_s
    with pytest.raises(ScheduleError, match="unknown backend 'tcp'"):
        link_model("tcp")
    with pytest.raises(ScheduleError, match="comm_programs must be >= 1"):
        link_model("sm", 0)


def test_chunk_time_alpha_beta():
    m = link_model("ce")
    assert chunk_time(0, "ce") == pytest.approx(m.alpha_s)
    assert chunk_time(400 * MB, "ce") == pytest.approx(m.alpha_s + 400 * MB / m.beta_bps)


def test_gemm_time():
    assert gemm_time(8192, 8192, 8192) == pytest.approx(1.41e-3, rel=0.02)  # measured: 1.38-1.42 ms
    assert gemm_time(8192, 8192, 8192, "fp8e4m3") == pytest.approx(gemm_time(8192, 8192, 8192) / 2)


def test_comm_time_of_all_gather():
    # 32 MiB each way on one link pair at ~190 GB/s (16 programs): about 0.18 ms, the same
    # order as NCCL's 0.34 ms for twice the data (AG 8192x8192 bf16, measured).
    e = estimate(_ag(1), backend="sm", comm_programs=16)
    assert 0.15e-3 < e.comm_s < 0.21e-3
    assert e.rank_comm_s == (e.comm_s, e.comm_s)
    assert e.fused_s is None and e.time_s == e.comm_s and e.num_chunks == 2
    # More comm programs, faster; the copy engine is faster still at this size.
    assert estimate(_ag(1), comm_programs=66).comm_s < e.comm_s
    assert estimate(_ag(1), backend="ce").comm_s < e.comm_s


def test_chunks_serialise_per_link_and_overlap_across_links():
    s = _ag(4)
    e = estimate(s, backend="ce")
    t = link_model("ce").time(s.chunk_bytes(0))
    # Four chunks per direction, one after another on each port; both directions at once.
    assert e.comm_s == pytest.approx(4 * t)
    starts = sorted(e.chunk_start[c.id] for c in s.chunks_to(0))
    assert starts == pytest.approx([0, t, 2 * t, 3 * t])


def test_dependencies_delay_forwarding():
    ring = all_gather((8192, 1024), "bf16", 4, order="ring")
    e = estimate(ring, backend="ce")
    for c in ring.chunks:
        for d in ring.dependencies(c.id):
            assert e.chunk_start[c.id] >= e.chunk_finish[d]


def test_overlap_time():
    assert overlap_time([(0.0, 0.5), (10.0, 0.5)], 4.0, 0.0) == 12.0  # second piece exposed
    assert overlap_time([(0.0, 0.5), (1.0, 0.5)], 4.0, 0.0) == 4.0  # fully hidden
    assert overlap_time([(0.0, 0.5), (1.0, 0.5)], 4.0, 0.5) == 4.5  # one wait


@pytest.mark.parametrize("backend", ["sm", "ce", "nvshmem"])
def test_ranks_split_for_ag_gemm(backend):
    """AG 8192x4096 bf16 on 2 ranks overlapping a GEMM whose time is comparable to the
    transfer (N = 2048: ~0.18 ms): splitting in 2-4 beats 1 chunk (the whole remote half would
    be exposed after the local half) and 64 chunks (64 alphas and waits)."""
    compute = gemm_time(8192, 2048, 4096)
    best, results = best_split(_ag, compute_time_s=compute, backend=backend)
    t = {n: e.fused_s for n, e in results.items()}
    assert best in (2, 4)
    assert min(t[2], t[4]) < t[1]
    assert min(t[2], t[4]) < t[64]
    assert t[64] > t[8]  # past the optimum, more chunks only cost
    for e in results.values():
        assert e.fused_s < e.serial_s  # overlap always helps here


def test_compute_bound_prefers_few_chunks():
    # When compute hides the whole transfer, extra chunks only add waits.
    best, _ = best_split(_ag, compute_time_s=gemm_time(8192, 8192, 4096), backend="sm")
    assert best == 1


def test_comm_only_ranking_prefers_fewest_chunks():
    best, results = best_split(_ag)
    assert best == 1 and results[64].comm_s > results[1].comm_s


def test_sm_backend_steals_compute():
    compute = gemm_time(8192, 8192, 4096)
    sm = estimate(_ag(1), backend="sm", comm_programs=16, compute_time_s=compute)
    ce = estimate(_ag(1), backend="ce", compute_time_s=compute)
    assert sm.fused_s == pytest.approx(compute * 132 / 116, rel=0.02)
    assert ce.fused_s < sm.fused_s
    with pytest.raises(ScheduleError, match="leave no SM for compute"):
        estimate(_ag(1), comm_programs=132, compute_time_s=compute)


def test_producer_model_for_reduce_scatter():
    W = 4
    compute = gemm_time(8192, 8192, 8192 // W)
    rs = reduce_scatter((8192, 8192), "bf16", W, split=2)
    e = estimate(rs, backend="sm", compute_time_s=compute)
    # chunk_start/finish describe communication alone (what a serial baseline pays) ...
    assert min(e.chunk_start.values()) == 0.0
    # ... while the fused estimate lets a chunk leave only once its region is computed: it is
    # at least the slowed compute and beats running them one after another.
    assert e.fused_s >= compute * 132 / 116 * 0.999
    assert e.fused_s < e.serial_s
    # The first piece a rank sends is computed first: splitting helps a producer too.
    one = estimate(reduce_scatter((8192, 8192), "bf16", W, split=1), compute_time_s=compute)
    assert e.fused_s < one.fused_s


def test_all_reduce_estimate_and_tensor_choice():
    ar = all_reduce((4096, 4096), "bf16", 4)
    e = estimate(ar, backend="sm", compute_time_s=1e-4)
    assert e.fused_s >= e.comm_s
    two = Schedule(2, {"A": TensorSpec("A", (4,), "bf16", [Placement(0, Region((0,), (4,)))],
                                       [Placement(1, Region((0,), (4,)))]),
                       "B": TensorSpec("B", (4,), "bf16", [Placement(1, Region((0,), (4,)))],
                                       [Placement(0, Region((0,), (4,)))])},
                   [Chunk(0, "A", Region((0,), (4,)), 0, 1), Chunk(1, "B", Region((0,), (4,)), 1, 0)])
    assert estimate(two).num_chunks == 2
    with pytest.raises(ScheduleError, match="pass tensor= to say which one"):
        estimate(two, compute_time_s=1e-4)
    assert estimate(two, compute_time_s=1e-4, tensor="B").fused_s is not None


def test_estimate_requires_valid_schedule():
    spec = TensorSpec("A", (4,), "bf16", [Placement(0, Region((0,), (4,)))],
                      [Placement(1, Region((0,), (4,)))])
    with pytest.raises(ScheduleError, match="final placement not met"):
        estimate(Schedule(2, {"A": spec}, []))


def test_summary_text():
    text = estimate(_ag(2), compute_time_s=2e-4).summary()
    assert text.startswith("backend sm, 16 comm programs: 4 chunks, 64.0 MiB, comm ")
    assert "fused" in text and "serial" in text


def test_choose_gemm_plan():
    plan = choose_gemm_plan("ag", 8192, 2048, 4096, 2, backend="sm")
    assert plan["split"] in (2, 4) and plan["comm_programs"] in (8, 16, 32)
    assert plan["estimate"].fused_s > 0
    ce = choose_gemm_plan("rs", 8192, 8192, 4096, 2, backend="ce")
    assert ce["comm_programs"] == 0
    fixed = choose_gemm_plan("ag", 8192, 2048, 4096, 2, backend="sm", comm_programs=16)
    assert fixed["comm_programs"] == 16
    with pytest.raises(ScheduleError, match="op must be 'ag'"):
        choose_gemm_plan("ar", 1, 1, 1, 2)


def test_reduce_scatter_tail_waits_for_the_destinations_own_partial():
    """A sum chunk is ready when both ranks computed its rows: a single chunk per rank (split 1)
    leaves the last band's reduction exposed, so finer splits must win for a GEMM that hides
    the transfer (measured on 2 x H200: split 1 is 1.3-1.4x slower than split 4)."""
    from syncopate.schedule.cost import estimate
    from syncopate.schedule.templates import reduce_scatter
    t = {s: estimate(reduce_scatter((8192, 4096), "bf16", 2, dim=0, split=s), backend="sm",
                     comm_programs=16, compute_time_s=0.618e-3).time_s for s in (1, 2, 4, 8)}
    assert t[1] > t[2] > t[4] > t[8]
    assert t[1] > 1.3 * 0.618e-3 * 132 / 116  # the split-1 tail is far from hidden
