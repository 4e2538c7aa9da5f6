"""Schedule templates: the common collectives as chunk schedules that verify.

Every template shards the tensor evenly along a dim: rank ``r`` owns block ``r``, the first
``n % W`` blocks one index longer than the others (ragged shapes are fine; a rank whose block
is empty owns nothing).  ``split`` cuts every block into ``split`` chunks along the same dim,
as evenly (empty pieces are left out), so a consumer can start on the first piece of a block
before the last one has arrived.  Piece ``k`` of the block moved at round ``s`` gets step
``s * split + k``: a rank receives (or sends) one piece per step, in block order.  Chunk ids
are dense from 0, in (round, rank, piece) order.  ``meta["template"]`` records the template
name and its arguments (``syncopate schedule show`` prints it).

Orders
------
* ``swizzle``: every block goes straight from its owner to each rank; at round ``s`` rank ``r``
  receives the block of rank ``(r + s + 1) % W``, so at every round each rank receives from
  one peer and sends to one peer, and every link is busy.
* ``ring``: blocks travel around the ring ``r -> r + 1``, one hop per round; each hop after the
  first forwards what arrived at the previous round, so it lists that chunk in ``after``.  Only
  neighbour links are used (what a ring topology or PCIe wants).
"""

from __future__ import annotations

import itertools
from typing import Sequence

from ..errors import ScheduleError
from .generators import (_Builder, _gather, _meta, _positive, _reduce_scatter, _validate,
                         everywhere, owned, scattered, shard_regions, sharded_schedule)
from .kv_gather import kv_all_gather
from .model import MAX_WORLD_SIZE, MODES, Region, Schedule, TensorSpec, _as_dtype
from .scaled_gather import scaled_all_gather

__all__ = ["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ring_pass",
           "ulysses_all_to_all", "shard_regions", "TEMPLATES", "PLANS"]

# --------------------------------------------------------------------------------------------
# templates

def all_gather(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
               order: str = "swizzle", mode: str = "pull", split: int = 1,
               tensor: str = "A") -> Schedule:
    """All-gather: rank ``r`` starts with block ``r`` of ``tensor`` along ``dim`` and every rank
    ends with the whole tensor.

    ``swizzle``: at round ``s`` rank ``r`` receives block ``(r + s + 1) % W`` directly from its
    owner.  ``ring``: at round ``s`` rank ``r`` receives block ``(r - s - 1) % W`` from rank
    ``r - 1``, which received it at round ``s - 1`` (listed in ``after``).  ``pull`` suits an
    AG + GEMM consumer (the consumer's rank fetches what it needs next); ``push`` is the usual
    choice for the SM and NVSHMEM backends when the producer knows when data is ready.
    """
    return sharded_schedule("all_gather", shape, dtype, world_size, dim, order, mode, split,
                            (tensor,), dict(order=order, mode=mode, split=split, tensor=tensor))


def reduce_scatter(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
                   order: str = "swizzle", mode: str = "push", split: int = 1,
                   tensor: str = "C") -> Schedule:
    """Reduce-scatter: every rank starts with its partial sum of the whole tensor (a partial
    initial placement) and rank ``r`` ends with the complete sum of block ``r`` along ``dim``.

    ``swizzle``: at round ``s`` rank ``r`` adds its partial of block ``(r + s + 1) % W`` into
    that block's owner (``reduce='sum'``; the owner receives from one peer per round).
    ``ring``: the partial of block ``x`` accumulates along ``x + 1 -> x + 2 -> ... -> x``; each
    hop after the first forwards the sum that arrived at the previous round (``after``).
    """
    return sharded_schedule("reduce_scatter", shape, dtype, world_size, dim, order, mode, split,
                            (tensor,), dict(order=order, mode=mode, split=split, tensor=tensor),
                            _reduce_scatter, scattered)


def all_reduce(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
               order: str = "swizzle", mode: str = "push", split: int = 1,
               tensor: str = "C") -> Schedule:
    """All-reduce as reduce-scatter then all-gather on the same tensor: every rank starts with
    its partial of the whole tensor and ends with the complete sum everywhere.

    The all-gather chunks come after every reduce-scatter step (their steps start at
    ``(W - 1) * split``); a chunk that reads a block from its owner lists the reduce-scatter
    chunks that complete that piece in ``after``.  The copies overwrite the partials the
    destination still held there, which its own reduce-scatter chunks have already read.
    """
    def chunks(b, t, pieces, W, order, mode, split):
        _reduce_scatter(b, t, pieces, W, order, mode, split)
        rs_chunks = list(b.chunks)

        def completes(owner: int, piece: Region) -> list[int]:
            return [c.id for c in rs_chunks if c.dst == owner and c.region.overlaps(piece)]

        _gather(b, t, pieces, W, order, mode, split, step0=(W - 1) * split,
                first_after=completes)

    def spec(t, shape, dtype, shards, W):
        return TensorSpec(t, shape, dtype, everywhere(shape, W, partial=True),
                          everywhere(shape, W))

    return sharded_schedule("all_reduce", shape, dtype, world_size, dim, order, mode, split,
                            (tensor,), dict(order=order, mode=mode, split=split, tensor=tensor),
                            chunks, spec)


