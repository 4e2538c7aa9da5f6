"""Loopback: W virtual ranks in one process, on one GPU (docs/loopback.md).

Why: correctness of the fused kernels -- the real PTX spins, flags, epochs, the ENTRY/CONSUMED
handshake, the watchdog -- must be checkable when only one GPU is lent. Each virtual rank is a
Python thread with its own CUDA stream(s) and its own buffers on the shared device; its
:class:`LoopbackGroup` stands in for the process group and its symmetric memory
(:class:`LoopbackSymmetricMemory`) is plain device memory whose "peer mappings" are the other
virtual ranks' tensors (same address space, so a peer pointer is just the other tensor's
address). Timings in this mode are meaningless (the ranks share the SMs, the copy engines and
the host's GIL); the benchmark refuses it.

Why our own group and not torch's threaded process group
(``torch.testing._internal.distributed.multi_threaded_pg``): on torch 2.13 its
``init_process_group`` from several threads fails (torch registers process-group names in a
process-global C++ table: "A process group is already registered under the name0"), it is a
private testing module, and it runs every collective on rank 0's *current stream* with no
ordering against the other ranks' streams -- a race for CUDA tensors that the producing kernels
are still writing. Here the rank that completes a collective enqueues the data movement on a
dedicated collective stream that first waits an event recorded on every participant's current
stream, and every participant's current stream then waits the collective's completion event:
NCCL's stream semantics, so code written for NCCL needs no extra synchronisation.

Code that calls collectives goes through :mod:`syncopate.runtime.collectives`, which dispatches
to the calling thread's loopback group or to ``torch.distributed``; the runtime, the ops and the
GPU tests' workers use it, so the same code runs in both modes.
"""

from __future__ import annotations

import math
import os
import threading
import time
import traceback

from .. import settings
from ..errors import GraphCaptureError, LoopbackError
from . import _cuda, graphs

def eager_module_loading(cuda_initialized: bool, env=None) -> str | None:
    """Make CUDA load every module's functions when the module loads (``CUDA_MODULE_LOADING=
    EAGER``) if it still can; returns None when loading is eager, else why it is not.

    Why: in loopback the W ranks share one CUDA context, and loading a kernel lazily (at its
    first launch, CUDA's default through torch) may synchronise that context -- wait for a
    peer's fused kernel that spins until this rank launches its own: a hang until the
    watchdog (docs/loopback.md, "Module loading"). The variable is read when CUDA
    initialises, so it is set only while ``cuda_initialized`` is False and the user has not
    chosen a mode."""
    env = os.environ if env is None else env
    mode = env.get("CUDA_MODULE_LOADING")
    if mode is None and not cuda_initialized:
        env["CUDA_MODULE_LOADING"] = "EAGER"
        return None
    if (mode or "").upper() == "EAGER":
        return None
    return (f"CUDA module loading is {mode or 'LAZY'} in a loopback run: a kernel loaded at its "
            f"first launch may wait for another virtual rank's spinning kernel (a hang until "
            f"the watchdog fires). Set CUDA_MODULE_LOADING=EAGER before CUDA initialises (before "
            f"the first torch.cuda call), or start the ranks with run_loopback before touching "
            f"CUDA (docs/loopback.md, 'Module loading')")


#: hardware work queues (``CUDA_DEVICE_MAX_CONNECTIONS``) asked for in loopback: the most CUDA
#: allows
LOOPBACK_CONNECTIONS = "32"


def more_hardware_queues(cuda_initialized: bool, env=None) -> bool:
    """Ask CUDA for 32 hardware work queues (``CUDA_DEVICE_MAX_CONNECTIONS``, default 8) if it
    still can; True when set here.

    Why: CUDA maps streams onto its hardware queues round-robin, and work of two streams on one
    queue can wait for each other (a false dependency): one (unproven) suspect for the ce
    backend's first-launch timeouts in loopback (docs/loopback.md, "Known defect"). More
    queues make such a collision unlikely; the variable is read when CUDA initialises, so it
    is set only while ``cuda_initialized`` is False and the user has not chosen a value."""
    env = os.environ if env is None else env
    if env.get("CUDA_DEVICE_MAX_CONNECTIONS") is None and not cuda_initialized:
        env["CUDA_DEVICE_MAX_CONNECTIONS"] = LOOPBACK_CONNECTIONS
        return True
    return False


def warn_unless_eager(cuda_initialized: bool) -> None:
    """:func:`eager_module_loading`, warning (``RuntimeWarning``) when it is too late; also
    :func:`more_hardware_queues` while CUDA has not started."""
    more_hardware_queues(cuda_initialized)
    why = eager_module_loading(cuda_initialized)
    if why is not None:
        import warnings
        warnings.warn(why, RuntimeWarning, stacklevel=3)


