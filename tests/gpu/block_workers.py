"""Per-rank bodies of tests/gpu/test_block_gpu.py (run by dist_harness.run_ranks: one process
per GPU, or W threads of one process in loopback). Each returns ``{"problems": [...],
"lines": [...]}``: what did not match (empty when everything did) and what was measured
(printed by the test, so the GPU log holds the numbers).

Order matters in loopback (docs/loopback.md, "Module loading"): every rank first runs the
block with ``fused=False`` (NCCL-style collectives, cuBLAS, SDPA) and the attention op's
unfused path, which loads the kernels the fused run uses between its fused launches, before
any fused kernel can spin waiting for a peer.
"""

from __future__ import annotations

import sys
import threading
import time

#: the block per layout: dim, heads, KV heads, MLP width, head_dim. tp splits the heads (KV
#: heads divide by W = 4); cp keeps one KV head: its dK/dV kernel's grid (S/128 x B x Hkv
#: programs per rank) stays co-resident with W = 4 ranks on one GPU
SHAPES = {"tp": dict(dim=512, n_heads=8, n_kv_heads=4, ffn_dim=1024, head_dim=64),
          "cp": dict(dim=512, n_heads=8, n_kv_heads=1, ffn_dim=1024, head_dim=64),
          # Ulysses gives each rank whole heads: query and KV heads divide by W = 4
          "cp-ulysses": dict(dim=512, n_heads=8, n_kv_heads=4, ffn_dim=1024, head_dim=64)}


_T0 = time.monotonic()


def _say(who, what):
    print(f"[{who} t={time.monotonic() - _T0:7.2f}s] {what}", file=sys.stderr, flush=True)


def _mark(rank, what):
    """A host timestamp per rank on stderr (the GPU logs keep it): where a loopback run hangs
    or times out, which rank's host was where, and how far apart the ranks launched."""
    _say(f"rank {rank}", what)


def _load_hook(verb):
    def hook(module, function, name, metadata_group, hash):
        _say(threading.current_thread().name, f"{verb} Triton kernel {name}")
    return hook


#: module-level: Triton's hook chains add a function once (by identity)
_LOAD_START, _LOAD_END = _load_hook("loading"), _load_hook("loaded")


def _trace_kernel_loads():
    """Print every Triton kernel's module load with its thread and time: a module loaded while
    a peer's fused kernel spins is the first suspect of a loopback timeout (docs/loopback.md)."""
    import triton
    triton.knobs.runtime.kernel_load_start_hook.add(_LOAD_START)
    triton.knobs.runtime.kernel_load_end_hook.add(_LOAD_END)


def _layout(layout):
    """``"cp-ulysses"`` -> ``{"layout": "cp", "cp_method": "ulysses"}`` (TransformerBlock's
    arguments of a tested layout)."""
    layout, _, method = layout.partition("-")
    return {"layout": layout, **({"cp_method": method} if method else {})}
SEQ, BATCH = 1024, 1
#: normwise relative error of the bf16 block against the fp32 unsharded block (same bf16-rounded
#: weights and input), output and every gradient
TOL = 3e-2
#: per-step relative difference of the 20-step loss against the fp32 unsharded model's
#: (bf16 compute, fp32 master weights on both sides; measured on a CPU at 3e-4)
LOSS_TOL = 1e-2
STEPS, LR = 20, 1e-3


def _rel(x, ref) -> float:
    import torch
    x, ref = x.detach().float(), ref.detach().float()
    return float(torch.linalg.norm(x - ref) / torch.linalg.norm(ref).clamp_min(1e-30))


def _rand(shape, seed, device):
    import torch
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return torch.randn(*shape, generator=g, device=device)


def _bf16_rounded(ref):
    import torch
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return ref


def _grads_as_reference(blk):
    """Every rank's gradient shards assembled into the unsharded shapes (a collective)."""
    import torch
    saved = [p.detach().clone() for p in blk.parameters()]
    with torch.no_grad():
        for p in blk.parameters():
            p.copy_(p.grad)
    g = blk.reference()
    with torch.no_grad():
        for p, s in zip(blk.parameters(), saved):
            p.copy_(s)
    return dict(g.named_parameters())


def _fwd_bwd(blk, x, gy):
    import torch
    xs = blk.shard_sequence(x).to(torch.bfloat16).requires_grad_()
    y = blk(xs)
    (y.float() * blk.shard_sequence(gy)).sum().backward()
    return xs, y


