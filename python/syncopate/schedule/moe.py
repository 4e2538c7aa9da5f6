"""The MoE dispatch schedule: tokens routed to the ranks that own their experts, with a static
capacity per (source rank, expert) and device-side counts of valid rows.

Layout (docs/moe.md). ``W`` ranks, ``E`` experts, ``El = E / W`` local to each rank (rank ``d``
owns experts ``d*El .. d*El + El - 1``), capacity ``C`` rows per (source, expert), hidden ``H``.

* ``X`` ``[W * E * C, H]``: group ``(s, x)`` (source ``s``, global expert ``x``) owns rows
  ``[(s*E + x) * C, +C)``. Rank ``s`` initially holds its block ``[s*E*C, (s+1)*E*C)`` (it
  packed its tokens there, at most ``C`` per expert); finally every rank holds all of ``X``
  *statically* -- but only the groups of its own experts carry data.
* ``CNT`` ``[W * W * E]`` int32: ``CNT[(s*W + d)*E + x]`` = rows of group ``(s, x)`` that
  destination ``d`` receives: the count of tokens ``s`` routed to ``x`` when ``d`` owns ``x``,
  else 0. Rank ``s`` writes its block ``[s*W*E, (s+1)*W*E)``; every rank ends with all of it.

Why an all-gather with run-time extents rather than an all-to-all: the consumer's tiles on rank
``d`` read rank-dependent groups of ``X``, and the compiler (``check-accesses``) only lets a
kernel read a communicated tensor at rank-dependent places when every rank ends holding the
whole tensor -- it cannot relate a kernel argument to the rank. Here every rank does hold all
of ``X`` in the schedule's static model, while the data chunk ``(s -> d, x)`` has
``extra["valid_rows"] = {"tensor": "CNT", "index": (s*W + d)*E + x}``: its valid extent is 0
unless ``d`` owns ``x``. A runtime that copies only the valid prefix (the emulator does) moves
exactly the all-to-all's bytes; one that copies the static region (the ``sm``/``ce`` lowerings
today) is correct and moves ``W`` times more.

Chunks (``swizzle`` order: at round ``k`` rank ``d`` receives from ``s = (d + k + 1) % W``):

* one **count chunk** per (s, d): ``CNT`` block ``s``, at step ``k``;
* one **data chunk** per (s, d, x): group ``(s, x)``, at step ``W - 1 + k*E + j`` where ``j``
  runs over ``d``'s own experts first (so its data arrives first), with the ``valid_rows``
  above. The copier reads the count on the source, which wrote it before the launch, so no
  chunk waits for a count chunk; the count chunks are for the consumers' kernels.

The combine (:func:`moe_combine`) is the way back: rank ``d``'s second expert GEMM *produces*
``Y`` (``view="rank"``: part ``d`` holds the groups ``(s, e)`` it computed for every source
``s``) and each group travels back to its source with the same run-time extent as on the way
in. No rank holds a group it does not need, so there are no empty chunks.
"""

from __future__ import annotations

from ..errors import ScheduleError
from .model import MODES, Chunk, Placement, Region, Schedule, TensorSpec, _as_dtype
from .generators import _meta, _positive, everywhere, owned


def x_group(E: int, s: int, x: int) -> int:
    """The group of ``X`` holding source ``s``'s tokens for global expert ``x``."""
    return s * E + x


def cnt_index(W: int, E: int, s: int, d: int, x: int) -> int:
    """The ``CNT`` element: rows of group ``(s, x)`` valid on destination ``d``."""
    return (s * W + d) * E + x


def owner(E: int, W: int, x: int) -> int:
    """The rank that owns global expert ``x``."""
    return x // (E // W)


def _checked(template: str, world_size, num_experts, capacity, width, dtype, mode, data,
             counts, data_arg: str) -> str:
    """Typed errors shared by the two templates; returns the normalised dtype."""
    problems = _positive(world_size=world_size, num_experts=num_experts, capacity=capacity,
                         hidden=width)
    if not problems and num_experts % world_size:
        problems.append(f"{num_experts} experts do not divide over {world_size} ranks: expert "
                        f"parallelism gives every rank num_experts / world_size experts; pick "
                        f"a world size that divides {num_experts}")
    if mode not in MODES:
        problems.append(f"mode must be 'push' or 'pull', got {mode!r}")
    if data == counts:
        problems.append(f"{data_arg} and counts must be different tensor names, both are "
                        f"{data!r}")
    dtype = _as_dtype(dtype, problems)
    if problems:
        raise ScheduleError([f"{template}: {p}" for p in problems])
    return dtype


