"""Stream programs: a fixed list of driver operations on two streams, replayed per call with the
epoch filled in, in one C call (``Program`` in ``_fastlaunch.c``).

Why: the ``ce`` backend's host protocol (``launchers/ce.py``) enqueues ~15 operations around
each fused kernel -- event records and waits, sync-kernel launches, copies, stream memory
operations. For one set of operand buffers, their streams, addresses and copy geometry are
fixed; only the epoch changes, and every epoch-dependent value is ``c + m * e``. Enqueued from
Python, each cost a ctypes call and its launcher's bookkeeping: 0.10-0.15 ms of host time per
ce call on an H200 host (``scripts/gpu_host_profile.py``) against issue 13's 60 us. A
:class:`Builder` records the operations once; :meth:`Program.run` enqueues them all.

The operations are the driver's (``cuEventRecord``, ``cuStreamWaitEvent``,
``cuStreamWaitValue32``, ``cuStreamWriteValue32``, ``cuMemcpyDtoDAsync``, ``cuMemcpy2DAsync``,
``cuLaunchKernel``), so a program enqueues exactly what the Python path does, in the same
order: :func:`build` returns None whenever something would need a fallback the Python path has
(a missing entry point, a kernel that needs Triton's launcher, the compiled module missing),
and the caller keeps that path.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import settings
from . import _cuda, fastlaunch

#: operation kinds (``_fastlaunch.c``: P_RECORD ...)
RECORD, WAIT_EVENT, WAIT32, WRITE32, MEMCPY, MEMCPY2D, KERNEL, CALL_COPY = range(8)
#: the streams an operation names: the call's (launch) stream, or the program's side stream
MAIN, SIDE = 0, 1
#: the driver entry points a program takes, in ``Program()``'s order
ENTRY_POINTS = ("cuLaunchKernel", "cuMemcpyDtoDAsync", "cuMemcpy2DAsync", "cuEventRecord",
                "cuStreamWaitEvent", "cuStreamWaitValue32", "cuStreamWriteValue32")


@dataclass(frozen=True)
class Epoch:
    """An epoch-dependent value: ``c + m * e`` for the run's epoch ``e``, as an int32 (sign
    extended) when ``wrap32`` -- a 32-bit flag's spin target (``diag.wrap32``)."""

    m: int = 1
    c: int = 0
    wrap32: bool = False

    def spec(self) -> tuple[int, int, bool, bool]:
        return (self.c & (2**64 - 1), self.m, self.wrap32, False)


@dataclass(frozen=True)
class CopyShift:
    """A kernel parameter: the run's call copy's ``dst - src`` (bytes, mod 2^64) plus ``c``.

    Why: a kernel that computes the bytes the call would copy -- the ce reduce-scatter's sum
    kernel, whose sums are the result rows copied out -- can store them at ``src + shift``,
    ``dst`` itself, and the program saves the copy (a driver operation, and a pass over the
    bytes). A program with one has no :meth:`Builder.call_copy`, and its runs need the copy."""

    c: int = 0

    def spec(self) -> tuple[int, int, bool, bool]:
        return (self.c & (2**64 - 1), 0, False, True)


def value_spec(v) -> tuple[int, int, bool, bool]:
    """``(c, m, wrap32, shift)`` of an :class:`Epoch`, a :class:`CopyShift` or a constant int
    (negative ints as their two's complement: a kernel reads its parameter's low bytes)."""
    if isinstance(v, (Epoch, CopyShift)):
        return v.spec()
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"a program value is an int, an Epoch or a CopyShift, not "
                        f"{type(v).__name__}")
    return (v & (2**64 - 1), 0, False, False)


