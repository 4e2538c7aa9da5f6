"""Who runs a chunk, and in which order: the one definition the verifier, the compiler passes
and the runtime share (issue 9: "who executes a chunk" used to have two answers).

A chunk's ``mode`` says which side starts the copy: ``push`` the source, ``pull`` the
destination.  Which rank *runs* it also depends on the backend:

* ``sm`` and ``nvshmem`` (comm programs inside the fused kernel): a ``sum`` chunk runs on its
  **destination** whatever its mode -- accumulating into a region must be ordered per region,
  and the destination is the one rank that can order the contributions without atomics
  (docs/design-notes.md, note 6); a copy runs on the side its mode names;
* ``ce`` (the copy engine on a side stream): every chunk runs on the side its mode names; a
  ``sum`` chunk is a copy into the destination's per-source slot, added after the kernel or
  by the owner's tiles (``reduce="epilogue"``).

Each executing rank runs its chunks in ``(step, id)`` order: that is the program order the
verifier proves deadlock-free (:func:`program_order`), the order ``partition-sms`` emits the
transfers in, and the order of the ``ce`` side stream (``runtime/plan.py``).
"""

from __future__ import annotations

from .model import Chunk, Schedule

#: backends whose comm programs run ``sum`` chunks on the destination
SUM_ON_DESTINATION = ("sm", "nvshmem")
#: every backend, as far as execution is concerned (``syncopate.abi.BACKENDS`` names the same)
EXECUTION_MODELS = ("sm", "ce", "nvshmem")


def executor(chunk: Chunk, backend: str) -> int:
    """The rank that runs ``chunk`` on ``backend``."""
    if backend not in EXECUTION_MODELS:
        from ..errors import ScheduleError
        raise ScheduleError(f"unknown backend {backend!r}; choose one of "
                            f"{', '.join(EXECUTION_MODELS)}")
    if chunk.reduce == "sum" and backend in SUM_ON_DESTINATION:
        return chunk.dst
    return chunk.src if chunk.mode == "push" else chunk.dst


def side(chunk: Chunk, backend: str) -> str:
    """``"src"`` or ``"dst"``: which end of ``chunk`` runs it on ``backend`` (what the comm
    programs' lowering and the emulator branch on)."""
    return "src" if executor(chunk, backend) == chunk.src else "dst"


def reads_peer(chunk: Chunk, backend: str) -> bool:
    """Whether running ``chunk`` reads a *peer's* buffer (so the source must not overwrite it
    before the reader is done: the CONSUMED handshake of docs/fused-abi.md)."""
    return executor(chunk, backend) == chunk.dst and chunk.src != chunk.dst


def program_order(schedule: Schedule, backend: str) -> dict[int, list[Chunk]]:
    """Rank -> the chunks it runs on ``backend``, in the order it runs them: ``(step, id)``."""
    out: dict[int, list[Chunk]] = {r: [] for r in range(schedule.world_size)}
    for c in schedule.ordered_chunks():
        out[executor(c, backend)].append(c)
    return out
