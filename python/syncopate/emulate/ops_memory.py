"""The interpreter's memory ops: pointer arithmetic, loads and stores (masks, other), atomics,
block pointers and TMA descriptors -- the accesses the race checker sees.

Every access is typed by its op (the loaded, stored or atomic value's element type): a pointer
into a buffer of another element type of the same size accesses a view of it (``memory.py``),
so what a pointer bitcast, an ``int_to_ptr`` or a peer pointer reaches is read and written as
bit patterns, never converted by value.  The race checker always sees the viewed buffer."""

from __future__ import annotations

import functools

import numpy as np

from ..errors import EmulationError
from .interpreter import (
    POINT,
    _array_prop,
    _int_prop,
    _is_tensor,
    _ops,
    _res,
    _result,
    _shape,
    _uns,
    handler,
    loc_of,
)
from .memory import (
    BlockPtr,
    Ptr,
    PtrTensor,
    TensorDesc,
    bits_of,
    block_offsets,
    etype_of,
    from_bits,
    round_bf16,
    to_etype,
    wrap_int,
)


def _typed(buf, et, where):
    """``buf`` as an access of element type ``et`` sees it: itself, or its view as ``et``."""
    if buf.et.name == et.name or et.kind not in ("int", "float") or et.bits == 1:
        return buf
    return buf.view(et, where)


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
                env[r] = Ptr(_typed(buf, x.buf.et, where), boff)
            else:
                env[r] = Ptr(x.buf, off)
    return f, False


@handler("tt.ptr_to_int")
def _ptr_to_int(fc, op, tm):
    a = _ops(fc, op)[0]
    r, et, _ = _result(fc, op)

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
    t = op.results[0].type
    pet = etype_of(t.element_type.pointee_type if _is_tensor(t) else t.pointee_type)

    def f(env, pc):
        x = env[a]
        if isinstance(x, np.ndarray):
            buf, _ = pc.machine.resolve_addr(int(x.reshape(-1)[0]), where)
            offs = (x.astype(np.int64) - buf.addr) // buf.esize
            env[r] = PtrTensor(_typed(buf, pet, where), offs)
        else:
            buf, off = pc.machine.resolve_addr(int(x), where)
            env[r] = Ptr(_typed(buf, pet, where), off)
    return f, False


def _fine(fc, do, points):
    """The handler ``do``, and whether it is a generator: in a ``fine`` emulation every access
    to a tracked buffer is a scheduling point, so ``do`` runs after a yield where
    ``points(env)`` says the access is one."""
    if not fc.module_code.fine:
        return do, False

    def g(env, pc):
        if points(env):
            yield POINT
        do(env, pc)
    return g, True


def _load_lanes(pc, buf, offs, mask, other, where):
    """The values at ``offs`` (an array) where ``mask`` holds (None: everywhere), ``other``
    elsewhere: bounds checked and the checker told of the lanes read, masked-off lanes never
    touched.  A pointer tensor's masked load, and a block pointer's or a tensor descriptor's
    (out-of-bounds elements read as zero, or NaN with ``padding_option="nan"``)."""
    if mask is None:
        buf.check_bounds(offs.reshape(-1), where)
        if buf.tracked:
            pc.machine.on_load(pc, buf.base, offs.reshape(-1), where)
        return buf.read(offs)
    buf.check_bounds(offs[mask], where)
    vals = np.where(mask, buf.read(np.where(mask, offs, 0)), other).astype(buf.et.np, copy=False)
    if buf.tracked:
        pc.machine.on_load(pc, buf.base, offs[mask], where)
    return vals


