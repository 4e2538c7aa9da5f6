"""The interpreter's arithmetic ops: constants, integer and float arithmetic (C semantics for
signed division), comparisons, select, casts and bitcasts."""

from __future__ import annotations

import math
import operator

import numpy as np
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr

from ..errors import EmulationError
from .interpreter import (
    _HANDLERS,
    _c_div,
    _c_rem,
    _int_prop,
    _ops,
    _res,
    _result,
    _shape,
    _uns,
    handler,
    loc_of,
)
from .memory import Ptr, PtrTensor, bits_of, etype_of, from_bits, round_float, to_etype, wrap_int


@handler("arith.constant")
def _constant(fc, op, tm):
    t = op.results[0].type
    et = etype_of(t)
    v = op.value
    if isinstance(v, DenseIntOrFPElementsAttr):
        shape = _shape(t)
        arr = np.array(list(v.get_values()), dtype=np.float64 if et.kind == "float" else np.int64)
        arr = np.broadcast_to(arr, shape).copy() if arr.size == 1 else arr.reshape(shape)
        val = to_etype(arr, et)
    elif isinstance(v, IntegerAttr):
        val = wrap_int(int(v.value.data), et.bits) if et.kind == "int" else to_etype(v.value.data, et)
    elif isinstance(v, FloatAttr):
        val = to_etype(float(v.value.data), et)
    else:
        raise EmulationError(f"unsupported constant {v}", loc_of(op))
    if tm and not isinstance(val, np.ndarray):
        val = np.asarray(val, dtype=et.np)
    fc.template[_res(fc, op)] = val
    return None, False


# ---- integer arithmetic


def _int_binop(scalar_fn, array_fn):
    def make(fc, op, tm):
        a, b = _ops(fc, op)[:2]
        r, et, tensor = _result(fc, op, tm)
        where = loc_of(op)
        if tensor:
            def f(env, pc):
                env[r] = array_fn(env[a], env[b], et, where)
        else:
            bits = et.bits

            def f(env, pc):
                env[r] = wrap_int(scalar_fn(env[a], env[b], et, where), bits)
        return f, False
    return make


def _arr(fn):
    def g(x, y, et, where):
        with np.errstate(all="ignore"):
            out = fn(np.asarray(x), np.asarray(y), et, where)
        return np.asarray(out).astype(et.np, copy=False)
    return g


def _same(fn):
    """An integer op whose expression is the same on Python ints and numpy arrays."""
    return fn, _arr(fn)


def _shift_ok(y, et):
    return np.asarray(y) < et.bits


def _shrui(x, y, et, w):
    u = _uns(x, et)  # the shift amount in u's type: numpy has no uint64 >> int64
    return np.where(_shift_ok(y, et),
                    np.right_shift(u, np.minimum(y, et.bits - 1).astype(u.dtype)), 0)


