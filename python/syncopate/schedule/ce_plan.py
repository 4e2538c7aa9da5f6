"""The host-side plan of the ``ce`` backend: what one rank's copy-engine side stream does.

Pure Python (no torch, no CUDA), below the runtime: the ``ce`` launcher runs it and the CPU
emulator (:mod:`syncopate.emulate.comm`) checks it; unit-tested on CPU with real schedules.

The ``ce`` plan of a rank lists, in ``(step, id)`` order, the chunks this rank's side stream
executes (``syncopate.schedule.execution.executor(c, CE)``: pull: it is the destination;
push: it is the source), and for each what must be
waited for first:

* ``ENTRY[peer] >= e`` -- always, and up front for every rank (one launch), *before* the fused
  kernel on the main stream, and the side stream starts after it (an event). Why up front:
  the wait is a kernel and
  needs an SM; once the fused kernel runs, its programs may occupy every SM while spinning on
  chunk flags that only this side stream can set, so a wait enqueued after it could starve.
  After the up-front wait, everything left on the side stream needs no SM: copies are copy
  engine transfers and flags are written by ``stream_write_value32`` (the GPU front end),
  except the final CONSUMED adds, which nothing on this rank waits for.
* ``PRODUCED[c] >= e * tiles(c)`` on this rank (push of data the fused kernel writes, e.g.
  GEMM + reduce-scatter): ``cuStreamWaitValue32``, no SM. Safe without a watchdog because the
  only writer is this rank's own kernel, which always finishes (every spin in it has one).
* a dependency (``after``) satisfied by an earlier chunk of the same side stream: nothing,
  stream order.

What the ``ce`` backend refuses (:class:`LaunchError`, naming the chunk): waiting on a flag a
*peer* writes in the middle of the plan (forwarding data received from a peer's push, pulling
data a peer's kernel produces). That wait would need an SM kernel on the side stream while the
fused kernel may hold every SM -- a possible cross-rank deadlock that only the watchdog would
break. Those schedules need the ``sm`` or ``nvshmem`` backend, where comm programs are resident
before any compute program spins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..backends.ce import CE
from ..errors import LaunchError
from .execution import executor


@dataclass(frozen=True)
class CopyStep:
    """One chunk the side stream of this rank executes."""

    chunk: int
    tensor: str
    slices: tuple  # region as slices of the tensor
    src: int
    dst: int
    mode: str  # "pull" (this rank is dst) | "push" (this rank is src)
    reduce: bool  # delivered into the destination's slot for ``src``, reduced after the kernel
    wait_produced: int = 0  # tiles(c) when the data is written by this rank's kernel this epoch
    #: the data is written by this rank's kernel but the ABI gives no PRODUCED count for it:
    #: wait for the whole kernel (an event) before copying -- correct, without overlap
    wait_kernel: bool = False


@dataclass
class CEPlan:
    rank: int
    world_size: int
    steps: list[CopyStep] = field(default_factory=list)
    consumed_adds: dict[int, int] = field(default_factory=dict)  # src rank -> chunks read from it
    reads_of_me: int = 0  # pull reads of this rank's buffers per epoch (CONSUMED target / epoch)
    reduce_in: list[CopyStep] = field(default_factory=list)  # reduce chunks arriving here
    reduce_tensors: tuple[str, ...] = ()  # tensors that need per-source slots (on every rank)


def build_ce_plan(schedule, rank: int, produced_count: dict[int, int] | None = None) -> CEPlan:
    """The side-stream plan of ``rank`` for the ``ce`` backend (see the module docstring)."""
    produced_count = produced_count or {}
    W = int(schedule.world_size)
    if not 0 <= rank < W:
        raise LaunchError(f"rank {rank} is outside the schedule's world size {W}")
    plan = CEPlan(rank=rank, world_size=W)
    executed: set[int] = set()
    plan.reduce_tensors = tuple(sorted({c.tensor for c in schedule.chunks if c.reduce == "sum"}))
    for c in schedule.ordered_chunks():
        red = c.reduce == "sum"
        if c.src != c.dst and not red and schedule.is_produced(c.tensor):
            # found by the CPU emulator (Ulysses' output all-to-all): the destination's launch
            # returned while the source's side stream was still copying into it
            raise LaunchError(
                f"chunk {c.id} copies {c.tensor}, which the kernel produces, from rank {c.src} "
                f"into rank {c.dst}: the ce backend awaits chunks arriving on a rank only for "
                f"reduce-scatter sums, so rank {c.dst}'s launch could return before this copy "
                f"landed. Use backend='sm' for a schedule that copies produced tensors")
        if c.mode == "pull" and c.src != c.dst and c.src == rank:
            plan.reads_of_me += 1
        mine = executor(c, CE) == rank
        produced = int(produced_count.get(c.id, 0)) if c.src == rank else 0
        step = CopyStep(chunk=c.id, tensor=c.tensor, slices=c.region.slices(), src=c.src,
                        dst=c.dst, mode=c.mode, reduce=red, wait_produced=produced,
                        wait_kernel=(c.src == rank and not produced
                                     and _written_by_kernel(schedule, c.tensor, rank)))
        if red and c.dst == rank and c.src != rank:
            plan.reduce_in.append(step)
        if not mine:
            continue
        if c.mode == "pull" and c.src != rank and produced_count.get(c.id, 0):
            raise LaunchError(
                f"chunk {c.id} ({c.tensor}, from rank {c.src}) is pulled by rank {rank} but "
                f"written by rank {c.src}'s kernel in the same launch: the ce backend would have to "
                f"spin on a peer's PRODUCED flag from its side stream while the fused kernel may "
                f"hold every SM. Use mode='push' for this schedule, or backend='sm'")
        for d in schedule.dependencies(c.id):
            if d in executed:
                continue  # earlier on this side stream: stream order
            dep = schedule.chunk(d)
            raise LaunchError(
                f"chunk {c.id} ({c.tensor}, {c.src}->{c.dst}) depends on chunk {d} "
                f"({dep.src}->{dep.dst}), which rank {rank}'s side stream does not execute: the ce "
                f"backend cannot wait for a peer-written flag in the middle of its plan without "
                f"risking SM starvation. Use backend='sm' (comm programs) for forwarding schedules")
        plan.steps.append(step)
        executed.add(c.id)
        if c.mode == "pull" and c.src != rank:
            plan.consumed_adds[c.src] = plan.consumed_adds.get(c.src, 0) + 1
    return plan


def _written_by_kernel(schedule, tensor: str, rank: int) -> bool:
    """A tensor whose initial placement on ``rank`` is *partial* (a reduce-scatter's partial
    sums) is produced by the fused kernel itself, not staged before the launch."""
    spec = schedule.tensors.get(tensor)
    return spec is not None and any(p.partial and p.rank == rank for p in spec.initial)