def _compare(name, blk, ref, xs, y, yr, xr, problems, lines):
    """The sharded block's output, input gradient and every weight gradient against the
    reference's (after its backward)."""
    import syncopate.nn as snn
    snn.sync_grads(blk, blk.par)
    pos = blk.positions(SEQ, y.device)
    errs = {"y": _rel(y, yr[pos]), "dx": _rel(xs.grad, xr.grad[pos])}
    grads = _grads_as_reference(blk)
    for n, p in ref.named_parameters():
        errs["d" + n] = _rel(grads[n], p.grad)
    worst = max(errs, key=errs.get)
    lines.append(f"{name}: worst {worst} {errs[worst]:.2e}; " + " ".join(
        f"{k}={v:.1e}" for k, v in errs.items()))
    problems += [f"{name}: {k} relative error {v:.3g} > {TOL}" for k, v in errs.items()
                 if not v <= TOL]
    for p in blk.parameters():
        p.grad = None


def block_checks(rank, W, layout, graph: bool):
    """Both paths of one block against the fp32 unsharded block (forward, dx, every weight
    gradient), the memory a second block of the same shape adds (none: one set of buffers and
    fused kernels), CUDA-graph capture of the fused forward (``graph``), and 20 training steps
    of a 2-block stack against the unsharded model's."""
    import torch

    import syncopate.nn as snn
    from syncopate.ops import ring_attention, ring_attention_backward
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    problems, lines = [], []
    _trace_kernel_loads()
    dev = torch.device("cuda", torch.cuda.current_device())
    comm = Communicator()
    cfg = SHAPES[layout]
    bf = torch.bfloat16
    ref = _bf16_rounded(snn.ReferenceBlock(**cfg, seed=1, device=dev))
    x = _rand((SEQ, BATCH, cfg["dim"]), 2, dev).to(bf).float()
    gy = _rand((SEQ, BATCH, cfg["dim"]), 3, dev)
    xr = x.clone().requires_grad_()
    yr = ref(xr)
    (yr * gy).sum().backward()
    yr = yr.detach()

    _mark(rank, f"{layout}: reference done")
    # 1. the unfused block (also the warm-up: cuBLAS, SDPA, the collectives)
    unfused = snn.TransformerBlock(**cfg, comm=comm, **_layout(layout), fused=False, dtype=bf,
                                   device=dev).load_from(ref)
    xs, y = _fwd_bwd(unfused, x, gy)
    _compare(f"{layout} W={W} unfused (collectives + cuBLAS + SDPA)", unfused, ref, xs, y, yr,
             xr, problems, lines)
    if layout == "cp":  # the attention op's unfused path: its local kernels, loaded now
        B, Hq, Hkv, D, Sl = BATCH, cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"], SEQ // W
        q, k, v = (_rand((B, h, Sl, D), 4 + i, dev).to(bf) for i, h in enumerate((Hq, Hkv, Hkv)))
        o, lse = ring_attention(q, k, v, comm, causal=True, fused=False)
        ring_attention_backward(q, k, v, o, lse, o, comm, causal=True, fused=False)
    if layout == "cp-ulysses":  # its unfused forward and its backward's kernels, loaded now
        problems += _ulysses_op(rank, W, comm, cfg, dev, lines)
    dist.barrier(device_ids=[dev.index])

    _mark(rank, f"{layout}: unfused block and op warm-up done")
    # 2. the block on the registered ops (fused where they choose it)
    blk = snn.TransformerBlock(**cfg, comm=comm, **_layout(layout), dtype=bf,
                               device=dev).load_from(ref)
    xs, y = _fwd_bwd(blk, x, gy)
    _compare(f"{layout} W={W} ops (fused)", blk, ref, xs, y, yr, xr, problems, lines)
    _mark(rank, f"{layout}: fused forward + backward compared")
    with torch.no_grad():
        yu = unfused(blk.shard_sequence(x).to(bf))
        _mark(rank, f"{layout}: no-grad unfused forward enqueued")
        yf = blk(blk.shard_sequence(x).to(bf))
        _mark(rank, f"{layout}: no-grad fused forward enqueued")
    lines.append(f"{layout} W={W}: |fused - unfused| / |unfused| = {_rel(yf, yu):.2e}")
    one = snn.memory_held(blk, comm)
    lines.append(f"{layout} W={W} one block: {one}")
    if layout == "cp" and one.fused_kernels < 2:
        problems.append(f"cp W={W}: {one.fused_kernels} fused kernels cached; the ring attention "
                        f"forward and backward should both have run fused")

    _mark(rank, f"{layout}: no-grad forwards compared")
    # 3. a second block of the same shape: the same buffers and fused kernels serve it
    blk2 = snn.TransformerBlock(**cfg, comm=comm, **_layout(layout), dtype=bf,
                                device=dev).load_from(ref)
    xs = blk.shard_sequence(x).to(bf).requires_grad_()
    blk2(blk(xs)).float().square().sum().backward()
    two = snn.memory_held(None, comm)
    lines.append(f"{layout} W={W} two blocks: {two}")
    if (two.symmetric, two.fused_kernels) != (one.symmetric, one.fused_kernels):
        problems.append(f"{layout} W={W}: a second block of the same shape added symmetric "
                        f"memory or fused kernels: {one} -> {two}")

    _mark(rank, f"{layout}: two blocks done")
    # 4. CUDA-graph capture of the fused forward, replayed with new inputs
    if graph:
        problems += _graph(rank, W, blk, comm, x, layout, lines)

    _mark(rank, f"{layout}: graph step done")
    # 5. 20 training steps against the unsharded model
    problems += _train(rank, W, layout, comm, dev, lines)
    return {"problems": problems, "lines": lines}


