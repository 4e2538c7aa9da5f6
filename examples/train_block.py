"""Train a small language model of syncopate.nn transformer blocks, next to the same model
unsharded.

The model: a token embedding, ``--layers`` :class:`syncopate.nn.TransformerBlock` s, a final
RMSNorm and an output head, trained for ``--steps`` AdamW steps on one fixed batch of random
tokens (next-token cross-entropy: it learns the batch by heart, so the loss falls). The blocks
run in either layout of docs/model.md -- ``tp`` (tensor + sequence parallel: the projections
fused with their all-gather / reduce-scatter) or ``cp`` (context parallel: ring attention on
zigzag sequence shards) -- on one Communicator, forward and backward on the fused ops
(``--unfused``: NCCL + cuBLAS + SDPA). The embedding, head and norms are replicated and their
gradients summed over the ranks (``sync_grads``). Every rank also trains the unsharded model
(fp32, same initial weights) and prints both losses; in loopback the backward runs on each
virtual rank's own thread.

    torchrun --nproc-per-node 2 examples/train_block.py [--layout tp|cp|both] [--steps 5]
    python examples/train_block.py --loopback 2
"""

from _launch import launch

VOCAB = 512
LR = 3e-4


def options(p):
    p.add_argument("--layout", choices=("tp", "cp", "both"), default="both")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=1024, help="tokens per sequence (batch of 1)")
    p.add_argument("--unfused", action="store_true",
                   help="fused=False: the same modules on NCCL collectives + cuBLAS + SDPA")


def lm(body, dim, dev, dtype):
    """Embedding -> ``body`` -> RMSNorm -> head, a ``torch.nn.Module`` around ``body`` (sharded
    or not); its replicated weights are marked for ``sync_grads``, and start equal on every
    rank and in the unsharded model (bf16-rounded, from one seed)."""
    import torch

    import syncopate.nn as snn

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            g = torch.Generator(device=dev)
            g.manual_seed(0)
            self.body = body
            self.embed = torch.nn.Parameter(
                torch.randn(VOCAB, dim, generator=g, device=dev).to(torch.bfloat16).float())
            self.head = torch.nn.Parameter(
                (torch.randn(dim, VOCAB, generator=g, device=dev) * dim ** -0.5)
                .to(torch.bfloat16).float())
            self.norm = torch.nn.Parameter(torch.ones(dim, device=dev))
            for p in (self.embed, self.head, self.norm):
                snn.parallel.mark_replicated(p)

        def forward(self, tokens):
            y = self.body(self.embed[tokens].to(dtype))
            return snn.rms_norm(y.float(), self.norm) @ self.head
    return LM()


def _train(rank, W, comm, layout, args, dev):
    import time

    import torch

    import syncopate.nn as snn
    from syncopate.runtime import collectives as dist
    from syncopate.runtime.loopback import current_loopback
    cfg = dict(dim=512, n_heads=8, n_kv_heads=4 if layout == "tp" else 2, ffn_dim=1024,
               head_dim=64)
    bf = torch.bfloat16
    ref_body = snn.ReferenceStack(args.layers, **cfg, seed=1, device=dev)
    with torch.no_grad():
        for p in ref_body.parameters():
            p.copy_(p.to(bf).float())
    body = snn.TransformerStack(args.layers, **cfg, comm=comm, layout=layout,
                                fused=False if args.unfused else None, dtype=bf, device=dev,
                                param_dtype=torch.float32).load_from(ref_body)
    model, ref = lm(body, cfg["dim"], dev, bf), lm(ref_body, cfg["dim"], dev, torch.float32)
    g = torch.Generator(device=dev)
    g.manual_seed(1)
    S = args.seq
    tokens = torch.randint(0, VOCAB, (S, 1), generator=g, device=dev)
    targets = torch.cat([tokens[1:], torch.full((1, 1), -100, device=dev)])  # next token
    n = int((targets >= 0).sum())
    mine, my_targets = body.shard_sequence(tokens), body.shard_sequence(targets)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    ropt = torch.optim.AdamW(ref.parameters(), lr=LR)
    ce = torch.nn.functional.cross_entropy
    lines = []
    for step in range(args.steps):
        t0 = time.perf_counter()
        loss = ce(model(mine).flatten(0, 1), my_targets.flatten(), reduction="sum") / n
        opt.zero_grad()
        loss.backward()
        synced = snn.sync_grads(model, body.par)
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total, group=body.par.group)
        torch.cuda.current_stream().synchronize()
        dt = time.perf_counter() - t0
        rloss = ce(ref(tokens).flatten(0, 1), targets.flatten(), reduction="sum") / n
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        a, b = float(total), float(rloss.detach())
        when = "" if current_loopback() is not None else f", {dt * 1e3:.1f} ms"
        lines.append(f"{layout} step {step}: loss {a:.4f} (unsharded {b:.4f}, relative "
                     f"difference {abs(a - b) / b:.1e}{when})")
    lines.append(f"{layout}: {synced} replicated parameters synced per step; "
                 f"{snn.memory_held(model, comm)}")
    return lines


def main(rank, world_size, args):
    """Train a small model of syncopate.nn blocks (both layouts) next to the unsharded one."""
    import torch

    from syncopate.runtime import Communicator
    dev = torch.device("cuda", torch.cuda.current_device())
    comm = Communicator()
    lines = []
    for layout in (("tp", "cp") if args.layout == "both" else (args.layout,)):
        lines += _train(rank, world_size, comm, layout, args, dev)
    return lines


if __name__ == "__main__":
    raise SystemExit(launch(main, options))
