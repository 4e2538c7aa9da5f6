"""Every template x backend x local GEMM: emulated clean under every policy, or refused with a
typed syncopate error -- never skipped silently.

The emulator found two compiler bugs here, both fixed (docs/emulator.md, "Found"):

* ``all_to_all`` fused with a GEMM: each rank ends with only its block of A's columns, but the
  GEMM reads all of A, so tiles read elements no chunk ever delivers. ``check-accesses`` now
  refuses it (every rank must end holding the whole consumed tensor it reads);
* ``all_reduce`` on ``sm``/``nvshmem``: the all-gather phase is pushed by the owner and nothing
  on the receiving rank waited for it, so a launch returned before its C was complete (and the
  late push landed in the next launch's partials). ``partition-sms`` now makes comm program 0
  of each destination wait for every chunk pushed to it.
"""

from __future__ import annotations

import pytest

from syncopate.emulate import emulate
from syncopate.errors import SyncopateError
from syncopate.kernels import kernel_fn

from emulate_helpers import KERNELS, compile_kw, gemm_args, grid, schedule

POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:1", "random:1")
CLEAN = {"all_gather", "reduce_scatter", "ring_pass", "all_reduce"}
#: (template, backend) -> what the refusal says
REFUSED = {("all_reduce", "ce"): "ce backend",  # the ce plan cannot wait for a peer mid-stream
           **{("all_to_all", b): "ends the schedule holding" for b in ("sm", "ce", "nvshmem")}}


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
        with pytest.raises(SyncopateError, match=REFUSED[(template, backend)]):
            _run(template, backend, kernel)
        return
    res = _run(template, backend, kernel)
    assert res.policies == list(POLICIES) and set(res.stats) == set(POLICIES)
    assert all(not s["deadlocked"] for s in res.stats.values())
    assert template in CLEAN
    assert res.ok, res.summary()
    assert sum(s["transfers"] for s in res.stats.values()) > 0
