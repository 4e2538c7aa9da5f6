"""Per-rank bodies of the multi-GPU tests (run by dist_harness.run_ranks in spawned children,
one per GPU, or as W threads of one child on one GPU in loopback: SYNCOPATE_GPU_LOOPBACK=W).

Collectives go through ``syncopate.runtime.collectives`` (torch.distributed's names), which is
torch.distributed itself with one process per GPU and the loopback group in a virtual rank's
thread: the same worker code runs in both modes.

Each worker checks many cases in one process group (process start, NCCL init and compiles are
the expensive part of a GPU test) and returns a list of problems -- empty when everything
passed -- so the parent test asserts on it and prints every failing case at once.
"""

from __future__ import annotations

import time


def _rand(shape, dtype, seed, device):
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device, dtype=torch.float32).to(dtype)


def _rel(x, ref):
    import torch
    return float(torch.linalg.norm(x.float() - ref.float()) / torch.linalg.norm(ref.float()).clamp_min(1e-30))


# --------------------------------------------------------------------------- sync kernels

def sync_kernels(rank, W):
    """ENTRY signalling, waits and CONSUMED adds across ranks with the runtime's sync kernels,
    then the watchdog: a wait on a flag nobody writes must record it and leave in time."""
    import torch

    from syncopate import abi
    from syncopate.errors import CommTimeout
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist
    from syncopate.runtime import sync_kernels as sk

    problems = []
    comm = Communicator()
    lay = abi.FlagLayout(num_chunks=4, world_size=W)
    flags = comm.new_flags(lay.words)
    peers = torch.tensor([comm.peer_ptrs(flags)], dtype=torch.int64, device=comm.device)
    for e in (1, 2, 3):
        sk.signal_entry(peers, lay.entry(rank), e, W)
        sk.wait_flag(flags.data_ptr(), lay.entry(0), e, comm.diag_addr, rank=rank,
                     kind=abi.KIND_ENTRY, epoch=e, timeout_ns=int(5e9), count=W)
        for p in range(W):
            if p != rank:
                sk.add_flag(comm.peer_ptrs(flags)[p], lay.consumed, 2)
        sk.wait_flag(flags.data_ptr(), lay.consumed, 2 * e * (W - 1), comm.diag_addr, rank=rank,
                     kind=abi.KIND_CONSUMED, epoch=e, timeout_ns=int(5e9))
    torch.cuda.synchronize()
    got = flags.cpu().tolist()
    want_entry = [3] * W
    if got[lay.entry(0):lay.entry(0) + W] != want_entry:
        problems.append(f"ENTRY words {got[lay.entry(0):lay.entry(0) + W]} != {want_entry}")
    if got[lay.consumed] != 6 * (W - 1):
        problems.append(f"CONSUMED {got[lay.consumed]} != {6 * (W - 1)}")
    try:
        comm.check()
    except CommTimeout as e:
        problems.append(f"unexpected timeout: {e}")
    # the watchdog: chunk 2 never arrives
    t0 = time.monotonic()
    sk.wait_flag(flags.data_ptr(), lay.chunk(2), 1, comm.diag_addr, rank=rank, kind=abi.KIND_CHUNK,
                 epoch=4, timeout_ns=int(0.5e9))
    torch.cuda.synchronize()
    elapsed = time.monotonic() - t0
    try:
        comm.check(lay)
        problems.append("no CommTimeout for a flag nobody writes")
    except CommTimeout as e:
        if e.record.kind != "chunk" or e.record.chunk != 2 or e.record.rank != rank:
            problems.append(f"wrong record: {e.record}")
        if "chunk 2" not in str(e):
            problems.append(f"message does not name chunk 2: {e}")
    if not 0.4 < elapsed < 1.5:
        problems.append(f"watchdog left after {elapsed:.2f} s (timeout 0.5 s)")
    # the device is still usable and the record was cleared
    x = torch.ones(4, device=comm.device)
    dist.all_reduce(x)
    if float(x.sum()) != 4 * W:
        problems.append("all_reduce after the timeout gave a wrong result")
    if comm.timeout_record() is not None:
        problems.append("record not cleared after raising")
    comm.close()
    return problems


# --------------------------------------------------------------------------- AG + GEMM

