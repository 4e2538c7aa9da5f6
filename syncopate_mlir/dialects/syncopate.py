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

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from immutabledict import immutabledict
from xdsl.dialects.builtin import (
    DenseArrayBase,
    IntegerAttr,
    IntegerType,
    ModuleOp,
    StringAttr,
    UnitAttr,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Block, Data, Dialect, Region, SpacedOpaqueSyntaxAttribute, SSAValue
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
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from syncopate.errors import CompileError, ScheduleError
from syncopate.schedule.json_io import dumps, loads
from syncopate.schedule.model import Schedule
from syncopate.tiling import RemapSlice, StoreSlice

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
    assembly_format = ("$flags `,` $epoch `,` $rank `[` $lo `]` `to` `[` $hi `]` attr-dict "
                       "`:` type($flags)")

    def __init__(self, flags: SSAValue, epoch: SSAValue, rank: SSAValue, lo: Sequence[SSAValue],
                 hi: Sequence[SSAValue], tensor: str):
        # wait_region's one result, its i32 token; signal_region has none
        super().__init__(operands=[flags, epoch, rank, list(lo), list(hi)],
                         result_types=[I32] * len(self.get_irdl_definition().results),
                         properties={"tensor": StringAttr(tensor)})

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


@irdl_op_definition
class SignalRegionOp(_RegionOp):
    """This program has finished writing ``[lo, hi)`` of ``tensor``: count one producer
    completion for every chunk leaving this rank that intersects the box."""

    name = "syncopate.signal_region"


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
    epoch, the rank, and this rank's flag array (and the format of the steps with no other
    operand)."""

    assembly_format = "$pid `,` $count `,` $epoch `,` $rank `,` $flags attr-dict `:` type($flags)"
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

    def __init__(self, pid, count, epoch, rank, flags, reads: int):
        super().__init__(operands=[pid, count, epoch, rank, flags],
                         properties={"reads": IntegerAttr(reads, I32)})


# ---------------------------------------------------------------------------- module state
# What travels with a fused compile, as three typed module attributes (the one place their names
# are defined): the schedule, the request (``syncopate.compile``'s options) and the state the
# passes build up for the runtime (``passes/abi_info.read_abi`` makes the FusedABI of it).  Each
# holds its value as a Python object, made once when the module is built or parsed, so a pass
# reads ``request_of(module).backend`` or ``schedule_of(module).chunks`` without parsing
# anything; the values are immutable (a pass records facts with :func:`record`).

#: the module attribute keys, each also the name of the attribute stored under it
ATTR_SCHEDULE = "syncopate.schedule"
ATTR_REQUEST = "syncopate.request"
ATTR_STATE = "syncopate.state"


class ReduceAt(StrEnum):
    """Where ``sum`` chunks are added: by the comm programs (or the host after a ``ce``
    kernel), or by the owner's producer tiles from per-source slots (``insert-epilogue-reduce``)."""
    COMM = "comm"
    EPILOGUE = "epilogue"


class LoweringForm(StrEnum):
    """How chunk-level code is emitted: per chunk, as loops over the chunk table, or chosen by
    the chunk count (:func:`syncopate.chunk_table.choose_lowering`)."""
    AUTO = "auto"
    UNROLLED = "unrolled"
    TABLE = "table"


class SelfAdvance(StrEnum):
    """Whether the kernel advances its own epoch word (``self-advance-epoch``): ``on`` refuses a
    kernel that cannot, ``auto`` compiles it without."""
    OFF = "off"
    ON = "on"
    AUTO = "auto"


class CommMode(StrEnum):
    """How the comm programs move the chunks (``partition-sms``)."""
    PUSH = "push"
    PULL = "pull"
    MIXED = "mixed"


EMPTY: Mapping = immutabledict()


@dataclass(frozen=True)
class Request:
    """What the fused compile asks for: set once (compile hook, ``attach-schedule``), only read
    by the passes."""

    operands: Mapping[str, str] = EMPTY        # kernel parameter -> schedule tensor
    backend: str = "sm"
    comm_programs: int | None = None           # None: the backend's default
    params: tuple[str, ...] = ()               # non-constexpr parameters in order (): SSA names
    reduce: ReduceAt = ReduceAt.COMM
    lowering: LoweringForm = LoweringForm.AUTO
    remap: bool = True                         # False: tile-remap keeps the tile order
    reorder_reductions: bool = False           # tile-remap may renumber float-accumulating loops
    trace: bool = False                        # insert-trace records events
    self_advance: SelfAdvance = SelfAdvance.OFF
    withhold: tuple[int, ...] = ()             # chunks never signalled (fault injection)

    def __post_init__(self):
        _coerce_fields(self)


