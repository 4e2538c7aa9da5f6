"""``tile-remap``: run tiles in the order their chunks arrive (or leave).

The access analysis gives each access of a communicated tensor its box along the chunked dim
as ``[B * X, B * X + B)``: ``X`` is the tile coordinate (``pid_m``), ``B`` the tile size.  This
pass replaces every use of ``X`` by ``syncopate.remap X, rank``, a per-rank permutation of the
tile coordinates.  Program ``pid`` still computes the same ``X``, but then works on tile
``table[rank][X]``: tiles whose rows are local come first, then tiles in the order their chunks
arrive (consumers, e.g. all-gather + GEMM), or tiles in the order their chunks leave
(producers, e.g. GEMM + reduce-scatter), so that the first chunk to send is finished first.

Because the substitution is made on the coordinate value, it is a bijection on tiles for any
tile order the kernel uses (row-major, grouped/swizzled, persistent); the kernel's stores use
the same coordinate, so results land where they belong.  The rank is a runtime value: one
binary serves every rank.  A tile that straddles two bands sorts by the later band (consumers)
or the earlier one (producers).  Where no single coordinate exists the pass leaves the order
alone and says so in the ``syncopate.abi`` remarks: waits keep the kernel correct regardless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import BlockArgument, OpResult, SSAValue
from xdsl.passes import ModulePass

from .abi_info import abi_args, get_state, reduce_of, update_state
from .access import (analyze_module, AnalysisFailure, Evaluator, is_int_type,
                     is_tensor)
from .poly import Poly
from .builder import Builder
from .plan import Plan


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


def remap_table(plan: Plan, tensor: str, dim: int, block: int, role: str,
                sends_only: bool = False) -> tuple[int, list[int]]:
    size = plan.tensors[tensor].shape[dim]
    tiles = -(-size // block)
    table: list[int] = []
    for r in range(plan.world_size):
        def key(t: int) -> int:
            lo, hi = t * block, min((t + 1) * block, size)
            if role == "consumer":
                return plan.arrival_key(r, tensor, dim, lo, hi)
            return plan.departure_key(r, tensor, dim, lo, hi, sends_only)
        table.extend(sorted(range(tiles), key=lambda t: (key(t), t)))
    return tiles, table


@dataclass(frozen=True)
class TileRemap(ModulePass):
    name: ClassVar[str] = "tile-remap"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        from .builder import set_default_location
        set_default_location(op)
        plan, analysis, accesses = analyze_module(op)
        rank = abi_args(analysis.func)["syn_rank"]
        remarks = list(get_state(op).get("remarks", []))
        remapped: dict[str, dict] = {}
        done: set[int] = set()
        for tensor in sorted({a.tensor for a in accesses}):
            dims = plan.chunked_dims(tensor)
            if not dims:
                continue
            reads = [a for a in accesses if a.tensor == tensor and a.kind == "read"]
            writes = [a for a in accesses if a.tensor == tensor and a.kind == "write"]
            role, group = ("consumer", reads) if reads else ("producer", writes)
            if role == "producer" and not plan.is_produced(tensor):
                continue
            for dim in dims:
                polys = {(coordinate_poly(a.dims[dim].lo, a.dims[dim].extent), a.dims[dim].extent)
                         for a in group}
                (coord, block) = next(iter(polys))
                values = coordinate_values(analysis.func, analysis.ev, coord) if coord else []
                if len(polys) != 1 or coord is None or not values:
                    remarks.append(f"tile-remap: no single tile coordinate for {tensor} dim {dim}; "
                                   f"tile order left as written")
                    continue
                tiles, table = remap_table(plan, tensor, dim, block, role,
                                           sends_only=reduce_of(op) == "epilogue")
                if table == list(range(tiles)) * plan.world_size:
                    remarks.append(f"tile-remap: tiles of {tensor} dim {dim} already run in chunk "
                                   f"order on every rank; tile order left as written")
                    break
                for x in values:
                    if id(x) not in done:
                        self._remap(x, rank, tensor, dim, block, tiles, table)
                        done.add(id(x))
                remapped[tensor] = {"dim": dim, "block": block, "tiles": tiles, "role": role}
                break
        update_state(op, remap=remapped, remarks=remarks)

    @staticmethod
    def _remap(x: SSAValue, rank, tensor, dim, block, tiles, table) -> None:
        from syncopate_mlir.dialects.syncopate import RemapOp

        if isinstance(x, BlockArgument):
            b = Builder.at_start(x.block)
        else:
            nxt = x.op.next_op
            b = Builder(nxt, x.op.parent_block()) if nxt is not None else Builder(None, x.op.parent_block())
        coord = b.i32(x)
        remap = b.insert(RemapOp(coord, rank, tensor, dim, block, tiles, table))
        out = remap.result
        if x.type != out.type:
            out = b.cast(out, x.type)
        keep = {remap, coord.op if hasattr(coord, "op") else None}
        x.replace_uses_with_if(out, lambda use: use.operation not in keep and
                               use.operation is not getattr(out, "op", None))
