"""Where the time of the default fused GEMM+RS goes beyond the GEMM (GPU machine, torchrun).

The benchmark says the epilogue variant of GEMM+RS is 1.07-1.16x of ideal (= the local GEMM
alone); this script splits that gap, in device time with the benchmark's Timer (L2 flushed,
host run-ahead, median, max over ranks), for each shape given:

* ``op``          -- ``gemm_rs(a, b, comm, out=out)`` as a user calls it (the default variant);
* ``kernel``      -- the same call without the copy of this rank's rows out of the symmetric
  buffer, i.e. the FusedKernel launch alone (ENTRY handshake, fused kernel, copies, waits);
* ``copy out``    -- that copy alone (``out.copy_(C[rows])``: M/W x N elements);
* ``gemm``        -- the local kernel alone with the op's config (GROUP_M as the op chose it);
* ``gemm, out``   -- the local kernel writing its partial straight into the symmetric buffer
  (no flags, no epilogue adds): the cost of the buffer alone, for reference.

``kernel - gemm`` is what fusion costs inside the launch (handshake, the epilogue's waits and
slot loads, copy-engine traffic); ``op - kernel`` is the copy out.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
        torchrun --nproc-per-node 2 scripts/gpu_rs_breakdown.py [M,N,K ...]
"""

from __future__ import annotations

import sys


def main(argv) -> int:
    from syncopate.bench.runs import init_distributed
    from syncopate.bench.timer import Timer
    init_distributed()
    import torch
    import torch.distributed as dist

    from syncopate.ops import gemm_rs
    from syncopate.ops.driver import gemm_call, resolve_config, run_local
    from syncopate.ops.gemm_rs import resolve_variant
    from syncopate.runtime import Communicator

    comm = Communicator()
    W, me = comm.world_size, comm.rank
    timer = Timer(comm.device, iters=30, warmup=3)
    shapes = [tuple(int(x) for x in s.split(",")) for s in argv] or [(8192, 4096, 14336),
                                                                      (8192, 8192, 28672)]
    rows = []
    for M, N, K in shapes:
        Kl = K // W
        dtype = torch.bfloat16
        g = torch.Generator(device=comm.device)
        g.manual_seed(5 + me)
        a = torch.randn(M, Kl, generator=g, device=comm.device).to(dtype)
        b = torch.randn(Kl, N, generator=g, device=comm.device).to(dtype)
        out = torch.empty(M // W, N, device=comm.device, dtype=dtype)
        cfg = resolve_config("tma", M, N, Kl, dtype)
        be, red, ecfg = resolve_variant(M, N, Kl, W, dtype, cfg, False)
        variant = (be, red)
        op = lambda: gemm_rs(a, b, comm, out=out)  # noqa: E731
        op()
        torch.cuda.synchronize()
        comm.check()
        preps = list(comm.cache.get("ops.prepared", {}).values())
        if len(preps) != 1:
            raise RuntimeError(f"expected the op's one prepared call, found {len(preps)}")
        prep = preps[0]
        args = prep.args.copy()
        args[prep.a_index] = a
        kernel = lambda: prep.fk[prep.grid](*args)  # noqa: E731
        copy_out = lambda: out.copy_(prep.result)  # noqa: E731
        partial = torch.empty(M, N, device=comm.device, dtype=dtype)
        local = gemm_call("tma", a, b, partial, ecfg)
        C = args[local.fn.arg_names.index("c_ptr")]
        into_c = gemm_call("tma", a, b, C, ecfg)
        t = {"op": timer(op), "kernel": timer(kernel), "copy out": timer(copy_out),
             "gemm": timer(lambda: run_local(local)), "gemm, out": timer(lambda: run_local(into_c))}
        comm.check()
        rows.append(((M, N, K), "+".join(variant), t))
        comm.clear_cache()  # the next shape finds only its own prepared call
    dist.barrier()
    if me == 0:
        print(f"{'M x N x K':>20}  {'variant':>12}  " + "  ".join(f"{k:>9}" for k in rows[0][2])
              + "  kernel-gemm  op-kernel")
        for shape, variant, t in rows:
            print(f"{'x'.join(map(str, shape)):>20}  {variant:>12}  "
                  + "  ".join(f"{v:9.3f}" for v in t.values())
                  + f"  {t['kernel'] - t['gemm']:11.3f}  {t['op'] - t['kernel']:9.3f}")
        print("times in ms (median device time, max over ranks)")
    comm.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
