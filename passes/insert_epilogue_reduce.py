"""``insert-epilogue-reduce``: the owner's tiles add the other ranks' partials before storing.

A GEMM + reduce-scatter fused with comm programs loses the programs' SMs to communication and
leaves the last band's sum as an exposed tail (bench/results/2026-11-30-h200x2-run4: 1.12-1.20x
of ideal). With ``reduce="epilogue"`` (``ce`` backend) nothing but the producer tiles touch the
data on the SMs:

* every rank computes the bands it sends first (``tile-remap`` with ``sends_only``); the host's
  side stream copies each finished chunk into the owner's per-source **slot** buffer
  ``[W, *shape]`` (copy engine, no SM) and writes the owner's ``CHUNK[c] = epoch``;
* before a tile's store, this pass inserts a ``syncopate.wait_region`` for the box the store
  writes (resolved to the chunks that reduce into this rank: tiles of other ranks' rows wait
  for nothing), then loads, for every source rank ``s``, the elements of the box that ``s``
  sent here from ``slot[s]`` (a masked load: zero elsewhere) and stores
  ``round(f32(value) + sum_s f32(slot_s))`` instead of ``value``.

For two ranks the result is bitwise the unfused path's (each rank rounds its partial to the
output dtype, the sum of the two is rounded once, as NCCL's reduce-scatter does); where nothing
is added the value goes through ``f32`` and back unchanged.

Why the waits cannot form a cycle: a program waits only in a tile of rows its rank owns, and
only for partials the other ranks compute in tiles that never wait -- provided every program
visits all its sent tiles before its first owned one. ``tile-remap`` puts the sent M-tiles
first; two things could still interleave them, and both are refused: a tile holding rows of two
owners (it would send and wait; this pass, :class:`CompileError`), and sent tiles that do not
fill whole ``GROUP_M`` groups of the kernel's grouped tile walk (the op,
``gemm_rs._check_epilogue_order``). The copies run on the copy engine and need no SM while the
kernel holds them all; the watchdog still bounds any wait.

The slot base of this rank is read from ``syn_peers`` (row ``1 + len(operands) + k`` for the
k-th slotted tensor, recorded as ``epilogue_slots`` in the ABI). Stores whose value is not a
tile of the box the analysis found (rank or shape mismatch), or tensors that are not 2-D, are
refused with a :class:`CompileError`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import DenseIntOrFPElementsAttr, ModuleOp, TensorType, f32, i32, i64
from xdsl.passes import ModulePass

from syncopate import backends
from syncopate.errors import CompileError
from syncopate_mlir.dialects import tt
from syncopate_mlir.dialects.syncopate import ReduceAt, WaitRegionOp, record, request_of

from .abi_info import abi_args, operands_of
from .access import analyze_module
from .builder import Builder
from .insert_waits import _refuse_warp_specialized
from .ir_utils import func_body, loc_str
from .lowering import addptr, broadcast_to, expand_dims, scalar_load, splat, vec


@dataclass(frozen=True)
class InsertEpilogueReduce(ModulePass):
    name: ClassVar[str] = "insert-epilogue-reduce"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        request = request_of(op)
        if request.reduce != ReduceAt.EPILOGUE:
            return
        if "epilogue" not in backends.get(request.backend).reduce_modes:
            able = " or ".join(repr(b.name) for b in backends.specs()
                               if "epilogue" in b.reduce_modes)
            raise CompileError(f"the epilogue reduction needs backend {able} (its side stream "
                               f"moves the partials into the owner's slots)")
        sched, analysis, accesses = analyze_module(op)
        args = abi_args(analysis.func)
        W = sched.world_size
        slotted: list[str] = []
        for a in accesses:
            if a.kind != "write" or not sched.is_produced(a.tensor):
                continue
            if not any(c.tensor == a.tensor and c.reduce == "sum" for c in sched.chunks):
                continue
            if a.tensor not in slotted:
                slotted.append(a.tensor)
            row = 1 + len(operands_of(op)) + slotted.index(a.tensor)
            _refuse_warp_specialized(a.op)
            shape = list(sched.tensors[a.tensor].shape)
            if len(shape) != 2:
                raise CompileError(f"the epilogue reduction handles 2-d tensors (GEMM outputs); "
                                   f"{a.tensor!r} has {len(shape)} dims", loc_str(a.op))
            value = a.op.operands[1]
            vshape = list(getattr(value.type, "get_shape", lambda: [])())
            extents = [a.dims[d].extent for d in range(len(shape))]
            squeeze = [x for x in vshape if x != 1] == [x for x in extents if x != 1]
            if not squeeze:
                raise CompileError(f"the store of {a.tensor!r} writes a value of shape {vshape} but "
                                   f"the analysed box is {extents}: the epilogue reduction needs "
                                   f"the stored tile to be the box", loc_str(a.op))
            _refuse_straddling_tiles(sched, a, extents)
            b = Builder(a.op)
            if vshape != extents:  # e.g. a row [N] stored as the box [1, N]
                value = b.insert(tt.ReshapeOp(value, extents)).result
            cache: dict = {}
            lo = [b.poly(a.dims[d].lo, cache) for d in range(len(shape))]
            hi = [b.add(v, b.const(e)) for v, e in zip(lo, extents)]
            wait = b.insert(WaitRegionOp(args["syn_flags"], args["syn_epoch"], args["syn_rank"],
                                         lo, hi, a.tensor))
            anchor = _aligned_param(analysis.func, a.param, value.type.element_type)
            new = _add_slots(b, sched, a.tensor, shape, lo, extents, value, wait.token,
                             args["syn_peers"], args["syn_rank"], row, W, anchor)
            if vshape != extents:
                new = b.insert(tt.ReshapeOp(new, a.op.operands[1].type)).result
            a.op.operands[1] = new
        record(op, epilogue_slots=slotted)


def _refuse_straddling_tiles(sched, a, extents) -> None:
    """A tile holding rows of two owners would both send (the other owner's rows) and wait (its
    own rows) -- and the other owner's tile of the same rows would wait for it in turn. Tiles
    start at multiples of their extent, so every owner boundary must be one."""
    shape = sched.tensors[a.tensor].shape
    for rank, lo, hi in ((p.rank, p.region.offsets, p.region.stops)
                         for p in sched.tensors[a.tensor].final):
        for d, e in enumerate(extents):
            for x in (lo[d], hi[d]):
                if 0 < x < shape[d] and x % e:
                    raise CompileError(
                        f"the epilogue reduction needs every tile of {a.tensor!r} inside one rank's "
                        f"rows: tiles of {e} along dim {d} straddle the boundary at {x} (rank "
                        f"{rank}), and such a tile would wait for a peer tile that waits for it. "
                        f"Use a block size dividing {x}, or reduce='comm'", loc_str(a.op))


def _boxes_by_source(sched, tensor: str, rank: int) -> dict[int, tuple[tuple, tuple]]:
    """Per source rank, the box its ``sum`` chunks into ``rank`` cover (their union must be a
    box: the chunks of a source into one rank are contiguous in every template)."""
    out: dict[int, tuple[tuple, tuple]] = {}
    vols: dict[int, int] = {}
    for c in sched.chunks:
        if c.tensor != tensor or c.reduce != "sum" or c.dst != rank or c.src == rank:
            continue
        if c.src in out:
            lo, hi = out[c.src]
            out[c.src] = (tuple(map(min, lo, c.lo)), tuple(map(max, hi, c.hi)))
        else:
            out[c.src] = (c.lo, c.hi)
        vols[c.src] = vols.get(c.src, 0) + c.volume
    for s, (lo, hi) in out.items():
        if math.prod(y - x for x, y in zip(lo, hi)) != vols[s]:
            raise CompileError(f"the sum chunks from rank {s} into rank {rank} of {tensor!r} do not "
                               f"cover one box: the epilogue reduction masks one box per source")
    return out


def _aligned_param(func, name: str, ety):
    """The kernel parameter ``name`` if it is a ``!tt.ptr<ety>`` Triton knows to be 16-byte
    aligned (``tt.divisibility = 16``), else None."""
    body = func_body(func)
    attrs = func.properties.get("arg_attrs")
    for i, arg in enumerate(body.args):
        if arg.name_hint != name:
            continue
        if getattr(arg.type, "pointee_type", None) != ety or attrs is None or i >= len(attrs.data):
            return None
        div = attrs.data[i].data.get("tt.divisibility")
        return arg if div is not None and div.value.data % 16 == 0 else None
    return None


def _slot_base(b: Builder, base_addr, anchor, ety, es: int):
    """A ``!tt.ptr<ety>`` to the slot buffer at byte address ``base_addr`` (16-byte aligned:
    symmetric allocations are). Derived from ``anchor`` (an aligned parameter) plus a multiple of
    16 bytes when there is one, so Triton's alignment analysis sees an aligned pointer and
    vectorises the tile loads; else ``int_to_ptr`` (correct, with scalar loads)."""
    if anchor is None or 16 % es:
        return b.insert(tt.IntToPtrOp(base_addr, tt.PointerType(ety))).results[0]
    here = b.insert(tt.PtrToIntOp(anchor, i64)).results[0]
    units = b.insert(arith.ShRSIOp(b.sub(base_addr, here), b.const(4, i64))).result
    delta = b.mul(units, b.const(16 // es, i64))
    return addptr(b, anchor, delta)


def _add_slots(b: Builder, sched, tensor, shape, lo, extents, value, token, peers, rank, row, W,
               anchor=None):
    """``round(f32(value) + sum_s f32(slot[s][box] masked to what s sent here))``."""
    ety = value.type.element_type
    vshape = list(value.type.get_shape())
    wide = W * shape[0] * shape[1] >= 2 ** 31
    ity = i64 if wide else i32
    rows2 = broadcast_to(b, expand_dims(b, vec(b, lo[0], extents[0]), 1), vshape)
    cols2 = broadcast_to(b, expand_dims(b, vec(b, lo[1], extents[1]), 0), vshape)
    # this rank's slot buffer [W, *shape] (row-major, ours): element (s, i, j)
    base_i = scalar_load(b, addptr(b, peers, b.add(b.const(row * W), rank)))
    es = sched.element_bytes(tensor)
    base = _slot_base(b, base_i, anchor, ety, es)
    offs = b.add(b.mul(_wide(b, rows2, wide), splat(b, b.const(shape[1], ity), vshape)),
                 _wide(b, cols2, wide))
    # the wait's token (zero at run time) orders the loads after the wait: it joins the masks
    # (not the offsets, which would hide their alignment and break vectorised loads)
    ok = splat(b, b.cmp("eq", token, b.const(0)), vshape)
    f32t = TensorType(f32, vshape)
    acc = b.insert(arith.ExtFOp(value, f32t)).result
    zero = None
    into = {r: _boxes_by_source(sched, tensor, r) for r in range(W)}
    for s in range(W):
        # the box source s sent to each rank, selected by this rank (empty when none)
        boxes = {r: into[r].get(s) for r in range(W)}
        if not any(boxes.values()):
            continue
        mask = ok
        for d, coord in ((0, rows2), (1, cols2)):
            lo_v, hi_v = b.const(0), b.const(0)
            for r, box in boxes.items():
                if box is None:
                    continue
                is_r = b.cmp("eq", rank, b.const(r))
                lo_v = b.select(is_r, b.const(box[0][d]), lo_v)
                hi_v = b.select(is_r, b.const(box[1][d]), hi_v)
            m = b.andi(b.cmp("sge", coord, splat(b, lo_v, vshape)),
                       b.cmp("slt", coord, splat(b, hi_v, vshape)))
            mask = b.andi(mask, m)
        src = b.add(offs, splat(b, b.const(s * shape[0] * shape[1], ity), vshape))
        if zero is None:  # masked-off lanes read ``other`` = 0 (what s did not send adds nothing)
            zero = b.insert(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(
                TensorType(ety, vshape), [0.0]))).result
        part = b.insert(tt.LoadOp(addptr(b, splat(b, base, vshape), src), mask,
                                  zero)).results[0]
        acc = b.insert(arith.AddfOp(acc, b.insert(arith.ExtFOp(part, f32t)).result)).result
    return b.insert(arith.TruncFOp(acc, value.type)).result


def _wide(b: Builder, v, wide: bool):
    if not wide:
        return v
    return b.insert(arith.ExtSIOp(v, TensorType(i64, list(v.type.get_shape())))).result
