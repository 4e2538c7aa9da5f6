"""Host (Python) time of one eager fused launch on the fast path, of an ``ag_gemm`` call on its
prepared-call path around it, of FusedGraph.replay's checks, and of the local
``syncopate.kernels.matmul`` on its cached-plan path, on the CPU: the
device side
is faked (no kernel is launched, the epoch advance and the kernel launch are no-ops), so this
measures only what ``FusedKernel.launch`` itself costs per call -- the part of the issue's
"<= 20 us per sm call" target that the runtime's Python owns. The Triton launches (advance +
kernel) come on top and need a GPU to measure (scripts/gpu_host_profile.py).

    PYTHONPATH=... python scripts/host_overhead_cpu.py [--calls 20000] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "runtime"))


def build(backend="sm"):
    import torch

    from runtime_fakes import ag_schedule, fake_comm, fk_values, ptr_kernel
    from syncopate import abi
    from syncopate.runtime import fused as fmod

    c = fake_comm()
    fk = fmod.FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr",
                          backend=backend, comm=c)
    a = abi.FusedABI(backend, 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True)

    def config(spec, options):
        cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32),
                           flag_addrs=[0, 0])
        fk._new_epoch_word(cfg)
        return cfg
    fk._config = config
    fk._peers_table = lambda cfg, ops: "peers"
    fk._advance_epoch = lambda cfg, S: None
    fk.launcher.launch = lambda cfg, g, args, S, e, peers, ops, direct=None: None
    torch.cuda.current_stream = lambda device=None: "S"
    torch.cuda.current_device = lambda: c.device.index
    torch.cuda.device = lambda d: contextlib.nullcontext()
    torch.cuda.stream = lambda s: contextlib.nullcontext()
    A = c.empty((64, 32), torch.bfloat16)
    return fk, fk_values(c, A)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--profile", action="store_true", help="print the top functions by time")
    args = ap.parse_args(argv)
    fk, vals = build()
    grid = (3,)
    for _ in range(100):
        fk.launch(grid, vals)
    wall, cpu = [], []
    for _ in range(5):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.calls):
            fk.launch(grid, vals)
        wall.append((time.perf_counter() - t0) / args.calls * 1e6)
        cpu.append((time.process_time() - c0) / args.calls * 1e6)
    wall.sort()
    cpu.sort()
    # process time too: on a loaded machine wall time counts the time the process waited
    print(f"FusedKernel.launch fast path, device side faked: median {wall[2]:.2f} us wall, "
          f"{cpu[2]:.2f} us CPU per call (min {wall[0]:.2f} / {cpu[0]:.2f}; "
          f"{args.calls} calls x 5)")
    # FusedGraph.replay's own host work: the watchdog check before graph.replay() (the graph's
    # replay itself is one driver call, faked here)
    from syncopate.runtime.graphs import FusedGraph

    class _Graph:
        def replay(self):
            pass
    fg = FusedGraph(_Graph(), [fk], [fk.comm])
    print(f"FusedGraph.replay host work (graph replay faked): median "
          f"{_cpu_us(fg.replay, args.calls):.2f} us CPU per replay")
    op_call = ag_gemm_fast_path(fk, vals)
    print(f"syncopate.ops.ag_gemm prepared call (staging copy of a 32x32 CPU shard, launch "
          f"faked as above): median {_cpu_us(op_call, args.calls):.2f} us CPU per call")
    bound = ag_gemm_bound_path()
    if bound is not None:
        bound_call, ready = bound
        gate = ready.gate
        print(f"syncopate.ops.ag_gemm prepared call on the bound path (copy + launch in one "
              f"compiled call, driver entry points no-ops), checks "
              f"{'in C (Gate)' if gate is not None else 'in Python (no Gate here)'}: median "
              f"{_cpu_us(bound_call, args.calls):.2f} us CPU per call")
        if gate is not None:  # the same calls with BoundLaunch._fast's checks in Python
            ready.gate = None
            print(f"  the same, checks in Python (BoundLaunch._fast without its Gate): median "
                  f"{_cpu_us(bound_call, args.calls):.2f} us CPU per call")
            ready.gate = gate
    matmul_call, matmul_out = gemm_fast_path()
    for name, fn in (("matmul(a, b)", matmul_call), ("matmul(a, b, out)", matmul_out)):
        print(f"syncopate.kernels.{name}, cached plan, launch faked: median "
              f"{_cpu_us(fn, args.calls):.2f} us CPU per call")
    if args.profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(args.calls):
            fk.launch(grid, vals)
            matmul_call()
        pr.disable()
        pstats.Stats(pr).sort_stats("tottime").print_stats(16)
    return 0


def _cpu_us(fn, calls: int) -> float:
    """Median over 5 rounds of the CPU microseconds per call of ``fn()``, ``calls`` per round."""
    cpu = []
    for _ in range(5):
        c0 = time.process_time()
        for _ in range(calls):
            fn()
        cpu.append((time.process_time() - c0) / calls * 1e6)
    cpu.sort()
    return cpu[2]


def ag_gemm_fast_path(fk, vals):
    """``ag_gemm(a_shard, b, comm, ...)`` as a zero-argument call on the op's prepared-call path
    (its layout key, the cached PreparedCall, ``before_staging``, the staging copy into this
    rank's rows of the symmetric A, the argument list) ending in the faked FusedKernel launch
    of :func:`build`: what the op's own Python adds to a launch. The prepared call is stored
    under the key the op computes, as its first call would."""
    import torch

    from syncopate.ops import REGISTRY, ag_gemm, driver
    ag_gemm_spec = REGISTRY["ag_gemm"]
    comm = fk.comm
    A, b, out = vals[0], vals[1], vals[2]
    Ms = A.shape[0] // comm.world_size
    slot = A[comm.rank * Ms:(comm.rank + 1) * Ms]
    a_shard = torch.randn(Ms, A.shape[1]).to(A.dtype)
    key = driver.gemm_key(ag_gemm_spec, comm, a_shard, b, out,
                          ("sm", 1, "swizzle", None, None, None), None, None)
    prep = driver.PreparedCall(fk=fk, grid=(3,), args=list(vals), out_shape=tuple(out.shape),
                              out_index=2, slot=slot)
    driver.put_prepared(comm, key, prep)

    def call():
        return ag_gemm(a_shard, b, comm, backend="sm", split=1, out=out, fused=True)
    assert call() is out and driver.get_prepared(comm, key) is prep
    return call


def _noop_driver():
    """C no-ops standing in for ``cuLaunchKernel``, ``cuMemcpyDtoDAsync`` and
    ``cuStreamIsCapturing`` (built with the system compiler), or None without one: a Python
    callback would add its own microsecond to every call."""
    import ctypes
    import shutil
    import subprocess
    import tempfile
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    d = tempfile.mkdtemp()
    src = os.path.join(d, "noop.c")
    with open(src, "w") as f:
        f.write("int noop_launch(void){return 0;}\n"
                "int noop_capturing(void *s, int *status){*status = 0; return 0;}\n")
    subprocess.check_call([cc, "-shared", "-fPIC", "-O2", src, "-o", os.path.join(d, "noop.so")])
    lib = ctypes.CDLL(os.path.join(d, "noop.so"))
    return {"cuLaunchKernel": lib.noop_launch, "cuMemcpyDtoDAsync": lib.noop_launch,
            "cuStreamIsCapturing": lib.noop_capturing}


def ag_gemm_bound_path():
    """``ag_gemm`` as a zero-argument call that takes the bound path (``runtime/bound.py``),
    and the layout's bound state (``_Ready``: its ``gate`` set to None runs the checks in
    Python): a real FusedKernel and sm launcher over the fake communicator, its configuration
    a self-advancing one, the driver's entry points C no-ops. None without a C compiler."""
    import types

    import torch
    from runtime_fakes import FakeCompiledFused, bindable_sm_kernel, fake_comm

    from syncopate.ops import REGISTRY, ag_gemm, driver
    ag_gemm_spec = REGISTRY["ag_gemm"]
    from syncopate.runtime import _cuda, fastlaunch, graphs
    noop = _noop_driver()
    if noop is None or fastlaunch.module() is None:
        return None
    _cuda.available = lambda: True
    _cuda._BOUND.clear()
    _cuda._symbol = lambda *names: next((noop[n] for n in names if n in noop), None)
    torch._C._cuda_getCurrentRawStream = lambda idx: 77
    graphs._PROBE[:] = [lambda: False]
    c = fake_comm()
    torch.cuda.current_device = lambda: c.device.index
    stream = types.SimpleNamespace(cuda_stream=77, device=c.device)
    torch.cuda.current_stream = lambda device=None: stream
    fk, vals = bindable_sm_kernel(c, FakeCompiledFused())
    A = vals[0]
    b, out = vals[1], vals[2]
    a_shard = torch.randn(32, 32).to(A.dtype)
    key = driver.gemm_key(ag_gemm_spec, c, a_shard, b, out,
                          ("sm", 1, "swizzle", None, None, None), None, None)
    prep = driver.PreparedCall(fk=fk, grid=(3,), args=list(vals), out_shape=tuple(out.shape),
                              out_index=2, slot=A[:32])
    driver.put_prepared(c, key, prep)

    def call():
        return ag_gemm(a_shard, b, c, backend="sm", split=1, out=out, fused=True)
    for _ in range(3):
        call()
    assert prep.bound._ready is not None, "the bound path did not engage"
    return call, prep.bound._ready


