"""Triton-style argument handling of the fused runtime: specialisation like triton.jit
(signature, constexprs, divisibility attributes), binding positional/keyword arguments and
launch options (the compiled kernel's launch requirements:
tests/runtime/test_fused_launch_requirements.py).

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate.errors import LaunchError  # noqa: E402
from syncopate.runtime.specialize import bind_args, specialize  # noqa: E402
from runtime_fakes import ptr_kernel, ptr_args  # noqa: E402


def test_specialize_like_triton_jit():
    k = ptr_kernel()
    spec = specialize(k, ptr_args())
    sig = spec.signature_dict()
    assert sig["a_ptr"] == "*bf16" and sig["M"] == "i32"
    assert sig["stride_ak"] == "constexpr" and spec.constexpr_dict()["stride_ak"] == 1
    assert sig["BLOCK_M"] == "constexpr" and spec.constexpr_dict()["BLOCK_M"] == 128
    attrs = spec.attrs_dict()
    assert (0,) in attrs and attrs[(0,)] == [["tt.divisibility", 16]]
    assert (3,) in attrs  # M = 256 divisible by 16


def test_specialize_ragged_sizes_drop_divisibility():
    k = ptr_kernel()
    spec = specialize(k, ptr_args(M=250, N=120, K=72))
    attrs = spec.attrs_dict()
    assert (3,) not in attrs and (4,) not in attrs  # M, N not multiples of 16
    assert specialize(k, ptr_args(M=250)) != specialize(k, ptr_args(M=256))


def test_bind_args_positional_keyword_and_options():
    k = ptr_kernel()
    vals = ptr_args()
    got, opts = bind_args(k, vals[:-4], dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                             num_warps=4))
    assert got[-4:] == [128, 128, 64, 8] and opts == {"num_warps": 4}
    with pytest.raises(LaunchError, match="do not match the kernel's parameters"):
        bind_args(k, vals[:3], {})
