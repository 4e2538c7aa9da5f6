"""Soundness of the verifier against a concrete execution.

Schedules (templates, and templates with random edits of steps, after lists, modes, regions
and reductions) that the verifier *accepts* are executed on real numbers in several random
orders consistent with their dependencies: every final region must hold exactly the sum of all
ranks' contributions, whatever the order.  Anything the verifier lets through that a real run
could get wrong (a stale read, a double count, uninitialized memory) fails here.  The verifier
must also never crash on such edits: it accepts or raises ScheduleError.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from syncopate.errors import ScheduleError
from syncopate.schedule import Region, Schedule, TEMPLATES, analyze


def _points(region: Region):
    return itertools.product(*(range(o, o + n) for o, n in zip(region.offsets, region.sizes)))


def concrete_run(s: Schedule, seed: int) -> None:
    """Execute ``s`` on integers in a random order consistent with its dependencies and check
    every final placement.  Memory is a dict per rank and tensor from index to value; a
    missing index is uninitialized memory (reading it yields None, which poisons sums)."""
    rng = random.Random(seed)
    W = s.world_size
    mem: dict = {}
    total: dict = {}
    for name, t in s.tensors.items():
        full = Region.full(t.shape)
        contrib = [{p: rng.randrange(1, 1000) for p in _points(full)} for _ in range(W)]
        total[name] = {p: sum(c[p] for c in contrib) for p in _points(full)}
        for r in range(W):
            mem[(r, name)] = {}
        for pl in t.initial:
            src = contrib[pl.rank] if pl.partial else total[name]
            for p in _points(pl.region):
                mem[(pl.rank, name)][p] = src[p]
    deps = {c.id: set(s.dependencies(c.id)) for c in s.chunks}
    done: set[int] = set()
    pending = {c.id: c for c in s.chunks}
    while pending:
        ready = sorted(cid for cid in pending if deps[cid] <= done)
        assert ready, "the verifier accepted a schedule whose dependencies cannot be ordered"
        c = pending.pop(rng.choice(ready))
        src, dst = mem[(c.src, c.tensor)], mem[(c.dst, c.tensor)]
        data = {p: src.get(p) for p in _points(c.region)}
        for p, v in data.items():
            if c.reduce == "sum":
                old = dst.get(p)
                dst[p] = None if old is None or v is None else old + v
            else:
                dst[p] = v
        done.add(c.id)
    for name, t in s.tensors.items():
        for pl in t.final:
            for p in _points(pl.region):
                assert mem[(pl.rank, name)].get(p) == total[name][p], (name, pl, p, seed)


@st.composite
def cases(draw):
    name = draw(st.sampled_from(sorted(TEMPLATES)))
    W = draw(st.integers(2, 5))
    ndim = 2 if name == "all_to_all" else draw(st.integers(1, 2))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=ndim, max_size=ndim)))
    kw = {"mode": draw(st.sampled_from(["push", "pull"])), "split": draw(st.integers(1, 3))}
    if name == "all_to_all":
        kw.update(split_dim=0, concat_dim=1) if draw(st.booleans()) else \
            kw.update(split_dim=1, concat_dim=0)
    else:
        kw["dim"] = draw(st.integers(0, ndim - 1))
        if name != "ring_pass":
            kw["order"] = draw(st.sampled_from(["swizzle", "ring"]))
    return TEMPLATES[name](shape, "fp32", W, **kw)


def _edit(s: Schedule, data) -> Schedule:
    """Up to three random edits of chunks."""
    chunks = list(s.chunks)
    if not chunks:
        return s
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(chunks) - 1))
        c = chunks[i]
        kind = data.draw(st.sampled_from(["step", "drop_after", "add_after", "mode", "reduce",
                                          "shrink", "src"]))
        if kind == "step":
            c = dataclasses.replace(c, step=data.draw(st.integers(0, 12)))
        elif kind == "drop_after":
            c = dataclasses.replace(c, after=())
        elif kind == "add_after":
            c = dataclasses.replace(c, after=c.after + (data.draw(
                st.integers(0, len(chunks) - 1)),))
        elif kind == "mode":
            c = dataclasses.replace(c, mode="pull" if c.mode == "push" else "push")
        elif kind == "reduce":
            c = dataclasses.replace(c, reduce="none" if c.reduce == "sum" else "sum")
        elif kind == "shrink":
            d = data.draw(st.integers(0, c.region.ndim - 1))
            if c.region.sizes[d] > 1:
                sizes = list(c.region.sizes)
                sizes[d] -= 1
                c = dataclasses.replace(c, region=Region(c.region.offsets, sizes))
        else:
            c = dataclasses.replace(c, src=data.draw(st.integers(0, s.world_size - 1)))
        chunks[i] = c
    return dataclasses.replace(s, chunks=tuple(chunks))


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(cases(), st.integers(0, 2**16))
def test_templates_run_correctly_in_any_order(s, seed):
    for k in range(3):
        concrete_run(s, seed + k)


#: Floor on the share of edited schedules the verifier accepts. Without it the property
#: below would pass vacuously if the verifier rejected everything (nothing would be run).
#: Measured: 94 of 120 (78%) with ``derandomize=True``; 66-82% over hypothesis seeds 0-5
#: (max_examples = 120; many edits -- a later step, a dropped ``after`` that the step order
#: still implies -- keep a schedule sound). 50% is > 6 standard deviations below that.
MIN_ACCEPTANCE = 0.5


def test_accepted_edits_run_correctly():
    """Edited templates that the verifier accepts run correctly in any order -- and it accepts
    at least :data:`MIN_ACCEPTANCE` of them, so the property is exercised, not vacuous."""
    seen = {"generated": 0, "accepted": 0}

    @SETTINGS
    @given(cases(), st.data(), st.integers(0, 2**16))
    def check(s, data, seed):
        edited = _edit(s, data)
        seen["generated"] += 1
        try:
            problems = analyze(edited).problems
        except ScheduleError:  # construction-level problems surface as ScheduleError too
            return
        if problems:
            return
        seen["accepted"] += 1
        for k in range(3):
            concrete_run(edited, seed + k)

    check()
    rate = seen["accepted"] / max(1, seen["generated"])
    assert rate >= MIN_ACCEPTANCE, (
        f"the verifier accepted {seen['accepted']} of {seen['generated']} edited schedules "
        f"({rate:.0%} < {MIN_ACCEPTANCE:.0%}): it rejects (nearly) everything, so the soundness "
        f"property above is not being exercised")
