"""The end-to-end benchmark: ``python -m syncopate.bench --model block``.

What users run is a model, not an op: this times one Llama-style transformer block
(:class:`syncopate.nn.TransformerBlock`) at Llama-3-8B and Llama-3-70B shapes (tensor +
sequence parallel, ``layout="tp"``) and a long-context Llama-3-8B shape (context parallel,
``layout="cp"``), forward (inference, ``torch.no_grad``) and forward + backward (a training
step's share of the block: the input's and every weight's gradient), one process per GPU
under torchrun. Each (shape, direction) is a row; its columns, timed by the benchmark's
:class:`~.timer.Timer` (median device ms, max over ranks):

* ``fused`` -- the block as shipped (``fused=None``: each op chooses its own path);
* ``unfused`` -- the same module with ``fused=False``: NCCL collectives, cuBLAS GEMMs and
  SDPA's best backend, the same weights (checked first: the fused block's output is within
  :data:`TOLERANCE` of it, else ``fused`` is not timed and the row says why);
* ``torch async-TP`` -- the same block written with torch's DTensor tensor parallelism
  (:mod:`.dtensor_block`), ``torch.compile``d with torch's async-TP pass
  (``torch._inductor.config._micro_pipeline_tp``, symmetric memory enabled for the group);
* ``DTensor+pass`` -- that DTensor block compiled with syncopate's compile pass instead
  (:func:`syncopate.torch_ops.enable_fusion_pass`: its all-gather + matmul and matmul +
  reduce-scatter become the fused ops);
* ``compute`` -- this rank's block GEMMs (cuBLAS, the forward's, plus for the backward the
  input- and weight-gradient GEMMs) and its attention (SDPA; context parallel: the whole
  sequence's causal attention divided by W, the zigzag layout's balanced share);
* ``comm`` -- the block's collectives alone (NCCL, at the sizes the block moves);
* ``ideal`` -- ``max(compute, comm)``: perfect overlap. Elementwise work (norms, RoPE, SwiGLU,
  residuals) is in neither, so ideal is a lower bound.

Derived: tokens/s of each timed column (the sequence's ``S * B`` tokens over the block time:
the whole group's throughput per block), ``unfused/fused``, ``fused/ideal``.

Where torch's async-TP does not apply the column is ``n/a`` with the reason: at W = 1 (no
collective), in the context-parallel layout (its only communication is ring attention's K/V
exchange, not an all-gather + matmul or matmul + reduce-scatter), and on a torch without the
pass. The compiled columns also report how many patterns each pass fused per graph.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from .. import torch_ops as sto
from ..nn import TransformerBlock
from .dtensor_block import dtensor_block
from .fused import error_text, rel_err, safe
from .report import aligned, run_meta, write_json
from .rows import _enable_symm_mem
from .runs import within_budget

__all__ = ["BlockShape", "COLUMNS", "DIRECTIONS", "SHAPES", "TOLERANCE", "async_tp_problem",
           "bench_shape", "derive", "format_table", "new_row", "run", "shapes_for"]

#: forward only (inference) and forward + backward (training)
DIRECTIONS = ("fwd", "fwd+bwd")
#: the timed columns, in table order
TIMED = ("fused", "unfused", "torch async-TP", "DTensor+pass")
COLUMNS = TIMED + ("compute", "comm", "ideal")
#: the fused block's output must be this close to the unfused one's (relative Frobenius
#: error, bf16: different GEMM and attention kernels round differently; a wrong result is ~1)
TOLERANCE = 5e-2


@dataclass(frozen=True)
class BlockShape:
    """One benchmark shape: the block's dims, the sequence (``seq`` tokens of ``batch``
    sequences; ``quick_seq`` with ``--quick``) and the layout."""

    name: str
    dim: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    seq: int
    quick_seq: int
    layout: str = "tp"
    batch: int = 1

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    def problem(self, W: int) -> str | None:
        """Why this shape cannot run over ``W`` ranks, or None."""
        if self.layout == "tp":
            if self.n_heads % W or self.n_kv_heads % W or self.ffn_dim % W:
                return (f"layout tp over {W} ranks splits heads ({self.n_heads}), KV heads "
                        f"({self.n_kv_heads}) and the MLP ({self.ffn_dim}): each must divide "
                        f"by {W}")
            if self.seq % W:
                return f"the sequence ({self.seq}) does not divide over {W} ranks"
        elif self.seq % (2 * W):
            return (f"layout cp's zigzag shards need the sequence ({self.seq}) to divide into "
                    f"2 x {W} segments")
        return None

    def gemms(self, W: int) -> list[tuple[str, int, int, int]]:
        """This rank's forward GEMMs ``(name, M, K, N)`` (``[M, K] @ [K, N]``); the backward
        runs two per forward GEMM of the same size (the input's and the weight's gradient)."""
        hd, D, F = self.head_dim, self.dim, self.ffn_dim
        qkv = (self.n_heads + 2 * self.n_kv_heads) * hd
        tokens = self.seq * self.batch
        if self.layout == "tp":  # every rank: the whole sequence, its share of the widths
            M, qkv, o, f = tokens, qkv // W, self.n_heads * hd // W, F // W
        else:  # context parallel: its share of the sequence, every weight
            M, o, f = tokens // W, self.n_heads * hd, F
        return [("wqkv", M, D, qkv), ("wo", M, o, D), ("w13", M, D, 2 * f), ("w2", M, f, D)]

    def collectives(self, W: int, direction: str) -> list[tuple[str, int, int, bool]]:
        """The block's collectives ``(kind, rows of the whole, columns, in fp32)`` per rank:
        tp -- the forward's two all-gathers (attention and MLP inputs) and two
        reduce-scatters (their outputs), the backward's the same again (gradients); cp --
        ring attention's K/V exchange (an all-gather's volume), in the backward K/V again
        (syncopate.nn gathers them again rather than keep them) and the dK/dV partials
        reduce-scattered to their owners in fp32 (as syncopate.nn's backward does). None at
        W = 1."""
        if W == 1:
            return []
        tokens, D = self.seq * self.batch, self.dim
        if self.layout == "tp":
            one = ([("all_gather", tokens, D, False)] * 2
                   + [("reduce_scatter", tokens, D, False)] * 2)
            return one * (2 if direction == "fwd+bwd" else 1)
        kv = 2 * self.n_kv_heads * self.head_dim
        back = [("all_gather", tokens, kv, False), ("reduce_scatter", tokens, kv, True)]
        return [("all_gather", tokens, kv, False)] + (back if direction == "fwd+bwd" else [])

    def at(self, quick: bool) -> "BlockShape":
        """This shape at ``--quick``'s sequence (or its own)."""
        return BlockShape(**{**asdict(self), "seq": self.quick_seq}) if quick else self


#: the standard shapes: Llama-3 8B and 70B (tensor + sequence parallel, 8K tokens), and 8B at
#: 128K tokens context parallel (the long-context case); --quick: shorter sequences
SHAPES = (BlockShape("llama3-8b", 4096, 32, 8, 14336, 8192, 8192),
          BlockShape("llama3-70b", 8192, 64, 8, 28672, 8192, 4096),
          BlockShape("llama3-8b-long", 4096, 32, 8, 14336, 131072, 32768, layout="cp"))
NAMES = tuple(s.name for s in SHAPES)


def shapes_for(args) -> list[BlockShape]:
    """The shapes of the run: ``--blocks`` (default every standard shape), at ``--quick``'s
    sequence lengths when given."""
    names = args.blocks.split(",") if args.blocks else [s.name for s in SHAPES]
    return [s.at(bool(args.quick)) for s in SHAPES if s.name in names]


def async_tp_problem(shape: BlockShape, W: int, has_pass: bool, cuda: bool) -> str | None:
    """Why torch's async-TP column does not apply to this row, or None."""
    if not has_pass:
        return "this torch has no async-TP pass (torch._inductor.config._micro_pipeline_tp)"
    if W == 1:
        return "W = 1: the block has no collective to overlap"
    if shape.layout != "tp":
        return ("layout cp: the block's only communication is ring attention's K/V exchange; "
                "async-TP fuses tensor parallelism's all-gather + matmul and matmul + "
                "reduce-scatter")
    if not cuda:
        return "not on CUDA: torch's async-TP ops run on CUDA symmetric memory"
    return None


def new_row(shape: BlockShape, direction: str, W: int) -> dict:
    return {"model": shape.name, "layout": shape.layout, "S": shape.seq, "B": shape.batch,
            "W": W, "dir": direction, "tokens": shape.seq * shape.batch, "errors": {},
            "notes": {}}


def derive(row: dict) -> dict:
    """ideal, tokens/s of every timed column, the ratios."""
    c, m = row.get("compute"), row.get("comm")
    row["ideal"] = max(c, m) if c is not None and m is not None else None
    for col in TIMED + ("ideal",):
        ms = row.get(col)
        row[f"{col} tok/s"] = row["tokens"] / (ms / 1e3) if ms else None
    f, u, i = row.get("fused"), row.get("unfused"), row.get("ideal")
    row["unfused/fused"] = u / f if u and f else None
    row["fused/ideal"] = f / i if f and i else None
    return row


def _max_over_ranks(comm, v: float) -> float:
    import torch
    import torch.distributed as dist
    t = torch.tensor([v], dtype=torch.float64, device=comm.device)
    if comm.world_size > 1:
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=comm.group)
    return float(t)


