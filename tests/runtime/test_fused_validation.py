"""FusedKernel's host-side checks before any launch: world size, backend and operand at
construction; operand shape, dtype, symmetry and process group at validation; a kernel
poisoned by a communication timeout refuses to launch again.

CPU only (split from tests/test_runtime_cpu.py; shared fakes in runtime_fakes.py).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.errors import CommTimeout, LaunchError  # noqa: E402
from syncopate.runtime.fused import FusedKernel  # noqa: E402
from runtime_fakes import diag_words, fake_comm, ptr_kernel, ag_schedule, fk_values  # noqa: E402


def test_fuse_rejects_wrong_world_size():
    c = fake_comm(W=2)
    with pytest.raises(LaunchError, match="world_size=2"):
        FusedKernel(ptr_kernel(), ag_schedule(W=4), operand="a_ptr", backend="ce", comm=c)


def test_fuse_rejects_unknown_backend_and_operand():
    c = fake_comm()
    with pytest.raises(LaunchError, match="choose one of"):
        FusedKernel(ptr_kernel(), ag_schedule(), operand="a_ptr", backend="tcp", comm=c)
    with pytest.raises(LaunchError, match="not a parameter"):
        FusedKernel(ptr_kernel(), ag_schedule(), operand="x_ptr", backend="ce", comm=c)
    with pytest.raises(LaunchError, match="symm_backend='nvshmem'"):
        FusedKernel(ptr_kernel(), ag_schedule(), operand="a_ptr", backend="nvshmem", comm=c)
    with pytest.raises(LaunchError, match="comm=Communicator"):
        FusedKernel(ptr_kernel(), ag_schedule(), operand="a_ptr", backend="ce", comm=None)


def test_validate_operand_shape_dtype_symmetry():
    c = fake_comm()
    fk = FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr", backend="ce",
                     comm=c)
    good = c.empty((64, 32), torch.bfloat16)
    assert fk.validate(fk_values(c, good))["a_ptr"] is good
    with pytest.raises(LaunchError, match=r"shape \(32, 32\).*\(64, 32\)"):
        fk.validate(fk_values(c, good[:32]))
    with pytest.raises(LaunchError, match="float16.*bf16"):
        fk.validate(fk_values(c, c.empty((64, 32), torch.float16)))
    with pytest.raises(LaunchError, match="not in symmetric memory"):
        fk.validate(fk_values(c, torch.empty(64, 32, dtype=torch.bfloat16)))


def test_validate_names_the_other_process_group():
    from syncopate.runtime import fused as fmod
    c1, c2 = fake_comm(), fake_comm()
    c2.group_name = "tp-group"
    fmod.register_comm(c1)
    fmod.register_comm(c2)
    fk = FusedKernel(ptr_kernel(), ag_schedule(shape=(64, 32)), operand="a_ptr", backend="ce",
                     comm=c1)
    A2 = c2.empty((64, 32), torch.bfloat16)
    with pytest.raises(LaunchError, match="another Communicator.*tp-group"):
        fk.validate(fk_values(c1, A2))


def test_poisoned_kernel_refuses_and_check_raises_once():
    c = fake_comm()
    fk = FusedKernel(ptr_kernel(), ag_schedule(), operand="a_ptr", backend="ce", comm=c)
    c.register_fused(fk)
    words = diag_words(state=1, rank=0, flag=1, value=0, expected=3, kind=abi.KIND_CHUNK, epoch=3)
    fk.diag.copy_(torch.tensor(words, dtype=torch.int32))
    with pytest.raises(CommTimeout, match="chunk 1 never arrived"):
        c.check()
    assert int(fk.diag.abs().sum()) == 0  # cleared, error kept on the kernel
    with pytest.raises(LaunchError, match="cannot be reused"):
        fk.launch((1,), fk_values(c, c.empty((64, 32), torch.bfloat16)))
