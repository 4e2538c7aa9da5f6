"""``sm``: comm programs inside the fused kernel move the data (push or pull) over NVLink
(``partition-sms`` + ``lower-sm``); the host launches the kernel and nothing else."""

from __future__ import annotations

from .base import Backend, Launcher


class SMLauncher(Launcher):
    """Signal ``ENTRY[me] = e`` on every rank on the launch stream, unless the kernel does
    (``abi.signals_entry``: comm program 0 publishes it), then launch the kernel. Its comm
    programs do the rest, including holding the launch open until CONSUMED reached
    ``e * reads(me)`` (pull). Enqueues only on the stream it is given."""

    def launch(self, cfg, grid, args, stream, epoch: int, peers, operand_tensors) -> None:
        fk, a = self.fk, cfg.abi
        if not a.signals_entry and not fk.test_skip_entry:
            from ..runtime import sync_kernels as sk  # Triton kernels: imported on first use
            sk.signal_entry(peers, a.layout.entry(fk.comm.rank), epoch, fk.comm.world_size,
                            flag64=a.flag_dtype == "int64", stream=stream)
        self.run_kernel(cfg, grid, args, stream)


class SM(Backend):
    name = "sm"
    flag_dtype = "int32"
    has_comm_programs = True
    default_comm_programs = 16
    signals_entry = True
    compiles_withheld = True
    pre_resolve_passes = ("partition-sms",)
    launcher_class = SMLauncher