@handler("tt.load")
def _load(fc, op, tm):
    p = fc.slot(op.ptr)
    m = fc.slot(op.mask) if op.mask is not None else None
    o = fc.slot(op.other) if op.other is not None else None
    r, et, _ = _result(fc, op)
    where = loc_of(op)
    bcheck = _array_prop(op, "boundaryCheck")
    pad_nan = _int_prop(op, "padding", 1) == 2

    def do(env, pc):
        x = env[p]
        mask = env[m] if m is not None else None
        buf = _typed(x.buf, et, where)
        if isinstance(x, BlockPtr):
            offs, inb = block_offsets(x.base, x.shape, x.strides, x.offsets, x.block, set(bcheck))
            env[r] = _load_lanes(pc, buf, offs, inb, np.nan if pad_nan else 0, where)
            return
        if isinstance(x, PtrTensor):
            if mask is not None and not isinstance(mask, np.ndarray):
                mask = np.full(x.offs.shape, bool(mask))
            env[r] = _load_lanes(pc, buf, x.offs, mask, env[o] if o is not None else 0, where)
            return
        if mask is not None and not mask:  # a scalar pointer from here on
            env[r] = env[o] if o is not None else to_etype(0, et)
            return
        v = _load_lanes(pc, buf, np.array([x.off]), None, 0, where)[0]
        env[r] = wrap_int(int(v), et.bits) if et.kind == "int" else \
            buf.et.np.type(v) if et.kind == "float" else v

    return _fine(fc, do, lambda env: env[p].buf.tracked or env[p].buf.is_flags)


def _store_into(pc, buf, offs, vals, where):
    """A plain store of ``vals`` at ``offs``: bounds, memory, the checker, and the end of
    those elements' float-atomic-add sequences (``memory.FaddLog``)."""
    buf.check_bounds(offs.reshape(-1), where)
    buf.write(offs, vals)
    buf.restart_fadd(pc.epoch, offs)
    pc.machine.on_store(pc, buf.base, offs, where)


@handler("tt.store")
def _store(fc, op, tm):
    p, v = fc.slot(op.ptr), fc.slot(op.value)
    m = fc.slot(op.mask) if op.mask is not None else None
    where = loc_of(op)
    bcheck = _array_prop(op, "boundaryCheck")
    et = etype_of(op.value.type)

    def do(env, pc):
        x, val = env[p], env[v]
        mask = env[m] if m is not None else None
        buf = _typed(x.buf, et, where)
        if isinstance(x, BlockPtr):
            offs, inb = block_offsets(x.base, x.shape, x.strides, x.offsets, x.block, set(bcheck))
            _store_into(pc, buf, offs[inb], to_etype(np.asarray(val), buf.et)[inb], where)
            return
        if isinstance(x, PtrTensor):
            val = to_etype(np.broadcast_to(np.asarray(val), x.offs.shape), buf.et)
            if not isinstance(mask, np.ndarray):  # None: every lane
                mask = np.full(x.offs.shape, mask is None or bool(mask))
            _store_into(pc, buf, x.offs[mask], val[mask], where)
            return
        if mask is not None and not mask:
            return
        _store_into(pc, buf, np.array([x.off]), to_etype(val, buf.et), where)

    return _fine(fc, do, lambda env: env[p].buf.tracked or env[p].buf.is_flags)


# ---- atomics
#
# What Triton's NVIDIA lowering emits (one PTX ``atom`` per lane, predicated by the mask) and
# the emulator reproduces: the lanes of one op apply in lane order (the GPU gives no order;
# only order-independent results are compared across orders, reference.py), a masked-off lane
# returns 0 (the lowering zeroes the result register before the predicated ``atom``), integer
# ``add`` wraps, ``umax``/``umin`` compare unsigned, ``and``/``or``/``xor``/``exch`` and
# ``atomic_cas`` act on bit patterns (a float ``cas`` compares bits: -0.0 is not 0.0, a NaN
# equals the same NaN), ``fadd`` rounds once per add to nearest even -- f32 on global memory
# flushing subnormal inputs and results to sign-preserving zero (PTX ``atom.add.f32``), f16 and
# bf16 not (``.noftz``), f64 IEEE.  Float ``max``/``min`` never reach an atomic: Triton lowers
# ``tl.atomic_max``/``tl.atomic_min`` of floats to integer max/min on a bitcast pointer.

_RMW = {1: "and", 2: "or", 3: "xor", 4: "add", 5: "fadd", 6: "max", 7: "min", 8: "umax",
        9: "umin", 10: "exch"}
_F32_TINY = np.float32(np.finfo(np.float32).tiny)


def _ftz32(x):
    """Subnormal float32 values flushed to zero of the same sign."""
    return np.where(np.abs(x) < _F32_TINY, np.copysign(np.float32(0), x), x).astype(np.float32)


