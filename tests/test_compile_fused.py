"""The project's GEMM kernels compile fused for sm_90 on this CPU, for every backend, and the
generated code has the synchronisation where docs/fused-abi.md says it must be.

AG+GEMM: system-scope acquire loads (``ld.acquire.sys``) guard the A tiles, and no wait sits
inside the K loop (the innermost loop around ``wgmma``).  GEMM+RS: release atomics at system
scope come after the output stores.
"""

from __future__ import annotations

import re
import time

import pytest

import syncopate
from syncopate.backends.nvshmem import nvshmem_device_library
from syncopate.errors import CompileError
from syncopate.kernels import compile_args, compile_attrs, default_config, kernel_fn
from syncopate.schedule import all_gather, reduce_scatter

M, N, K = 8192, 7168, 4096
KERNELS = ["matmul_tma_persistent_kernel", "matmul_ptr_kernel"]


def _has_nvshmem() -> bool:
    try:
        nvshmem_device_library()
        return True
    except CompileError:
        return False


BACKENDS = ["sm", "ce", pytest.param("nvshmem", marks=pytest.mark.skipif(
    not _has_nvshmem(), reason="libnvshmem_device.bc not installed (pip install 'syncopate[nvshmem]')"))]

_cache: dict = {}


def fused(name: str, backend: str, op: str = "ag", split: int = 2, reduce: str = "comm",
          withhold: tuple = ()):
    key = (name, backend, op, split, reduce, withhold)
    if key not in _cache:
        kind = "tma" if "tma" in name else "ptr"
        if op == "ag":
            cfg = default_config(M, N, K, "bf16", kind)
            sched = all_gather([M, K], "bf16", 2, mode="push" if backend != "ce" else "pull",
                               split=split)
            operand = "a_ptr"
        else:
            cfg = default_config(M, N // 2, K, "bf16", kind)
            sched = reduce_scatter([M, N // 2], "bf16", 2, split=split)
            operand = "c_ptr"
        sig, cx = compile_args(name, "bf16", cfg)
        t0 = time.perf_counter()
        fc = syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx, schedule=sched,
                               operand=operand, backend=backend, comm_programs=8,
                               attrs=compile_attrs(name), reduce=reduce, withhold_chunks=withhold,
                               **cfg.options())
        fc.seconds = time.perf_counter() - t0
        _cache[key] = fc
    return _cache[key]


# ------------------------------------------------------------------------------ PTX helpers

def ptx_loops(ptx: str) -> list[tuple[int, int]]:
    """(first line, last line) of every loop: a label and a later branch back to it."""
    lines = ptx.splitlines()
    labels = {}
    loops = []
    for i, line in enumerate(lines):
        m = re.match(r"^\s*(\$L__\w+):", line)
        if m:
            labels[m.group(1)] = i
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__\w+);", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            loops.append((labels[m.group(1)], i))
    return loops


def innermost_mma_loops(ptx: str) -> list[tuple[int, int]]:
    lines = ptx.splitlines()
    loops = [lp for lp in ptx_loops(ptx)
             if any("wgmma.mma_async" in lines[j] for j in range(lp[0], lp[1] + 1))]
    return [lp for lp in loops
            if not any(o != lp and lp[0] <= o[0] and o[1] <= lp[1] for o in loops)]


def lines_with(ptx: str, needle: str) -> list[int]:
    return [i for i, line in enumerate(ptx.splitlines()) if needle in line]


# ------------------------------------------------------------------------------ AG + GEMM

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", KERNELS)
def test_ag_gemm_compiles_with_acquire_waits_outside_k_loop(name, backend):
    fc = fused(name, backend)
    ptx = fc.asm["ptx"]
    assert fc.asm["cubin"], "no cubin"
    acquires = lines_with(ptx, "ld.acquire.sys.global")
    assert acquires, "no system-scope acquire load in the fused PTX"
    k_loops = innermost_mma_loops(ptx)
    assert k_loops, "could not find the K loop (wgmma) in the PTX"
    for lo, hi in k_loops:
        inside = [i for i in acquires if lo <= i <= hi]
        assert not inside, f"a wait spins inside the K loop (PTX lines {inside})"
    # some acquire precedes every K loop in program text (the wait before the loop)
    for lo, _ in k_loops:
        assert any(i < lo for i in acquires)
    if backend == "ce":
        # no comm programs: the first tile load comes after the first acquire
        loads = [i for i, line in enumerate(ptx.splitlines())
                 if re.search(r"cp\.async\.bulk\.tensor\.\dd\.shared|cp\.async\.c[ag]\.shared\.global", line)]
        assert loads and min(acquires) < min(loads)
    assert "%globaltimer" in ptx, "the spin has no watchdog"
    assert fc.abi.backend == backend and fc.abi.world_size == 2 and fc.abi.num_chunks == 4


@pytest.mark.parametrize("name", KERNELS)
def test_ag_gemm_fused_ttir_structure(name):
    """In the fused TTIR the wait (a call of the spin function) precedes the K loop in the
    loop's block and nothing inside the K loop waits."""
    from syncopate_mlir.bridge import ttir_to_xdsl
    from syncopate_mlir.context import make_context

    fc = fused(name, "sm")
    module = ttir_to_xdsl(fc.asm["syncopate"], make_context())
    spin = [op for op in module.ops if op.name == "tt.func" and "syncopate_wait" in str(op.properties.get("sym_name"))]
    assert spin, "no spin function"
    assert any("ld.acquire.sys" in str(o.properties.get("asm_string", "")) for o in spin[0].walk())
    k_loops = [o.parent_op() for o in module.walk() if o.name == "tt.dot"]
    assert k_loops and all(lp.name == "scf.for" for lp in k_loops)

    def is_wait(o):
        return o.name == "tt.call" and "syncopate_wait" in str(o.properties.get("callee"))

    for loop in k_loops:
        assert not any(is_wait(o) for o in loop.walk()), "a wait inside the K loop"
        ops = list(loop.parent_block().ops)
        before = ops[:ops.index(loop)]
        assert any(is_wait(x) for o in before for x in o.walk()), "no wait before the K loop"
    text = fc.asm["syncopate"].split("\n#loc")[0]
    assert not re.search(r"\bsyncopate\.(wait|signal|remap|comm|transfer|enter|drain|peer_ptr)", text)


def test_warp_specialized_loops_are_refused_with_a_clear_error():
    from syncopate.kernels import GemmConfig
    name = "matmul_tma_persistent_kernel"
    cfg = GemmConfig(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_warps=4, num_stages=3,
                     WARP_SPECIALIZE=True, FLATTEN=False, EPILOGUE_SUBTILE=False)
    sig, cx = compile_args(name, "bf16", cfg)
    with pytest.raises(CompileError, match="warp_specialize=False"):
        syncopate.compile(kernel_fn(name), signature=sig, constexprs=cx,
                          schedule=all_gather([M, K], "bf16", 2, mode="push"), operand="a_ptr",
                          backend="sm", comm_programs=8, attrs=compile_attrs(name), **cfg.options())


def test_sm_backend_moves_data_with_p2p_and_releases_at_system_scope():
    ptx = fused("matmul_tma_persistent_kernel", "sm").asm["ptx"]
    assert any(".sys" in t and ".release" in t for t in re.findall(r"\b(?:atom|red)\.[\w.:]+", ptx))
    assert "bar.sync" in ptx or "barrier.sync" in ptx


@pytest.mark.skipif(not _has_nvshmem(), reason="libnvshmem_device.bc not installed")
def test_nvshmem_backend_calls_put_with_signal():
    fc = fused("matmul_tma_persistent_kernel", "nvshmem")
    assert "nvshmemx_putmem_signal_block" in fc.asm["syncopate"]
    assert fc.abi.flag_dtype == "int64"


@pytest.mark.parametrize("backend", BACKENDS[::2])  # sm, nvshmem
def test_withheld_chunk_moves_but_is_never_signalled(backend):
    """Fault injection compiled in (the GPU fault test of the sm backend uses it): the withheld
    chunk's executor still copies it, and one CHUNK signal fewer is left in the kernel."""
    plain = fused("matmul_ptr_kernel", backend)
    held = fused("matmul_ptr_kernel", backend, withhold=(1,))
    if backend == "sm":
        def releases(fc):
            return len(re.findall(r"tt\.atomic_rmw add, release, sys", fc.asm["syncopate"]))
        assert releases(held) == releases(plain) - 1
    else:  # the withheld push goes as P2P tiles instead of a put-with-signal
        count = lambda fc: fc.asm["syncopate"].count("nvshmemx_putmem_signal_block")  # noqa: E731
        assert count(held) == count(plain) - 1
    assert held.asm["cubin"]


def test_withhold_is_checked_against_the_schedule_and_the_backend():
    with pytest.raises(CompileError, match="chunks \\[9\\] are not in the schedule"):
        fused("matmul_ptr_kernel", "sm", withhold=(9,))
    with pytest.raises(CompileError, match="ce backend withholds at run time"):
        fused("matmul_ptr_kernel", "ce", withhold=(1,))


# ------------------------------------------------------------------------------ GEMM + RS

@pytest.mark.parametrize("backend", ["sm", pytest.param("nvshmem", marks=pytest.mark.skipif(
    not _has_nvshmem(), reason="libnvshmem_device.bc not installed"))])
@pytest.mark.parametrize("name", KERNELS)
def test_gemm_rs_signals_after_output_stores(name, backend):
    fc = fused(name, backend, op="rs")
    ptx = fc.asm["ptx"]
    releases = [i for i, line in enumerate(ptx.splitlines())
                if any(".sys" in t and ".release" in t and ".add" in t
                       for t in re.findall(r"\b(?:atom|red)\.[\w.:]+", line))]
    stores = lines_with(ptx, "cp.async.bulk.tensor.2d.global.shared") + \
        [i for i, line in enumerate(ptx.splitlines()) if re.search(r"\bst\.global", line)]
    assert releases and stores
    assert any(r > min(stores) for r in releases)
    # every chunk of C counts its producers by elements
    assert fc.abi.produced_count == {c: (M // 4) * (N // 2) for c in range(4)}
    # the signal follows the store in the fused TTIR's block
    text = fc.asm["syncopate"]
    store = text.find("tt.descriptor_store") if "tma" in name else text.rfind("tt.store %c_ptrs")
    assert store != -1 and text.find("tt.atomic_rmw add, release, sys", store) != -1


@pytest.mark.parametrize("name", KERNELS)
def test_ce_reduce_chunks_only_signal_produced(name):
    """GEMM + RS on the copy engine: the kernel announces each chunk's elements (the host
    copies and sums); it waits for nothing and has no comm programs."""
    fc = fused(name, "ce", op="rs")
    ptx = fc.asm["ptx"]
    assert fc.abi.comm_programs == 0 and fc.abi.reads_per_src == {}
    assert fc.abi.produced_count == {c: (M // 4) * (N // 2) for c in range(4)}
    ops = re.findall(r"\b(?:atom|red)\.[\w.:]+", ptx)
    assert any(".sys" in t and ".release" in t and ".add" in t for t in ops), ops
    assert "ld.acquire" not in ptx


@pytest.mark.parametrize("name", KERNELS)
def test_ce_epilogue_reduce_adds_the_slots_before_the_store(name):
    """GEMM + RS with reduce='epilogue': the owner's tiles wait for the chunks reducing into
    their box (acquire loads), add the slot tiles (masked loads through the slot base read from
    syn_peers) in f32 and store once; the sends-first tile order; the TMA pipeline is kept."""
    fc = fused(name, "ce", op="rs", reduce="epilogue")
    a = fc.abi
    assert a.epilogue_slots == ["C"] and a.comm_programs == 0
    ttir = fc.asm["syncopate"]
    store = ttir.find("tt.descriptor_store") if "tma" in name else ttir.rfind("tt.store %c_ptrs")
    assert store != -1
    before = ttir[:store]
    assert before.rfind("tt.call @syncopate_wait_b32") != -1
    # the slot base: derived from the aligned c_ptr (so the loads vectorise), after the wait
    assert before.rfind("arith.shrsi") > before.rfind("tt.call @syncopate_wait_b32")
    assert before.rfind("arith.addf") > before.rfind("arith.shrsi")
    assert before.rfind("arith.truncf") > before.rfind("arith.addf")
    ptx = fc.asm["ptx"]
    assert "ld.acquire.sys" in ptx
    loads = re.findall(r"ld\.global[\w.]*", ptx)
    assert loads.count("ld.global.v4.b32") >= 16 and "ld.global.b16" not in loads  # 16-byte loads
    if "tma" in name:
        plain = fused(name, "ce", op="rs")
        assert fc.asm["ttgir"].count("async_tma_copy_global_to_local") == \
            plain.asm["ttgir"].count("async_tma_copy_global_to_local")


def test_epilogue_reduce_is_ce_only():
    with pytest.raises(CompileError, match="reduce='epilogue' is implemented for backend='ce'"):
        fused("matmul_ptr_kernel", "sm", op="rs", reduce="epilogue")


# ------------------------------------------------------------------------------ stage times

def test_pass_pipeline_runs_on_a_gemm_and_reports_per_pass_times():
    """The syncopate stage (parse, passes, print) on the TMA GEMM's TTIR runs and records the
    time of every step. No time limit here: wall-clock assertions fail on a loaded machine;
    ``python -m syncopate.bench --compile`` measures the times (README, "Measured")."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from syncopate_mlir.pipeline import FuseRequest, pass_names, run_pipeline

    name = "matmul_tma_persistent_kernel"
    cfg = default_config(M, N, K, "bf16", "tma")
    sig, cx = compile_args(name, "bf16", cfg)
    ttir = triton.compile(ASTSource(kernel_fn(name), sig, cx, compile_attrs(name)),
                          target=GPUTarget("cuda", 90, 32), options=cfg.options()).asm["ttir"]
    params = tuple(n for n in kernel_fn(name).arg_names if sig[n] != "constexpr")
    req = FuseRequest(kernel_name=name, schedule=all_gather([M, K], "bf16", 2, mode="push",
                                                            split=2),
                      operands={"a_ptr": "A"}, backend="sm", comm_programs=8, params=params,
                      keep_ir=False)
    res = run_pipeline(ttir, req)
    assert list(res.times_ms) == ["parse", *pass_names("sm"), "print"]
    assert all(isinstance(v, float) and v >= 0 for v in res.times_ms.values())
    assert res.ir_after == {} and "tt.func" in res.text and res.abi.backend == "sm"


@pytest.mark.parametrize("op", ["ag", "rs"])
def test_fusion_keeps_the_k_loop_software_pipelined(op):
    """The fused TMA GEMM keeps the local kernel's multi-stage TMA pipeline: as many TMA loads
    in the TTGIR (prologue + loop) and the same shared memory. (A CTA barrier inside a
    flattened tile loop once made Triton drop the pipeline: 4x slower GEMM+RS on 2 x H200.)"""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    name = "matmul_tma_persistent_kernel"
    n = N if op == "ag" else N // 2
    cfg = default_config(M, n, K, "bf16", "tma")
    sig, cx = compile_args(name, "bf16", cfg)
    plain = triton.compile(ASTSource(kernel_fn(name), sig, cx, compile_attrs(name)),
                           target=GPUTarget("cuda", 90, 32), options=cfg.options())
    fc = fused(name, "sm", op=op)
    count = lambda k: k.asm["ttgir"].count("async_tma_copy_global_to_local")  # noqa: E731
    assert count(fc.kernel) == count(plain) > 2
    assert fc.metadata.shared == plain.metadata.shared


# ------------------------------------------------------------------------------ ABI 3 epoch

@pytest.mark.parametrize("backend", BACKENDS)
def test_the_fused_kernel_loads_its_epoch_from_the_device_word(backend):
    """ABI 3 (docs/cuda-graphs.md): ``syn_epoch`` is a 16-byte aligned ``*i32`` and the kernel's
    first op loads it, once; nothing else reads the parameter -- so a CUDA-graph replay, which
    keeps the pointer, sees the epoch the runtime advanced on the device."""
    fc = fused("matmul_tma_persistent_kernel", backend)
    assert fc.abi.version == 3
    text = fc.asm["syncopate"]  # as Triton prints it: parameters renamed %argN
    header, body = text[text.index("tt.func public"):].split("\n", 1)
    params = re.findall(r"%(\w+): (!tt\.ptr<\w+>|i\d+)( \{tt\.divisibility = 16 : i32\})?",
                        header)
    name, ty, aligned = params[-2]  # syn_epoch, then syn_timeout_ns (docs/fused-abi.md)
    assert (ty, aligned) == ("!tt.ptr<i32>", " {tt.divisibility = 16 : i32}"), params[-2]
    first_op, rest = body.split("\n", 1)
    m = re.match(rf"\s*(%\w+) = tt\.load %{name} : !tt\.ptr<i32>", first_op)
    assert m, first_op
    assert not re.search(rf"%{name}\b", rest)  # read once
    assert re.search(rf"{m.group(1)}\b", rest)  # the waits and signals use the loaded value
