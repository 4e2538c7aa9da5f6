"""A fused kernel's launch bound to one argument layout: the eager path of the ops' prepared
calls, with the least host work per call.

Why: an eager fused op at M = 1024 runs ~0.1 ms on the GPU, and the issue's target for its
host time is 20 us (sm). ``FusedKernel.launch``'s fast path still hashed the whole argument
list into a launch key (~5 us on an H200 host under the profiler), built the argument list,
and went through the backend's launcher and a ctypes launch; the op around it had already
keyed the same layout (``ops/driver.prepared_key``) and then staged its input with a
``Tensor.copy_`` (~6 us). A :class:`BoundLaunch` is made once per prepared call. Per call it
checks only what can change under a fixed layout -- the kernel poisoned, a fault recorded, a
launch hook set, the watchdog timeout, the device, the stream being captured, the operands'
addresses -- counts the epoch and hands the call to the compiled launch path
(:mod:`.fastlaunch`), which enqueues the staging copy and the kernel in one C call.

What it covers: configurations that advance their epoch on the device (``abi.self_advance``)
and whose launcher either enqueues nothing but the kernel (``Launcher.kernel_only``: sm and
nvshmem with the kernel publishing ENTRY itself) or hands back its whole launch as one call
(``Launcher.bind``: ce's stream programs, the deferred CONSUMED wait and the call's copy
included), once the layout's direct launch exists (its second launch). Everything else -- the
first launches, CUDA-graph capture, a pending CONSUMED wait of a kernel-only launch, another
stream or device, hooks, a ce layout without stream programs (a region the copy engine or the
sum kernel cannot take) -- goes through
``FusedKernel.launch`` exactly as before: the bound path is an optimisation of one case, never
a second semantics. Its contract with the caller: between calls only non-operand tensor
arguments change address (the caller's key fixes shapes, strides, dtypes and scalars, and
``prepared_key`` does), and the operands' addresses are checked.
"""

from __future__ import annotations

from .. import settings
from . import _cuda, direct_launch, fastlaunch, graphs
from .epochs import kernel_timeout_ns


class Copy:
    """A copy that goes with a launch: ``dst.copy_(src)`` before the kernel (``after`` False:
    an all-gather's staging) or after it (a reduce-scatter's result). ``nbytes``: when both
    are contiguous with one dtype and shape, their byte count -- the copy is then one
    ``cuMemcpyDtoDAsync`` enqueued with the kernel; 0: ``Tensor.copy_``."""

    __slots__ = ("dst", "src", "after", "nbytes")

    def __init__(self, dst, src, *, after: bool, nbytes: int | None = None):
        """``nbytes``: :func:`memcpy_bytes` of the pair when the caller knows it from an
        earlier call of the same layout (it costs ~1 us per call to work out)."""
        self.dst, self.src, self.after = dst, src, after
        self.nbytes = memcpy_bytes(dst, src) if nbytes is None else nbytes

    def run(self) -> None:
        """The copy on the current stream: one ``cuMemcpyDtoDAsync`` by handle when it is one
        plain copy (``nbytes``) between disjoint CUDA buffers, else ``Tensor.copy_`` (~5-10 us
        of torch's dispatch on an H200 host: the general path's staging, every ce call)."""
        n = self.nbytes
        if n:
            dst, src = self.dst.data_ptr(), self.src.data_ptr()
            dev = self.dst.device
            if (dev.type == "cuda" and not (dst < src + n and src < dst + n)
                    and fastlaunch.current_device() == dev.index):
                try:
                    if _cuda.memcpy_async(dst, src, n, fastlaunch.current_raw_stream(dev.index)):
                        return
                except _cuda.DriverError:
                    pass  # e.g. no current context on this thread: torch's copy sets it up
        self.dst.copy_(self.src)


def memcpy_bytes(dst, src) -> int:
    """The byte count of a plain device-to-device copy of ``src`` into ``dst``, or 0 when
    ``Tensor.copy_`` must do it (a conversion, a broadcast, strides, another device)."""
    if (dst.dtype != src.dtype or dst.shape != src.shape or dst.device != src.device
            or not dst.is_contiguous() or not src.is_contiguous()):
        return 0
    return dst.numel() * dst.element_size()