#: the calling thread's virtual rank: its LoopbackGroup (set by run_loopback; the collectives
#: module and Communicator() find it here)
_local = threading.local()


def bind(group: "LoopbackGroup") -> None:
    """Make ``group`` the calling thread's default group (done by :func:`run_loopback`)."""
    _local.group = group


def unbind() -> None:
    _local.group = None


def current_loopback() -> "LoopbackGroup | None":
    """The calling thread's loopback group, or None (a normal process)."""
    return getattr(_local, "group", None)


class _Round:
    __slots__ = ("kind", "first", "values", "arrived", "left", "done", "result", "error")

    def __init__(self, kind, first, world_size):
        self.kind, self.first = kind, first
        self.values = [None] * world_size
        self.arrived = self.left = 0
        self.done = False
        self.result = self.error = None


class LoopbackWorld:
    """The shared state of W virtual ranks: one :class:`LoopbackGroup` per rank and the
    rendezvous that every collective goes through.

    ``collective(rank, kind, value, work)``: every rank calls it with the same ``kind`` in the
    same order (the n-th collective of every rank is one round); the last rank to arrive runs
    ``work(values)`` (values in rank order) once, and every rank returns its result. A rank
    calling a different kind, a rank that failed (:meth:`abort`) or a round not completed within
    the timeout raises :class:`LoopbackError` in every waiting rank instead of hanging."""

    def __init__(self, world_size: int, *, timeout_s: float | None = None):
        if int(world_size) < 1:
            raise LoopbackError(f"world_size={world_size}: a loopback world needs >= 1 rank")
        self.world_size = int(world_size)
        self.name = "loopback"
        self.timeout_s = settings.LOOPBACK_TIMEOUT_S.get() if timeout_s is None else float(timeout_s)
        self._cond = threading.Condition()
        self._rounds: dict[int, _Round] = {}
        self._seq = [0] * self.world_size
        self._aborted: str | None = None
        self._streams: dict = {}
        self.groups = [LoopbackGroup(self, r) for r in range(self.world_size)]

    # -- rendezvous ----------------------------------------------------------------------

    def abort(self, reason: str) -> None:
        """Make every rank waiting in (or later entering) a collective raise; called when a
        rank fails, so the others do not wait for it until the timeout."""
        with self._cond:
            if self._aborted is None:
                self._aborted = reason
            self._cond.notify_all()

    def collective(self, rank: int, kind: str, value=None, work=None):
        if not 0 <= rank < self.world_size:
            raise LoopbackError(f"rank {rank} out of range for a loopback world of {self.world_size}")
        with self._cond:
            if self._aborted is not None:
                raise LoopbackError(f"{self.name}: rank {rank} entered {kind} after the world was "
                                    f"aborted ({self._aborted})")
            n = self._seq[rank]
            self._seq[rank] += 1
            rd = self._rounds.get(n)
            if rd is None:
                rd = self._rounds[n] = _Round(kind, rank, self.world_size)
            if rd.kind != kind:
                msg = (f"{self.name}: collective #{n}: rank {rank} called {kind} but rank {rd.first} "
                       f"called {rd.kind}; every rank must call the same collectives in the same order")
                self.abort(msg)  # (the condition's lock is re-entrant)
                raise LoopbackError(msg)
            rd.values[rank] = value
            rd.arrived += 1
            if rd.arrived == self.world_size:
                try:
                    rd.result = work(rd.values) if work is not None else list(rd.values)
                except BaseException as e:  # noqa: BLE001 - re-raised in every rank below
                    rd.error = e
                rd.done = True
                self._cond.notify_all()
            else:
                deadline = time.monotonic() + self.timeout_s
                while not rd.done and self._aborted is None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        missing = [r for r in range(self.world_size) if rd.values[r] is None
                                   and r != rank]
                        msg = (f"{self.name}: rank {rank} waited {self.timeout_s:g} s in collective "
                               f"#{n} ({kind}); ranks {missing} never joined it "
                               f"(SYNCOPATE_LOOPBACK_TIMEOUT_S)")
                        self.abort(msg)
                        raise LoopbackError(msg)
                    self._cond.wait(left)
                if not rd.done:
                    raise LoopbackError(f"{self.name}: rank {rank} left collective #{n} ({kind}): "
                                        f"{self._aborted}")
            rd.left += 1
            if rd.left == self.world_size:
                del self._rounds[n]
            if rd.error is not None:
                raise LoopbackError(f"{self.name}: collective #{n} ({kind}) failed: "
                                    f"{type(rd.error).__name__}: {rd.error}") from rd.error
            return rd.result

    def collective_stream(self, device):
        """The stream the completing rank enqueues a collective's data movement on (one per
        device, created once, under the world's lock: the caller holds it)."""
        s = self._streams.get(device.index)
        if s is None:
            # dedicated: a pool stream could be a rank's launch stream (_cuda.dedicated_stream)
            s = self._streams[device.index] = _cuda.dedicated_stream(device)
        return s


