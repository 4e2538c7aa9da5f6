"""IR mutations of a correct fused module (after ``resolve-chunks``), each a bug the race
checker must catch: the mutation tests apply one and assert the emulation reports it, so the
checker cannot silently stop catching a class of bug.  Every function returns a mutated
*clone* and leaves its input alone.
"""

from __future__ import annotations

from xdsl.dialects import arith, scf
from xdsl.dialects.builtin import DenseArrayBase, IntegerAttr, IntegerType, i32

from syncopate_mlir.dialects.syncopate import CommOp, DrainOp, RemapOp, SignalOp, WaitOp
from syncopate_mlir.dialects.tt import DescriptorStoreOp, StoreOp

from ..errors import EmulationError


def _ops(module, cls, none: str | None = None):
    """The ops of ``cls`` in ``module``; none found is an error saying ``none``, if given."""
    found = [o for o in module.walk() if isinstance(o, cls)]
    if none and not found:
        raise EmulationError(none)
    return found


def _in_comm(op) -> bool:
    cur = op.parent_op()
    while cur is not None and not isinstance(cur, CommOp):
        cur = cur.parent_op()
    return cur is not None


def _erase_wait(w) -> None:
    """Erase ``syncopate.wait`` ``w``; its token becomes a constant zero."""
    zero = arith.ConstantOp(IntegerAttr(0, i32))
    w.parent_block().insert_op_before(zero, w)
    w.token.replace_all_uses_with(zero.result)
    w.detach()
    w.erase()


def comm_on_every_row(module):
    """Undo partition-sms's leader guard: every program ``(p, y, z)`` with ``p <
    comm_programs`` runs the comm plan, as before issue 8 -- on a 2-D grid the chunks are then
    signalled once per row of axis 1, and from launch 2 on waits pass before data arrives."""
    m = module.clone()
    for c in _ops(m, CommOp, "comm_on_every_row: the module has no comm region (sm/nvshmem only)"):
        guard = c.parent_op()
        if not isinstance(guard, scf.IfOp):
            raise EmulationError("comm_on_every_row: the comm region is not under the leader "
                                 "guard partition-sms emits")
        true = arith.ConstantOp(IntegerAttr(1, IntegerType(1)))
        guard.parent_block().insert_op_before(true, guard)
        guard.operands[0] = true.result
    return m


def drop_push_waits(module):
    """Erase the comm programs' waits for the chunks pushed to their rank (partition-sms's
    end-of-launch wait): a launch can then end before its data has arrived."""
    m = module.clone()
    waits = [w for w in _ops(m, WaitOp) if _in_comm(w)]
    if not waits:
        raise EmulationError("drop_push_waits: the module has no comm-program wait (no chunk is "
                             "pushed)")
    for w in waits:
        _erase_wait(w)
    return m


def drop_wait(module, index: int = 0, chunk: int | None = None):
    """Erase one ``syncopate.wait`` of a compute program (the ``index``-th, or the first
    waiting for ``chunk``); its token becomes a constant zero.  The comm programs' own waits
    (partition-sms's wait for pushed chunks) are not candidates: dropping one of those only
    lets a launch end early, which is another mutation."""
    m = module.clone()
    waits = [w for w in _ops(m, WaitOp) if not _in_comm(w)]
    if chunk is not None:
        waits = [w for w in waits if w.chunk is not None and w.chunk.value.data == chunk]
    if len(waits) <= index:
        raise EmulationError(f"drop_wait: the module has no wait #{index}"
                             + (f" for chunk {chunk}" if chunk is not None else ""))
    _erase_wait(waits[index])
    return m


def early_signal(module, index: int = 0):
    """Move the stores before the ``index``-th block of ``PRODUCED`` signals to after them:
    the tile releases its chunk before it has written it."""
    m = module.clone()
    blocks = list(dict.fromkeys(s.parent_block() for s in _ops(m, SignalOp)
                                if s.kind.data == "produced"))  # in order, each once
    if len(blocks) <= index:
        raise EmulationError("early_signal: the module has no produced signal")
    block = blocks[index]
    ops = list(block.ops)
    last_sig = max(i for i, o in enumerate(ops) if isinstance(o, SignalOp))
    first_sig = min(i for i, o in enumerate(ops) if isinstance(o, SignalOp))
    stores = [o for o in ops[:first_sig] if isinstance(o, (StoreOp, DescriptorStoreOp))]
    if not stores:
        raise EmulationError("early_signal: no store precedes the signals in their block")
    anchor = ops[last_sig]
    for st in reversed(stores):
        st.detach()
        block.insert_op_after(st, anchor)
    return m


def remap_table(module, rank: int = 0, duplicate: bool = True):
    """Change rank ``rank``'s row of the first ``syncopate.remap`` table: with ``duplicate``
    two coordinates map to the same tile (one tile computed twice, one never), otherwise the
    row is rotated (a different, still bijective order)."""
    m = module.clone()
    r = _ops(m, RemapOp, "remap_table: the module has no syncopate.remap")[0]
    tiles = r.tiles.value.data
    table = [int(x) for x in r.table.get_values()]
    row = table[rank * tiles:(rank + 1) * tiles]
    if tiles < 2:
        raise EmulationError("remap_table: a one-tile table cannot be permuted")
    row = [row[0]] + row[:-1] if duplicate else row[1:] + row[:1]
    table[rank * tiles:(rank + 1) * tiles] = row
    r.properties["table"] = DenseArrayBase.from_list(i32, table)
    return m


def shift_wait_region(module, chunk: int, delta: int):
    """Shift the interval test that guards the wait for ``chunk`` by ``delta`` elements along
    its chunked dim (a chunk region off by one tile in ``resolve-chunks``'s tests): tiles of
    the real band no longer wait for it."""
    m = module.clone()
    waits = [w for w in _ops(m, WaitOp)
             if w.chunk is not None and w.chunk.value.data == chunk]
    if not waits:
        raise EmulationError(f"shift_wait_region: no wait for chunk {chunk}")
    shifted = 0
    for w in waits:
        guard = w.parent_op()
        if not isinstance(guard, scf.IfOp):
            continue
        todo, seen = [guard.operands[0]], set()
        while todo:
            v = todo.pop()
            op = getattr(v, "op", None)
            if op is None or id(op) in seen:
                continue
            seen.add(id(op))
            if isinstance(op, arith.AndIOp):
                todo.extend(op.operands)
            elif isinstance(op, arith.CmpiOp):
                for i, x in enumerate(op.operands):
                    d = getattr(x, "op", None)
                    if isinstance(d, arith.ConstantOp):
                        new = arith.ConstantOp(IntegerAttr(d.value.value.data + delta, i32))
                        op.parent_block().insert_op_before(new, op)
                        op.operands[i] = new.result
                        shifted += 1
    if not shifted:
        raise EmulationError(f"shift_wait_region: found no interval test for chunk {chunk}")
    return m


def drop_drain(module):
    """Erase ``syncopate.drain``: a pull source may finish its launch (and be restaged)
    before its readers read."""
    m = module.clone()
    for d in _ops(m, DrainOp, "drop_drain: the module has no syncopate.drain (no pull chunks)"):
        d.detach()
        d.erase()
    return m