class BoundLaunch:
    """``FusedKernel.bind(grid)``: call ``bound(args, copy)`` with the layout's
    arguments of this call (module docstring). ``copy``: a :class:`Copy` laid out like the
    one of the first call (same tensors' shapes and dtypes; its addresses may change)."""

    __slots__ = ("fk", "grid", "_ready", "_tries")

    def __init__(self, fk, grid):
        self.fk, self.grid = fk, grid
        self._ready = None  # _Ready once the layout's direct launch exists
        #: general calls left that may still find it (asking costs a launch key): the direct
        #: launch exists from the layout's second launch; what can never be bound stops at once
        self._tries = 4

    def __call__(self, args: list, copy: Copy | None = None) -> None:
        r = self._ready
        if r is not None:
            if copy is None:
                if self._fast(r, args, None):
                    return
            elif copy.nbytes and self._fast(r, args, (copy.dst.data_ptr(), copy.src.data_ptr(),
                                                      copy.nbytes, copy.after)):
                return
        self._general(args, copy)

    def fast(self, args: list, copy: tuple | None) -> bool:
        """The call on the bound path with the copy as addresses, ``(dst, src, nbytes, after)``
        (``nbytes`` from :func:`memcpy_bytes` of an earlier call of the layout), for a caller
        that holds them already (``ops/driver.PreparedCall``): no :class:`Copy` to build. False
        when the call must take the general path, which the caller then takes with ``__call__``
        (nothing was enqueued)."""
        r = self._ready
        return r is not None and self._fast(r, args, copy)

    def _general(self, args, copy) -> None:
        """``FusedKernel.launch`` with the copy around it, then whether the bound path can take
        the next call."""
        if copy is not None and not copy.after:
            copy.run()
        self.fk.launch(self.grid, args)
        if copy is not None and copy.after:
            copy.run()
        if self._ready is None and self._tries:
            r = _Ready.of(self.fk, self.grid, args, copy)
            if r is _NEVER:
                self._tries = 0
            elif r is None:
                self._tries -= 1
            self._ready = r if isinstance(r, _Ready) else None

    def _fast(self, r: "_Ready", args, c) -> bool:
        """The call on the bound path (``c``: the copy as in :meth:`fast`, or None); False when
        it must take the general one (nothing was done then). Runs on every eager call: written
        for speed. With ``r.gate`` (``_fastlaunch.c``'s Gate) the checks and the launch below
        are one C call that declines whatever it does not take."""
        fk = self.fk
        gate = r.gate
        if gate is not None:
            res = gate.run(args, c)
            if res is None:
                return False
            if res.__class__ is int:
                return True
            e, what = res  # the epoch was taken and the launch failed: as below
            exc = what if isinstance(what, BaseException) else direct_launch.launch_error(what)
            with fk._lock:
                fk._poison_partial_launch(e, exc)
            raise exc
        comm = fk.comm
        cfg = r.cfg
        if (fk._poisoned or comm.generation != r.generation
                or (cfg.consumed_pending and r.run is None)
                or r.get_device() != r.device or direct_launch.hooks_active()
                or kernel_timeout_ns() != r.timeout):
            return False
        for i, ptr in r.operands:
            if args[i].data_ptr() != ptr:
                return False
        if c is not None:
            dst, src, n = c[0], c[1], c[2]
            if dst < src + n and src < dst + n:
                return False  # overlapping: Tensor.copy_ refuses or orders it, a memcpy would not
        stream = r.raw_stream(r.device)
        if r.capture_status(stream) or graphs._LOCAL.active is not None:
            return False
        values = args + r.tail
        with fk._lock:
            if fk._poisoned:
                fk._refuse_if_poisoned()
            comm.check()
            e = cfg.epochs.next()
            fk.last_config = cfg
            try:
                done = (r.dl.enqueue(r.grid, values, stream, c) if r.run is None
                        else r.run(stream, e, values, c))
            except BaseException as exc:
                fk._poison_partial_launch(e, exc)
                raise
            if not done:
                # no current context on this thread, and nothing enqueued: the count goes back
                # and the general path launches through Triton, whose launcher sets one
                cfg.epochs.value = e - 1
                return False
        return True


