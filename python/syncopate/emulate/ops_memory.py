"""The interpreter's memory ops: pointer arithmetic, loads and stores (masks, other), atomics,
block pointers and TMA descriptors -- the accesses the race checker sees."""

from __future__ import annotations

import numpy as np

from ..errors import EmulationError
from .interpreter import POINT, _array_prop, _int_prop, _ops, _res, _shape, _uns, handler, loc_of
from .memory import (
    BlockPtr,
    Ptr,
    PtrTensor,
    TensorDesc,
    block_offsets,
    etype_of,
    to_etype,
    wrap_int,
)

# ---- pointers and memory


@handler("tt.addptr")
def _addptr(fc, op, tm):
    p, o = _ops(fc, op)
    r = _res(fc, op)
    where = loc_of(op)

    def f(env, pc):
        x, d = env[p], env[o]
        if isinstance(x, PtrTensor):
            env[r] = PtrTensor(x.buf, x.offs + np.asarray(d, dtype=np.int64))
        elif isinstance(d, np.ndarray):
            env[r] = PtrTensor(x.buf, x.off + d.astype(np.int64))
        else:
            off = x.off + int(d)
            if not 0 <= off <= x.buf.data.size:
                # a scalar pointer moved past its allocation, as the epilogue reduction's slot
                # base (an aligned parameter plus the distance to the slot buffer): on the GPU
                # it is just an address, so follow it to the buffer it lands in
                buf, boff = pc.machine.resolve_addr(x.buf.addr + off * x.buf.esize, where)
                if buf.esize != x.buf.esize:
                    raise EmulationError(f"{where}: a {x.buf.name} pointer moved into "
                                         f"{buf.name}, whose elements have another size")
                env[r] = Ptr(buf, boff)
            else:
                env[r] = Ptr(x.buf, off)
    return f, False


@handler("tt.ptr_to_int")
def _ptr_to_int(fc, op, tm):
    a, r = _ops(fc, op)[0], _res(fc, op)
    et = etype_of(op.results[0].type)

    def f(env, pc):
        x = env[a]
        if isinstance(x, PtrTensor):
            env[r] = (x.buf.addr + x.offs * x.buf.esize).astype(et.np)
        else:
            env[r] = wrap_int(x.buf.addr + x.off * x.buf.esize, et.bits)
    return f, False


@handler("tt.int_to_ptr")
def _int_to_ptr(fc, op, tm):
    a, r = _ops(fc, op)[0], _res(fc, op)
    where = loc_of(op)

    def f(env, pc):
        x = env[a]
        if isinstance(x, np.ndarray):
            flat = x.reshape(-1)
            buf, _ = pc.machine.resolve_addr(int(flat[0]), where)
            offs = (x.astype(np.int64) - buf.addr) // buf.esize
            env[r] = PtrTensor(buf, offs)
        else:
            buf, off = pc.machine.resolve_addr(int(x), where)
            env[r] = Ptr(buf, off)
    return f, False


def _may_point(fc):
    return fc.module_code.fine


def _load_values(buf, offs, mask, where):
    if mask is not None:
        safe = np.where(mask, offs, 0)
        buf.check_bounds(offs[mask] if isinstance(mask, np.ndarray) else offs, where)
    else:
        safe = offs
        buf.check_bounds(offs.reshape(-1), where)
    return buf.data[safe]


@handler("tt.load")
def _load(fc, op, tm):
    p = fc.slot(op.ptr)
    m = fc.slot(op.mask) if op.mask is not None else None
    o = fc.slot(op.other) if op.other is not None else None
    r = _res(fc, op)
    et = etype_of(op.results[0].type)
    where = loc_of(op)
    bcheck = _array_prop(op, "boundaryCheck")
    pad_nan = _int_prop(op, "padding", 1) == 2

    def do(env, pc):
        x = env[p]
        mask = env[m] if m is not None else None
        if isinstance(x, BlockPtr):
            offs, inb = block_offsets(x.base, x.shape, x.strides, x.offsets, x.block, set(bcheck))
            vals = _load_values(x.buf, offs, inb, where)
            vals = np.where(inb, vals, np.nan if pad_nan else 0).astype(x.buf.data.dtype)
            if x.buf.tracked:
                pc.machine.on_load(pc, x.buf, offs[inb], where)
            env[r] = vals
            return
        if isinstance(x, PtrTensor):
            if mask is not None and not isinstance(mask, np.ndarray):
                mask = np.full(x.offs.shape, bool(mask))
            vals = _load_values(x.buf, x.offs, mask, where)
            if mask is not None:
                other = env[o] if o is not None else 0
                vals = np.where(mask, vals, other).astype(x.buf.data.dtype, copy=False)
                if x.buf.tracked:
                    pc.machine.on_load(pc, x.buf, x.offs[mask], where)
            elif x.buf.tracked:
                pc.machine.on_load(pc, x.buf, x.offs.reshape(-1), where)
            env[r] = vals
            return
        # scalar
        if mask is not None and not mask:
            env[r] = env[o] if o is not None else to_etype(0, et)
            return
        x.buf.check_bounds(np.array([x.off]), where)
        if x.buf.tracked:
            pc.machine.on_load(pc, x.buf, np.array([x.off]), where)
        v = x.buf.data[x.off]
        env[r] = wrap_int(int(v), et.bits) if et.kind == "int" else v

    if _may_point(fc):
        def g(env, pc):
            x = env[p]
            if x.buf.tracked or x.buf.is_flags:
                yield POINT
            do(env, pc)
        return g, True
    return do, False


