"""Access analysis: which region of a communicated tensor each tile reads or writes.

For every op that accesses memory (:data:`.memory_ops.ACCESSES`: loads, stores, atomics and
descriptor ops) through a pointer or descriptor derived from a communicated kernel parameter,
the analysis derives a box of the *global* tensor (the schedule's tensor) as
``[lo_d, lo_d + extent_d)`` per dim, where ``lo_d`` is a :class:`~passes.poly.Poly` over scalar
SSA values (program ids, loop counters, kernel arguments) and ``extent_d`` is a constant (the
tile size).  The passes then know, symbolically, the chunks a tile touches and can place waits
and signals and re-materialise the bounds where they need them.

What it understands (everything Triton 3.6 emits at TTIR for the usual kernels): pointer
arithmetic built from ``splat``/``broadcast``/``expand_dims``/``trans``/``make_range`` and integer
``+ - *``, masked or not (masks only shrink a box, and the box is clipped to the tensor by the
chunks it is compared with); loop-carried pointers advanced by a loop-invariant step (the
``a_ptrs += BLOCK_K * stride_ak`` idiom); block pointers (Triton rewrites them into this form
before our stage on sm_90); device-side tensor descriptors (``tl.make_tensor_descriptor``) and
descriptor parameters.  Strides passed as kernel arguments are matched to dims in parameter
order (``stride_am`` before ``stride_ak``) and become launch-time requirements
(``stride_am == K``) that the runtime checks, so a wrong guess is a clear error, never a silent
miscompile.  ``x % M`` on an index tensor (the tutorial's wrap-around for ragged tiles) is read
as ``x``: the wrapped rows only feed outputs the store masks out.

Which ops those are is found *forward* from the parameters (:class:`PointerFlow`): every value
derived from a communicated pointer is followed through every op, loop and branch, so an access
is never missed because its address is computed in a way the box evaluator does not know; uses
the analysis does not understand (a call, inline assembly, the pointer stored to memory) are
recorded for ``check-accesses`` to refuse.

Where it cannot derive a box, :class:`~syncopate.errors.CompileError` names the load and the
annotation to add: ``syncopate.language.hint_region2(ptr, lo0, hi0, ...)`` before the access,
which survives into TTIR as a ``tt.call`` to a no-inline function and is erased here.

The symbolic evaluator of index and pointer values lives in :mod:`.access_eval`, what a hint
call looks like in :mod:`.access_hints`; this module turns their results into boxes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.dialects import cf, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, Operation, SSAValue

from syncopate.errors import CompileError, ScheduleError
from syncopate_mlir.dialects.syncopate import schedule_of
from syncopate_mlir.dialects.tt import (FuncOp, MakeTensorDescOp, WhileOp, element_type,
                                        is_ptr_like, shape_of)

from .abi_info import operands_of
from .access_eval import AnalysisFailure, Evaluator, PtrVal
from .access_hints import hint_bounds, is_hint
from .ir_utils import (
    const_int,
    func_body,
    is_desc_type,
    is_int_type,
    kernel_func,
    loc_str,
    param_names,
)
from .memory_ops import (
    COMPILER,
    CONTROL,
    NO_ACCESS,
    Effect,
    MemoryOp,
    accessed_through,
    box_indices,
    denial,
    may_touch_memory,
    memory_op,
    written_values,
)
from .poly import Poly


# --------------------------------------------------------------------------------------------
# regions
# --------------------------------------------------------------------------------------------

@dataclass
class DimRange:
    lo: Poly       # scalar polynomial (no axis variables)
    extent: int    # hi = lo + extent
    #: the index along this dim as a polynomial with the tile's axis variables (pointer
    #: accesses): what a mask compares against (check-accesses reads bounds from masks)
    index: Poly | None = None

    def __repr__(self) -> str:
        return f"[{self.lo}, +{self.extent})"


@dataclass
class Access:
    """One access of a communicated tensor by one op."""

    op: Operation
    kind: str                 # "read" | "write" | "rmw" (memory_ops.Effect)
    param: str                # the kernel parameter it goes through
    tensor: str               # the schedule tensor it is bound to
    #: the box; None only for a read-modify-write whose box could not be derived (every
    #: atomic on a communicated tensor is refused by check-accesses before a box is needed)
    dims: list[DimRange] | None
    requirements: dict[str, int] = field(default_factory=dict)  # param -> required value
    hinted: bool = False


def analyze_module(module: ModuleOp):
    """``(sched, analysis, accesses)`` of a module carrying a schedule and operand bindings: the
    common start of every pass that reasons about accesses."""
    sched = schedule_of(module)
    operands = operands_of(module)
    shapes = {t: list(sched.tensors[t].shape) for t in operands.values()}
    analysis = AccessAnalysis(module, operands, shapes, rank_parts(sched, operands))
    return sched, analysis, analysis.run()


@dataclass(frozen=True)
class RankPart:
    """The part of a ``view="rank"`` tensor rank ``r``'s kernel addresses: the box of
    ``sizes`` at ``r * step``; the operand's pointer is advanced by ``r * offset`` elements
    (``offset``: ``step`` in row-major elements of the global shape)."""

    sizes: tuple[int, ...]
    step: tuple[int, ...]
    offset: int


def rank_parts(sched, operands: dict[str, str]) -> dict[str, RankPart]:
    """Kernel parameter -> :class:`RankPart` for the operands bound to ``view="rank"``
    tensors (a schedule whose parts the kernel cannot offset is refused here)."""
    out = {}
    for param, tensor in operands.items():
        spec = sched.tensors[tensor]
        if spec.view != "rank":
            continue
        try:
            sizes, step = sched.rank_part(tensor)
        except ScheduleError as e:
            raise CompileError(f"operand {param!r} is bound to tensor {tensor!r}, whose view is "
                               f"'rank', but: {'; '.join(e.problems)}") from None
        strides = _row_major_strides(list(spec.shape))
        out[param] = RankPart(tuple(sizes), tuple(step),
                              sum(s * st for s, st in zip(step, strides)))
    return out


def _row_major_strides(shape: list[int]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def pointer_region(ptr: PtrVal, axis_lens: list[int], shape: list[int], names: dict,
                   op: Operation) -> tuple[list[DimRange], dict[str, int]]:
    """Decompose an element offset polynomial into a box of a row-major tensor of ``shape``.

    ``names`` maps kernel parameter block arguments to their names (for stride matching)."""
    nd = len(shape)
    strides = _row_major_strides(shape)
    # stride parameters: integer kernel parameters used as factors of the offset
    stride_params: dict[SSAValue, None] = {}
    for mono in ptr.off.terms:
        for v in mono:
            if isinstance(v, BlockArgument) and v in names and is_int_type(v.type):
                stride_params[v] = None
    params = sorted(stride_params, key=lambda a: a.index)
    if len(params) > nd:
        raise AnalysisFailure(op, f"the offset uses {len(params)} stride arguments "
                                  f"({', '.join(names[p] for p in params)}) for a {nd}-d tensor")
    dim_of_param = {p: d for d, p in enumerate(params)}
    requirements = {names[p]: strides[dim_of_param[p]] for p in params}
    per_dim: list[Poly] = [Poly() for _ in range(nd)]
    free_dims = [d for d in range(nd) if d not in dim_of_param.values()]
    for mono, coef in ptr.off.terms.items():
        ps = [v for v in mono if v in dim_of_param]
        if len(ps) > 1:
            args = " * ".join(names[a] for a in sorted(ps, key=lambda a: a.index))
            raise AnalysisFailure(op, f"an offset term multiplies two integer arguments "
                                      f"({args}): the analysis takes each integer argument in "
                                      f"an address for the stride of one dim (an index "
                                      f"computed from a size, such as `M - 1 - offs`, is "
                                      f"not one)")
        if ps:
            rest = list(mono)
            rest.remove(ps[0])
            per_dim[dim_of_param[ps[0]]] = per_dim[dim_of_param[ps[0]]] + Poly({tuple(rest): coef})
            continue
        # constant stride: the outermost free dim whose stride divides the coefficient
        for d in free_dims:
            if coef % strides[d] == 0:
                per_dim[d] = per_dim[d] + Poly({mono: coef // strides[d]})
                break
        else:
            raise AnalysisFailure(op, f"cannot attribute offset term {Poly({mono: coef})} to a dim")
    dims = []
    for d, poly in enumerate(per_dim):
        try:
            scalar, coefs = poly.split_axes()
        except ValueError as e:
            raise AnalysisFailure(op, str(e))
        lo, extent = scalar, 1
        for axis, c in coefs.items():
            if not c.is_const:
                raise AnalysisFailure(op, f"the tile's extent along dim {d} is not a constant "
                                          f"(axis {axis} scaled by {c})")
        steps = [(c.const_value, axis_lens[axis] if axis < len(axis_lens) else 1)
                 for axis, c in coefs.items()]
        radix = _mixed_radix(steps)
        if radix is not None:
            # several tile axes that together enumerate a contiguous range (an interleaved
            # [BLOCK, 2] view of a row: steps 2 and 1): one box of their product
            dims.append(DimRange(lo, radix, poly))
            continue
        for axis, c in coefs.items():
            n = axis_lens[axis] if axis < len(axis_lens) else 1
            k = c.const_value
            if abs(k) != 1 and n > 1:
                # a tile walks a dim element by element; a step of k means the kernel's layout
                # is not the schedule's (e.g. a row stride of 128 over rows of 64 elements)
                raise CompileError(
                    f"this {op.name} steps through dim {d} of the communicated tensor by {k} "
                    f"elements per tile element: either the kernel indexes a tensor laid out "
                    f"differently from the schedule's shape {list(shape)} (row-major strides "
                    f"{strides}) -- make the schedule's shape match what the kernel indexes, or "
                    f"pass the strides as arguments -- or it reads one index in every {abs(k)} (a "
                    f"strided tile), whose elements the analysis does not enumerate: state the "
                    f"box it reads with syncopate.language.hint_region2 right before it",
                    loc_str(op))
            if k < 0:
                lo = lo + Poly.const(k * (n - 1))
            extent += abs(k) * (n - 1)
        dims.append(DimRange(lo, extent, poly))
    return dims, requirements


def _mixed_radix(steps: list[tuple[int, int]]) -> int | None:
    """The number of indices ``sum_i k_i * a_i`` (``a_i`` in ``[0, n_i)``) enumerates when,
    sorted by step, the steps are positive, the smallest is 1 and each next one is the product
    of the sizes before it (a mixed-radix numbering: every index of ``[0, prod n_i)`` exactly
    once); None otherwise, or when fewer than two axes have more than one element (the
    single-axis rules apply)."""
    steps = sorted((k, n) for k, n in steps if n > 1)
    if len(steps) < 2:
        return None
    span = 1
    for k, n in steps:
        if k != span:
            return None
        span *= n
    return span


class AccessAnalysis:
    """Finds and describes every access of the communicated tensors in a kernel.

    ``operands`` maps kernel parameter names to schedule tensor names; ``shapes`` maps tensor
    names to their global shapes."""

    def __init__(self, module: ModuleOp, operands: dict[str, str], shapes: dict[str, list[int]],
                 parts: dict[str, RankPart] | None = None):
        #: operands whose kernel code addresses only the rank's part (``view="rank"``)
        self.parts = parts or {}
        self.func = kernel_func(module)
        self.shapes = shapes
        names = param_names(module, self.func)
        self.arg_name = {a: names[i] for i, a in enumerate(func_body(self.func).args)}
        self.by_name = {n: a for a, n in self.arg_name.items()}
        for p in operands:
            if p not in self.by_name:
                raise CompileError(
                    f"operand {p!r} is not a (non-constexpr) parameter of kernel "
                    f"{self.func.sym_name.data}; its parameters are {', '.join(self.by_name)}")
        self.bound = {self.by_name[p]: operands[p] for p in operands}
        self.ev = Evaluator()
        self.hints = [op for op in self.func.walk() if is_hint(op)]
        self.accesses: list[Access] = []

    # hints ----------------------------------------------------------------------------------
    def _hint_for(self, op: Operation, base: BlockArgument) -> Operation | None:
        """The closest hint before ``op`` (same block or an enclosing one) naming ``base``."""
        cur = op
        while cur is not None:
            block = cur.parent_block()
            if block is None:
                return None
            prev = cur.prev_op
            while prev is not None:
                if prev in self.hints and prev.operands and prev.operands[0] is base:
                    return prev
                prev = prev.prev_op
            cur = block.parent_op()
            if cur is self.func:
                return None
        return None

    # analysis -------------------------------------------------------------------------------
    def run(self) -> list[Access]:
        self.flow = PointerFlow(self.func, self.bound)
        self.accesses = []
        for op, bases in self.flow.accesses.items():
            if len(bases) > 1:
                names = " and ".join(sorted(repr(self.arg_name[b]) for b in bases))
                raise CompileError(
                    f"the address of this {op.name} is computed from {names}, which operand= "
                    f"binds to communicated tensors: the analysis cannot tell which tensor it "
                    f"touches. Access each communicated tensor through its own pointer",
                    loc_str(op))
            self.accesses.append(self._analyze(op, memory_op(op), next(iter(bases))))
        return self.accesses

    def _analyze(self, op: Operation, mem: MemoryOp, base: BlockArgument) -> Access:
        kind, name = mem.effect.value, self.arg_name[base]
        tensor = self.bound[base]
        shape = self.shapes[tensor]
        # a hint before the access still asserts that its box lies inside the tensor
        # (docs/soundness.md), also when the box itself could be derived: the bound check
        # must take it, or the refusal that asks for a hint could never be answered
        hint = self._hint_for(op, base)
        try:
            part = self.parts.get(name)
            if part is not None and (mem.descriptor or hint is not None):
                raise CompileError(
                    f"this {op.name} goes through {name!r}, bound to tensor {tensor!r} whose "
                    f"view is 'rank' (the kernel addresses the rank's part): only plain "
                    f"pointer accesses, whose boxes the analysis derives, can be offset by the "
                    f"part; a tensor descriptor or a hint_region would state a box in other "
                    f"coordinates. Use pointer loads/stores for this operand, or a "
                    f"view='global' schedule", loc_str(op))
            if mem.descriptor:
                dims, req = self._descriptor_region(op, shape)
            else:
                ptr = self.ev.pointer(accessed_through(op))
                if ptr.base is not base:
                    raise AnalysisFailure(op, "the address is not an offset from one parameter")
                axis_lens = shape_of(accessed_through(op).type)
                if part is not None:
                    ptr, rank_var = self._strip_rank_offset(ptr, part, op)
                dims, req = pointer_region(ptr, axis_lens, shape, self.arg_name, op)
                if part is not None and rank_var is not None:
                    # the operand was offset by syn_rank * part.offset (append-abi-params):
                    # the box of the global tensor is the local box moved by rank * step
                    dims = [DimRange(d.lo + Poly({(rank_var,): k}) if k else d.lo, d.extent,
                                     d.index) for d, k in zip(dims, part.step)]
            return Access(op, kind, name, tensor, dims, req, hinted=hint is not None)
        except AnalysisFailure as failure:
            if mem.effect is Effect.RMW:
                # refused by check-accesses whatever its box: asking for a hint would mislead
                return Access(op, kind, name, tensor, None)
            if hint is not None:
                return self._from_hint(op, kind, base, tensor, shape, hint)
            where, at = loc_str(op), loc_str(failure.op)
            nd = len(shape)
            args = ", ".join(f"lo{d}, hi{d}" for d in range(nd))
            raise CompileError(
                f"cannot derive which region of tensor {tensor!r} ({name}) this {op.name} "
                f"{'reads' if kind == 'read' else 'writes'}: {failure.reason}"
                + (f" (at {at})" if at and at != where else "")
                + f". Add `syncopate.language.hint_region{nd}({name}, {args})` right before "
                  f"it, giving the box [lo, hi) of the global tensor the access touches, or "
                  f"rewrite the address arithmetic with make_range/splat/+/*.",
                where)

    def _strip_rank_offset(self, ptr: PtrVal, part: RankPart, op: Operation):
        """``(local pointer, syn_rank)``: ``ptr`` without the ``syn_rank * part.offset`` term
        append-abi-params added to a ``view="rank"`` operand (``(ptr, None)`` before it ran,
        when boxes are local to the part).  Any other use of ``syn_rank`` in the address is
        refused: the analysis would attribute it to some dim by its stride and miss the
        part's move."""
        rank = self.by_name.get("syn_rank")
        if rank is None:
            return ptr, None
        rank_terms = {m: c for m, c in ptr.off.terms.items() if rank in m}
        if rank_terms != ({((rank,)): part.offset} if part.offset else {}):
            raise CompileError(
                f"the address of this {op.name} through {self.arg_name[ptr.base]!r} uses "
                f"syn_rank otherwise than the part offset append-abi-params adds "
                f"(syn_rank * {part.offset}): {Poly(rank_terms)}", loc_str(op))
        rest = Poly({m: c for m, c in ptr.off.terms.items() if rank not in m})
        return PtrVal(ptr.base, rest), rank

    def _from_hint(self, op, kind, base, tensor, shape, hint) -> Access:
        bounds = hint_bounds(hint, self.ev)
        if len(bounds) != 2 * len(shape):
            raise CompileError(
                f"hint_region for {self.arg_name[base]} gives {len(bounds) // 2} dims but tensor "
                f"{tensor!r} has {len(shape)}: use hint_region{len(shape)}", loc_str(hint))
        dims = []
        for d in range(len(shape)):
            lo, hi = bounds[2 * d], bounds[2 * d + 1]
            ext = hi - lo
            if not ext.is_const or ext.const_value <= 0:
                raise CompileError(f"hint_region: hi{d} - lo{d} must be a positive constant (the "
                                   f"tile size), got {ext}", loc_str(hint))
            dims.append(DimRange(lo, ext.const_value))
        return Access(op, kind, self.arg_name[base], tensor, dims, {}, hinted=True)

    # descriptors ----------------------------------------------------------------------------
    def _descriptor(self, v: SSAValue):
        """(base parameter, shape values, stride values, block shape) of a descriptor."""
        block = shape_of(_desc_block_type(v.type))
        if isinstance(v, BlockArgument):
            owner = v.block.parent_op()
            if isinstance(owner, FuncOp):
                return v, None, None, block
            raise AnalysisFailure(owner, "a loop-carried tensor descriptor")
        op = v.op
        if not isinstance(op, MakeTensorDescOp):
            raise AnalysisFailure(op, f"cannot follow a descriptor through '{op.name}'")
        base = self.ev.pointer(op.operands[0])
        if not base.off.is_const or base.off.const_value != 0:
            raise AnalysisFailure(op, "the descriptor's base is offset from the parameter")
        nd = len(block)
        shape_vals = list(op.operands[1:1 + nd])
        stride_vals = list(op.operands[1 + nd:1 + 2 * nd])
        return base.base, shape_vals, stride_vals, block

    def _descriptor_region(self, op: Operation, shape: list[int]):
        base, shape_vals, stride_vals, block = self._descriptor(accessed_through(op))
        nd = len(shape)
        if len(block) != nd:
            raise AnalysisFailure(op, f"a {len(block)}-d descriptor over a {nd}-d tensor")
        req: dict[str, int] = {}
        if shape_vals is not None:
            strides = _row_major_strides(shape)
            for d in range(nd):
                self._require(op, shape_vals[d], shape[d], f"descriptor shape[{d}]", req)
                self._require(op, stride_vals[d], strides[d], f"descriptor stride[{d}]", req)
        indices = box_indices(op, nd)
        if indices is None:
            raise AnalysisFailure(op, "a descriptor gather or scatter takes its rows from a "
                                      "tensor of offsets, which the analysis does not follow")
        dims = [DimRange(self.ev.value(indices[d]), block[d]) for d in range(nd)]
        return dims, req

    def _require(self, op, value: SSAValue, expected: int, what: str, req: dict) -> None:
        c = const_int(value)
        if c is not None:
            if c != expected:
                raise CompileError(f"{what} is {c} but the schedule's tensor needs {expected}",
                                   loc_str(op))
            return
        p = self.ev.value(value)
        leaf = next(iter(p.terms)) if len(p.terms) == 1 else None
        if leaf and len(leaf) == 1 and p.terms[leaf] == 1 and leaf[0] in self.arg_name:
            req[self.arg_name[leaf[0]]] = expected
        # otherwise: a computed value; checked by the runtime on the descriptor's operand args


