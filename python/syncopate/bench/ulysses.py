"""Ulysses attention in the benchmark: ``python -m syncopate.bench --ops ulysses``.

Columns, side by side in one run, every one timed by the same :class:`~.timer.Timer`:

* ``fused`` -- :func:`syncopate.ops.ulysses_attention` (both all-to-alls inside our attention
  kernel; backend ``sm``, the only one it fuses with);
* ``serial`` -- :func:`~syncopate.ops.ulysses_attention_reference`: NCCL ``all_to_all_single``
  of Q, K and V, the same local kernel, ``all_to_all_single`` back (the unfused path);
* ``deepspeed`` -- what Ulysses users run (DeepSpeed-Ulysses): the same NCCL all-to-alls around
  torch's SDPA with the flash backend (:func:`ulysses_by_head_groups` with one group);
* ``overlap`` -- the same, pipelined by KV head group: the all-to-all of group ``g + 1``
  (``async_op``: NCCL's stream is the side stream) runs while SDPA attends to group ``g``, and
  group ``g``'s output goes back while ``g + 1`` computes.  A group is one KV head with its
  query heads, so it needs two or more KV heads per rank: at ``Hkv / W == 1`` (8 KV heads on 8
  ranks) it is reported as not measured (it would be ``deepspeed``);
* ``attn`` -- our local kernel on the head-sharded whole sequence (the compute of fused and
  serial), ``sdpa`` -- SDPA flash on the same (the compute of deepspeed), ``comm`` -- the four
  NCCL all-to-alls alone, ``ideal`` = max(attn, comm) as for ring attention.

Shapes (issue 11): total sequence 32k, 64k, 128k tokens, 32 query heads, 8 KV heads, head dim
128, bf16, causal and not.  ``--check`` (the only mode in one-GPU loopback: the benchmark
refuses to time there) runs each shape once: fused against serial bitwise, and fused, serial,
deepspeed and overlap against fp32 SDPA on the gathered inputs (relative error, Frobenius
norm, at most :data:`CHECK_TOL`).  Its shapes (``quick_shape``) are small enough that all of
every rank's programs are resident at once in loopback.
"""

from __future__ import annotations

from ..errors import LaunchError
from ..kernels.attention import attention
from ..ops import ulysses_attention, ulysses_attention_reference
from ..ops.ulysses import check_plan
from ..runtime import collectives as dist
from ..schedule.attention_cost import attention_flops
from .attention import format_table, inputs, rows as attention_rows, run_rows, time_columns
from .fused import rel_err

#: relative error (Frobenius) of bf16 attention against fp32 SDPA on the same bf16 inputs that
#: a check accepts: tests/gpu's Ulysses test measures ~3e-3 for our kernel
CHECK_TOL = 1e-2


