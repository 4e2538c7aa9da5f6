"""The ``syncopate`` dialect: the synchronisation and communication ops the overlap passes insert.

The passes work in two levels so that each lit test shows one idea at a time:

* **region level** (what the analysis knows): ``wait_region`` / ``signal_region`` say "this
  program is about to read / has written this region of the global tensor T"; ``remap`` says
  "this tile coordinate runs in chunk-arrival order"; ``comm`` + ``transfer`` / ``enter`` /
  ``drain`` say what the comm programs do.
* **chunk level** (what the schedule resolves it to): ``wait`` spins until
  ``flags[index] >= target``; ``signal`` releases ``flags[index] += value`` (or ``= value``).

``lower-<backend>`` turns both levels into ``tt``/``arith``/``scf`` plus inline PTX, so Triton
never sees a ``syncopate`` op.  The semantics are those of docs/architecture.md and docs/fused-abi.md:
waits acquire at system scope and return a token (an ``i32`` zero at run time) that the guarded
loads depend on, so nothing that reads a chunk can be scheduled above its wait.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    StringAttr,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Block, Dialect, Region, SpacedOpaqueSyntaxAttribute, SSAValue
from xdsl.irdl import (
    AttrSizedOperandSegments,
    BaseAttr,
    IRDLOperation,
    ParsePropInAttrDict,
    VarConstraint,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    prop_def,
    region_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from .tt import PointerType

I32 = IntegerType(32)


class FlagKind(StrEnum):
    """Which flag a wait or signal is about (docs/fused-abi.md, the flag layout)."""
    CHUNK = "chunk"
    ENTRY = "entry"
    CONSUMED = "consumed"
    PRODUCED = "produced"


class Update(StrEnum):
    """How a signal changes its flag: ``flags[index] += value`` or ``= value``."""
    ADD = "add"
    SET = "set"


@irdl_attr_definition
class FlagKindAttr(EnumAttribute[FlagKind], SpacedOpaqueSyntaxAttribute):
    name = "syncopate.flag_kind"


@irdl_attr_definition
class UpdateAttr(EnumAttribute[Update], SpacedOpaqueSyntaxAttribute):
    name = "syncopate.update"


#: a pointer operand: any ``!tt.ptr`` (the flags, a peer table row, a communicated operand)
PTR = BaseAttr(PointerType)


class _RegionOp(IRDLOperation):
    """Shared shape of ``wait_region`` and ``signal_region``: a box of the global tensor."""

    flags = operand_def(PTR)
    epoch = operand_def(I32)
    rank = operand_def(I32)
    lo = var_operand_def(I32)
    hi = var_operand_def(I32)
    tensor = prop_def(StringAttr)

    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    def verify_(self) -> None:
        if len(self.lo) != len(self.hi) or not self.lo:
            raise VerifyException(
                f"'{self.name}' needs one lower and one upper bound per tensor dim "
                f"(got {len(self.lo)} and {len(self.hi)})")


@irdl_op_definition
class WaitRegionOp(_RegionOp):
    """Block until every chunk delivered to this rank that intersects ``[lo, hi)`` of
    ``tensor`` has arrived in this epoch.  Lowered per chunk by the ``resolve-chunks`` step of
    lowering into ``scf.if`` + :class:`WaitOp`."""

    name = "syncopate.wait_region"
    token = result_def(I32)

    assembly_format = ("$flags `,` $epoch `,` $rank `[` $lo `]` `to` `[` $hi `]` attr-dict "
                       "`:` type($flags)")

    def __init__(self, flags: SSAValue, epoch: SSAValue, rank: SSAValue, lo: Sequence[SSAValue],
                 hi: Sequence[SSAValue], tensor: str):
        super().__init__(operands=[flags, epoch, rank, list(lo), list(hi)], result_types=[I32],
                         properties={"tensor": StringAttr(tensor)})


@irdl_op_definition
class SignalRegionOp(_RegionOp):
    """This program has finished writing ``[lo, hi)`` of ``tensor``: count one producer
    completion for every chunk leaving this rank that intersects the box."""

    name = "syncopate.signal_region"

    assembly_format = ("$flags `,` $epoch `,` $rank `[` $lo `]` `to` `[` $hi `]` attr-dict "
                       "`:` type($flags)")

    def __init__(self, flags: SSAValue, epoch: SSAValue, rank: SSAValue, lo: Sequence[SSAValue],
                 hi: Sequence[SSAValue], tensor: str):
        super().__init__(operands=[flags, epoch, rank, list(lo), list(hi)],
                         properties={"tensor": StringAttr(tensor)})


@irdl_op_definition
class WaitOp(IRDLOperation):
    """Spin until ``flags[index] >= target`` (acquire, system scope), with the watchdog.

    ``kind`` and ``chunk`` only feed the watchdog record and diagnostics."""

    name = "syncopate.wait"
    irdl_options = (ParsePropInAttrDict(),)
    flags = operand_def(PTR)
    index = operand_def(I32)
    target = operand_def(I32)
    kind = prop_def(FlagKindAttr)
    chunk = opt_prop_def(IntegerAttr)
    token = result_def(I32)

    assembly_format = ("$kind $flags `[` $index `]` `,` `target` $target attr-dict "
                       "`:` type($flags)")

    def __init__(self, flags: SSAValue, index: SSAValue, target: SSAValue,
                 kind: FlagKind | str = FlagKind.CHUNK, chunk: int | None = None):
        props: dict[str, Attribute] = {"kind": FlagKindAttr(FlagKind(kind))}
        if chunk is not None:
            props["chunk"] = IntegerAttr(chunk, I32)
        super().__init__(operands=[flags, index, target], result_types=[I32], properties=props)


@irdl_op_definition
class SignalOp(IRDLOperation):
    """After every prior store of this program is complete, release ``flags[index] op= value``
    at system scope from one thread (``op`` is ``add`` or ``set``).  ``fenced``: a
    :class:`ReleaseFenceOp` before it already completed the stores (a loop of signals, the
    table lowering, pays one barrier for all)."""

    name = "syncopate.signal"
    irdl_options = (ParsePropInAttrDict(),)
    flags = operand_def(PTR)
    index = operand_def(I32)
    value = operand_def(I32)
    op = prop_def(UpdateAttr)
    kind = prop_def(FlagKindAttr)
    fenced = opt_prop_def(UnitAttr)

    assembly_format = "$op $kind $flags `[` $index `]` `,` $value attr-dict `:` type($flags)"

    def __init__(self, flags: SSAValue, index: SSAValue, value: SSAValue,
                 op: Update | str = Update.ADD, kind: FlagKind | str = FlagKind.CHUNK,
                 fenced: bool = False):
        props: dict[str, Attribute] = {"op": UpdateAttr(Update(op)),
                                       "kind": FlagKindAttr(FlagKind(kind))}
        if fenced:
            props["fenced"] = UnitAttr()
        super().__init__(operands=[flags, index, value], properties=props)


@irdl_op_definition
class ReleaseFenceOp(IRDLOperation):
    """Make every prior store of this program complete (bulk stores included) before the
    ``fenced`` signals that follow: one CTA barrier for a loop of signals."""

    name = "syncopate.release_fence"
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()


@irdl_op_definition
class PeerPtrOp(IRDLOperation):
    """The address of ``ptr`` in rank ``rank``'s copy of symmetric buffer ``buffer`` (row of the
    ``syn_peers`` table: 0 = flags, 1 + i = communicated operand i)."""

    name = "syncopate.peer_ptr"
    irdl_options = (ParsePropInAttrDict(),)
    T: ClassVar = VarConstraint("T", PTR)
    ptr = operand_def(T)
    rank = operand_def(I32)
    buffer = prop_def(IntegerAttr)
    result = result_def(T)

    assembly_format = "$ptr `,` $rank attr-dict `:` type($ptr) `->` type($result)"

    def __init__(self, ptr: SSAValue, rank: SSAValue, buffer: int):
        super().__init__(operands=[ptr, rank], result_types=[ptr.type],
                         properties={"buffer": IntegerAttr(buffer, I32)})


@irdl_op_definition
class RemapOp(IRDLOperation):
    """Tile coordinate ``coord`` (a block index along ``dim`` of ``tensor``) of a program, run
    in chunk-arrival order: the result is ``table[rank * tiles + coord]``.

    ``table`` holds, per rank, a permutation of ``0..tiles-1``; the lowering emits closed-form
    arithmetic when every row is a rotation, a select chain otherwise."""

    name = "syncopate.remap"
    irdl_options = (ParsePropInAttrDict(),)
    coord = operand_def(I32)
    rank = operand_def(I32)
    tensor = prop_def(StringAttr)
    dim = prop_def(IntegerAttr)
    block = prop_def(IntegerAttr)
    tiles = prop_def(IntegerAttr)
    table = prop_def(DenseArrayBase)
    result = result_def(I32)

    assembly_format = "$coord `,` $rank attr-dict"

    def __init__(self, coord: SSAValue, rank: SSAValue, tensor: str, dim: int, block: int,
                 tiles: int, table: Sequence[int]):
        super().__init__(
            operands=[coord, rank], result_types=[I32],
            properties={"tensor": StringAttr(tensor), "dim": IntegerAttr(dim, I32),
                        "block": IntegerAttr(block, I32), "tiles": IntegerAttr(tiles, I32),
                        "table": DenseArrayBase.from_list(I32, list(table))})

    def verify_(self) -> None:
        tiles = self.tiles.value.data
        values = self.table.get_values()
        if tiles <= 0 or len(values) % tiles:
            raise VerifyException("'syncopate.remap' table length must be a multiple of tiles")
        for r in range(len(values) // tiles):
            row = values[r * tiles:(r + 1) * tiles]
            if sorted(row) != list(range(tiles)):
                raise VerifyException(
                    f"'syncopate.remap' row {r} of the table is not a permutation of 0..{tiles - 1}")


@irdl_op_definition
class CommOp(IRDLOperation):
    """The body run by the comm programs (``program_id(0) < comm_programs``) of a fused kernel:
    ``pid`` is the comm program's index, ``count`` the number of comm programs."""

    name = "syncopate.comm"
    pid = operand_def(I32)
    count = operand_def(I32)
    body = region_def("single_block")
    traits = traits_def(NoTerminator())

    assembly_format = "$pid `,` $count attr-dict-with-keyword $body"

    def __init__(self, pid: SSAValue, count: SSAValue, body: Region | None = None):
        super().__init__(operands=[pid, count], regions=[body or Region(Block())])