def address_polys(op: Operation, ev: Evaluator) -> list[Poly] | None:
    """The index polynomials of a memory access (its flat offset, or a descriptor's start
    indices); ``[]`` for an op that accesses no memory, None when the analysis cannot follow
    its address (a descriptor gather/scatter's offsets tensor, an address it cannot evaluate)."""
    mem = memory_op(op)
    if mem is None:
        return []
    try:
        if not mem.descriptor:
            return [ev.pointer(accessed_through(op)).off]
        if mem.index_start is None:
            return None
        return [ev.value(v) for v in op.operands[mem.index_start:]]
    except AnalysisFailure:
        return None


def _desc_block_type(t):
    return t.parameters[0] if hasattr(t, "parameters") and t.parameters else t



# --------------------------------------------------------------------------------------------
# where communicated pointers go (default deny)
# --------------------------------------------------------------------------------------------

_COMPILER = tuple(COMPILER)
_NO_ACCESS = tuple(NO_ACCESS)
_CONTROL = tuple(CONTROL)


def carries_address(t) -> bool:
    """Whether a value of type ``t`` can hold an address: a pointer, a descriptor, or an integer
    wider than a bit (``tt.ptr_to_int``'s result and arithmetic on it); an ``i1`` (a compare)
    or a float cannot."""
    e = element_type(t)
    if is_ptr_like(t) or is_desc_type(t):
        return True
    width = getattr(getattr(e, "width", None), "data", None)
    return is_int_type(e) and (width is None or width > 1)


