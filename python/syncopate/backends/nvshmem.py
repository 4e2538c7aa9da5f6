"""``nvshmem``: like ``sm`` (comm programs inside the kernel), but the comm programs call
NVSHMEM's device library (``lower-nvshmem``, ``libnvshmem_device.bc`` linked through Triton's
``extern_libs``); 64-bit signal flags; buffers in the NVSHMEM heap
(``Communicator(symm_backend='nvshmem')``); its launcher initialises the kernel's CUmodule for
NVSHMEM once after it is loaded (``runtime/launchers/nvshmem.py``)."""

from __future__ import annotations

import dataclasses
import os
import sysconfig
from pathlib import Path

from ..errors import CompileError
from .sm import SM


def nvshmem_device_library() -> str:
    """Path of ``libnvshmem_device.bc`` (the ``nvshmem`` extra installs it)."""
    env = os.environ.get("NVSHMEM_LIB_DIR")
    candidates = [Path(env) / "libnvshmem_device.bc"] if env else []
    candidates.append(Path(sysconfig.get_path("purelib")) / "nvidia/nvshmem/lib/libnvshmem_device.bc")
    try:
        import nvidia.nvshmem  # type: ignore  # the optional wheel (a third-party package)

        for p in getattr(nvidia.nvshmem, "__path__", []):
            candidates.append(Path(p) / "lib/libnvshmem_device.bc")
    except ImportError:
        pass
    for c in candidates:
        if c.exists():
            return str(c)
    raise CompileError("the nvshmem backend needs libnvshmem_device.bc: pip install "
                       "'syncopate[nvshmem]' (nvidia-nvshmem-cu13==3.4.5) or set NVSHMEM_LIB_DIR")


NVSHMEM = dataclasses.replace(
    SM,
    name="nvshmem",
    flag_dtype="int64",  # NVSHMEM signals are 64-bit
    symm_backend="nvshmem",
    # not measured: assumed to move data like sm with a slightly larger fixed cost
    link_alpha_s=4e-6,
    extern_libs=(("libnvshmem_device", nvshmem_device_library),),
)