def _store_into(buf, offs, vals, where):
    buf.check_bounds(offs.reshape(-1), where)
    buf.data[offs] = vals


@handler("tt.store")
def _store(fc, op, tm):
    p, v = fc.slot(op.ptr), fc.slot(op.value)
    m = fc.slot(op.mask) if op.mask is not None else None
    where = loc_of(op)
    bcheck = _array_prop(op, "boundaryCheck")

    def do(env, pc):
        x, val = env[p], env[v]
        mask = env[m] if m is not None else None
        if isinstance(x, BlockPtr):
            offs, inb = block_offsets(x.base, x.shape, x.strides, x.offsets, x.block, set(bcheck))
            sel = offs[inb]
            _store_into(x.buf, sel, to_etype(np.asarray(val), x.buf.et)[inb], where)
            pc.machine.on_store(pc, x.buf, sel, where)
            return
        if isinstance(x, PtrTensor):
            val = to_etype(np.broadcast_to(np.asarray(val), x.offs.shape), x.buf.et)
            if mask is not None:
                if not isinstance(mask, np.ndarray):
                    mask = np.full(x.offs.shape, bool(mask))
                sel = x.offs[mask]
                _store_into(x.buf, sel, val[mask], where)
            else:
                sel = x.offs.reshape(-1)
                _store_into(x.buf, sel, val.reshape(-1), where)
            pc.machine.on_store(pc, x.buf, sel, where)
            return
        if mask is not None and not mask:
            return
        sel = np.array([x.off])
        _store_into(x.buf, sel, to_etype(val, x.buf.et), where)
        pc.machine.on_store(pc, x.buf, sel, where)

    if _may_point(fc):
        def g(env, pc):
            x = env[p]
            if x.buf.tracked or x.buf.is_flags:
                yield POINT
            do(env, pc)
        return g, True
    return do, False


_RMW = {1: "and", 2: "or", 3: "xor", 4: "add", 5: "fadd", 6: "max", 7: "min", 8: "umax",
        9: "umin", 10: "exch"}


@handler("tt.atomic_rmw")
def _atomic_rmw(fc, op, tm):
    p, v = fc.slot(op.ptr), fc.slot(op.val)
    m = fc.slot(op.mask) if op.mask is not None else None
    r = _res(fc, op)
    kind = _RMW[_int_prop(op, "atomic_rmw_op")]
    where = loc_of(op)
    et = etype_of(op.results[0].type)

    def apply(old, val, bet):
        if kind in ("add", "fadd"):
            return old + val
        if kind == "exch":
            return val
        if kind == "and":
            return old & val
        if kind == "or":
            return old | val
        if kind == "xor":
            return old ^ val
        if kind in ("max", "min"):
            return max(old, val) if kind == "max" else min(old, val)
        uo, uv = _uns(old, bet), _uns(val, bet)
        return old if (uo >= uv) == (kind == "umax") else val

    def g(env, pc):
        yield POINT
        x, val = env[p], env[v]
        mask = env[m] if m is not None else None
        if isinstance(x, PtrTensor):
            offs = x.offs.reshape(-1)
            vals = np.broadcast_to(np.asarray(val), x.offs.shape).reshape(-1)
            msk = np.ones(offs.shape, bool) if mask is None else \
                np.broadcast_to(np.asarray(mask), x.offs.shape).reshape(-1)
            x.buf.check_bounds(offs[msk], where)
            olds = np.zeros(offs.shape, dtype=x.buf.data.dtype)
            for i in np.nonzero(msk)[0]:  # sequential: duplicates see each other
                o = int(offs[i])
                old = x.buf.data[o]
                olds[i] = old
                nv = apply(old.item(), vals[i].item(), x.buf.et)
                x.buf.data[o] = to_etype(nv, x.buf.et)
            pc.machine.on_store(pc, x.buf, offs[msk], where)
            env[r] = olds.reshape(x.offs.shape)
            return
        if mask is not None and not mask:
            env[r] = to_etype(0, et)
            return
        x.buf.check_bounds(np.array([x.off]), where)
        old = x.buf.data[x.off]
        nv = apply(old.item(), val.item() if hasattr(val, "item") else val, x.buf.et)
        x.buf.data[x.off] = to_etype(nv, x.buf.et)
        pc.machine.on_store(pc, x.buf, np.array([x.off]), where)
        env[r] = wrap_int(int(old), et.bits) if et.kind == "int" else old
    return g, True


