"""The cost model of sequence-parallel attention: ring attention over a K/V all-gather, and
Ulysses (head-wise all-to-all) with the variant that fuses the QKV projection's GEMM with the
first all-to-all (:mod:`.ulysses_cost`, built on this module's attention time;
``syncopate explain ulysses``, docs/ulysses.md).

Why separate from :mod:`.cost` (GEMMs): attention's compute grows with the *square* of the
sequence and its communication linearly, and the inner-loop remap makes a rank start on its own
K/V blocks, so the model is different in shape: the fused time is the attention's compute plus
whatever part of the first remote block's transfer the local blocks do not cover, and the
comm programs only need to keep the K/V stream ahead of the KV loop.

Figures (one H200, bf16, D = 128, our kernel, ``scripts/bench_attention.py``,
bench/results/2026-12-01-h200x1-attention): 391-438 TF/s non-causal, 269-362 TF/s causal (the
smaller figure at 4k tokens); the model takes 420 and 340.  FLOPs per KV block of ``BLOCK_N``
keys: ``4 * BLOCK_M * BLOCK_N * D`` per query block; causal attention does about half of the
square (the zigzag layout gives every rank the same half).
"""

from __future__ import annotations

from .cost import _SM_ALPHA_S, _sm_bandwidth

#: our attention kernel's measured throughput on one H200 (see the module docstring)
ATTN_FLOPS = {False: 420e12, True: 340e12}
#: comm program counts tried, smallest first
PROGRAMS = (2, 4, 8, 16)
#: the K/V stream may take at most this share of the compute time
COMM_SHARE = 0.5


def attention_flops(B: int, Hq: int, Sq: int, Skv: int, D: int, causal: bool) -> float:
    """FLOPs of one attention (two matmuls); causal counts the visible half."""
    f = 4.0 * B * Hq * Sq * Skv * D
    return f / 2 if causal else f


def attention_time(B: int, Hq: int, Sq: int, Skv: int, D: int, causal: bool) -> float:
    return attention_flops(B, Hq, Sq, Skv, D, causal) / ATTN_FLOPS[bool(causal)]


def ring_kv_bytes(B: int, Hkv: int, S: int, D: int, world_size: int, elem_bytes: int = 2) -> int:
    """Bytes of K and V a rank receives: every other rank's shard of both."""
    shard = S // world_size
    return 2 * B * Hkv * shard * D * elem_bytes * (world_size - 1)


def choose_ring_plan(B: int, Hq: int, Hkv: int, S: int, D: int, world_size: int,
                     causal: bool = False, elem_bytes: int = 2,
                     comm_programs: int | None = None) -> dict:
    """``{"comm_programs", "split", "compute_s", "comm_s", "fused_s", "serial_s"}`` for ring
    attention of a ``S``-token sequence (this rank's queries: ``S / W``).

    The comm programs: the fewest of :data:`PROGRAMS` whose stream of K/V takes at most
    :data:`COMM_SHARE` of the compute (more would take SMs from the attention for nothing), or
    the caller's.  ``split`` 1: a rank works on its own blocks first (1/W of its compute),
    which hides the first remote block unless the link is very slow; later blocks arrive
    while earlier ones are computed."""
    W = world_size
    compute = attention_time(B, Hq, S // W, S, D, causal)
    nbytes = ring_kv_bytes(B, Hkv, S, D, W, elem_bytes)
    cands = [comm_programs] if comm_programs is not None else list(PROGRAMS)
    pick = next((p for p in cands if nbytes / _sm_bandwidth(p) <= COMM_SHARE * compute),
                cands[-1])
    bw = _sm_bandwidth(pick)
    comm = _SM_ALPHA_S * (W - 1) + nbytes / bw
    first = _SM_ALPHA_S + nbytes / (W - 1) / bw if W > 1 else 0.0
    local = compute / W
    fused = max(compute + max(0.0, first - local), comm)
    return {"comm_programs": pick, "split": 1, "compute_s": compute, "comm_s": comm,
            "fused_s": fused, "serial_s": compute + comm}


__all__ = ["ATTN_FLOPS", "attention_flops", "attention_time", "choose_ring_plan",
           "ring_kv_bytes"]