_INT_OPS = {
    "arith.addi": _same(lambda x, y, et, w: x + y),
    "arith.subi": _same(lambda x, y, et, w: x - y),
    "arith.muli": _same(lambda x, y, et, w: x * y),
    "arith.divsi": _same(lambda x, y, et, w: _c_div(x, y, w)),
    "arith.remsi": _same(lambda x, y, et, w: _c_rem(x, y, w)),
    "arith.divui": _same(lambda x, y, et, w: _c_div(_uns(x, et), _uns(y, et), w)),
    "arith.remui": _same(lambda x, y, et, w: _c_rem(_uns(x, et), _uns(y, et), w)),
    "arith.ceildivsi": (lambda x, y, et, w: -((-x) // y) if y > 0 else -(x // -y) if y < 0 else _c_div(x, y, w),
                        _arr(lambda x, y, et, w: -np.floor_divide(-x, y))),
    "arith.floordivsi": (lambda x, y, et, w: x // y if y else _c_div(x, y, w),
                         _arr(lambda x, y, et, w: np.floor_divide(x, y))),
    "arith.andi": _same(lambda x, y, et, w: x & y),
    "arith.ori": _same(lambda x, y, et, w: x | y),
    "arith.xori": _same(lambda x, y, et, w: x ^ y),
    "arith.shli": (lambda x, y, et, w: x << y if y < et.bits else 0,
                   _arr(lambda x, y, et, w: np.where(_shift_ok(y, et), np.left_shift(x, np.minimum(y, et.bits - 1)), 0))),
    "arith.shrsi": (lambda x, y, et, w: x >> min(y, et.bits - 1),
                    _arr(lambda x, y, et, w: np.right_shift(x, np.minimum(y, et.bits - 1)))),
    "arith.shrui": (lambda x, y, et, w: (_uns(x, et) >> y) if y < et.bits else 0,
                    _arr(_shrui)),
    "arith.maxsi": (lambda x, y, et, w: max(x, y), _arr(lambda x, y, et, w: np.maximum(x, y))),
    "arith.minsi": (lambda x, y, et, w: min(x, y), _arr(lambda x, y, et, w: np.minimum(x, y))),
    "arith.maxui": (lambda x, y, et, w: x if _uns(x, et) >= _uns(y, et) else y,
                    _arr(lambda x, y, et, w: np.where(_uns(x, et) >= _uns(y, et), x, y))),
    "arith.minui": (lambda x, y, et, w: x if _uns(x, et) <= _uns(y, et) else y,
                    _arr(lambda x, y, et, w: np.where(_uns(x, et) <= _uns(y, et), x, y))),
    "tt.mulhiui": (lambda x, y, et, w: (_uns(x, et) * _uns(y, et)) >> et.bits,
                   _arr(lambda x, y, et, w: ((_uns(x, et).astype(np.uint64) * _uns(y, et).astype(np.uint64)) >> np.uint64(et.bits)).astype(et.np))),
}
for _n, (_s, _a) in _INT_OPS.items():
    _HANDLERS[_n] = _int_binop(_s, _a)


# ---- float arithmetic


def _float_op(fn, nargs=2):
    def make(fc, op, tm):
        args = _ops(fc, op)[:nargs]
        r, et, tensor = _result(fc, op, tm)
        calc = np.float32 if et.name == "f16" or et.rounds else et.np.type

        def f(env, pc):
            with np.errstate(all="ignore"):
                vals = [np.asarray(env[s]).astype(calc, copy=False) if tensor else calc(env[s])
                        for s in args]
                out = fn(*vals)
            if tensor:
                out = np.asarray(out).astype(et.np, copy=False)
                env[r] = round_float(out, et)
            else:
                env[r] = round_float(et.np.type(out), et)
        return f, False
    return make


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_FLOAT_OPS = {
    "arith.addf": (lambda x, y: x + y, 2), "arith.subf": (lambda x, y: x - y, 2),
    "arith.mulf": (lambda x, y: x * y, 2), "arith.divf": (lambda x, y: x / y, 2),
    "tt.precise_divf": (lambda x, y: x / y, 2),
    "arith.remf": (lambda x, y: np.fmod(x, y), 2),
    "arith.maxnumf": (lambda x, y: np.fmax(x, y), 2), "arith.minnumf": (lambda x, y: np.fmin(x, y), 2),
    "arith.maximumf": (lambda x, y: np.maximum(x, y), 2), "arith.minimumf": (lambda x, y: np.minimum(x, y), 2),
    "arith.negf": (lambda x: -x, 1), "math.absf": (lambda x: np.abs(x), 1),
    "math.exp": (np.exp, 1), "math.exp2": (np.exp2, 1), "math.log": (np.log, 1),
    "math.log2": (np.log2, 1), "math.sqrt": (np.sqrt, 1), "tt.precise_sqrt": (np.sqrt, 1),
    "math.rsqrt": (lambda x: 1 / np.sqrt(x), 1), "math.sin": (np.sin, 1), "math.cos": (np.cos, 1),
    "math.tanh": (np.tanh, 1), "math.floor": (np.floor, 1), "math.ceil": (np.ceil, 1),
    "math.erf": (lambda x: _erf(x).astype(np.asarray(x).dtype), 1),
    "math.fma": (lambda x, y, z: x * y + z, 3), "math.powf": (np.power, 2),
    "math.log1p": (np.log1p, 1), "math.expm1": (np.expm1, 1), "math.trunc": (np.trunc, 1),
    "math.round": (lambda x: np.sign(x) * np.floor(np.abs(x) + 0.5), 1),
    "math.roundeven": (np.rint, 1),
}
for _n, (_fn, _k) in _FLOAT_OPS.items():
    _HANDLERS[_n] = _float_op(_fn, _k)


@handler("math.absi")
def _absi(fc, op, tm):
    a = _ops(fc, op)[0]
    r, et, tensor = _result(fc, op, tm)

    def f(env, pc):
        x = env[a]
        env[r] = np.abs(x).astype(et.np) if tensor else wrap_int(abs(x), et.bits)
    return f, False


@handler("tt.clampf")
def _clampf(fc, op, tm):
    x, lo, hi = _ops(fc, op)[:3]
    r, et, _ = _result(fc, op)
    prop = _int_prop(op, "propagateNan", 0)

    def f(env, pc):
        v = np.minimum(np.maximum(env[x], env[lo]), env[hi]) if prop else \
            np.fmin(np.fmax(env[x], env[lo]), env[hi])
        env[r] = to_etype(v if isinstance(env[x], np.ndarray) else et.np.type(v), et)
    return f, False


# ---- comparisons, select

_CMPI = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult", 7: "ule", 8: "ugt",
         9: "uge"}


