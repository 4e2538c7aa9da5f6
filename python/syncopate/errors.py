"""Typed errors of Syncopate.

Every error says what went wrong *and what to change*: a schedule error names the chunk and the
region, a compile error names the TTIR location of the op it is about, a launch error names the
argument, and a communication timeout carries the watchdog record (rank, chunk, flag value,
expected value).  All derive from :class:`SyncopateError` so callers can catch the family.
"""

from __future__ import annotations

from dataclasses import dataclass


class SyncopateError(Exception):
    """Base class of every error Syncopate raises on purpose."""


class UsageError(SyncopateError, ValueError):
    """The command line is wrong in itself: an option's value is malformed (``--shape 8192,x``,
    ``--signature a_ptr``) or options contradict each other.  The ``syncopate`` command exits 2
    on it, as on argparse's own errors; the message names the option and the form it takes."""


class ScheduleError(SyncopateError, ValueError):
    """A chunk schedule is malformed or does not verify.

    ``problems`` holds every problem found (the verifier reports all of them, not only the
    first); ``str(err)`` lists them one per line.
    """

    def __init__(self, problems: str | list[str]):
        if isinstance(problems, str):
            problems = [problems]
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class CompileError(SyncopateError):
    """The compiler cannot fuse this kernel with this schedule.

    ``location`` is the TTIR location (``file:line:col``) of the op the error is about when known.
    """

    def __init__(self, message: str, location: str | None = None):
        self.location = location
        self.message = message
        super().__init__(f"{location}: {message}" if location else message)


class UnknownOpError(CompileError):
    """The tt mirror dialect does not know an op that Triton emitted."""


class LaunchError(SyncopateError, ValueError):
    """Bad input caught on the host before a fused kernel is launched (shapes, dtypes, world
    size, process group, non-symmetric or non-contiguous buffers)."""


class LaunchRequirementError(LaunchError):
    """A launch's arguments or grid break a fact the compiler baked into the fused kernel (an
    argument's required value, an argument's upper bound, a grid axis the kernel never reads).

    Raised by the one check, :func:`syncopate.abi.check_launch`, which both the runtime (before
    a launch) and the emulator (before emulating one) call, so a launch the GPU would refuse is
    refused by the emulator too instead of being emulated into races.  ``violations`` holds
    every broken fact as a :class:`syncopate.abi.Violation` (the argument, the relation, the
    required value or bound, the value given); the message lists them and says what to do."""

    def __init__(self, violations, where: str = ""):
        self.violations = list(violations)
        fixes = dict.fromkeys(v.fix for v in self.violations)  # each once, in order
        super().__init__(f"{where}arguments break what the fused kernel was compiled for: "
                         + "; ".join(str(v) for v in self.violations) + ". "
                         + ". ".join(fixes))


class GraphCaptureError(LaunchError):
    """A fused launch was asked for while a CUDA graph is being captured, but something it
    would enqueue cannot be replayed correctly (a host-computed epoch baked into the graph) or
    cannot be captured at all (compile, collective flag allocation, host-to-device uploads).
    The message says what to do instead: warm up eagerly before capture, or use the ``sm``
    backend (docs/cuda-graphs.md)."""


@dataclass
class TimeoutRecord:
    """What the device watchdog wrote before giving up on a spin."""

    rank: int
    chunk: int
    flag_value: int
    expected: int
    kind: str  # "chunk", "entry", "consumed": which flag the spin waited on
    program: int = -1

    def __str__(self) -> str:
        return (f"rank {self.rank} waited on {self.kind} flag {self.chunk}: value {self.flag_value}, "
                f"expected >= {self.expected} (program {self.program})")


class CommTimeout(SyncopateError, RuntimeError):
    """A fused kernel's spin-wait exceeded ``SYNCOPATE_TIMEOUT_S``: a peer never delivered."""

    def __init__(self, record: TimeoutRecord, timeout_s: float):
        self.record = record
        self.timeout_s = timeout_s
        super().__init__(
            f"communication timeout after {timeout_s:g} s: {record}. A peer did not deliver this "
            f"chunk: check that every rank launches the same fused op with the same schedule, and "
            f"raise SYNCOPATE_TIMEOUT_S if the peer is only slow.")


class LoopbackError(LaunchError):
    """W virtual ranks in one process (loopback, docs/loopback.md) disagree or gave up: ranks
    called different collectives at the same point, one rank failed while the others waited
    for it, or a collective was not joined by every rank in time. The message names the ranks
    and the collective."""


class TorchOpError(LaunchError):
    """Bad input to a ``torch.ops.syncopate`` op or to the compile pass switch, caught before
    anything runs: the message names the argument and what to change."""


class CoResidencyError(LaunchError):
    """Loopback only: the W virtual ranks' fused kernels cannot all be resident on the one GPU
    at once. A spinning program of one rank could then hold the SM that another rank's
    program needs to make the progress it waits for (a deadlock the watchdog would end). The
    message gives the numbers and what to change (fewer programs per rank, fewer ranks)."""


class EmulationError(SyncopateError):
    """The CPU emulator (``syncopate.emulate``) cannot run a module (an op it does not know, an
    out-of-bounds access, bad arguments), or the emulation found races or wrong results.

    ``location`` is the MLIR location of the op when known; ``result`` is the
    :class:`~syncopate.emulate.api.EmulationResult` when the error reports races or mismatches."""

    def __init__(self, message: str, location: str | None = None, result=None):
        self.location = location
        self.message = message
        self.result = result
        super().__init__(f"{location}: {message}" if location else message)


class DtypeError(ScheduleError, LaunchError):
    """A dtype name that :mod:`syncopate.dtypes` does not know (``"bf17"``, ``"complex64"``).

    Raised by the one dtype table wherever a dtype enters -- a schedule's tensor, a Triton
    signature, a torch tensor at launch -- so it derives from both :class:`ScheduleError` and
    :class:`LaunchError` (and through them from ``SyncopateError`` and ``ValueError``): code
    that catches the error family of its layer keeps catching it.  ``name`` is what was given,
    ``known`` the canonical names; the message lists them."""

    def __init__(self, name, known: tuple[str, ...] = ()):
        self.name = name
        self.known = tuple(known)
        super().__init__(f"unknown dtype {name!r}; use one of {', '.join(self.known)}")


class TraceError(SyncopateError, ValueError):
    """A trace buffer or file that cannot be read or drawn; the message says what is wrong."""