def _ag_case(comm, case, seed):
    """Run one ag_gemm case; return a problem string or None."""
    import torch
    from syncopate.runtime import collectives as dist

    from syncopate.kernels import matmul
    from syncopate.ops import ag_gemm
    from syncopate.ops.driver import resolve_config

    backend, dtype_name, Ms, N, K, split, kernel = case
    dtype = getattr(torch, dtype_name)
    dev = comm.device
    a = _rand((Ms, K), dtype, seed * 10 + comm.rank, dev)
    b = _rand((K, N), dtype, seed * 10 + 7, dev)  # same B on every rank is not required
    out = ag_gemm(a, b, comm, backend=backend, split=split, kernel=kernel)
    gathered = torch.empty((Ms * comm.world_size, K), device=dev, dtype=dtype)
    dist.all_gather_into_tensor(gathered, a, group=comm.group)
    cfg = resolve_config(kernel, Ms * comm.world_size, N, K, dtype)
    local = matmul(gathered, b, kernel=kernel, config=cfg)
    ref = gathered.float() @ b.float()
    torch.cuda.synchronize()
    comm.check()
    if not torch.isfinite(out).all():
        return f"{case}: output has NaN/Inf"
    err = _rel(out, ref)
    if err > 2e-2:
        return f"{case}: relative error {err:.3g} vs torch"
    if not torch.equal(out, local):
        n = int((out != local).sum())
        return f"{case}: not bitwise equal to the local kernel on the gathered A ({n} elements differ)"
    return None


def ag_gemm_cases(rank, W, cases, symm_backend="cuda"):
    from syncopate.runtime import Communicator
    comm = Communicator(symm_backend=symm_backend)
    problems = []
    for i, case in enumerate(cases):
        try:
            p = _ag_case(comm, case, seed=100 + i)
        except Exception as e:  # noqa: BLE001 - report every case
            import traceback
            p = f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
        if p:
            problems.append(p)
    comm.close()
    return problems


def ag_gemm_fallback(rank, W, cases):
    """SYNCOPATE=0 / fused=False gives bitwise the fused result."""
    import torch

    from syncopate.ops import ag_gemm
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for i, (backend, dtype_name, Ms, N, K, split, kernel) in enumerate(cases):
        dtype = getattr(torch, dtype_name)
        a = _rand((Ms, K), dtype, 500 + i * 10 + rank, comm.device)
        b = _rand((K, N), dtype, 500 + i * 10 + 9, comm.device)
        f = ag_gemm(a, b, comm, backend=backend, split=split, kernel=kernel, fused=True)
        u = ag_gemm(a, b, comm, backend=backend, split=split, kernel=kernel, fused=False)
        torch.cuda.synchronize()
        comm.check()
        if not torch.equal(f, u):
            problems.append(f"{(backend, dtype_name, Ms, N, K, split, kernel)}: fused != fallback "
                            f"({int((f != u).sum())} elements)")
    comm.close()
    return problems


# --------------------------------------------------------------------------- weight AG + GEMM

def _agw_case(comm, case, seed, launches):
    """One ag_weight_gemm case over ``launches`` calls with fresh inputs (the later ones on the
    launch plan of the layout); a problem string or None."""
    import torch

    from syncopate.kernels import matmul
    from syncopate.ops import ag_weight_gemm
    from syncopate.ops.driver import resolve_config

    backend, dtype_name, M, N, K, dim, split, kernel = case
    dtype = getattr(torch, dtype_name)
    W, dev = comm.world_size, comm.device
    cfg = resolve_config(kernel, M, N, K, dtype)
    n = (K, N)[dim] // W
    for launch in range(launches):
        s = seed * 100 + launch * 10
        a = _rand((M, K), dtype, s + comm.rank, dev)  # every rank its own activations
        w = _rand((K, N), dtype, s + 9, dev)  # the whole weight, the same on every rank
        shard = w.narrow(dim, comm.rank * n, n).clone()
        out = ag_weight_gemm(a, shard, comm, backend=backend, split=split, kernel=kernel)
        unfused = ag_weight_gemm(a, shard, comm, kernel=kernel, fused=False)
        local = matmul(a, w, kernel=kernel, config=cfg)
        torch.cuda.synchronize()
        comm.check()
        where = f"{case} launch {launch}"
        if not torch.isfinite(out).all():
            return f"{where}: output has NaN/Inf"
        if _rel(out, a.float() @ w.float()) > 2e-2:
            return f"{where}: relative error {_rel(out, a.float() @ w.float()):.3g} vs torch"
        if not torch.equal(out, local):
            return (f"{where}: not bitwise the local kernel on the gathered weight "
                    f"({int((out != local).sum())} elements differ)")
        if not torch.equal(out, unfused):
            return f"{where}: fused != the unfused path ({int((out != unfused).sum())} elements)"
    return None


def ag_weight_gemm_cases(rank, W, cases, launches=3):
    """ag_weight_gemm (FSDP's weight all-gather + GEMM), the weight sharded along N or K:
    bitwise the local kernel on the gathered weight and the unfused path, launch after
    launch."""
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for i, case in enumerate(cases):
        try:
            p = _agw_case(comm, case, 300 + i, launches)
        except Exception as e:  # noqa: BLE001 - report every case
            import traceback
            p = f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
        if p:
            problems.append(p)
    comm.close()
    return problems


