"""The fused columns of a benchmark row: the op called as a user would (``fused default``)
and a small sweep of (split, comm programs) per backend (``fused[<backend>]``).  Every fused
configuration is checked on every rank before it is timed; one that fails its check is
reported and not timed, one that raises is reported with its error.
"""

from __future__ import annotations

from ..ops import REGISTRY

__all__ = ["checked_time", "error_text", "sweep_for", "sweep_fused", "time_default"]


def sweep_for(backend, quick, auto=None, op="ag_gemm", reduce=""):
    """(split, comm_programs) candidates per backend, small on purpose (each is a compile),
    plus ``auto`` -- what the op picks by itself (the cost model) -- when it is not among them.
    cp = 32 is gone: on 2 x H200 it was slower than 16 on every shape (run 2), since the comm
    programs' SMs are taken from the GEMM. GEMM+RS (an op reduce-scattering its output) sweeps
    finer splits: its last band's reduction is an exposed tail (split 1 was 1.4x slower than
    split 4, run 3)."""
    rs = REGISTRY[op].gemm.template == "reduce_scatter"
    if backend == "ce" and rs and reduce != "epilogue" and not quick:
        # the sum after the kernel: 1.2-1.4x slower than the epilogue variant on every shape of
        # runs 4-5 (0.93-1.13 vs 0.70 ms at 8192x4096x14336); one point keeps it on the chart
        cands = [(2, 0)]
    elif backend == "ce":
        cands = [(1, 0), (2, 0)] if quick else [(1, 0), (2, 0), (4, 0)]
    elif backend == "nvshmem":
        cands = [(2, 8)] if quick else [(1, 8), (2, 8), (4, 8), (4, 16)]
    elif rs and not quick:
        # runs 4-5: 16/16 never the best (within 2% of 16/8 at M = 8192); 4/8 the best only at
        # M = 1024, by 0.5% over 2/16
        cands = [(2, 16), (4, 16), (8, 8), (8, 16), (16, 8)]
    else:
        cands = [(2, 16)] if quick else [(1, 8), (2, 8), (4, 8), (2, 16), (4, 16)]
    if auto is not None and tuple(auto) not in cands:
        cands.append(tuple(auto))
    return cands


def error_text(e: Exception) -> str:
    """The error's type and the first line of its message (at most 200 characters)."""
    return f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def checked_time(comm, timer, run, correct):
    """``(device ms, host ms)`` of ``run()``, or None when ``correct(result)`` fails on any
    rank (then it is not timed). Exceptions (a CommTimeout, a launch error) propagate."""
    import torch
    import torch.distributed as dist

    res = run()
    torch.cuda.synchronize()
    comm.check()
    ok = torch.tensor([int(correct(res))], device=comm.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    if not int(ok):
        return None
    t = timer(run)
    host = timer.last_host_ms
    comm.check()
    return t, host


def time_default(r, comm, timer, run, correct, mismatch, describe):
    """``fused default``: the op called as a user would, with no backend, split, comm-program
    count or config (the op's own choice, ``describe()`` says which), checked like the sweep."""
    try:
        timed = checked_time(comm, timer, run, correct)
    except Exception as e:  # noqa: BLE001
        r.setdefault("errors", {})["fused default"] = error_text(e)
        return
    if timed is None:
        r.setdefault("check_failed", []).append("default")
        r.setdefault("errors", {})["fused default"] = mismatch
        return
    r["fused default"], r["fused default host"] = timed
    r["fused default is"] = describe()


def sweep_fused(r, comm, timer, backends, args, log, run, correct, mismatch, auto=None):
    """Time ``run(backend=, split=, comm_programs=)`` over the sweep of each backend; every
    candidate is checked with ``correct(result)`` on every rank before it is timed.
    ``auto(backend, reduce)``: the (split, comm_programs) the op would pick itself; its time
    is kept as ``fused[<backend>] auto`` (how good the default is)."""
    op = r.get("base_op", r["op"])  # an FP8 row ("gemm_rs_fp8[row]") sweeps as its bf16 op
    for backend in backends:
        # "ce+epilogue": the ce backend with reduce="epilogue" (an op with that variant only)
        be, _, red = backend.partition("+")
        if red and backend not in REGISTRY[op].variants:
            continue
        best = None
        pick = auto(be, red) if auto is not None else None
        for split, cp in sweep_for(be, args.quick, pick, op, red):
            label = f"{backend} split={split} cp={cp}"
            kw = dict(backend=be, split=split, comm_programs=cp)
            if red:
                kw["reduce"] = red
            try:
                timed = checked_time(comm, timer, lambda: run(**kw), correct)
            except Exception as e:  # noqa: BLE001
                r.setdefault("errors", {})[label] = error_text(e)
                continue
            if timed is None:
                r.setdefault("check_failed", []).append(label)
                log(f"  {label}: {mismatch}; not timed")
                continue
            t, host = timed
            r.setdefault("sweep", {})[label] = t
            r.setdefault("sweep host", {})[label] = host
            if pick is not None and (split, cp) == tuple(pick):
                r[f"fused[{backend}] auto"] = t
                r[f"fused[{backend}] auto pick"] = {"split": split, "comm_programs": cp}
            if best is None or t < best[0]:
                best = (t, split, cp, host)
        r[f"fused[{backend}]"] = best[0] if best else None
        if best:
            r[f"fused[{backend}] best"] = {"split": best[1], "comm_programs": best[2]}
            r[f"fused[{backend}] host"] = best[3]
