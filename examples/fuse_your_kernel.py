"""Fuse your own Triton kernel with a collective: a row-wise kernel over an all-gathered tensor.

The kernel below is written for one GPU and knows nothing about communication: each program
reads ``BLOCK_M`` rows of ``X`` ([M, K], row-major) and writes their scaled sums of squares.
To run it on an ``X`` whose rows are sharded across the ranks:

1. describe the communication as a schedule: ``all_gather([M, K], "bf16", W)`` -- rank ``r``
   starts with rows ``[r M/W, (r+1) M/W)`` and ends with all of them;
2. ``syncopate.fuse(kernel, schedule, operand="x_ptr", comm=comm)`` -- which kernel parameter
   is the schedule's tensor;
3. put X in symmetric memory (``comm.empty``), copy this rank's rows into its slot after
   ``fk.before_staging()`` (peers finished reading the previous launch's rows), and launch
   with exactly the unfused kernel's arguments (constexprs included): ``fk[grid](...)``.

The compiler finds which rows each program reads, places a wait for exactly the chunks it
needs, adds comm programs that pull the peers' rows, and checks the result: it is compared
here, bit for bit, with the same kernel run unfused on the whole tensor.

    torchrun --nproc-per-node 2 examples/fuse_your_kernel.py
    python examples/fuse_your_kernel.py --loopback 2
"""

import triton
import triton.language as tl
from _launch import launch


@triton.jit
def row_energy_kernel(x_ptr, out_ptr, M, scale, K: tl.constexpr, BLOCK_M: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, K)
    mask = rows < M
    x = tl.load(x_ptr + rows[:, None] * K + cols[None, :], mask=mask[:, None], other=0.0)
    x = x.to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(x * x, 1) * scale, mask=mask)


def main(rank, world_size):
    """Fuse a row-wise kernel with an all-gather and check it bit for bit."""
    import torch

    import syncopate
    from syncopate.runtime import Communicator
    from syncopate.runtime import collectives as dist
    from syncopate.schedule import all_gather

    comm = Communicator()
    W, dev = world_size, comm.device
    M, K, BLOCK_M = 1024 * W, 256, 32
    rows = M // W
    schedule = all_gather([M, K], "bf16", W, split=2)  # 2 chunks per shard: start sooner
    fk = syncopate.fuse(row_energy_kernel, schedule, operand="x_ptr", comm=comm,
                        comm_programs=4)
    X = comm.empty((M, K), torch.bfloat16)  # symmetric: peers read this rank's rows
    grid = (triton.cdiv(M, BLOCK_M),)
    # Every launch's inputs and its reference (the unfused kernel on the whole X, which every
    # rank can build: the shards come from per-rank seeds) first, then a barrier: in loopback
    # a rank that loads a CUDA module (a kernel's first use) while a peer's fused kernel spins
    # waiting for it would deadlock (docs/loopback.md).
    launches = []
    for step in range(3):
        shards = [torch.randn(rows, K, generator=torch.Generator(device=dev).manual_seed(
            100 * step + r), device=dev).to(torch.bfloat16) for r in range(W)]
        ref = torch.full((M,), float("nan"), device=dev)
        row_energy_kernel[grid](torch.cat(shards), ref, M, 0.5, K=K, BLOCK_M=BLOCK_M)
        out = torch.full((M,), float("nan"), device=dev)
        launches.append((shards[rank], out, ref))
    torch.equal(launches[0][1], launches[0][2])  # the comparison's kernel, loaded
    torch.cuda.current_stream().synchronize()  # this rank only (loopback)
    dist.barrier(group=comm.group)
    lines = [f"schedule: {len(schedule.chunks)} chunks, {W} ranks; fused with 4 comm programs"]
    for step, (mine, out, ref) in enumerate(launches):
        fk.before_staging()
        X[rank * rows:(rank + 1) * rows].copy_(mine)
        fk[grid](X, out, M, 0.5, K, BLOCK_M)
        torch.cuda.current_stream().synchronize()  # this rank only (loopback)
        comm.check()
        same = torch.equal(out, ref)
        lines.append(f"launch {step}: fused == unfused kernel on the whole X, bit for bit: "
                     f"{same}")
    comm.close()
    return lines


if __name__ == "__main__":
    raise SystemExit(launch(main))
