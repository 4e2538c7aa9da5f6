"""Who runs a chunk, and in which order: the one definition the verifier, the compiler passes
and the runtime share (issue 9: "who executes a chunk" used to have two answers).

A chunk's ``mode`` says which side starts the copy: ``push`` the source, ``pull`` the
destination.  Which rank *runs* it also depends on the backend (its spec's
``sum_on_destination``):

* ``sm`` and ``nvshmem`` (comm programs inside the fused kernel, ``sum_on_destination``): a
  ``sum`` chunk runs on its **destination** whatever its mode -- accumulating into a region
  must be ordered per region, and the destination is the one rank that can order the
  contributions without atomics (docs/design-notes.md, note 6); a copy runs on the side its
  mode names;
* ``ce`` (the copy engine on a side stream): every chunk runs on the side its mode names; a
  ``sum`` chunk is a copy into the destination's per-source slot, added after the kernel or
  by the owner's tiles (``reduce="epilogue"``).

Each executing rank runs its chunks in ``(step, id)`` order: that is the program order the
verifier proves deadlock-free (:func:`program_order`), the order ``partition-sms`` emits the
transfers in, and the order of the ``ce`` side stream (``runtime/plan.py``).
"""

from __future__ import annotations

from .. import backends
from ..errors import ScheduleError
from .model import Chunk, Schedule


def executor(chunk: Chunk, backend) -> int:
    """The rank that runs ``chunk`` on ``backend`` (a name or a
    :class:`~syncopate.backends.BackendSpec`)."""
    spec = backends.get(backend, ScheduleError)
    if chunk.reduce == "sum" and spec.sum_on_destination:
        return chunk.dst
    return chunk.src if chunk.mode == "push" else chunk.dst


def side(chunk: Chunk, backend) -> str:
    """``"src"`` or ``"dst"``: which end of ``chunk`` runs it on ``backend`` (what the comm
    programs' lowering and the emulator branch on)."""
    return "src" if executor(chunk, backend) == chunk.src else "dst"


def program_order(schedule: Schedule, backend) -> dict[int, list[Chunk]]:
    """Rank -> the chunks it runs on ``backend``, in the order it runs them: ``(step, id)``."""
    out: dict[int, list[Chunk]] = {r: [] for r in range(schedule.world_size)}
    backend = backends.get(backend, ScheduleError)
    for c in schedule.ordered_chunks():
        out[executor(c, backend)].append(c)
    return out
