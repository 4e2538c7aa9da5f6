"""The compiled launch path: ``_fastlaunch.c`` built at first use, as Triton builds its own
launcher, and the helpers around it.

Why: a :class:`~.direct_launch.DirectLaunch` packs a kernel's parameters once, but each launch
still refreshed its ctypes slots in a Python loop and made a ctypes foreign call; on an H200
host that was ~8 us of an eager fused call (scripts/gpu_host_profile.py) against the issue's
20 us for the whole call. The C ``Launch.run`` reads the tensors' addresses and the scalars,
range-checks the scalars as Triton's launcher does, writes the slots, and enqueues an optional
staging copy (``cuMemcpyDtoDAsync``, which replaces a ``Tensor.copy_`` of ~6 us) and the kernel
in one call (the C file says why that is thread safe without a lock).

Built with the system C compiler through ``triton.runtime.build.compile_module_from_src``
(the helper Triton's NVIDIA driver uses for its launcher, so wherever Triton launches kernels
this builds), cached in Triton's cache directory. The module links only against Python: the
driver entry points are handed in as addresses resolved by ctypes (``_cuda``), so it builds
and is tested on a machine without CUDA, with fake entry points.

``SYNCOPATE_FAST_LAUNCH=0`` keeps the ctypes path (:func:`enabled`). When the module cannot be
built (no C compiler, no Python headers) the ctypes path is used and :func:`why_unavailable`
says why.
"""

from __future__ import annotations

import ctypes
import functools
import types
import os
import threading

from .. import settings
from . import _cuda

#: slot kinds of ``_fastlaunch.c`` by the ctypes type of the parameter
KINDS = {
    ctypes.c_int8: 1, ctypes.c_int16: 2, ctypes.c_int32: 3, ctypes.c_int64: 4,
    ctypes.c_uint8: 5, ctypes.c_uint16: 6, ctypes.c_uint32: 7, ctypes.c_uint64: 8,
}
PTR = 0

_SOURCE = os.path.join(os.path.dirname(__file__), "_fastlaunch.c")
_lock = threading.Lock()
_state: dict = {}


def module():
    """The built ``_syncopate_fastlaunch`` module, or None (:func:`why_unavailable`). Built
    once per process (and once per source version in Triton's cache)."""
    mod = _state.get("module", False)
    if mod is not False:
        return mod
    with _lock:
        if "module" not in _state:
            try:
                from triton.runtime.build import compile_module_from_src
                with open(_SOURCE) as f:
                    _state["module"] = compile_module_from_src(f.read(), "_syncopate_fastlaunch")
            except Exception as e:  # noqa: BLE001 -- any build failure means: ctypes path
                _state["module"] = None
                _state["why"] = f"{type(e).__name__}: {e}"
    return _state["module"]


def why_unavailable() -> str | None:
    """Why :func:`module` is None (None when it built or was not tried)."""
    return _state.get("why")


def entry_point(name: str) -> int:
    """The address of the driver entry point ``name`` (its ``_v2`` when there is one), or 0."""
    return address_of(_cuda._symbol(f"{name}_v2", name))


def address_of(fn) -> int:
    """The address of a ctypes function (0 for None or anything else, e.g. a test's Python
    stand-in: the caller then keeps its ctypes path)."""
    try:
        return ctypes.cast(fn, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        return 0


def new_launch(*, launch: int, memcpy: int, function: int, block: int, smem: int, params,
               scratch_slot, slots, keep):
    """A C ``Launch`` over ctypes ``slots`` (``[(ctypes object, argument index, kind)]``, kind
    :data:`PTR` or a ctypes integer type) and the ``params`` array pointing at them, or None
    when the module is unavailable or off. ``scratch_slot``: the ctypes slot of the global
    scratch pointer, or None. ``keep``: what must outlive the object (the ctypes slots)."""
    mod = module() if settings.FAST_LAUNCH.get() else None
    if mod is None or not launch:
        return None
    spec = []
    for obj, arg, kind in slots:
        if kind == PTR:
            spec.append((ctypes.addressof(obj), arg, PTR, 0, 0))
        else:
            lo, hi = bounds(kind)
            spec.append((ctypes.addressof(obj), arg, KINDS[kind], lo, hi))
    return mod.Launch(launch, memcpy, function, block, smem, ctypes.addressof(params),
                      0 if scratch_slot is None else ctypes.addressof(scratch_slot),
                      spec, keep)


def bounds(ctype) -> tuple[int, int]:
    """The values an integer parameter of ``ctype`` takes: a signed type's range, or for an
    unsigned type its range and the signed one's negatives (Triton's launcher parses unsigned
    parameters with formats that do not check, so ``-1`` passes as all ones)."""
    bits = 8 * ctypes.sizeof(ctype)
    signed = ctype(-1).value < 0
    return -(1 << (bits - 1)), (1 << (bits - 1 if signed else bits)) - 1


def capture_probe():
    """A function ``stream handle -> cuStreamIsCapturing status`` (0: not capturing; -1: the
    driver did not answer), or None when the module or the entry point is missing or the
    compiled path is off."""
    mod = module() if settings.FAST_LAUNCH.get() else None
    fn = entry_point("cuStreamIsCapturing") if mod is not None else 0
    return functools.partial(mod.capturing, fn) if fn else None


def current_device():
    """torch's current CUDA device index without ``torch.cuda.current_device``'s lazy-init
    wrapper (~1-2 us, asked several times per launch); torch's call where the raw accessor is
    missing (a CPU build, whose tests patch it)."""
    get = _RAW[0] or _accessor(0, "_cuda_getDevice")
    return get() if get is not None else _torch().cuda.current_device()


def device_getter():
    """A zero-argument callable answering what :func:`current_device` answers, for a caller
    that keeps it and calls it per launch (the bound path, its Gate): torch's builtin itself
    where it exists -- one Python frame fewer per call -- else :func:`current_device` (a CPU
    build, whose tests patch ``torch.cuda.current_device``)."""
    get = _RAW[0] or _accessor(0, "_cuda_getDevice")
    return get if isinstance(get, types.BuiltinFunctionType) else current_device


def current_raw_stream(device: int) -> int:
    """The raw handle of ``device``'s current stream, without building a ``torch.cuda.Stream``
    (~4 us)."""
    raw = _RAW[1] or _accessor(1, "_cuda_getCurrentRawStream")
    return raw(device) if raw is not None else _torch().cuda.current_stream(device).cuda_stream


def _torch():
    import torch
    return torch


#: torch's own ``_cuda_getDevice`` and ``_cuda_getCurrentRawStream`` once looked up (an import
#: and a getattr per call cost ~0.3 us each); None until then, and on a CPU build
_RAW: list = [None, None]


def _accessor(i: int, name: str):
    """``torch._C.<name>`` or None; remembered in ``_RAW[i]`` only when it is torch's builtin
    (a stand-in a test patched in is looked up again at every call)."""
    fn = getattr(_torch()._C, name, None)
    if isinstance(fn, types.BuiltinFunctionType):
        _RAW[i] = fn
    return fn