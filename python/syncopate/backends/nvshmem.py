"""``nvshmem``: like ``sm`` (comm programs inside the kernel), but the comm programs call
NVSHMEM's device library (``lower-nvshmem``, ``libnvshmem_device.bc`` linked through Triton's
``extern_libs``); 64-bit signal flags; buffers in the NVSHMEM heap
(``Communicator(symm_backend='nvshmem')``); the kernel's CUmodule is initialised for NVSHMEM
once after it is loaded."""

from __future__ import annotations

import os
import sysconfig
from pathlib import Path

from ..errors import CompileError, LaunchError
from .sm import SM, SMLauncher


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


def nvshmem_module_init(ck) -> None:
    """Initialise NVSHMEM device state in the fused kernel's CUmodule (once, after load):
    ``torch._C._distributed_c10d._nvshmemx_cumodule_init(module)``, as torch's own
    ``@requires_nvshmem`` Triton kernels do."""
    try:
        from torch._C._distributed_c10d import _nvshmemx_cumodule_init
    except ImportError as e:  # a torch build without NVSHMEM (third-party)
        raise LaunchError(f"this torch build has no NVSHMEM module init ({e}); use backend 'sm'") from None
    ck._init_handles()  # loads the cubin: ck.module becomes the CUmodule handle
    _nvshmemx_cumodule_init(ck.module)


class NVSHMEMLauncher(SMLauncher):
    """``sm``'s launch, after NVSHMEM's module init of each configuration's kernel."""

    def capture_refusal(self, cfg) -> str | None:
        """As ``sm``, once NVSHMEM's module init ran (a host call with copies, done at the
        configuration's first eager launch)."""
        if not cfg.host.get("nvshmem_ready"):
            return ("NVSHMEM's module init of this configuration has not run yet (it runs at "
                    "the first eager launch, not at warmup)")
        return super().capture_refusal(cfg)

    def kernel_only(self, cfg) -> bool:
        """Once NVSHMEM's module init ran (:meth:`run_kernel` does it at the first launch)."""
        return bool(cfg.host.get("nvshmem_ready")) and super().kernel_only(cfg)

    def run_kernel(self, cfg, grid, args, stream, direct=None) -> None:
        if not cfg.host.get("nvshmem_ready"):
            nvshmem_module_init(cfg.compiled.kernel)
            cfg.host["nvshmem_ready"] = True
        super().run_kernel(cfg, grid, args, stream, direct)


class NVSHMEM(SM):
    name = "nvshmem"
    flag_dtype = "int64"  # NVSHMEM signals are 64-bit
    symm_backend = "nvshmem"
    launcher_class = NVSHMEMLauncher

    def compile_options(self, options: dict) -> dict:
        options.setdefault("extern_libs", {"libnvshmem_device": nvshmem_device_library()})
        return options
