"""The MoE layer in the benchmark: ``python -m syncopate.bench --ops moe``.

One row per shape and routing; every column timed by the same :class:`~.timer.Timer`:

* ``dispatch fused`` / ``dispatch serial`` -- :func:`syncopate.ops.moe_dispatch_gemm`, fused
  and its unfused path (an all-gather of the send blocks, then the grouped GEMM: ``W`` times
  the all-to-all's bytes -- the collectives layer's reference, not a tuned baseline);
* ``combine fused`` / ``combine serial`` -- :func:`syncopate.ops.moe_gemm_combine`, fused and
  unfused (the grouped GEMM, an all-to-all, the weighted sum);
* ``layer fused`` / ``layer serial`` -- dispatch, SiLU, combine;
* ``gemm`` -- the two grouped GEMMs alone on this rank's received groups (compute alone).

Shapes: Mixtral-like (8 experts, top 2, hidden 4096, expert width 14336) and DeepSeek-like
(64 experts, top 6, hidden 7168, expert width 2048), 4096 tokens per rank, capacity the
expected load times 1.25 rounded up to the GEMM's 128 rows, uniform and hot-expert routing
(drops counted, not raised). ``--check`` (the only mode in one-GPU loopback, where the
benchmark refuses to time) runs a small shape's fused layer once against the unfused one:
the same grouped GEMMs on the same rows, so the outputs must be bitwise equal.
"""

from __future__ import annotations

from ..kernels.grouped_gemm_launch import grouped_gemm
from ..ops import moe_dispatch_gemm, moe_gemm_combine
from .attention import time_columns

#: (name, experts per rank, top-k, hidden, expert width, tokens per rank)
SHAPES = (("mixtral", 4, 2, 4096, 14336, 4096), ("deepseek", 32, 6, 7168, 2048, 4096))
#: ``--quick`` and loopback checks: small enough for W kernels sharing one GPU
QUICK_SHAPES = (("small", 2, 2, 128, 256, 256),)
ROUTINGS = ("uniform", "hot")


def capacity(tokens: int, k: int, experts: int, block: int = 128, factor: float = 1.25) -> int:
    """Rows per (source, expert): the expected load times ``factor``, rounded up to ``block``
    (the grouped GEMM's BLOCK_M, which the fused kernels need)."""
    need = int(tokens * k * factor / experts + block - 1)
    return max(block, need // block * block)


def _inputs(comm, E, k, H, F, T, routing, dtype, seed=0):
    """This rank's tokens, routing and weights (the same generator on every rank: the weights
    agree, each rank takes its experts and its own tokens)."""
    import torch
    W, r, dev = comm.world_size, comm.rank, comm.device
    El = E // W
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(E, H, F, generator=g) / H ** 0.5).to(dtype)
    w2 = (torch.randn(E, F, H, generator=g) / F ** 0.5).to(dtype)
    for s in range(W):
        x = torch.randn(T, H, generator=g).to(dtype)
        scores = torch.rand(T, E, generator=g)
        if routing == "hot":
            scores[:, 0] += 1.0   # expert 0 is every token's first choice: it overflows
        wts, ids = scores.topk(k, dim=1)
        if s == r:
            mine = (x, ids, wts / wts.sum(1, keepdim=True))
    mine_w = slice(r * El, (r + 1) * El)
    x, ids, wts = mine
    return (x.to(dev), ids.to(dev), wts.to(dev), w1[mine_w].contiguous().to(dev),
            w2[mine_w].contiguous().to(dev))


def _layer(comm, x, ids, wts, w1, w2, C, fused):
    import torch

    d = moe_dispatch_gemm(x, ids, wts, w1, comm, capacity=C, on_overflow="drop", fused=fused)
    h = torch.nn.functional.silu(d.out.float()).to(x.dtype)
    return moe_gemm_combine(h, w2, d, comm, fused=fused), d, h


def check_row(comm, name, El, k, H, F, T, routing, dtype, log) -> dict:
    """The fused layer once against the unfused one (correctness only: loopback, --check)."""
    import torch
    E = El * comm.world_size
    C = capacity(T, k, E)
    x, ids, wts, w1, w2 = _inputs(comm, E, k, H, F, T, routing, dtype)
    ref, dref, _ = _layer(comm, x, ids, wts, w1, w2, C, fused=False)
    got, dgot, _ = _layer(comm, x, ids, wts, w1, w2, C, fused=True)
    torch.cuda.current_stream().synchronize()
    comm.check()
    row = dict(op="moe", shape=name, routing=routing, E=E, k=k, H=H, F=F, T=T, C=C,
               W=comm.world_size, dropped=int(dgot.dropped.sum()),
               counts_equal=bool(torch.equal(dgot.counts, dref.counts)),
               max_diff=float((got.float() - ref.float()).abs().max()),
               bitwise=bool(torch.equal(got, ref)))
    log(f"  check: fused vs unfused layer max diff {row['max_diff']:.3g} (bitwise "
        f"{row['bitwise']}), {row['dropped']} choices dropped on rank {comm.rank}")
    return row


