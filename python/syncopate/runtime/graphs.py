"""CUDA-graph capture and replay of fused launches (docs/cuda-graphs.md).

A fused launch under capture enqueues the configuration's device epoch advance and the fused
kernel, both read their epoch from device memory, so a replay never reuses the epoch of the
capture. What the host still has to do per replay is the watchdog check: a timed-out replay
writes the pinned record, and nothing on the host looks at it unless someone calls in.
:class:`FusedGraph` does that before every replay; :func:`check` is the same check for
callers that replay a raw ``torch.cuda.CUDAGraph``.

``capturing()`` is how the runtime knows it is being captured: the current stream's capture
status (``torch.cuda.is_current_stream_capturing``), or a :class:`FusedGraph` capture in
progress on this thread. Under capture the FusedKernel refuses (:class:`GraphCaptureError`)
what would be baked wrongly or cannot be captured, and enqueues nothing for it.
"""

from __future__ import annotations

import threading

from ..errors import GraphCaptureError
from . import _cuda

class _Local(threading.local):
    """This thread's FusedGraph capture, None outside one. A class-level default: reading an
    attribute a thread never set from a plain ``threading.local`` raises AttributeError
    internally, ~1 us per launch on the eager path."""

    active = None


_LOCAL = _Local()


#: ``torch.cuda.is_current_stream_capturing`` where CUDA is available, else None; looked up
#: once (``torch.cuda.is_available`` costs microseconds per call, and this runs per launch)
_PROBE: list = []


def capturing(stream=None) -> bool:
    """True while a :class:`FusedGraph` capture is in progress on this thread, or the current
    stream -- or ``stream`` when given (a ``torch.cuda.Stream`` or a raw handle: a launch may
    name a stream that is captured without being current) -- is being captured into a CUDA
    graph on this thread."""
    if _LOCAL.active is not None:
        return True
    if stream is not None:
        handle = stream if isinstance(stream, int) else getattr(stream, "cuda_stream", None)
        if handle is not None:
            answer = _cuda.stream_is_capturing(int(handle))
            if answer is not None:
                return answer
    if not _PROBE:
        import torch
        _PROBE.append(torch.cuda.is_current_stream_capturing if torch.cuda.is_available()
                      else None)
    probe = _PROBE[0]
    return probe is not None and bool(probe())


#: why a pending deferred CONSUMED wait cannot be captured (``refused``)
PENDING_CONSUMED = ("a deferred CONSUMED wait (before_staging) with a host-computed epoch is "
                    "pending")


def refused(backend: str, why: str) -> GraphCaptureError:
    """The error for a launch of ``backend`` that cannot be captured because of ``why``."""
    return GraphCaptureError(f"backend {backend!r} cannot be captured in a CUDA graph here: "
                             f"{why}. Use backend='sm' (its kernel reads the epoch from device "
                             f"memory and does the whole protocol on the device), or launch "
                             f"eagerly")


def refuse_capture(launcher, backend: str, cfg) -> None:
    """Raise :class:`GraphCaptureError` before anything is enqueued when a launch of ``cfg``
    cannot be captured: the backend's host side would bake a host epoch into the graph
    (``Launcher.capture_refusal``), or a deferred CONSUMED wait with a host epoch is pending."""
    why = launcher.capture_refusal(cfg)
    if why is None and cfg.consumed_pending:
        why = PENDING_CONSUMED
    if why is not None:
        raise refused(backend, why)


def unwarmed(kernel) -> GraphCaptureError:
    """A configuration's first launch under capture: refused."""
    return GraphCaptureError(
        f"{getattr(kernel, '__name__', 'the kernel')}: this configuration was never launched, "
        f"and its first launch compiles, allocates its flags collectively and uploads tables -- "
        f"none of which a CUDA graph can capture. Call the op (or FusedKernel.warmup) once "
        f"eagerly with the same buffers, shapes and options before capturing")


def new_buffers() -> GraphCaptureError:
    """Operand buffers without a peers table under capture: refused."""
    return GraphCaptureError(
        "these operand buffers were never launched eagerly: their peer-address table is a "
        "host-to-device upload, which a CUDA graph cannot capture. Call the op once eagerly "
        "with the same buffers before capturing")


def refuse_host_reads(op: str, reads) -> None:
    """Under capture, raise :class:`GraphCaptureError` naming every enabled one of ``reads`` --
    ``(enabled, what, instead)`` triples: ``what`` would read a device value back to the host
    (a synchronisation, which stream capture refuses and a replay would skip: the graph holds
    no host code), ``instead`` is the capturable option, e.g. a device-side count -- so the
    caller fixes all of them at once. A no-op when not capturing or when none is enabled."""
    hits = [(what, instead) for enabled, what, instead in reads if enabled]
    if hits and capturing():
        raise GraphCaptureError(f"{op} cannot be captured in a CUDA graph as called: "
                                f"{' and '.join(w for w, _ in hits)} reads a device value back "
                                f"to the host, which a graph cannot hold (a replay runs no host "
                                f"code). {' '.join(i for _, i in hits)}")