@dataclass
class Refusal:
    """A use of a communicated pointer the analysis does not understand."""

    op: Operation
    param: BlockArgument
    reason: str


class PointerFlow:
    """Every value computed from the communicated parameters ``params``, followed forward
    through every op, loop-carried value and branch of ``func``.

    ``accesses`` maps each op that accesses memory (:data:`.memory_ops.ACCESSES`) through such
    a value to the parameters its address derives from, in the order the walk meets them;
    ``refusals`` lists the uses nothing may make of a communicated pointer: an op that may
    touch memory in ways the analysis does not model (:data:`.memory_ops.DENIED`, or an op no
    table classifies) and an address written to memory, from where any access could reach the
    tensor unseen.  Values flow through ops without memory effects (pointer arithmetic,
    casts, selects, ``ptr_to_int``/``int_to_ptr``) into every result that can hold an address,
    and through ``scf``/``cf`` into the block arguments and results they feed.  Hint calls and
    the syncopate ops the later passes insert are neither followed nor refused."""

    def __init__(self, func: Operation, params):
        self.accesses: dict[Operation, set[BlockArgument]] = {}
        self.refusals: list[Refusal] = []
        seen: dict[SSAValue, set[BlockArgument]] = {}
        work = [(p, p) for p in params]
        while work:
            v, param = work.pop()
            if param in seen.setdefault(v, set()):
                continue
            seen[v].add(param)
            for use in list(v.uses):
                for out in self._onward(use.operation, use.index, param):
                    work.append((out, param))
        # walk order, so that the analysis reports the first access first
        order = {id(o): i for i, o in enumerate(func.walk())}
        self.accesses = dict(sorted(self.accesses.items(), key=lambda kv: order[id(kv[0])]))
        self.refusals.sort(key=lambda r: order.get(id(r.op), -1))

    def _refuse(self, op: Operation, param: BlockArgument, reason: str) -> list:
        self.refusals.append(Refusal(op, param, reason))
        return []

    def _onward(self, op: Operation, index: int, param: BlockArgument) -> list[SSAValue]:
        """The values through which the address in operand ``index`` of ``op`` flows on."""
        mem = memory_op(op)
        if mem is not None:
            if index == 0:
                self.accesses.setdefault(op, set()).add(param)
            elif any(op.operands[index] is w for w in written_values(op)):
                return self._refuse(op, param, "it stores an address into the communicated "
                                    "tensor to memory, from where another access could reach "
                                    "the tensor unseen")
            return []       # a mask, an index or the `other` value: not this tensor's address
        if is_hint(op) or isinstance(op, _COMPILER + _NO_ACCESS):
            return []
        why = denial(op)
        if why is not None:
            return self._refuse(op, param, why)
        if isinstance(op, _CONTROL):
            return _control_onward(op, index)
        if may_touch_memory(type(op)):
            return self._refuse(op, param, "the analysis does not know what this op does with "
                                "memory")
        return [r for r in op.results if carries_address(r.type)]


