"""The ``sm`` backend's host side: signal ENTRY unless the kernel does, launch the kernel."""

from __future__ import annotations

from .base import Launcher


class SMLauncher(Launcher):
    """Signal ``ENTRY[me] = e`` on every rank on the launch stream, unless the kernel does
    (``abi.signals_entry``: comm program 0 publishes it), then launch the kernel. Its comm
    programs do the rest, including holding the launch open until CONSUMED reached
    ``e * reads(me)`` (pull). Enqueues only on the stream it is given."""

    def capture_refusal(self, cfg) -> str | None:
        """Capturable when the kernel publishes ENTRY itself: then the launch is the device
        epoch advance and the kernel, both reading the epoch from device memory. The runtime's
        ``signal_entry`` takes a host epoch, which a graph would replay stale."""
        if not cfg.abi.signals_entry:
            return ("its kernel does not publish ENTRY itself (abi.signals_entry is False), and "
                    "the runtime's signal_entry takes a host-computed epoch")
        return None

    def kernel_only(self, cfg) -> bool:
        return cfg.abi.signals_entry or self.fk.test_skip_entry

    def launch(self, cfg, grid, args, stream, epoch: int | None, peers, operand_tensors,
               direct=None) -> None:
        fk, a = self.fk, cfg.abi
        if not a.signals_entry and not fk.test_skip_entry:
            from .. import sync_kernels as sk  # Triton kernels: imported on first use
            sk.signal_entry(peers, a.layout.entry(fk.comm.rank), epoch, fk.comm.world_size,
                            flag64=a.flag_dtype == "int64", stream=stream)
        self.run_kernel(cfg, grid, args, stream, direct)