def _reduce(tensors, op):
    """Reduce a list of same-shape tensors with a ``torch.distributed.ReduceOp``: floating
    point in fp32, in rank order, rounded once (so two-rank sums are bitwise the fused
    kernels' one-rounding sum), integers in their own dtype."""
    import torch
    import torch.distributed as dist

    floating = tensors[0].is_floating_point()
    xs = [t.float() if floating else t for t in tensors]
    name = next((n for n in ("SUM", "AVG", "MAX", "MIN", "PRODUCT")
                 if op == getattr(dist.ReduceOp, n) or str(op).split(".")[-1].upper() == n), None)
    if name is None:
        raise LoopbackError(f"reduce op {op} is not supported in loopback (SUM, AVG, MAX, MIN, "
                            f"PRODUCT are)")
    if name in ("MAX", "MIN"):
        return torch.stack(xs).amax(0) if name == "MAX" else torch.stack(xs).amin(0)
    acc = xs[0].clone()
    for x in xs[1:]:
        if name == "PRODUCT":
            acc *= x
        else:
            acc += x
    if name == "AVG":
        acc = acc / len(xs)
    return acc


class LoopbackGroup:
    """One virtual rank's view of a :class:`LoopbackWorld`: the collectives the runtime, the
    ops and the GPU tests use, with NCCL's semantics (in-place on the given tensors, ordered on
    the caller's current CUDA stream) and torch.distributed-like names."""

    def __init__(self, world: LoopbackWorld, rank: int):
        self.world = world
        self.rank = rank
        self.group_name = f"{world.name}-{id(world):x}"

    def size(self) -> int:
        return self.world.world_size

    def __repr__(self) -> str:
        return f"LoopbackGroup(rank={self.rank}, world_size={self.world.world_size})"

    # -- plumbing -------------------------------------------------------------------------

    def exchange(self, kind: str, value):
        """Host-only all-gather of a Python value (no stream ordering): the list of every
        rank's value, in rank order."""
        return self.world.collective(self.rank, kind, value)

    def _refuse_capture(self, kind: str) -> None:
        """A loopback collective cannot be captured in a CUDA graph: the ranks meet on the host
        at every call and order their streams with events of that call, none of which a
        replay repeats (the graph would hold one rank's half of a collective whose other
        halves were never replayed). Refused before anything is enqueued or rendezvoused."""
        if graphs.capturing():
            raise GraphCaptureError(
                f"loopback {kind} under CUDA-graph capture: the virtual ranks meet on the host "
                f"at every collective, which a replay would skip. The unfused path "
                f"(fused=False, SYNCOPATE=0, or the op's own choice of it) cannot be captured "
                f"in loopback; capture the fused path (fused=True, backend='sm'). Across "
                f"processes, torch.distributed's NCCL collectives are capturable")

    def _run(self, kind: str, tensors, value, work) -> None:
        """Run ``work(values)`` once for the round, ordered after every rank's current stream
        and before anything this rank enqueues next (CUDA), or synchronously (CPU)."""
        import torch

        self._refuse_capture(kind)

        cuda = [t for t in tensors if t is not None and t.is_cuda]
        if not cuda:
            self.world.collective(self.rank, kind, (value, None), lambda vals: work([v for v, _ in vals]))
            return
        dev = cuda[0].device
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream(dev))

        def run(vals):
            s = self.world.collective_stream(dev)
            for _, e in vals:
                s.wait_event(e)
            with torch.cuda.stream(s):
                work([v for v, _ in vals])
            done = torch.cuda.Event()
            done.record(s)
            return done

        done = self.world.collective(self.rank, kind, (value, ev), run)
        torch.cuda.current_stream(dev).wait_event(done)

    @staticmethod
    def _check_same(kind, vals, what):
        shapes = {(tuple(v.shape), v.dtype) for v in vals}
        if len(shapes) != 1:
            raise LoopbackError(f"{kind}: ranks passed different {what}: {sorted(map(str, shapes))}")

    # -- collectives ----------------------------------------------------------------------

    def barrier(self, device=None) -> None:
        """Every rank reached this point; with a CUDA ``device``, every rank's current stream
        also waits for what the others enqueued before it (NCCL's barrier is a device
        collective)."""
        import torch
        self._refuse_capture("barrier")
        if device is None or not torch.cuda.is_available():
            self.world.collective(self.rank, "barrier")
            return
        s = torch.cuda.current_stream(torch.device(device))
        ev = torch.cuda.Event()
        ev.record(s)
        events = self.world.collective(self.rank, "barrier", ev)
        for e in events:
            s.wait_event(e)

    def all_gather_into_tensor(self, output, input) -> None:
        W = self.size()
        if output.numel() != W * input.numel() or not output.is_contiguous():
            raise LoopbackError(f"all_gather_into_tensor: output must be contiguous with W x "
                                f"{input.numel()} elements, got {tuple(output.shape)}")

        def work(vals):
            self._check_same("all_gather_into_tensor", [i for _, i in vals], "inputs")
            for out, _ in vals:
                flat = out.view(W, -1)
                for s, (_, inp) in enumerate(vals):
                    flat[s].copy_(inp.reshape(-1))
        self._run("all_gather_into_tensor", [output, input], (output, input), work)

    def all_gather(self, outputs, input) -> None:
        def work(vals):
            self._check_same("all_gather", [i for _, i in vals], "inputs")
            for outs, _ in vals:
                for s, (_, inp) in enumerate(vals):
                    outs[s].copy_(inp)
        self._run("all_gather", [input, *outputs], (list(outputs), input), work)

    def reduce_scatter_tensor(self, output, input, op=None) -> None:
        import torch.distributed as dist
        op = dist.ReduceOp.SUM if op is None else op
        W = self.size()
        if input.numel() != W * output.numel() or not input.is_contiguous():
            raise LoopbackError(f"reduce_scatter_tensor: input must be contiguous with W x "
                                f"{output.numel()} elements, got {tuple(input.shape)}")

        def work(vals):
            self._check_same("reduce_scatter_tensor", [i for _, i in vals], "inputs")
            for r, (out, _) in enumerate(vals):
                parts = [inp.view(W, -1)[r] for _, inp in vals]
                out.copy_(_reduce(parts, op).view(out.shape))
        self._run("reduce_scatter_tensor", [output, input], (output, input), work)

    def all_reduce(self, tensor, op=None) -> None:
        import torch.distributed as dist
        op = dist.ReduceOp.SUM if op is None else op

        def work(vals):
            self._check_same("all_reduce", vals, "tensors")
            res = _reduce(list(vals), op)
            for t in vals:
                t.copy_(res)
        self._run("all_reduce", [tensor], tensor, work)

    def all_to_all_single(self, output, input) -> None:
        """Equal splits along dim 0: block ``s`` of ``input`` goes to rank ``s``, block ``r`` of
        ``output`` comes from rank ``r`` (what Ulysses attention's reference path needs)."""
        W = self.size()
        for name, t in (("input", input), ("output", output)):
            if t.numel() % W or not t.is_contiguous():
                raise LoopbackError(f"all_to_all_single: {name} must be contiguous with a "
                                    f"multiple of {W} elements, got {tuple(t.shape)}")

        def work(vals):
            self._check_same("all_to_all_single", [i for _, i in vals], "inputs")
            for r, (out, _) in enumerate(vals):
                flat = out.view(W, -1)
                for s, (_, inp) in enumerate(vals):
                    flat[s].copy_(inp.reshape(W, -1)[r])
        self._run("all_to_all_single", [output, input], (output, input), work)

    def broadcast(self, tensor, src: int) -> None:
        if not 0 <= src < self.size():
            raise LoopbackError(f"broadcast: src {src} out of range for {self.size()} ranks")

        def work(vals):
            self._check_same("broadcast", vals, "tensors")
            for r, t in enumerate(vals):
                if r != src:
                    t.copy_(vals[src])
        self._run("broadcast", [tensor], tensor, work)


