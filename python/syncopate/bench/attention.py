"""Ring attention in the benchmark: ``python -m syncopate.bench --ops ring_attn``.

Columns, side by side in one run, every one timed by the same :class:`~.timer.Timer`:

* ``fused`` -- :func:`syncopate.ops.ring_attention` (K/V gathered inside the KV loop);
* ``serial`` -- NCCL all-gather of K and V, then the same local kernel (the unfused path);
* ``stream`` -- the stream-level overlap ring-attention users run (ring-flash-attention): the
  next rank's K/V block travels by P2P send/recv while the local kernel attends to the current
  one, partial results merged with their log-sum-exp.  Non-causal only: the causal zigzag
  variant needs per-block masks of the two segments, which our local kernels do not take
  (reported as not measured, never as a number);
* ``attn`` -- the local kernel on already gathered K/V (compute alone); ``comm`` -- the NCCL
  all-gather of K and V alone; ``ideal`` = max(attn, comm).

Shapes (issue 11): total sequence 32k, 64k, 128k tokens, 32 query heads, 8 KV heads, head dim
128, bf16, causal and not.  ``--check`` (also the only mode in one-GPU loopback, where timings
would be meaningless: the benchmark refuses to time there) runs each shape's fused op once
against the unfused path and prints the difference.
"""

from __future__ import annotations

from ..kernels.attention import attention
from ..kernels.attention_zigzag import attention_zigzag, zigzag_shard
from ..ops import ring_attention, ring_attention_reference
from ..runtime import collectives as dist
from ..schedule.attention_cost import attention_flops

#: (total tokens, Hq, Hkv, D)
SHAPES = ((32768, 32, 8, 128), (65536, 32, 8, 128), (131072, 32, 8, 128))
#: small shapes for ``--quick`` and loopback checks
QUICK_SHAPES = ((1024, 4, 1, 128),)  # W x (tiles + comm programs) co-resident in loopback


def inputs(comm, S, Hq, Hkv, D, dtype, causal=False, seed=0):
    """The whole sequence's q, k, v (the same on every rank: one generator, one seed) and this
    rank's shard of each: its sequence block, or with ``causal`` its zigzag pair of segments
    (causal ring attention's balanced layout). Ring attention's rows and Ulysses'."""
    import torch

    W, r = comm.world_size, comm.rank
    g = torch.Generator(device=comm.device)
    g.manual_seed(seed)
    full = [torch.randn(1, h, S, D, generator=g, device=comm.device, dtype=torch.float32)
            .to(dtype) for h in (Hq, Hkv, Hkv)]
    Sl = S // W
    return full, [(zigzag_shard(x, W, r) if causal else x[:, :, r * Sl:(r + 1) * Sl])
                  .contiguous() for x in full]


def stream_ring_attention(q, k, v, comm):
    """Ring-flash-attention style stream-level overlap (non-causal): at step ``s`` rank ``r``
    attends to the block it holds while it sends that block to ``r + 1`` and receives the next
    from ``r - 1`` (``batch_isend_irecv``); partial outputs merge by their log-sum-exp.  Uses
    torch.distributed's P2P directly: the benchmark times under torchrun only (it refuses
    loopback), and the peers are ranks of the communicator's group, mapped to global ranks."""
    import torch
    import torch.distributed as dist

    W, r = comm.world_size, comm.rank

    def peer(i):
        return dist.get_global_rank(comm.group, i % W) if comm.group is not None else i % W
    cur_k, cur_v = k, v
    o_acc = lse_acc = None
    for s in range(W):
        reqs = []
        if s < W - 1:
            nxt_k, nxt_v = torch.empty_like(cur_k), torch.empty_like(cur_v)
            ops = [dist.P2POp(dist.isend, cur_k, peer(r + 1), group=comm.group),
                   dist.P2POp(dist.isend, cur_v, peer(r + 1), group=comm.group),
                   dist.P2POp(dist.irecv, nxt_k, peer(r - 1), group=comm.group),
                   dist.P2POp(dist.irecv, nxt_v, peer(r - 1), group=comm.group)]
            reqs = dist.batch_isend_irecv(ops)
        o, lse = attention(q, cur_k, cur_v)
        if o_acc is None:
            o_acc, lse_acc = o.float(), lse
        else:
            new = torch.logaddexp(lse_acc, lse)
            o_acc = (o_acc * torch.exp(lse_acc - new)[..., None]
                     + o.float() * torch.exp(lse - new)[..., None])
            lse_acc = new
        for req in reqs:
            req.wait()
        if s < W - 1:
            cur_k, cur_v = nxt_k, nxt_v
    return o_acc.to(q.dtype), lse_acc