def gemm_fast_path():
    """``(matmul(a, b), matmul(a, b, out))`` as zero-argument calls on CPU tensors whose plan is
    cached and whose compiled kernel's launcher is a no-op: what remains is the Python that
    :func:`syncopate.kernels.matmul` runs per call (layout key, plan lookup, output allocation,
    the direct launch's argument tuple). Small operands, so the allocation is not the cost."""
    import torch
    from triton import knobs

    from syncopate.kernels import gemm_launch as gl

    class _Compiled:  # what the JIT returns; its launcher does nothing here
        function, packed_metadata = 0, ()

        def launch_metadata(self, *args):
            return None

        def run(self, *args):
            return None

    a = torch.randn(64, 64).bfloat16()
    b = torch.randn(64, 64).bfloat16()
    out = torch.empty(64, 64, dtype=torch.bfloat16)
    plan = gl.make_plan(a, b, out, kernel="auto", num_sms=132, capability=(9, 0), gpu="h200")
    for launch in plan.launches:
        launch.kernel = (_Compiled(), knobs.runtime, lambda device: 0)
    for o in (None, out):
        gl._PLANS[gl._plan_key(a, b, o, "auto", None)] = (plan, 64, 64, 64, (8192, 8192, 8192))
    torch.cuda.current_device = lambda: 0
    return (lambda: gl.matmul(a, b)), (lambda: gl.matmul(a, b, out))


if __name__ == "__main__":
    raise SystemExit(main())
