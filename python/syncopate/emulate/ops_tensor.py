"""The interpreter's tensor shape ops (splat, broadcast, expand_dims, reshape, trans, join, cat,
split), make_range and the program-id ops."""

from __future__ import annotations

import numpy as np

from .interpreter import _HANDLERS, _array_prop, _int_prop, _ops, _res, _result, _shape, handler
from .memory import Ptr, PtrTensor, wrap_int

# ---- tensor shape ops


@handler("tt.splat")
def _splat(fc, op, tm):
    a = _ops(fc, op)[0]
    r, et, _ = _result(fc, op)
    shape = _shape(op.results[0].type)

    def f(env, pc):
        x = env[a]
        if isinstance(x, Ptr):
            env[r] = PtrTensor(x.buf, np.full(shape, x.off, dtype=np.int64))
        else:
            env[r] = np.full(shape, x, dtype=et.np)
    return f, False


def _shape_op(fn):
    def make(fc, op, tm):
        a, r = _ops(fc, op)[0], _res(fc, op)
        meta = fn(op)

        def f(env, pc):
            x = env[a]
            if isinstance(x, PtrTensor):
                env[r] = PtrTensor(x.buf, meta(x.offs))
            else:
                env[r] = meta(np.asarray(x))
        return f, False
    return make


_HANDLERS["tt.broadcast"] = _shape_op(
    lambda op: (lambda x, s=_shape(op.results[0].type): np.broadcast_to(x, s)))
_HANDLERS["tt.expand_dims"] = _shape_op(
    lambda op: (lambda x, ax=_int_prop(op, "axis"): np.expand_dims(x, ax)))
_HANDLERS["tt.reshape"] = _shape_op(
    lambda op: (lambda x, s=_shape(op.results[0].type): np.reshape(x, s)))
_HANDLERS["tt.trans"] = _shape_op(
    lambda op: (lambda x, o=tuple(_array_prop(op, "order")): np.transpose(x, o)))


@handler("tt.unsplat")
def _unsplat(fc, op, tm):
    a = _ops(fc, op)[0]
    r, et, _ = _result(fc, op)

    def f(env, pc):
        x = env[a]
        if isinstance(x, PtrTensor):
            env[r] = Ptr(x.buf, int(x.offs.reshape(-1)[0]))
        else:
            v = np.asarray(x).reshape(-1)[0]
            env[r] = wrap_int(int(v), et.bits) if et.kind == "int" else v
    return f, False


def _pair_op(fn):
    def make(fc, op, tm):
        a, b = _ops(fc, op)
        r = _res(fc, op)

        def f(env, pc):
            env[r] = fn([np.asarray(env[a]), np.asarray(env[b])])
        return f, False
    return make


_HANDLERS["tt.join"] = _pair_op(lambda xs: np.stack(xs, axis=-1))
_HANDLERS["tt.cat"] = _pair_op(lambda xs: np.concatenate(xs, axis=0))


@handler("tt.split")
def _split(fc, op, tm):
    a = _ops(fc, op)[0]
    r0, r1 = _res(fc, op, 0), _res(fc, op, 1)

    def f(env, pc):
        x = np.asarray(env[a])
        env[r0], env[r1] = x[..., 0], x[..., 1]
    return f, False


@handler("tt.make_range")
def _make_range(fc, op, tm):
    start, end = _int_prop(op, "start"), _int_prop(op, "end")
    fc.template[_res(fc, op)] = np.arange(start, end, dtype=np.int32)
    return None, False


@handler("tt.get_program_id", "tt.get_num_programs")
def _pid(fc, op, tm):
    r = _res(fc, op)
    axis = _int_prop(op, "axis", 0)
    is_pid = op.name == "tt.get_program_id"

    def f(env, pc):
        env[r] = int(pc.pid[axis] if is_pid else pc.grid[axis])
    return f, False
