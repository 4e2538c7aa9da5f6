"""Ring attention: sequence-parallel attention, K/V gathered inside the attention kernel.

Every rank holds its shard of one long sequence (contiguous shards, or the zigzag layout for
causal attention: docs/attention.md) and gets attention of its queries over the whole
sequence.  The example builds the full sequence with the same seed on every rank, cuts each
rank's shard, runs ``syncopate.ops.ring_attention`` and checks the result against PyTorch's
SDPA on the whole sequence (fp32), for non-causal and causal attention, over several launches.

    torchrun --nproc-per-node 2 examples/ring_attention.py
    python examples/ring_attention.py --loopback 2
"""

from _launch import launch


def main(rank, world_size):
    """Ring attention vs SDPA on the whole sequence."""
    import torch
    import torch.nn.functional as F

    from syncopate.kernels.attention_zigzag import zigzag_shard
    from syncopate.ops import ring_attention
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist

    comm = Communicator()
    W, dev = world_size, comm.device
    B, Hq, Hkv, D, Sl = 1, 4, 1, 128, 256  # 256 tokens per rank, GQA 4:1
    S = Sl * W

    def shard(x, causal):
        if causal:  # zigzag: segments rank and 2W-1-rank of 2W
            return zigzag_shard(x, W, rank).contiguous()
        return x[:, :, rank * Sl:(rank + 1) * Sl].contiguous()

    # Inputs and references of every launch first, then a barrier: in loopback a rank that
    # loads a CUDA module (a torch op's first use) while a peer's fused kernel spins waiting
    # for it would deadlock (docs/loopback.md), so no new op runs between fused launches.
    cases = []
    for causal in (False, True):
        for step in range(3):
            g = torch.Generator(device=dev).manual_seed(100 + step)  # same on every rank
            q, k, v = (torch.randn(B, h, S, D, generator=g, device=dev).to(torch.bfloat16)
                       for h in (Hq, Hkv, Hkv))
            ref = F.scaled_dot_product_attention(q.float(), k.float().repeat_interleave(4, 1),
                                                 v.float().repeat_interleave(4, 1),
                                                 is_causal=causal)
            o = torch.full((B, Hq, Sl, D), float("nan"), device=dev, dtype=torch.bfloat16)
            lse = torch.empty((B, Hq, Sl), device=dev)
            cases.append((causal, step, shard(q, causal), shard(k, causal), shard(v, causal),
                          shard(ref, causal), o, lse))
    float((cases[0][6].float() - cases[0][5]).abs().max())  # the comparison's kernels, loaded
    torch.cuda.current_stream().synchronize()  # this rank only (loopback)
    dist.barrier(group=comm.group)
    lines = []
    for causal, step, qs, ks, vs, ref, o, lse in cases:
        ring_attention(qs, ks, vs, comm, causal=causal, out=(o, lse))
        torch.cuda.current_stream().synchronize()  # this rank only (loopback)
        comm.check()
        err = float((o.float() - ref).abs().max())
        status = "OK" if err < 3e-2 else "MISMATCH"
        lines.append(f"ring_attention causal={causal} launch {step}: max |o - sdpa| = "
                     f"{err:.2e} {status}")
    comm.close()
    return lines


if __name__ == "__main__":
    raise SystemExit(launch(main))