# ------------------------------------------------------------------------------------------
# Symmetric memory
# ------------------------------------------------------------------------------------------

class LoopbackHandle:
    """Stands where torch's ``_SymmetricMemory`` handle stands: ``world_size`` and
    ``get_buffer(rank, sizes, dtype, storage_offset)`` -- a view of rank ``rank``'s buffer
    (``storage_offset`` in elements of ``dtype``, from the buffer's first byte), which in one
    process is simply a view of the other virtual rank's tensor."""

    def __init__(self, tensors):
        self.tensors = list(tensors)
        self.world_size = len(self.tensors)

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        import torch
        t = self.tensors[rank]
        raw = t.reshape(-1).view(torch.uint8)
        es = torch.empty((), dtype=dtype).element_size()
        n = math.prod(int(s) for s in sizes)
        lo = int(storage_offset) * es
        if lo + n * es > raw.numel():
            raise LoopbackError(f"get_buffer: bytes [{lo}, {lo + n * es}) outside rank {rank}'s "
                                f"buffer of {raw.numel()} bytes")
        return raw[lo:lo + n * es].view(dtype).view(tuple(int(s) for s in sizes))


class LoopbackSymmetricMemory:
    """The symmetric-memory backend of a loopback :class:`Communicator`: ``empty`` allocates
    this rank's buffer on the shared device (torch's caching allocator: 512-byte aligned, so
    the ABI's 16-byte alignment holds); ``rendezvous`` is a collective that exchanges the W
    tensors in process, so every rank's registry, peer views, flag views and ``syn_peers``
    table point at the other virtual ranks' buffers -- what torch's rendezvous does with IPC
    handles across processes."""

    def __init__(self, group: LoopbackGroup):
        self.group = group

    def empty(self, shape, dtype, device):
        import torch
        return torch.empty(shape, dtype=dtype, device=device)

    def rendezvous(self, t, group_name=None) -> LoopbackHandle:
        nbytes = t.numel() * t.element_size()
        tensors = self.group.exchange("symmetric_rendezvous", t)
        sizes = [x.numel() * x.element_size() for x in tensors]
        if len(set(sizes)) != 1 or len({x.device for x in tensors}) != 1:
            raise LoopbackError(f"symmetric allocation: ranks allocated {sizes} bytes on "
                                f"{sorted({str(x.device) for x in tensors})} (rank {self.group.rank}: "
                                f"{nbytes}); every rank must call comm.empty with the same shape "
                                f"and dtype, in the same order")
        return LoopbackHandle(tensors)