def _ulysses_op(rank, W, comm, cfg, dev, lines):
    """The Ulysses op itself on causal GQA blocks: the fused forward (``fused=True``: the
    all-to-alls inside the kernel) against the unfused one (output and the head-sharded
    ``lse``: same kernel, same tiles), and the backward (all-to-alls around the local
    backward kernels) from the fused forward's ``(o, lse)`` against autograd through fp32
    attention on the whole sequence. The unfused calls come first (module loading, module
    docstring)."""
    import torch

    from syncopate.ops import ulysses_attention, ulysses_attention_backward
    from syncopate.runtime import collectives as dist
    bf = torch.bfloat16
    B, Hq, Hkv, D = BATCH, cfg["n_heads"], cfg["n_kv_heads"], cfg["head_dim"]
    q, k, v, go = (_rand((B, h, SEQ, D), 20 + i, dev).to(bf)
                   for i, h in enumerate((Hq, Hkv, Hkv, Hq)))
    rows, heads = slice(rank * SEQ // W, (rank + 1) * SEQ // W), slice(rank * Hq // W,
                                                                      (rank + 1) * Hq // W)
    qs, ks, vs, gos = (t[:, :, rows].contiguous() for t in (q, k, v, go))
    o_u, lse_u = ulysses_attention(qs, ks, vs, comm, causal=True, fused=False, return_lse=True)
    ulysses_attention_backward(qs, ks, vs, o_u, lse_u, gos, comm, causal=True)
    dist.barrier(device_ids=[dev.index])
    o_f, lse_f = ulysses_attention(qs, ks, vs, comm, causal=True, fused=True, return_lse=True)
    grads = ulysses_attention_backward(qs, ks, vs, o_f, lse_f, gos, comm, causal=True)
    qf, kf, vf = (t.float().requires_grad_() for t in (q, k, v))
    G = Hq // Hkv
    s = (qf @ kf.repeat_interleave(G, 1).transpose(-1, -2)) * D ** -0.5
    s = s.masked_fill(torch.ones(SEQ, SEQ, dtype=torch.bool, device=dev).triu(1), float("-inf"))
    lse = torch.logsumexp(s, -1)
    o = torch.softmax(s, -1) @ vf.repeat_interleave(G, 1)
    (o * go.float()).sum().backward()
    errs = {"o fused vs unfused": _rel(o_f, o_u), "lse fused vs unfused": _rel(lse_f, lse_u),
            "o": _rel(o_f, o[:, :, rows]), "lse": _rel(lse_f, lse[:, heads])}
    for name, got, want in zip(("dq", "dk", "dv"), grads, (qf.grad, kf.grad, vf.grad)):
        errs[name] = _rel(got, want[:, :, rows])
    lines.append(f"ulysses op W={W}: " + " ".join(f"{k}={v:.1e}" for k, v in errs.items()))
    return [f"ulysses op W={W}: {k} relative error {v:.3g} > {TOL}" for k, v in errs.items()
            if not v <= TOL]


def _graph(rank, W, blk, comm, x, layout, lines):
    import torch

    from syncopate.runtime import collectives as dist
    from syncopate.runtime.graphs import FusedGraph
    bf = torch.bfloat16
    static = blk.shard_sequence(x).to(bf).clone()
    with torch.no_grad():
        blk(static)  # warm-up of this layout (no grad: the launch plans of inference)
        fg, err = None, None
        for r in range(W):  # capture in turn (graph_workers._capture_in_turn says why)
            if r == rank:
                try:
                    fg = FusedGraph.capture(lambda: blk(static), comm=comm,
                                            capture_error_mode="thread_local")
                except Exception as e:  # noqa: BLE001 - reported
                    err = e
            dist.barrier()
        if err is not None:
            return [f"{layout} W={W}: CUDA-graph capture of the forward failed: "
                    f"{type(err).__name__}: {err}"]
        problems, worst = [], 0.0
        for i in range(3):
            new = blk.shard_sequence(_rand(tuple(x.shape), 100 + i, x.device)).to(bf)
            eager = blk(new)
            static.copy_(new)
            fg.replay()
            worst = max(worst, _rel(fg.output, eager))
        lines.append(f"{layout} W={W}: graph replays vs eager, worst relative {worst:.2e}")
        if not worst <= 1e-2:
            problems.append(f"{layout} W={W}: a graph replay differs from the eager forward "
                            f"by {worst:.3g}")
    return problems


def _train(rank, W, layout, comm, dev, lines):
    import torch

    import syncopate.nn as snn
    from syncopate.runtime import collectives as dist
    cfg = SHAPES[layout]
    bf = torch.bfloat16
    ref = _bf16_rounded(snn.ReferenceStack(2, **cfg, seed=7, device=dev))
    stack = snn.TransformerStack(2, **cfg, comm=comm, **_layout(layout), dtype=bf, device=dev,
                                 param_dtype=torch.float32).load_from(ref)
    xs = [_rand((SEQ, BATCH, cfg["dim"]), 200 + i, dev).to(bf).float() for i in range(STEPS)]
    ts = [_rand((SEQ, BATCH, cfg["dim"]), 300 + i, dev) for i in range(STEPS)]
    opt = torch.optim.AdamW(stack.parameters(), lr=LR)
    ropt = torch.optim.AdamW(ref.parameters(), lr=LR)
    n = xs[0].numel()
    got, want = [], []
    for i in range(STEPS):
        loss = ((stack(stack.shard_sequence(xs[i]).to(bf)).float()
                 - stack.shard_sequence(ts[i])) ** 2).sum() / n
        opt.zero_grad()
        loss.backward()
        stack.sync_grads()
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, group=stack.par.group)
        got.append(float(total))
        rloss = ((ref(xs[i]) - ts[i]) ** 2).mean()
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        want.append(float(rloss.detach()))
    worst = max(abs(a - b) / abs(b) for a, b in zip(got, want))
    lines.append(f"{layout} W={W} training: loss {got[0]:.4f} -> {got[-1]:.4f} (unsharded "
                 f"{want[0]:.4f} -> {want[-1]:.4f}), worst step difference {worst:.2e}")
    problems = []
    if not worst <= LOSS_TOL:
        problems.append(f"{layout} W={W}: the losses differ from the unsharded model's by "
                        f"{worst:.3g} > {LOSS_TOL} (got {got}, want {want})")
    if not got[-1] < got[0]:
        problems.append(f"{layout} W={W}: the loss did not decrease: {got}")
    return problems


