"""The runtime's specialisation compiled through syncopate.compile (CPU, sm_90 target): the
compiled launcher takes exactly the user's parameters plus the ABI's extra parameters.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.runtime.fused import FusedKernel, bind_args, specialize  # noqa: E402
from runtime_fakes import fake_comm, ag_schedule  # noqa: E402


@pytest.mark.parametrize("backend,kern", [("ce", "tma"), ("sm", "ptr")])
def test_fused_compile_matches_runtime_launch_contract(backend, kern):
    """The runtime's specialisation goes through syncopate.compile (CPU, sm_90 target) and the
    compiled launcher takes exactly: user params (constexprs in position) + the ABI extras."""
    pytest.importorskip("xdsl")
    from syncopate.kernels import kernel_fn
    from syncopate.ops.driver import resolve_config
    c = fake_comm()
    M, K, N = 400, 136, 328
    sched = ag_schedule(shape=(M, K), split=2, mode="pull" if backend == "ce" else "push")
    cfg = resolve_config(kern, M, N, K, torch.bfloat16)
    fn = kernel_fn(kern)
    fk = FusedKernel(fn, sched, operand="a_ptr", backend=backend,
                     comm_programs=16 if backend == "sm" else None, comm=c, target=("cuda", 90),
                     **cfg.options())
    A = c.empty((M, K), torch.bfloat16)
    b = torch.empty(K, N, dtype=torch.bfloat16)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    vals = dict(a_ptr=A, b_ptr=b, c_ptr=out, M=M, N=N, K=K, stride_am=A.stride(0), stride_ak=1,
                stride_bk=b.stride(0), stride_bn=1, stride_cm=out.stride(0), stride_cn=1,
                **cfg.constexprs(kern, 116))
    values, _ = bind_args(fn, [vals[n] for n in fn.arg_names], {})
    fk.validate(values)
    fc = fk._compile(specialize(fn, values), dict(fk.compile_options))
    a = fc.abi
    assert a.backend == backend and a.num_chunks == 4 and a.world_size == 2
    assert list(a.operands) == ["a_ptr"]
    sig = list(fc.kernel.src.signature)
    assert sig[:len(fn.arg_names)] == list(fn.arg_names)
    assert tuple(sig[len(fn.arg_names):]) == tuple(n for n, _ in abi.extra_params(backend))
    assert a.grid((10,)) == ((10 + 16, 1, 1) if backend == "sm" else (10, 1, 1))
    abi.check_launch(dict(zip(fn.arg_names, values)), a.requirements, a.upper_bounds)
    if backend == "ce":
        assert set(a.chunk_count.values()) == {1}  # ce writes the epoch itself