def quick_shape(world_size: int) -> tuple[int, int, int, int]:
    """``(S, Hq, Hkv, D)`` for ``--quick`` and loopback checks at ``world_size`` ranks: two KV
    heads per rank (so the ``overlap`` column has two head groups to pipeline) with two query
    heads each (GQA), and 64 query tiles of 128 rows in all (``S = 2048 / W`` tokens), so that
    W ranks' grids plus their comm programs fit one GPU's SMs at once (docs/loopback.md, the
    co-residency rule): 1024 tokens, 8/4 heads at W = 2."""
    W = max(1, int(world_size))
    S = max(W, (2048 // W) // W * W)
    return S, 4 * W, 2 * W, 128


def rows(args, world_size: int) -> list[tuple]:
    """``(S, Hq, Hkv, D, causal)`` of the run: ring attention's, its own ``--quick`` shape."""
    return attention_rows(args, (quick_shape(world_size),))


def sdpa(q, k, v, causal):
    """torch's flash attention with grouped-query heads on a GPU (what DeepSpeed-Ulysses users
    call: flash attention over the head-sharded sequence), K and V expanded to the query heads.

    The flash kernel is called as its aten op rather than under ``sdpa_kernel([FLASH])``: that
    context sets process-wide backend flags, so in loopback (ranks are threads of one process)
    one rank's flash-only window made another rank's fp32 reference SDPA fail with "No
    available kernel" (seen on an H200)."""
    import torch
    import torch.nn.functional as F
    g = q.shape[1] // k.shape[1]
    k, v = (k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)) if g > 1 else (k, v)
    if not q.is_cuda:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return torch.ops.aten._scaled_dot_product_flash_attention(q, k, v, 0.0, causal)[0]


def reference_rows(q, k, v, causal, rows: slice):
    """fp32 SDPA over the whole sequence (``q``, ``k``, ``v`` ``[B, H, S, D]``, gathered), for
    the query ``rows`` only: keys up to the block's end and a lower-right causal mask when
    ``causal`` (no ``S x S`` mask: at 128k tokens it would not fit)."""
    import torch.nn.functional as F
    g = q.shape[1] // k.shape[1]
    end = rows.stop if causal else k.shape[2]
    kk = k[:, :, :end].float().repeat_interleave(g, 1)
    vv = v[:, :, :end].float().repeat_interleave(g, 1)
    qq = q[:, :, rows].float()
    mask = None
    if causal:
        from torch.nn.attention.bias import causal_lower_right
        mask = causal_lower_right(qq.shape[2], end)
    return F.scaled_dot_product_attention(qq, kk, vv, attn_mask=mask)


def _wait(work) -> None:
    if work is not None:   # None: loopback's collectives are stream-ordered already
        work.wait()


def _to_heads(x, comm, groups: int, g: int):
    """Head group ``g`` (of ``groups``) of every rank's heads: ``x`` ``[B, H, S/W, D]`` (this
    rank's sequence block) -> after the returned work, ``[B, H/W/groups, S, D]``."""
    import torch

    W = comm.world_size
    B, H, Sl, D = x.shape
    send = x.reshape(B, W, groups, H // W // groups, Sl, D)[:, :, g].transpose(0, 1).contiguous()
    recv = torch.empty_like(send)                              # [W(src), B, h, Sl, D]
    work = dist.all_to_all_single(recv, send, group=comm.group, async_op=True)
    return recv, work


def _heads_view(recv):
    W, B, h, Sl, D = recv.shape
    return recv.permute(1, 2, 0, 3, 4).reshape(B, h, W * Sl, D)


def _to_sequence(o, comm):
    """``o`` ``[B, h, S, D]`` (a head group, the whole sequence) -> rows of this rank's block,
    ``[W(src), B, h, S/W, D]`` after the returned work."""
    import torch

    W = comm.world_size
    B, h, S, D = o.shape
    send = o.reshape(B, h, W, S // W, D).permute(2, 0, 1, 3, 4).contiguous()
    recv = torch.empty_like(send)
    work = dist.all_to_all_single(recv, send, group=comm.group, async_op=True)
    return recv, work


def ulysses_by_head_groups(q, k, v, comm, causal: bool, groups: int = 1, attend=sdpa):
    """DeepSpeed-Ulysses with ``attend`` (SDPA flash) as the local attention, in ``groups``
    pipelined head groups of one or more KV heads each: the all-to-all of group ``g + 1`` is in
    flight (NCCL's stream) while group ``g`` computes, and group ``g``'s output goes back while
    ``g + 1`` computes.  ``groups = 1``: the plain all-to-all, attention, all-to-all."""
    import torch
    W = comm.world_size
    B, Hq, Sl, D = q.shape
    Hkv = k.shape[1]
    if (Hkv // W) % groups or Hkv % W:
        raise ValueError(f"{groups} head groups need a multiple of {groups} KV heads per rank "
                         f"({Hkv} KV heads over {W} ranks)")

    def send(g):
        return [_to_heads(t, comm, groups, g) for t in (q, k, v)]
    pending = send(0)
    back = []
    for g in range(groups):
        for _, work in pending:
            _wait(work)
        qg, kg, vg = (_heads_view(recv) for recv, _ in pending)
        if g + 1 < groups:
            pending = send(g + 1)
        back.append(_to_sequence(attend(qg, kg, vg, causal), comm))
    out = torch.empty_like(q)
    parts = out.view(B, W, groups, Hq // W // groups, Sl, D)
    for g, (recv, work) in enumerate(back):
        _wait(work)
        parts[:, :, g] = recv.transpose(0, 1)
    return out


def overlap_groups(Hkv: int, world_size: int) -> int:
    """Head groups of the ``overlap`` column: one per KV head of a rank."""
    return Hkv // world_size


def check_row(comm, S, Hq, Hkv, D, causal, dtype, log) -> dict:
    """One shape once, correctness only (loopback, ``--check``): fused vs serial bitwise, and
    every path against fp32 SDPA over the whole sequence, this rank's rows (every rank draws
    the whole sequence from one seed, so the gathered inputs are at hand without a gather)."""
    import torch

    W, r = comm.world_size, comm.rank
    Sl = S // W
    (fq, fk, fv), (q, k, v) = inputs(comm, S, Hq, Hkv, D, dtype)
    want = reference_rows(fq, fk, fv, causal, slice(r * Sl, (r + 1) * Sl))
    del fq, fk, fv
    outs = {"fused": ulysses_attention(q, k, v, comm, causal=causal, backend="sm", fused=True),
            "serial": ulysses_attention_reference(q, k, v, comm, causal=causal)}
    row = dict(op="ulysses", S=S, Hq=Hq, Hkv=Hkv, D=D, causal=causal, W=W, errors={})
    for name, groups in (("deepspeed", 1), ("overlap", overlap_groups(Hkv, W))):
        if name == "overlap" and groups < 2:
            row["errors"][name] = _one_group_note(Hkv, W)
            continue
        try:
            outs[name] = ulysses_by_head_groups(q, k, v, comm, causal, groups)
        except Exception as e:  # a baseline that fails is reported, the fused check stays
            row["errors"][name] = f"{type(e).__name__}: {str(e)[:300]}"
    # this rank's stream only: in loopback a device-wide sync could wait on a peer's spin
    torch.cuda.current_stream(comm.device).synchronize()
    comm.check()
    row["bitwise_fused_vs_serial"] = bool(torch.equal(outs["fused"], outs["serial"]))
    row["max_diff_fused_vs_serial"] = float((outs["fused"].float()
                                             - outs["serial"].float()).abs().max())
    for name, o in outs.items():
        row[f"finite_{name}"] = bool(torch.isfinite(o).all())
        row[f"rel_err_{name}"] = rel_err(o, want)
    log("  check: " + summary(row))
    return row


def summary(row: dict) -> str:
    """One line of a ``--check`` row: fused vs serial, each path's error vs fp32 SDPA."""
    paths = [k[8:] for k in row if k.startswith("rel_err_")]
    return (f"ulysses S={row['S']} Hq={row['Hq']} Hkv={row['Hkv']} causal={row['causal']} "
            f"W={row['W']}: fused vs serial "
            + ("bitwise equal" if row["bitwise_fused_vs_serial"] else
               f"DIFFER (max {row['max_diff_fused_vs_serial']:.3g})")
            + f"; relative error vs fp32 SDPA (limit {CHECK_TOL:g}): "
            + ", ".join(f"{n} {row[f'rel_err_{n}']:.2e}" for n in paths)
            + "".join(f"; {n}: {e}" for n, e in row["errors"].items()))


def _one_group_note(Hkv: int, W: int) -> str:
    return (f"not measured: {Hkv} KV heads over {W} ranks leave one KV head per rank, one head "
            f"group: nothing to pipeline (it is the deepspeed column)")


def check_problems(rows) -> list[str]:
    """What makes a ``--check`` run fail: NaN/Inf, fused differing from serial, an error above
    :data:`CHECK_TOL`, a baseline that raised."""
    out = []
    for r in rows:
        tag = f"ulysses S={r['S']} causal={r['causal']}"
        if not r["bitwise_fused_vs_serial"]:
            out.append(f"{tag}: fused differs from serial (max {r['max_diff_fused_vs_serial']:.3g})"
                       f"; they run the same tiles and must be bitwise equal")
        for key, val in r.items():
            if key.startswith("finite_") and not val:
                out.append(f"{tag}: {key[7:]} has NaN/Inf")
            if key.startswith("rel_err_") and not val <= CHECK_TOL:
                out.append(f"{tag}: {key[8:]} relative error {val:.3g} vs fp32 SDPA is above "
                           f"{CHECK_TOL:g}")
        for name, err in r.get("errors", {}).items():
            if not err.startswith("not measured"):
                out.append(f"{tag}: {name} failed: {err}")
    return out


def bench_row(comm, timer, S, Hq, Hkv, D, causal, dtype, log) -> dict:
    """Every column of one shape (see the module docstring)."""
    import torch

    W = comm.world_size
    _, (q, k, v) = inputs(comm, S, Hq, Hkv, D, dtype)
    row = dict(op="ulysses", S=S, Hq=Hq, Hkv=Hkv, D=D, causal=causal, W=W, errors={})
    o = ulysses_attention(q, k, v, comm, causal=causal, backend="sm", fused=True)
    o_ref = ulysses_attention_reference(q, k, v, comm, causal=causal)
    torch.cuda.synchronize(comm.device)
    row["max_diff_vs_serial"] = float((o.float() - o_ref.float()).abs().max())
    # the head-sharded whole sequence of this rank (for attn / sdpa alone) and the
    # all-to-alls' send and receive buffers (for comm alone)
    heads = []
    for t in (q, k, v):
        recv, work = _to_heads(t, comm, 1, 0)
        _wait(work)
        heads.append(_heads_view(recv).contiguous())
    hq, hk, hv = heads
    bufs = [(torch.empty((W,) + (t.shape[0], t.shape[1] // W) + tuple(t.shape[2:]),
                         device=t.device, dtype=t.dtype)) for t in (q, k, v, q)]
    recvs = [torch.empty_like(b) for b in bufs]

    def comm_only():
        for s, rcv in zip(bufs, recvs):
            dist.all_to_all_single(rcv, s, group=comm.group)
    groups = overlap_groups(Hkv, W)
    cols = {"fused": lambda: ulysses_attention(q, k, v, comm, causal=causal, backend="sm",
                                               fused=True),
            "serial": lambda: ulysses_attention_reference(q, k, v, comm, causal=causal),
            "deepspeed": lambda: ulysses_by_head_groups(q, k, v, comm, causal, 1),
            "attn": lambda: attention(hq, hk, hv, causal=causal),
            "sdpa": lambda: sdpa(hq, hk, hv, causal),
            "comm": comm_only}
    if groups >= 2:
        cols["overlap"] = lambda: ulysses_by_head_groups(q, k, v, comm, causal, groups)
    else:
        row["errors"]["overlap"] = _one_group_note(Hkv, W)
    time_columns(row, cols, timer)
    derive(row)
    log("  " + ", ".join(f"{c} {row[c]:.3f} ms" for c in COLUMNS if c in row))
    return row


#: the timed columns, in the table's order
COLUMNS = ("fused", "serial", "deepspeed", "overlap", "attn", "sdpa", "comm", "ideal")


def derive(row: dict) -> dict:
    """``ideal`` = max(attn, comm), fused TF/s, and every column's ratio to fused."""
    if "attn" in row and "comm" in row:
        row["ideal"] = max(row["attn"], row["comm"])
    if "fused" in row:
        W = row["W"]
        row["fused TF/s"] = attention_flops(1, row["Hq"] // W, row["S"], row["S"], row["D"],
                                            row["causal"]) / (row["fused"] * 1e-3) / 1e12
        for col in ("serial", "deepspeed", "overlap", "ideal"):
            if col in row:
                row[f"{col}/fused"] = row[col] / row["fused"]
    return row


def format_rows(results) -> str:
    """The table, then every row's errors (a column not measured says why)."""
    return "\n".join([format_table(results, COLUMNS, ("serial/fused", "deepspeed/fused"))] + [
        f"  [ulysses S={r['S']} causal={r['causal']}] {name}: {err}"
        for r in results for name, err in r.get("errors", {}).items()])


def run(comm, args, log, *, check_only: bool, timer=None) -> list[dict]:
    """The Ulysses rows: checks (loopback / --check) or the timed columns."""
    def skip(S, Hq, Hkv, D):
        try:
            check_plan(1, Hq, Hkv, S, D, comm.world_size)
        except LaunchError as e:
            return str(e)
    return run_rows(comm, args, log, "ulysses", rows(args, comm.world_size), skip, check_row,
                    bench_row, check_only, timer)


__all__ = ["CHECK_TOL", "COLUMNS", "bench_row", "check_problems", "check_row", "derive",
           "format_rows", "overlap_groups", "quick_shape", "reference_rows", "rows", "run", "sdpa",
           "summary", "ulysses_by_head_groups"]
