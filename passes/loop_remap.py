"""The inner-loop remap: a loop over blocks of a communicated tensor visits them in arrival order.

Why: in ring attention (issue 11) every program reads *all* K/V blocks inside its KV loop
``for start_n in range(0, SEQ_KV, BLOCK_N)``.  The tile coordinate of those reads is not a
program coordinate but the loop's iteration number ``start_n / BLOCK_N`` -- an ``IterCount``
that no SSA value of the kernel equals, so ``tile-remap``'s search for a coordinate value found
nothing.  Here the loop itself is renumbered: at the top of its body the induction variable is
replaced, for every use, by ``remap(iv / step) * step``, so iteration ``t`` runs as iteration
``table[rank][t]`` of the unfused kernel: addresses, masks (the causal mask) and waits all see
the same remapped block.

When this is a consistent renumbering of the iterations (docs/soundness.md, "Loops"):

* the loop starts at 0 with a constant positive step and a constant trip count equal to the
  number of blocks of the chunked dim (the table is a permutation of exactly those blocks);
* it carries no integer or pointer value from one iteration to the next (a counter or an
  advanced pointer would keep the written order while the induction variable moves), and no
  address anywhere follows the loop's iteration count through such a value;
* nothing in it writes memory or calls out (the order of writes would be its result);
* the floating-point values it carries (a softmax's running max and sum, an accumulator) are
  reductions whose order only changes rounding: the kernel then no longer gives the unfused
  kernel's bits, so this needs the compile option ``reorder_reductions=True`` (an assertion by
  the user, like a hint: a loop whose carried floats are not an order-independent reduction,
  ``acc = acc * 2 + x``, is a wrong program under it).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects import arith, cf, scf
from xdsl.dialects.builtin import BFloat16Type, Float16Type, Float32Type, Float64Type
from xdsl.ir import BlockArgument, SSAValue

from syncopate_mlir.dialects.syncopate import RemapOp
from syncopate_mlir.dialects.tt import AssertOp, PrintOp, element_type

from .access import address_polys
from .builder import Builder
from .ir_utils import at_loc, const_int, defined_inside
from .memory_ops import DENIED, writes_memory
from .poly import IterCount, Poly

_FLOATS = (Float16Type, Float32Type, Float64Type, BFloat16Type)
#: ops with effects the order of a loop's iterations would change (besides writes): what the
#: analysis does not model, and what prints or traps in program order
_OPAQUE = tuple(DENIED) + (PrintOp, AssertOp, cf.AssertOp)


@dataclass
class LoopCoordinate:
    """The chunked dim's blocks are the iterations of ``loop``: block ``iv / step``."""

    loop: scf.ForOp
    iv: BlockArgument
    step: int


def accumulates_floats(loop: scf.ForOp) -> bool:
    """Whether an ``scf.for`` carries a floating-point value from one iteration to the next
    (a GEMM's K loop, a row sum over column tiles): its iteration order is its rounding."""
    return any(isinstance(element_type(arg.type), _FLOATS) for arg in loop.body.block.args[1:])


def for_loop_of(v) -> scf.ForOp | None:
    """The ``scf.for`` whose induction variable ``v`` is, else None."""
    if isinstance(v, BlockArgument) and v.index == 0:
        owner = v.block.parent_op()
        if isinstance(owner, scf.ForOp):
            return owner
    return None


def _substitute(lo: Poly, iv: SSAValue, step: int, loop, lb: int = 0) -> Poly:
    """``lo`` with ``iv`` replaced by ``lb + step * iter(loop)`` (what it is, exactly, in the
    loop's iteration ``iter``)."""
    out = Poly()
    as_iter = Poly({(): lb, (IterCount(loop),): step})
    for mono, c in lo.terms.items():
        k = sum(1 for v in mono if v is iv)
        term = Poly({tuple(v for v in mono if v is not iv): c})
        for _ in range(k):
            term = term * as_iter
        out = out + term
    return out


def ivs_as_iterations(p: Poly) -> Poly:
    """``p`` with every ``scf.for`` induction variable of a loop with constant lower bound and
    step written as ``lb + step * iter(loop)``.

    Why: a loop-carried pointer's offset is in iteration counts (``a_ptrs += BK * stride``
    gives ``BK * iter``) while a mask written from the induction variable is in its values
    (Triton's tutorial GEMM: ``offs_k < K - k * BK``). In one form, ``index - (offs_k - K + k *
    BK)`` cancels to ``K``, the bound the mask proves; in two, it does not. The rewrite is an
    identity of the loop, so it loses nothing."""
    for v in list(p.vars()):
        loop = for_loop_of(v)
        if loop is None:
            continue
        lb, step = const_int(loop.lb), const_int(loop.step)
        if lb is not None and step is not None:
            p = _substitute(p, v, step, loop, lb)
    return p