def _steps(x, gy):
    """The two directions as calls on a block: forward under no_grad; forward + backward
    from a fresh leaf input (its gradient and every weight's)."""
    import torch

    def fwd(block):
        with torch.no_grad():
            return block(x)

    def fwd_bwd(block):
        xr = x.detach().requires_grad_()
        block(xr).backward(gy)
    return {"fwd": fwd, "fwd+bwd": fwd_bwd}


def _free(device) -> None:
    import torch
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def _time_modules(comm, timer, shape, rows, steps, dtype, log) -> None:
    """``fused`` and ``unfused``: the block module both ways, same weights, the fused one's
    output checked against the unfused one's first."""
    kw = dict(layout=shape.layout, dtype=dtype, device=comm.device)
    dims = (shape.dim, shape.n_heads, shape.n_kv_heads, shape.ffn_dim, comm)
    fused = TransformerBlock(*dims, fused=None, **kw)
    unfused = TransformerBlock(*dims, fused=False, **kw)
    unfused.load_state_dict(fused.state_dict())
    err = _max_over_ranks(comm, rel_err(steps["fwd"](fused), steps["fwd"](unfused)))
    for d, row in rows.items():
        row["fused vs unfused"] = err
        if err <= TOLERANCE:
            safe(row, "fused", lambda: timer(lambda: steps[d](fused)))
        else:
            row["fused"] = None
            row["errors"]["fused"] = (f"output differs from the unfused block's (relative "
                                      f"error {err:.3g} > {TOLERANCE}): not timed")
        safe(row, "unfused", lambda: timer(lambda: steps[d](unfused)))
        log(f"  {d}: fused {row.get('fused')} ms, unfused {row.get('unfused')} ms")