class _Ready:
    """What the bound path needs of a layout once its direct launch exists."""

    __slots__ = ("cfg", "tail", "grid", "dl", "timeout", "generation", "device", "operands",
                 "raw_stream", "capture_status", "get_device", "run", "gate")

    @classmethod
    def of(cls, fk, grid, args, copy):
        """The bound state of ``fk``'s layout of ``args``; None while it may still come (no
        fast-path entry or direct launch yet); :data:`_NEVER` when the bound path cannot take
        this layout (module docstring)."""
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        probe = fastlaunch.capture_probe()
        if raw is None or probe is None or (copy is not None and not copy.nbytes):
            return _NEVER
        fkey = fk._launch_key(grid, args, None)
        hit = fk._fast.get(fkey) if fkey is not None else None
        if hit is None:
            return None
        cfg, tail, peers, g, direct = hit
        if (g is None or not cfg.abi.self_advance
                or any(i >= len(args) for i in fk._op_index.values())):
            return _NEVER
        env = settings.watchdog_raw()
        timeout = kernel_timeout_ns()
        dl = direct.get((g, timeout))
        if dl is None:
            return None
        if not dl:
            return _NEVER
        r = cls()
        comm = fk.comm
        r.run = None
        if not fk.launcher.kernel_only(cfg):
            # the launcher's whole launch around the kernel (ce: its stream programs)
            r.run = fk.launcher.bind(cfg, g, dl, peers,
                                     {p: args[i] for p, i in fk._op_index.items()},
                                     None if copy is None else copy.after)
            if r.run is None:
                return _NEVER
        elif not dl.copies:
            return _NEVER
        elif copy is not None:  # the copy as a kernel where it fits (sync_kernels.stager says why)
            from .sync_kernels import stager
            dl.use_stager(stager(comm.device.index))
        r.cfg, r.grid, r.dl, r.timeout, r.raw_stream = cfg, g, dl, timeout, raw
        r.capture_status = probe
        r.get_device = fastlaunch.device_getter()
        r.tail = list(tail) + [cfg.flags, peers, cfg.table, fk.diag_addr, comm.rank,
                               cfg.epoch_word, timeout]
        r.generation, r.device = comm.generation, comm.device.index
        r.operands = tuple((i, args[i].data_ptr()) for i in fk._op_index.values())
        r.gate = _gate(fk, r, env) if r.run is None else None
        return r


def _gate(fk, r: _Ready, env):
    """``_fastlaunch.c``'s Gate for ``r``'s launches: :meth:`BoundLaunch._fast`'s checks and
    launch in C; None where it cannot make them all (the module or an entry point missing, a
    kernel with global scratch, an empty grid, records it cannot read by address, an
    environment that is not POSIX's ``os.environ``), and ``_fast`` runs in Python.
    ``env``: the watchdog's raw environment values when ``r.timeout`` was read."""
    mod = fastlaunch.module() if settings.FAST_LAUNCH.get() else None
    c = getattr(r.dl, "_c", None)
    cap = fastlaunch.entry_point("cuStreamIsCapturing") if mod is not None else 0
    probes = fk.comm.probe_addrs() if hasattr(fk.comm, "probe_addrs") else None
    if (mod is None or not hasattr(mod, "Gate") or c is None or r.dl.scratch_size or not cap
            or probes is None or env is None or min(r.grid) <= 0):
        return None
    comm, cfg = fk.comm, r.cfg
    return mod.Gate(c, tuple(int(x) for x in r.grid), r.tail, r.operands,
                    ((fk, "_poisoned"), (cfg, "consumed_pending")),
                    ((comm, "generation", r.generation),),
                    r.get_device, r.device, direct_launch.hook_chains(), settings.ENVIRON,
                    settings.WATCHDOG_KEYS, env, r.raw_stream, cap, graphs._LOCAL, fk._lock, fk,
                    comm, cfg.epochs, cfg)


#: :meth:`_Ready.of`'s answer for a layout the bound path cannot take
_NEVER = object()
