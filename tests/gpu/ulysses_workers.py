"""Per-rank bodies of the Ulysses attention GPU test (tests/gpu/test_multi_gpu.py; one process
per GPU, or W threads of one process in loopback: SYNCOPATE_GPU_LOOPBACK=W).  Each returns the
list of problems of every case (empty when all passed); ``INFO`` lines carry the measured error.
"""

from __future__ import annotations

from gpu_workers import _rand, _rel


def _ulysses_case(comm, case, seed, launches=3):
    """One ``ulysses_attention`` case, ``launches`` times with fresh inputs: the fused output
    against SDPA (fp32) on the gathered sequence (relative error) and bitwise against the
    unfused path (``all_to_all_single`` + the same local kernel + back). Returns problems."""
    import torch

    from syncopate.ops import ulysses_attention
    from syncopate.runtime import collectives as dist

    B, Hq, Hkv, Sl, D, dtype_name, causal, mode = case
    dtype = getattr(torch, dtype_name)
    W, dev = comm.world_size, comm.device
    problems = []
    for it in range(launches):
        q = _rand((B, Hq, Sl, D), dtype, seed * 100 + it * 10 + comm.rank, dev)
        k = _rand((B, Hkv, Sl, D), dtype, seed * 100 + it * 10 + 4 + comm.rank, dev)
        v = _rand((B, Hkv, Sl, D), dtype, seed * 100 + it * 10 + 8 + comm.rank, dev)
        out = ulysses_attention(q, k, v, comm, causal=causal, mode=mode, fused=True)
        ref = ulysses_attention(q, k, v, comm, causal=causal, fused=False)
        gathered = []
        for t in (q, k, v):
            g = torch.empty((W,) + tuple(t.shape), device=dev, dtype=dtype)
            dist.all_gather_into_tensor(g, t.contiguous(), group=comm.group)
            gathered.append(g.permute(1, 2, 0, 3, 4).reshape(B, t.shape[1], W * Sl, D))
        gq, gk, gv = gathered
        sdpa = torch.nn.functional.scaled_dot_product_attention(
            gq.float(), gk.float().repeat_interleave(Hq // Hkv, 1),
            gv.float().repeat_interleave(Hq // Hkv, 1), is_causal=causal)
        mine = sdpa[:, :, comm.rank * Sl:(comm.rank + 1) * Sl]
        torch.cuda.synchronize()
        comm.check()
        if not torch.isfinite(out).all():
            problems.append(f"{case} launch {it}: output has NaN/Inf")
            continue
        err = _rel(out, mine)
        if err > 1e-2:
            problems.append(f"{case} launch {it}: relative error {err:.3g} vs SDPA")
        if not torch.equal(out, ref):
            problems.append(f"{case} launch {it}: fused differs from the unfused path in "
                            f"{int((out != ref).sum())} elements (max "
                            f"{(out.float() - ref.float()).abs().max().item():.3g})")
        if comm.rank == 0 and it == 0:
            problems.append(f"INFO {case}: rel err vs SDPA {err:.2e}")
    return problems


def ulysses_cases(rank, W, cases):
    from syncopate.runtime import Communicator
    comm = Communicator()
    problems = []
    for i, case in enumerate(cases):
        try:
            problems += _ulysses_case(comm, case, seed=700 + i)
        except Exception as e:  # noqa: BLE001 - report every case
            import traceback
            problems.append(f"{case}: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
    comm.close()
    return problems
