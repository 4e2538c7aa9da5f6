"""The launch contract's arithmetic: the flag layout (syncopate.abi.FlagLayout), the launch
grid with comm programs, flag dtypes per backend, the ABI's JSON form, the epoch counter and
its 32-bit wrap / trap-timeout convention, and the SYNCOPATE on/off switch.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.errors import LaunchError  # noqa: E402
from syncopate.runtime.epochs import EpochCounter  # noqa: E402
from syncopate.runtime.fused import fused_enabled  # noqa: E402
from syncopate.tiling import Op, RemapSlice, Step, StoreSlice  # noqa: E402


@pytest.mark.parametrize("C,W", [(1, 2), (2, 2), (8, 2), (6, 4), (7, 8), (0, 2)])
def test_flag_layout_regions_are_disjoint_and_fit(C, W):
    lay = abi.FlagLayout(C, W)
    idx = [lay.chunk(c) for c in range(C)] + [lay.entry(r) for r in range(W)] + [lay.consumed] + \
        [lay.produced(c) for c in range(C)]
    assert len(set(idx)) == len(idx) == 2 * C + W + 1
    assert max(idx) < lay.words and lay.words % 16 == 0 and lay.words - max(idx) <= 16


@pytest.mark.parametrize("backend,cp,grid,want", [
    ("sm", 16, (132,), (148, 1, 1)), ("nvshmem", 8, (10, 2), (18, 2, 1)),
    ("ce", 16, (132,), (132, 1, 1)), ("sm", 0, (5, 6, 7), (5, 6, 7))])
def test_grid(backend, cp, grid, want):
    assert abi.FusedABI(backend, 2, 4, cp, "push").grid(grid) == want


def test_flag_dtype_per_backend():
    assert abi.FusedABI("nvshmem", 2, 1, 1, "push").flag_dtype == "int64"
    assert abi.FusedABI("ce", 2, 1, 0, "pull").flag_dtype == "int32"


def test_abi_json_roundtrip_with_runtime_field():
    a = abi.FusedABI("sm", 2, 4, 16, "push", operands=["a_ptr"], chunk_count={0: 16},
                     signals_entry=True,
                     stores=[StoreSlice("A", "k.py:1", (4,), (Step(Op.PID),), (0,), (1,), True)],
                     remap_checks=[RemapSlice("A", 0, "k.py:1", 2, (0, 1, 1, 0),
                                              (Step(Op.PID),), 0, ())])
    assert abi.FusedABI.from_json(json.loads(json.dumps(a.to_json()))) == a
    d = a.to_json()
    del d["signals_entry"]
    assert abi.FusedABI.from_json(d).signals_entry is False


def test_epochs_start_at_one_and_grow():
    e = EpochCounter()
    assert [e.next() for _ in range(3)] == [1, 2, 3] and e.value == 3


def test_epoch_overflow_is_a_launch_error():
    e = EpochCounter(limit=3)
    assert [e.next(), e.next(), e.next()] == [1, 2, 3]
    with pytest.raises(LaunchError, match="syn_epoch"):
        e.next()
    assert e.value == 3  # unchanged by the refused launch


def test_wrap32_and_trap_timeout_convention():
    from syncopate.runtime.diag import wrap32
    from syncopate.runtime.epochs import kernel_timeout_ns
    assert wrap32(5) == 5 and wrap32(2**32 + 7) == 7 and wrap32(2**31) == -2**31
    # serial-number compare: a wrapped flag still reaches a wrapped target
    flag, target = wrap32(70000 * 32800), wrap32(70000 * 32800)
    assert wrap32(flag - target) >= 0 and wrap32(flag - 1 - target) < 0
    assert kernel_timeout_ns({"SYNCOPATE_TIMEOUT_S": "2"}) == 2_000_000_000
    assert kernel_timeout_ns({"SYNCOPATE_TIMEOUT_S": "2", "SYNCOPATE_TIMEOUT_ACTION": "trap"}) == \
        -2_000_000_000
    assert kernel_timeout_ns({"SYNCOPATE_TIMEOUT_S": "0", "SYNCOPATE_TIMEOUT_ACTION": "trap"}) == 0


def test_fused_enabled_env():
    assert fused_enabled({})
    for off in ("0", "false", "OFF", "no"):
        assert not fused_enabled({"SYNCOPATE": off})
    assert fused_enabled({"SYNCOPATE": "1"})