@handler("arith.cmpi")
def _cmpi(fc, op, tm):
    a, b = _ops(fc, op)
    r, _, tensor = _result(fc, op, tm)
    pred = _CMPI[_int_prop(op, "predicate")]
    et = etype_of(op.operands[0].type)
    uns = pred[0] == "u"
    cmp = getattr(operator, pred[1:] if pred[0] in "su" else pred)  # eq, ne, lt, le, gt, ge

    if et.kind == "ptr":
        def fptr(env, pc):
            x, y = env[a], env[b]
            ox = x.offs if isinstance(x, PtrTensor) else x.off
            oy = y.offs if isinstance(y, PtrTensor) else y.off
            env[r] = cmp(ox, oy) if tensor else int(cmp(ox, oy))
        return fptr, False

    def f(env, pc):
        x, y = env[a], env[b]
        if uns:
            x, y = _uns(x, et), _uns(y, et)
        env[r] = np.asarray(cmp(x, y)) if tensor else int(cmp(x, y))
    return f, False


_CMPF = {0: lambda x, y: np.zeros_like(x, dtype=bool), 1: lambda x, y: x == y,
         2: lambda x, y: x > y, 3: lambda x, y: x >= y, 4: lambda x, y: x < y,
         5: lambda x, y: x <= y, 6: lambda x, y: (x != y) & ~np.isnan(x) & ~np.isnan(y),
         7: lambda x, y: ~np.isnan(x) & ~np.isnan(y), 8: lambda x, y: (x == y) | np.isnan(x) | np.isnan(y),
         9: lambda x, y: ~(x <= y), 10: lambda x, y: ~(x < y), 11: lambda x, y: ~(x >= y),
         12: lambda x, y: ~(x > y), 13: lambda x, y: x != y,
         14: lambda x, y: np.isnan(x) | np.isnan(y), 15: lambda x, y: np.ones_like(x, dtype=bool)}


@handler("arith.cmpf")
def _cmpf(fc, op, tm):
    a, b = _ops(fc, op)
    r, _, tensor = _result(fc, op, tm)
    fn = _CMPF[_int_prop(op, "predicate")]

    def f(env, pc):
        with np.errstate(all="ignore"):
            v = fn(np.asarray(env[a]), np.asarray(env[b]))
        env[r] = np.asarray(v) if tensor else int(bool(v))
    return f, False


@handler("arith.select")
def _select(fc, op, tm):
    c, a, b = _ops(fc, op)
    r, _, tensor = _result(fc, op, tm)
    where = loc_of(op)

    def f(env, pc):
        cond, x, y = env[c], env[a], env[b]
        if isinstance(x, PtrTensor) or isinstance(y, PtrTensor):
            if not isinstance(cond, np.ndarray):
                env[r] = x if cond else y
                return
            if x.buf is not y.buf:
                # (a pointer tensor is one buffer and its offsets here: lanes into two
                # buffers would need every memory op to split them)
                raise EmulationError(
                    f"a tl.where between pointers into two tensors ({x.buf.name} and "
                    f"{y.buf.name}): the emulator's pointer tensors address one buffer each, "
                    f"so it cannot run this kernel (the compiler and the GPU can). To emulate "
                    f"it, select the loaded values instead: tl.where(c, tl.load(p, mask=c), "
                    f"tl.load(q, mask=~c))", where)
            env[r] = PtrTensor(x.buf, np.where(cond, x.offs, y.offs))
        elif tensor and isinstance(cond, np.ndarray):
            env[r] = np.where(cond, x, y).astype(np.asarray(x).dtype, copy=False)
        else:
            env[r] = x if cond else y
    return f, False