def all_to_all(shape: Sequence[int], dtype: str, world_size: int, split_dim: int,
               concat_dim: int, order: str = "swizzle", mode: str = "pull", split: int = 1,
               tensor: str = "A") -> Schedule:
    """All-to-all: move the sharding of ``tensor`` from ``split_dim`` to ``concat_dim``.

    Initially rank ``r`` holds block ``r`` along ``split_dim`` (all of every other dim);
    finally rank ``r`` holds block ``r`` along ``concat_dim`` (all of every other dim, so all
    of ``split_dim``).  Rank ``q`` sends rank ``r`` the intersection of its block along
    ``split_dim`` and ``r``'s block along ``concat_dim``; the rank's own intersection stays
    where it is.  (Sequence parallel <-> head parallel in Ulysses attention, expert dispatch.)
    At round ``s`` rank ``r`` receives from ``(r + s + 1) % W`` (``swizzle``, the only order:
    every piece goes straight to its destination).  ``split`` cuts pieces along ``split_dim``.
    """
    shape, dtype, dims = _validate("all_to_all", shape, dtype, world_size,
                                   {"split_dim": split_dim, "concat_dim": concat_dim}, order,
                                   ("swizzle",), mode, split, tensor)
    sd, cd = dims["split_dim"], dims["concat_dim"]
    if sd == cd:
        raise ScheduleError(f"all_to_all: split_dim and concat_dim are both {sd}; an all-to-all "
                            f"moves the sharding from one dim to another: pick two different "
                            f"dims")
    W = world_size
    by_split = shard_regions(shape, sd, W)
    by_concat = shard_regions(shape, cd, W)
    b = _Builder()
    for s in range(W - 1):
        for r in range(W):
            q = (r + s + 1) % W
            if by_split[q] is None or by_concat[r] is None:
                continue
            inter = by_split[q].intersection(by_concat[r])
            if inter is None:
                continue
            for k, piece in enumerate(inter.split(sd, split)):
                b.add(tensor, piece, q, r, mode, s * split + k)
    spec = TensorSpec(tensor, shape, dtype, owned(by_split), owned(by_concat))
    return Schedule(W, {tensor: spec}, b.chunks,
                    _meta("all_to_all", shape=shape, dtype=dtype, world_size=W, split_dim=sd,
                          concat_dim=cd, order=order, mode=mode, split=split, tensor=tensor))


def ring_pass(shape: Sequence[int], dtype: str, world_size: int, dim: int = 0,
              mode: str = "push", split: int = 1, tensor: str = "KV") -> Schedule:
    """Ring pass for ring attention: rank ``r`` starts with KV block ``r`` along ``dim`` (the
    sequence) and every block travels once around the ring, one hop per round: at round ``s``
    rank ``r`` receives block ``(r - s - 1) % W`` from ``r - 1`` and can attend to it while the
    next one travels.  Every rank ends with every block.  The chunks are those of a ring
    all-gather; ``push`` is the default since the holder of a block knows when it is there.
    """
    return sharded_schedule("ring_pass", shape, dtype, world_size, dim, "ring", mode, split,
                            (tensor,), dict(mode=mode, split=split, tensor=tensor))


