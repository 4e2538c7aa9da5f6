"""Launching a compiled Triton kernel with one driver call (``cuLaunchKernel`` through ctypes).

Why: on an H200 host, a launch through Triton's compiled launcher (``CompiledKernel.run``)
costs 11.7-22.3 us of host time, and this module's launch 7.0-13.2 us (two hosts,
``scripts/gpu_launch_paths.py``; torch.matmul took 13.6-23.4 us on them).
Per call it parses every argument through ``PyArg_ParseTuple``, calls each tensor's
``data_ptr()`` *and* ``cuPointerGetAttribute`` on the result, and for a kernel with device-side
TMA descriptors allocates its global scratch from torch's allocator (``torch.empty``) before
``cuLaunchKernelEx``. A fused op launches its kernel with the same argument layout thousands of
times: everything but the tensors' addresses is known after the first launch.

A :class:`DirectLaunch` is built from a compiled kernel and one call's arguments (the same
positional list ``CompiledKernel[grid](*args)`` takes, constexprs included). It packs the
kernel's parameters into ctypes slots once, in the order and widths of Triton's own launcher
(``triton/backends/nvidia/driver.py``: ``make_launcher``): every non-constexpr parameter of the
signature, then the global-scratch and profile-scratch pointers. A call refreshes the slots
that may change -- tensor addresses always, scalars too unless the caller guarantees they are
fixed -- and calls ``cuLaunchKernel``.

What it does not do, and so refuses at build time (:func:`build` returns None and the caller
keeps Triton's launcher): tensor descriptors (host-side TMA descriptors are Python objects
Triton expands per call), thread-block clusters (``num_ctas > 1``), cooperative or PDL
launches (they need ``cuLaunchKernelEx`` attributes), the profiler's scratch, and float
scalars. Launch hooks (proton) are honoured: a call then returns False and the caller launches
through Triton (:func:`hooks_active`).

The global scratch (device-side TMA descriptors, written by each program at its start) is one
buffer per :class:`DirectLaunch` and stream, reused by every launch on that stream: launches on
one stream run one after another, so a launch never overwrites the descriptors of a kernel that
is still running. Triton instead allocates it from the caching allocator per launch.

The caller owns the contract that the arguments keep the build's layout: same parameter kinds
per position (a tensor stays a tensor); with ``fixed_scalars`` the same scalar values (the fused
kernel's fast path keys on them, ``specialize.launch_key``). Pointer arguments are not checked
with ``cuPointerGetAttribute`` on every call, as Triton does: the first launch of a layout goes
through Triton's launcher (which checks), and later calls of the layout carry tensors of the
same device (the launch key includes it).

A call refreshes the slots and launches in C when the compiled path is available
(:mod:`.fastlaunch`, on by default: one C call per launch, optionally with a staging memcpy;
``SYNCOPATE_FAST_LAUNCH=0`` keeps the ctypes path below, which is also the fallback when the
module cannot be built).

On by default; ``SYNCOPATE_DIRECT_LAUNCH=0`` keeps every launch on Triton's launcher (why it was
opt-in until the GPU suites passed with the lock in :meth:`DirectLaunch.__call__`: loopback ranks
are threads; docs/cuda-graphs.md, "Direct launches").
"""

from __future__ import annotations

import ctypes
import threading

import torch
import triton
from triton import knobs
from triton.runtime._allocation import NullAllocator, _allocator  # Triton 3.6 (pinned)

from .. import settings
from . import _cuda, fastlaunch
from .fastlaunch import PTR

_INT_TYPES = {
    "i1": ctypes.c_int8, "i8": ctypes.c_int8, "i16": ctypes.c_int16, "i32": ctypes.c_int32,
    "i64": ctypes.c_int64, "u1": ctypes.c_uint8, "u8": ctypes.c_uint8, "u16": ctypes.c_uint16,
    "u32": ctypes.c_uint32, "u64": ctypes.c_uint64,
}



def launch_error(rc: int) -> "_cuda.DriverError":
    """The error of a compiled launch's nonzero answer ``rc`` (``Launch.run`` in
    ``_fastlaunch.c``: positive, cuLaunchKernel's code; negative, the copy's)."""
    what = "cuLaunchKernel" if rc > 0 else "cuMemcpyDtoDAsync"
    return _cuda.DriverError(f"{what} failed with CUDA driver error {abs(rc)}")


