"""The ``reduce="epilogue"`` GEMM + reduce-scatter (``ce``) in the CPU emulator: the owner's
tiles add the partials the copy engine moved into its slots before their single store.

Its slot base is an aligned kernel parameter plus the distance to the slot buffer
(``passes/insert_epilogue_reduce._slot_base``): the emulator follows such a pointer to the
buffer it lands in, as the GPU does. Emulated clean (no race, results equal the fp32 sum of the
partials within the emulator's tolerance) for both kernels, W = 2 and 4, in both lowerings.
"""

from __future__ import annotations

import pytest

from syncopate.emulate import emulate
from syncopate.kernels import kernel_fn

from emulate_helpers import KERNELS, compile_kw, gemm_args, grid, schedule

POLICIES = ("in-order", "reverse", "random:1")


@pytest.mark.parametrize("lowering", ["unrolled", "table"])
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.parametrize("kernel", KERNELS)
def test_epilogue_reduce_scatter_emulates_clean(kernel, world_size, lowering):
    sched, operand = schedule("reduce_scatter", world_size=world_size)
    res = emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                  args=gemm_args(world_size), backend="ce", reduce="epilogue",
                  comm_programs=None, policies=POLICIES, launches=2, check=False,
                  lowering=lowering, **compile_kw(kernel))
    assert res.policies == list(POLICIES)
    assert res.ok, res.summary()
    # every chunk moved in every launch under every policy (the copy engine's copies)
    assert sum(s["transfers"] for s in res.stats.values()) == \
        len(POLICIES) * 2 * sched.num_chunks


@pytest.mark.parametrize("kernel", KERNELS)
def test_epilogue_reduce_scatter_self_advancing(kernel):
    """The runtime's default, ``self_advance="auto"``: three launches with no host advance
    (the copy engine's flags carry the host's count, the kernel's word its own), clean."""
    sched, operand = schedule("reduce_scatter", world_size=2)
    res = emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                  args=gemm_args(2), backend="ce", reduce="epilogue", comm_programs=None,
                  policies=POLICIES, launches=3, check=False, self_advance="auto",
                  **compile_kw(kernel))
    assert res.ok, res.summary()