def _fadd_fn(et):
    if et.name == "f32":
        return lambda old, val: _ftz32(_ftz32(old) + _ftz32(val))
    if et.name == "f64":
        return lambda old, val: old + val
    if et.name == "f16":  # the f32 sum is exact enough: one rounding to f16 (24 >= 2*11 + 2)
        return lambda old, val: (old.astype(np.float32) + val.astype(np.float32)).astype(np.float16)
    if et.name == "bf16":  # the same with bf16's 8 bits
        return lambda old, val: round_bf16(old + val)
    return None


def _rmw_fn(kind, et, where):
    """``new = f(old, val)`` on arrays in ``et``'s storage, for the kinds Triton emits with
    that element type; anything else is refused by name."""
    fn = None
    if kind == "fadd" and et.kind == "float":
        fn = _fadd_fn(et)
    elif kind in ("and", "or", "xor", "exch") and et.kind in ("int", "float") and \
            et.bits in (32, 64):  # PTX has them on .b32/.b64 only
        op = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
              "exch": lambda old, val: val}[kind]
        fn = (lambda old, val: from_bits(op(bits_of(old, et), bits_of(val, et)), et))
    elif et.kind == "int" and et.bits in (32, 64):
        if kind == "add":
            fn = (lambda old, val: old + val)
        elif kind in ("max", "min"):
            fn = np.maximum if kind == "max" else np.minimum
        elif kind in ("umax", "umin"):
            def fn(old, val, umax=kind == "umax"):
                uo, uv = _uns(old, et), _uns(val, et)
                return np.where(uo >= uv if umax else uo <= uv, old, val)
    if fn is None:
        raise EmulationError(f"tt.atomic_rmw {kind} on {et.name} is not something Triton's "
                             f"lowering emits; the emulator does not model it", where)
    return fn


def _lane_rounds(offs: np.ndarray):
    """Lane indices of ``offs`` in rounds of distinct addresses, round k holding every
    address's k-th lane: applying the rounds in order is applying the lanes in lane order."""
    n = offs.size
    if n == 0:
        return []
    order = np.argsort(offs, kind="stable")
    srt = offs[order]
    first = np.r_[True, srt[1:] != srt[:-1]]
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    occ = np.empty(n, np.int64)
    occ[order] = np.arange(n) - start
    return [np.nonzero(occ == k)[0] for k in range(int(occ.max()) + 1)]


def _apply_atomic(pc, buf, offs, step, where, fadd_et=None):
    """Apply ``step(old, lanes) -> new`` to the lanes ``offs`` (1-D, active lanes only) in
    lane order; returns the old values.  ``fadd_et``: log the adds (``memory.FaddLog``)."""
    buf.check_bounds(offs, where)
    olds = np.zeros(offs.shape, buf.et.np)
    log = buf.fadd_log(pc.epoch, fadd_et) if fadd_et is not None else None
    for lanes in _lane_rounds(offs):
        o = offs[lanes]
        old = buf.read(o)
        with np.errstate(all="ignore"):  # wrap-around, inf - inf: the hardware's results
            new = np.asarray(step(old, lanes)).astype(buf.et.np, copy=False)
        buf.write(o, new)
        olds[lanes] = old
        if log is not None:
            log.note(o, old, new)
        else:
            buf.restart_fadd(pc.epoch, o)
    pc.machine.on_store(pc, buf.base, offs, where)
    return olds


def _atomic(pc, x, et, operands, mask, step, where, fadd_et=None):
    """``step(old, *operands)`` at pointer ``x`` (scalar or tensor) for its active lanes
    (``mask``: None for all), the operands broadcast to ``x``'s shape in ``et``; returns the
    old values as ``x`` is shaped, 0 on inactive lanes (:func:`_apply_atomic`)."""
    buf = _typed(x.buf, et, where)
    scalar = not isinstance(x, PtrTensor)
    if scalar and mask is not None and not mask:
        return to_etype(0, et)
    shape = () if scalar else x.offs.shape
    offs = np.array([x.off]) if scalar else x.offs.reshape(-1)
    idx = np.arange(offs.size) if mask is None or scalar else \
        np.nonzero(np.broadcast_to(np.asarray(mask, dtype=bool), shape).reshape(-1))[0]
    args = [to_etype(np.broadcast_to(np.asarray(v), shape).reshape(-1), et)[idx]
            for v in operands]
    olds = np.zeros(offs.shape, et.np)
    olds[idx] = _apply_atomic(pc, buf, offs[idx],
                              lambda old, ln: step(old, *(a[ln] for a in args)), where, fadd_et)
    if not scalar:
        return olds.reshape(shape)
    return wrap_int(int(olds[0]), et.bits) if et.kind == "int" else et.np.type(olds[0])