def moe_dispatch(world_size: int, num_experts: int, capacity: int, hidden: int,
                 dtype: str = "bf16", mode: str = "pull", tokens: str = "X",
                 counts: str = "CNT") -> Schedule:
    """The dispatch (see the module docstring). Raises :class:`ScheduleError` when the experts
    do not divide over the ranks or a size is not positive."""
    dtype = _checked("moe_dispatch", world_size, num_experts, capacity, hidden, dtype, mode,
                     tokens, counts, "tokens")
    W, E, C, H = world_size, num_experts, capacity, hidden
    El = E // W
    x_block = [Region((s * E * C, 0), (E * C, H)) for s in range(W)]
    c_block = [Region((s * W * E,), (W * E,)) for s in range(W)]
    chunks: list[Chunk] = []
    for k in range(W - 1):
        for d in range(W):
            s = (d + k + 1) % W
            chunks.append(Chunk(len(chunks), counts, c_block[s], s, d, mode, k))
    for k in range(W - 1):
        for d in range(W):
            s = (d + k + 1) % W
            own = list(range(d * El, (d + 1) * El))
            for j, x in enumerate(own + [x for x in range(E) if x not in own]):
                extra = {"valid_rows": {"tensor": counts, "index": cnt_index(W, E, s, d, x)}}
                chunks.append(Chunk(len(chunks), tokens,
                                    Region((x_group(E, s, x) * C, 0), (C, H)), s, d, mode,
                                    W - 1 + k * E + j, extra=extra))
    specs = {tokens: TensorSpec(tokens, (W * E * C, H), dtype,
                                owned(x_block), everywhere((W * E * C, H), W)),
             counts: TensorSpec(counts, (W * W * E,), "int32", owned(c_block),
                                everywhere((W * W * E,), W))}
    return Schedule(W, specs, chunks, _meta("moe_dispatch", world_size=W, num_experts=E,
                                            capacity=C, hidden=H, dtype=dtype, mode=mode,
                                            tokens=tokens, counts=counts))


def y_group(E: int, W: int, d: int, s: int, x: int) -> int:
    """The group of the combine's ``Y`` that rank ``d`` computes for source ``s``'s tokens
    routed to ``d``'s expert ``x`` (global id): ``d * E + s * El + (x - d * El)``."""
    El = E // W
    return d * E + s * El + (x - d * El)


def moe_combine(world_size: int, num_experts: int, capacity: int, hidden: int,
                dtype: str = "bf16", mode: str = "push", outputs: str = "Y",
                counts: str = "CNT") -> Schedule:
    """The combine's way back: expert outputs to the ranks whose tokens they are.

    * ``Y`` ``[W * E * C, hidden]``, ``produced``, ``view="rank"``: rank ``d`` computes part
      ``d`` (rows ``[d*E*C, (d+1)*E*C)``), its ``W * El`` groups ``s * El + e`` -- source
      ``s``'s tokens times ``d``'s local expert ``e`` -- at part-relative rows
      ``(s*El + e) * C`` (what the grouped GEMM writes: the kernel is the same on every rank,
      the compiler offsets its operand by the part). Rank ``s`` ends holding, from every
      ``d``, the ``El`` groups computed for it (its own part's among them, computed locally).
    * ``CNT`` ``[W * W * E]`` int32, the dispatch's counts, held whole by every rank
      before the launch (the dispatch ended with all of it) and never moved:
      ``CNT[(s*W + d)*E + x]`` is the number of valid rows of group ``(d, s, x)``.
    * one data chunk per ``(d -> s, e)``, ``s != d``: group :func:`y_group`, with
      ``extra["valid_rows"] = {"tensor": CNT, "index": (s*W + d)*E + d*El + e}`` (the copier
      on either end reads it: the source computed exactly those rows, the destination packed
      them); round ``k`` sends to ``s = (d - k - 1) % W``, step ``k * El + e``.

    The producer's tiles past a group's count store nothing but still signal their box
    (``PRODUCED[c]`` counts the chunk's static volume; docs/moe.md section 7), so a copier
    waits for exactly the flags it would wait for on a static schedule.
    """
    dtype = _checked("moe_combine", world_size, num_experts, capacity, hidden, dtype, mode,
                     outputs, counts, "outputs")
    W, E, C, H = world_size, num_experts, capacity, hidden
    El = E // W
    chunks: list[Chunk] = []
    for k in range(W - 1):
        for d in range(W):
            s = (d - k - 1) % W
            for e in range(El):
                x = d * El + e
                extra = {"valid_rows": {"tensor": counts, "index": cnt_index(W, E, s, d, x)}}
                chunks.append(Chunk(len(chunks), outputs,
                                    Region((y_group(E, W, d, s, x) * C, 0), (C, H)), d, s, mode,
                                    k * El + e, extra=extra))
    part = [Region((d * E * C, 0), (E * C, H)) for d in range(W)]
    mine = [[Placement(s, Region((y_group(E, W, d, s, d * El) * C, 0), (El * C, H)))
             for d in range(W)] for s in range(W)]
    whole = everywhere((W * W * E,), W)
    specs = {outputs: TensorSpec(outputs, (W * E * C, H), dtype,
                                 owned(part), [p for s in range(W) for p in mine[s]],
                                 produced=True, view="rank"),
             counts: TensorSpec(counts, (W * W * E,), "int32", whole, whole)}
    return Schedule(W, specs, chunks, _meta("moe_combine", world_size=W, num_experts=E,
                                            capacity=C, hidden=H, dtype=dtype, mode=mode,
                                            outputs=outputs, counts=counts))


__all__ = ["cnt_index", "moe_combine", "moe_dispatch", "owner", "x_group", "y_group"]
