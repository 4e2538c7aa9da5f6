"""Shared lowering of the chunk-level ``syncopate`` ops to ``tt``/``arith``/``scf`` + inline PTX.

Used by ``lower-sm``, ``lower-ce`` and ``lower-nvshmem``; each backend adds its own comm-program
lowering (``enter``/``transfer``/``drain``) on top.

* ``syncopate.wait`` -> a call to a private ``noinline`` spin function (one per flag width)
  whose body is one inline-asm block: ``ld.acquire.sys.global`` polls with serial-number compare
  ``(int)(flag - target) >= 0`` (flags grow without bound and may wrap) and the ``%globaltimer``
  watchdog of docs/fused-abi.md: on timeout a CAS claims the pinned diag record, the winner
  writes rank, flag, value, expected, kind and program, then the epoch word last, and the spin
  leaves (``syn_timeout_ns > 0``) or traps (``< 0``); every 256 polls a spin also looks at the
  record and leaves once another spin has timed out, so a dead peer costs one timeout, not one
  per wait.  The token is the result of a non-pure ``fence.proxy.async.global; mov 0``: the
  fence orders the acquired data for TMA (async proxy) reads and the asm is an opaque zero.
* ``syncopate.signal`` -> wait for this program's bulk (TMA) stores, ``gpu.barrier`` so every
  thread's stores precede it, then one scalar ``tt.atomic_rmw`` (Triton issues scalar atomics
  from one thread) with release semantics at system scope.
* ``syncopate.peer_ptr`` -> ``ptr - peers[buf][rank] + peers[buf][peer]``.
* ``syncopate.remap`` -> piecewise-linear select chain over (rank, coordinate) segments of the
  permutation table; coordinates outside the table are left unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from xdsl.dialects import arith, gpu, scf
from xdsl.dialects.builtin import BoolAttr, ModuleOp, TensorType, i1, i32, i64
from xdsl.ir import Operation, SSAValue
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
)

from syncopate.abi import KIND_NAMES
from syncopate.errors import CompileError
from syncopate.ptx import spin_asm
from syncopate_mlir.dialects import tt
from syncopate_mlir.dialects.syncopate import (
    ATTR_SCHEDULE,
    PeerPtrOp,
    ReleaseFenceOp,
    RemapOp,
    SignalOp,
    WaitOp,
    schedule_of,
)

from .abi_info import abi_args, append_table_section, lowering_of
from .access_hints import erase_hints
from .builder import Builder
from .ir_utils import kernel_func

KIND_CODES = {name: code for code, name in KIND_NAMES.items()}


def _asm(b: Builder, asm: str, constraints: str, args, result_types):
    """A non-pure inline-asm block (its effects are the point: fences, the clock, the spin)."""
    op = b.insert(tt.ElementwiseInlineAsmOp(asm, constraints, list(args), list(result_types),
                                            pure=False, packed_element=1))
    return op.results


def opaque_zero(b: Builder) -> SSAValue:
    """An i32 zero the compiler cannot see through, after an async-proxy fence."""
    return _asm(b, "fence.proxy.async.global;\n\tmov.b32 $0, 0;", "=r", [], [i32])[0]


def addptr(b: Builder, ptr: SSAValue, offset: SSAValue) -> SSAValue:
    return b.insert(tt.AddPtrOp(ptr, offset)).results[0]


def scalar_load(b: Builder, ptr: SSAValue) -> SSAValue:
    return b.insert(tt.LoadOp(ptr)).results[0]


# small tensor helpers (comm-program tile copies, epilogue slot loads) ----------------------

def vec(b: Builder, start: SSAValue, n: int) -> SSAValue:
    """``start + arange(0, n)``."""
    r = b.insert(tt.MakeRangeOp(0, n)).results[0]
    return b.add(splat(b, start, [n]), r)


def splat(b: Builder, v: SSAValue, shape) -> SSAValue:
    return b.insert(tt.SplatOp(v, TensorType(v.type, list(shape)))).results[0]


def expand_dims(b: Builder, v: SSAValue, axis: int) -> SSAValue:
    return b.insert(tt.ExpandDimsOp(v, axis)).results[0]


def broadcast_to(b: Builder, v: SSAValue, shape) -> SSAValue:
    if list(v.type.get_shape()) == list(shape):
        return v
    return b.insert(tt.BroadcastOp(v, TensorType(v.type.element_type, list(shape)))).results[0]


@dataclass
class OpLowering(RewritePattern):
    """One op kind's local lowering as a rewrite pattern: ``lower(op)`` builds the replacement
    before ``op`` and returns the values its results become; the op is then erased."""

    op_type: type[Operation]
    lower: Callable[[Operation], Sequence[SSAValue]]

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> None:
        if isinstance(op, self.op_type):
            rewriter.replace(op, [], list(self.lower(op)))


def rewrite(module: ModuleOp, patterns: list[RewritePattern], regions_first: bool = False) -> None:
    """Apply ``patterns`` once to every op of ``module``, in program order (nested ops before
    the op holding them with ``regions_first``); nothing else is removed (no dead-code
    elimination: the lowering changes only the ops it lowers)."""
    PatternRewriteWalker(GreedyRewritePatternApplier(patterns, dce_enabled=False),
                         walk_regions_first=regions_first,
                         apply_recursively=False).rewrite_module(module)


class Lowering:
    """Lowers the chunk-level ops of one module (each op kind by an :class:`OpLowering`, in
    program order); backends subclass it for their comm ops."""

    def __init__(self, module: ModuleOp):
        self.module = module
        self.func = kernel_func(module)
        self.args = abi_args(self.func)
        self.has_bulk_stores = any(isinstance(o, tt.DescriptorStoreOp) for o in self.func.walk())
        self._released: set[int] = set()
        self._funcs: dict[str, Operation] = {}
        # dialect-only lit tests lower ops of a module that carries no schedule
        has_schedule = ATTR_SCHEDULE in module.attributes
        self.world_size = schedule_of(module).world_size if has_schedule else 1
        self.table_mode = has_schedule and lowering_of(module) == "table"

    def lower(self) -> None:
        """Lower every ``syncopate`` op of the module (the backend's pass); one left is a bug."""
        self.lower_common()
        left = sorted({o.name for o in self.module.walk() if o.name.startswith("syncopate.")})
        if left:
            raise CompileError(f"internal: syncopate ops left after lowering: {', '.join(left)}")

    # -------------------------------------------------------------------------- per op kind
    def lower_common(self) -> None:
        erase_hints(self.module)
        rewrite(self.module, [OpLowering(RemapOp, self.remap), OpLowering(PeerPtrOp, self.peer_ptr),
                              OpLowering(WaitOp, self.wait), OpLowering(SignalOp, self.signal),
                              OpLowering(ReleaseFenceOp, self.release_fence)])

    def remap(self, o) -> list[SSAValue]:
        form = self._remap_from_table if self.table_mode else self._remap_select_chain
        return [form(Builder(o), o, o.tiles.value.data, list(o.table.get_values()))]

    @staticmethod
    def _remap_select_chain(b: Builder, o, tiles: int, table: list[int]) -> SSAValue:
        """``table[rank][coord]`` as selects over the table's runs (the unrolled form)."""
        result = o.coord
        for r in range(len(table) // tiles):
            row = table[r * tiles:(r + 1) * tiles]
            is_r = None
            for start, length, dst in _segments(row):
                if dst == start:
                    continue
                if is_r is None:
                    is_r = b.cmp("eq", o.rank, b.const(r))
                inside = b.andi(b.cmp("sge", o.coord, b.const(start)),
                                b.cmp("slt", o.coord, b.const(start + length)))
                cond = b.andi(is_r, inside)
                moved = b.add(o.coord, b.const(dst - start))
                result = b.select(cond, moved, result)
        return result

    def _remap_from_table(self, b: Builder, o, tiles: int, table: list[int]) -> SSAValue:
        """``table[rank][coord]`` loaded from a remap section appended to the chunk table (one
        load instead of a select chain over the table's segments); coordinates outside
        ``[0, tiles)`` stay unchanged, as in the select-chain form."""
        start = append_table_section(self.module, table, (len(table) // tiles, tiles))
        x = o.coord
        inside = b.andi(b.cmp("sge", x, b.const(0)), b.cmp("slt", x, b.const(tiles)))
        safe = b.select(inside, x, b.const(0))
        at = b.add(b.add(b.const(start), b.mul(o.rank, b.const(tiles))), safe)
        moved = scalar_load(b, addptr(b, self.args["syn_table"], at))
        return b.select(inside, moved, x)

    def peer_ptr(self, o) -> list[SSAValue]:
        return [self.peer_address(Builder(o), o.ptr, o.rank, o.buffer.value.data)]

    def peer_address(self, b: Builder, ptr: SSAValue, peer: SSAValue, buffer: int) -> SSAValue:
        peers = self.args["syn_peers"]
        rank = self.args["syn_rank"]
        row = b.const(buffer * self.world_size)
        mine = scalar_load(b, addptr(b, peers, b.add(row, rank)))
        theirs = scalar_load(b, addptr(b, peers, b.add(row, peer)))
        local = b.insert(tt.PtrToIntOp(ptr, i64)).results[0]
        addr = b.add(b.sub(local, mine), theirs)
        return b.insert(tt.IntToPtrOp(addr, ptr.type)).results[0]

    # -------------------------------------------------------------------------- the spin
    def wait(self, o) -> list[SSAValue]:
        b = Builder(o)
        return [self.spin(b, addptr(b, o.flags, o.index), o.index, o.target,
                          KIND_CODES[o.kind.data])]

    def spin(self, b: Builder, ptr: SSAValue, index: SSAValue, target: SSAValue,
             kind: int) -> SSAValue:
        """Wait until ``(int)(*ptr - target) >= 0``; returns the token.

        The spin lives once per flag width in a private ``noinline`` function that every wait
        calls: a call is opaque to the compiler (nothing is scheduled across it), and the kernel
        carries one copy of the watchdog instead of one per wait."""
        fty = tt.pointee_type(ptr.type)
        func = self._wait_func(fty)
        args = [ptr, b.i32(index), b.cast(target, fty), b.const(kind), self.args["syn_diag"],
                self.args["syn_rank"], self.args["syn_epoch"], self.args["syn_timeout_ns"]]
        call = b.insert(tt.CallOp(func.sym_name.data, args, [i32]))
        return call.results[0]

    def _wait_func(self, fty):
        name = f"syncopate_wait_b{fty.width.data}"
        if name in self._funcs:
            return self._funcs[name]
        ptr_t = tt.PointerType(fty)
        inputs = [ptr_t, i32, fty, i32, self.args["syn_diag"].type, i32, i32, i64]
        func = tt.FuncOp(name, (inputs, [i32]), visibility="private",
                           attributes={"noinline": BoolAttr(True, i1)})
        body = func.regions[0].blocks[0]
        for arg, hint in zip(body.args, ["flag", "index", "target", "kind", "diag", "rank",
                                         "epoch", "timeout_ns"]):
            arg.name_hint = hint
        # Triton's debug-info pass needs a file location on every function
        func.location = self.func.location
        fb = Builder(None, body, location=self.func.location)
        ptr, index, target, kind, diag, rank, epoch, timeout = body.args
        token = self._spin_body(fb, ptr, index, target, kind, diag, rank, epoch, timeout)
        fb.insert(tt.ReturnOp([token]))
        self.module.body.blocks[0].insert_op_before(func, self.func)
        self._funcs[name] = func
        return func

    def _spin_body(self, b: Builder, ptr, index, target_w, kind, diag, rank, epoch,
                   timeout) -> SSAValue:
        """The spin is ONE inline-asm block (:func:`syncopate.ptx.spin_asm`, thread 0 polling,
        the program meeting it at a barrier): Triton evaluates scalars in
        every thread, so a Triton-level loop would let threads leave at different iterations,
        and a scalar atomic that claims the record synchronises the CTA through shared memory:
        divergent threads would deadlock there.  In the asm block thread 0 polls, the CAS picks
        the spin that writes the record (epoch word last, after a system fence, so the host
        never reads half a record), and one ``bar.sync`` releases the program.  The trap
        variant is chosen by the (uniform) sign of the timeout."""
        fty = tt.pointee_type(ptr.type)
        bits = 64 if fty == i64 else 32
        addr = b.insert(tt.PtrToIntOp(ptr, i64)).results[0]
        diag_addr = b.insert(tt.PtrToIntOp(diag, i64)).results[0]
        limit = b.maxsi(timeout, b.sub(b.const(0, i64), timeout))  # |timeout|, 0 = no watchdog
        cons = "=r,l,{t},l,l,r,r,r,r".format(t="l" if bits == 64 else "r")
        args = [addr, target_w, diag_addr, limit, rank, index, kind, epoch]
        trap_if = b.if_(b.cmp("slt", timeout, b.const(0, i64)), [i32])
        for region, trap in ((trap_if.true_region, True), (trap_if.false_region, False)):
            rb = Builder(None, region.blocks[0])
            rb.insert(scf.YieldOp(_asm(rb, spin_asm(bits, trap, one_poller=True), cons, args,
                                       [i32])[0]))
        return opaque_zero(b)

    # -------------------------------------------------------------------------- release
    def signal(self, o) -> list[SSAValue]:
        """A produced-count signal adds only when it has something to add (masked atomic), and
        back-to-back signals share the barrier of the first."""
        prev = o.prev_op
        while isinstance(prev, arith.ConstantOp):
            prev = prev.prev_op  # the flag index resolve-chunks materialises before each signal
        fenced = (prev is not None and id(prev) in self._released) or o.fenced is not None
        b = Builder(o)
        ptr = addptr(b, o.flags, o.index)
        mask = b.cmp("ne", o.value, b.const(0)) if o.op.data == "add" else None
        last = self.release(b, ptr, o.value, o.op.data, mask=mask, barrier=not fenced)
        self._released.add(id(last.op))
        return []

    def release_fence(self, o) -> list[SSAValue]:
        """Every prior store of this program complete before the ``fenced`` signals after it."""
        self.barrier(Builder(o))
        return []

    def barrier(self, b: Builder) -> None:
        """This program's bulk (TMA) stores complete, then a CTA barrier: every thread's stores
        precede what follows."""
        if self.has_bulk_stores:
            _asm(b, "cp.async.bulk.wait_group 0;\n\tmov.b32 $0, 0;", "=r", [], [i32])
        b.insert(gpu.BarrierOp())

    def release(self, b: Builder, ptr: SSAValue, value: SSAValue, op: str = "add",
                mask: SSAValue | None = None, barrier: bool = True) -> SSAValue:
        if barrier:
            self.barrier(b)
        fty = tt.pointee_type(ptr.type)
        rmw = "add" if op == "add" else "exch"
        return b.insert(tt.AtomicRMWOp(rmw, ptr, b.cast(value, fty), mask, sem="release", scope="sys")).results[0]


def _segments(row: list[int]) -> list[tuple[int, int, int]]:
    """Runs ``(start, length, dst)`` with ``row[start + k] == dst + k``."""
    out = []
    start = 0
    while start < len(row):
        end = start + 1
        while end < len(row) and row[end] == row[end - 1] + 1:
            end += 1
        out.append((start, end - start, row[start]))
        start = end
    return out
