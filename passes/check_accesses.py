"""``check-accesses``: refuse what the access analysis cannot prove (docs/soundness.md).

Runs first, before any pass changes the kernel, and changes nothing but the module's
state: it is the compiler's soundness gate.  For every communicated tensor it checks

* **coverage**: every rank ends the schedule holding the whole of each consumed tensor the
  kernel reads (its boxes do not depend on the rank);
* **default deny**: every use of a communicated pointer is one the analysis understands
  (:class:`.access.PointerFlow` over :mod:`.memory_ops`' table): a call, inline assembly or an
  extern function taking it, or the address stored to memory, is refused -- the access it
  makes would get no wait and no signal;
* **roles**: a tensor the schedule delivers to the kernel (consumed: all-gather, all-to-all,
  ring pass) is only read -- a store or an atomic into it would race with the comm programs
  copying it; a tensor the kernel produces for the schedule (reduce-scatter partials) is only
  written, each element by one store -- a read would see a peer's partial or a half-reduced
  value, and an atomic (an update of an element any number of times) could land after the
  chunk's signal; a bound operand the kernel never touches is a mistake in ``operand=``;
* **bounds**: every access stays inside the schedule's tensor.  A box that leaves a dim other
  than the outermost one would alias the next row, which may belong to a chunk that has not
  arrived (the waits cover only the rows the box names).  Bounds come from the box itself when
  it is constant, from the access's mask (``offs < n``: the mask bounds what is really read),
  from the descriptor (TMA clips at the descriptor's shape, which insert-waits requires to be
  the schedule's), or from a hint (which asserts its box).  A mask bound that is a kernel
  argument becomes a launch-time requirement (``n_cols <= 4096``), checked before every launch;
  when a mask bounds the index several ways (``offs < count & offs < M_out``, ``count`` a
  loaded value), any conjunct bounded by an argument proves the access;
* **produced stores, once and whole**: insert-signals counts one store per element and each
  store's whole box as written, so a launch may store an element of a produced tensor only
  once (a store whose box a loop repeats, or the same tile stored twice, is refused; the rest
  is decided per launch from the slice of each store's box recorded in ``stores``,
  :mod:`.store_slices`, :mod:`syncopate.tiling`; two stores of which one has no slice must be
  provably disjoint), and every conjunct of such a store's mask must end at the dim's end (a
  mask on the data, a loaded count or a program id is refused; a kernel argument becomes a
  launch-time *equality*, ``M == 4096``, in ``requirements``); nor may a loop that moves such
  a store's box run a number of iterations that depends on a loaded value (which boxes get
  stored would be decided by the data, like a mask on a loaded count: a chunk never reached
  never leaves).

It refuses, whatever the schedule, a kernel whose programs **wait for each other**: a while
loop whose condition depends on an atomic or a volatile load inside it and that stores nothing
but atomically (a look-back flag, a spin lock, a grid barrier).  Such a kernel relies on the
programs it waits for being resident or started before it; the fused kernel adds comm programs
to the grid and may run tiles in another order, so neither holds, and a barrier sized to the
unfused grid would hang.  Neither the access analysis nor the emulator (which runs every program
as resident) can prove it makes progress.  A loop that takes its work from a shared counter and
stores its results (stream-K) or follows plain loads (a pointer chase) is not such a wait.

It also records which program-id axes the kernel reads (``grid_axes``): the runtime refuses a
grid that is larger than one along an axis the kernel never reads, since every tile would then
run (and signal) more than once per launch.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith, scf
from xdsl.dialects.arith import CMPI_COMPARISON_OPERATIONS
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, OpResult, SSAValue
from xdsl.passes import ModulePass

from syncopate.errors import CompileError
from syncopate.schedule.verify_extent import valid_rows
from syncopate.tiling import StoreSlice
from syncopate_mlir.dialects.syncopate import record, state_of
from syncopate_mlir.dialects.tt import (
    AtomicCASOp,
    AtomicRMWOp,
    BroadcastOp,
    CmpiOp,
    ExpandDimsOp,
    GetNumProgramsOp,
    GetProgramIdOp,
    LoadOp,
    SplatOp,
    TransOp,
)

from .abi_info import operands_of
from .access import Access, analyze_module
from .access_eval import AnalysisFailure, Evaluator
from .ir_utils import ancestors, at_loc, const_int, defined_inside, loc_str, result_axis
from .loop_remap import for_loop_of, ivs_as_iterations
from .memory_ops import Effect, mask_operand, memory_op, writes_memory
from .poly import Axis, IterCount, Poly
from .purity import Purity, is_pure_op
from .store_slices import store_slice

#: signed compares only: ``x <u n`` bounds ``x`` by ``n`` only when ``n`` is not negative, which
#: a launch argument need not be (an unsigned mask yields no bound; the access is refused or
#: hinted instead)
_CMP_UPPER = {"slt": 0, "sle": -1}    # l < r (+1 for <=)
_CMP_LOWER = {"sgt": 0, "sge": -1}    # r < l


def conjuncts(v: SSAValue, ev: Evaluator, depth: int = 0,
              unread: list | None = None) -> list[Poly]:
    """Polynomials ``D`` (in ``v``'s axis space) such that ``v`` implies ``D < 0`` lane-wise.

    Conjuncts the analysis does not understand are dropped: a mask only ever shrinks what an
    access touches, so forgetting one part of it loses precision, never soundness -- for what
    the access may touch.  What it surely touches (a store into a produced tensor, whose
    signal counts its box as written) needs every conjunct read: the dropped ones are
    appended to ``unread``.  Besides signed compares it reads ``~(a >= b)`` (``xori`` with
    true) and ``tl.where(c, x, False)`` (``select``), and a constant true mask."""
    def skip() -> list[Poly]:
        if unread is not None:
            unread.append(v)
        return []

    def sub(x: SSAValue) -> list[Poly]:
        return conjuncts(x, ev, depth + 1, unread)

    if depth > 32 or not isinstance(v, OpResult):
        return skip()
    op = v.op
    if const_int(v) not in (None, 0):
        return []  # true in every lane
    if isinstance(op, arith.AndIOp) or \
            (isinstance(op, arith.SelectOp) and const_int(op.operands[2]) == 0):
        # a & b; tl.where(c, x, False): c and x
        return sub(op.operands[0]) + sub(op.operands[1])
    if isinstance(op, arith.XOrIOp):
        for cmp, other in ((op.operands[0], op.operands[1]), (op.operands[1], op.operands[0])):
            if const_int(other) not in (None, 0) and isinstance(cmp, OpResult) and \
                    isinstance(cmp.op, CmpiOp):  # ~(a >= b): a < b
                return _compare(cmp.op, _NEGATED.get(_predicate(cmp.op)), ev) or skip()
        return skip()
    if isinstance(op, (BroadcastOp, SplatOp)):
        return sub(op.operands[0])
    if isinstance(op, (ExpandDimsOp, TransOp)):
        return [d.map_axes(result_axis(op)) for d in sub(op.operands[0])]
    if isinstance(op, CmpiOp):
        return _compare(op, _predicate(op), ev) or skip()
    return skip()


#: the signed compare that is true exactly where the key is false
_NEGATED = {"slt": "sge", "sge": "slt", "sle": "sgt", "sgt": "sle"}


def _compare(op: CmpiOp, pred: str | None, ev: Evaluator) -> list[Poly]:
    """``[D]`` with ``lhs pred rhs`` implying ``D < 0``, for a signed order ``pred``; else []."""
    try:
        lhs, rhs = ev.value(op.operands[0]), ev.value(op.operands[1])
    except AnalysisFailure:
        return []
    if pred in _CMP_UPPER:
        return [lhs - rhs + Poly.const(_CMP_UPPER[pred])]
    if pred in _CMP_LOWER:
        return [rhs - lhs + Poly.const(_CMP_LOWER[pred])]
    return []


def _predicate(op: CmpiOp) -> str:
    """The comparison's keyword (``slt``, ``ule``, ...) from its typed predicate property."""
    return CMPI_COMPARISON_OPERATIONS[op.predicate.value.data]


@dataclass(frozen=True)
class CheckAccesses(ModulePass):
    name: ClassVar[str] = "check-accesses"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sched, analysis, accesses = analyze_module(op)
        names = analysis.arg_name
        self._deny_unknown_uses(analysis)
        _refuse_spin_waits(analysis.func)
        axes = sorted({o.axis_int for o in analysis.func.walk()
                       if isinstance(o, (GetProgramIdOp, GetNumProgramsOp))})
        bounds: dict[str, int] = {}
        exact: dict[str, int] = {}  # launch-time equalities (a produced store's mask bound)
        purity = Purity(analysis.func)
        stores: list[StoreSlice] = []   # produced stores' boxes, checked at launch
        remarks: list[str] = []
        for param, tensor in operands_of(op).items():
            mine = [a for a in accesses if a.tensor == tensor]
            if not mine:
                raise CompileError(
                    f"the kernel never accesses memory through {param!r} (no load, store, "
                    f"atomic or descriptor op), which operand= binds to the schedule's tensor "
                    f"{tensor!r}: bind the parameter that holds that tensor")
            self._check_role(sched, param, tensor, mine)
            part = analysis.parts.get(param)
            shape = list(sched.tensors[tensor].shape)
            if part is None:
                self._check_coverage(sched, param, tensor, mine)
                limits = shape
            else:
                # view="rank": the boxes (local to the part: this pass runs before
                # append-abi-params offsets the operand) must stay inside the part, which the
                # rank holds completely (its final placement) or computes (its initial one)
                limits = list(part.sizes)
            for a in mine:
                for d, size in enumerate(limits):
                    # past the last row is past the allocation only when the part spans dim 0
                    self._check_dim(a, d, size, analysis.ev, names, bounds,
                                    outer_free=part is None or part.sizes[0] == shape[0],
                                    part=part is not None)
            if sched.is_produced(tensor):
                writes = [a for a in mine if a.kind == "write"]
                padded = any(valid_rows(c) is not None for c in sched.chunks
                             if c.tensor == tensor)
                checked, sliced = set(), []
                for a in writes:
                    s = None if a.dims is None else store_slice(a, limits, names, purity)
                    if isinstance(s, StoreSlice):
                        sliced.append(s)
                        checked.add(a.op)
                    elif s is not None:
                        at = f" at {loc_str(a.op)}" if loc_str(a.op) else ""
                        remarks.append(
                            f"check-accesses: the {a.op.name}{at} of tensor {tensor!r} is not "
                            f"checked at launch for elements stored twice: {s}")
                # every store evaluated: the launch must also store every element (a chunk
                # waits for all of its own; padding rows past a run-time count excepted)
                whole = not padded and len(checked) == len({a.op for a in writes})
                stores.extend(dataclasses.replace(s, whole=whole) for s in sliced)
                _check_written_once(param, tensor, writes, checked)
                for a in writes:
                    _check_whole_box(a, limits, analysis.ev, names, exact, padded)
                if not padded:
                    _check_loop_trips(writes, purity)
        for param, value in exact.items():
            if bounds.get(param, value) < value:
                raise CompileError(
                    f"a store of a produced tensor needs the launch argument {param} == {value} "
                    f"(its mask `index < {param}` must reach the end of the dim it bounds), but "
                    f"an access of another communicated tensor needs {param} <= "
                    f"{bounds[param]}: no launch satisfies both. Make the schedule's shapes "
                    f"match what the kernel indexes")
        record(op, grid_axes=axes, upper_bounds=bounds, stores=tuple(stores),
               remarks=state_of(op).remarks + tuple(remarks),
               **({"requirements": exact} if exact else {}))

    @staticmethod
    def _deny_unknown_uses(analysis) -> None:
        """Refuse the first use of a communicated pointer the analysis does not understand."""
        for r in analysis.flow.refusals:
            raise CompileError(
                f"this {r.op.name} takes a value computed from {analysis.arg_name[r.param]!r}, "
                f"which operand= binds to the communicated tensor "
                f"{analysis.bound[r.param]!r}: {r.reason}. The compiler must see every access "
                f"of a communicated tensor to place its waits and signals", loc_str(r.op))

    @staticmethod
    def _check_role(sched, param: str, tensor: str, accesses: list[Access]) -> None:
        produced = sched.is_produced(tensor)
        for a in accesses:
            if a.kind == Effect.RMW.value:
                _refuse_rmw(a, produced)
        if not produced:
            writes = [a for a in accesses if a.kind == "write"]
            if writes:
                raise CompileError(
                    f"the kernel writes {param!r}, but the schedule delivers tensor {tensor!r} to "
                    f"it (a consumed tensor: chunks of it are copied between ranks while the "
                    f"kernel runs, so this store would race with those copies). Bind operand= "
                    f"to a tensor the kernel only reads, or use a schedule that produces "
                    f"{tensor!r} (reduce_scatter / all_reduce)", loc_str(writes[0].op))
            return
        reads = [a for a in accesses if a.kind == "read"]
        if reads:
            raise CompileError(
                f"the kernel reads {param!r}, which holds tensor {tensor!r} that it produces for "
                f"the schedule (its chunks leave this rank, or peers' partials are added into "
                f"them, while the kernel runs), so the read could see another rank's data. "
                f"Read the values from a separate buffer, or bind operand= to the tensor the "
                f"kernel only writes", loc_str(reads[0].op))

    @staticmethod
    def _check_coverage(sched, param: str, tensor: str, accesses: list[Access]) -> None:
        """A kernel reads a consumed tensor with the same boxes on every rank (the boxes are
        functions of program ids, not of the rank): every rank must end the schedule holding
        the whole tensor, or some read would see rows no chunk delivers (an all-to-all's
        output read by a GEMM over all rows: found by the CPU emulator).  The mirror image:
        the kernel writes a produced tensor with the same boxes on every rank, so every rank
        must start out computing the whole tensor (partials of a reduce-scatter do); a rank
        computing only a block would overwrite what chunks deliver into the rest."""
        t = sched.tensors[tensor]
        produced = sched.is_produced(tensor)
        touched = [a for a in accesses if a.kind == ("write" if produced else "read")]
        if not touched:
            return
        whole = t.full_region.volume
        held_by = t.initial_of if produced else t.final_of
        for r in range(sched.world_size):
            held = sum(p.region.volume for p in held_by(r))
            if held >= whole:
                continue
            if produced:
                raise CompileError(
                    f"the kernel writes {param!r} (tensor {tensor!r}, produced) with the "
                    f"same boxes on every rank, but rank {r} computes only {held} of its "
                    f"{whole} elements (its initial placements): its stores elsewhere would "
                    f"race with the chunks the schedule delivers there. Give the tensor "
                    f"view='rank' (each rank's kernel writes only its part) or a schedule "
                    f"in which every rank computes the whole tensor", loc_str(touched[0].op))
            raise CompileError(
                f"the kernel reads {param!r} (tensor {tensor!r}) with the same boxes on "
                f"every rank, but rank {r} ends the schedule holding {held} of its {whole} "
                f"elements: the reads outside that part would see data no chunk delivers. "
                f"Use a schedule after which every rank holds the whole tensor it reads "
                f"(all_gather, ring_pass), or give the tensor view='rank' in the schedule "
                f"(TensorSpec.view: each rank's kernel then addresses only the part it "
                f"holds, at coordinates relative to it; docs/soundness.md)",
                loc_str(touched[0].op))

    @staticmethod
    def _check_dim(a: Access, d: int, size: int, ev: Evaluator, names: dict,
                   bounds: dict[str, int], outer_free: bool = True, part: bool = False) -> None:
        dim = a.dims[d]
        where = loc_str(a.op)
        what = (f"this {a.op.name} of {a.param!r} (tensor {a.tensor!r}, dim {d} of size {size}"
                f"{' in the part each rank addresses' if part else ''})")
        if dim.lo.is_const and dim.lo.const_value < 0:
            raise CompileError(f"{what} starts at index {dim.lo.const_value}, before the tensor",
                               where)
        if a.hinted or memory_op(a.op).descriptor:
            # a hint asserts its box; a TMA descriptor of the schedule's shape clips at it
            return
        consts = [b.const_value for b in _mask_bounds(a, d, ev) if b.is_const]
        if consts:  # the tightest constant bound
            if min(consts) > size:
                raise CompileError(f"{what} is masked to indices < {min(consts)}, past "
                                   f"the end of the dim: make the schedule's shape match what "
                                   f"the kernel indexes", where)
            return
        # a mask may bound the index several ways (the grouped GEMM's rows: by the group's
        # count, a loaded value, and by the output's rows, a kernel argument); any one that
        # is a kernel argument plus a constant proves the access (a launch-time requirement)
        for upper in _mask_bounds(a, d, ev):
            param, offset = _param_plus_const(upper, names)
            if param is not None:
                limit = size - offset
                bounds[param] = min(bounds.get(param, limit), limit)
                return
        verb = {"read": "reads", "write": "writes"}.get(a.kind, "touches")
        mask = _mask_note(a, d, ev)
        if dim.lo.is_const:
            if dim.lo.const_value + dim.extent > size:
                raise CompileError(f"{what} {verb} indices [{dim.lo.const_value}, "
                                   f"{dim.lo.const_value + dim.extent}), past the end of the dim"
                                   f"{mask or ' and has no mask'}; make the schedule's shape "
                                   f"match what the kernel indexes, or mask the access by "
                                   f"`index < bound` along dim {d}", where)
            return
        span = _loop_span(dim.lo)
        if span is not None and span[0] >= 0:
            last = span[1]
            if last + dim.extent > size:
                raise CompileError(f"{what} {verb} up to index {last + dim.extent} in the last "
                                   f"iteration of its loop, past the end of the dim{mask}: make "
                                   f"the loop's bound match the schedule's shape, or mask the "
                                   f"access by `index < bound` along dim {d}", where)
            return
        if dim.extent > size:
            raise CompileError(f"{what} spans {dim.extent} indices per access, more than the dim "
                               f"holds{mask}: the kernel indexes a tensor of another shape than "
                               f"the schedule's; make them match, or mask the access by "
                               f"`index < bound` along dim {d}", where)
        if d == 0 and outer_free:
            # past the last row is past the allocation: the unfused kernel reads the same
            # memory, and no chunk of this tensor is aliased (docs/soundness.md)
            return
        top = scalar_upper_bound(dim.lo)
        if top is not None:
            if top + dim.extent > size:
                raise CompileError(f"{what} may touch index {top + dim.extent - 1} (its start "
                                   f"is at most {top}), past the end of the dim; make the "
                                   f"schedule's shape match what the kernel indexes", where)
            return
        if d == 0:
            raise CompileError(
                f"cannot prove that {what} stays inside the part: its start {dim.lo} is not "
                f"bounded{mask or ' and the access has no mask along it'}, and past the part's "
                f"last row lie other ranks' rows (the part does not span dim 0). Mask the access "
                f"along dim 0, or make the parts span dim 0 (shard along an inner dim)", where)
        raise CompileError(
            f"cannot prove that {what} stays inside the dim: its start {dim.lo} is not bounded"
            f"{mask or ' and the access has no mask `index < bound` along it'}, so it could "
            f"touch the next row, which may belong to a chunk that has not "
            f"{'arrived' if a.kind == 'read' else 'been sent'}. Mask the access along dim {d} "
            f"by a kernel argument or a constant (e.g. `offs < {size}`), or state its box with "
            f"syncopate.language.hint_region{len(a.dims)}({a.param}, lo0, hi0, ...) before it",
            where)


def _refuse_spin_waits(func) -> None:
    """Refuse the first while loop in which a program waits for another (module docstring)."""
    for loop in func.walk():
        if (isinstance(loop, scf.WhileOp) and _polls_memory(func, loop) and not any(
                writes_memory(o) and memory_op(o).effect is not Effect.RMW for o in loop.walk())):
            raise CompileError(
                "this while loop repeats until a value it reads atomically or volatilely "
                "changes: a program waiting for another (a look-back flag, a lock, a grid "
                "barrier). The fused kernel adds comm programs to the grid and runs tiles in the "
                "order chunks arrive, so the program it waits for may not be running and the "
                "kernel could hang. Move the waiting part into a kernel of its own, launched "
                "after the fused one", loc_str(loop))


class _Polls(Purity):
    """:class:`Purity` read as "does not poll memory inside ``loop``": a value is impure when it
    depends on an atomic or a volatile load inside the loop (memory another program writes);
    values from outside the loop, and a plain load's result given its operands (data the loop
    follows, which the compiler may hoist, not a flag it polls), count as pure.  The loop's
    carried values and the results of branches are followed as :class:`Purity` follows them; a
    value carried by a loop nested inside is assumed to poll."""

    def __init__(self, func, loop: scf.WhileOp):
        super().__init__(func)
        self.loop = loop

    def _pure(self, v: SSAValue) -> tuple[bool, str]:
        op = v.block.parent_op() if isinstance(v, BlockArgument) else v.op
        if not self.loop.is_ancestor(op):
            return True, ""
        if isinstance(v, BlockArgument) and op is not self.loop:
            return False, "a value carried by a loop nested in it"  # assume the worst
        if isinstance(v, OpResult):
            if isinstance(op, (AtomicRMWOp, AtomicCASOp)) or (
                    isinstance(op, LoadOp) and op.is_volatile.value.data):
                return False, "polls memory"
            if not (is_pure_op(op) or isinstance(op, (scf.IfOp, scf.ForOp))):
                return all(self.is_pure(o) for o in op.operands), ""
        return super()._pure(v)


def _polls_memory(func, loop: scf.WhileOp) -> bool:
    """Whether the condition of ``loop`` depends on an atomic or a volatile load inside the
    loop (:class:`_Polls`)."""
    return not _Polls(func, loop).is_pure(loop.regions[0].blocks[0].last_op.operands[0])


def _mask_note(a: Access, d: int, ev: Evaluator) -> str:
    """Why the access's mask, if it has one, proves nothing along dim ``d`` (a clause for the
    refusals above): its bounds there are not kernel arguments (a loaded or computed value
    cannot be checked before the launch), or none of its conjuncts is `index < bound` along
    the dim (naming the first one it does not read: `!=`, an unsigned compare, a float
    compare...).  Empty when there is no mask."""
    mask = mask_operand(a.op)
    if mask is None:
        return ""
    bounds = _mask_bounds(a, d, ev)
    if bounds:
        return (f"; its mask bounds the index along it only by `{bounds[0]}`, not a kernel "
                f"argument or a constant (a loaded or computed bound cannot be checked before "
                f"the launch: add a conjunct `index < <argument>`)")
    unread: list = []
    conjuncts(mask, ev, unread=unread)
    src = next((u for u in unread if isinstance(u, OpResult)), None)
    named = ""
    if src is not None:
        pred = f" {_predicate(src.op)}" if isinstance(src.op, CmpiOp) else ""
        named = f" (the {src.op.name}{pred}{at_loc(src.op)} is not one)"
    return (f"; its mask does not bound the index along it: only signed compares "
            f"`index < bound` (or <=, >, >=, and their &) do{named}")


def _check_written_once(param: str, tensor: str, writes: list[Access], checked: set) -> None:
    """Each element of a produced tensor is stored at most once per launch: insert-signals
    counts one store per element, so a chunk whose elements are stored twice reaches its
    target after the first stores and leaves (or is added into a peer's) holding their values
    (a tile zero-filled and then stored gave rows of zeros).  What is certain here is refused
    here: a store inside a loop must write another box in every iteration (its box depends on
    the loop), and two stores that both run must not store boxes a constant apart by less
    than their extent along every dim (the same tile stored twice).  Every other overlap --
    across programs, iterations and store ops -- is decided per launch by evaluating the
    stores' slices (``checked``: the store ops that have one, :mod:`syncopate.tiling`); two
    stores of which one has none must have disjoint boxes in the program where both run (their
    starts a constant apart along some dim, at least the extent), or sit on the two sides of
    one ``scf.if``."""
    for a in writes:
        if a.dims is None:
            continue
        leaves = set().union(*(d.lo.vars() for d in a.dims))
        for loop in ancestors(a.op, None):
            if not isinstance(loop, (scf.ForOp, scf.WhileOp)) or _at_most_once(loop):
                continue
            if not any(_varies_in(v, loop) for v in leaves):
                raise CompileError(
                    f"this {a.op.name} stores the same box of {param!r} (tensor {tensor!r}, "
                    f"which the kernel produces for the schedule) in every iteration of the "
                    f"loop at {loc_str(loop)}: a produced chunk leaves once its elements are "
                    f"stored, counted one store per element, so it would leave after the first "
                    f"iteration's values. Store the final value once, after the loop",
                    loc_str(a.op))
    for i, a in enumerate(writes):
        for b in writes[i + 1:]:
            if a.dims is None or b.dims is None or _exclusive(a.op, b.op) or \
                    _disjoint(a.dims, b.dims) or \
                    ({a.op, b.op} <= checked and not _overlap(a.dims, b.dims)):
                continue
            raise CompileError(
                f"this {b.op.name} and the one at {loc_str(a.op)} may both store the same "
                f"elements of {param!r} (tensor {tensor!r}, which the kernel produces for the "
                f"schedule): a produced chunk leaves once its elements are stored, counted one "
                f"store per element, so it would leave after the first of them, holding its "
                f"values. Store each element once (compute the final value, then store it), "
                f"or make the two boxes provably disjoint (starts a constant apart)",
                loc_str(b.op))


def _check_loop_trips(writes: list[Access], purity: Purity) -> None:
    """A loop that moves a produced store's box runs a number of iterations that does not
    depend on memory: insert-signals counts the elements stored, so a loop that stops early on
    a loaded count (``while c0 < tl.load(len_ptr + row)``) leaves the rest of the row unstored
    and its chunk never complete -- a mask ``cols < n`` on that count is refused for the same
    reason.  A box whose start is itself loaded (a tile taken from an atomic counter) is the
    kernel's dynamic tiling, which, like the grid, the compiler does not enumerate; a tensor
    whose chunks carry run-time extents (``valid_rows``) is stored up to a loaded count by
    contract, so its caller does not come here."""
    for a in writes:
        if a.dims is None or a.hinted:
            continue
        leaves = set().union(*(d.lo.vars() for d in a.dims))
        if not all(_pure_position(v, purity) for v in leaves if not isinstance(v, Axis)):
            continue
        for loop in ancestors(a.op, None):
            if not isinstance(loop, (scf.ForOp, scf.WhileOp)) or \
                    not any(_varies_in(v, loop) for v in leaves):
                continue
            trip = list(loop.operands[:3]) if isinstance(loop, scf.ForOp) else \
                [loop.regions[0].blocks[0].last_op.operands[0]]
            bad = next((v for v in trip if not purity.is_pure(v)), None)
            if bad is None:
                continue
            raise CompileError(
                f"this {a.op.name} stores a box of {a.param!r} (tensor {a.tensor!r}, which the "
                f"kernel produces for the schedule) that moves with the loop at "
                f"{loc_str(loop)}, whose number of iterations depends on "
                f"{purity.why_impure(bad)}: which elements are stored is then decided by the "
                f"data, and a chunk holding elements the loop never reaches would never leave "
                f"(the fused kernel would hang). Loop over the whole dim with bounds from "
                f"kernel arguments (`range(0, n_cols, BLOCK)`) and select the values instead "
                f"(`tl.where`), or keep the collective after the kernel (fused=False)",
                loc_str(a.op))


def _pure_position(v, purity: Purity) -> bool:
    """Whether box leaf ``v`` is a position that no load decides: an iteration count, an
    ``scf.for`` counter whose start and step are pure (its bound only decides how many
    iterations run), or a pure value."""
    if isinstance(v, IterCount):
        return True
    if isinstance(v, BlockArgument) and isinstance(v.block.parent_op(), scf.ForOp) and \
            v.index == 0:
        loop = v.block.parent_op()
        return purity.is_pure(loop.lb) and purity.is_pure(loop.step)
    return isinstance(v, SSAValue) and purity.is_pure(v)


def _at_most_once(loop) -> bool:
    """An ``scf.for`` with constant bounds that runs at most one iteration."""
    if not isinstance(loop, scf.ForOp):
        return False
    lb, ub, step = const_int(loop.lb), const_int(loop.ub), const_int(loop.step)
    return None not in (lb, ub, step) and step > 0 and ub - lb <= step


def _varies_in(v, loop) -> bool:
    """Whether the value of leaf ``v`` of a box may change from one iteration of ``loop`` to
    the next (the loop's counter, or a value defined in its body)."""
    if isinstance(v, IterCount):
        return v.loop is loop
    return isinstance(v, SSAValue) and defined_inside(v, loop)


def _exclusive(x, y) -> bool:
    """Whether ops ``x`` and ``y`` sit in the two different regions of one ``scf.if``."""
    for anc in ancestors(x, None):
        if isinstance(anc, scf.IfOp) and anc in ancestors(y, None):
            rx = next(r for r in anc.regions if r.is_ancestor(x))
            return not rx.is_ancestor(y)
    return False


def _disjoint(a: list, b: list) -> bool:
    """Two boxes whose starts are a constant apart along some dim, by at least the extent of
    the box that comes first."""
    for da, db in zip(a, b):
        gap = da.lo - db.lo
        if gap.is_const and (gap.const_value >= db.extent or -gap.const_value >= da.extent):
            return True
    return False


def _overlap(a: list, b: list) -> bool:
    """Two boxes whose starts are a constant apart along every dim, by less than the extent
    of the box that comes first: they overlap wherever both are stored."""
    return all((da.lo - db.lo).is_const for da, db in zip(a, b)) and not _disjoint(a, b)


def _check_whole_box(a: Access, limits: list[int], ev: Evaluator, names: dict,
                     exact: dict[str, int], padded: bool) -> None:
    """A store into a produced tensor stores every element of its box that lies inside the
    tensor: insert-signals counts the box as written (``PRODUCED[c] += |box & c|``), so an
    element its mask skips would leave holding stale data -- or, when the box's stores fall
    short, the chunk would never complete.  Every conjunct of the mask must therefore be
    ``index < bound`` along a dim with the bound at the dim's end: a constant at or past it, or
    a kernel argument (plus a constant), which becomes a launch-time *equality* (``M == 4096``:
    a smaller ``M`` would leave rows unstored but counted); or a lower bound no index goes
    under (``offs >= 0``).  A mask that depends on the data (``acc > 0``), a loaded count or a
    program id is refused.  ``padded``: the schedule's chunks of the tensor carry run-time
    extents (``valid_rows``, docs/moe.md): rows past the count are padding by contract, so
    dim 0 may be masked by anything."""
    mask = mask_operand(a.op)
    if mask is None or a.dims is None or a.hinted or memory_op(a.op).descriptor:
        return
    where = loc_str(a.op)
    what = (f"this {a.op.name} of {a.param!r} (tensor {a.tensor!r}, which the kernel produces "
            f"for the schedule)")
    why = ("the chunk's signal counts every element of the store's box inside the tensor as "
           "written, so an element the mask skips would leave holding stale data")
    todo = ("Store the whole tile (select the value instead: `tl.where(cond, value, 0.0)`, "
            "masking only by `index < size` along each dim)")
    unread: list = []
    for conj in conjuncts(mask, ev, unread=unread):
        # each dim reads the conjunct as `index < index - conj`; one reading that holds for
        # every index of the box inside the tensor proves it (a store of one element [b, m]
        # masked by `m < M` reads it along dim 0 too, as `b < b - m + M`, which proves nothing)
        refusal = None
        for d, size in enumerate(limits):
            index = a.dims[d].index
            if index is None:
                continue
            below = ivs_as_iterations(index + conj)
            if below.is_const and below.const_value < 0:
                break  # index >= L for a constant L <= 0: true for every index
            bound = ivs_as_iterations(index - conj)
            if bound.axes():
                continue
            if padded and d == 0:
                break
            if bound.is_const:
                lo = a.dims[d].lo
                if bound.const_value >= size or (lo.is_const and
                                                 lo.const_value + a.dims[d].extent
                                                 <= bound.const_value):
                    break
                refusal = refusal or (
                    f"{what} is masked to indices < {bound.const_value} along dim {d}, inside "
                    f"the dim of size {size}: {why}. {todo}")
                continue
            param, offset = _param_plus_const(bound, names)
            if param is None:
                refusal = refusal or (
                    f"{what} is masked along dim {d} by `index < {bound}`, a bound that is not "
                    f"the dim's end ({size}) nor a kernel argument: {why}. {todo}")
                continue
            if exact.get(param, size - offset) != size - offset:
                refusal = refusal or (
                    f"{what} is masked along dim {d} by `index < {bound}`, which makes the "
                    f"launch need {param} == {size - offset}, but the bound of another dim or "
                    f"store of a produced tensor needs {param} == {exact[param]}: no launch "
                    f"stores both whole. "
                    f"Make the schedule's shapes match what the kernel indexes")
                continue
            exact[param] = size - offset
            break
        else:
            raise CompileError(refusal or (
                f"{what} is masked by a condition that is not `index < bound` along one dim of "
                f"the tensor ({conj} < 0): {why}. {todo}"), where)
    if unread:
        src = unread[0]
        raise CompileError(
            f"{what} is masked by a condition the compiler does not read as `index < bound` "
            f"(the {src.op.name if isinstance(src, OpResult) else 'value'}{at_loc(src)}: it "
            f"may depend on the data or on a loaded value): "
            f"{why}. {todo}", where)


def _refuse_rmw(a: Access, produced: bool) -> None:
    """An atomic (or a TMA reduction) into a communicated tensor, refused with the reason its
    role gives (docs/soundness.md, "Atomics")."""
    what = f"this {a.op.name} ({memory_op(a.op).source}) updates {a.param!r} in place"
    if not produced:
        raise CompileError(
            f"{what}, but the schedule delivers tensor {a.tensor!r} to the kernel (a consumed "
            f"tensor: chunks of it are copied between ranks while the kernel runs, so the "
            f"update would race with those copies, and a read-modify-write is a write). "
            f"Update a separate buffer, or bind operand= to a tensor the kernel only reads",
            loc_str(a.op))
    raise CompileError(
        f"{what}, and the kernel produces tensor {a.tensor!r} for the schedule: a produced "
        f"chunk leaves (or is reduced) once its elements are written, counted one store per "
        f"element, but an atomic may update an element any number of times (split-K), so the "
        f"chunk could leave before its last update, and the value it returns would read "
        f"another rank's data. Write each element of {a.tensor!r} once with tl.store (reduce "
        f"split-K partials inside the kernel), or run the collective after the kernel "
        f"(fused=False / an unfused reduce-scatter)", loc_str(a.op))


def scalar_upper_bound(p: Poly) -> int | None:
    """The largest value ``p`` (a scalar polynomial) can take, from the ranges of its leaves,
    or None when some leaf is unbounded: ``x % c`` is below ``c`` for a constant ``c > 0``
    (also when ``x`` is negative: ``|x % c| < c``), ``x & m`` at most ``m`` for a constant
    ``m >= 0``, ``x // c`` (signed) at most ``max(x) // c``; a term must have a positive coefficient
    and one leaf.  Attention's ``h = pid % H_Q`` over constexpr ``H_Q`` (a head index in an
    inner dim) is bounded this way; starts are non-negative (see ``_check_dim``)."""
    if p.axes():
        return None
    total = 0
    for mono, coef in p.terms.items():
        if mono == ():
            total += coef
            continue
        if len(mono) != 1 or coef < 0:
            return None
        top = _leaf_upper(mono[0], 0)
        if top is None:
            return None
        total += coef * top
    return total


def _leaf_upper(v, depth: int) -> int | None:
    if depth > 16 or not isinstance(v, OpResult):
        return None
    op = v.op
    # (no unsigned division: a negative dividend would read as a huge one)
    if isinstance(op, (arith.RemSIOp, arith.RemUIOp, arith.DivSIOp, arith.AndIOp)):
        c = const_int(op.rhs)
        if c is None or c < (0 if isinstance(op, arith.AndIOp) else 1):
            return None
        if isinstance(op, arith.AndIOp):
            return c
        if isinstance(op, (arith.RemSIOp, arith.RemUIOp)):
            return c - 1
        top = _leaf_upper(op.lhs, depth + 1)
        return None if top is None else max(top, 0) // c
    return None


def _loop_span(lo: Poly) -> tuple[int, int] | None:
    """The smallest and largest values of ``lo = k * iv + c`` over the iterations of ``iv``'s ``scf.for``, when
    the loop's bounds and step are constants and ``k >= 0`` (a KV loop ``for start_n in
    range(0, SEQ_KV, BLOCK_N)`` with a constexpr ``SEQ_KV`` reads rows ``start_n + [0,
    BLOCK_N)``: in bounds without a mask when ``BLOCK_N`` divides ``SEQ_KV``), else None."""
    const, coef, iv = 0, 0, None
    for mono, c in lo.terms.items():
        if mono == ():
            const = c
        elif len(mono) == 1 and for_loop_of(mono[0]) is not None and iv in (None, mono[0]):
            iv, coef = mono[0], c
        else:
            return None
    if iv is None or coef < 0:
        return None
    loop = for_loop_of(iv)
    lb, ub, step = const_int(loop.lb), const_int(loop.ub), const_int(loop.step)
    if None in (lb, ub, step) or step <= 0 or ub <= lb:
        return None  # (ub <= lb: the loop never runs, nothing to bound)
    last = lb + (ub - 1 - lb) // step * step
    return coef * lb + const, coef * last + const


def _mask_bounds(a: Access, d: int, ev: Evaluator) -> list[Poly]:
    """Every upper bound ``B`` (no axis variables) that a conjunct of the access's mask imposes
    on its index along dim ``d`` (``index < B`` in every active lane)."""
    index = a.dims[d].index
    mask = mask_operand(a.op)
    if index is None or mask is None:
        return []
    # one form for a loop's counter: a loop-carried pointer's start is in iterations, a mask
    # may be written from the induction variable (loop_remap.ivs_as_iterations says why)
    return [b for b in (ivs_as_iterations(index - conj) for conj in conjuncts(mask, ev))
            if not b.axes()]


def _param_plus_const(p: Poly, names: dict) -> tuple[str | None, int]:
    """``(name, c)`` when ``p == param + c`` for a kernel scalar parameter."""
    const = 0
    param = None
    for mono, coef in p.terms.items():
        if mono == ():
            const = coef
        elif len(mono) == 1 and coef == 1 and isinstance(mono[0], BlockArgument) \
                and mono[0] in names and param is None:
            param = names[mono[0]]
        else:
            return None, 0
    return param, const
