"""The interpreter's dot and reductions, structured control flow (scf.for/if/while), calls, and
the syncopate ops (waits, signals, remap, peer pointers, the comm region's steps)."""

from __future__ import annotations

import numpy as np

from ..errors import EmulationError
from .interpreter import (
    _HANDLERS,
    POINT,
    WaitFlag,
    _bind,
    _int_prop,
    _is_tensor,
    _prop,
    _res,
    _result,
    handler,
    loc_of,
    plain,
)
from .memory import Ptr, PtrTensor, etype_of, round_tf32, to_etype, wrap_int

# ---- dot, reduce


@handler("tt.dot")
def _dot(fc, op, tm):
    a, b, c = fc.slot(op.a), fc.slot(op.b), fc.slot(op.c)
    r, ed, _ = _result(fc, op)
    tf32 = _int_prop(op, "inputPrecision", 2) in (0, 1) and etype_of(op.a.type).name == "f32"

    def f(env, pc):
        x, y, acc = env[a], env[b], env[c]
        if ed.kind == "int":
            env[r] = (np.matmul(x.astype(np.int64), y.astype(np.int64)) + acc).astype(ed.np)
            return
        # contiguous copies: numpy's float32 matmul sums in an order that depends on the
        # operands' memory layout, and a loaded tile's layout follows its offsets' (a fused
        # kernel's differ from the unfused one's), so the same tiles rounded differently
        x32 = np.ascontiguousarray(x, dtype=np.float32)
        y32 = np.ascontiguousarray(y, dtype=np.float32)
        if tf32:
            x32, y32 = round_tf32(x32), round_tf32(y32)
        out = np.matmul(x32, y32) + np.asarray(acc, dtype=np.float32)
        env[r] = to_etype(out, ed)
    return f, False


@handler("tt.reduce", "tt.scan")
def _fold(fc, op, tm):
    """``tt.reduce`` / ``tt.scan``: the combine region compiled in tensor mode, folded
    sequentially along the axis (vectorised over every other dim)."""
    srcs = [fc.slot(v) for v in op.operands]
    rs = [fc.slot(v) for v in op.results]
    axis = _int_prop(op, "axis", 0)
    reverse = bool(_int_prop(op, "reverse", 0))
    block = op.regions[0].blocks[0]
    n = len(srcs)
    arg_slots = [fc.slot(a) for a in block.args]
    run, yields = fc.block(block, tensor_mode=True)
    if yields:
        raise EmulationError("a reduce region that synchronises", loc_of(op))
    scan = op.name == "tt.scan"
    ets = [etype_of(v.type) for v in op.results]

    def f(env, pc):
        xs = [np.asarray(env[s]) for s in srcs]
        length = xs[0].shape[axis]
        order = range(length - 1, -1, -1) if reverse else range(length)
        acc = None
        outs = []
        for i in order:
            cur = [np.take(x, i, axis=axis) for x in xs]
            if acc is None:
                acc = cur
            else:
                _bind(env, arg_slots, acc + cur)
                acc = [np.asarray(v) for v in run(env, pc)]
            if scan:
                outs.append(acc)
        if scan:
            if reverse:
                outs = outs[::-1]
            for k, s in enumerate(rs):
                env[s] = np.stack([o[k] for o in outs], axis=axis).astype(ets[k].np)
        else:
            for k, s in enumerate(rs):
                v = acc[k]
                if v.ndim == 0 and not _is_tensor(op.results[k].type):
                    v = wrap_int(int(v), ets[k].bits) if ets[k].kind == "int" else ets[k].np.type(v)
                else:
                    v = np.asarray(v).astype(ets[k].np)
                env[s] = v
    return f, False


# ---- control flow


@handler("scf.for")
def _for(fc, op, tm):
    lb, ub, st = fc.slot(op.lb), fc.slot(op.ub), fc.slot(op.step)
    inits = [fc.slot(v) for v in op.iter_args]
    res = [fc.slot(v) for v in op.results]
    block = op.body.blocks[0]
    iv = fc.slot(block.args[0])
    args = [fc.slot(a) for a in block.args[1:]]
    body, yields = fc.block(block, tm)

    def g(env, pc):
        i, end, step = env[lb], env[ub], env[st]
        vals = [env[s] for s in inits]
        while i < end:
            env[iv] = i
            _bind(env, args, vals)
            vals = (yield from body(env, pc)) if yields else body(env, pc)
            i += step
        _bind(env, res, vals)
    return (g, True) if yields else (plain(g, loc_of(op)), False)


@handler("scf.if")
def _if(fc, op, tm):
    c = fc.slot(op.cond)
    res = [fc.slot(v) for v in op.results]
    tb, ty = fc.block(op.true_region.blocks[0], tm)
    fb, fy = fc.block(op.false_region.blocks[0], tm) if op.false_region.blocks else \
        ((lambda env, pc: []), False)

    def g(env, pc):
        branch, y = (tb, ty) if env[c] else (fb, fy)
        vals = (yield from branch(env, pc)) if y else branch(env, pc)
        _bind(env, res, vals)
    return (g, True) if ty or fy else (plain(g, loc_of(op)), False)