def check_row(comm, S, Hq, Hkv, D, causal, dtype, log) -> dict:
    """The fused op once against the unfused path (correctness only: loopback, --check)."""
    import torch

    _, (q, k, v) = inputs(comm, S, Hq, Hkv, D, dtype, causal)
    o_ref, lse_ref = ring_attention_reference(q, k, v, comm, causal=causal)
    o, lse = ring_attention(q, k, v, comm, causal=causal, fused=True)
    torch.cuda.synchronize(comm.device)
    comm.check()
    row = dict(op="ring_attn", S=S, Hq=Hq, Hkv=Hkv, D=D, causal=causal,
               finite=bool(torch.isfinite(o).all() and torch.isfinite(lse).all()),
               max_diff_o=float((o.float() - o_ref.float()).abs().max()),
               max_diff_lse=float((lse - lse_ref).abs().max()))
    log(f"  check: fused vs unfused max |o| diff {row['max_diff_o']:.3g}, "
        f"|lse| diff {row['max_diff_lse']:.3g}")
    return row


#: ``--check`` bounds of fused vs unfused ring attention (the same local kernel; blocks may be
#: merged in another order): those of the GPU test suite's ring-attention case.
CHECK_MAX_DIFF_O = 1.6e-2
CHECK_MAX_DIFF_LSE = 1e-3


def summary(r: dict) -> str:
    """One line of a ``--check`` row."""
    return (f"ring_attn S={r['S']} causal={r['causal']}: fused vs unfused max |o| diff "
            f"{r['max_diff_o']:.3g}, |lse| diff {r['max_diff_lse']:.3g}")


def check_problems(rows) -> list[str]:
    """What makes a ring-attention ``--check`` row fail: NaN/Inf left in the output, or fused
    and unfused further apart than :data:`CHECK_MAX_DIFF_O` / :data:`CHECK_MAX_DIFF_LSE`."""
    out = []
    for r in rows:
        tag = f"ring_attn S={r['S']} causal={r['causal']}"
        if not r.get("finite", True):
            out.append(f"{tag}: NaN/Inf in the fused output (tiles left unwritten)")
        if not r["max_diff_o"] <= CHECK_MAX_DIFF_O:
            out.append(f"{tag}: fused vs unfused max |o| diff {r['max_diff_o']:.3g} is above "
                       f"{CHECK_MAX_DIFF_O:g}")
        if not r["max_diff_lse"] <= CHECK_MAX_DIFF_LSE:
            out.append(f"{tag}: fused vs unfused max |lse| diff {r['max_diff_lse']:.3g} is "
                       f"above {CHECK_MAX_DIFF_LSE:g}")
    return out


