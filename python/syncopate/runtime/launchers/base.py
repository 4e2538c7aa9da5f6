"""The host side of a backend: :class:`Launcher`, one per FusedKernel (the backend's compile
side is its :class:`~syncopate.backends.BackendSpec`). docs/backends.md says how to add one."""

from __future__ import annotations


class Launcher:
    """The host side of one backend for one FusedKernel: what happens around the kernel launch.

    The FusedKernel core (``runtime/fused.py``) owns configurations, flags, epochs, the peers
    table and the watchdog; it calls :meth:`configure` once per compiled configuration (after
    its flags exist) and :meth:`launch` once per launch, with the launch stream current when
    :attr:`needs_stream_context` is True (else the launch only enqueues on ``stream``, passed
    explicitly)."""

    #: launch under ``torch.cuda.device(...)`` / ``torch.cuda.stream(S)`` (else everything
    #: it enqueues names its stream; another device's launch enters the device anyway)
    needs_stream_context = False
    #: :meth:`launch` reads ``operand_tensors`` (else it gets None when no context is entered)
    needs_operands = False

    def __init__(self, fk):
        self.fk = fk

    def configure(self, cfg) -> None:
        """Per-configuration host state, after ``cfg.flags`` and ``cfg.flag_addrs`` exist."""

    def launch(self, cfg, grid, args, stream, epoch: int | None, peers,
               operand_tensors: dict, direct: dict | None = None) -> None:
        """Enqueue one launch on ``stream``. ``epoch`` is the host's count of this launch, or
        None under CUDA-graph capture (only backends whose :meth:`capture_refusal` is None are
        launched then, and they must not use it). ``direct``: handed to :meth:`run_kernel`."""
        raise NotImplementedError

    def kernel_only(self, cfg) -> bool:
        """Whether :meth:`launch` of ``cfg`` enqueues nothing but :meth:`run_kernel`: a
        bound launch (``runtime/bound.py``) may then launch the kernel directly."""
        return False

    def bind(self, cfg, grid, dl, peers, operand_tensors, copy_after: bool | None):
        """For a launcher that enqueues more than the kernel: a bound call's whole launch
        (``runtime/bound.py``), ``run(stream, e, values, copy) -> bool``, or None (the default:
        the bound path takes only :meth:`kernel_only` launches)."""
        return None

    def consumed_program(self, cfg):
        """The CONSUMED wait of ``cfg`` as a compiled stream program, or None (the default:
        ``FusedKernel.consumed_wait`` launches the wait kernel itself)."""
        return None

    def capture_refusal(self, cfg) -> str | None:
        """Why a launch of ``cfg`` cannot be captured in a CUDA graph (None: it can). A
        backend may allow capture only if everything it enqueues reads the epoch from the
        device (docs/cuda-graphs.md); the default refuses."""
        return (f"the {type(self).__name__} host side has not been shown to keep host-computed "
                f"epochs out of what it enqueues")

    def run_kernel(self, cfg, grid, args, stream, direct: dict | None = None) -> None:
        """Launch the compiled fused kernel itself on ``stream``.

        ``direct``: the cache of :class:`~syncopate.runtime.direct_launch.DirectLaunch` es of
        the call's argument layout (``FusedKernel._prepare``; None: the layout's first launch,
        or a captured one). With it, the kernel is launched with one ``cuLaunchKernel`` whose
        parameters were packed at the layout's previous launch; every scalar argument is then
        the same by the fast path's key, only tensor addresses are read again."""
        ck = cfg.compiled.kernel
        if direct is not None:
            from .. import direct_launch  # imports Triton: not at module import
            # the ABI's last parameter, the watchdog timeout, is read from the environment at
            # each launch and is not in the fast path's key
            key = (grid, args[-1])
            dl = direct.get(key)
            if dl is None:
                dl = direct_launch.build(ck, args, fixed_scalars=True, device=stream.device)
                direct[key] = dl or False
            if dl and dl(grid, args, stream.cuda_stream):
                return
        if getattr(ck.metadata, "global_scratch_size", 0):
            # device-side TMA descriptors live in Triton's global scratch (allocator per thread);
            # kernels sits above the runtime (layer 4) and imports Triton: left for the layers work
            from ...kernels import ensure_tma_allocator
            ensure_tma_allocator()
        ck[grid](*args, stream=stream.cuda_stream)
