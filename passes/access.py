"""Access analysis: which region of a communicated tensor each tile reads or writes.

For every ``tt.load``/``tt.store`` through a pointer derived from a communicated kernel
parameter, and every ``tt.descriptor_load``/``tt.descriptor_store`` through a descriptor built
on one, the analysis derives a box of the *global* tensor (the schedule's tensor) as
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

Where it cannot derive a box, :class:`~syncopate.errors.CompileError` names the load and the
annotation to add: ``syncopate.language.hint_region2(ptr, lo0, hi0, ...)`` before the access,
which survives into TTIR as a ``tt.call`` to a no-inline function and is erased here.

The symbolic evaluator of index and pointer values lives in :mod:`.access_eval`, what a hint
call looks like in :mod:`.access_hints`; this module turns their results into boxes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, Operation, SSAValue

from syncopate.errors import CompileError
from syncopate_mlir.dialects.tt import (
    DescriptorLoadOp,
    DescriptorStoreOp,
    FuncOp,
    LoadOp,
    MakeTensorDescOp,
    StoreOp,
)

from .abi_info import operands_of
from .access_eval import AnalysisFailure, Evaluator, PtrVal
from .access_hints import erase_hints, hint_bounds, is_hint, symbol_name
from .ir_utils import (
    const_int,
    element_type,
    func_body,
    is_desc_type,
    is_int_type,
    is_ptr_type,
    kernel_func,
    loc_str,
    param_names,
    shape_of,
)
from .poly import Poly
from .schedule_attr import schedule_of

#: the accesses the analysis describes (the ops a wait or a signal is placed around)
READ_OPS = (LoadOp, DescriptorLoadOp)
WRITE_OPS = (StoreOp, DescriptorStoreOp)
_DESCRIPTOR_OPS = (DescriptorLoadOp, DescriptorStoreOp)


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
    kind: str                 # "read" | "write"
    param: str                # the kernel parameter it goes through
    tensor: str               # the schedule tensor it is bound to
    dims: list[DimRange]
    requirements: dict[str, int] = field(default_factory=dict)  # param -> required value
    hinted: bool = False

    @property
    def location(self) -> str | None:
        return loc_str(self.op)


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
    from syncopate.errors import ScheduleError
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
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


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


class AccessAnalysis:
    """Finds and describes every access of the communicated tensors in a kernel.

    ``operands`` maps kernel parameter names to schedule tensor names; ``shapes`` maps tensor
    names to their global shapes."""

    def __init__(self, module: ModuleOp, operands: dict[str, str], shapes: dict[str, list[int]],
                 parts: dict[str, RankPart] | None = None):
        self.module = module
        #: operands whose kernel code addresses only the rank's part (``view="rank"``)
        self.parts = parts or {}
        self.func = kernel_func(module)
        self.operands = operands
        self.shapes = shapes
        names = param_names(module, self.func)
        self.arg_name = {a: names[i] for i, a in enumerate(func_body(self.func).args)}
        self.by_name = {n: a for a, n in self.arg_name.items()}
        for p in operands:
            if p not in self.by_name:
                raise CompileError(
                    f"operand {p!r} is not a (non-constexpr) parameter of kernel "
                    f"{symbol_name(self.func)}; its parameters are {', '.join(self.by_name)}")
        self.bound = {self.by_name[p]: operands[p] for p in operands}
        self.ev = Evaluator()
        self.hints = self._collect_hints()
        self.accesses: list[Access] = []

    # hints ----------------------------------------------------------------------------------
    def _collect_hints(self) -> list[Operation]:
        hints = []
        for op in self.func.walk():
            if is_hint(op):
                hints.append(op)
        return hints

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

    def erase_hints(self) -> None:
        """Remove the hint calls and their (empty) callees; Triton never sees them."""
        erase_hints(self.module)
        self.hints = []

    # analysis -------------------------------------------------------------------------------
    def run(self) -> list[Access]:
        self.accesses = []
        for op in self.func.walk():
            if isinstance(op, READ_OPS + WRITE_OPS):
                acc = self._analyze(op)
                if acc is not None:
                    self.accesses.append(acc)
        return self.accesses

    def _base_of(self, op: Operation) -> BlockArgument | None:
        """The kernel parameter an access goes through, or None (not a pointer we track)."""
        v = op.operands[0]
        try:
            if isinstance(op, _DESCRIPTOR_OPS):
                d = self._descriptor(v)
                return d[0]
            return self.ev.pointer(v).base
        except AnalysisFailure:
            return self._base_syntactic(v)

    def _base_syntactic(self, v: SSAValue, depth: int = 0) -> BlockArgument | None:
        """Best-effort walk to a parameter (to tell whether a failed analysis matters)."""
        if depth > 64:
            return None
        if isinstance(v, BlockArgument):
            if v in self.bound:
                return v
            loop = v.block.parent_op()
            if isinstance(loop, scf.ForOp) and v.index > 0:
                return self._base_syntactic(loop.operands[3 + v.index - 1], depth + 1)
            return None
        ptrs = [o for o in v.op.operands
                if is_ptr_type(element_type(o.type)) or is_desc_type(o.type)]
        # a pointer made from integers (tt.int_to_ptr of tt.ptr_to_int + i64 arithmetic):
        # follow the integers back to the parameter, so the access is reported, not skipped
        for operand in ptrs or list(v.op.operands):
            found = self._base_syntactic(operand, depth + 1)
            if found is not None:
                return found
        return None

    def _analyze(self, op: Operation) -> Access | None:
        kind = "read" if isinstance(op, READ_OPS) else "write"
        base = self._base_of(op)
        if base is None or base not in self.bound:
            return None
        tensor = self.bound[base]
        shape = self.shapes[tensor]
        try:
            part = self.parts.get(self.arg_name[base])
            if part is not None and (isinstance(op, _DESCRIPTOR_OPS)
                                     or self._hint_for(op, base) is not None):
                raise CompileError(
                    f"this {op.name} goes through {self.arg_name[base]!r}, bound to tensor "
                    f"{tensor!r} whose view is 'rank' (the kernel addresses the rank's part): "
                    f"only plain pointer accesses, whose boxes the analysis derives, can be "
                    f"offset by the part; a tensor descriptor or a hint_region would state a "
                    f"box in other coordinates. Use pointer loads/stores for this operand, or "
                    f"a view='global' schedule", loc_str(op))
            if isinstance(op, _DESCRIPTOR_OPS):
                dims, req = self._descriptor_region(op, shape)
            else:
                ptr = self.ev.pointer(op.operands[0])
                axis_lens = shape_of(op.operands[0].type)
                if part is not None:
                    ptr, rank_var = self._strip_rank_offset(ptr, part, op)
                dims, req = pointer_region(ptr, axis_lens, shape, self.arg_name, op)
                if part is not None and rank_var is not None:
                    # the operand was offset by syn_rank * part.offset (append-abi-params):
                    # the box of the global tensor is the local box moved by rank * step
                    dims = [DimRange(d.lo + Poly({(rank_var,): k}) if k else d.lo, d.extent,
                                     d.index) for d, k in zip(dims, part.step)]
            # a hint before the access still asserts that its box lies inside the tensor
            # (docs/soundness.md), also when the box itself could be derived: the bound check
            # must take it, or the refusal that asks for a hint could never be answered
            hinted = self._hint_for(op, base) is not None
            return Access(op, kind, self.arg_name[base], tensor, dims, req, hinted=hinted)
        except AnalysisFailure as failure:
            hint = self._hint_for(op, base)
            if hint is not None:
                return self._from_hint(op, kind, base, tensor, shape, hint)
            where = loc_str(op)
            nd = len(shape)
            args = ", ".join(f"lo{d}, hi{d}" for d in range(nd))
            raise CompileError(
                f"cannot derive which region of tensor {tensor!r} ({self.arg_name[base]}) this "
                f"{op.name} {'reads' if kind == 'read' else 'writes'}: {failure.reason}"
                + (f" (at {loc_str(failure.op)})" if failure.op is not None and loc_str(failure.op)
                   and loc_str(failure.op) != where else "")
                + f". Add `syncopate.language.hint_region{nd}({self.arg_name[base]}, {args})` "
                  f"right before it, giving the box [lo, hi) of the global tensor the access "
                  f"touches, or rewrite the address arithmetic with make_range/splat/+/*.",
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
        base, shape_vals, stride_vals, block = self._descriptor(op.operands[0])
        nd = len(shape)
        if len(block) != nd:
            raise AnalysisFailure(op, f"a {len(block)}-d descriptor over a {nd}-d tensor")
        req: dict[str, int] = {}
        if shape_vals is not None:
            strides = _row_major_strides(shape)
            for d in range(nd):
                self._require(op, shape_vals[d], shape[d], f"descriptor shape[{d}]", req)
                self._require(op, stride_vals[d], strides[d], f"descriptor stride[{d}]", req)
        indices = list(op.operands[1:1 + nd]) if isinstance(op, DescriptorLoadOp) else \
            list(op.operands[2:2 + nd])
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


def _desc_block_type(t):
    return t.parameters[0] if hasattr(t, "parameters") and t.parameters else t

