"""Step-by-step check of the runtime's sync kernels on 2 GPUs (torchrun --nproc-per-node 2).

Each step synchronises and reports, so the first failing kernel is named (use with
CUDA_LAUNCH_BLOCKING=1 and, for a memory error, under compute-sanitizer)."""
import sys
import traceback

import torch
import torch.distributed as dist

from syncopate import abi
from syncopate.runtime import Communicator
from syncopate.runtime import sync_kernels as sk


def step(name, fn):
    try:
        fn()
        torch.cuda.synchronize()
        print(f"[rank {dist.get_rank()}] ok   {name}", flush=True)
    except Exception as e:  # noqa: BLE001
        print(f"[rank {dist.get_rank()}] FAIL {name}: {type(e).__name__}: {e}", flush=True)
        traceback.print_exc()
        sys.exit(1)


def main():
    dist.init_process_group("nccl")
    rank, W = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(rank)
    comm = Communicator()
    lay = abi.FlagLayout(num_chunks=4, world_size=W)
    flags = comm.new_flags(lay.words)
    print(f"[rank {rank}] flags {flags.data_ptr():#x} diag {comm.diag_addr:#x} "
          f"peer_ptrs {[hex(p) for p in comm.peer_ptrs(flags)]}", flush=True)
    peers = torch.tensor([comm.peer_ptrs(flags)], dtype=torch.int64, device=comm.device)
    step("signal_entry", lambda: sk.signal_entry(peers, lay.entry(rank), 1, W))
    dist.barrier()
    step("wait_flag local entry", lambda: sk.wait_flag(flags.data_ptr(), lay.entry(0), 1, comm.diag_addr,
                                                     rank=rank, kind=abi.KIND_ENTRY, epoch=1,
                                                     timeout_ns=int(5e9), count=W))
    step("add_flag remote", lambda: [sk.add_flag(comm.peer_ptrs(flags)[p], lay.consumed, 2)
                                     for p in range(W) if p != rank])
    dist.barrier()
    step("wait consumed", lambda: sk.wait_flag(flags.data_ptr(), lay.consumed, 2 * (W - 1), comm.diag_addr,
                                               rank=rank, kind=abi.KIND_CONSUMED, epoch=1,
                                               timeout_ns=int(5e9)))
    step("watchdog", lambda: sk.wait_flag(flags.data_ptr(), lay.chunk(2), 1, comm.diag_addr, rank=rank,
                                          kind=abi.KIND_CHUNK, epoch=4, timeout_ns=int(0.3e9)))
    print(f"[rank {rank}] record {comm.diag_words()}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
