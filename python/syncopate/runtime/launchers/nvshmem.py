"""The ``nvshmem`` backend's host side: ``sm``'s launch, after NVSHMEM's module init of each
configuration's kernel."""

from __future__ import annotations

from ...errors import LaunchError
from .sm import SMLauncher


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
