"""Compiler bugs the fuzzer has found and that are not fixed yet.

Each entry is matched narrowly (the styles and the failure kind), so a *new* failure in the
same area still fails the run.  Every entry is in docs/fuzzing.md ("Found") with a replay
command and has an ``xfail(strict=True)`` test in tests/test_fuzz.py: when the compiler is
fixed, that test passes, pytest reports the unexpected pass, and the entry must be removed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Known:
    id: str
    summary: str
    replay_seed: int
    applies: Callable  # (case, verdict) -> bool


#: the fuzzer's three findings of its first runs are fixed (docs/fuzzing.md, "Found"):
#: remap-reorders-reduction (seed 75: tile-remap no longer renumbers a loop that accumulates
#: floats), all_to_all-undelivered-read (seed 204: check-accesses refuses reads of a tensor a
#: rank does not end up holding whole), all_reduce-push-unwaited (seed 624: partition-sms makes
#: each destination wait for the chunks pushed to it). tests/test_fuzz.py replays them.
KNOWN: list[Known] = []


def match_known(case, verdict) -> str | None:
    """The id of the known bug this failure is, or None."""
    return next((k.id for k in KNOWN if k.applies(case, verdict)), None)