# ---- casts


@handler("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui")
def _int_cast(fc, op, tm):
    a, src = _ops(fc, op)[0], etype_of(op.operands[0].type)
    r, dst, tensor = _result(fc, op, tm)
    unsigned = op.name in ("arith.extui", "arith.index_castui")

    def f(env, pc):
        x = env[a]
        if tensor:
            x = np.asarray(x)
            if src.bits == 1:
                x = x.astype(np.int64)
                if not unsigned:
                    x = -x
            elif unsigned:
                x = _uns(x, src)
            env[r] = x.astype(dst.np) if dst.bits > 1 else (x & 1).astype(bool)
        else:
            if src.bits == 1 and not unsigned:
                x = -int(x)
            elif unsigned:
                x = _uns(x, src)
            env[r] = wrap_int(int(x), dst.bits)
    return f, False


@handler("arith.sitofp", "arith.uitofp", "arith.fptosi", "arith.fptoui", "arith.extf",
         "arith.truncf", "tt.fp_to_fp")
def _fcast(fc, op, tm):
    a, src = _ops(fc, op)[0], etype_of(op.operands[0].type)
    r, dst, tensor = _result(fc, op, tm)
    name = op.name
    rtz = name == "tt.fp_to_fp" and _int_prop(op, "rounding", 1) == 0
    if dst.kind == "other" or src.kind == "other":
        raise EmulationError(f"{name}: the emulator does not support {src.name} -> {dst.name}",
                             loc_of(op))
    if rtz and dst.is_f8:
        raise EmulationError(f"{name}: round-toward-zero to {dst.name} is not modelled (sm_90 "
                             f"converts to fp8 with round-to-nearest-even only)", loc_of(op))

    def f(env, pc):
        x = env[a]
        if name == "arith.uitofp":
            x = _uns(x, src)
        if dst.kind == "int":
            with np.errstate(all="ignore"):
                t = np.trunc(np.asarray(x, dtype=np.float64))
            if tensor:
                env[r] = t.astype(np.int64).astype(dst.np)
            else:
                env[r] = wrap_int(int(t), dst.bits) if np.isfinite(t) else 0
            return
        v = np.asarray(x, dtype=np.float64 if src.bits == 64 else np.float32)
        if rtz and dst.is_bf16:
            v = (v.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
        out = to_etype(v if tensor else v[()] if v.ndim == 0 else v, dst)
        env[r] = out if tensor else dst.np.type(out)
    return f, False


@handler("arith.bitcast", "tt.bitcast")
def _bitcast(fc, op, tm):
    """A value bitcast reinterprets bit patterns (``memory.bits_of``/``from_bits``); a pointer
    bitcast gives a pointer into a typed view of the same buffer (``memory.Buffer.view``), so
    that what is loaded, stored or atomically updated through it is bits, not values."""
    a, src = _ops(fc, op)[0], etype_of(op.operands[0].type)
    r, dst, tensor = _result(fc, op)
    where = loc_of(op)
    if src.kind == "ptr" or dst.kind == "ptr":
        if src.kind != dst.kind:
            raise EmulationError("bitcast between a pointer and a non-pointer", where)
        t = op.results[0].type
        pointee = etype_of(t.element_type.pointee_type if tensor else t.pointee_type)

        def fp(env, pc):
            x = env[a]
            if isinstance(x, PtrTensor):
                env[r] = PtrTensor(x.buf.view(pointee, where), x.offs)
            elif isinstance(x, Ptr):
                env[r] = Ptr(x.buf.view(pointee, where), x.off)
            else:
                raise EmulationError(f"a bitcast of a {type(x).__name__} is not modelled", where)
        return fp, False

    if src.is_f8 or dst.is_f8:
        f8 = src.name if src.is_f8 else dst.name
        raise EmulationError(f"{op.name}: a bitcast from or to {f8} is not modelled (fp8 values "
                             f"are kept as float32)", where)

    def f(env, pc):
        out = from_bits(bits_of(env[a], src), dst)
        env[r] = out if tensor else (
            wrap_int(int(out), dst.bits) if dst.kind == "int" else dst.np.type(out))
    return f, False