def summary(r: dict) -> str:
    """One line of a ``--check`` row."""
    return (f"moe {r['shape']} {r['routing']} W={r['W']}: fused vs unfused layer max diff "
            f"{r['max_diff']:.3g} (bitwise {r['bitwise']}), rank 0 dropped "
            f"{r['dropped']} choices")


def check_problems(rows) -> list[str]:
    """What a ``--check`` run must fail on: the fused and the unfused layer run the same
    grouped GEMMs on the same rows and sum alike, so any difference is a bug."""
    return [f"moe {r['shape']} {r['routing']}: fused differs from unfused (max diff "
            f"{r['max_diff']:.3g}, counts equal {r['counts_equal']})"
            for r in rows if not (r["bitwise"] and r["counts_equal"])]


def bench_row(comm, timer, name, El, k, H, F, T, routing, dtype, log) -> dict:
    """Every column of one shape and routing (see the module docstring)."""
    W = comm.world_size
    E = El * W
    C = capacity(T, k, E)
    x, ids, wts, w1, w2 = _inputs(comm, E, k, H, F, T, routing, dtype)
    row = dict(op="moe", shape=name, routing=routing, E=E, k=k, H=H, F=F, T=T, C=C, W=W,
               errors={})
    _, d, h = _layer(comm, x, ids, wts, w1, w2, C, fused=False)
    import torch
    cnt = d.counts.reshape(-1)
    # the first GEMM's operand: received tokens in the capacity layout (what they hold does
    # not change the time; the counts decide which tiles work)
    a = torch.randn((W * El, C, H), device=x.device).to(x.dtype)
    cols = {}
    for fused in (True, False):
        tag = "fused" if fused else "serial"
        cols[f"dispatch {tag}"] = (lambda f=fused: moe_dispatch_gemm(
            x, ids, wts, w1, comm, capacity=C, on_overflow="drop", fused=f))
        cols[f"combine {tag}"] = (lambda f=fused: moe_gemm_combine(h, w2, d, comm, fused=f))
        cols[f"layer {tag}"] = (lambda f=fused: _layer(comm, x, ids, wts, w1, w2, C, f))
    cols["gemm"] = lambda: (grouped_gemm(a, w1, cnt, segments=W),
                            grouped_gemm(h, w2, cnt, segments=W))
    time_columns(row, cols, timer)
    for part in ("dispatch", "combine", "layer"):
        if f"{part} fused" in row and f"{part} serial" in row:
            row[f"{part} serial/fused"] = row[f"{part} serial"] / row[f"{part} fused"]
    log("  " + ", ".join(f"{c} {row[c]:.3f} ms" for c in cols if c in row))
    return row


def rows(args) -> list[tuple]:
    """``(name, El, k, H, F, T, routing)`` of the run."""
    shapes = QUICK_SHAPES if args.quick else SHAPES
    return [s + (r,) for s in shapes for r in ROUTINGS]


def format_rows(results) -> str:
    head = ["shape", "routing", "C", "dispatch fused", "dispatch serial", "combine fused",
            "combine serial", "layer fused", "layer serial", "gemm", "layer serial/fused"]
    lines = [" | ".join(head)]
    for r in results:
        cells = [r["shape"], r["routing"], str(r["C"])]
        for c in head[3:]:
            cells.append(f"{r[c]:.3f}" if c in r else "-")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def run(comm, args, log, *, check_only: bool, timer=None) -> list[dict]:
    """The MoE rows: checks (loopback / --check) or the timed columns."""
    import torch
    dtype = getattr(torch, args.dtype)
    out = []
    for name, El, k, H, F, T, routing in rows(args):
        log(f"moe {name} E={El * comm.world_size} k={k} H={H} F={F} T={T} {routing} ...")
        if check_only:
            out.append(check_row(comm, name, El, k, H, F, T, routing, dtype, log))
        else:
            out.append(bench_row(comm, timer, name, El, k, H, F, T, routing, dtype, log))
        comm.clear_cache()
    return out


__all__ = ["QUICK_SHAPES", "ROUTINGS", "SHAPES", "bench_row", "capacity", "check_problems",
           "check_row", "format_rows", "rows", "run", "summary"]
