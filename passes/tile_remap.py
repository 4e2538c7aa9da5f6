"""``tile-remap``: run tiles in the order their chunks arrive (or leave).

The access analysis gives each access of a communicated tensor its box along the chunked dim
as ``[B * X, B * X + B)``: ``X`` is the tile coordinate (``pid_m``), ``B`` the tile size.  This
pass replaces every use of ``X`` by ``syncopate.remap X, rank``, a per-rank permutation of the
tile coordinates.  Program ``pid`` still computes the same ``X``, but then works on tile
``table[rank][X]``: tiles whose rows are local come first, then tiles in the order their chunks
arrive (consumers, e.g. all-gather + GEMM), or tiles in the order their chunks leave
(producers, e.g. GEMM + reduce-scatter), so that the first chunk to send is finished first.

The substitution is made on the coordinate value and the kernel's stores use the same
coordinate, so results land where they belong; it is a bijection on the tiles a launch
computes when the programs visit every coordinate with the same other coordinates
(row-major, grouped/swizzled, persistent tile orders over all tiles do; a triangle of tiles
does not), which depends on the grid: so the pass records, for every remap, the slice that
computes the coordinate and the program's other coordinates (:func:`launch_check`), which the
runtime and the emulator evaluate per launch (:func:`syncopate.tiling.check_remaps`).  The rank is a runtime value: one
binary serves every rank.  A tile that straddles two bands sorts by the later band (consumers)
or the earlier one (producers).  Where no single coordinate exists the pass leaves the order
alone and says so in the ``syncopate.state`` remarks: waits keep the kernel correct regardless.

A block index that is the iteration count of a loop (attention's KV loop reading all-gathered
K/V) has no such value; there the loop itself is renumbered (:mod:`.loop_remap`), and a loop
that accumulates floats only under the compile option ``reorder_reductions=True``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, OpResult, SSAValue
from xdsl.passes import ModulePass

from syncopate.schedule.model import Schedule
from syncopate.tiling import Op, RemapSlice
from syncopate_mlir.dialects.syncopate import (
    ReduceAt,
    RemapOp,
    Remapped,
    record,
    request_of,
    state_of,
)
from syncopate_mlir.dialects.tt import GetProgramIdOp, is_tensor

from .abi_info import abi_args
from .access import address_polys, analyze_module
from .access_eval import AnalysisFailure, Evaluator
from .builder import Builder
from .ir_utils import ancestors, at_loc, is_int_type, loc_str
from .loop_remap import accumulates_floats, loop_coordinate, loop_refusal, remap_loop
from .memory_ops import writes_memory
from .poly import IterCount, Poly
from .purity import Purity, forward_scalar_slice, is_pure_op
from .store_slices import counter_step, values_slice


def coordinate_poly(lo: Poly, extent: int) -> Poly | None:
    """``lo / extent`` when every coefficient of ``lo`` is a multiple of the tile size and the
    quotient has no constant term: the polynomial of the tile coordinate."""
    if not lo.terms or () in lo.terms:
        return None
    if any(c % extent for c in lo.terms.values()):
        return None
    return Poly({m: c // extent for m, c in lo.terms.items()})


def coordinate_values(func, ev: Evaluator, coord: Poly) -> list[SSAValue]:
    """The scalar SSA values of the kernel that compute the tile coordinate ``coord``, minus
    those computed from another one (replacing both would remap twice)."""
    found: list[SSAValue] = []
    for op in func.walk():
        # block arguments too: a persistent kernel's tile coordinate can be the induction
        # variable of its tile loop (``for tile_id in range(start, tiles, nprog)``)
        args = [a for region in op.regions for block in region.blocks for a in block.args]
        for res in args + list(op.results):
            if is_int_type(res.type) and not is_tensor(res.type):
                try:
                    if ev.value(res) == coord:
                        found.append(res)
                except AnalysisFailure:
                    continue
    ids = {id(v) for v in found}

    def derived(v: SSAValue, depth: int = 0) -> bool:
        if depth > 8 or not isinstance(v, OpResult):
            return False
        for operand in v.op.operands:
            if id(operand) in ids or derived(operand, depth + 1):
                return True
        return False

    return [v for v in found if not derived(v)]


def remap_table(sched: Schedule, tensor: str, dim: int, block: int, role: str,
                sends_only: bool = False) -> tuple[int, list[int]]:
    size = sched.tensors[tensor].shape[dim]
    tiles = -(-size // block)
    table: list[int] = []
    for r in range(sched.world_size):
        def key(t: int) -> int:
            lo, hi = t * block, min((t + 1) * block, size)
            if role == "consumer":
                return sched.arrival_key(r, tensor, dim, lo, hi)
            return sched.departure_key(r, tensor, dim, lo, hi, sends_only)
        table.extend(sorted(range(tiles), key=lambda t: (key(t), t)))
    return tiles, table


def remap_refusal(func, values: list[SSAValue]) -> str | None:
    """Why replacing every use of the coordinate ``values`` by their remapped value would not
    be a consistent renumbering of tiles (None: it would be).

    The substitution runs each program as if its coordinate were ``table[X]`` with everything
    else unchanged, which is a bijection on tiles only when (docs/soundness.md):

    * the coordinate is a pure function of program ids, tile-loop counters, kernel scalars and
      constants (never a loaded value: the table cannot know it);
    * no other address is computed from it except by scaling it with a constant
      (``j = pid - i * n`` would move ``j`` with ``i``: the tile leaves the grid);
    * every store whose address follows the same program id or tile loop also follows the
      coordinate (a second, separately computed tile counter would keep the old tile).
    """
    purity = Purity(func)
    for x in values:
        if not purity.is_pure(x):
            return (f"the tile coordinate{at_loc(x)} depends on {purity.why_impure(x)} (only "
                    f"pure functions of program ids and tile loops are remapped)")
    for x in values:
        owner = x.block.parent_op() if isinstance(x, BlockArgument) else None
        if isinstance(owner, scf.WhileOp) or (isinstance(owner, scf.ForOp) and x.index > 0):
            # every use is replaced, the loop's own advance ``t + step`` too: the next
            # iteration would start from ``table[t] + step`` and leave the grid
            return (f"the tile coordinate is a value the loop{at_loc(owner)} carries from one "
                    f"iteration to the next (remapping it would advance the loop from the "
                    f"remapped tile; write the tile loop as `for tile in range(start, tiles, "
                    f"step)`)")
    ids = {id(x) for x in values}
    loops = {id(o): o for o in func.walk() if isinstance(o, scf.ForOp)}
    for x in values:
        for root in _roots(x):
            loop = loops.get(root) if isinstance(root, int) else None
            if loop is not None and accumulates_floats(loop):
                return (f"the tile coordinate{at_loc(x)} counts the iterations of a loop that "
                        f"accumulates floating-point values{at_loc(loop)}: visiting them in "
                        f"another order would change the rounding (the fused kernel must give "
                        f"the unfused kernel's bits)")

    def uniform(v) -> bool:  # the same in every program: kernel scalars and constants
        return isinstance(v, SSAValue) and purity.is_pure(v) and not _roots(v)

    # values computed from the coordinate: "moving" ones are c * X + u (c, u uniform) and
    # follow the remap; any other is a second coordinate derived from X and stays opaque
    overrides = {x: Poly.var(x) for x in values}
    opaque: dict[int, SSAValue] = {}
    for r in [r for x in values for r in forward_scalar_slice(x)]:
        try:
            p = Evaluator(dict(overrides)).value(r)
        except AnalysisFailure:
            p = None
        if p is None or not _moves_with(p, ids, uniform):
            overrides[r] = Poly.var(r)
            opaque[id(r)] = r
    ev = Evaluator(overrides)
    roots = set()
    for x in values:
        roots |= _roots(x)
    for op in func.walk():
        polys = address_polys(op, ev)
        if polys is None:
            if _reaches(op, ids | set(opaque)):
                return f"cannot follow the address of the {op.name}{at_loc(op)}"
            continue
        mentions = False
        for poly in polys:
            for mono in poly.terms:
                if any(id(v) in opaque for v in mono):
                    return (f"the {op.name}{at_loc(op)} uses a value computed from the tile "
                            f"coordinate (remapping would move that coordinate too)")
                if not any(id(v) in ids for v in mono):
                    continue
                mentions = True
                rest = tuple(v for v in mono if id(v) not in ids)
                if not all(uniform(v) for v in rest):
                    return (f"the {op.name}{at_loc(op)} multiplies the tile coordinate by a "
                            f"value that differs between programs")
        if writes_memory(op) and not mentions:
            leaves = set()
            for poly in polys:
                for v in poly.vars():
                    leaves |= _roots(v)
            if leaves & roots:
                return (f"the {op.name}{at_loc(op)} computes its tile from the program id "
                        f"without the remapped coordinate (a second tile counter?)")
    return None


def launch_check(func, values: list[SSAValue], names: dict, tensor: str, dim: int,
                 tiles: int, table: list[int]) -> RemapSlice | str:
    """The per-launch check that replacing the coordinate ``values`` (``X``) by
    ``table[rank][X]`` renumbers the tiles the launch computes (docs/soundness.md, "What
    tile-remap may rewrite"), or why it cannot be built (then the tile order stays as written).

    :func:`remap_refusal` makes the substitution consistent, but it is a bijection on the
    launch's tiles only if the programs visit every value of ``X`` with the same other
    coordinates: a triangle of tiles ``j <= i`` enumerated from the program id, or a grid with
    fewer tiles than the table permutes, computed other tiles after the remap.  Whether they
    do depends on the grid and the sizes, so it is evaluated per launch.  A program's work
    depends on its program id and tile loops only through ``X`` and through ``rest``: the
    values of its scalar integer arithmetic at the program's level (outside any loop but its
    tile loops) that do not depend on ``X`` and are used by anything else than that
    arithmetic (``j * BN`` in a splat, a loop bound, a branch condition, ...).  Programs with
    equal ``(X, rest)`` do the same work; so if the launch computes ``(table[X], rest)``
    exactly as often as ``(X, rest)`` for every rank, the remapped programs do the launch's
    work, each as another program did (:func:`syncopate.tiling.check_remaps`)."""
    def level(v: SSAValue) -> list | None:
        """The scf.for ops enclosing ``v``'s definition (outermost first), None when another
        op than scf.for and scf.if encloses it."""
        op = v.block.parent_op() if isinstance(v, BlockArgument) else v.op
        chain = ([op] if isinstance(v, BlockArgument) else []) + ancestors(op, func)
        if any(not isinstance(o, (scf.ForOp, scf.IfOp)) for o in chain):
            return None
        return [o for o in reversed(chain) if isinstance(o, scf.ForOp)]

    chains = [level(x) for x in values]
    if any(c is None for c in chains) or any(c != chains[0] for c in chains):
        return "the tile coordinate is computed inside a loop that is not its tile loop"
    loops = chains[0]
    carried = [a for loop in loops for a in loop.body.block.args[1:]]
    counters = [a for a in carried if counter_step(a) is not None]
    if len(counters) != len(carried):
        return (f"the tile loop{at_loc(loops[0])} carries a value from one tile to the next "
                f"(the tiles' order would change what it carries)")
    purity = Purity(func)
    ids = {id(x) for x in values}
    xdep = set(ids)
    work = list(values)
    while work:
        for _, r in _scalar_users(work.pop()):
            if id(r) not in xdep:
                xdep.add(id(r))
                work.append(r)
    sources = [o.results[0] for o in func.walk() if isinstance(o, GetProgramIdOp)]
    sources += [loop.body.block.args[0] for loop in loops] + counters
    sources = [v for v in sources if id(v) not in xdep]
    chain = set(map(id, loops))

    def program_level(op) -> bool:
        return all(isinstance(o, scf.IfOp) or id(o) in chain for o in ancestors(op, func))

    # the program's integer arithmetic from its ids that does not go through X
    upper: list[SSAValue] = []
    seen = {id(v) for v in sources}
    work = list(sources)
    while work:
        for _, r in _scalar_users(work.pop()):
            if id(r) not in seen and id(r) not in xdep and purity.is_pure(r) \
                    and program_level(r.op):
                seen.add(id(r))
                upper.append(r)
                work.append(r)
    inside = ids | {id(r) for r in upper}

    def upstream(use) -> bool:  # a use by that arithmetic, by X's, or a tile loop's bounds
        return id(use.operation) in chain or any(
            id(r) in inside for u, r in _scalar_users(use.operation.operands[use.index])
            if u is use.operation and (not isinstance(u, scf.YieldOp) or
                                       r.index == use.index))

    rest = list({id(v): v for v in sources + upper
                 if not all(upstream(u) for u in v.uses)}.values())
    sliced = values_slice(loops, [values[0], *rest], names, purity)
    if isinstance(sliced, str):
        return sliced
    steps, at = sliced
    if any(st.op is Op.ARG and st.name.startswith("syn_") for st in steps):
        return "the tile coordinate depends on an argument the fused kernel adds"
    x = values[0]
    where = loc_str(x.op if isinstance(x, OpResult) else x.block.parent_op()) or "?"
    return RemapSlice(tensor, dim, where, tiles, tuple(table), tuple(steps), at[0],
                      tuple(at[1:]))


def _scalar_users(v: SSAValue):
    """``(op, result)``: the scalar integer results ``v`` flows into through a pure op, or
    through the ``scf.yield`` of an ``scf.if`` (the if's result at that position)."""
    for use in list(v.uses):
        u = use.operation
        if is_pure_op(u):
            results = list(u.results)
        elif isinstance(u, scf.YieldOp) and isinstance(u.parent_op(), scf.IfOp):
            results = [u.parent_op().results[use.index]]
        else:
            continue
        for r in results:
            if is_int_type(r.type) and not is_tensor(r.type):
                yield u, r


def _moves_with(p: Poly, ids: set[int], uniform) -> bool:
    """``p == c * X + u`` with ``X`` a coordinate value and ``c``, ``u`` uniform."""
    for mono in p.terms:
        rest = [v for v in mono if id(v) not in ids]
        if len(rest) < len(mono) - 1 or not all(uniform(v) for v in rest):
            return False
    return True


def _reaches(op, ids: set[int]) -> bool:
    """Whether any value in ``ids`` is in the backward slice of ``op``'s operands."""
    seen: set[int] = set()
    work = list(op.operands)
    while work:
        v = work.pop()
        if id(v) in ids:
            return True
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, OpResult):
            work.extend(v.op.operands)
    return False