def _counting_pass(counts: list, targets: dict):
    """A post-grad pass (Inductor runs it after its own and syncopate's) that records, per
    graph, how many nodes of each kind in ``targets`` (label -> op overloads) it holds: what
    the compile passes fused."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    class Count(CustomGraphPass):
        def __call__(self, graph):
            bw = any(n.op == "placeholder" and n.name.startswith("tangents")
                     for n in graph.nodes)
            counts.append(("bwd" if bw else "fwd", {
                k: sum(n.target in v for n in graph.nodes) for k, v in targets.items()}))

        def uuid(self):
            return b"syncopate-bench-block-count"
    return Count()


def _time_compiled(comm, timer, shape, rows, steps, dtype, log) -> None:
    """``torch async-TP`` and ``DTensor+pass``: the DTensor block compiled with each pass."""
    import torch
    from torch._inductor import config
    from torch.distributed.device_mesh import DeviceMesh
    W = comm.world_size
    kind = torch.device(comm.device).type
    why = async_tp_problem(shape, W, hasattr(config, "_micro_pipeline_tp"), kind == "cuda")
    for row in rows.values():
        if why is not None:
            row["torch async-TP"] = None
            row["notes"]["torch async-TP"] = why
        if W == 1 or shape.layout != "tp":
            row["DTensor+pass"] = None
            row["notes"]["DTensor+pass"] = ("W = 1: no collective to fuse" if W == 1 else
                                            "layout cp: no all-gather + matmul to fuse")
    symm = torch.ops.symm_mem
    columns = []
    if why is None:
        _enable_symm_mem(comm)
        columns.append(("torch async-TP", {"_micro_pipeline_tp": True}, {
            "AG+mm": [symm.fused_all_gather_matmul.default],
            "mm+RS": [symm.fused_matmul_reduce_scatter.default]}))
    if W > 1 and shape.layout == "tp":
        columns.append(("DTensor+pass", {}, {
            "ag_gemm": [torch.ops.syncopate.ag_gemm.default],
            "gemm_rs": [torch.ops.syncopate.gemm_rs.default]}))
    if not columns:
        return
    mesh = DeviceMesh.from_group(comm.group, kind)
    for col, patch, targets in columns:
        _time_compiled_column(comm, timer, shape, rows, steps, dtype, log, mesh, col, patch,
                              targets)
        _free(comm.device)


def _time_compiled_column(comm, timer, shape, rows, steps, dtype, log, mesh, col, patch,
                          targets) -> None:
    """One compiled column, both directions: a fresh DTensor block (freed on return), each
    direction compiled afresh (Dynamo reset: its recompile limit must not quietly send a
    later compile to eager) with the column's Inductor settings, the pass's rewrites counted
    per graph."""
    import torch
    from torch._inductor import config
    from torch._inductor.custom_graph_pass import get_custom_graph_passes

    counts: list = []
    block = dtensor_block(shape.dim, shape.n_heads, shape.n_kv_heads, shape.ffn_dim, mesh,
                          dtype=dtype, device=comm.device)
    saved = config.post_grad_custom_post_pass
    try:
        if col == "DTensor+pass":
            sto.enable_fusion_pass()
        config.post_grad_custom_post_pass = [
            *get_custom_graph_passes(config.post_grad_custom_post_pass),
            _counting_pass(counts, targets)]
        with config.patch(fx_graph_cache=False, **patch):
            for d, row in rows.items():
                torch._dynamo.reset()
                fn = torch.compile(block, fullgraph=True)
                safe(row, col, lambda: timer(lambda: steps[d](fn)))
                row["notes"][col] = "fused per graph: " + "; ".join(
                    f"{g} " + ", ".join(f"{k} {v}" for k, v in c.items()) for g, c in counts)
                counts.clear()
                log(f"  {d}: {col} {row.get(col)} ms ({row['notes'][col]})")
    finally:
        sto.disable_fusion_pass()
        config.post_grad_custom_post_pass = saved
        torch._dynamo.reset()


def _time_compute(comm, timer, shape, dtype) -> tuple[dict, dict]:
    """``compute`` per direction -- this rank's GEMMs (cuBLAS) and attention (SDPA) -- and
    its parts (ms); the operands are freed on return."""
    import torch
    import torch.nn.functional as F
    W, dev = comm.world_size, comm.device
    g = torch.Generator(device=dev).manual_seed(5)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, device=dev).to(dtype)
    mats = [(rnd(M, K), rnd(K, N), rnd(M, N)) for _, M, K, N in shape.gemms(W)]

    def gemm_fwd():
        for a, b, _ in mats:
            torch.matmul(a, b)

    def gemm_bwd():
        for a, b, dy in mats:
            torch.matmul(dy, b.t())
            torch.matmul(a.t(), dy)
    B, S, hd = shape.batch, shape.seq, shape.head_dim
    share = W if shape.layout == "tp" else 1  # tp: this rank's heads; cp: all (time / W)
    q = rnd(B, shape.n_heads // share, S, hd)
    k, v = rnd(B, shape.n_kv_heads // share, S, hd), rnd(B, shape.n_kv_heads // share, S, hd)
    go = rnd(*q.shape)

    def attn_fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def attn_fwd_bwd():
        qr, kr, vr = (t.detach().requires_grad_() for t in (q, k, v))
        F.scaled_dot_product_attention(qr, kr, vr, is_causal=True, enable_gqa=True).backward(go)
    parts = {name: timer(fn) for name, fn in (
        ("gemm fwd", gemm_fwd), ("gemm bwd", gemm_bwd), ("attn fwd", attn_fwd),
        ("attn fwd+bwd", attn_fwd_bwd))}
    attn_div = W if shape.layout == "cp" else 1
    return {"fwd": parts["gemm fwd"] + parts["attn fwd"] / attn_div,
            "fwd+bwd": parts["gemm fwd"] + parts["gemm bwd"]
            + parts["attn fwd+bwd"] / attn_div}, parts


def _time_collectives(comm, timer, colls, dtype) -> float:
    """The collectives ``colls`` (:meth:`BlockShape.collectives`) back to back on NCCL (the
    group's backend); the buffers are freed on return."""
    import torch
    import torch.distributed as dist
    W, dev = comm.world_size, comm.device
    bufs = []
    for kind, rows, cols, fp32 in colls:
        dt = torch.float32 if fp32 else dtype
        bufs.append((kind, torch.empty(rows, cols, device=dev, dtype=dt),
                     torch.empty(rows // W, cols, device=dev, dtype=dt)))

    def collectives():
        for kind, whole, part in bufs:
            if kind == "all_gather":
                dist.all_gather_into_tensor(whole, part, group=comm.group)
            else:
                dist.reduce_scatter_tensor(part, whole, group=comm.group)
    return timer(collectives)


def _time_ideal(comm, timer, shape, rows, dtype, log) -> None:
    """``compute`` (this rank's GEMMs and attention) and ``comm`` (the block's collectives)."""
    compute, parts = _time_compute(comm, timer, shape, dtype)
    _free(comm.device)
    for d, row in rows.items():
        row["compute"] = compute[d]
        row["compute parts"] = parts
        colls = shape.collectives(comm.world_size, d)
        if not colls:
            row["comm"] = 0.0
            row["notes"]["comm"] = "W = 1: no collective"
            continue
        safe(row, "comm", lambda: _time_collectives(comm, timer, colls, dtype))
        _free(comm.device)
    log(f"  compute {compute}, comm {[r.get('comm') for r in rows.values()]}")


def bench_shape(comm, timer, shape: BlockShape, args, log) -> list[dict]:
    """The rows of one shape (forward, forward + backward), every column."""
    import torch
    W = comm.world_size
    rows = {d: new_row(shape, d, W) for d in DIRECTIONS}
    why = shape.problem(W)
    if why is not None:
        for row in rows.values():
            row["errors"]["row"] = why
        return list(rows.values())
    dtype = getattr(torch, args.dtype)
    g = torch.Generator(device=comm.device).manual_seed(11 + comm.rank)
    x = torch.randn(shape.seq // W, shape.batch, shape.dim, generator=g,
                    device=comm.device).to(dtype)
    gy = torch.randn(x.shape, generator=g, device=comm.device).to(dtype)
    steps = _steps(x, gy)
    _time_modules(comm, timer, shape, rows, steps, dtype, log)
    _free(comm.device)  # the two blocks (and their gradients) are gone
    _time_compiled(comm, timer, shape, rows, steps, dtype, log)
    try:
        _time_ideal(comm, timer, shape, rows, dtype, log)
    except Exception as e:  # noqa: BLE001 - reported: the row keeps its timed columns
        for row in rows.values():
            row["errors"]["compute"] = error_text(e)
    return [derive(r) for r in rows.values()]


def format_table(rows: list[dict]) -> str:
    """The table printed at the end, then every n/a's reason and every error."""
    head = ["model", "layout", "S", "W", "dir", *COLUMNS, "fused tok/s", "unfused/fused",
            "fused/ideal"]
    lines = []
    for r in rows:
        cells = [r["model"], r["layout"], str(r["S"]), str(r["W"]), r["dir"]]
        for c in head[5:]:
            v = r.get(c)
            cells.append("n/a" if v is None else f"{v:.2f}x" if "/" in c and "tok" not in c
                         else f"{v:,.0f}" if "tok/s" in c else f"{v:.3f}")
        lines.append(cells)
    out = aligned(head, lines)
    out.append("ms per block (median device time, max over ranks); tok/s: the sequence's "
               "tokens per second through one block; ideal = max(compute, comm)")
    for r in rows:
        tag = f"[{r['model']} {r['dir']}]"
        for c, why in r["notes"].items():
            out.append(f"  {tag} {c}: {why}")
        for c, err in r["errors"].items():
            out.append(f"  {tag} {c} error: {err}")
    return "\n".join(out)


def run(comm, args, log, timer, command: str) -> list[dict]:
    """Every shape of the run, in order, while the budget allows (:func:`.runs.within_budget`);
    ``bench_block.json`` after every shape, the table at the end (rank 0)."""
    budget = args.budget_s if args.budget_s is not None else (150.0 if args.quick else 600.0)
    out, skipped = [], []
    path = os.path.join(args.out, "bench_block.json")

    def write(final):
        write_json(path, {"meta": run_meta(args, comm, command, final, quick=bool(args.quick),
                                           skipped_over_budget=skipped), "rows": out})
    for shape in within_budget(comm, shapes_for(args), budget, skipped, lambda s: s.name):
        log(f"block {shape.name} ({shape.layout}, S={shape.seq}) ...")
        out += bench_shape(comm, timer, shape, args, log)
        if comm.rank == 0:
            write(final=False)
    if comm.rank == 0:
        write(final=True)
        print(format_table(out))
        if skipped:
            print(f"skipped (would end past the {budget:g} s budget): {skipped}")
        print(f"wrote {path}")
    return out
