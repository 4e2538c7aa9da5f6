"""One call layout's launch: a :class:`LaunchPlan`, made once per layout and kept in one cache
per communicator (:func:`find` / :func:`keep`), with the least host work per call after that.

Why: at M = 1024 an eager fused op runs ~0.1 ms on the GPU, and the op's own Python (checks,
config and plan choice, cache lookups, the GEMM's argument list) cost ~100 us per call on the
GPU host (bench/results/2026-11-30-h200x2-run4/host_profile.log); ``FusedKernel.launch``'s
fast path still hashed the whole argument list into a launch key (~5 us on an H200 host) and
a ``Tensor.copy_`` staged the input (~6 us). A plan holds what the op derived for the layout:
the FusedKernel, its grid, the argument template with the per-call tensors' positions, the
staging slot (all-gather) or the result rows (reduce-scatter); at world size 1, where there is
nothing to communicate, only the layout's local launch (``local``). The caller's key fixes
shapes, strides, dtypes and scalars; between calls only non-operand tensor arguments change
address, and the operands' addresses are checked.

From the layout's third call (once its direct launch exists) a call checks only what can
change under a fixed layout -- the kernel poisoned, a fault recorded, a launch hook set, the
watchdog timeout, the device, the stream being captured, the operands' addresses -- counts the
epoch and hands the call to the compiled launch path (:mod:`.fastlaunch`), which enqueues the
staging copy and the kernel in one C call (its Gate makes these checks in C too). That covers
configurations that advance their epoch on the device (``abi.self_advance``) and whose launcher
either enqueues nothing but the kernel (``Launcher.kernel_only``: sm and nvshmem with the
kernel publishing ENTRY itself) or hands back its whole launch as one call (``Launcher.bind``:
ce's stream programs, the deferred CONSUMED wait and the call's copy included). Everything
else -- the first launches, CUDA-graph capture, a pending CONSUMED wait of a kernel-only
launch, another stream or device, hooks, a ce layout without stream programs (a region the copy
engine or the sum kernel cannot take) -- goes through ``FusedKernel.launch`` exactly as before:
the bound path is an optimisation of one case, never a second semantics.
"""

from __future__ import annotations

import torch

from .. import settings
from . import _cuda, direct_launch, fastlaunch, graphs
from .epochs import kernel_timeout_ns
from .sync_kernels import stager

#: the communicator's cache entry that holds its plans (layout key -> plan)
_PLANS = "launch_plans"
#: bounded: callers cycling through output buffers clear it (a plan holds its template's tensors)
_PLANS_MAX = 64


def find(comm, key):
    """The plan kept under ``key`` on ``comm``, or None (no key, none kept, or its kernel
    poisoned: a kernel that timed out or failed part-way is rebuilt)."""
    if key is None:
        return None
    plan = comm.cache.get(_PLANS, {}).get(key)
    if plan is None or getattr(plan.fk, "_poisoned", None):
        return None
    return plan


def keep(comm, key, plan: "LaunchPlan") -> None:
    """Keep ``plan`` under ``key`` on ``comm`` (a key that holds the registry generation must
    hold the one of *after* the plan's first launch, which allocates the kernel's flags)."""
    if key is None:
        return
    table = comm.cache.setdefault(_PLANS, {})
    if len(table) >= _PLANS_MAX:
        table.clear()
    table[key] = plan


def memcpy_bytes(dst, src) -> int:
    """The byte count of a plain device-to-device copy of ``src`` into ``dst``, or 0 when
    ``Tensor.copy_`` must do it (a conversion, a broadcast, strides, another device)."""
    if (dst.dtype != src.dtype or dst.shape != src.shape or dst.device != src.device
            or not dst.is_contiguous() or not src.is_contiguous()):
        return 0
    return dst.numel() * dst.element_size()


def enqueue_copy(dst, src, nbytes: int) -> None:
    """``dst.copy_(src)`` on the current stream: one ``cuMemcpyDtoDAsync`` by handle when it is
    one plain copy (``nbytes``, :func:`memcpy_bytes`) between disjoint CUDA buffers, else
    ``Tensor.copy_`` (~5-10 us of torch's dispatch on an H200 host: the general path's staging,
    every ce call)."""
    if nbytes:
        d, s = dst.data_ptr(), src.data_ptr()
        dev = dst.device
        if (dev.type == "cuda" and not (d < s + nbytes and s < d + nbytes)
                and fastlaunch.current_device() == dev.index):
            try:
                if _cuda.memcpy_async(d, s, nbytes, fastlaunch.current_raw_stream(dev.index)):
                    return
            except _cuda.DriverError:
                pass  # e.g. no current context on this thread: torch's copy sets it up
    dst.copy_(src)


