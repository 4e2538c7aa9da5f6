"""The scheduler: interleaves program instances, comm programs, copy-engine streams and the
emulated hosts of every rank under a policy.

Every participant is a coroutine (a Python generator) that yields at the points where the
real machine could let something else happen first: a wait (it yields what it waits for and is
not resumed before that holds), a signal, a copy of a tile, an atomic, and in ``fine`` mode
every load/store of a communicated tensor.  Between two yields a coroutine runs alone, which
is sound because nothing another coroutine does between those points can change what it
computes (its loads and stores touch data whose order the flags define).

Policies (``name`` or ``name:arg``) pick which runnable coroutine goes next:

* ``in-order`` -- lowest rank, then comm programs before compute programs, lowest id first:
  the schedule a GPU is most likely to run;
* ``reverse`` -- highest rank and highest program id first;
* ``late`` -- comm programs and copy-engine streams only when no compute program or host can
  move: every chunk is delivered as late as the waits allow, so a missing or too-weak wait
  is caught reading data that has not arrived;
* ``behind:R`` -- rank ``R`` moves only when no other rank can: the other ranks race ahead
  into their next launches (flags left from an earlier launch, write-after-read across
  launches);
* ``random:SEED`` -- uniformly random among the runnable, reproducible per seed.

The scheduler detects deadlock (nothing runnable, something alive) and reports every blocked
coroutine with what it waits for.  Every policy is *fair*: a coroutine picked :data:`SPIN_TURN`
times in a row while others could move (a program spinning on a flag another program sets,
each turn an atomic) is marked spinning and from then on moves only when no other coroutine
can (spinning ones then take turns, least recently moved first), as a GPU's resident programs all
make progress; without it ``in-order`` picked a spinning program forever.
"""

from __future__ import annotations

import random as _random
from dataclasses import dataclass

from ..errors import EmulationError


@dataclass(eq=False)
class Co:
    """One coroutine: ``kind`` is ``host``, ``stream`` (copy engine), ``comm`` or ``compute``."""

    gen: object
    rank: int
    kind: str
    index: int
    name: str
    epoch: int = 0
    waiting: object = None
    done: bool = False
    seq: int = 0
    #: the scheduling step this coroutine last ran at (the fairness rule's order)
    last: int = -1
    #: it took SPIN_TURN turns in a row while others could move: it waits for one of them
    spinning: bool = False


#: turns one coroutine may take in a row while another is runnable (see the module docstring)
SPIN_TURN = 1_000

_KIND_ORDER = {"host": 0, "stream": 1, "comm": 2, "compute": 3}


def parse_policy(text: str, world_size: int | None = None) -> tuple[str, int | None]:
    """``(name, arg)`` of a policy; with ``world_size``, ``behind:R`` must name one of its
    ranks (``-W <= R < W``, negative counting from the last): a rank that does not exist would
    hold no one back, and the run would silently repeat ``in-order``."""
    name, _, arg = text.partition(":")
    if name not in ("in-order", "reverse", "late", "behind", "random"):
        raise EmulationError(f"unknown policy {text!r}; choose in-order, reverse, late, "
                             f"behind:RANK or random:SEED")
    if name in ("behind", "random"):
        try:
            value = int(arg) if arg else 0
        except ValueError:
            raise EmulationError(f"policy {text!r}: {name} takes an integer") from None
        if name == "behind" and world_size is not None and not -world_size <= value < world_size:
            raise EmulationError(
                f"policy {text!r}: there is no rank {value} in a world of {world_size}; "
                f"behind takes a rank from 0 to {world_size - 1} (or -1 to -{world_size}, "
                f"counted from the last)")
        return name, value
    if arg:
        raise EmulationError(f"policy {text!r}: {name} takes no argument")
    return name, None


class Scheduler:
    def __init__(self, policy: str, max_steps: int = 20_000_000):
        self.policy, self.arg = parse_policy(policy)
        self.rng = _random.Random(self.arg if self.policy == "random" else 0)
        self.live: list[Co] = []
        #: scheduling steps of a run that finished, coroutines spawned
        self.steps = self.coroutines = 0
        self.max_steps = max_steps
        self._seq = 0

    def spawn(self, co: Co) -> Co:
        self._seq += 1
        co.seq = self._seq
        self.live.append(co)
        self.coroutines += 1
        return co

    def _key(self, c: Co):
        p = self.policy
        if p == "in-order":
            return (c.rank, _KIND_ORDER[c.kind], c.index, c.seq)
        if p == "reverse":
            return (-c.rank, _KIND_ORDER[c.kind], -c.index, c.seq)
        if p == "late":
            late = c.kind in ("comm", "stream")
            return (late, c.rank, _KIND_ORDER[c.kind], c.index, c.seq)
        if p == "behind":
            return (c.rank == self.arg, c.rank, _KIND_ORDER[c.kind], c.index, c.seq)
        raise AssertionError(p)

    def run(self) -> list[Co]:
        """Run until every coroutine finished; returns the blocked ones on deadlock."""
        steps = 0
        prev, streak = None, 0
        while self.live:
            runnable = [c for c in self.live if c.waiting is None or c.waiting.ready()]
            if not runnable:
                return list(self.live)
            pool = [c for c in runnable if not c.spinning]
            if not pool:  # only spinning ones can move: round robin
                c = min(runnable, key=lambda x: x.last)
            elif self.policy == "random":
                c = pool[self.rng.randrange(len(pool))]
            else:
                c = min(pool, key=self._key)
            streak = streak + 1 if c is prev else 1
            if streak > SPIN_TURN and len(runnable) > 1:
                c.spinning = True  # from now on it moves only when no other one can
                c = min((x for x in runnable if x is not prev), key=lambda x: (x.spinning,
                                                                             x.last))
                streak = 1
            prev, c.last = c, steps
            c.waiting = None
            try:
                c.waiting = next(c.gen)
            except StopIteration:
                c.done = True
                self.live.remove(c)
            steps += 1
            if steps > self.max_steps:
                raise EmulationError(f"the emulation did not finish within {self.max_steps} "
                                     f"scheduling steps (a livelock?)")
        self.steps += steps
        return []