class Builder:
    """The operations of one program, in enqueue order (:func:`build` makes it)."""

    def __init__(self):
        self.ops: list[tuple] = []

    def record(self, stream: int, event: int) -> None:
        """``cuEventRecord(event, stream)``."""
        self.ops.append((RECORD, stream, event))

    def wait_event(self, stream: int, event: int) -> None:
        """``cuStreamWaitEvent(stream, event, 0)``."""
        self.ops.append((WAIT_EVENT, stream, event))

    def wait_value(self, stream: int, addr: int, value: Epoch) -> None:
        """``cuStreamWaitValue32(stream, addr, value, GEQ)`` (cyclic ``>=``)."""
        self.ops.append((WAIT32, stream, addr, value_spec(value)))

    def write_value(self, stream: int, addr: int, value: Epoch) -> None:
        """``cuStreamWriteValue32(stream, addr, value, 0)`` (a fence before the write)."""
        self.ops.append((WRITE32, stream, addr, value_spec(value)))

    def memcpy(self, stream: int, dst: int, src: int, nbytes: int) -> None:
        self.ops.append((MEMCPY, stream, dst, src, nbytes))

    def memcpy2d(self, stream: int, dst: int, dst_pitch: int, src: int, src_pitch: int,
                 width: int, rows: int) -> None:
        self.ops.append((MEMCPY2D, stream, dst, dst_pitch, src, src_pitch, width, rows))

    def call_copy(self, stream: int) -> None:
        """Where :meth:`Program.run`'s ``copy`` goes (at most one place per program)."""
        self.ops.append((CALL_COPY, stream, 0))

    def kernel(self, stream: int, dl, programs: int, values) -> None:
        """A launch of ``programs`` programs of a :class:`~.direct_launch.DirectLaunch` ``dl``
        (its function, block and shared memory) with ``values`` (ints or :class:`Epoch`, one
        per argument of ``dl``'s layout, constexprs included: the layout's parameter plan picks
        the ones the kernel takes, then its two null scratch pointers)."""
        if dl.scratch_size:
            raise ValueError("a program cannot launch a kernel that needs global scratch")
        params = [value_spec(values[i]) for _, i, _ in dl.plan] + [(0, 0, False, False)] * 2
        self.ops.append((KERNEL, stream, dl.function, programs, dl.block, dl.smem,
                         tuple(params)))


def entry_points() -> tuple[int, ...] | None:
    """The addresses of :data:`ENTRY_POINTS`, or None when one is missing."""
    addrs = tuple(fastlaunch.entry_point(n) for n in ENTRY_POINTS)
    return addrs if all(addrs) else None


class Program:
    """A built program: :meth:`run` enqueues it (:func:`build`)."""

    __slots__ = ("_c", "size")

    def __init__(self, c):
        self._c = c
        self.size = c.size()

    def run(self, stream: int, epoch: int, copy: tuple | None = None) -> None:
        """Enqueue every operation for ``epoch``: ``MAIN`` ones on ``stream`` (a handle).
        ``copy``: ``(dst, src, nbytes)``, a ``cuMemcpyDtoDAsync`` at the program's
        :meth:`Builder.call_copy` place, or what its :class:`CopyShift` parameters add. A
        driver error raises :class:`ProgramError` naming
        the operation; what came before it was enqueued."""
        dst, src, n = copy if copy is not None else (0, 0, 0)
        bad = self._c.run(stream, epoch, dst, src, n)
        if bad is not None:
            raise ProgramError(bad[0], bad[1], self.size)


class ProgramError(_cuda.DriverError):
    """A driver call of a program failed: ``index`` is the operation (those before it were
    enqueued, none after), ``code`` the driver's error code."""

    def __init__(self, index: int, code: int, size: int):
        super().__init__(f"stream program: operation {index} of {size} failed with CUDA driver "
                         f"error {code}")
        self.index, self.code = index, code


def build(builder: Builder, side_stream: int) -> Program | None:
    """``builder``'s operations as a :class:`Program` with ``side_stream`` (a handle) as
    ``SIDE``, or None when the compiled module or a driver entry point is missing (the caller
    keeps its Python path)."""
    mod = fastlaunch.module() if settings.FAST_LAUNCH.get() else None
    entries = entry_points() if mod is not None else None
    return None if entries is None else Program(mod.Program(entries, side_stream, builder.ops))
