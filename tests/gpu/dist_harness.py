"""Run a function on W GPU processes (one per GPU) with a hard timeout.

``run_ranks(fn, *args, world_size=2, timeout=120, env=None)`` spawns one process per rank
(``torch.multiprocessing`` spawn context), initialises an NCCL process group over a free
localhost port, calls ``fn(rank, world_size, *args)`` and returns the per-rank results. Any
child exception is re-raised in the parent with every rank's traceback. A run that exceeds
``timeout`` seconds is killed (every child, by pid) and fails with :class:`TimeoutError`
naming the ranks that had not finished: a hang can never eat the GPU lease.

``fn`` must be importable by the children (a module-level function of an importable module;
spawn sends it by qualified name, and the children get the parent's ``sys.path``).

Loopback (``SYNCOPATE_GPU_LOOPBACK=W`` in the environment, or ``loopback=W``; docs/loopback.md):
one spawned child runs the W ranks as threads on one GPU (``syncopate.runtime.loopback.
run_loopback``: own streams, own buffers, the loopback process group), with the same worker
functions and the same result/traceback/timeout handling -- the hard timeout still kills a
process by pid, which threads alone could not offer. ``pg_backend="gloo"`` runs the threads on
the CPU (the harness's own CPU tests).
"""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
import time
import traceback

from syncopate import settings

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
            "NVSHMEM_DISABLE_NVLS": "1"}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(fn, rank, world_size, port, args, env, result_path, pg_backend="nccl"):
    os.environ.update(NVLS_OFF)
    os.environ.update(env or {})
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    out = ("err", "did not start")
    try:
        import torch
        import torch.distributed as dist
        kw = {}
        if pg_backend == "nccl":
            torch.cuda.set_device(rank)
            kw["device_id"] = torch.device("cuda", rank)
        dist.init_process_group(pg_backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world_size, **kw)
        try:
            out = ("ok", fn(rank, world_size, *args))
        finally:
            try:
                if pg_backend == "nccl":
                    torch.cuda.synchronize()
                dist.destroy_process_group()
            except Exception:  # noqa: BLE001 - best effort; the result is what matters
                pass
    except BaseException:  # noqa: BLE001
        out = ("err", traceback.format_exc())
    with open(result_path, "wb") as f:
        pickle.dump(out, f)


def loopback_world(env=None) -> int:
    """``W`` from ``SYNCOPATE_GPU_LOOPBACK`` (0 = one process per GPU). A value that is not a
    whole number >= 2 is an error that says so (a typo must not silently test nothing)."""
    return settings.GPU_LOOPBACK.get(env)


def _loopback_child(fn, world_size, args, env, result_path, pg_backend="nccl"):
    os.environ.update(NVLS_OFF)
    # load every function of a module when the module loads: a kernel loaded lazily at its
    # first launch may need a context synchronisation, which waits for another virtual rank's
    # spinning kernel (docs/loopback.md, "Module loading")
    os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")
    # more hardware queues: fewer false dependencies between the ranks' streams (loopback.py,
    # more_hardware_queues)
    os.environ.setdefault("CUDA_DEVICE_MAX_CONNECTIONS", "32")
    os.environ.update(env or {})
    try:
        import sys
        # W rank threads hand over to each other at every collective; the default 5 ms GIL
        # switch interval would add up to 5 ms per hand-over (1000-launch tests)
        sys.setswitchinterval(0.0005)
        from syncopate.runtime.loopback import run_loopback
        device = "cuda:0" if pg_backend == "nccl" else None
        out = ("ok", run_loopback(fn, world_size, *args, device=device))
    except BaseException:  # noqa: BLE001
        out = ("err", traceback.format_exc())
    with open(result_path, "wb") as f:
        pickle.dump(out, f)


def _run_loopback(fn, args, world_size, timeout, env, pg_backend):
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    tmp = tempfile.mkdtemp(prefix="syncopate-loopback-")
    path = os.path.join(tmp, "ranks.pkl")
    p = ctx.Process(target=_loopback_child, args=(fn, world_size, args, env, path, pg_backend),
                    daemon=True)
    p.start()
    p.join(timeout)
    if p.is_alive():
        p.terminate()
        p.join(5)
        if p.is_alive():
            p.kill()
            p.join(5)
        raise TimeoutError(f"{getattr(fn, '__name__', fn)}: loopback ranks {list(range(world_size))} "
                           f"(one process, pid {p.pid}) still running after {timeout:g} s (killed)")
    if not os.path.exists(path):
        raise AssertionError(f"{getattr(fn, '__name__', fn)}: loopback process exited with code "
                             f"{p.exitcode} and no result")
    with open(path, "rb") as f:
        status, value = pickle.load(f)
    if status != "ok":
        raise AssertionError(f"{getattr(fn, '__name__', fn)}: loopback process failed:\n{value}")
    results, errors = [], []
    for r, (st, v) in enumerate(value):
        if st != "ok":
            errors.append(f"rank {r}:\n{v}")
        results.append(v)
    if errors:
        raise AssertionError(f"{getattr(fn, '__name__', fn)} failed (loopback, {world_size} ranks "
                             f"on one device):\n" + "\n".join(errors))
    return results


def run_ranks(fn, *args, world_size: int = 2, timeout: float = 120.0, env: dict | None = None,
              pg_backend: str = "nccl", loopback: int | None = None):
    """Per-rank results of ``fn(rank, world_size, *args)``; one process per rank, or W threads
    of one process with ``loopback`` (default: ``SYNCOPATE_GPU_LOOPBACK``)."""
    import torch.multiprocessing as mp

    if loopback is None:
        loopback = loopback_world()
    if loopback:
        # one process does the host work of W ranks (GIL), so allow it more time:
        # SYNCOPATE_GPU_TIMEOUT_SCALE (default 1.5)
        scale = float(os.environ.get("SYNCOPATE_GPU_TIMEOUT_SCALE", "1.5"))
        return _run_loopback(fn, args, world_size, timeout * scale, env, pg_backend)
    ctx = mp.get_context("spawn")
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="syncopate-gpu-")
    paths = [os.path.join(tmp, f"rank{r}.pkl") for r in range(world_size)]
    procs = [ctx.Process(target=_child, args=(fn, r, world_size, port, args, env, paths[r], pg_backend),
                         daemon=True) for r in range(world_size)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    if hung:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join(5)
        raise TimeoutError(f"{getattr(fn, '__name__', fn)}: ranks {hung} still running after "
                           f"{timeout:g} s (killed)")
    results, errors = [], []
    for r, (p, path) in enumerate(zip(procs, paths)):
        if not os.path.exists(path):
            errors.append(f"rank {r}: exited with code {p.exitcode} and no result")
            results.append(None)
            continue
        with open(path, "rb") as f:
            status, value = pickle.load(f)
        if status != "ok":
            errors.append(f"rank {r}:\n{value}")
        results.append(value)
    if errors:
        raise AssertionError(f"{getattr(fn, '__name__', fn)} failed:\n" + "\n".join(errors))
    return results