def loop_coordinate(los: list[Poly], extent: int, coordinate_poly) -> LoopCoordinate | str | None:
    """The loop whose iterations are the blocks ``[u + lo, u + lo + extent)`` of every access,
    ``lo = extent * iter(loop)`` and ``u`` loop-invariant (the same loop and block for all), a
    refusal reason when they are a loop's iterations that cannot be renumbered, or None when no
    loop's induction variable makes the start.

    ``u`` (``b * stride_kb`` of a sequence-major K with one batch) is allowed because renumbering
    *all* iterations of a loop is a consistent renumbering whatever the data each one reads: the
    table only decides how well the order fits the arrival of the chunks (best when ``u = 0``),
    and the waits, inserted after this pass from the remapped addresses, keep every read
    correct."""
    loops = set()
    for lo in los:
        for v in lo.vars():
            if isinstance(v, IterCount):
                return (f"the block index follows the iteration count of the loop"
                        f"{at_loc(v.loop)} through a loop-carried value (an advanced pointer or "
                        f"counter); write the address from the induction variable")
            if for_loop_of(v) is not None:
                loops.add(v)
    if len(loops) != 1:
        return None
    iv = next(iter(loops))
    loop = for_loop_of(iv)
    lb, step = const_int(loop.lb), const_int(loop.step)
    if lb is None or step is None:
        return None
    if lb != 0 or step <= 0:
        return (f"the loop{at_loc(loop)} does not count up from 0 by a constant step (lb "
                f"{lb}, step {step})")
    target = Poly.var(IterCount(loop))
    for lo in los:
        sub = _substitute(lo, iv, step, loop)
        moving = Poly({m: c for m, c in sub.terms.items() if any(v is not iv and
                                                               isinstance(v, IterCount)
                                                               for v in m)})
        rest = sub - moving
        if coordinate_poly(moving, extent) != target:
            return None
        # the rest must not change between iterations (only the table's fit depends on it)
        if any(isinstance(v, SSAValue) and defined_inside(v, loop) for v in rest.vars()):
            return None
    return LoopCoordinate(loop, iv, step)


def loop_refusal(func, lc: LoopCoordinate, tiles: int, reorder: bool, ev) -> str | None:
    """Why renumbering the iterations of ``lc.loop`` by a per-rank permutation of the ``tiles``
    blocks would not give the unfused kernel's results (up to rounding with ``reorder``), or
    None."""
    loop = lc.loop
    ub = const_int(loop.ub)
    if ub is None:
        return (f"the trip count of the loop{at_loc(loop)} is not a compile-time constant (the "
                f"remap permutes all {tiles} blocks of the dim; a loop over a part of them, such "
                f"as causal attention's, would visit other blocks)")
    trips = max(0, -(-ub // lc.step))
    if trips != tiles:
        return (f"the loop{at_loc(loop)} runs {trips} iterations, not the {tiles} blocks of the "
                f"dim (the remap would visit other blocks)")
    carried = [arg.type for arg in loop.body.block.args[1:]]
    other = next((t for t in carried if not isinstance(element_type(t), _FLOATS)), None)
    if other is not None:
        return (f"the loop{at_loc(loop)} carries a {other} from one iteration to the next (a "
                f"counter or pointer keeps the written order while the blocks move)")
    if carried and not reorder:
        return (f"the tile coordinate counts the iterations of a loop that accumulates "
                f"floating-point values{at_loc(loop)}: visiting them in another order would "
                f"change the rounding (the fused kernel must give the unfused kernel's bits; "
                f"reorder_reductions=True allows it)")
    for op in loop.walk():
        if op is loop:
            continue
        if writes_memory(op):
            return (f"the loop{at_loc(loop)} writes memory ({op.name}{at_loc(op)}): the order of "
                    f"its iterations is the order of its writes")
        if isinstance(op, _OPAQUE):
            return f"the loop{at_loc(loop)} contains a {op.name}{at_loc(op)}"
    inside = {id(o) for o in loop.walk()}
    it = IterCount(loop)
    for op in func.walk():
        polys = address_polys(op, ev)
        if polys is None:
            if id(op) in inside:
                return f"cannot follow the address of the {op.name}{at_loc(op)} in the loop"
            continue
        if any(it in p.vars() for p in polys):
            return (f"the {op.name}{at_loc(op)} advances its address with the loop's iteration "
                    f"count (a loop-carried pointer), not with its induction variable")
    return None


def remap_loop(lc: LoopCoordinate, rank, tensor: str, dim: int, block: int, tiles: int,
               table: list[int]) -> None:
    """Replace every use of the induction variable by ``remap(iv / step) * step``."""
    iv = lc.iv
    b = Builder.at_start(iv.block)
    made = []
    t = iv
    if lc.step != 1:
        c = b.const(lc.step, iv.type)
        made.append(c.op)
        t = b.insert(arith.DivUIOp(iv, c)).result   # iv >= 0, a multiple of step
        made.append(t.op)
    coord = b.i32(t)
    if coord is not t:
        made.append(coord.op)
    remap = b.insert(RemapOp(coord, rank, tensor, dim, block, tiles, table))
    made.append(remap)
    out = b.cast(remap.result, iv.type)
    if out is not remap.result:
        made.append(out.op)
    if lc.step != 1:
        c2 = b.const(lc.step, iv.type)
        out = b.mul(out, c2)
        made += [c2.op, out.op]
    keep = set(map(id, made))
    iv.replace_uses_with_if(out, lambda use: id(use.operation) not in keep)