@handler("tt.atomic_cas")
def _atomic_cas(fc, op, tm):
    p, c, v = fc.slot(op.ptr), fc.slot(op.cmp), fc.slot(op.val)
    r = _res(fc, op)
    where = loc_of(op)
    et = etype_of(op.results[0].type)

    def g(env, pc):
        yield POINT
        x, cmpv, val = env[p], env[c], env[v]
        if isinstance(x, PtrTensor):
            offs = x.offs.reshape(-1)
            cm = np.broadcast_to(np.asarray(cmpv), x.offs.shape).reshape(-1)
            vs = np.broadcast_to(np.asarray(val), x.offs.shape).reshape(-1)
            x.buf.check_bounds(offs, where)
            olds = np.zeros(offs.shape, dtype=x.buf.data.dtype)
            for i, o in enumerate(offs):
                olds[i] = x.buf.data[o]
                if olds[i] == cm[i]:
                    x.buf.data[o] = vs[i]
            pc.machine.on_store(pc, x.buf, offs, where)
            env[r] = olds.reshape(x.offs.shape)
            return
        x.buf.check_bounds(np.array([x.off]), where)
        old = x.buf.data[x.off]
        if old == cmpv:
            x.buf.data[x.off] = val
            pc.machine.on_store(pc, x.buf, np.array([x.off]), where)
        env[r] = wrap_int(int(old), et.bits) if et.kind == "int" else old
    return g, True


@handler("tt.make_tensor_ptr")
def _make_tensor_ptr(fc, op, tm):
    b = fc.slot(op.base)
    shp = [fc.slot(v) for v in op.shape]
    strd = [fc.slot(v) for v in op.strides]
    offs = [fc.slot(v) for v in op.offsets]
    r = _res(fc, op)
    block = _shape(op.results[0].type.pointee_type)

    def f(env, pc):
        base = env[b]
        env[r] = BlockPtr(base.buf, base.off, tuple(int(env[s]) for s in shp),
                          tuple(int(env[s]) for s in strd), tuple(int(env[s]) for s in offs), block)
    return f, False


@handler("tt.advance")
def _advance(fc, op, tm):
    p = fc.slot(op.ptr)
    offs = [fc.slot(v) for v in op.offsets]
    r = _res(fc, op)

    def f(env, pc):
        x = env[p]
        env[r] = BlockPtr(x.buf, x.base, x.shape, x.strides,
                          tuple(a + int(env[s]) for a, s in zip(x.offsets, offs)), x.block)
    return f, False


@handler("tt.make_tensor_descriptor")
def _make_desc(fc, op, tm):
    b = fc.slot(op.base)
    shp = [fc.slot(v) for v in op.shape]
    strd = [fc.slot(v) for v in op.strides]
    r = _res(fc, op)
    block = _shape(op.results[0].type.block_type)
    pad_nan = _int_prop(op, "padding", 1) == 2

    def f(env, pc):
        base = env[b]
        env[r] = TensorDesc(base.buf, base.off, tuple(int(env[s]) for s in shp),
                            tuple(int(env[s]) for s in strd), block, pad_nan)
    return f, False


@handler("tt.descriptor_load")
def _desc_load(fc, op, tm):
    d = fc.slot(op.desc)
    idx = [fc.slot(v) for v in op.indices]
    r = _res(fc, op)
    where = loc_of(op)
    rshape = _shape(op.results[0].type)

    def do(env, pc):
        x = env[d]
        offs, inb = block_offsets(x.base, x.shape, x.strides, [int(env[s]) for s in idx],
                                  x.block, None)
        vals = _load_values(x.buf, offs, inb, where)
        vals = np.where(inb, vals, np.nan if x.pad_nan else 0).astype(x.buf.data.dtype)
        if x.buf.tracked:
            pc.machine.on_load(pc, x.buf, offs[inb], where)
        env[r] = vals.reshape(rshape)

    if _may_point(fc):
        def g(env, pc):
            if env[d].buf.tracked:
                yield POINT
            do(env, pc)
        return g, True
    return do, False


@handler("tt.descriptor_store")
def _desc_store(fc, op, tm):
    d, v = fc.slot(op.desc), fc.slot(op.src)
    idx = [fc.slot(x) for x in op.indices]
    where = loc_of(op)

    def do(env, pc):
        x = env[d]
        offs, inb = block_offsets(x.base, x.shape, x.strides, [int(env[s]) for s in idx],
                                  x.block, None)
        val = to_etype(np.asarray(env[v]).reshape(x.block), x.buf.et)
        sel = offs[inb]
        _store_into(x.buf, sel, val[inb], where)
        pc.machine.on_store(pc, x.buf, sel, where)

    if _may_point(fc):
        def g(env, pc):
            if env[d].buf.tracked:
                yield POINT
            do(env, pc)
        return g, True
    return do, False
