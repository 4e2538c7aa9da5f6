"""Shared set-up of the emulator tests: small GEMM problems fused with each template."""

from __future__ import annotations

import functools

import numpy as np

from syncopate import chunk_table as ct
from syncopate.emulate import PerRank, fuse_module
from syncopate.kernels import GemmConfig, compile_args, compile_attrs, kernel_fn
from syncopate.schedule import TEMPLATES

M, N, K = 256, 128, 64
CFG = GemmConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=2, num_warps=4, num_stages=2)
KERNELS = ("matmul_ptr_kernel", "matmul_tma_persistent_kernel")
NUM_SMS = 4


def schedule(template: str, world_size: int = 2, **kw):
    """The template on the GEMM tensor it applies to, and the kernel parameter holding it."""
    fn = TEMPLATES[template]
    if template in ("all_gather", "ring_pass"):
        return fn([M, K], "bf16", world_size, split=2, **kw), "a_ptr"
    if template == "all_to_all":
        return fn([M, K], "bf16", world_size, split_dim=0, concat_dim=1, **kw), "a_ptr"
    return fn([M, N], "bf16", world_size, split=2, **kw), "c_ptr"


def gemm_args(world_size: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    a = PerRank([rng.standard_normal((M, K)).astype(np.float32) for _ in range(world_size)])
    return dict(a_ptr=a, b_ptr=rng.standard_normal((K, N)).astype(np.float32),
                c_ptr=np.zeros((M, N), np.float32), M=M, N=N, K=K, stride_am=K, stride_bk=N,
                stride_cm=N)


def grid(kernel: str):
    return (NUM_SMS,) if "tma" in kernel else ((M // CFG.BLOCK_M) * (N // CFG.BLOCK_N),)


def compile_kw(kernel: str) -> dict:
    sig, cx = compile_args(kernel, "bf16", CFG, num_sms=NUM_SMS)
    return dict(signature=sig, constexprs=cx, attrs=compile_attrs(kernel), options=CFG.options())


@functools.lru_cache(maxsize=None)
def fused(kernel: str, template: str, backend: str, mode: str | None = None):
    """(module after resolve-chunks, local TTIR) -- cached: mutation tests clone it."""
    kw = {"mode": mode} if mode else {}
    sched, operand = schedule(template, **kw)
    return fuse_module(kernel_fn(kernel), schedule=sched, operand=operand, backend=backend,
                       comm_programs=2, **compile_kw(kernel))


def empty_first_cell(sched, tensor: str, backend: str = "sm", comm_programs: int = 2):
    """The chunk-table mutation the cell-map tests make: rank 0's first cell of ``tensor``'s
    cell map that names a delivered chunk, emptied (``NO_CHUNK``, as if those rows were local).
    Returns ``(edit, victim, grid)``: ``edit(words)`` applies it to a built table in place (and
    checks the cell still names ``victim``, the chunk whose wait it skips); ``grid`` is the
    map's :class:`~syncopate.chunk_table` grid."""
    words = ct.build(sched, backend, comm_programs)
    start, grid = ct.cells_of(words, ct.tensor_slots(sched)[tensor])
    row = words[start:start + grid.cells]
    k = next(i for i, c in enumerate(row) if c != ct.NO_CHUNK)
    victim = row[k]

    def edit(table):
        assert table[start + k] == victim
        table[start + k] = ct.NO_CHUNK
        return table

    return edit, victim, grid