def _roots(v) -> set:
    """Program-id ops and loop induction variables a scalar index is computed from."""
    out: set = set()
    seen: set[int] = set()
    work = [v]
    while work:
        cur = work.pop()
        if isinstance(cur, IterCount):
            out.add(id(cur.loop))
            continue
        if not isinstance(cur, SSAValue) or id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, BlockArgument):
            owner = cur.block.parent_op()
            if isinstance(owner, scf.ForOp):
                out.add(id(owner))
                if cur.index > 0:
                    work.append(owner.operands[3 + cur.index - 1])
                else:  # the induction variable follows what its bounds follow (lb = pid)
                    work.extend(owner.operands[:3])
            continue
        if isinstance(cur.op, GetProgramIdOp):
            out.add(("pid", cur.op.axis_int))
            continue
        work.extend(cur.op.operands)
    return out


@dataclass(frozen=True)
class TileRemap(ModulePass):
    name: ClassVar[str] = "tile-remap"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sched, analysis, accesses = analyze_module(op)
        rank = abi_args(analysis.func)["syn_rank"]
        remarks = list(state_of(op).remarks)
        request = request_of(op)
        if not request.remap:
            remarks.append("tile-remap: off (remap=False); tile order left as written")
            record(op, remap={}, remarks=remarks)
            return
        reorder = request.reorder_reductions
        remapped: dict[str, Remapped] = {}
        done: set[int] = set()
        loops_done: dict[int, list[int]] = {}   # id(loop) -> the table it was remapped with
        reordered = False
        checks: list[RemapSlice] = []   # evaluated per launch (syncopate.tiling.check_remaps)
        for tensor in sorted({a.tensor for a in accesses}):
            dims = sched.chunked_dims(tensor)
            if not dims:
                continue
            reads = [a for a in accesses if a.tensor == tensor and a.kind == "read"]
            writes = [a for a in accesses if a.tensor == tensor and a.kind == "write"]
            role, group = ("consumer", reads) if reads else ("producer", writes)
            if role == "producer" and not sched.is_produced(tensor):
                continue
            moved = {d for part in (analysis.parts.get(a.param) for a in group) if part
                     for d, k in enumerate(part.step) if k}
            for dim in dims:
                if dim in moved:
                    # the box starts at rank * step along this dim (view="rank"): the tile
                    # coordinate is not a function of program ids alone; other dims are
                    remarks.append(f"tile-remap: {tensor} dim {dim} is where each rank's part "
                                   f"lies (view='rank'); not remapped along it")
                    continue
                polys = {(coordinate_poly(a.dims[dim].lo, a.dims[dim].extent), a.dims[dim].extent)
                         for a in group}
                (coord, block) = next(iter(polys))
                values = coordinate_values(analysis.func, analysis.ev, coord) if coord else []
                why = None
                if len(polys) == 1 and coord is not None and values:
                    why = remap_refusal(analysis.func, values)
                extents = {a.dims[dim].extent for a in group}
                lc = None
                if (why is not None or not values or len(polys) != 1) and len(extents) == 1:
                    lc = loop_coordinate([a.dims[dim].lo for a in group], next(iter(extents)),
                                         coordinate_poly)
                if lc is not None:
                    floats, note = self._loop(analysis, sched, rank, tensor, dim,
                                              next(iter(extents)), role, lc, reorder, loops_done,
                                              remapped)
                    remarks.append(note)
                    reordered |= floats and tensor in remapped
                    if tensor in remapped:
                        break
                    continue
                if len(polys) != 1 or coord is None or not values:
                    remarks.append(f"tile-remap: no single tile coordinate for {tensor} dim {dim}; "
                                   f"tile order left as written")
                    continue
                if why is not None:
                    # sound either way: the waits keep the kernel correct in any tile order
                    remarks.append(f"tile-remap: {tensor} dim {dim} not remapped: {why}; tile "
                                   f"order left as written")
                    continue
                tiles, table = remap_table(sched, tensor, dim, block, role,
                                           sends_only=request.reduce == ReduceAt.EPILOGUE)
                if table == list(range(tiles)) * sched.world_size:
                    remarks.append(f"tile-remap: tiles of {tensor} dim {dim} already run in chunk "
                                   f"order on every rank; tile order left as written")
                    break
                check = launch_check(analysis.func, values, analysis.arg_name, tensor, dim,
                                     tiles, table)
                if isinstance(check, str):
                    remarks.append(f"tile-remap: {tensor} dim {dim} not remapped: the launch "
                                   f"check cannot be built: {check}; tile order left as "
                                   f"written")
                    continue
                checks.append(check)
                for x in values:
                    if id(x) not in done:
                        self._remap(x, rank, tensor, dim, block, tiles, table)
                        done.add(id(x))
                remapped[tensor] = Remapped(dim, block, tiles, role)
                break
        record(op, remap=remapped, remarks=remarks, reordered=reordered,
               remap_checks=tuple(checks))

    def _loop(self, analysis, sched, rank, tensor, dim, block, role, lc, reorder,
              loops_done, remapped) -> tuple[bool, str]:
        """Renumber the iterations of the loop whose iterations are the blocks of ``tensor``
        along ``dim`` (:mod:`.loop_remap`): ``(whether it reorders float reductions, the
        remark)``; a refusal leaves the loop as written (``tensor`` not in ``remapped``)."""
        head = f"tile-remap: {tensor} dim {dim}"
        if isinstance(lc, str):
            return False, f"{head} not remapped: {lc}; tile order left as written"
        if role != "consumer":
            return False, (f"{head} not remapped: the loop{at_loc(lc.loop)} writes the tensor "
                           f"(only loops that read delivered blocks are renumbered); tile order "
                           f"left as written")
        size = sched.tensors[tensor].shape[dim]
        tiles = -(-size // block)
        why = loop_refusal(analysis.func, lc, tiles, reorder, analysis.ev)
        if why is not None:
            return False, f"{head} not remapped: {why}; tile order left as written"
        _, table = remap_table(sched, tensor, dim, block, role)
        floats = accumulates_floats(lc.loop)
        entry = Remapped(dim, block, tiles, role, loop=True, reorders_reductions=floats)
        prev = loops_done.get(id(lc.loop))
        if prev is not None:
            if prev != table:
                return False, (f"{head} not remapped: the loop{at_loc(lc.loop)} already visits "
                               f"another tensor's blocks in that tensor's (different) arrival "
                               f"order; tile order left as written")
            remapped[tensor] = entry
            return floats, (f"tile-remap: {tensor} dim {dim} follows the same remapped loop"
                           f"{at_loc(lc.loop)}")
        if table == list(range(tiles)) * sched.world_size:
            return False, (f"tile-remap: blocks of {tensor} dim {dim} already arrive in loop "
                           f"order on every rank; tile order left as written")
        remap_loop(lc, rank, tensor, dim, block, tiles, table)
        loops_done[id(lc.loop)] = table
        remapped[tensor] = entry
        note = (f"tile-remap: the loop{at_loc(lc.loop)} visits the blocks of {tensor} dim {dim} "
                f"in arrival order")
        if floats:
            note += (" (reorder_reductions=True: its floating-point reductions run in another "
                     "order, so results are no longer bitwise the unfused kernel's)")
        return floats, note

    @staticmethod
    def _remap(x: SSAValue, rank, tensor, dim, block, tiles, table) -> None:
        if isinstance(x, BlockArgument):
            b = Builder.at_start(x.block)
        else:
            b = Builder(x.op.next_op, x.op.parent_block())
        coord = b.i32(x)
        remap = b.insert(RemapOp(coord, rank, tensor, dim, block, tiles, table))
        out = b.cast(remap.result, x.type)
        keep = {remap, coord.op if hasattr(coord, "op") else None}
        x.replace_uses_with_if(out, lambda use: use.operation not in keep and
                               use.operation is not getattr(out, "op", None))