@handler("tt.atomic_rmw")
def _atomic_rmw(fc, op, tm):
    p, v = fc.slot(op.ptr), fc.slot(op.val)
    m = fc.slot(op.mask) if op.mask is not None else None
    r, et, _ = _result(fc, op)
    kind = _RMW[_int_prop(op, "atomic_rmw_op")]
    where = loc_of(op)
    fn = _rmw_fn(kind, et, where)
    fadd_et = et if kind == "fadd" else None

    def g(env, pc):
        yield POINT
        env[r] = _atomic(pc, env[p], et, [env[v]], env[m] if m is not None else None, fn,
                         where, fadd_et)
    return g, True


@handler("tt.atomic_cas")
def _atomic_cas(fc, op, tm):
    p, c, v = fc.slot(op.ptr), fc.slot(op.cmp), fc.slot(op.val)
    r, et, _ = _result(fc, op)
    where = loc_of(op)
    if et.kind not in ("int", "float") or et.bits not in (16, 32, 64):
        raise EmulationError(f"tt.atomic_cas on {et.name}: Triton's atomic_cas takes 16-, 32- "
                             f"and 64-bit elements only", where)

    def cas(old, cm, vs):  # bitwise compare, as atom.cas.b16/b32/b64
        return np.where(bits_of(old, et) == bits_of(cm, et), vs, old)

    def g(env, pc):
        yield POINT
        env[r] = _atomic(pc, env[p], et, [env[c], env[v]], None, cas, where)
    return g, True


@handler("tt.make_tensor_ptr", "tt.make_tensor_descriptor")
def _make_block(fc, op, tm):
    """A block pointer (a block of a strided view of the base's buffer, its offsets with it) or
    a TMA descriptor (the same view; the block's indices come with each access)."""
    b, r, t = fc.slot(op.base), _res(fc, op), op.results[0].type
    dims = [[fc.slot(v) for v in vals] for vals in (op.shape, op.strides)]
    if op.name == "tt.make_tensor_ptr":
        dims.append([fc.slot(v) for v in op.offsets])
        make = functools.partial(BlockPtr, block=_shape(t.pointee_type))
    else:
        make = functools.partial(TensorDesc, block=_shape(t.block_type),
                                 pad_nan=_int_prop(op, "padding", 1) == 2)

    def f(env, pc):
        base = env[b]
        env[r] = make(base.buf, base.off, *(tuple(int(env[s]) for s in d) for d in dims))
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


def _desc_block(env, d, idx, et, where):
    """``(descriptor, buffer as et, element offsets, in bounds)`` of the block at the indices
    in slots ``idx`` of the descriptor in slot ``d``."""
    x = env[d]
    offs, inb = block_offsets(x.base, x.shape, x.strides, [int(env[s]) for s in idx], x.block,
                              None)
    return x, _typed(x.buf, et, where), offs, inb


@handler("tt.descriptor_load")
def _desc_load(fc, op, tm):
    d = fc.slot(op.desc)
    idx = [fc.slot(v) for v in op.indices]
    r, et, _ = _result(fc, op)
    where = loc_of(op)
    rshape = _shape(op.results[0].type)

    def do(env, pc):
        x, buf, offs, inb = _desc_block(env, d, idx, et, where)
        env[r] = _load_lanes(pc, buf, offs, inb, np.nan if x.pad_nan else 0,
                             where).reshape(rshape)

    return _fine(fc, do, lambda env: env[d].buf.tracked)


@handler("tt.descriptor_store")
def _desc_store(fc, op, tm):
    d, v = fc.slot(op.desc), fc.slot(op.src)
    idx = [fc.slot(x) for x in op.indices]
    where = loc_of(op)
    et = etype_of(op.src.type)

    def do(env, pc):
        x, buf, offs, inb = _desc_block(env, d, idx, et, where)
        val = to_etype(np.asarray(env[v]).reshape(x.block), buf.et)
        _store_into(pc, buf, offs[inb], val[inb], where)

    return _fine(fc, do, lambda env: env[d].buf.tracked)