class LaunchPlan:
    """One layout's launch (module docstring): ``fk`` launched with ``grid`` and ``args`` (the
    per-call tensors swapped in at ``a_index`` / ``out_index``), staging into ``slot`` or
    copying the ``result`` rows out, the output ``[*out_shape]``; or, with ``fk`` None, the
    layout's ``local(a, b, out)`` launch."""

    __slots__ = ("fk", "grid", "args", "out_shape", "a_index", "out_index", "slot", "result",
                 "local", "copy_bytes", "_slot_at", "_result_ptr", "_tries", "ready", "cfg",
                 "tail", "kgrid", "dl", "timeout", "generation", "device", "operands",
                 "raw_stream", "capture_status", "get_device", "run", "gate")

    def __init__(self, fk=None, grid=None, args=(), out_shape=None, *, a_index=None,
                 out_index=None, slot=None, result=None, local=None):
        self.fk, self.grid, self.args, self.out_shape = fk, grid, list(args), out_shape
        self.a_index, self.out_index, self.slot, self.result = a_index, out_index, slot, result
        self.local = local
        #: the byte count of the call's copy as one memcpy (:func:`memcpy_bytes`; 0:
        #: ``Tensor.copy_``), worked out at the first call: the layout fixes it
        self.copy_bytes = None
        # the fixed tensors' addresses and strides (parts of symmetric buffers, which stay put
        # while the registry generation the call's key holds does), read once, not per call
        self._slot_at = None if slot is None else (slot.data_ptr(), slot.stride())
        self._result_ptr = None if result is None else result.data_ptr()
        #: True once :meth:`_bind` made the bound state (``cfg`` ... ``gate``); general calls left
        #: that may still find it (asking costs a launch key): the direct launch exists from the
        #: layout's second launch, and what can never be bound stops at once
        self.ready, self._tries, self.gate = False, 4, None

    def run_staged(self, a_shard, out, a=None):
        """An all-gather's call: stage ``a_shard`` into this rank's block of the symmetric
        operand (``slot``; nothing to copy when it already is it) and launch with ``out``
        (allocated when None) and, when the gathered operand is not the kernel's first, ``a``
        at ``a_index``; returns ``out``.

        The per-call path of every eager call with this layout, written for speed: the copy
        goes to the bound path as addresses; anything it does not take goes through
        :meth:`launch` with the CONSUMED wait before the staging
        (``FusedKernel.before_staging``). The bound path makes that wait itself where there is
        one: only ce defers it, and ce's bound launch (``CELauncher.bind``) enqueues it first."""
        if out is None:
            out = torch.empty(self.out_shape, device=a_shard.device, dtype=a_shard.dtype)
        args = self.args.copy()
        args[self.out_index] = out
        if a is not None:
            args[self.a_index] = a
        slot_ptr, slot_stride = self._slot_at
        src = a_shard.data_ptr()
        if src == slot_ptr and a_shard.stride() == slot_stride:  # written in place
            if not (self.ready and self.fast(args, None)):
                self.fk.before_staging()
                self.launch(args)
            return out
        n = self.copy_bytes
        if n and self.ready and self.fast(args, (slot_ptr, src, n, False)):
            return out
        self.fk.before_staging()
        self.launch(args, self.slot, a_shard)
        return out

    def run_copy_out(self, a, out):
        """A reduce-scatter's or all-reduce's call: launch with ``a``, then copy the reduced
        rows (``result``, in the symmetric buffer the next launch overwrites; the copy is
        stream-ordered before it) into ``out`` (allocated when None); returns ``out``. The copy
        goes with the launch as in :meth:`run_staged`."""
        args = self.args.copy()
        args[self.a_index] = a
        if out is None:
            out = torch.empty(self.out_shape, device=a.device, dtype=a.dtype)
        n = self.copy_bytes
        if n and self.ready and self.fast(args, (out.data_ptr(), self._result_ptr, n, True)):
            return out
        self.launch(args, out, self.result, after=True)
        return out

    def launch(self, args: list, dst=None, src=None, *, after: bool = False) -> None:
        """Launch with ``args``; with ``dst``, ``dst.copy_(src)`` before the kernel (``after``
        False) or after it, enqueued with the launch when it can be one memcpy. The bound path
        when it takes the call, else ``FusedKernel.launch`` with the copy around it, and then
        whether the bound path can take the next call."""
        n = None
        if dst is not None:
            n = self.copy_bytes
            if n is None:
                n = self.copy_bytes = memcpy_bytes(dst, src)
        if self.ready and (self.fast(args, None) if dst is None else
                           n and self.fast(args, (dst.data_ptr(), src.data_ptr(), n, after))):
            return
        if dst is not None and not after:
            enqueue_copy(dst, src, n)
        self.fk.launch(self.grid, args)
        if dst is not None and after:
            enqueue_copy(dst, src, n)
        if not self.ready and self._tries:
            r = self._bind(args, dst is not None, n, after)
            if r is None:
                self._tries -= 1
            elif not r:
                self._tries = 0

    def fast(self, args, c) -> bool:
        """The call on the bound path, once :attr:`ready` (``c``: the copy as ``(dst, src,
        nbytes, after)`` addresses, or None); False when it must take the general one (nothing
        was done then).
        Runs on every eager call: written for speed. With ``gate`` (``_fastlaunch.c``'s Gate)
        the checks and the launch below are one C call that declines whatever it does not
        take."""
        fk = self.fk
        gate = self.gate
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
        cfg = self.cfg
        if (fk._poisoned or comm.generation != self.generation
                or (cfg.consumed_pending and self.run is None)
                or self.get_device() != self.device or direct_launch.hooks_active()
                or kernel_timeout_ns() != self.timeout):
            return False
        for i, ptr in self.operands:
            if args[i].data_ptr() != ptr:
                return False
        if c is not None:
            dst, src, n = c[0], c[1], c[2]
            if dst < src + n and src < dst + n:
                return False  # overlapping: Tensor.copy_ refuses or orders it, a memcpy would not
        stream = self.raw_stream(self.device)
        if self.capture_status(stream) or graphs._LOCAL.active is not None:
            return False
        values = args + self.tail
        with fk._lock:
            if fk._poisoned:
                fk._refuse_if_poisoned()
            comm.check()
            e = cfg.epochs.next()
            fk.last_config = cfg
            try:
                done = (self.dl.enqueue(self.kgrid, values, stream, c) if self.run is None
                        else self.run(stream, e, values, c))
            except BaseException as exc:
                fk._poison_partial_launch(e, exc)
                raise
            if not done:
                # no current context on this thread, and nothing enqueued: the count goes back
                # and the general path launches through Triton, whose launcher sets one
                cfg.epochs.value = e - 1
                return False
        return True

    def _bind(self, args, copy: bool, nbytes, after: bool):
        """Make the bound state of the layout of ``args`` (``copy``: the call has one, of
        ``nbytes`` as one memcpy): True when made, None while it may still come (no fast-path
        entry or direct launch yet), False when the bound path cannot take this layout
        (module docstring)."""
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        probe = fastlaunch.capture_probe()
        if raw is None or probe is None or (copy and not nbytes) or self.fk.meets_peers:
            return False  # (the last: every launch meets its peers in FusedKernel.launch)
        fk = self.fk
        fkey = fk._launch_key(self.grid, args, None)
        hit = fk._fast.get(fkey) if fkey is not None else None
        if hit is None:
            return None
        cfg, tail, peers, g, direct = hit
        if (g is None or not cfg.abi.self_advance
                or any(i >= len(args) for i in fk._op_index.values())):
            return False
        env = settings.watchdog_raw()
        timeout = kernel_timeout_ns()
        dl = direct.get((g, timeout))
        if dl is None:
            return None
        if not dl:
            return False
        comm = fk.comm
        run = None
        if not fk.launcher.kernel_only(cfg):
            # the launcher's whole launch around the kernel (ce: its stream programs)
            run = fk.launcher.bind(cfg, g, dl, peers,
                                   {p: args[i] for p, i in fk._op_index.items()},
                                   after if copy else None)
            if run is None:
                return False
        elif not dl.copies:
            return False
        elif copy:  # the copy as a kernel where it fits (sync_kernels.stager says why)
            dl.use_stager(stager(comm.device.index))
        self.run, self.cfg, self.kgrid, self.dl, self.timeout = run, cfg, g, dl, timeout
        self.raw_stream, self.capture_status = raw, probe
        self.get_device = fastlaunch.device_getter()
        self.tail = list(tail) + [cfg.flags, peers, cfg.table, fk.diag_addr, comm.rank,
                                  cfg.epoch_word, timeout]
        self.generation, self.device = comm.generation, comm.device.index
        self.operands = tuple((i, args[i].data_ptr()) for i in fk._op_index.values())
        self.gate = self._gate(env) if run is None else None
        self.ready = True
        return True

    def _gate(self, env):
        """``_fastlaunch.c``'s Gate for this plan's launches: :meth:`fast`'s checks and launch
        in C; None where it cannot make them all (a kernel with global scratch, an empty grid,
        records it cannot read by address, an environment that is not POSIX's
        ``os.environ``), and :meth:`fast` runs in Python. ``env``: the watchdog's raw
        environment values when ``timeout`` was read. Asked by :meth:`_bind` for a kernel-only
        launch, which found the module, its capture probe and the kernel's compiled launch."""
        fk, cfg = self.fk, self.cfg
        comm = fk.comm
        if (self.dl.scratch_size or comm.probe_addrs() is None or env is None
                or min(self.kgrid) <= 0):
            return None
        mod, cap = fastlaunch.module(), fastlaunch.entry_point("cuStreamIsCapturing")
        return mod.Gate(self.dl._c, tuple(int(x) for x in self.kgrid), self.tail, self.operands,
                        ((fk, "_poisoned"), (cfg, "consumed_pending")),
                        ((comm, "generation", self.generation),),
                        self.get_device, self.device, direct_launch.hook_chains(),
                        settings.ENVIRON, settings.WATCHDOG_KEYS, env, self.raw_stream, cap,
                        graphs._LOCAL, fk._lock, fk, comm, cfg.epochs, cfg)