class _CommStep(IRDLOperation):
    """Shared operands of the comm-program steps: which comm program this is, of how many, the
    epoch, the rank, and this rank's flag array."""

    pid = operand_def(I32)
    count = operand_def(I32)
    epoch = operand_def(I32)
    rank = operand_def(I32)
    flags = operand_def(PTR)


@irdl_op_definition
class EnterOp(_CommStep):
    """Comm program 0 writes ``ENTRY[rank] = epoch`` on every peer (release, system scope):
    this rank's inputs for the epoch are staged and its previous launch is complete."""

    name = "syncopate.enter"
    assembly_format = "$pid `,` $count `,` $epoch `,` $rank `,` $flags attr-dict `:` type($flags)"

    def __init__(self, pid, count, epoch, rank, flags):
        super().__init__(operands=[pid, count, epoch, rank, flags])


@irdl_op_definition
class TransferOp(_CommStep):
    """This comm program's share of chunk ``chunk``: for ``push`` on the source rank, copy the
    region from the local buffer into the destination's; for ``pull`` on the destination rank,
    copy it from the source's; ``sum`` chunks accumulate.  Then signal ``CHUNK[chunk]`` on the
    destination (and ``CONSUMED`` on the source for pull).  ``operand`` is the row of the peer
    table (1 + operand index) that holds the tensor."""

    name = "syncopate.transfer"
    irdl_options = (ParsePropInAttrDict(),)
    base = operand_def(PTR)
    chunk = prop_def(IntegerAttr)
    operand = prop_def(IntegerAttr)

    assembly_format = ("$base `,` $pid `,` $count `,` $epoch `,` $rank `,` $flags attr-dict "
                       "`:` type($base) `,` type($flags)")

    def __init__(self, base, pid, count, epoch, rank, flags, chunk: int, operand: int):
        super().__init__(operands=[base, pid, count, epoch, rank, flags],
                         properties={"chunk": IntegerAttr(chunk, I32),
                                     "operand": IntegerAttr(operand, I32)})


