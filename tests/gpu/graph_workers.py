"""Per-rank bodies of the CUDA-graph tests (tests/gpu/test_cuda_graphs.py; docs/cuda-graphs.md),
run by dist_harness.run_ranks like gpu_workers.py: one process per GPU, or W threads on one
GPU in loopback (SYNCOPATE_GPU_LOOPBACK=W). Each returns a list of problems, empty when every
check passed.

Loopback notes: every rank captures on a stream of its own with ``capture_error_mode=
"thread_local"`` (the other ranks' threads keep using CUDA meanwhile), and the ranks capture
one after the other (:func:`_capture_in_turn`): ``torch.cuda.graph`` synchronises the device
and empties the allocator's cache when a capture begins, which another thread's capture in
flight should not see. No rank replays before every rank has captured.
"""

from __future__ import annotations

import time


def _capture_in_turn(rank, W, call, comm, require_fused=True):
    """Rank ``r`` captures ``call`` into a FusedGraph in turn ``r`` (a barrier after each turn);
    returns ``(graph, error)``: the error a capture raised, if any, instead of the graph."""
    from syncopate.runtime import collectives as dist
    from syncopate.runtime.graphs import FusedGraph

    fg, err = None, None
    for r in range(W):
        if r == rank:
            try:
                fg = FusedGraph.capture(call, comm=comm, capture_error_mode="thread_local",
                                        require_fused=require_fused)
            except Exception as e:  # noqa: BLE001 - handed to the caller, which checks its type
                err = e
        dist.barrier()
    return fg, err