def _control_onward(op: Operation, index: int) -> list[SSAValue]:
    """Where operand ``index`` of a control-flow op goes: loop and branch block arguments,
    the results of the region op a ``yield`` ends."""
    if isinstance(op, scf.ForOp):
        return [op.body.block.args[index - 2], op.results[index - 3]] if index >= 3 else []
    if isinstance(op, scf.WhileOp):
        return [op.before_region.block.args[index]]
    if isinstance(op, scf.ConditionOp):
        loop = op.parent_op()
        return [loop.after_region.block.args[index - 1], loop.results[index - 1]] \
            if index >= 1 else []
    if isinstance(op, scf.YieldOp):
        parent = op.parent_op()
        if isinstance(parent, scf.ForOp):
            return [parent.results[index], parent.body.block.args[index + 1]]
        if isinstance(parent, scf.WhileOp):
            return [parent.before_region.block.args[index]]
        return [parent.results[index]]
    if isinstance(op, cf.BranchOp):
        return [op.successor.args[index]]
    if isinstance(op, cf.ConditionalBranchOp):
        then_n = len(op.then_arguments)
        if index == 0:
            return []
        if index <= then_n:
            return [op.then_block.args[index - 1]]
        return [op.else_block.args[index - 1 - then_n]]
    return []       # a condition, a bound or a step: never an address; a return: kernels return nothing