# --------------------------------------------------------------------------- GEMM + RS

def gemm_rs_cases(rank, W, cases, symm_backend="cuda"):
    """Each case against torch (matmul in fp32 + reduce_scatter_tensor) and, for 2 ranks,
    bitwise against the NCCL fallback (one rounding of a two-term sum either way); outputs are
    poisoned with NaN before the fused run."""
    import torch
    from syncopate.runtime import collectives as dist

    from syncopate.ops import gemm_rs
    from syncopate.runtime import Communicator
    comm = Communicator(symm_backend=symm_backend)
    problems = []
    for i, (backend, dtype_name, M, N, Kl, split, kernel) in enumerate(cases):
        case = (backend, dtype_name, M, N, Kl, split, kernel)
        try:
            dtype = getattr(torch, dtype_name)
            a = _rand((M, Kl), dtype, 900 + i * 10 + rank, comm.device)
            b = _rand((Kl, N), dtype, 900 + i * 10 + 5 + rank, comm.device)
            out = torch.full((M // W, N), float("nan"), device=comm.device, dtype=dtype)
            if backend.startswith("default:"):  # the op's own choice of backend, reduce, split
                gemm_rs(a, b, comm, kernel=kernel, out=out)
                problems += _default_rs_variant_problems(comm, case, a, b, kernel,
                                                         backend.split(":", 1)[1])
            else:
                be, _, red = backend.partition("+")  # "ce+epilogue": backend ce, reduce epilogue
                gemm_rs(a, b, comm, backend=be, split=split, kernel=kernel, out=out,
                        reduce=red or "comm")
            fb = gemm_rs(a, b, comm, split=split, kernel=kernel, fused=False)
            full = (a.float() @ b.float())
            ref = torch.empty((M // W, N), device=comm.device, dtype=torch.float32)
            dist.reduce_scatter_tensor(ref, full, group=comm.group)
            torch.cuda.synchronize()
            comm.check()
            err = _rel(out, ref)
            if not torch.isfinite(out).all():
                problems.append(f"{case}: NaN/Inf")
            elif err > 2e-2:
                problems.append(f"{case}: relative error {err:.3g} vs torch")
            elif W == 2 and not torch.equal(out, fb):
                problems.append(f"{case}: fused != NCCL fallback for 2 ranks "
                                f"({int((out != fb).sum())} elements)")
        except Exception as e:  # noqa: BLE001
            import traceback
            problems.append(f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
    comm.close()
    return problems


def _default_rs_variant_problems(comm, case, a, b, kernel, want):
    """The fused variant the op's calibrated decision prefers is the one the case expects
    (``want``: "sm" or "ce+epilogue"; the op may still take the unfused path where the
    calibration predicts it faster -- the result checks cover either)."""
    from syncopate.calibration import device_gpu_type
    from syncopate.ops.driver import resolve_config
    from syncopate.ops.gemm_rs import resolve_variant
    W, (M, Kl), N = comm.world_size, a.shape, b.shape[1]
    cfg = resolve_config(kernel, M, N, Kl, a.dtype)
    be, red, _ = resolve_variant(M, N, Kl, W, a.dtype, cfg, False,
                                 gpu=device_gpu_type(comm.device))
    got = be + ("+epilogue" if red == "epilogue" else "")
    return [] if got == want else [f"{case}: default variant {got}, expected {want}"]


# --------------------------------------------------------------------------- stress

def ag_gemm_stress(rank, W, backend, iters, shape=(192, 320, 256), kernel="tma", split=2):
    """``iters`` back-to-back launches, new inputs each time, every output checked bitwise
    against the local kernel on the gathered A (mismatches counted on the device: no host sync
    inside the loop)."""
    import torch
    from syncopate.runtime import collectives as dist

    from syncopate.kernels import matmul
    from syncopate.ops import ag_gemm
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    comm = Communicator()
    Ms, N, K = shape
    dtype = torch.bfloat16
    dev = comm.device
    cfg = resolve_config(kernel, Ms * W, N, K, dtype)
    bad = torch.zeros((), dtype=torch.int64, device=dev)
    gathered = torch.empty((Ms * W, K), device=dev, dtype=dtype)
    g = torch.Generator(device=dev)
    g.manual_seed(77 + rank)
    b = torch.randn(K, N, generator=g, device=dev).to(dtype)
    outs = [torch.empty((Ms * W, N), device=dev, dtype=dtype) for _ in range(3)]
    # the reference path once first: its kernels load before any fused kernel spins (a module
    # load in loopback may wait for a peer's spinning kernel, docs/loopback.md)
    dist.all_gather_into_tensor(gathered, torch.randn(Ms, K, device=dev).to(dtype),
                                group=comm.group)
    matmul(gathered, b, kernel=kernel, config=cfg)
    t0 = time.monotonic()
    for i in range(iters):
        a = torch.randn(Ms, K, generator=g, device=dev).to(dtype)
        out = outs[i % 3]  # rotate outputs: a stale tile from two launches ago would differ
        out.fill_(float("nan"))
        ag_gemm(a, b, comm, backend=backend, split=split, kernel=kernel, config=cfg, out=out)
        dist.all_gather_into_tensor(gathered, a, group=comm.group)
        ref = matmul(gathered, b, kernel=kernel, config=cfg)
        bad += (out != ref).sum()
        if i % 100 == 99:
            comm.check()  # a timeout surfaces within 100 launches, not at the end
    torch.cuda.synchronize()
    comm.check()
    elapsed = time.monotonic() - t0
    nbad = int(bad)
    comm.close()
    return [] if nbad == 0 else [f"{backend}: {nbad} mismatching elements over {iters} launches "
                                 f"({elapsed:.1f} s)"]


def gemm_rs_stress(rank, W, backend, iters, shape=(256, 320, 192), kernel="tma", split=2):
    """``iters`` back-to-back GEMM+RS launches, new A each time, every output compared with the
    NCCL fallback computed right after it (bitwise at W = 2, within rounding of the partials'
    magnitude above: mismatches counted on the device). The
    symmetric partial-C buffer is rewritten every launch while peers may still read the previous
    one: the epoch handshake is what keeps this exact."""
    import torch

    from syncopate.ops import gemm_rs
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    comm = Communicator()
    M, N, Kl = shape
    dtype = torch.bfloat16
    dev = comm.device
    cfg = resolve_config(kernel, M, N, Kl, dtype)
    bad = torch.zeros((), dtype=torch.int64, device=dev)
    g = torch.Generator(device=dev)
    g.manual_seed(99 + rank)
    b = torch.randn(Kl, N, generator=g, device=dev).to(dtype)
    outs = [torch.empty((M // W, N), device=dev, dtype=dtype) for _ in range(3)]
    # the reference path once first (its kernels load before any fused kernel spins)
    gemm_rs(torch.randn(M, Kl, device=dev).to(dtype), b, comm, kernel=kernel, config=cfg,
            fused=False)
    t0 = time.monotonic()
    be, _, red = backend.partition("+")
    for i in range(iters):
        a = torch.randn(M, Kl, generator=g, device=dev).to(dtype)
        out = outs[i % 3]
        out.fill_(float("nan"))
        gemm_rs(a, b, comm, backend=be, split=split, kernel=kernel, config=cfg, out=out,
                reduce=red or "comm")
        ref = gemm_rs(a, b, comm, kernel=kernel, config=cfg, fused=False)
        if W == 2:
            bad += (out != ref).sum()
        else:
            # W > 2: the owner adds W - 1 partials one at a time in the output's dtype, the
            # fallback sums them in fp32 and rounds once, so the last bits differ (the CPU
            # emulator checks the same schedule race-free at W = 4). Stale or missing data
            # is off by the partials' magnitude; rounding by a few ulps of it.
            tol = (W - 1) * 2.0 ** -7 * ref.float().abs().amax()
            bad += ((out.float() - ref.float()).abs() > tol).sum() + (~torch.isfinite(out)).sum()
        if i % 100 == 99:
            comm.check()
    torch.cuda.synchronize()
    comm.check()
    elapsed = time.monotonic() - t0
    nbad = int(bad)
    comm.close()
    return [] if nbad == 0 else [f"gemm_rs {backend}: {nbad} mismatching elements over {iters} "
                                 f"launches ({elapsed:.1f} s)"]


# --------------------------------------------------------------------------- faults

def fault_withheld_chunk(rank, W, backend, timeout_s):
    """Rank 1 withholds one chunk for rank 0 -- ce: its side stream skips that copy + flag;
    sm: its comm programs copy the chunk but never signal it (compiled in on every rank, the
    compile done before the ranks line up) -- and rank 0 must raise CommTimeout naming the
    chunk within timeout + 1 s; then the process group and a fresh fused op work on both
    ranks."""
    import torch
    from syncopate.runtime import collectives as dist

    from syncopate.errors import CommTimeout
    from syncopate.ops import ag_gemm, ag_gemm_fused_kernel
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator, launch_plan

    comm = Communicator()
    problems = []
    Ms, N, K = 128, 256, 128
    dtype = torch.bfloat16
    cfg = resolve_config("tma", Ms * W, N, K, dtype)
    a = _rand((Ms, K), dtype, rank, comm.device)
    b = _rand((K, N), dtype, 11, comm.device)
    cp = 0 if backend == "ce" else 4
    op = dict(backend=backend, split=2, mode="push", comm_programs=cp, config=cfg)
    ag_gemm(a, b, comm, **op)  # epoch 1: all good
    torch.cuda.synchronize()
    comm.check()
    fk = ag_gemm_fused_kernel(comm, Ms * W, K, dtype, backend=backend, split=2, mode="push",
                              comm_programs=cp, kernel="tma", config=cfg)
    withheld = [c.id for c in fk.schedule.chunks if c.src == 1 and c.dst == 0][0]
    if backend == "ce":
        if rank == 1:
            fk.test_skip_chunks = {withheld}
    else:
        fk.test_skip_chunks = {withheld}  # compiled in: a new configuration on every rank
        prep = next(p for p in comm.cache[launch_plan._PLANS].values() if p.fk is fk)
        fk.warmup(prep.grid, *prep.args)
    dist.barrier()
    t0 = time.monotonic()
    ag_gemm(a, b, comm, **op)
    torch.cuda.synchronize()
    raised = None
    try:
        comm.check()
    except CommTimeout as e:
        raised = e
    elapsed = time.monotonic() - t0
    if rank == 0:
        if raised is None:
            problems.append("rank 0: no CommTimeout although chunk %d was withheld" % withheld)
        else:
            if getattr(raised, "chunk", None) != withheld or f"chunk {withheld}" not in str(raised):
                problems.append(f"rank 0: timeout does not name chunk {withheld}: {raised}")
            if elapsed > timeout_s + 1.0:
                problems.append(f"rank 0: CommTimeout after {elapsed:.2f} s > timeout + 1 s")
    elif raised is not None:
        problems.append(f"rank 1 (the withholding rank) raised: {raised}")
    # the process group is usable, and a fresh op works on both ranks
    x = torch.full((8,), float(rank + 1), device=comm.device)
    dist.all_reduce(x)
    if float(x[0]) != sum(range(1, W + 1)):
        problems.append("all_reduce after the fault gave a wrong result")
    comm.clear_cache()
    out = ag_gemm(a, b, comm, **op)
    gathered = torch.empty((Ms * W, K), device=comm.device, dtype=dtype)
    dist.all_gather_into_tensor(gathered, a)
    torch.cuda.synchronize()
    comm.check()
    if _rel(out, gathered.float() @ b.float()) > 2e-2:
        problems.append("fresh fused op after the fault is wrong")
    comm.close()
    return problems


def fault_missing_rank(rank, W, backend, timeout_s):
    """Rank 1 does not launch epoch 2 at all: rank 0 raises CommTimeout within timeout + 1 s,
    naming what it waited for; the group stays usable."""
    import torch
    from syncopate.runtime import collectives as dist

    from syncopate.errors import CommTimeout
    from syncopate.ops import ag_gemm
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator

    comm = Communicator()
    problems = []
    Ms, N, K = 128, 256, 128
    dtype = torch.bfloat16
    cfg = resolve_config("tma", Ms * W, N, K, dtype)
    a = _rand((Ms, K), dtype, rank, comm.device)
    b = _rand((K, N), dtype, 12, comm.device)
    ag_gemm(a, b, comm, backend=backend, split=1, config=cfg)
    torch.cuda.synchronize()
    comm.check()
    dist.barrier()
    if rank == 0:
        t0 = time.monotonic()
        ag_gemm(a, b, comm, backend=backend, split=1, config=cfg)
        torch.cuda.synchronize()
        elapsed = time.monotonic() - t0
        try:
            comm.check()
            problems.append("rank 0: no CommTimeout although rank 1 never launched")
        except CommTimeout as e:
            if e.record.rank != 0 or e.record.kind not in ("entry", "chunk"):
                problems.append(f"rank 0: unexpected record {e.record}")
            if elapsed > timeout_s + 1.0:
                problems.append(f"rank 0: CommTimeout after {elapsed:.2f} s > timeout + 1 s")
    dist.barrier()
    x = torch.ones(4, device=comm.device)
    dist.all_reduce(x)
    if float(x.sum()) != 4 * W:
        problems.append("all_reduce after the fault gave a wrong result")
    comm.close()
    return problems


# --------------------------------------------------------------------------- unseen kernels

def _unseen_case(comm, case, launches):
    """Fuse a kernel written in another style than ours (tests/corpus/unseen.py) with an
    all-gather of one operand; run ``launches`` epochs with fresh inputs and a NaN-poisoned
    output each; compare every epoch with the same kernel run unfused on the gathered tensor
    (bitwise, or within ``tol`` where the fused kernel visits K tiles in arrival order)."""
    import torch

    import syncopate
    from syncopate.runtime import collectives as dist
    from syncopate.schedule import all_gather

    sys_path_unseen()
    from corpus import unseen as U

    name, backend, mode = case
    W, me, dev = comm.world_size, comm.rank, comm.device
    bf = torch.bfloat16
    spec = _UNSEEN[name]
    fn = getattr(U, name)
    shape = spec["gathered"]
    rows = shape[0] // W
    sched = all_gather(list(shape), "bf16", W, mode=mode, split=2)
    fk = syncopate.fuse(fn, sched, operand=spec["operand"], backend=backend, comm=comm,
                        comm_programs=4 if backend != "ce" else None)
    G = comm.empty(shape, bf)
    # load every module before any rank launches a kernel that may wait for a peer: in
    # loopback a module load can wait for another rank's spinning kernel (docs/loopback.md)
    warm_args, grid, out_index = spec["args"](torch.zeros(shape, device=dev, dtype=bf), 0, dev)
    fn[grid](*warm_args, **spec["constexprs"])
    torch.cuda.current_stream().synchronize()
    dist.barrier(group=comm.group)
    problems = []
    for e in range(launches):
        seed = 1000 * e + 17
        shard = _rand((rows, shape[1]), bf, seed + me, dev)
        fk.before_staging()
        G[me * rows:(me + 1) * rows].copy_(shard)
        args, grid, out_index = spec["args"](G, seed, dev)
        args[out_index].fill_(float("nan"))
        fk[grid](*args, **spec["constexprs"])
        torch.cuda.current_stream().synchronize()
        comm.check()
        gathered = torch.empty(shape, device=dev, dtype=bf)
        dist.all_gather_into_tensor(gathered, shard.contiguous(), group=comm.group)
        ref_args, _, _ = spec["args"](gathered, seed, dev)
        ref_args[out_index].fill_(float("nan"))
        fn[grid](*ref_args, **spec["constexprs"])
        torch.cuda.current_stream().synchronize()
        out, ref = args[out_index], ref_args[out_index]
        if not torch.isfinite(out).all():
            problems.append(f"{case} epoch {e + 1}: {int((~torch.isfinite(out)).sum())} "
                            f"elements never written (poison left)")
            break
        tol = spec.get("tol")
        if tol is None and not torch.equal(out, ref):
            problems.append(f"{case} epoch {e + 1}: {int((out != ref).sum())} elements differ "
                            f"from the unfused kernel on the gathered tensor")
            break
        if tol is not None and _rel(out, ref) > tol:
            problems.append(f"{case} epoch {e + 1}: relative error {_rel(out, ref):.3g}")
            break
    return problems


def _gemm_args(kind):
    def make(A, seed, dev):
        import torch
        bf = torch.bfloat16
        if kind == "bp":
            M, K = A.shape
            N = 192
            b = _rand((K, N), bf, seed + 99, dev)
            c = torch.empty((M, N), device=dev, dtype=bf)
            return ([A, b, c, M, N, K, A.stride(0), 1, b.stride(0), 1, c.stride(0), 1],
                    (-(-M // 64) * -(-N // 64),), 2)
        if kind == "persistent":
            M, K = A.shape
            N = 192
            b = _rand((K, N), bf, seed + 99, dev)
            c = torch.empty((M, N), device=dev, dtype=bf)
            return ([A, b, c, M, N, K, A.stride(0), b.stride(0), c.stride(0)], (8,), 2)
        K, M = A.shape  # xt: X is [K, M]
        N = 128
        y = _rand((K, N), bf, seed + 99, dev)
        c = torch.empty((M, N), device=dev, dtype=bf)
        return ([A, y, c, M, N, K, A.stride(0), 1, y.stride(0), 1, c.stride(0), 1],
                (-(-M // 64), -(-N // 64)), 2)
    return make


def _gather_args(A, seed, dev):
    import torch
    g = torch.Generator(device=dev)
    g.manual_seed(seed + 5)
    idx = torch.randperm(A.shape[0], generator=g, device=dev).to(torch.int32)
    out = torch.empty_like(A)
    return [A, idx, out, A.shape[1], A.stride(0), out.stride(0)], (A.shape[0],), 2


def _rows_args(A, seed, dev):
    import torch
    out = torch.empty_like(A)
    return [A, out, A.shape[1], A.stride(0)], (A.shape[0],), 1


_UNSEEN = {
    # class 1: j derived from i (the remap is refused; waits keep it correct)
    "bp_gemm_derived": dict(gathered=(256, 128), operand="a_ptr", args=_gemm_args("bp"),
                            constexprs=dict(BM=64, BN=64, BK=32)),
    # class 2: a 2-D grid, X all-gathered along K (waits inside the K loop; the K loop keeps
    # its order -- tile-remap does not reorder a loop that accumulates floats -- so bitwise)
    "xt_gemm_2d": dict(gathered=(256, 128), operand="x_ptr", args=_gemm_args("xt"),
                       constexprs=dict(BM=64, BN=64, BK=32)),
    # class 3: the row read is a loaded index (never remapped; waits resolved at run time)
    "row_gather": dict(gathered=(512, 64), operand="inp_ptr", args=_gather_args,
                       constexprs=dict(BLOCK=64)),
    "row_gather_hinted": dict(gathered=(512, 64), operand="inp_ptr", args=_gather_args,
                              constexprs=dict(BLOCK=64)),
    # class 5's sound neighbour: a mask bound that becomes a launch check
    "masked_rows": dict(gathered=(512, 64), operand="inp_ptr", args=_rows_args,
                        constexprs=dict(BLOCK=64)),
    # a persistent loop with another tile order (remapped)
    "persistent_rowmajor_gemm": dict(gathered=(256, 128), operand="a_ptr",
                                     args=_gemm_args("persistent"),
                                     constexprs=dict(BM=64, BN=64, BK=32, NUM_PROGS=8)),
}


def unseen_kernels(rank, W, cases, launches=5):
    """Every case of :data:`_UNSEEN` x backend x mode; returns the problems."""
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for case in cases:
        t0 = time.monotonic()
        try:
            problems += _unseen_case(comm, case, launches)
            if rank == 0:
                print(f"unseen {case}: {time.monotonic() - t0:.1f} s", flush=True)
        except Exception as e:  # noqa: BLE001 - report the first failing case
            import traceback
            problems.append(f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
            # this rank left the case midway: its collectives no longer line up with the
            # other ranks', so later cases would only report that
            comm.close()
            return problems
    # a launch that breaks the mask bound the compiler derived is refused before it runs
    try:
        import torch
        import syncopate
        from syncopate.errors import LaunchError
        from syncopate.schedule import all_gather
        sys_path_unseen()
        from corpus import unseen as U
        fk = syncopate.fuse(U.masked_rows, all_gather([512, 64], "bf16", W, split=2),
                            operand="inp_ptr", comm=comm, comm_programs=4)
        G = comm.empty((512, 64), torch.bfloat16)
        out = torch.empty_like(G)
        try:
            fk[(512,)](G, out, 128, 64, BLOCK=128)
            problems.append("masked_rows with n_cols=128 > 64 was launched (expected LaunchError)")
        except LaunchError as e:
            if "n_cols=128" not in str(e):
                problems.append(f"masked_rows LaunchError does not name n_cols: {e}")
    except Exception as e:  # noqa: BLE001
        problems.append(f"launch-check case: {type(e).__name__}: {e}")
    comm.close()
    return problems


def sys_path_unseen():
    import os
    import sys
    root = os.path.join(os.path.dirname(__file__), "..")
    if root not in sys.path:
        sys.path.insert(0, root)


def lowering_timing(rank, W, op, shape, iters=50, kernel="tma", split=2):
    """Kernel time of one fused op (``ag``: AG+GEMM, ``rs``: GEMM+RS; sm backend) with the
    lowering ``SYNCOPATE_LOWERING`` selects, plus the compiled kernel's registers and shared
    memory: the unrolled and the table form compared in the same shape (issue 10). Every
    launch's output is checked against the unfused path once at the end. Returns
    ``["TIMING ..."]`` lines (not failures) on rank 0."""
    import os

    import torch
    from syncopate.runtime import collectives as dist

    from syncopate.kernels import matmul
    from syncopate.ops import ag_gemm, gemm_rs
    from syncopate.ops.driver import resolve_config
    from syncopate.runtime import Communicator
    comm = Communicator()
    Ms, N, K = shape
    dtype = torch.bfloat16
    dev = comm.device
    g = torch.Generator(device=dev)
    g.manual_seed(5 + rank)
    if op == "ag":
        cfg = resolve_config(kernel, Ms * W, N, K, dtype)
        a = torch.randn(Ms, K, generator=g, device=dev).to(dtype)
        b = torch.randn(K, N, generator=g, device=dev).to(dtype)
        out = torch.empty((Ms * W, N), device=dev, dtype=dtype)

        def call():
            ag_gemm(a, b, comm, backend="sm", split=split, kernel=kernel, config=cfg, out=out)
    else:
        cfg = resolve_config(kernel, Ms * W, N, K, dtype)
        a = torch.randn(Ms * W, K, generator=g, device=dev).to(dtype)
        b = torch.randn(K, N, generator=g, device=dev).to(dtype)
        out = None

        def call():
            return gemm_rs(a, b, comm, backend="sm", split=split, kernel=kernel, config=cfg)
    problems = []
    res = call()
    torch.cuda.synchronize()
    comm.check()
    if op == "ag":
        gathered = torch.empty((Ms * W, K), device=dev, dtype=dtype)
        dist.all_gather_into_tensor(gathered, a, group=comm.group)
        ref = matmul(gathered, b, kernel=kernel, config=cfg)
        if not torch.equal(out, ref):
            problems.append(f"rank {rank}: ag output differs from the unfused kernel")
    else:
        full = matmul(a, b, kernel=kernel, config=cfg).float()
        dist.all_reduce(full, group=comm.group)
        mine = full[rank * Ms:(rank + 1) * Ms]
        err = (res.float() - mine).abs().max().item()
        if err > 0.05 * mine.abs().max().item() + 1e-2:
            problems.append(f"rank {rank}: rs output off by {err}")
    times = []
    for _ in range(iters):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        dist.barrier(group=comm.group)
        s.record()
        call()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    comm.check()
    fk = [v for k, v in comm.cache.items() if str(k[0]).endswith(".fk")][0]
    ck = fk.last_config.compiled.kernel
    lowering = fk.last_config.abi.lowering
    times.sort()
    med = times[len(times) // 2]
    comm.close()
    line = (f"TIMING op={op} shape={shape} W={W} lowering={lowering} "
            f"env={os.environ.get('SYNCOPATE_LOWERING', '')} median_ms={med:.4f} "
            f"min_ms={times[0]:.4f} n_regs={ck.n_regs} shared={ck.metadata.shared}")
    return problems + ([line] if rank == 0 else [])


# --------------------------------------------------------------------------- ring attention

def _ring_case(comm, case, launches):
    """One ring-attention case over ``launches`` launches with fresh inputs: the fused op
    (outputs NaN-poisoned first) against SDPA in fp32 on the whole sequence and against the
    unfused path (NCCL all-gather + the same local kernel). Returns problem strings."""
    import torch
    import torch.nn.functional as F

    from syncopate.kernels.attention_zigzag import zigzag_shard
    from syncopate.ops import ring_attention, ring_attention_reference

    causal, dtype_name, B, Hq, Hkv, Sl, D, order, config = case
    dtype = getattr(torch, dtype_name)
    W, r, dev = comm.world_size, comm.rank, comm.device
    S = Sl * W
    problems = []
    for it in range(launches):
        seed = 1000 + 17 * it  # the same global tensors on every rank
        q, k, v = (_rand((B, h, S, D), dtype, seed + j, dev)
                   for j, h in enumerate((Hq, Hkv, Hkv)))
        if causal:
            shard = lambda x: zigzag_shard(x, W, r).contiguous()  # noqa: E731
        else:
            shard = lambda x: x[:, :, r * Sl:(r + 1) * Sl].contiguous()  # noqa: E731
        qs, ks, vs = shard(q), shard(k), shard(v)
        g = Hq // Hkv
        ref = shard(F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(g, 1),
                                                   v.float().repeat_interleave(g, 1),
                                                   is_causal=causal))
        # the unfused path first: it loads its kernels before any fused kernel spins
        o_ref, lse_ref = ring_attention_reference(qs, ks, vs, comm, causal=causal, config=config,
                                                  order=order)
        o = torch.full((B, Hq, Sl, D), float("nan"), device=dev, dtype=dtype)
        lse = torch.full((B, Hq, Sl), float("nan"), device=dev, dtype=torch.float32)
        ring_attention(qs, ks, vs, comm, causal=causal, order=order, config=config, out=(o, lse),
                       comm_programs=4, fused=True)
        torch.cuda.synchronize(dev)
        comm.check()
        tag = f"{case} launch {it}"
        if not torch.isfinite(o).all() or not torch.isfinite(lse).all():
            problems.append(f"{tag}: output left unwritten (NaN)")
            continue
        err = float(((o.float() - ref).abs() - 2e-2 * ref.abs()).max())
        if err > 2e-2:
            problems.append(f"{tag}: |o - sdpa| exceeds 2e-2 + 2e-2 |sdpa| by {err:.3g}")
        d_ref = float((o.float() - o_ref.float()).abs().max())
        if d_ref > 1.6e-2:
            problems.append(f"{tag}: fused vs unfused (same kernel) differ by {d_ref:.3g}")
        d_lse = float((lse - lse_ref).abs().max())
        if d_lse > 1e-3:
            problems.append(f"{tag}: lse fused vs unfused differ by {d_lse:.3g}")
    return problems


def each_case(case_fn, cases, launches):
    """One communicator for this rank; ``case_fn(comm, case, launches)`` for every case, an
    exception reported as that case's problem (with its traceback) so every case runs."""
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for case in cases:
        try:
            problems += case_fn(comm, case, launches)
        except Exception as e:  # noqa: BLE001 - report every case
            import traceback
            problems.append(f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
    comm.close()
    return problems


def ring_attention_cases(rank, W, cases, launches=3):
    return each_case(_ring_case, cases, launches)