# ------------------------------------------------------------------------------------------
# Running W ranks
# ------------------------------------------------------------------------------------------

def run_loopback(fn, world_size: int, *args, device=None, timeout_s: float | None = None):
    """Run ``fn(rank, world_size, *args)`` for every virtual rank, each in its own thread bound
    to its :class:`LoopbackGroup` (so :mod:`.collectives` and ``Communicator()`` find it) and,
    for a CUDA ``device``, with its own current stream on that device. Returns one
    ``("ok", value)`` or ``("err", traceback)`` per rank. A failing rank aborts the world so
    the others leave their collectives instead of waiting for it.

    ``timeout_s`` bounds the whole run; threads cannot be killed, so a run past it raises
    :class:`TimeoutError` with its threads still running (daemon threads: the process can
    exit) -- run it in a child process that can be killed, as ``tests/gpu/dist_harness.py``
    does, when a hang must not outlive the caller."""
    import torch

    W = int(world_size)
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type == "cuda":
        warn_unless_eager(torch.cuda.is_initialized())
    world = LoopbackWorld(W)
    results: list = [("err", "did not start")] * W

    def body(rank):
        bind(world.groups[rank])
        # autograd runs a CUDA backward on its engine's worker thread for the device, which is
        # no virtual rank (no loopback group; the W ranks' backward collectives would queue on
        # it one behind another): run this rank's backward on its own thread (thread-local)
        torch.autograd.set_multithreading_enabled(False)
        try:
            if dev is not None and dev.type == "cuda":
                torch.cuda.set_device(dev)
                # each rank its own stream, never shared with another rank (a pool stream
                # could be: one rank's kernels would queue behind another's spinning kernel)
                stream = _cuda.dedicated_stream(dev)
                with torch.cuda.stream(stream):
                    value = fn(rank, W, *args)
                stream.synchronize()
            else:
                value = fn(rank, W, *args)
            results[rank] = ("ok", value)
        except BaseException as e:  # noqa: BLE001 - reported per rank
            results[rank] = ("err", traceback.format_exc())
            world.abort(f"rank {rank} failed: {type(e).__name__}: {e}")
        finally:
            unbind()

    threads = [threading.Thread(target=body, args=(r,), name=f"syncopate-loopback-rank{r}",
                                daemon=True) for r in range(W)]
    for t in threads:
        t.start()
    deadline = None if timeout_s is None else time.monotonic() + float(timeout_s)
    for t in threads:
        t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
    hung = [r for r, t in enumerate(threads) if t.is_alive()]
    if hung:
        world.abort(f"ranks {hung} still running after {timeout_s:g} s")
        raise TimeoutError(f"{getattr(fn, '__name__', fn)}: loopback ranks {hung} still running "
                           f"after {timeout_s:g} s")
    return results