@handler("scf.while")
def _while(fc, op, tm):
    inits = [fc.slot(v) for v in op.operands]
    res = [fc.slot(v) for v in op.results]
    before = op.regions[0].blocks[0]
    after = op.regions[1].blocks[0]
    bargs = [fc.slot(a) for a in before.args]
    aargs = [fc.slot(a) for a in after.args]
    cond_op = before.last_op
    brun, by = fc.block(before, tm)
    arun, ay = fc.block(after, tm)
    # the terminator scf.condition: first operand the condition, the rest forwarded
    if cond_op is None or cond_op.name != "scf.condition":
        raise EmulationError("scf.while without scf.condition", loc_of(op))

    def g(env, pc):
        vals = [env[s] for s in inits]
        while True:
            _bind(env, bargs, vals)
            out = (yield from brun(env, pc)) if by else brun(env, pc)
            if not out[0]:
                _bind(env, res, out[1:])
                return
            _bind(env, aargs, out[1:])
            vals = (yield from arun(env, pc)) if ay else arun(env, pc)
    return (g, True) if by or ay else (plain(g, loc_of(op)), False)


@handler("tt.call")
def _call(fc, op, tm):
    callee = op.callee.root_reference.data if hasattr(op.callee, "root_reference") else str(op.callee)
    args = [fc.slot(v) for v in op.operands]
    res = [fc.slot(v) for v in op.results]
    mc = fc.module_code

    def g(env, pc):
        vals = yield from mc.get(callee).call([env[a] for a in args], pc)
        _bind(env, res, vals)
    return g, True


@handler("gpu.barrier", "llvm.intr.assume", "tt.print", "syncopate.release_fence")
def _noop(fc, op, tm):
    """A program instance is one thread of control in the emulator, so a CTA barrier orders
    nothing further; ``tt.print`` output is not reproduced."""
    return None, False


@handler("tt.assert")
def _assert(fc, op, tm):
    c = fc.slot(op.operands[0])
    msg = str(_prop(op, "message", ""))
    where = loc_of(op)

    def f(env, pc):
        if not np.all(env[c]):
            raise EmulationError(f"device assertion failed in {pc.name}: {msg}", where)
    return f, False


# ---- syncopate ops (after resolve-chunks)


@handler("syncopate.wait")
def _sy_wait(fc, op, tm):
    fl, ix, tg = fc.slot(op.flags), fc.slot(op.index), fc.slot(op.target)
    r = _res(fc, op)
    kind = op.kind.data
    chunk = int(op.chunk.value.data) if op.chunk is not None else None
    where = loc_of(op)

    def g(env, pc):
        p = env[fl]
        index = p.off + env[ix]
        # the table lowering's waits read their chunk id from the table and name none: a
        # chunk flag's index is its chunk id (FlagLayout.chunk), so reports still name it
        c = int(index) if chunk is None and kind == "chunk" else chunk
        w = WaitFlag(p.buf, index, env[tg], kind, c, where, pc)
        if not w.ready():
            yield w
        pc.machine.on_wait_done(pc, w)
        env[r] = 0
    return g, True


@handler("syncopate.signal")
def _sy_signal(fc, op, tm):
    fl, ix, vl = fc.slot(op.flags), fc.slot(op.index), fc.slot(op.value)
    sop, kind = op.op.data, op.kind.data
    where = loc_of(op)

    def g(env, pc):
        yield POINT
        p = env[fl]
        pc.machine.on_signal(pc, p.buf, p.off + env[ix], int(env[vl]), sop, kind, where)
    return g, True


@handler("syncopate.remap")
def _sy_remap(fc, op, tm):
    c, rk = fc.slot(op.coord), fc.slot(op.rank)
    r = _res(fc, op)
    tiles = int(op.tiles.value.data)
    table = [int(x) for x in op.table.get_values()]

    def f(env, pc):
        coord, rank = env[c], env[rk]
        idx = rank * tiles + coord
        env[r] = table[idx] if 0 <= coord < tiles and 0 <= idx < len(table) else coord
    return f, False


@handler("syncopate.peer_ptr")
def _sy_peer(fc, op, tm):
    p, rk = fc.slot(op.ptr), fc.slot(op.rank)
    r = _res(fc, op)
    where = loc_of(op)

    def f(env, pc):
        x = env[p]
        buf = pc.machine.peer(x.buf, env[rk], where)
        env[r] = PtrTensor(buf, x.offs) if isinstance(x, PtrTensor) else Ptr(buf, x.off)
    return f, False


@handler("syncopate.comm")
def _sy_comm(fc, op, tm):
    return fc.block(op.body.blocks[0], tm)


def _comm_step(kind):
    """``syncopate.enter`` / ``transfer`` / ``drain``, and ``transfer_chunk``, the table form
    of a transfer: its chunk id is a value read from the chunk table, and the machine takes
    the chunk's box, ends and kind from the table's record (so a table that disagrees with
    the schedule shows up as a wrong result or a race)."""
    def make(fc, op, tm):
        slots = {n: fc.slot(getattr(op, n)) for n in ("pid", "count", "epoch", "rank", "flags")}
        if kind == "transfer_chunk":
            slots.update(table=fc.slot(op.table), chunk=fc.slot(op.chunk))
        elif kind == "transfer":
            slots["base"] = fc.slot(op.base)
        chunk = int(op.chunk.value.data) if kind == "transfer" else None
        step = "transfer" if kind == "transfer_chunk" else kind
        where = loc_of(op)

        def g(env, pc):
            info = {"chunk": chunk}
            info.update((n, env[s]) for n, s in slots.items())
            if kind == "transfer_chunk":
                info["chunk"] = int(info["chunk"])
            yield from pc.machine.comm_step(pc, step, info, where)
        return g, True
    return make


for _k in ("enter", "transfer", "drain", "transfer_chunk"):
    _HANDLERS[f"syncopate.{_k}"] = _comm_step(_k)


@handler("syncopate.wait_region", "syncopate.signal_region")
def _sy_region(fc, op, tm):
    raise EmulationError(f"{op.name} is region-level: run the pipeline through resolve-chunks "
                         f"before emulating", loc_of(op))
