"""Host time of one kernel launch by path, and a check that the paths compute the same (GPU
machine, one GPU).

A fused op's eager call is a few launches; on the GPU host each launch through Triton costs
more than torch.matmul's whole call. This script times, for the local TMA GEMM (the fused
kernels' base) and for the one-thread epoch-advance kernel:

* Triton's JIT (``fn[grid](...)``: binding, cache key, launcher);
* Triton's compiled launcher (``CompiledKernel[grid](...)``: argument parsing, a
  ``cuPointerGetAttribute`` per tensor, the scratch from torch's allocator);
* the direct launch (``syncopate.runtime.direct_launch``: one ``cuLaunchKernel`` through
  ctypes), with scalars fixed (the fused kernel's fast path) and re-read (the sync kernels);
* torch.matmul, and for the advance two ``cuStreamWriteValue32`` (the memop advance, withdrawn:
  docs/cuda-graphs.md; timed for comparison);
* an all-gather's staging copy (a 512 x 8192 bf16 shard) enqueued with the GEMM launch, three
  ways: ``Tensor.copy_``, the compiled path's ``cuMemcpyDtoDAsync`` in the same call (what the
  ops' bound launches do), and a Triton copy kernel launched directly (a second
  ``cuLaunchKernel`` instead of a memcpy), host and device time: whether a copy kernel would
  be the cheaper way to stage.

Every GEMM path writes a poisoned output that must equal the JIT's bit for bit (and torch's to
bf16 rounding); every advance path must leave the word at its call count.

    python scripts/gpu_launch_paths.py [--shape M,N,K] [--calls 200]
"""

from __future__ import annotations

import argparse
import sys

from syncopate import settings


def host_us(fn, n: int, sleep_cycles: int = 40_000_000) -> float:
    """Median host microseconds of ``fn()`` over ``n`` calls, the GPU kept ahead
    (``syncopate.bench.calibrate.host_time_s``)."""
    from syncopate.bench.calibrate import host_time_s
    return host_time_s(fn, sleep_cycles, n) * 1e6


def _tma_gemm(M: int, N: int, K: int):
    """``(device, a, b, c, GemmCall, compiled kernel)``: the local TMA GEMM on random bf16
    operands, launched once through the JIT (which compiles it)."""
    import torch

    from syncopate.kernels import ensure_tma_allocator
    from syncopate.ops.driver import gemm_call
    dev = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(M, K, device=dev).to(torch.bfloat16)
    b = torch.randn(K, N, device=dev).to(torch.bfloat16)
    c = torch.empty(M, N, device=dev, dtype=torch.bfloat16)
    call = gemm_call("tma", a, b, c, None)
    ensure_tma_allocator()
    return dev, a, b, c, call, call.fn[call.grid](*call.args, **call.options)


def gemm_paths(M: int, N: int, K: int, calls: int):
    """``[(path, host us, max |diff| vs the JIT's output, bitwise equal)]`` for the TMA GEMM."""
    import torch

    from syncopate.runtime import direct_launch
    dev, a, b, c, call, k = _tma_gemm(M, N, K)
    torch.cuda.synchronize()
    ref = c.clone()
    g3 = tuple(call.grid) + (1,) * (3 - len(call.grid))
    s = torch.cuda.current_stream().cuda_stream
    fixed = direct_launch.build(k, call.args, fixed_scalars=True, device=dev)
    reread = direct_launch.build(k, call.args, fixed_scalars=False, device=dev)
    if fixed is None or reread is None:
        raise SystemExit("direct_launch.build refused the TMA GEMM (see its docstring)")
    paths = [("triton JIT fn[grid](...)", lambda: call.fn[call.grid](*call.args, **call.options)),
             ("triton CompiledKernel[grid](...)", lambda: k[g3](*call.args, stream=s)),
             ("direct, scalars fixed", lambda: fixed(g3, call.args, s)),
             ("direct, scalars re-read", lambda: reread(g3, call.args, s)),
             ("torch.matmul", lambda: torch.matmul(a, b, out=c))]
    rows = []
    for name, fn in paths:
        c.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        diff = (c.float() - ref.float()).abs().max().item()
        rows.append((f"gemm {M}x{N}x{K}: {name}", host_us(fn, calls), diff, torch.equal(c, ref)))
    want = (a.float() @ b.float())
    rel = ((ref.float() - want).norm() / want.norm()).item()
    print(f"TMA GEMM vs fp32 matmul: relative error {rel:.2e}")
    if rel > 1e-2:
        raise SystemExit("the TMA GEMM is wrong: stop")
    return rows


def advance_paths(calls: int):
    """``[(path, host us, final word, expected)]`` for the epoch advance."""
    import torch

    from syncopate.runtime import _cuda
    from syncopate.runtime import sync_kernels as sk
    dev = torch.device("cuda", torch.cuda.current_device())
    rows = []

    def run(name, fn, env):
        word = torch.zeros(1, dtype=torch.int32, device=dev)
        mirror = torch.zeros(1, dtype=torch.int32, device=dev)
        sk._DIRECT.clear()  # rebuilt under this setting
        with settings.scope(DIRECT_LAUNCH=env):
            n = [0]

            def once():
                n[0] += 1
                fn(word.data_ptr(), mirror.data_ptr(), n[0])
            us = host_us(once, calls)
        sk._DIRECT.clear()
        rows.append((f"epoch advance: {name}", us, int(word.item()), n[0]))

    s = torch.cuda.current_stream()
    adv = lambda w, m, e: sk.advance_epoch(w, m, stream=s)  # noqa: E731
    run("advance kernel, triton launcher", adv, "0")
    run("advance kernel, direct", adv, "1")
    h = s.cuda_stream

    def memop(w, m, e):
        _cuda.stream_write_value32(h, w, e)
        _cuda.stream_write_value32(h, m, e)
    run("two cuStreamWriteValue32", memop, "1")
    return rows