@irdl_op_definition
class TransferChunkOp(_CommStep):
    """The table form of :class:`TransferOp` (``lowering="table"``): this comm program's share
    of chunk ``chunk``, an id read at run time from this rank's EXEC list of the chunk table
    ``table`` (docs/fused-abi.md "The chunk table"); the chunk's box, ends, kind and
    ``after`` list come from its record.  ``bases`` are the communicated operands' base
    pointers in operand order (peer-table row ``1 + i`` for ``bases[i]``).  The lowering emits
    one body per kind of chunk the schedule has (tensor, side, sum), not one per chunk."""

    name = "syncopate.transfer_chunk"
    table = operand_def(PTR)
    chunk = operand_def(I32)
    bases = var_operand_def(PTR)

    assembly_format = ("$pid `,` $count `,` $epoch `,` $rank `,` $flags `,` $table `,` $chunk "
                       "`bases` `(` $bases `)` attr-dict `:` type($flags) `,` type($table) "
                       "`,` type($bases)")

    def __init__(self, pid, count, epoch, rank, flags, table, chunk, bases):
        super().__init__(operands=[table, chunk, list(bases), pid, count, epoch, rank, flags])


@irdl_op_definition
class DrainOp(_CommStep):
    """Pull mode: before the launch may complete, wait until every reader has consumed this
    rank's chunks of the epoch (``CONSUMED >= epoch * reads``), so the next launch can
    overwrite the buffer without a write-after-read race."""

    name = "syncopate.drain"
    irdl_options = (ParsePropInAttrDict(),)
    reads = prop_def(IntegerAttr)
    assembly_format = "$pid `,` $count `,` $epoch `,` $rank `,` $flags attr-dict `:` type($flags)"

    def __init__(self, pid, count, epoch, rank, flags, reads: int):
        super().__init__(operands=[pid, count, epoch, rank, flags],
                         properties={"reads": IntegerAttr(reads, I32)})


SYNCOPATE = Dialect(
    "syncopate",
    [WaitRegionOp, SignalRegionOp, WaitOp, SignalOp, ReleaseFenceOp, PeerPtrOp, RemapOp, CommOp,
     EnterOp, TransferOp, TransferChunkOp, DrainOp],
    [FlagKindAttr, UpdateAttr],
)

#: Module attributes the passes read (set by the compile hook or by lit tests).
ATTR_SCHEDULE = "syncopate.schedule"      # StringAttr: the verified schedule, JSON v1
ATTR_OPERANDS = "syncopate.operands"      # DictionaryAttr: kernel param name -> tensor name
ATTR_BACKEND = "syncopate.backend"        # StringAttr: sm | ce | nvshmem
ATTR_COMM_PROGRAMS = "syncopate.comm_programs"  # IntegerAttr (i32)
ATTR_RANK_INFO = "syncopate.abi"          # StringAttr: FusedABI JSON, written by the passes