def graph_replays(rank, W, op, iters, shape, backend="sm", kernel="tma", split=2):
    """Eager warm-up, capture of one op call into a FusedGraph, then ``iters`` replays with new
    inputs copied into the static input before each, every output compared with the reference
    (bitwise for ag_gemm and for gemm_rs at W = 2; mismatches counted on the device, no host
    sync in the loop), then one eager call, which must continue from the device epoch. Checks
    the device epoch (pinned mirror) after the replays: warm-up + iters (+1 eager)."""
    import torch

    from syncopate.kernels import matmul
    from syncopate.ops import ag_gemm, gemm_rs
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    dev, dtype = comm.device, torch.bfloat16
    g = torch.Generator(device=dev)
    g.manual_seed(123 + rank)
    problems = []
    if op == "ag_gemm":
        Ms, N, K = shape
        cfg = resolve_config(kernel, Ms * W, N, K, dtype)
        a_static = torch.empty((Ms, K), device=dev, dtype=dtype)
        b = torch.randn(K, N, generator=g, device=dev).to(dtype)
        out = torch.empty((Ms * W, N), device=dev, dtype=dtype)
        gathered = torch.empty((Ms * W, K), device=dev, dtype=dtype)

        def call():
            return ag_gemm(a_static, b, comm, backend=backend, split=split, kernel=kernel,
                           config=cfg, out=out)

        def reference(a):
            dist.all_gather_into_tensor(gathered, a, group=comm.group)
            return matmul(gathered, b, kernel=kernel, config=cfg)

        def new_input():
            return torch.randn(Ms, K, generator=g, device=dev).to(dtype)
    else:
        M, N, Kl = shape
        cfg = resolve_config(kernel, M, N, Kl, dtype)
        a_static = torch.empty((M, Kl), device=dev, dtype=dtype)
        b = torch.randn(Kl, N, generator=g, device=dev).to(dtype)
        out = torch.empty((M // W, N), device=dev, dtype=dtype)

        def call():
            return gemm_rs(a_static, b, comm, backend=backend, split=split, kernel=kernel,
                           config=cfg, out=out)

        def reference(a):
            return gemm_rs(a, b, comm, kernel=kernel, config=cfg, fused=False)

        def new_input():
            return torch.randn(M, Kl, generator=g, device=dev).to(dtype)

    def mismatches(ref):
        if op == "ag_gemm" or W == 2:
            return (out != ref).sum()
        # gemm_rs at W > 2: the owner adds partials one at a time in bf16, the fallback in
        # fp32 (tests/gpu/gpu_workers.py gemm_rs_stress says why); stale data is far off
        tol = (W - 1) * 2.0 ** -7 * ref.float().abs().amax()
        return ((out.float() - ref.float()).abs() > tol).sum() + (~torch.isfinite(out)).sum()

    bad = torch.zeros((), dtype=torch.int64, device=dev)
    a = new_input()
    a_static.copy_(a)
    call()  # eager warm-up: compiles, allocates the flags, uploads the tables (epoch 1)
    bad += mismatches(reference(a))
    torch.cuda.synchronize()
    comm.check()
    dist.barrier()
    fg, err = _capture_in_turn(rank, W, call, comm)
    if err is not None:
        raise err
    torch.cuda.synchronize()
    dist.barrier()
    fk = fg.kernels[0]
    e0 = fk.device_epoch()
    if e0 != 1:
        problems.append(f"{op}: device epoch {e0} after the warm-up, expected 1")
    host = []
    t0 = time.monotonic()
    for i in range(iters):
        a = new_input()
        a_static.copy_(a)
        out.fill_(float("nan"))
        t = time.perf_counter()
        fg.replay()
        host.append(time.perf_counter() - t)
        bad += mismatches(reference(a))
        if i % 100 == 99:
            comm.check()  # a timeout surfaces within 100 replays
    torch.cuda.synchronize()
    comm.check()
    elapsed = time.monotonic() - t0
    # in loopback the synchronize above is device-wide: it must not start after a faster
    # rank's eager launch below, whose kernel spins until this rank launches too (it would
    # wait for that kernel, which waits for this rank: a deadlock the watchdog ends)
    dist.barrier()
    if fk.device_epoch() != e0 + iters:
        problems.append(f"{op}: device epoch {fk.device_epoch()} after {iters} replays, expected "
                        f"{e0 + iters}")
    # an eager call after the replays runs with the next device epoch
    a = new_input()
    a_static.copy_(a)
    out.fill_(float("nan"))
    call()
    bad += mismatches(reference(a))
    torch.cuda.synchronize()
    comm.check()
    if fk.device_epoch() != e0 + iters + 1:
        problems.append(f"{op}: device epoch {fk.device_epoch()} after the eager call following "
                        f"the replays, expected {e0 + iters + 1}")
    nbad = int(bad)
    if nbad:
        problems.append(f"{op} {backend}: {nbad} mismatching elements over {iters} replays "
                        f"({elapsed:.1f} s)")
    host.sort()
    print(f"[rank {rank}] {op} {backend} W={W}: {iters} replays in {elapsed:.2f} s, host time "
          f"per FusedGraph.replay median {host[len(host) // 2] * 1e6:.1f} us", flush=True)
    del fg
    comm.close()
    return problems


def _after_withheld_replay(fg, rank, W, dev, comm, withheld, elapsed, timeout_s, problems):
    """After the replay in which rank 1 withheld chunk ``withheld`` from rank 0: rank 0's next
    replay raises CommTimeout naming the chunk and epoch 1 without running the graph, the one
    after is refused, the timed-out replay took about the timeout; the other ranks are clean;
    and a collective still works afterwards. Appends to ``problems``."""
    import torch

    from syncopate.errors import CommTimeout, LaunchError
    from syncopate.runtime import collectives as dist
    from syncopate.runtime import graphs
    if rank == 0:
        replays = []
        real_replay = fg.graph.replay
        fg.graph.replay = lambda: (replays.append(1), real_replay())
        try:
            fg.replay()
            problems.append(f"rank 0: no CommTimeout at the replay after chunk {withheld} was "
                            f"withheld")
        except CommTimeout as e:
            if getattr(e, "chunk", None) != withheld or f"chunk {withheld}" not in str(e):
                problems.append(f"rank 0: timeout does not name chunk {withheld}: {e}")
            if "epoch 1" not in str(e):
                problems.append(f"rank 0: timeout does not name the replay's epoch (1): {e}")
        try:
            fg.replay()
            problems.append("rank 0: a replay of the timed-out kernel was not refused")
        except LaunchError:
            pass
        if replays:
            problems.append(f"rank 0: {len(replays)} replay(s) ran after the timeout")
        if elapsed > timeout_s + 1.0:
            problems.append(f"rank 0: the timed-out replay took {elapsed:.2f} s > timeout + 1 s")
    else:
        try:
            graphs.check(fg.kernels, fg.comms)
        except CommTimeout as e:
            problems.append(f"rank {rank} (not the victim) raised: {e}")
    dist.barrier()
    x = torch.full((8,), float(rank + 1), device=dev)
    dist.all_reduce(x)
    if float(x[0]) != sum(range(1, W + 1)):
        problems.append("all_reduce after the fault gave a wrong result")


def graph_fault_withheld_chunk(rank, W, timeout_s):
    """A captured sm AG+GEMM whose configuration withholds one chunk from rank 1 to rank 0
    (compiled in on every rank, warmed up eagerly before capture, as the eager fault test
    does): the first replay times out on rank 0, and rank 0's next FusedGraph.replay raises
    CommTimeout naming the chunk and the epoch (1: the withholding configuration is new, with
    its own flags and epoch word) without replaying; the one after raises
    LaunchError (poisoned). Rank 1 sees no timeout. Then the group and a fresh op work."""
    import torch

    from syncopate.ops import ag_gemm, ag_gemm_fused_kernel
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    problems = []
    Ms, N, K = 128, 256, 128
    dtype = torch.bfloat16
    dev = comm.device
    cfg = resolve_config("tma", Ms * W, N, K, dtype)
    g = torch.Generator(device=dev)
    g.manual_seed(5 + rank)
    a_static = torch.randn(Ms, K, generator=g, device=dev).to(dtype)
    b = torch.randn(K, N, generator=g.manual_seed(11), device=dev).to(dtype)
    out = torch.empty((Ms * W, N), device=dev, dtype=dtype)
    op = dict(backend="sm", split=2, mode="push", comm_programs=4, config=cfg)

    def call():
        return ag_gemm(a_static, b, comm, out=out, **op)

    call()  # epoch 1: all good
    torch.cuda.synchronize()
    comm.check()
    fk = ag_gemm_fused_kernel(comm, Ms * W, K, dtype, split=2, mode="push", comm_programs=4,
                              kernel="tma", config=cfg)
    withheld = [c.id for c in fk.schedule.chunks if c.src == 1 and c.dst == 0][0]
    fk.test_skip_chunks = {withheld}  # compiled in: a new configuration on every rank
    prep = next(p for p in comm.cache["ops.prepared"].values() if p.fk is fk)
    fk.warmup(prep.grid, *prep.args)
    dist.barrier()
    fg, err = _capture_in_turn(rank, W, call, comm)
    if err is not None:
        raise err
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.monotonic()
    fg.replay()  # epoch 1 of the withholding configuration: rank 0 times out
    torch.cuda.synchronize()
    elapsed = time.monotonic() - t0
    _after_withheld_replay(fg, rank, W, dev, comm, withheld, elapsed, timeout_s, problems)
    del fg
    comm.clear_cache()
    res = ag_gemm(a_static, b, comm, **op)
    gathered = torch.empty((Ms * W, K), device=dev, dtype=dtype)
    dist.all_gather_into_tensor(gathered, a_static)
    torch.cuda.synchronize()
    comm.check()
    ref = gathered.float() @ b.float()
    if float(torch.linalg.norm(res.float() - ref) / torch.linalg.norm(ref)) > 2e-2:
        problems.append("fresh fused op after the fault is wrong")
    comm.close()
    return problems


def graph_refuses_ce(rank, W):
    """Capturing a ce call raises GraphCaptureError (its host side bakes epochs) and leaves the
    op usable eagerly afterwards."""
    import torch

    from syncopate.errors import GraphCaptureError
    from syncopate.ops import ag_gemm
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    problems = []
    Ms, N, K = 128, 256, 128
    dtype = torch.bfloat16
    dev = comm.device
    cfg = resolve_config("tma", Ms * W, N, K, dtype)
    a = torch.randn(Ms, K, device=dev).to(dtype)
    b = torch.randn(K, N, device=dev).to(dtype)
    out = torch.empty((Ms * W, N), device=dev, dtype=dtype)

    def call():
        return ag_gemm(a, b, comm, backend="ce", split=2, config=cfg, out=out)

    call()
    torch.cuda.synchronize()
    dist.barrier()
    fg, err = _capture_in_turn(rank, W, call, comm)
    if fg is not None or not isinstance(err, GraphCaptureError):
        problems.append(f"ce capture was not refused with GraphCaptureError: {err!r}")
    elif "backend='sm'" not in str(err):
        problems.append(f"the refusal does not say what to use instead: {err}")
    torch.cuda.synchronize()
    dist.barrier()
    call()
    gathered = torch.empty((Ms * W, K), device=dev, dtype=dtype)
    dist.all_gather_into_tensor(gathered, a)
    torch.cuda.synchronize()
    comm.check()
    ref = gathered.float() @ b.float()
    if float(torch.linalg.norm(out.float() - ref) / torch.linalg.norm(ref)) > 2e-2:
        problems.append("eager ce call after the refused capture is wrong")
    comm.close()
    return problems


def graph_op_replays(rank, W, name, iters, require_fused=True):
    """The op case ``name`` of graph_op_cases.py: eager reference and eager op call (warm-up:
    compiles, allocates, decides the path), capture of one call, then ``iters`` replays with
    new inputs copied into the static inputs before each, the outputs poisoned, and every
    output checked against the eager unfused reference on the same inputs (mismatches counted
    on the device: no host read in the loop). Then the device epoch of every captured
    FusedKernel (warm-up + iters) and an eager call after the replays (it continues from the
    device epoch, and its outputs are checked too)."""
    import torch

    import graph_op_cases as cases
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    gen = torch.Generator(device=comm.device)
    gen.manual_seed(1000 + rank)
    case = cases.WorldSizeOne(comm, gen) if name == "world_size_one" else \
        cases.CASES[name](comm, gen)
    problems = []
    bad = torch.zeros((), dtype=torch.int64, device=comm.device)
    case.refresh()
    ref = case.reference()  # loads the unfused path's kernels before any fused kernel spins
    bad += case.mismatches(case.call(), ref)  # eager warm-up
    torch.cuda.current_stream().synchronize()
    comm.check()
    dist.barrier()
    fg, err = _capture_in_turn(rank, W, case.call, comm, require_fused=require_fused)
    if err is not None:
        raise err
    torch.cuda.current_stream().synchronize()
    dist.barrier()
    e0 = [fk.device_epoch() for fk in fg.kernels]
    if any(e != 1 for e in e0):
        problems.append(f"{name}: device epochs {e0} after the warm-up, expected 1 each")
    outs = fg.output
    host = []
    t0 = time.monotonic()
    for i in range(iters):
        case.refresh()
        case.poison(outs)
        t = time.perf_counter()
        fg.replay()
        host.append(time.perf_counter() - t)
        bad += case.mismatches(outs, case.reference())
        if i % 100 == 99:
            comm.check()  # a timeout surfaces within 100 replays
    torch.cuda.current_stream().synchronize()
    comm.check()
    elapsed = time.monotonic() - t0
    got = [fk.device_epoch() for fk in fg.kernels]
    if got != [e + iters for e in e0]:
        problems.append(f"{name}: device epochs {got} after {iters} replays, expected "
                        f"{[e + iters for e in e0]}")
    case.refresh()
    case.poison(outs)
    bad += case.mismatches(case.call(), case.reference())  # eager, after the replays
    torch.cuda.current_stream().synchronize()
    comm.check()
    got = [fk.device_epoch() for fk in fg.kernels]
    if got != [e + iters + 1 for e in e0]:
        problems.append(f"{name}: device epochs {got} after the eager call following the "
                        f"replays, expected {[e + iters + 1 for e in e0]}")
    nbad = int(bad)
    if nbad:
        problems.append(f"{name}: {nbad} elements off the reference "
                        f"({'bitwise' if case.exact else 'tolerance'}) over {iters} replays")
    host.sort()
    print(f"[rank {rank}] {name} W={W}: {len(fg.kernels)} fused kernel(s) in the graph, {iters} "
          f"replays in {elapsed:.2f} s, host time per FusedGraph.replay median "
          f"{host[len(host) // 2] * 1e6:.1f} us", flush=True)
    del fg
    comm.close()
    return problems


def graph_fault_gemm_ar(rank, W, timeout_s):
    """A captured sm GEMM + all-reduce whose configuration withholds the all-gather chunk that
    brings rank 1's reduced rows to rank 0 (compiled in on every rank, warmed up eagerly before
    capture): nothing waits for that chunk but rank 0's end-of-launch wait, so the first replay
    times out on rank 0 only. Rank 0's next FusedGraph.replay raises CommTimeout naming the
    chunk and epoch 1 without replaying, the one after LaunchError (poisoned); the other ranks
    see no timeout. Then the group and a fresh op work."""
    import torch

    from syncopate.ops import gemm_ar
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    problems = []
    M, N, Kl = 128, 256, 128
    dtype, dev = torch.bfloat16, comm.device
    cfg = resolve_config("tma", M, N, Kl, dtype)
    g = torch.Generator(device=dev)
    g.manual_seed(9 + rank)
    a = torch.randn(M, Kl, generator=g, device=dev).to(dtype)
    b = torch.randn(Kl, N, generator=g, device=dev).to(dtype)
    out = torch.empty((M, N), device=dev, dtype=dtype)
    op = dict(backend="sm", split=1, order="swizzle", comm_programs=4, kernel="tma", config=cfg)

    def call():
        return gemm_ar(a, b, comm, out=out, fused=True, **op)

    call()  # epoch 1: all good
    torch.cuda.current_stream().synchronize()
    comm.check()
    prep = next(p for p in comm.cache["ops.prepared"].values())
    fk = prep.fk
    withheld = [c.id for c in fk.schedule.chunks
                if c.src == 1 and c.dst == 0 and c.reduce == "none"][0]
    fk.test_skip_chunks = {withheld}  # compiled in: a new configuration on every rank
    fk.warmup(prep.grid, *prep.args)
    dist.barrier()
    fg, err = _capture_in_turn(rank, W, call, comm)
    if err is not None:
        raise err
    torch.cuda.current_stream().synchronize()
    dist.barrier()
    t0 = time.monotonic()
    fg.replay()  # epoch 1 of the withholding configuration: rank 0 times out
    torch.cuda.current_stream().synchronize()
    elapsed = time.monotonic() - t0
    dist.barrier()
    _after_withheld_replay(fg, rank, W, dev, comm, withheld, elapsed, timeout_s, problems)
    del fg
    comm.clear_cache()
    res = gemm_ar(a, b, comm, fused=True, **op)
    ref = gemm_ar(a, b, comm, kernel="tma", config=cfg, fused=False)
    torch.cuda.current_stream().synchronize()
    comm.check()
    if float(torch.linalg.norm(res.float() - ref.float()) / torch.linalg.norm(ref.float())) > 1e-2:
        problems.append("fresh fused gemm_ar after the fault is wrong")
    comm.close()
    return problems


def graph_refusals(rank, W):
    """The ops' typed refusals on a real capture: the MoE dispatch with ``on_overflow='error'``
    and the unfused path in loopback (a collective) raise GraphCaptureError and leave the
    group usable (every rank refuses before any rendezvous)."""
    import torch

    from syncopate.errors import GraphCaptureError
    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import ag_gemm, moe_dispatch_gemm
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    dev, problems = comm.device, []
    E, T, H = 2 * W, 32, 128
    x = torch.randn(T, H, device=dev).to(torch.bfloat16)
    ids = torch.randint(0, E, (T, 2), device=dev)
    wts = torch.rand(T, 2, device=dev)
    w1 = torch.randn(2, H, 128, device=dev).to(torch.bfloat16)
    cfg = GroupedGemmConfig(64, 64, 64, 4, 3)
    a = torch.randn(64, 64, device=dev).to(torch.bfloat16)
    bm = torch.randn(64, 64, device=dev).to(torch.bfloat16)
    ag_gemm(a, bm, comm, fused=False)  # eager: fine
    calls = [("moe on_overflow='error'", lambda: moe_dispatch_gemm(
        x, ids, wts, w1, comm, capacity=64, config=cfg, fused=True), "on_overflow='drop'")]
    if dist.is_loopback():  # across processes NCCL's collectives are capturable
        calls.append(("ag_gemm fused=False in loopback", lambda: ag_gemm(a, bm, comm, fused=False),
                      "fused=True, backend='sm'"))
    for what, call, says in calls:
        fg, err = _capture_in_turn(rank, W, call, comm, require_fused=False)
        if fg is not None or not isinstance(err, GraphCaptureError):
            problems.append(f"{what}: capture not refused with GraphCaptureError: {err!r}")
        elif says not in str(err):
            problems.append(f"{what}: the refusal does not say {says!r}: {err}")
        torch.cuda.current_stream().synchronize()
        dist.barrier()
    y = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(y)
    if float(y[0]) != sum(range(1, W + 1)):
        problems.append("all_reduce after the refused captures gave a wrong result")
    comm.close()
    return problems
