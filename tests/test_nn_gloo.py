"""syncopate.nn across processes: two CPU processes with a gloo process group (torch's
collectives, not the loopback group), the tensor+sequence-parallel and the context-parallel
block with ``fused=False`` (the plain composition: collectives + matmuls + SDPA) and on the
registered ops (their CPU composition), against the unsharded block: output, input gradient and
every weight gradient after ``sync_grads``."""

from __future__ import annotations

import os
import sys

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "gpu"))
from dist_harness import run_ranks  # noqa: E402

DIM, HQ, HKV, FFN, HD, SEQ, BATCH = 64, 4, 2, 96, 16, 16, 2


def _rank(rank, W, layout, fused, cp_method="ring"):
    """This rank's block against the unsharded one (both built from one seed on every rank);
    the worst relative differences."""
    import syncopate.nn as snn
    ref = snn.ReferenceBlock(DIM, HQ, HKV, FFN, head_dim=HD, seed=3)
    g = torch.Generator().manual_seed(4)
    x, gy = torch.randn(SEQ, BATCH, DIM, generator=g), torch.randn(SEQ, BATCH, DIM, generator=g)
    xr = x.clone().requires_grad_()
    (ref(xr) * gy).sum().backward()
    blk = snn.TransformerBlock(DIM, HQ, HKV, FFN, None, layout, fused, dtype=torch.float32,
                               head_dim=HD, cp_method=cp_method).load_from(ref)
    xs = blk.shard_sequence(x).requires_grad_()
    y = blk(xs)
    (y * blk.shard_sequence(gy)).sum().backward()
    snn.sync_grads(blk, blk.par)
    pos = blk.positions(SEQ)
    with torch.no_grad():
        want = ref(x)[pos]
        for p in blk.parameters():
            p.copy_(p.grad)
    grads = dict(blk.reference().named_parameters())
    errs = {"y": float((y - want).abs().max()), "dx": float((xs.grad - xr.grad[pos]).abs().max())}
    errs.update({n: float((grads[n] - p.grad).abs().max()) for n, p in ref.named_parameters()})
    return errs


@pytest.mark.parametrize("fused", [False, None], ids=["unfused", "ops"])
@pytest.mark.parametrize("layout,cp_method", [("tp", "ring"), ("cp", "ring"), ("cp", "ulysses")],
                         ids=["tp", "cp-ring", "cp-ulysses"])
def test_block_on_two_gloo_processes_matches_the_unsharded_block(layout, cp_method, fused):
    """Ulysses' all-to-alls (heads <-> sequence) go through gloo's all_to_all here: the one
    path the loopback tests cannot cover with real collectives on a CPU."""
    for errs in run_ranks(_rank, layout, fused, cp_method, world_size=2, timeout=240,
                          pg_backend="gloo"):
        assert max(errs.values()) < 1e-4, errs
