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

from typing import Any, Callable

import numpy as np
from xdsl.dialects.builtin import TensorType

from syncopate_mlir.passes.access import loc_str
from ..errors import EmulationError
from .memory import EType, etype_of, wrap_int

# ----------------------------------------------------------------------------- yields


class Point:
    """A preemption point: the scheduler may run another coroutine here."""

    __slots__ = ()

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


#: a function body's branches (its blocks' terminators; :meth:`FunctionCode.cfg` follows them)
_BRANCHES = ("cf.br", "cf.cond_br")


def loc_of(op) -> str:
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
    return [] if v is None else [int(x) for x in v.get_values()]


def _is_tensor(t) -> bool:
    return isinstance(t, TensorType)


def _shape(t) -> tuple[int, ...]:
    return tuple(int(s) for s in t.get_shape()) if _is_tensor(t) else ()


def _uns(x, et: EType):
    """Unsigned view of an integer value."""
    if isinstance(x, np.ndarray):
        if et.bits == 1:
            return x.astype(np.uint8)
        return x.astype(et.np, copy=False).view(f"u{et.np.itemsize}")
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
                 "name")

    def __init__(self, machine, rank: int, pid: tuple, grid: tuple, epoch: int, role: str):
        self.machine, self.rank, self.pid, self.grid = machine, rank, pid, grid
        self.epoch, self.role = epoch, role
        self.stored: dict[int, int] = {}
        self.signalled: dict[int, int] = {}
        self.name = f"rank {rank} {role} program {pid[0] if len(pid) else 0}"


class Machine:
    """Interface the interpreter calls for memory events and comm steps.  The plain machine
    (used for the unfused reference) knows no peers and no flags."""

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
        self.module_code = module_code
        self.slots: dict[Any, int] = {}
        self.template: list = []
        blocks = list(func.regions[0].blocks)
        block = blocks[0]
        self.arg_slots = [self.slot(a) for a in block.args]
        self.arg_types = [a.type for a in block.args]
        self.arg_names = [a.name_hint for a in block.args]
        if len(blocks) == 1:
            self.body, self.body_yields = self.block(block)
        else:
            self.body, self.body_yields = self.cfg(blocks)

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

    def call(self, args, pc):
        """This function run on ``args`` in a fresh environment, as a generator (a program
        instance, or a ``tt.call``): its preemption points, then its return values."""
        env = self.new_env()
        _bind(env, self.arg_slots, args)
        return (yield from _as_gen(self.body, self.body_yields, env, pc))

    # blocks ------------------------------------------------------------------------------
    def block(self, block, tensor_mode: bool = False):
        items = []
        term: list[int] = []
        for op in block.ops:
            if op.name in _TERMINATORS:
                term = [self.slot(v) for v in op.operands]
                continue
            if op.name in _BRANCHES:
                continue  # a function's control-flow graph: cfg() follows the edge
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

    def cfg(self, blocks):
        """A function body of several blocks (Triton lowers an early ``return`` inside an
        ``if`` to ``cf.cond_br``): each block runs as :meth:`block` does, then its terminator
        picks the next one and binds that block's arguments (all read before any is written,
        as a branch passes them); a ``tt.return`` ends the run with its values."""
        index = {id(b): i for i, b in enumerate(blocks)}
        arg_slots = [[self.slot(a) for a in b.args] for b in blocks]
        code = []
        for b in blocks:
            run, yields = self.block(b)
            t = b.last_op
            if t.name == "cf.br":
                edge = (index[id(t.successors[0])], [self.slot(v) for v in t.operands])
                code.append((run, yields, None, edge, edge))
            elif t.name == "cf.cond_br":
                code.append((run, yields, self.slot(t.cond),
                             (index[id(t.then_block)], [self.slot(v) for v in t.then_arguments]),
                             (index[id(t.else_block)], [self.slot(v) for v in t.else_arguments])))
            elif t.name == "tt.return":
                code.append((run, yields, None, None, None))
            else:
                raise EmulationError(f"the emulator cannot follow a block that ends in {t.name}",
                                     loc_of(t))

        def walk(env, pc):
            i = 0
            while True:
                run, yields, cond, taken, other = code[i]
                vals = yield from _as_gen(run, yields, env, pc)
                if taken is None:
                    return vals
                dest, srcs = taken if cond is None or env[cond] else other
                _bind(env, arg_slots[dest], [env[s] for s in srcs])
                i = dest

        if any(c[1] for c in code):
            return walk, True
        return plain(walk, None), False

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
        if name not in self.code:
            if name not in self.funcs:
                raise EmulationError(f"tt.call to unknown function @{name}")
            self.code[name] = FunctionCode(self.funcs[name], self)
        return self.code[name]

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


def _result(fc, op, tm=False):
    """``(slot, element type, whether a tensor)`` of ``op``'s result: a tensor too when the op
    runs in tensor mode (``tm``: a reduce or scan region, on whole slices)."""
    t = op.results[0].type
    return fc.slot(op.results[0]), etype_of(t), _is_tensor(t) or tm


def _ops(fc, op):
    return [fc.slot(v) for v in op.operands]


def _bind(env, slots, vals):
    for s, v in zip(slots, vals):
        env[s] = v


def _as_gen(run, yields, env, pc):
    if yields:
        return (yield from run(env, pc))
    return run(env, pc)


def plain(gen_fn, where):
    """``gen_fn(env, pc)``, a generator function over blocks without preemption points, as a
    plain function returning its value: one body of code serves both kinds of block."""
    def run(env, pc):
        g = gen_fn(env, pc)
        try:
            next(g)
        except StopIteration as done:
            return done.value
        raise EmulationError("internal: code without preemption points yielded", where)
    return run