@dataclass(frozen=True)
class Remapped:
    """A tensor dim tile-remap renumbered: tiles of ``block`` along ``dim``, as ``role``; by the
    program ids, or by a loop's iterations (``loop``, whose float reductions then run in
    another order when ``reorders_reductions``)."""

    dim: int
    block: int
    tiles: int
    role: str
    loop: bool = False
    reorders_reductions: bool = False

    def __post_init__(self):
        _coerce_fields(self)


@dataclass(frozen=True)
class KernelState:
    """What the passes learned about the fused kernel, by the pass that learns it; the runtime
    gets it as the FusedABI (docs/fused-abi.md)."""

    grid_axes: tuple[int, ...] | None = None   # check-accesses: program-id axes read
    upper_bounds: Mapping[str, int] = EMPTY    # check-accesses: parameter <= bound at launch
    stores: tuple[StoreSlice, ...] = ()        # check-accesses: produced stores, checked at launch
    remap: Mapping[str, Remapped] = EMPTY      # tile-remap
    remap_checks: tuple[RemapSlice, ...] = ()  # tile-remap: its tiles' grid, checked at launch
    remarks: tuple[str, ...] = ()              # what a pass left as written, and why
    reordered: bool = False                    # tile-remap renumbered float reductions
    requirements: Mapping[str, int] = EMPTY    # insert-waits: parameter == value at launch
    waits: int = 0
    produced: Mapping[int, int] = EMPTY        # insert-signals: chunk -> producer volume
    signals: int = 0
    epilogue_slots: tuple[str, ...] = ()       # insert-epilogue-reduce: slotted tensors
    mode: CommMode | None = None               # partition-sms
    reads_per_src: Mapping[int, int] = EMPTY   # partition-sms: rank -> CONSUMED per epoch
    table: tuple[int, ...] | None = None       # the chunk table, once built
    table_remaps: tuple[tuple[int, int], ...] = ()  # (start, tiles) of its remap sections
    self_advanced: bool = False                # self-advance-epoch applied

    def __post_init__(self):
        _coerce_fields(self)


