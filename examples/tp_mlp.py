"""A tensor-parallel MLP with the fused ops, forward and backward, against the unsharded model.

The MLP is ``y = gelu(x @ W1) @ W2`` with hidden size H split across the ranks: rank ``r``
holds the column shard ``W1[:, r H/W : (r+1) H/W]`` and the row shard ``W2[r H/W : ..., :]``,
and the tokens are sharded on the sequence (``x`` ``[M/W, K]`` per rank), as in
sequence-parallel Megatron layers.  Forward: ``ag_gemm`` (all-gather of x fused with the first
GEMM), then ``gemm_rs`` (the second GEMM fused with the reduce-scatter of its partial sums).
Backward (autograd, ``syncopate.torch_ops``): ``ag_gemm``'s uses ``gemm_rs`` and ``gemm_rs``'s
uses ``ag_gemm``, so both directions are fused.  The example compares the output and all three
gradients with the same MLP unsharded (fp32, every rank builds it from the same seed), and runs
the layer under ``torch.compile(fullgraph=True)`` too.

    torchrun --nproc-per-node 2 examples/tp_mlp.py
    python examples/tp_mlp.py --loopback 2        # forward only (see below)

In loopback the backward is skipped: autograd runs a CUDA backward on its own engine thread,
which is not one of the loopback ranks' threads (docs/torch.md).
"""

from _launch import launch


def main(rank, world_size):
    """A tensor-parallel MLP, fused forward and backward, vs the unsharded model."""
    import torch

    import syncopate.torch_ops as sto
    from syncopate.runtime import collectives as dist
    from syncopate.runtime.loopback import current_loopback

    loopback = current_loopback() is not None
    W, dev = world_size, torch.device("cuda", torch.cuda.current_device())
    M, K, H = 512 * W, 1024, 2048 * W
    g = torch.Generator(device=dev).manual_seed(0)  # the same full model on every rank
    x = torch.randn(M, K, device=dev, generator=g) * 0.5
    w1 = torch.randn(K, H, device=dev, generator=g) / K ** 0.5
    w2 = torch.randn(H, K, device=dev, generator=g) / H ** 0.5
    bf = torch.bfloat16
    hs, ms = H // W, M // W
    xs = x[rank * ms:(rank + 1) * ms].to(bf).requires_grad_(not loopback)
    w1s = w1[:, rank * hs:(rank + 1) * hs].to(bf).contiguous().requires_grad_(not loopback)
    w2s = w2[rank * hs:(rank + 1) * hs].to(bf).contiguous().requires_grad_(not loopback)
    name = sto.group_name(dist.default_group())

    def layer(a, b1, b2):
        return sto.gemm_rs(torch.nn.functional.gelu(sto.ag_gemm(a, b1, name)), b2, name)

    # the unsharded reference, fp32 on the bf16-rounded inputs
    xr, w1r, w2r = (t.to(bf).float().requires_grad_() for t in (x, w1, w2))
    yr = torch.nn.functional.gelu(xr @ w1r) @ w2r
    lines = []
    y = layer(xs, w1s, w2s)
    err = float((y.float() - yr[rank * ms:(rank + 1) * ms]).abs().max())
    lines.append(f"forward: max |y - unsharded| = {err:.2e} {'OK' if err < 5e-2 else 'MISMATCH'}")
    yc = torch.compile(layer, fullgraph=True)(xs, w1s, w2s)
    lines.append(f"torch.compile(fullgraph=True): same as eager: {torch.equal(yc, y)}")
    if loopback:
        lines.append("backward: skipped in loopback (autograd's CUDA thread is not a rank)")
        return lines
    dy = torch.randn(M, K, device=dev, generator=g).to(bf)
    y.backward(dy[rank * ms:(rank + 1) * ms])
    yr.backward(dy.float())
    for what, got, ref in (("dx", xs.grad, xr.grad[rank * ms:(rank + 1) * ms]),
                           ("dW1", w1s.grad, w1r.grad[:, rank * hs:(rank + 1) * hs]),
                           ("dW2", w2s.grad, w2r.grad[rank * hs:(rank + 1) * hs])):
        rel = float((got.float() - ref).norm() / ref.norm())
        lines.append(f"backward {what}: relative error {rel:.2e} {'OK' if rel < 2e-2 else 'MISMATCH'}")
    return lines


if __name__ == "__main__":
    raise SystemExit(launch(main))
