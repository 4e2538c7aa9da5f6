"""The few CUDA driver calls the runtime needs that torch does not expose, through ctypes.

Why ctypes on ``libcuda.so.1`` rather than cuda-python: the driver library is present on every
machine that can run a CUDA kernel, while cuda-python is an extra wheel that the GPU machine
(no network) may not have. Every helper degrades to a documented torch fallback when the
driver library or the symbol is missing, and none is called on a CPU-only machine.

* :func:`memcpy2d_async` -- ``cuMemcpy2DAsync``: a strided 2-D copy done by the **copy engine**.
  ``torch.Tensor.copy_`` of a non-contiguous view launches an SM kernel instead, which the ce
  backend must avoid while the fused kernel may occupy every SM (see ``launchers/ce.py``).
* :func:`stream_wait_value32` -- ``cuStreamWaitValue32``: a stream waits, in the GPU's front
  end (no SM), until a 32-bit word in memory is ``>=`` a value. Only ever used on a flag that
  this rank's *own* kernel is guaranteed to write (PRODUCED), never on a peer's flag: a stream
  wait has no watchdog, so a wait on something a dead peer should write could hang forever.
* :func:`device_pointer` -- ``cuPointerGetAttribute(DEVICE_POINTER)``: the device address of
  host-pinned memory (what Triton's launcher does for a tensor argument).
* :func:`stream_is_capturing` -- ``cuStreamIsCapturing``: whether a given stream (not only the
  current one, which is all torch asks about) is being captured into a CUDA graph.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

CU_MEMORYTYPE_DEVICE = 2
CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3  # CUpointer_attribute: CONTEXT=1, MEMORY_TYPE=2, DEVICE_POINTER=3
#: CUDA_ERROR_INVALID_CONTEXT: the calling thread has no current context (a thread that never
#: touched CUDA through torch); a launch falls back to Triton's launcher, which sets one
INVALID_CONTEXT = 201


class CUDA_MEMCPY2D(ctypes.Structure):
    """``CUDA_MEMCPY2D_v2`` from cuda.h (layout unchanged since CUDA 3.2)."""

    _fields_ = [
        ("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t),
        ("srcMemoryType", ctypes.c_int), ("srcHost", ctypes.c_void_p),
        ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
        ("srcPitch", ctypes.c_size_t),
        ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t),
        ("dstMemoryType", ctypes.c_int), ("dstHost", ctypes.c_void_p),
        ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
        ("dstPitch", ctypes.c_size_t),
        ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t),
    ]


class DriverError(RuntimeError):
    """A CUDA driver call made through ctypes returned an error code."""


@functools.lru_cache(maxsize=1)
def _libcuda():
    for name in ("libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _symbol(*names):
    lib = _libcuda()
    if lib is None:
        return None
    for n in names:
        fn = getattr(lib, n, None)
        if fn is not None:
            return fn
    return None


def available() -> bool:
    """Whether the driver library could be loaded (False on CPU-only machines)."""
    return _libcuda() is not None


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise DriverError(f"{what} failed with CUDA driver error {rc}")


def memcpy2d_async(dst: int, dst_pitch: int, src: int, src_pitch: int, width_bytes: int,
                   height: int, stream: int) -> bool:
    """Enqueue a 2-D copy of ``height`` rows of ``width_bytes`` on ``stream`` (a ``CUstream``
    handle, e.g. ``torch.cuda.Stream.cuda_stream``). Returns False when the driver entry point
    is unavailable (the caller then falls back to ``Tensor.copy_``)."""
    fn = _bound("cuMemcpy2DAsync", [ctypes.POINTER(CUDA_MEMCPY2D), ctypes.c_void_p])
    if fn is None:
        return False
    p = CUDA_MEMCPY2D(srcMemoryType=CU_MEMORYTYPE_DEVICE, srcDevice=src, srcPitch=src_pitch,
                      dstMemoryType=CU_MEMORYTYPE_DEVICE, dstDevice=dst, dstPitch=dst_pitch,
                      WidthInBytes=width_bytes, Height=height)
    _check(fn(ctypes.byref(p), ctypes.c_void_p(stream)), "cuMemcpy2DAsync")
    return True


def stream_write_value32(stream: int, addr: int, value: int) -> bool:
    """Enqueue ``*(uint32*)addr = value`` on ``stream`` (``cuStreamWriteValue32``, default
    flags: a memory fence before the write, ordered after the stream's earlier work): the ce
    side stream's chunk flags. A stream memory operation: no kernel launch, no SM. False when
    the entry point is unavailable; :class:`DriverError` when the driver refuses the address."""
    return _memop32("cuStreamWriteValue32", stream, addr, value, 0)


#: name -> the driver function with its argument types set, or None (not exposed): resolved
#: once, not per call (the ce backend's stream waits are on every launch's host path)
_BOUND: dict = {}


def _bound(name: str, argtypes):
    """The driver entry point ``name`` (its ``_v2`` version when the driver has one) with
    ``argtypes`` and an int result, or None."""
    fn = _BOUND.get(name, False)
    if fn is False:
        fn = _symbol(f"{name}_v2", name)
        if fn is not None:
            fn.argtypes = argtypes
            fn.restype = ctypes.c_int
        _BOUND[name] = fn
    return fn


def _memop32(name: str, stream: int, addr: int, value: int, flags: int) -> bool:
    """One 32-bit stream memory operation (``name``: ``cuStreamWriteValue32`` or
    ``cuStreamWaitValue32``, the ``_v2`` entry point when the driver has it); False when the
    driver lacks it."""
    fn = _bound(name, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint])
    if fn is None:
        return False
    _check(fn(stream, addr, value & 0xFFFFFFFF, flags), name)
    return True


CU_STREAM_NON_BLOCKING = 0x1
CU_EVENT_DISABLE_TIMING = 0x2


def event_create() -> int | None:
    """A new ``CUevent`` without timing in the current context (``cuEventCreate``), or None
    when the entry point is unavailable or there is no current context (the caller then keeps
    a ``torch.cuda.Event``). The ce launcher's handshake records and waits on such events by
    handle: torch's ``Event.record``/``Stream.wait_event`` wrappers normalise the device on
    every call (~5-10 us each on an H200 host, six per ce launch)."""
    fn = _bound("cuEventCreate", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint])
    if fn is None:
        return None
    h = ctypes.c_void_p()
    if fn(ctypes.byref(h), CU_EVENT_DISABLE_TIMING) != 0:
        return None
    return int(h.value or 0) or None


def event_destroy(event: int) -> None:
    fn = _bound("cuEventDestroy", [ctypes.c_void_p])
    if fn is not None:
        fn(event)  # an error (the context is gone at exit) leaves nothing to release


def event_record(event: int, stream: int) -> None:
    """``cuEventRecord(event, stream)``."""
    fn = _bound("cuEventRecord", [ctypes.c_void_p, ctypes.c_void_p])
    if fn is None:
        raise DriverError("the driver library has no cuEventRecord")
    _check(fn(event, stream), "cuEventRecord")


def stream_wait_event(stream: int, event: int) -> None:
    """``cuStreamWaitEvent(stream, event, 0)``: ``stream``'s later work waits for the work
    recorded in ``event``."""
    fn = _bound("cuStreamWaitEvent", [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint])
    if fn is None:
        raise DriverError("the driver library has no cuStreamWaitEvent")
    _check(fn(stream, event, 0), "cuStreamWaitEvent")


def memcpy_async(dst: int, src: int, nbytes: int, stream: int) -> bool:
    """Enqueue a copy of ``nbytes`` contiguous bytes from ``src`` to ``dst`` (device or peer
    addresses) on ``stream`` (``cuMemcpyDtoDAsync``). False when the entry point is
    unavailable (the caller then falls back to ``Tensor.copy_``)."""
    fn = _bound("cuMemcpyDtoDAsync", [ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t,
                                      ctypes.c_void_p])
    if fn is None:
        return False
    _check(fn(dst, src, nbytes, stream), "cuMemcpyDtoDAsync")
    return True


def dedicated_stream(device):
    """A ``torch.cuda`` stream object on ``device`` that no other caller can be handed: a new
    non-blocking ``CUstream`` (``cuStreamCreate``) wrapped in ``torch.cuda.ExternalStream``; a
    pool stream when the driver entry point is missing. Not from torch's stream pool on
    purpose: the pool hands its 32 streams out round-robin, so a pool stream can be the very
    stream another caller launches on -- work queued behind a kernel that spins waiting for it
    never runs. Never destroyed: the caching allocator keys freed blocks by stream, and a
    tensor made on it may outlive its user (one stream per communicator / rank is cheap)."""
    import torch
    fn = _bound("cuStreamCreate", [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint])
    with torch.cuda.device(device):
        if fn is None:
            return torch.cuda.Stream(device=device)
        h = ctypes.c_void_p()
        _check(fn(ctypes.byref(h), CU_STREAM_NON_BLOCKING), "cuStreamCreate")
        return torch.cuda.ExternalStream(int(h.value or 0), device=device)


def stream_wait_available() -> bool:
    """Whether the driver exposes ``cuStreamWaitValue32`` (stream memory operations)."""
    return _symbol("cuStreamWaitValue32_v2", "cuStreamWaitValue32") is not None


def stream_wait_value32(stream: int, addr: int, value: int) -> bool:
    """``stream`` waits until ``*(uint32*)addr >= value`` (cyclic ``GEQ``). False when the
    entry point is unavailable (the caller then falls back to an event wait)."""
    return _memop32("cuStreamWaitValue32", stream, addr, value, CU_STREAM_WAIT_VALUE_GEQ)


def device_pointer(host_ptr: int) -> int | None:
    """Device address of host-pinned memory at ``host_ptr`` (None if it cannot be resolved).
    Under unified addressing this equals ``host_ptr`` for ``cudaHostAlloc`` memory, which is
    what torch's pinned allocator uses; we still ask the driver, as Triton's launcher does."""
    fn = _bound("cuPointerGetAttribute", [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64])
    if fn is None:
        return None
    out = ctypes.c_uint64(0)
    rc = fn(ctypes.byref(out), CU_POINTER_ATTRIBUTE_DEVICE_POINTER, ctypes.c_uint64(host_ptr))
    return int(out.value) if rc == 0 else None


def stream_is_capturing(stream: int) -> bool | None:
    """Whether ``stream`` (a ``CUstream`` handle) is being captured (an invalidated capture
    counts: work enqueued there would not run either). None when the driver cannot answer."""
    fn = _bound("cuStreamIsCapturing", [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)])
    if fn is None:
        return None
    status = ctypes.c_int(0)
    rc = fn(ctypes.c_void_p(stream), ctypes.byref(status))
    return status.value != 0 if rc == 0 else None


def occupancy_blocks_per_sm(function: int, block_threads: int, dynamic_smem: int) -> int | None:
    """``cuOccupancyMaxActiveBlocksPerMultiprocessor``: how many blocks of ``function`` (a
    ``CUfunction`` handle, e.g. Triton's ``CompiledKernel.function``) one SM holds at once, with
    ``dynamic_smem`` bytes of dynamic shared memory each. None when the driver cannot answer
    (loopback's co-residency check then does the arithmetic itself, ``residency.py``)."""
    fn = _bound("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t])
    if fn is None:
        return None
    out = ctypes.c_int(0)
    rc = fn(ctypes.byref(out), ctypes.c_void_p(function), int(block_threads), int(dynamic_smem))
    return int(out.value) if rc == 0 else None