def staging_paths(M: int, N: int, K: int, calls: int, rows: int = 512, cols: int = 8192):
    """``[(path, host us, device us of the copy, copy correct)]``: the GEMM launch with a
    staging copy of ``rows x cols`` bf16 enqueued before it, by path."""
    import torch

    from syncopate.runtime import direct_launch
    copy_words = _copy_kernel()
    dev, _, _, _, call, k = _tma_gemm(M, N, K)
    g3 = tuple(call.grid) + (1,) * (3 - len(call.grid))
    s = torch.cuda.current_stream().cuda_stream
    gemm = direct_launch.build(k, call.args, fixed_scalars=True, device=dev)
    src = torch.randn(rows, cols, device=dev).to(torch.bfloat16)
    dst = torch.empty_like(src)
    nbytes = src.numel() * src.element_size()
    words = (dst.view(torch.int64).view(-1), src.view(torch.int64).view(-1), nbytes // 8)
    programs = 2 * torch.cuda.get_device_properties(dev).multi_processor_count
    ck = copy_words[(programs,)](*words, BLOCK=2048)
    copier = direct_launch.build(ck, list(words) + [2048], fixed_scalars=False, device=dev)
    if gemm is None or copier is None or not gemm.copies:
        raise SystemExit("direct launches or the compiled path are unavailable here")
    cargs = list(words) + [2048]
    # what the ops' bound launches do: the GEMM's own compiled launch with the staging kernel
    from syncopate.runtime import sync_kernels
    stage = sync_kernels.stager(dev.index)
    staged = direct_launch.build(k, call.args, fixed_scalars=True, device=dev)
    if stage is None or staged is None:
        raise SystemExit("sync_kernels.stager is unavailable here")
    staged.use_stager(stage)
    paths = [("Tensor.copy_, then the direct GEMM launch",
              lambda: (dst.copy_(src), gemm(g3, call.args, s))),
             ("cuMemcpyDtoDAsync + GEMM in one compiled call",
              lambda: gemm(g3, call.args, s, (dst, src, nbytes, False))),
             ("copy kernel + GEMM, two direct launches",
              lambda: (copier((programs, 1, 1), cargs, s), gemm(g3, call.args, s))),
             ("the runtime's stager + GEMM in one compiled call",
              lambda: staged(g3, call.args, s, (dst, src, nbytes, False)))]
    # the copy alone, for its device time
    copies = [lambda: dst.copy_(src), lambda: _memcpy(dst, src, nbytes, s),
              lambda: copier((programs, 1, 1), cargs, s),
              lambda: stage[0].run(min(stage[1], -(-nbytes // 8 // stage[2])), 1, 1, s,
                                   [dst, src, nbytes // 8, stage[2]], 0, 0, 0, 0, False)]
    out = []
    for (name, fn), copy in zip(paths, copies):
        dst.fill_(float("nan"))
        fn()
        torch.cuda.synchronize()
        ok = torch.equal(dst, src)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(20):
            copy()
        end.record()
        torch.cuda.synchronize()
        out.append((f"staging {rows}x{cols} bf16: {name}", host_us(fn, calls),
                    start.elapsed_time(end) / 20 * 1e3, ok))
    return out


def _copy_kernel():
    """A grid-stride copy of int64 words (Triton reads a kernel's globals from its module:
    defined at first use, so the module imports without Triton)."""
    global copy_words, tl
    import triton
    import triton.language as tl

    @triton.jit
    def copy_words(dst, src, n, BLOCK: tl.constexpr):
        step = tl.num_programs(0) * BLOCK
        for start in range(tl.program_id(0) * BLOCK, n, step):
            offs = start + tl.arange(0, BLOCK)
            m = offs < n
            tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)
    return copy_words


def _memcpy(dst, src, nbytes: int, stream: int) -> bool:
    """``cuMemcpyDtoDAsync`` alone through ctypes (the device time of the memcpy path)."""
    import ctypes

    from syncopate.runtime import _cuda
    fn = _cuda._symbol("cuMemcpyDtoDAsync_v2", "cuMemcpyDtoDAsync")
    fn.argtypes = [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p]
    rc = fn(dst.data_ptr(), src.data_ptr(), nbytes, stream)
    if rc:
        raise SystemExit(f"cuMemcpyDtoDAsync failed: {rc}")
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="1024,4096,1024", metavar="M,N,K")
    p.add_argument("--calls", type=int, default=200)
    args = p.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("no GPU: this script measures launches on one", file=sys.stderr)
        return 2
    M, N, K = (int(x) for x in args.shape.split(","))
    settings.DIRECT_LAUNCH.set(True)  # compared here, whatever the caller's setting
    g = gemm_paths(M, N, K, args.calls)
    a = advance_paths(args.calls)
    st = staging_paths(M, N, K, args.calls)
    bad = ([r for r in g if not r[3]] + [r for r in a if r[2] != r[3]]
           + [r for r in st if not r[3]])
    print(f"\nhost time per launch (median of {args.calls}, us) on {torch.cuda.get_device_name()}:")
    for name, us, diff, same in g:
        print(f"  {name:58s} {us:7.1f}   max|diff| vs JIT {diff:.3g}  {'bitwise' if same else 'DIFFERS'}")
    for name, us, got, want in a:
        print(f"  {name:58s} {us:7.1f}   word {got} (want {want})")
    for name, us, dev_us, ok in st:
        print(f"  {name:58s} {us:7.1f}   copy on the device {dev_us:.1f} us  "
              f"{'copied' if ok else 'WRONG COPY'}")
    if bad:
        print(f"FAILED: {[r[0] for r in bad]}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