@functools.cache
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _coerce(value, hint):
    """``value`` as a field of type ``hint``: mappings frozen, sequences as tuples, an enum's
    value as the enum, a mapping as a dataclass, a string key as an int (what the parser and
    the passes give, made the one typed form)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if value is None or (isinstance(hint, type) and isinstance(value, hint)):
        return value
    if origin in (typing.Union, types.UnionType):
        return _coerce(value, next(a for a in args if a is not type(None)))
    if origin is Mapping:
        return immutabledict({_coerce(k, args[0]): _coerce(v, args[1])
                              for k, v in dict(value).items()})
    if origin is tuple:
        if args[1:] == (Ellipsis,):
            return tuple(value) if args[0] in (int, str) else tuple(
                _coerce(x, args[0]) for x in value)
        return tuple(_coerce(x, t) for x, t in zip(value, args, strict=True))
    if dataclasses.is_dataclass(hint) and not isinstance(value, hint):
        return hint(**value)
    if isinstance(hint, type) and issubclass(hint, StrEnum) and value not in list(hint):
        raise ValueError(f"choose one of {', '.join(hint)}")
    return hint(value)  # int (a mapping's key as text), an enum's value


def _coerce_fields(obj) -> None:
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        try:
            object.__setattr__(obj, f.name, _coerce(value, hints[f.name]))
        except (TypeError, ValueError) as e:
            raise ValueError(f"{f.name}={value!r}: {e}") from None


def _print_value(p: Printer, v) -> None:
    if isinstance(v, bool):
        p.print_string("true" if v else "false")
    elif isinstance(v, StrEnum):
        p.print_string(v.value)
    elif isinstance(v, int):
        p.print_string(str(v))
    elif isinstance(v, str):
        p.print_string_literal(v)
    elif dataclasses.is_dataclass(v):
        with p.in_braces():
            _print_fields(p, v)
    elif isinstance(v, Mapping):
        with p.in_braces():
            p.print_list(v.items(), lambda kv: _print_entry(p, str(kv[0]), kv[1]))
    else:
        with p.in_square_brackets():
            p.print_list(v, lambda x: _print_value(p, x))


def _print_entry(p: Printer, key: str, value) -> None:
    p.print_identifier_or_string_literal(key)
    p.print_string(" = ")
    _print_value(p, value)


def _print_fields(p: Printer, obj) -> None:
    items = [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
             if getattr(obj, f.name) != f.default]
    p.print_list(items, lambda kv: _print_entry(p, *kv))


def _parse_value(parser: AttrParser):
    for parse in (parser.parse_optional_boolean, parser.parse_optional_integer,
                  parser.parse_optional_str_literal, parser.parse_optional_identifier):
        if (value := parse()) is not None:
            return value
    items = parser.parse_optional_comma_separated_list(parser.Delimiter.SQUARE,
                                                        lambda: _parse_value(parser))
    if items is not None:
        return items
    return dict(parser.parse_comma_separated_list(parser.Delimiter.BRACES,
                                                  lambda: _parse_entry(parser)))


def _parse_entry(parser: AttrParser) -> tuple[str, object]:
    key = parser.parse_identifier_or_str_literal()
    parser.parse_punctuation("=")
    return key, _parse_value(parser)


class _FieldsAttr(Data):
    """A ``Data`` attribute whose value is one of the frozen dataclasses above, printed as
    ``#syncopate.<name><field = value, ...>`` (fields at their default left out)."""

    payload: typing.ClassVar[type]

    @classmethod
    def parse_parameter(cls, parser: AttrParser):
        start = parser.pos
        entries = parser.parse_comma_separated_list(parser.Delimiter.ANGLE,
                                                    lambda: _parse_entry(parser))
        try:
            return cls.payload(**dict(entries))
        except (TypeError, ValueError) as e:
            parser.raise_error(f"#{cls.name}: {e}", start, parser.pos)

    def print_parameter(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            _print_fields(printer, self.data)


@irdl_attr_definition
class RequestAttr(_FieldsAttr):
    name = ATTR_REQUEST
    payload = Request


@irdl_attr_definition
class StateAttr(_FieldsAttr):
    name = ATTR_STATE
    payload = KernelState


@irdl_attr_definition
class ScheduleAttr(Data[Schedule]):
    """The verified schedule (:class:`syncopate.schedule.Schedule`, the model the verifier and
    the runtime use), printed as its JSON interchange text (``syncopate.schedule``'s format)
    and read from it once, when the module is parsed."""

    name = ATTR_SCHEDULE

    @classmethod
    def parse_parameter(cls, parser: AttrParser) -> Schedule:
        with parser.in_angle_brackets():
            start = parser.pos
            text = parser.parse_str_literal()
        try:
            return loads(text)
        except ScheduleError as e:
            parser.raise_error(f"#{cls.name} is not a schedule: {e}", start, parser.pos)

    def print_parameter(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string_literal(self.text)

    @functools.cached_property
    def text(self) -> str:
        return dumps(self.data, compact=True)

    def verify(self) -> None:
        ids = [c.id for c in self.data.chunks]
        if sorted(ids) != list(range(len(ids))):
            raise VerifyException("chunk ids must be dense 0..C-1 for the flag layout; "
                                  "renumber the schedule's chunks")


def schedule_of(module: ModuleOp) -> Schedule:
    attr = module.attributes.get(ATTR_SCHEDULE)
    if not isinstance(attr, ScheduleAttr):
        raise CompileError(f"the module has no '{ATTR_SCHEDULE}' attribute: attach a schedule "
                           f"(syncopate.compile does; lit tests set it by hand)")
    return attr.data


def request_of(module: ModuleOp) -> Request:
    """The module's request; the defaults without one (dialect-only lit tests)."""
    attr = module.attributes.get(ATTR_REQUEST)
    return attr.data if isinstance(attr, RequestAttr) else Request()


def state_of(module: ModuleOp) -> KernelState:
    attr = module.attributes.get(ATTR_STATE)
    return attr.data if isinstance(attr, StateAttr) else KernelState()


def strip_module_state(module: ModuleOp) -> None:
    """Drop the three attributes: what Triton reads has no ``syncopate`` attribute."""
    for key in (ATTR_SCHEDULE, ATTR_REQUEST, ATTR_STATE):
        module.attributes.pop(key, None)


def record(module: ModuleOp, **facts) -> KernelState:
    """Record ``facts`` (fields of :class:`KernelState`) in the module's state."""
    state = dataclasses.replace(state_of(module), **facts)
    module.attributes[ATTR_STATE] = StateAttr(state)
    return state


SYNCOPATE = Dialect(
    "syncopate",
    [WaitRegionOp, SignalRegionOp, WaitOp, SignalOp, ReleaseFenceOp, PeerPtrOp, RemapOp, CommOp,
     EnterOp, TransferOp, TransferChunkOp, DrainOp],
    [FlagKindAttr, UpdateAttr, ScheduleAttr, RequestAttr, StateAttr],
)