def cold_path(op: str) -> GraphCaptureError:
    """An op's first call for an argument layout under capture (its path is decided, its local
    kernel compiled and loaded on the first call: module loading cannot be captured)."""
    return GraphCaptureError(
        f"{op}: this argument layout (shapes, dtypes, options) was never called eagerly, and its "
        f"first call decides the path and compiles and loads the local kernel -- which a CUDA "
        f"graph cannot capture. Call the op once eagerly with the same arguments before "
        f"capturing")


def note_launch(fk) -> None:
    """Called by a FusedKernel launched under capture: remember it for the graph's checks."""
    active = _LOCAL.active
    if active is not None and fk not in active:
        active.append(fk)


def check(kernels, comms=()) -> None:
    """Before a replay: raise ``LaunchError`` if a kernel in ``kernels`` cannot be reused (it
    timed out earlier, or an eager launch failed part-way: its flags disagree across ranks;
    replaying would hang or read stale data), and
    ``CommTimeout`` if a replay since the last check timed out (the record names the epoch of
    the launch that failed). Reads pinned memory only: no synchronisation, no launch."""
    for comm in comms:
        comm.check()
    for fk in kernels:
        fk.check()
        fk._refuse_if_poisoned()


class FusedGraph:
    """A captured CUDA graph holding fused launches, replayed with the watchdog checked first.

    Capture after an eager warm-up call with the same buffers (the first launch of a
    configuration compiles and allocates collectively, which cannot be captured); copy new
    inputs into the static input tensors before each :meth:`replay`. Every rank must capture
    and replay the same sequence of fused launches (as it must launch them eagerly)."""

    def __init__(self, graph, kernels, comms, output=None):
        self.graph = graph
        #: the FusedKernels launched during capture (their records are checked per replay)
        self.kernels = list(kernels)
        self.comms = list(comms)
        #: the value the capture's callable returned (its static output tensors)
        self.output = output

    @classmethod
    def capture(cls, fn, *, comm=None, stream=None, pool=None,
                capture_error_mode: str = "global", require_fused: bool = True) -> "FusedGraph":
        """Capture ``fn()`` (which launches fused ops on the current stream) into a graph.
        ``comm``: the communicator whose records :meth:`replay` checks besides the kernels'.
        ``stream``: the capture stream; default a new one -- not ``torch.cuda.graph``'s
        process-wide default, which ranks capturing at once in loopback (threads of one
        process, docs/loopback.md) would share. ``capture_error_mode``: as for
        ``torch.cuda.graph``; loopback needs ``"thread_local"`` (the other ranks' threads keep
        using CUDA while one captures). ``require_fused``: refuse a capture that launched no
        fused kernel (likely a warm-up miss: the op took its unfused path); pass False for a
        call that has none by design (world size 1: the local kernel alone), so that one
        replay loop serves every world size."""
        import torch

        if _LOCAL.active is not None:
            raise GraphCaptureError("FusedGraph.capture is already capturing on this thread; "
                                    "nested captures are not supported")
        g = torch.cuda.CUDAGraph()
        if stream is None and torch.cuda.is_available():
            stream = torch.cuda.Stream(device=comm.device if comm is not None else None)
        kernels: list = []
        _LOCAL.active = kernels
        try:
            with torch.cuda.graph(g, pool=pool, stream=stream,
                                  capture_error_mode=capture_error_mode):
                out = fn()
        finally:
            _LOCAL.active = None
        if not kernels and require_fused:
            raise GraphCaptureError("the captured function launched no fused kernel: nothing "
                                    "of syncopate's is in the graph (did the op take its "
                                    "unfused path? At world size 1 there is none by design: "
                                    "pass require_fused=False)")
        comms = [comm] if comm is not None else []
        for fk in kernels:
            if fk.comm not in comms:
                comms.append(fk.comm)
        return cls(g, kernels, comms, out)

    def replay(self) -> None:
        """Check the watchdog records (:func:`check`), then replay the graph on the current
        stream. A replay that times out is reported by the next call (as eager launches are)."""
        check(self.kernels, self.comms)
        self.graph.replay()

    def epochs(self) -> list[int]:
        """The device epoch (pinned mirror, last advance that *ran*) of every configuration the
        captured kernels launched: how the host learns epochs of replays it did not count."""
        return [fk.device_epoch() for fk in self.kernels]
