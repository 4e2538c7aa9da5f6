"""How the examples start their ranks: ``torchrun`` (one process per GPU) or one-GPU loopback.

    torchrun --nproc-per-node 2 examples/ring_attention.py     # 2 GPUs
    python examples/ring_attention.py --loopback 2             # 2 virtual ranks on one GPU

Every example defines ``main(rank, world_size) -> list[str]`` (the lines it checked) and calls
``launch(main)``.  Loopback (docs/loopback.md) runs the ranks as threads of this process on
GPU 0: correct for checking, meaningless for timing.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys

# the examples run from a checkout without installing: put the package on the path
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(_ROOT, "python"))
sys.path.insert(0, _ROOT)

for _k, _v in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
               ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ.setdefault(_k, _v)


def launch(main, options=None) -> int:
    """Run ``main(rank, world_size)`` on every rank; with ``options`` (a function that adds
    arguments to the parser) ``main(rank, world_size, args)``."""
    p = argparse.ArgumentParser(description=(main.__doc__ or "").strip().splitlines()[0])
    p.add_argument("--loopback", type=int, default=None,
                   help="W virtual ranks on one GPU instead of torchrun's processes")
    if options is not None:
        options(p)
    args = p.parse_args()
    if options is not None:
        main = functools.partial(main, args=args)
    import torch
    if not torch.cuda.is_available():
        print("this example needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.loopback:
        from syncopate.runtime.loopback import run_loopback
        results = run_loopback(main, args.loopback, device=torch.device("cuda", 0))
        ok = True
        for rank, (status, value) in enumerate(results):
            if status != "ok":
                ok = False
                print(f"rank {rank} FAILED:\n{value}", file=sys.stderr)
                continue
            for line in value:
                print(f"[rank {rank}] {line}")
        return 0 if ok else 1
    if "RANK" not in os.environ:
        print(f"run under torchrun (torchrun --nproc-per-node 2 {sys.argv[0]}) or with "
              f"--loopback W on one GPU", file=sys.stderr)
        return 2
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    try:
        for line in main(dist.get_rank(), dist.get_world_size()):
            print(f"[rank {dist.get_rank()}] {line}")
    finally:
        dist.destroy_process_group()
    return 0