#: the MoE block against the fp32 unsharded one: looser than TOL -- the sharded router sees the
#: bf16 hidden state, so a token whose top-k scores nearly tie may pick another expert there
MOE_TOL = 6e-2


def moe_checks(rank, W):
    """The mixture-of-experts block (inference) on the fused dispatch/combine against the same
    block on the ops' unfused paths (same bf16 routing: 1e-2) and against the fp32 unsharded
    block (``MOE_TOL``)."""
    import torch

    import syncopate.nn as snn
    from syncopate.runtime import Communicator
    problems, lines = [], []
    dev = torch.device("cuda", torch.cuda.current_device())
    comm = Communicator()
    cfg = SHAPES["tp"]
    tokens = SEQ // W * BATCH
    moe = snn.MoE(num_experts=2 * W, top_k=2, capacity=-(-tokens // 128) * 128)
    bf = torch.bfloat16
    ref = _bf16_rounded(snn.ReferenceBlock(**cfg, moe=moe, seed=9, device=dev))
    x = _rand((SEQ, BATCH, cfg["dim"]), 10, dev).to(bf).float()
    ys = {}
    with torch.no_grad():
        yr = ref(x)
        for fused in (False, None):  # the unfused paths first: they load the local kernels
            blk = snn.TransformerBlock(**cfg, comm=comm, layout="tp", fused=fused, dtype=bf,
                                       device=dev, moe=moe).load_from(ref)
            ys[fused] = y = blk(blk.shard_sequence(x).to(bf))
            err = _rel(y, yr[blk.positions(SEQ, dev)])
            dropped = int(blk.moe_dropped.sum())
            lines.append(f"moe W={W} fused={fused}: relative error {err:.2e} against fp32, "
                         f"dropped {dropped}")
            if not err <= MOE_TOL or dropped:
                problems.append(f"moe W={W} fused={fused}: error {err:.3g}, dropped {dropped}")
    err = _rel(ys[None], ys[False])
    lines.append(f"moe W={W}: |fused - unfused| / |unfused| = {err:.2e}")
    if not err <= 1e-2:
        problems.append(f"moe W={W}: the fused MoE block differs from the unfused by {err:.3g}")
    return {"problems": problems, "lines": lines}
