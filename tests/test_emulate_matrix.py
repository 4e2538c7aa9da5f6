"""Every template x backend x local GEMM: emulated clean under every policy, or refused with a
typed syncopate error -- never skipped silently.

Two combinations are known to be wrong and the emulator must keep saying so (they are bugs for
the compiler to refuse, recorded in docs/emulator.md):

* ``all_to_all`` fused with a GEMM: each rank ends with only its block of A's columns, but the
  GEMM reads all of A, so tiles read elements no chunk ever delivers;
* ``all_reduce`` on ``sm``/``nvshmem``: the all-gather phase is pushed by the owner and nothing
  on the receiving rank waits for it, so a launch returns before its C is complete (and the
  late push lands in the next launch's partials).
"""

from __future__ import annotations

import pytest

from syncopate.emulate import emulate
from syncopate.errors import SyncopateError
from syncopate.kernels import kernel_fn

from emulate_helpers import KERNELS, compile_kw, gemm_args, grid, schedule

POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:1", "random:1")
CLEAN = {"all_gather", "reduce_scatter", "ring_pass"}
REFUSED = {("all_reduce", "ce")}  # the ce plan cannot wait for a peer's flag mid-stream
KNOWN_BAD = {("all_to_all", b) for b in ("sm", "ce", "nvshmem")} | \
    {("all_reduce", "sm"), ("all_reduce", "nvshmem")}


def _run(template, backend, kernel):
    sched, operand = schedule(template)
    return emulate(kernel_fn(kernel), schedule=sched, operand=operand, grid=grid(kernel),
                   args=gemm_args(), backend=backend, comm_programs=2, policies=POLICIES,
                   launches=2, check=False, **compile_kw(kernel))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("backend", ["sm", "ce", "nvshmem"])
@pytest.mark.parametrize("template", ["all_gather", "reduce_scatter", "all_reduce",
                                      "all_to_all", "ring_pass"])
def test_template_backend_kernel(template, backend, kernel):
    if (template, backend) in REFUSED:
        with pytest.raises(SyncopateError, match="ce backend"):
            _run(template, backend, kernel)
        return
    res = _run(template, backend, kernel)
    assert res.policies == list(POLICIES) and set(res.stats) == set(POLICIES)
    assert all(not s["deadlocked"] for s in res.stats.values())
    if (template, backend) in KNOWN_BAD:
        assert res.races_of("read-before-arrival"), res.summary()
        return
    assert template in CLEAN
    assert res.ok, res.summary()
    assert sum(s["transfers"] for s in res.stats.values()) > 0