def hook_chains() -> tuple:
    """``(object, attribute)`` of each launch hook chain :func:`hooks_active` reads (the
    compiled bound path, ``_fastlaunch.c``'s Gate, reads the same)."""
    rt = knobs.runtime
    return ((rt, "launch_enter_hook"), (rt, "launch_exit_hook"))


def hooks_active() -> bool:
    """Whether Triton launch hooks are set (e.g. by the proton profiler): a direct launch then
    steps back to Triton's launcher so the hooks see every launch. Triton 3.6 keeps the hooks
    in ``HookChain`` objects that are never None: a chain counts when it holds a hook."""
    rt = knobs.runtime
    return _hook_set(rt.launch_enter_hook) or _hook_set(rt.launch_exit_hook)


def _hook_set(hook) -> bool:
    if hook is None:
        return False
    calls = getattr(hook, "calls", None)
    return True if calls is None else bool(calls)


class Unsupported(Exception):
    """Why a kernel cannot be launched directly (the caller keeps Triton's launcher)."""


def plan_params(signature: dict, values) -> list[tuple[type, int, object]]:
    """``[(ctype, argument index, kind)]``: one slot per kernel parameter Triton's launcher
    passes, in its order, for ``signature`` (``CompiledKernel.src.signature``: name -> type
    string, every parameter including constexprs) and one call's positional ``values``;
    ``kind`` as :func:`.fastlaunch.new_launch` takes it: :data:`~.fastlaunch.PTR` for a pointer
    (a tensor's ``data_ptr()``, an int address or None), the ctype for an integer scalar.

    Raises :class:`Unsupported` for what :class:`DirectLaunch` does not pack (module
    docstring)."""
    types = list(signature.values())
    if len(types) != len(values):
        raise Unsupported(f"{len(values)} arguments for a signature of {len(types)} parameters")
    plan = []
    for i, ty in enumerate(types):
        if not isinstance(ty, str):
            raise Unsupported(f"parameter {i}: tuple type {ty!r}")
        if ty == "constexpr":
            continue
        if ty.startswith("*"):
            plan.append((ctypes.c_uint64, i, PTR))
        elif ty in _INT_TYPES:
            plan.append((_INT_TYPES[ty], i, _INT_TYPES[ty]))
        else:  # tensordesc<...>, nvTmaDesc, fp16/bf16/fp32/fp64 scalars
            raise Unsupported(f"parameter {i} of type {ty!r}")
    return plan


def _address(v) -> int:
    if v is None:
        return 0
    if type(v) is int:
        if v < 0:  # as Triton's launcher (and the compiled path): no silent wrap
            raise OverflowError(f"pointer argument {v} is negative")
        return v
    return v.data_ptr()