def ulysses_all_to_all(batch: int, q_heads: int, kv_heads: int, seq: int, head_dim: int,
                       dtype: str, world_size: int, mode: str = "pull") -> Schedule:
    """DeepSpeed-Ulysses around one attention kernel: Q, K, V go from sequence-sharded to
    head-sharded, the attention output ``O`` goes back.

    Tensors (global shapes, the attention kernel's ``[batch, heads, seq, head_dim]``):
    ``Q`` and ``O`` ``[B, Hq, S, D]``, ``K`` and ``V`` ``[B, Hkv, S, D]``.  Rank ``r`` starts
    with sequence block ``r`` of Q, K and V (all heads) and ends with head block ``r`` of them
    (the whole sequence): what its attention reads.  ``O`` is ``produced``: rank ``r``'s kernel
    computes head block ``r`` of it (the whole sequence) and ends with sequence block ``r``
    (all heads).  All four are ``view="rank"``: the same kernel runs on every rank over "its"
    heads, at coordinates relative to its part (the compiler offsets the operands).

    Every chunk carries **one head** (all batches) of one source's sequence block, so a tile
    waits only for the chunks of its own head (and its KV head), and every chunk is a 2-d box
    of the ``[B, H * S * D]`` view the comm programs copy.  Steps: the chunks of local KV head
    ``j`` -- K and V of head ``j`` and Q of its ``Hq / Hkv`` query heads -- arrive at steps
    ``j * (W - 1) + s`` (round ``s`` from rank ``(r + s + 1) % W``), so the first heads'
    tiles start while later heads are in flight; the output chunks come after every input
    step, in the same head order (a comm program never blocks on an output chunk, whose
    source's tiles wait for that source's inputs, before it has run all its input chunks).
    """
    problems = _positive(batch=batch, q_heads=q_heads, kv_heads=kv_heads, seq=seq,
                         head_dim=head_dim, world_size=world_size)
    if not problems and world_size > MAX_WORLD_SIZE:  # before building W * (W - 1) chunks
        problems.append(f"world_size {world_size} is more than {MAX_WORLD_SIZE} ranks")
    if not problems:
        W = world_size
        if q_heads % kv_heads:
            problems.append(f"q_heads ({q_heads}) must be a multiple of kv_heads ({kv_heads}) "
                            f"(grouped-query attention)")
        if kv_heads % W:
            problems.append(f"kv_heads ({kv_heads}) must be divisible by world_size ({W}): "
                            f"each rank attends with whole KV heads")
        if seq % W:
            problems.append(f"seq ({seq}) must be divisible by world_size ({W})")
    if mode not in MODES:
        problems.append(f"mode must be 'push' or 'pull', got {mode!r}")
    dtype = _as_dtype(dtype, problems)
    if problems:
        raise ScheduleError([f"ulysses_all_to_all: {p}" for p in problems])
    W = world_size
    group = q_heads // kv_heads
    shapes = {"Q": (batch, q_heads, seq, head_dim), "K": (batch, kv_heads, seq, head_dim),
              "V": (batch, kv_heads, seq, head_dim), "O": (batch, q_heads, seq, head_dim)}
    by_seq = {t: shard_regions(shp, 2, W) for t, shp in shapes.items()}
    by_head = {t: shard_regions(shp, 1, W) for t, shp in shapes.items()}

    def piece(t: str, head_rank: int, seq_rank: int, h: int) -> Region:
        # local head h of head_rank's block, sequence block of seq_rank
        return by_head[t][head_rank]._band(1, h, 1).intersection(by_seq[t][seq_rank])

    def heads_of(j: int) -> list[tuple[str, int]]:
        return [("K", j), ("V", j)] + [("Q", j * group + i) for i in range(group)]

    b = _Builder()
    kv_local = kv_heads // W
    rounds = list(itertools.product(range(kv_local), range(W - 1), range(W)))  # (j, s, r)
    for j, s, r in rounds:
        q = (r + s + 1) % W
        for t, h in heads_of(j):
            b.add(t, piece(t, r, q, h), q, r, mode, j * (W - 1) + s)
    base = kv_local * (W - 1)
    for j, s, r in rounds:
        q = (r + s + 1) % W   # r sends its output rows of q's sequence block
        for h in range(j * group, (j + 1) * group):
            b.add("O", piece("O", r, q, h), r, q, mode, base + j * (W - 1) + s)
    tensors = {}
    for t, shp in shapes.items():
        seqp, headp = owned(by_seq[t]), owned(by_head[t])
        initial, final = (headp, seqp) if t == "O" else (seqp, headp)
        tensors[t] = TensorSpec(t, shp, dtype, initial, final, produced=(t == "O"),
                                view="rank")
    return Schedule(W, tensors, b.chunks,
                    _meta("ulysses_all_to_all", batch=batch, q_heads=q_heads,
                          kv_heads=kv_heads, seq=seq, head_dim=head_dim, dtype=dtype,
                          world_size=W, mode=mode))


#: Template functions by the names the CLI and ``meta["template"]["name"]`` use.
TEMPLATES = {
    "all_gather": all_gather,
    "reduce_scatter": reduce_scatter,
    "all_reduce": all_reduce,
    "all_to_all": all_to_all,
    "ring_pass": ring_pass,
    "kv_all_gather": kv_all_gather,           # a K/V gather for ring attention (.kv_gather)
    "scaled_all_gather": scaled_all_gather,   # FP8: a tensor and its row-wise scales
}


#: Plans of several tensors around one kernel (not single-tensor collectives: they take the
#: kernel's problem sizes rather than ``(shape, dtype, world_size, dim/split...)``, so they are
#: kept apart from :data:`TEMPLATES`, whose uniform signature the CLI and the property tests
#: rely on).
PLANS = {
    "ulysses_all_to_all": ulysses_all_to_all,
}