def time_columns(row: dict, cols: dict, timer) -> None:
    """``row[name] = timer(fn)`` for every column ``name: fn`` of a table's row; a column that
    fails is reported in ``row["errors"]`` (and absent), the row stays."""
    for name, fn in cols.items():
        try:
            row[name] = timer(fn)
        except Exception as e:  # a column that fails is reported, the row stays
            row["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"


def bench_row(comm, timer, S, Hq, Hkv, D, causal, dtype, log) -> dict:
    """Every column of one shape (see the module docstring)."""
    import torch

    W, r = comm.world_size, comm.rank
    _, (q, k, v) = inputs(comm, S, Hq, Hkv, D, dtype, causal)
    Sl = S // W
    row = dict(op="ring_attn", S=S, Hq=Hq, Hkv=Hkv, D=D, causal=causal, W=W, errors={})
    o, _ = ring_attention(q, k, v, comm, causal=causal, fused=True)
    o_ref, _ = ring_attention_reference(q, k, v, comm, causal=causal)
    torch.cuda.synchronize(comm.device)
    row["max_diff_vs_serial"] = float((o.float() - o_ref.float()).abs().max())
    gk = torch.empty((W,) + tuple(k.shape), device=k.device, dtype=k.dtype)
    gv = torch.empty_like(gk)

    def comm_only():
        dist.all_gather_into_tensor(gk, k, group=comm.group)
        dist.all_gather_into_tensor(gv, v, group=comm.group)
    comm_only()
    kf = gk.permute(1, 2, 0, 3, 4).reshape(1, Hkv, S, D).contiguous()
    vf = gv.permute(1, 2, 0, 3, 4).reshape(1, Hkv, S, D).contiguous()
    if causal:
        def attn_only():
            attention_zigzag(q, kf, vf, 2 * W, r * Sl)
    else:
        def attn_only():
            attention(q, kf, vf)
    cols = {"fused": lambda: ring_attention(q, k, v, comm, causal=causal, fused=True),
            "serial": lambda: ring_attention_reference(q, k, v, comm, causal=causal),
            "attn": attn_only, "comm": comm_only}
    if not causal:
        cols["stream"] = lambda: stream_ring_attention(q, k, v, comm)
    else:
        row["errors"]["stream"] = ("not measured: the causal zigzag ring needs per-segment "
                                   "block masks the local kernels do not take")
    time_columns(row, cols, timer)
    if "attn" in row and "comm" in row:
        row["ideal"] = max(row["attn"], row["comm"])
    if "fused" in row:
        row["fused TF/s"] = attention_flops(1, Hq, Sl, S, D, causal) / (row["fused"] * 1e-3) / 1e12
        for col in ("serial", "stream", "ideal"):
            if col in row:
                row[f"{col}/fused"] = row[col] / row["fused"]
    log("  " + ", ".join(f"{c} {row[c]:.3f} ms" for c in ("fused", "serial", "stream", "attn",
                                                           "comm", "ideal") if c in row))
    return row


def rows(args, quick=QUICK_SHAPES) -> list[tuple]:
    """``(S, Hq, Hkv, D, causal)`` of the run (``quick``: the ``--quick`` shapes)."""
    shapes = quick if args.quick else SHAPES
    return [(S, Hq, Hkv, D, causal) for S, Hq, Hkv, D in shapes for causal in (False, True)]


def format_table(results, columns, ratios) -> str:
    """An attention benchmark's rows as a table: ``S``, ``causal``, the timed ``columns`` (ms),
    the ``ratios`` and ``fused/ideal`` ("-" where a row lacks one)."""
    head = ["S", "causal", *columns, *ratios, "fused/ideal"]
    lines = [" | ".join(head)]
    for r in results:
        cells = [str(r["S"]), str(r["causal"])]
        cells += [f"{r[c]:.3f}" if c in r else "-" for c in columns]
        cells += [f"{r[c]:.2f}" if c in r else "-" for c in ratios]
        cells.append(f"{r['fused'] / r['ideal']:.2f}" if "fused" in r and "ideal" in r else "-")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def format_rows(results) -> str:
    return format_table(results, ("fused", "serial", "stream", "attn", "comm", "ideal"),
                        ("serial/fused",))


def run_rows(comm, args, log, name, rows, skip, check, bench, check_only, timer) -> list[dict]:
    """An attention benchmark's ``rows`` ``(S, Hq, Hkv, D, causal)``: each one that ``skip(S,
    Hq, Hkv, D)`` finds no reason to skip (logged) is checked (loopback / --check) or timed."""
    import torch
    dtype = getattr(torch, args.dtype)
    out = []
    for S, Hq, Hkv, D, causal in rows:
        why = skip(S, Hq, Hkv, D)
        if why:
            log(f"{name} S={S} Hq={Hq} Hkv={Hkv}: skipped at W={comm.world_size}: {why}")
            continue
        log(f"{name} S={S} Hq={Hq} Hkv={Hkv} D={D} causal={causal} W={comm.world_size} ...")
        if check_only:
            out.append(check(comm, S, Hq, Hkv, D, causal, dtype, log))
        else:
            out.append(bench(comm, timer, S, Hq, Hkv, D, causal, dtype, log))
        comm.clear_cache()
    return out


def run(comm, args, log, *, check_only: bool, timer=None) -> list[dict]:
    """The ring-attention rows: checks (loopback / --check) or the timed columns."""
    def skip(S, Hq, Hkv, D):
        return S % (2 * comm.world_size * 128) and "not a multiple of 2 x W x 128 tokens"
    return run_rows(comm, args, log, "ring_attn", rows(args), skip, check_row, bench_row,
                    check_only, timer)


__all__ = ["CHECK_MAX_DIFF_LSE", "CHECK_MAX_DIFF_O", "SHAPES", "bench_row", "check_problems",
           "check_row", "format_rows", "inputs", "rows", "run", "run_rows", "stream_ring_attention",
           "summary", "time_columns"]