class DirectLaunch:
    """One compiled kernel's launches through ``cuLaunchKernel`` (module docstring). Build with
    :func:`build`; call ``dl(grid, values, stream_handle)``."""

    __slots__ = ("function", "block", "smem", "plan", "slots", "params", "refresh", "bounds",
                 "scratch_size", "scratch_align", "_scratch", "_launch", "device", "_lock", "_c",
                 "_last_scratch")

    def __init__(self, ck, values, *, fixed_scalars: bool, device=None):
        md = ck.metadata
        if getattr(md, "num_ctas", 1) != 1:
            raise Unsupported(f"num_ctas = {md.num_ctas} (thread-block clusters)")
        if getattr(md, "launch_cooperative_grid", False) or getattr(md, "launch_pdl", False):
            raise Unsupported("cooperative or PDL launch")
        if getattr(md, "profile_scratch_size", 0):
            raise Unsupported("profiler scratch")
        if getattr(md, "tensordesc_meta", None):
            raise Unsupported("tensor descriptors")
        self.plan = plan_params(ck.src.signature, values)
        ck._init_handles()  # loads the module: the function handle, the shared-memory limit
        self.function = ck.function
        num_warps, _, self.smem = ck.packed_metadata  # what Triton's launcher is handed
        self.block = 32 * num_warps
        self.device = device
        self.scratch_size = int(getattr(md, "global_scratch_size", 0) or 0)
        self.scratch_align = int(getattr(md, "global_scratch_align", 1) or 1)
        if self.scratch_align > 256:  # torch's caching allocator aligns blocks to 512 bytes
            raise Unsupported(f"global scratch alignment {self.scratch_align}")
        self._scratch = {}
        self._last_scratch = (None, 0, 0)  # (stream, programs it holds, address)
        self._lock = threading.Lock()
        # one ctypes object per parameter, then the two scratch pointers, as Triton's launcher
        self.slots = [ct() for ct, _, _ in self.plan] + [ctypes.c_uint64(0), ctypes.c_uint64(0)]
        self.params = (ctypes.c_void_p * len(self.slots))(
            *[ctypes.addressof(s) for s in self.slots])
        self.refresh = [(s, i, kind) for s, (_, i, kind) in zip(self.slots, self.plan)
                        if kind == PTR or not fixed_scalars]
        #: refreshed scalars are range-checked as Triton's argument parsing does (a ctypes
        #: integer would wrap silently); fixed ones once, here
        self.bounds = {i: fastlaunch.bounds(ct) for ct, i, kind in self.plan if kind != PTR}
        try:
            for s, (_, i, kind) in zip(self.slots, self.plan):
                s.value = _address(values[i]) if kind == PTR else self._scalar(values[i], i)
        except (TypeError, OverflowError, AttributeError) as e:  # Triton's launcher says why
            raise Unsupported(str(e)) from None
        fn = _cuda._bound("cuLaunchKernel",
                          [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3)
        if fn is None:
            raise Unsupported("the driver library has no cuLaunchKernel")
        self._launch = fn
        #: the compiled path (``fastlaunch``): the same slots refreshed and launched in C, with
        #: an optional staging copy; None: this object's ctypes path
        self._c = fastlaunch.new_launch(
            launch=fastlaunch.address_of(fn),
            memcpy=fastlaunch.entry_point("cuMemcpyDtoDAsync"), function=self.function,
            block=self.block, smem=self.smem, params=self.params,
            scratch_slot=self.slots[-2] if self.scratch_size else None,
            slots=self.refresh, keep=(self.slots, self.params))

    def _scratch_for(self, stream: int, programs: int) -> int:
        """The global-scratch address for a launch of ``programs`` programs on ``stream``
        (grown, never shrunk; kept alive by this object). The last answer is remembered: a
        layout's launches repeat it (called under the lock)."""
        last = self._last_scratch
        if last[0] == stream and last[1] >= programs:
            return last[2]
        need = programs * self.scratch_size
        have = self._scratch.get(stream)
        if have is None or have.numel() < need:
            have = self._scratch[stream] = _allocate_scratch(stream, need, self.device)
        addr = have.data_ptr()
        self._last_scratch = (stream, have.numel() // self.scratch_size, addr)
        return addr

    def _scalar(self, v, i: int) -> int:
        if not isinstance(v, int):  # bool is an int; numpy ints are not (Triton refuses them too)
            raise TypeError(f"argument {i}: {type(v).__name__} for an integer parameter")
        lo, hi = self.bounds[i]
        if not lo <= v <= hi:
            raise OverflowError(f"argument {i}: {v} does not fit the kernel's integer parameter")
        return int(v)

    def __call__(self, grid, values, stream: int, copy=None) -> bool:
        """Enqueue one launch of ``grid`` (3 ints) on ``stream`` (a ``CUstream`` handle).
        False, with nothing enqueued, when the caller must launch through Triton instead:
        launch hooks are set (:func:`hooks_active`) or the thread has no current CUDA context;
        a driver error otherwise raises :class:`_cuda.DriverError`.

        ``copy``: ``(dst, src, nbytes, after)``, a device-to-device copy of ``nbytes``
        contiguous bytes (addresses or tensors) enqueued on ``stream`` before the kernel, or
        after it when ``after``; only with the compiled path (:attr:`copies`).

        The slots are this object's, and one object serves every thread that launches the
        kernel (loopback ranks are threads): filling them and the driver call, which reads
        them with the GIL released, are one critical section (the compiled path holds the GIL
        instead; the lock still covers the per-stream scratch)."""
        if hooks_active():
            return False
        return self.enqueue(grid, values, stream, copy)

    def enqueue(self, grid, values, stream: int, copy=None) -> bool:
        """:meth:`__call__` for a caller that just checked :func:`hooks_active` itself."""
        gx, gy, gz = grid
        if gx * gy * gz <= 0:
            if copy is not None:
                raise ValueError("a copy with an empty grid")
            return True  # Triton's launcher enqueues nothing for an empty grid
        c = self._c
        if c is not None:
            dst, src, nbytes, after = copy if copy is not None else (0, 0, 0, False)
            with self._lock:
                scratch = self._scratch_for(stream, gx * gy * gz) if self.scratch_size else 0
                rc = c.run(gx, gy, gz, stream, values, scratch, dst, src, nbytes, after)
            if rc == 0:
                return True
            # no context: the first driver call failed and nothing was enqueued
            first = -rc if nbytes and not after else rc
            if first == _cuda.INVALID_CONTEXT:
                return False
            raise launch_error(rc)
        if copy is not None:
            raise ValueError("a copy needs the compiled launch path (DirectLaunch.copies)")
        with self._lock:
            for s, i, kind in self.refresh:
                v = values[i]
                s.value = _address(v) if kind == PTR else self._scalar(v, i)
            if self.scratch_size:
                self.slots[-2].value = self._scratch_for(stream, gx * gy * gz)
            rc = self._launch(self.function, gx, gy, gz, self.block, 1, 1, self.smem, stream,
                              self.params, None)
        if rc == _cuda.INVALID_CONTEXT:
            return False
        if rc:
            raise _cuda.DriverError(f"cuLaunchKernel failed with CUDA driver error {rc}")
        return True

    def use_stager(self, stage) -> None:
        """Copies enqueued with this kernel's launches go through ``stage`` (a
        :func:`.sync_kernels.stager`: the staging kernel's C launch, programs, words per step)
        where they fit it, else stay memcpys; None: memcpys only."""
        if self._c is not None:
            if stage is None:
                self._c.set_stager(None, 0, 0)
            else:
                self._c.set_stager(*stage)

    @property
    def copies(self) -> bool:
        """Whether a call can enqueue a staging copy with the launch (the compiled path)."""
        return self._c is not None


def _tma_alloc(size: int, alignment: int, stream):
    return torch.empty(size, device="cuda", dtype=torch.int8)


def ensure_tma_allocator() -> None:
    """Install a torch-backed ``triton.set_allocator`` unless one is already set.

    Device-side tensor descriptors (``tl.make_tensor_descriptor``) are written by the kernel
    into a global scratch buffer (128 bytes per descriptor per program) that Triton requests
    from this allocator at every launch. Triton keeps the allocator in a ``ContextVar``, so
    this checks the current context each time (cheap) rather than a process-wide flag: a new
    thread starts without one. An allocator the user installed is left alone. The torch
    caching allocator makes the per-launch request free and stream-ordered.
    """
    if isinstance(_allocator.get(), NullAllocator):
        triton.set_allocator(_tma_alloc)


def _allocate_scratch(stream: int, nbytes: int, device):
    """``nbytes`` of memory on ``device`` (None: the current CUDA device, the launch's),
    allocated on ``stream``: when the owner drops the buffer, torch's caching allocator hands
    it out again only to work ordered after that stream's launches."""
    if device is None:  # never torch's default device, which is the CPU
        device = torch.device("cuda", torch.cuda.current_device())
    with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device)):
        return torch.empty(nbytes, dtype=torch.uint8, device=device)


def build(ck, values, *, fixed_scalars: bool, device=None) -> DirectLaunch | None:
    """A :class:`DirectLaunch` of ``ck`` for arguments laid out as ``values``, or None when the
    kernel or the arguments need Triton's launcher (module docstring) or direct launches are
    off (:func:`enabled`)."""
    if not settings.DIRECT_LAUNCH.get() or not _cuda.available():
        return None
    try:
        return DirectLaunch(ck, values, fixed_scalars=fixed_scalars, device=device)
    except Unsupported:
        return None
