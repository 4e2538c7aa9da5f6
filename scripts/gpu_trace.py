"""Record one real timeline per op in one-GPU loopback (issue 14, section 3).

    SYNCOPATE_TRACE=1 python scripts/gpu_trace.py OUT_DIR [W] [op,op,...]

Runs ag_gemm, gemm_rs, gemm_ar, ring_attention, ulysses_attention, moe_dispatch_gemm and the
MoE layer (dispatch + combine: ``moe_gemm_combine``, two fused kernels) once each (after a
warm-up launch) on W virtual ranks (default 2) with tracing on, gathers every rank's events and
writes, per op (per fused kernel ``i`` when an op runs several: ``<op>.<i>``),
``OUT_DIR/<op>.trace.json`` (Chrome / Perfetto) and ``OUT_DIR/<op>.png``, plus the summary
lines.  Loopback shares one GPU between the ranks: the timeline shows the protocol (who waited
for which chunk, when chunks were signalled), not multi-GPU timing.
"""

from __future__ import annotations

import os
import sys

# before torch starts CUDA: in loopback a kernel loaded lazily at its first launch can wait for
# another virtual rank's spinning kernel (docs/loopback.md, "Module loading"). Without it the
# MoE dispatch's first fused launch timed out on an H200, most likely because its strided copy
# of the counts, the first of its kind in this process, ran right after the launch
# (scripts/gpu_moe_first_launch.py tells the causes apart).
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))

from syncopate import settings  # noqa: E402  (the checkout's, from the path above)


def _fused_kernels(comm):
    from syncopate.runtime.fused import FusedKernel
    return [v for v in comm.cache.values() if isinstance(v, FusedKernel)
            and v.last_config is not None]


def worker(rank, W, out_dir, ops=()):
    import torch

    from syncopate import trace as tr
    from syncopate.kernels.grouped_gemm_launch import GroupedGemmConfig
    from syncopate.ops import (ag_gemm, gemm_ar, gemm_rs, moe_dispatch_gemm, moe_gemm_combine,
                               ring_attention, ulysses_attention)
    from syncopate.runtime import Communicator
    comm = Communicator()
    dev = comm.device
    lines = []
    torch.manual_seed(rank)
    a = torch.randn(512, 1024, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1024, 1024, device=dev, dtype=torch.bfloat16)
    q = torch.randn(1, 4, 256, 128, device=dev, dtype=torch.bfloat16)
    # fused=True: at these small shapes the ops' default choice may be the unfused path, and the
    # timeline is the fused kernel's
    runs = {"ag_gemm": lambda: ag_gemm(a, b, comm, split=2, fused=True),
            "gemm_rs": lambda: gemm_rs(torch.randn(512 * W, 1024, device=dev,
                                                   dtype=torch.bfloat16), b, comm, fused=True),
            "gemm_ar": lambda: gemm_ar(a, b, comm, split=2, fused=True),
            "ring_attention": lambda: ring_attention(q, q[:, :1], q[:, :1], comm, causal=True,
                                                     fused=True),
            "ulysses_attention": lambda: ulysses_attention(
                q, q[:, :2].contiguous(), q[:, :2].contiguous(), comm, causal=True, fused=True)}
    # MoE dispatch: 4 experts per rank, top-2 of random experts, 256 tokens per rank
    E, T, C = 4 * W, 256, 128   # in loopback every rank's 4 * W * 2 * 4 tiles are co-resident
    g = torch.Generator(device="cpu").manual_seed(7)  # the same weights on every rank
    ids = torch.stack([torch.randperm(E)[:2] for _ in range(T)]).to(dev)
    x = torch.randn(T, 1024, device=dev, dtype=torch.bfloat16)
    w = (torch.randn(E, 1024, 256, generator=g) / 32).to(torch.bfloat16)[rank * 4:rank * 4 + 4]
    w = w.contiguous().to(dev)
    runs["moe_dispatch_gemm"] = lambda: moe_dispatch_gemm(
        x, ids, torch.rand(T, 2, device=dev), w, comm, capacity=C,
        config=GroupedGemmConfig(64, 64, 64, 4, 3), fused=True)
    # MoE combine after a dispatch of the same tokens (its second expert GEMM: F = 256 -> 512)
    w2 = (torch.randn(E, 256, 512, generator=g) / 16).to(torch.bfloat16)[rank * 4:rank * 4 + 4]
    w2 = w2.contiguous().to(dev)

    def moe_layer():
        d = runs["moe_dispatch_gemm"]()
        h = torch.nn.functional.silu(d.out.float()).to(torch.bfloat16)
        return moe_gemm_combine(h, w2, d, comm, config=GroupedGemmConfig(64, 128, 64, 4, 3),
                                fused=True)
    runs["moe_gemm_combine"] = moe_layer
    only = set(ops or runs)
    runs = {k: v for k, v in runs.items() if k in only}
    for name, fn in runs.items():
        fn()  # compiles; the traced launch is the second
        torch.cuda.current_stream().synchronize()
        for fk in _fused_kernels(comm):
            fk.trace_events(reset=True)
        fn()
        torch.cuda.current_stream().synchronize()
        kernels = _fused_kernels(comm)
        for i, fk in enumerate(kernels):  # the MoE layer runs two fused kernels
            stem = name if len(kernels) == 1 else f"{name}.{i}"
            events, dropped = fk.gather_trace(os.path.join(out_dir, f"{stem}.trace.json"),
                                              reset=True)
            if rank == 0:
                a_ = fk.last_config.abi
                with open(os.path.join(out_dir, f"{stem}.png"), "wb") as f:
                    f.write(tr.timeline_png(events, comm_programs=a_.comm_programs))
                lines.append(f"{stem}: {len(events)} events, {dropped} dropped")
                lines += [f"  {s}" for s in tr.summary(events, a_.comm_programs,
                                                         num_chunks=a_.num_chunks,
                                                         world_size=a_.world_size)]
        comm.clear_cache()
    comm.close()
    return lines


def main() -> int:
    import torch

    from syncopate.runtime.loopback import run_loopback
    out = sys.argv[1]
    W = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    ops = tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else ()
    os.makedirs(out, exist_ok=True)
    if not settings.TRACE.get():
        print("set SYNCOPATE_TRACE=1 (the ops' kernels are compiled with tracing then)",
              file=sys.stderr)
        return 2
    res = run_loopback(worker, W, out, ops, device=torch.device("cuda", 0), timeout_s=400)
    bad = 0
    for r, (status, value) in enumerate(res):
        if status != "ok":
            bad = 1
            print(f"rank {r} failed:\n{value}", file=sys.stderr)
        elif r == 0:
            print("\n".join(value))
    return bad


if __name__ == "__main__":
    sys.exit(main())
