"""An interpreter of TTIR (the tt mirror dialect, arith, math, scf) and of the syncopate ops
left after ``resolve-chunks``, on numpy.

Why compile to closures: a GEMM program runs a few hundred ops per K step and the emulator
runs thousands of programs per interleaving, so the per-op cost must be a Python call, not an
attribute walk over xDSL objects.  :class:`FunctionCode` turns every op once into a closure
``f(env, pc)`` that reads its operands from and writes its results to integer slots of a flat
list ``env`` (one per program instance; constants are pre-filled), and every block into a
runner.  Ops that may give control back to the scheduler (waits, signals, comm steps, atomics
and -- in ``fine`` mode -- loads/stores of communicated tensors) compile to generator
functions; a block containing one becomes a generator, so a program instance is a Python
generator that yields at exactly those points (``yield from`` through scf regions).

Values: integer scalars are Python ints wrapped to their width, float scalars numpy scalars,
tensors numpy arrays (bf16 as float32 rounded to bf16 after every op: see ``memory.py``),
pointers :class:`~.memory.Ptr` / :class:`~.memory.PtrTensor`, block pointers and tensor
descriptors their own small records.  Integer division and remainder follow C (truncation),
as PTX does.  ``tt.dot`` accumulates in float32 (inputs converted exactly from bf16/fp16),
like the tensor cores; both the fused kernel and its unfused reference run through the same
code, so their results agree bit for bit whenever they compute the same tiles.

An op the interpreter does not know is an :class:`~syncopate.errors.EmulationError` naming the
op and its location -- never a silent skip.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ..errors import EmulationError
from .memory import (
    BlockPtr,
    EType,
    Ptr,
    PtrTensor,
    TensorDesc,
    block_offsets,
    etype_of,
    round_bf16,
    round_tf32,
    to_etype,
    wrap_int,
)

# ----------------------------------------------------------------------------- yields


class Point:
    """A preemption point: the scheduler may run another coroutine here."""

    __slots__ = ("what",)

    def __init__(self, what: str = "point"):
        self.what = what

    def ready(self) -> bool:
        return True


POINT = Point()


def serial_ge(value: int, target: int, bits: int) -> bool:
    """``(int)(value - target) >= 0`` in ``bits``-bit serial-number arithmetic, as the spins
    compare (docs/fused-abi.md): flags may wrap."""
    return wrap_int(int(value) - int(target), bits) >= 0


class WaitFlag:
    """Blocked until ``buf.data[index] >= target`` (serial compare)."""

    __slots__ = ("buf", "index", "target", "kind", "chunk", "loc", "pc")

    def __init__(self, buf, index: int, target: int, kind: str, chunk, loc, pc=None):
        self.buf, self.index, self.target = buf, int(index), int(target)
        self.kind, self.chunk, self.loc, self.pc = kind, chunk, loc, pc

    def ready(self) -> bool:
        return serial_ge(self.buf.data[self.index], self.target, self.buf.et.bits)

    def describe(self) -> str:
        return (f"{self.kind} flag [{self.index}] on rank {self.buf.rank} = "
                f"{int(self.buf.data[self.index])}, waiting for >= {self.target}")


class WaitCond:
    """Blocked until ``fn()`` is true (host-side waits: a launch finished, a stream event)."""

    __slots__ = ("fn", "what")

    def __init__(self, fn: Callable[[], bool], what: str):
        self.fn, self.what = fn, what

    def ready(self) -> bool:
        return bool(self.fn())

    def describe(self) -> str:
        return self.what


# ----------------------------------------------------------------------------- helpers

_TERMINATORS = ("scf.yield", "scf.condition", "tt.reduce.return", "tt.scan.return",
                "tt.return", "tt.map_elementwise.return")


def loc_of(op) -> str:
    from syncopate_mlir.passes.access import loc_str

    try:
        s = loc_str(op)
    except Exception:  # noqa: BLE001 - a location is best effort
        s = None
    return s or f"<{op.name}>"


def _prop(op, name, default=None):
    v = op.properties.get(name)
    if v is None:
        v = op.attributes.get(name)
    return default if v is None else v


def _int_prop(op, name, default=None):
    v = _prop(op, name)
    if v is None:
        return default
    if hasattr(v, "value"):
        return int(v.value.data)
    if hasattr(v, "data"):
        return int(v.data)
    return default


def _array_prop(op, name) -> list[int]:
    v = _prop(op, name)
    if v is None:
        return []
    return [int(x) for x in v.get_values()]


def _is_tensor(t) -> bool:
    from xdsl.dialects.builtin import TensorType
    return isinstance(t, TensorType)


def _shape(t) -> tuple[int, ...]:
    return tuple(int(s) for s in t.get_shape()) if _is_tensor(t) else ()


def _np_int(et: EType, unsigned=False):
    if et.bits == 1:
        return np.bool_
    return {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[et.bits] if unsigned \
        else et.np.type


def _uns(x, et: EType):
    """Unsigned view of an integer value."""
    if isinstance(x, np.ndarray):
        if et.bits == 1:
            return x.astype(np.uint8)
        return x.astype(et.np, copy=False).view(_np_int(et, True))
    return int(x) & ((1 << et.bits) - 1)


def _c_div(a, b, where):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        a_, b_ = np.asarray(a), np.asarray(b)
        if np.any(b_ == 0):
            raise EmulationError("integer division by zero", where)
        with np.errstate(all="ignore"):
            q = a_ // b_
            q = q + (((a_ % b_) != 0) & ((a_ < 0) ^ (b_ < 0)))
        return q.astype(np.result_type(a_, b_))
    if b == 0:
        raise EmulationError("integer division by zero", where)
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_rem(a, b, where):
    return a - b * _c_div(a, b, where)


# ----------------------------------------------------------------------------- the compiler


class ProgramCtx:
    """What one program instance knows about itself, and the machine it runs on."""

    __slots__ = ("rank", "pid", "grid", "epoch", "role", "machine", "stored", "signalled",
                 "name", "done", "blocked_on")

    def __init__(self, machine, rank: int, pid: tuple, grid: tuple, epoch: int, role: str):
        self.machine, self.rank, self.pid, self.grid = machine, rank, pid, grid
        self.epoch, self.role = epoch, role
        self.stored: dict[int, int] = {}
        self.signalled: dict[int, int] = {}
        self.name = f"rank {rank} {role} program {pid[0] if len(pid) else 0}"
        self.done = False
        self.blocked_on = None


class Machine:
    """Interface the interpreter calls for memory events and comm steps.  The plain machine
    (used for the unfused reference) knows no peers and no flags."""

    fine = False

    def on_load(self, pc, buf, offs, loc):  # noqa: D401 - hooks
        pass

    def on_store(self, pc, buf, offs, loc):
        pass

    def peer(self, buf, rank, loc):
        raise EmulationError("syncopate.peer_ptr outside a multi-rank emulation", loc)

    def on_signal(self, pc, buf, index, value, op, kind, loc):
        pass

    def on_wait_done(self, pc, wait):
        pass

    def comm_step(self, pc, kind, op_info, loc):
        raise EmulationError(f"syncopate.{kind} outside a multi-rank emulation", loc)

    def resolve_addr(self, addr, loc):
        raise EmulationError("tt.int_to_ptr: no emulated address space", loc)


class FunctionCode:
    """One ``tt.func`` compiled to closures."""

    def __init__(self, func, module_code: "ModuleCode"):
        self.func = func
        self.module_code = module_code
        self.slots: dict[Any, int] = {}
        self.template: list = []
        block = func.regions[0].blocks[0]
        self.arg_slots = [self.slot(a) for a in block.args]
        self.arg_types = [a.type for a in block.args]
        self.arg_names = [a.name_hint for a in block.args]
        self.body, self.body_yields = self.block(block)

    # slots -------------------------------------------------------------------------------
    def slot(self, v) -> int:
        s = self.slots.get(v)
        if s is None:
            s = len(self.template)
            self.slots[v] = s
            self.template.append(None)
        return s

    def new_env(self) -> list:
        return list(self.template)

    # blocks ------------------------------------------------------------------------------
    def block(self, block, tensor_mode: bool = False):
        items = []
        term: list[int] = []
        for op in block.ops:
            if op.name in _TERMINATORS:
                term = [self.slot(v) for v in op.operands]
                continue
            f, g = self.op(op, tensor_mode)
            if f is not None:
                items.append((f, g))
        term = tuple(term)
        if any(g for _, g in items):
            def run(env, pc, items=items, term=term):
                for f, g in items:
                    if g:
                        yield from f(env, pc)
                    else:
                        f(env, pc)
                return [env[s] for s in term]
            return run, True
        fs = tuple(f for f, _ in items)

        def run_plain(env, pc, fs=fs, term=term):
            for f in fs:
                f(env, pc)
            return [env[s] for s in term]
        return run_plain, False

    # ops ---------------------------------------------------------------------------------
    def op(self, op, tensor_mode: bool = False):
        name = op.name
        h = _HANDLERS.get(name)
        if h is None:
            raise EmulationError(f"the emulator does not implement {name}", loc_of(op))
        try:
            return h(self, op, tensor_mode)
        except EmulationError:
            raise
        except Exception as e:  # noqa: BLE001 - compile-time shape surprises become typed
            raise EmulationError(f"cannot emulate {name}: {type(e).__name__}: {e}",
                                 loc_of(op)) from e


class ModuleCode:
    """Every function of a module, compiled lazily (``tt.call`` targets on first use)."""

    def __init__(self, module, fine: bool = False):
        self.module = module
        #: yield at every load/store of a communicated tensor (finer interleavings, slower)
        self.fine = fine
        self.funcs: dict[str, Any] = {}
        self.code: dict[str, FunctionCode] = {}
        for op in module.body.blocks[0].ops:
            if op.name == "tt.func":
                self.funcs[op.sym_name.data] = op
        self.kernel_name = None
        for n, f in self.funcs.items():
            vis = getattr(f, "sym_visibility", None)
            if vis is None or getattr(vis, "data", "public") == "public":
                self.kernel_name = n
        if self.kernel_name is None:
            raise EmulationError("the module has no public tt.func (the kernel)")

    def get(self, name: str) -> FunctionCode:
        c = self.code.get(name)
        if c is None:
            if name not in self.funcs:
                raise EmulationError(f"tt.call to unknown function @{name}")
            c = FunctionCode(self.funcs[name], self)
            self.code[name] = c
        return c

    @property
    def kernel(self) -> FunctionCode:
        return self.get(self.kernel_name)


# ----------------------------------------------------------------------------- handlers

_HANDLERS: dict[str, Callable] = {}


def handler(*names):
    def deco(fn):
        for n in names:
            _HANDLERS[n] = fn
        return fn
    return deco


def _res(fc, op, i=0):
    return fc.slot(op.results[i])


def _ops(fc, op):
    return [fc.slot(v) for v in op.operands]


@handler("arith.constant")
def _constant(fc, op, tm):
    from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, FloatAttr, IntegerAttr

    t = op.results[0].type
    et = etype_of(t)
    v = op.value
    if isinstance(v, DenseIntOrFPElementsAttr):
        vals = v.get_values() if hasattr(v, "get_values") else [x for x in v.data]
        vals = list(vals)
        shape = _shape(t)
        arr = np.array(vals, dtype=np.float64 if et.kind == "float" else np.int64)
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
        r = _res(fc, op)
        et = etype_of(op.results[0].type)
        where = loc_of(op)
        if _is_tensor(op.results[0].type) or tm:
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


def _shift_ok(y, et):
    return np.asarray(y) < et.bits


_INT_OPS = {
    "arith.addi": (lambda x, y, et, w: x + y, _arr(lambda x, y, et, w: x + y)),
    "arith.subi": (lambda x, y, et, w: x - y, _arr(lambda x, y, et, w: x - y)),
    "arith.muli": (lambda x, y, et, w: x * y, _arr(lambda x, y, et, w: x * y)),
    "arith.divsi": (lambda x, y, et, w: _c_div(x, y, w), _arr(lambda x, y, et, w: _c_div(x, y, w))),
    "arith.remsi": (lambda x, y, et, w: _c_rem(x, y, w), _arr(lambda x, y, et, w: _c_rem(x, y, w))),
    "arith.divui": (lambda x, y, et, w: _c_div(_uns(x, et), _uns(y, et), w),
                    _arr(lambda x, y, et, w: _c_div(_uns(x, et), _uns(y, et), w))),
    "arith.remui": (lambda x, y, et, w: _c_rem(_uns(x, et), _uns(y, et), w),
                    _arr(lambda x, y, et, w: _c_rem(_uns(x, et), _uns(y, et), w))),
    "arith.ceildivsi": (lambda x, y, et, w: -((-x) // y) if y > 0 else -(x // -y) if y < 0 else _c_div(x, y, w),
                        _arr(lambda x, y, et, w: -np.floor_divide(-x, y))),
    "arith.floordivsi": (lambda x, y, et, w: x // y if y else _c_div(x, y, w),
                         _arr(lambda x, y, et, w: np.floor_divide(x, y))),
    "arith.andi": (lambda x, y, et, w: x & y, _arr(lambda x, y, et, w: x & y)),
    "arith.ori": (lambda x, y, et, w: x | y, _arr(lambda x, y, et, w: x | y)),
    "arith.xori": (lambda x, y, et, w: x ^ y, _arr(lambda x, y, et, w: x ^ y)),
    "arith.shli": (lambda x, y, et, w: x << y if y < et.bits else 0,
                   _arr(lambda x, y, et, w: np.where(_shift_ok(y, et), np.left_shift(x, np.minimum(y, et.bits - 1)), 0))),
    "arith.shrsi": (lambda x, y, et, w: x >> min(y, et.bits - 1),
                    _arr(lambda x, y, et, w: np.right_shift(x, np.minimum(y, et.bits - 1)))),
    "arith.shrui": (lambda x, y, et, w: (_uns(x, et) >> y) if y < et.bits else 0,
                    _arr(lambda x, y, et, w: np.where(_shift_ok(y, et), np.right_shift(_uns(x, et), np.minimum(y, et.bits - 1).astype(_np_int(et, True))), 0))),
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
        r = _res(fc, op)
        et = etype_of(op.results[0].type)
        calc = np.float32 if et.name in ("bf16", "f16") else et.np.type
        bf = et.is_bf16
        tensor = _is_tensor(op.results[0].type) or tm

        def f(env, pc):
            with np.errstate(all="ignore"):
                vals = [np.asarray(env[s]).astype(calc, copy=False) if tensor else calc(env[s])
                        for s in args]
                out = fn(*vals)
            if tensor:
                out = np.asarray(out).astype(et.np, copy=False)
                env[r] = round_bf16(out) if bf else out
            else:
                out = et.np.type(out)
                env[r] = round_bf16(out) if bf else out
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
    a, r = _ops(fc, op)[0], _res(fc, op)
    et = etype_of(op.results[0].type)
    tensor = _is_tensor(op.results[0].type) or tm

    def f(env, pc):
        x = env[a]
        env[r] = np.abs(x).astype(et.np) if tensor else wrap_int(abs(x), et.bits)
    return f, False


@handler("tt.clampf")
def _clampf(fc, op, tm):
    x, lo, hi = _ops(fc, op)[:3]
    r = _res(fc, op)
    et = etype_of(op.results[0].type)
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
    r = _res(fc, op)
    pred = _CMPI[_int_prop(op, "predicate")]
    et = etype_of(op.operands[0].type)
    tensor = _is_tensor(op.results[0].type) or tm
    uns = pred[0] == "u"
    base = pred[1:] if pred[0] in "su" else pred
    cmp = {"eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
           "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y}[base]

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
    r = _res(fc, op)
    fn = _CMPF[_int_prop(op, "predicate")]
    tensor = _is_tensor(op.results[0].type) or tm

    def f(env, pc):
        with np.errstate(all="ignore"):
            v = fn(np.asarray(env[a]), np.asarray(env[b]))
        env[r] = np.asarray(v) if tensor else int(bool(v))
    return f, False


@handler("arith.select")
def _select(fc, op, tm):
    c, a, b = _ops(fc, op)
    r = _res(fc, op)
    tensor = _is_tensor(op.results[0].type) or tm
    where = loc_of(op)

    def f(env, pc):
        cond, x, y = env[c], env[a], env[b]
        if isinstance(x, PtrTensor) or isinstance(y, PtrTensor):
            if not isinstance(cond, np.ndarray):
                env[r] = x if cond else y
                return
            if x.buf is not y.buf:
                raise EmulationError("select between pointers into different buffers", where)
            env[r] = PtrTensor(x.buf, np.where(cond, x.offs, y.offs))
        elif tensor and isinstance(cond, np.ndarray):
            env[r] = np.where(cond, x, y).astype(np.asarray(x).dtype, copy=False)
        else:
            env[r] = x if cond else y
    return f, False


# ---- casts


@handler("arith.extsi", "arith.extui", "arith.trunci", "arith.index_cast", "arith.index_castui")
def _int_cast(fc, op, tm):
    a, r = _ops(fc, op)[0], _res(fc, op)
    src = etype_of(op.operands[0].type)
    dst = etype_of(op.results[0].type)
    unsigned = op.name in ("arith.extui", "arith.index_castui")
    tensor = _is_tensor(op.results[0].type) or tm

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
    a, r = _ops(fc, op)[0], _res(fc, op)
    src = etype_of(op.operands[0].type)
    dst = etype_of(op.results[0].type)
    tensor = _is_tensor(op.results[0].type) or tm
    name = op.name
    rtz = name == "tt.fp_to_fp" and _int_prop(op, "rounding", 1) == 0
    if dst.kind == "other" or src.kind == "other":
        raise EmulationError(f"{name}: the emulator does not support {src.name} -> {dst.name}",
                             loc_of(op))

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
    a, r = _ops(fc, op)[0], _res(fc, op)
    src = etype_of(op.operands[0].type)
    dst = etype_of(op.results[0].type)
    where = loc_of(op)
    if src.kind == "ptr" or dst.kind == "ptr":
        def fp(env, pc):
            x = env[a]
            if src.kind == dst.kind == "ptr":
                # pointee change: only same-size reinterpretation is modelled
                if etype_of(op.results[0].type.element_type.pointee_type if _is_tensor(op.results[0].type)
                            else op.results[0].type.pointee_type).bits != x.buf.et.bits:
                    raise EmulationError("pointer bitcast to a different element size", where)
                env[r] = x
            else:
                raise EmulationError("bitcast between a pointer and a non-pointer", where)
        return fp, False

    def storage_bits(x, et):
        arr = np.asarray(x)
        if et.is_bf16:
            return (arr.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return arr.astype(et.np).view(_np_int(EType("int", et.bits, et.np, ""), True))

    def f(env, pc):
        bits = storage_bits(env[a], src)
        if dst.is_bf16:
            out = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            out = bits.view(dst.np)
        env[r] = out if _is_tensor(op.results[0].type) else (
            wrap_int(int(out), dst.bits) if dst.kind == "int" else dst.np.type(out))
    return f, False


# ---- tensor shape ops


@handler("tt.splat")
def _splat(fc, op, tm):
    a, r = _ops(fc, op)[0], _res(fc, op)
    shape = _shape(op.results[0].type)
    et = etype_of(op.results[0].type)

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
    a, r = _ops(fc, op)[0], _res(fc, op)
    et = etype_of(op.results[0].type)

    def f(env, pc):
        x = env[a]
        if isinstance(x, PtrTensor):
            env[r] = Ptr(x.buf, int(x.offs.reshape(-1)[0]))
        else:
            v = np.asarray(x).reshape(-1)[0]
            env[r] = wrap_int(int(v), et.bits) if et.kind == "int" else v
    return f, False


@handler("tt.join")
def _join(fc, op, tm):
    a, b = _ops(fc, op)
    r = _res(fc, op)

    def f(env, pc):
        env[r] = np.stack([np.asarray(env[a]), np.asarray(env[b])], axis=-1)
    return f, False


@handler("tt.cat")
def _cat(fc, op, tm):
    a, b = _ops(fc, op)
    r = _res(fc, op)

    def f(env, pc):
        env[r] = np.concatenate([np.asarray(env[a]), np.asarray(env[b])], axis=0)
    return f, False


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


# ---- pointers and memory


@handler("tt.addptr")
def _addptr(fc, op, tm):
    p, o = _ops(fc, op)
    r = _res(fc, op)

    def f(env, pc):
        x, d = env[p], env[o]
        if isinstance(x, PtrTensor):
            env[r] = PtrTensor(x.buf, x.offs + np.asarray(d, dtype=np.int64))
        elif isinstance(d, np.ndarray):
            env[r] = PtrTensor(x.buf, x.off + d.astype(np.int64))
        else:
            env[r] = Ptr(x.buf, x.off + int(d))
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


# ---- dot, reduce


@handler("tt.dot")
def _dot(fc, op, tm):
    a, b, c = fc.slot(op.a), fc.slot(op.b), fc.slot(op.c)
    r = _res(fc, op)
    ea, eb = etype_of(op.a.type), etype_of(op.b.type)
    ed = etype_of(op.results[0].type)
    tf32 = _int_prop(op, "inputPrecision", 2) in (0, 1) and ea.name == "f32"

    def f(env, pc):
        x, y, acc = env[a], env[b], env[c]
        if ed.kind == "int":
            env[r] = (np.matmul(x.astype(np.int64), y.astype(np.int64)) + acc).astype(ed.np)
            return
        x32 = np.asarray(x, dtype=np.float32)
        y32 = np.asarray(y, dtype=np.float32)
        if tf32:
            x32, y32 = round_tf32(x32), round_tf32(y32)
        out = np.matmul(x32, y32) + np.asarray(acc, dtype=np.float32)
        env[r] = to_etype(out, ed)
    return f, False


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
                for s, v in zip(arg_slots[:n], acc):
                    env[s] = v
                for s, v in zip(arg_slots[n:], cur):
                    env[s] = v
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


_HANDLERS["tt.reduce"] = _fold
_HANDLERS["tt.scan"] = _fold


# ---- control flow


def _signed(v, t):
    et = etype_of(t)
    return wrap_int(int(v), et.bits) if et.kind == "int" else int(v)


@handler("scf.for")
def _for(fc, op, tm):
    lb, ub, st = fc.slot(op.lb), fc.slot(op.ub), fc.slot(op.step)
    inits = [fc.slot(v) for v in op.iter_args]
    res = [fc.slot(v) for v in op.results]
    block = op.body.blocks[0]
    iv = fc.slot(block.args[0])
    args = [fc.slot(a) for a in block.args[1:]]
    body, yields = fc.block(block, tm)

    if yields:
        def g(env, pc):
            i, end, step = env[lb], env[ub], env[st]
            vals = [env[s] for s in inits]
            while i < end:
                env[iv] = i
                for s, v in zip(args, vals):
                    env[s] = v
                vals = yield from body(env, pc)
                i += step
            for s, v in zip(res, vals):
                env[s] = v
        return g, True

    def f(env, pc):
        i, end, step = env[lb], env[ub], env[st]
        vals = [env[s] for s in inits]
        while i < end:
            env[iv] = i
            for s, v in zip(args, vals):
                env[s] = v
            vals = body(env, pc)
            i += step
        for s, v in zip(res, vals):
            env[s] = v
    return f, False


@handler("scf.if")
def _if(fc, op, tm):
    c = fc.slot(op.cond)
    res = [fc.slot(v) for v in op.results]
    tb, ty = fc.block(op.true_region.blocks[0], tm)
    if op.false_region.blocks:
        fb, fy = fc.block(op.false_region.blocks[0], tm)
    else:
        fb, fy = (lambda env, pc: []), False

    if ty or fy:
        def g(env, pc):
            branch, y = (tb, ty) if env[c] else (fb, fy)
            vals = (yield from branch(env, pc)) if y else branch(env, pc)
            for s, v in zip(res, vals):
                env[s] = v
        return g, True

    def f(env, pc):
        vals = tb(env, pc) if env[c] else fb(env, pc)
        for s, v in zip(res, vals):
            env[s] = v
    return f, False


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
            for s, v in zip(bargs, vals):
                env[s] = v
            out = (yield from brun(env, pc)) if by else brun(env, pc)
            if not out[0]:
                for s, v in zip(res, out[1:]):
                    env[s] = v
                return
            for s, v in zip(aargs, out[1:]):
                env[s] = v
            vals = (yield from arun(env, pc)) if ay else arun(env, pc)

    if by or ay:
        return g, True

    def f(env, pc):
        it = g(env, pc)
        try:
            next(it)
        except StopIteration:
            return
        raise EmulationError("internal: a plain while yielded", loc_of(op))
    return f, False


@handler("tt.call")
def _call(fc, op, tm):
    callee = op.callee.root_reference.data if hasattr(op.callee, "root_reference") else str(op.callee)
    args = [fc.slot(v) for v in op.operands]
    res = [fc.slot(v) for v in op.results]
    mc = fc.module_code

    def g(env, pc):
        code = mc.get(callee)
        cenv = code.new_env()
        for s, a in zip(code.arg_slots, args):
            cenv[s] = env[a]
        vals = yield from _as_gen(code.body, code.body_yields, cenv, pc)
        for s, v in zip(res, vals):
            env[s] = v
    return g, True


def _as_gen(run, yields, env, pc):
    if yields:
        return (yield from run(env, pc))
    return run(env, pc)


@handler("gpu.barrier", "llvm.intr.assume", "tt.print")
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
        w = WaitFlag(p.buf, p.off + env[ix], env[tg], kind, chunk, where, pc)
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
    run, yields = fc.block(op.body.blocks[0], tm)

    def g(env, pc):
        yield from _as_gen(run, yields, env, pc)
    return g, True


def _comm_step(kind):
    def make(fc, op, tm):
        slots = {n: fc.slot(getattr(op, n)) for n in ("pid", "count", "epoch", "rank", "flags")}
        base = fc.slot(op.base) if kind == "transfer" else None
        chunk = int(op.chunk.value.data) if kind == "transfer" else None
        where = loc_of(op)

        def g(env, pc):
            info = {n: env[s] for n, s in slots.items()}
            info["chunk"] = chunk
            if base is not None:
                info["base"] = env[base]
            yield from pc.machine.comm_step(pc, kind, info, where)
        return g, True
    return make


for _k in ("enter", "transfer", "drain"):
    _HANDLERS[f"syncopate.{_k}"] = _comm_step(_k)


@handler("syncopate.wait_region", "syncopate.signal_region")
def _sy_region(fc, op, tm):
    raise EmulationError(f"{op.name} is region-level: run the pipeline through resolve-chunks "
                         f"before emulating", loc_of(op))
