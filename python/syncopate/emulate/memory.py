"""Buffers, pointers and the shadow state of the CPU emulator.

A buffer is one rank's copy of one kernel argument (or of its flag array), flattened into a
numpy array of the element type's *storage* dtype.  numpy has no bfloat16, so bf16 data lives in
float32 arrays holding values already rounded to bf16 (round to nearest even on every store
and every arithmetic result), which reproduces bf16 arithmetic bit for bit while keeping numpy's
vectorised float32 kernels.  The float8 types (``f8E4M3FN``, ``f8E5M2``) are kept the same way:
float32 values already rounded to the format (every fp8 value is exactly a float32), rounded by
torch's ``float8_e4m3fn`` / ``float8_e5m2`` casts (round to nearest even) after clamping finite
and infinite values to the format's largest finite value -- the ``cvt.rn.satfinite`` that
Triton emits on sm_90 (torch's own cast would give NaN past the largest value).  A load of an
fp8 element and ``tt.dot`` of fp8 operands are then exact in float32.

A pointer is ``(buffer, element offset)``; a tensor of pointers is ``(buffer, offsets array)``.
Pointer values never become integers unless the kernel asks (``tt.ptr_to_int``): then a buffer
gets a fake, unique, 4 KiB-aligned base address so that address arithmetic (the lowered form
of ``syncopate.peer_ptr``: ``ptr - mine + theirs``) and ``tt.int_to_ptr`` resolve back to a
buffer of the right rank.

Memory is bytes, as on the GPU: an access reads or writes the bit patterns of the type the op
names.  A pointer whose element type differs from its buffer's (``tt.bitcast`` of a pointer,
``tt.int_to_ptr`` of an address) is a pointer into a *view* of the buffer (:meth:`Buffer.view`):
the same elements, the same shadow state, another element type of the same size; reading an
``i32`` view of an ``f32`` buffer gives the float's bit pattern, writing it writes bits.  That is
how Triton's ``tl.atomic_max``/``tl.atomic_min`` of floats work (integer max/min on the bits,
signed for non-negative operands and unsigned for negative ones).  A view converts on every
access (:func:`bits_of` of the viewed buffer's storage, :func:`from_bits` to the view's type), so
bf16 can keep its float32 storage: a bf16 value is exactly the upper half of its float32, so its
16 bits are recovered without loss.  Views of fp8 buffers are refused (the float32 storage of a
value cannot keep the several NaN encodings of ``f8E5M2``), as are views between types of
different sizes (an access would cover parts of several elements).

Shadow state (per element of a *tracked* buffer, i.e. a communicated tensor or an epilogue
slot): ``epoch_of`` -- which launch's data the element holds (0: none yet); ``remote_read`` --
the last epoch for which a peer (a pull transfer, a ``sum`` chunk's destination) finished
reading it.  The race checker (``checker.py``) reads and updates both, always on the viewed
buffer (:attr:`Buffer.base`): a view has no shadow state of its own.

Float atomic adds are logged per launch (:class:`FaddLog`): how many adds each element took and
the largest magnitude it held meanwhile -- what the comparison with the unfused kernel needs to
tell an order-dependent rounding from a wrong value (``reference.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from xdsl.dialects.builtin import IntegerType, TensorType

from .. import dtypes
from ..errors import EmulationError

# ----------------------------------------------------------------------------- element types


@dataclass(frozen=True)
class EType:
    """What the interpreter needs of an MLIR element type."""

    kind: str          # "int" | "float" | "ptr" | "other"
    bits: int
    np: np.dtype       # storage dtype
    name: str          # "bf16", "f16", "f32", "i32", ...

    @property
    def is_bf16(self) -> bool:
        return self.name == "bf16"

    @property
    def is_f8(self) -> bool:
        return self.name in _F8

    @property
    def rounds(self) -> bool:
        """Whether values of this type are float32 storage rounded to a narrower format."""
        return self.name == "bf16" or self.name in _F8


_FLOATS = {"bf16": (16, np.float32), "f16": (16, np.float16), "f32": (32, np.float32),
           "f64": (64, np.float64), "tf32": (32, np.float32),
           "f8E4M3FN": (8, np.float32), "f8E5M2": (8, np.float32)}
#: fp8 MLIR type -> (torch dtype name, largest finite value)
_F8 = {"f8E4M3FN": ("float8_e4m3fn", 448.0), "f8E5M2": ("float8_e5m2", 57344.0)}
_INTS = {1: np.bool_, 8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}


def _stored(n: str) -> EType | None:
    """The float or integer element type the MLIR name ``n`` (``bf16``, ``i32``) spells and
    the emulator has storage for, if any."""
    if n in _FLOATS:
        bits, dt = _FLOATS[n]
        return EType("float", bits, np.dtype(dt), n)
    if n.startswith("i") and n[1:].isdigit() and int(n[1:]) in _INTS:
        return EType("int", int(n[1:]), np.dtype(_INTS[int(n[1:])]), n)
    return None


def etype_of(t) -> EType:
    """The element type of an xDSL type (a scalar or the element type of a tensor)."""
    if isinstance(t, TensorType):
        t = t.element_type
    if isinstance(t, IntegerType):  # signless or not: the interpreter keeps the bits
        if t.width.data not in _INTS:
            raise EmulationError(f"the emulator has no storage for i{t.width.data}")
        return _stored(f"i{t.width.data}")
    name = t.name if hasattr(t, "name") else str(t)
    text = str(t)
    if text in _FLOATS:
        return _stored(text)
    if text in ("index",):
        return EType("int", 64, np.dtype(np.int64), "index")
    if "tt.ptr" in text or name == "tt.ptr":
        return EType("ptr", 64, np.dtype(np.int64), "ptr")
    return EType("other", 0, np.dtype(np.float32), text)


def etype_named(name: str) -> EType:
    """An element type from a schedule / signature dtype name (``bf16``, ``fp16``, ``*i32``)."""
    n = name.lstrip("*")
    if n not in _FLOATS and dtypes.is_known(n):
        n = dtypes.mlir_name(n)      # schedule / torch / Triton spelling -> MLIR element type
    et = _stored(n)
    if et is None:
        raise EmulationError(f"the emulator does not support element type {name!r}")
    return et


# ----------------------------------------------------------------------------- rounding

def _round_mantissa(x, drop: int) -> np.ndarray:
    """Float32 values rounded to nearest even with the low ``drop`` bits cleared (NaN kept)."""
    a = np.asarray(x, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    keep = (0xFFFFFFFF >> drop) << drop
    r = ((u + (1 << (drop - 1)) - 1 + ((u >> drop) & 1)) & keep).astype(np.uint32)
    return np.where(np.isnan(a), a, r.view(np.float32))


def round_bf16(x):
    """Round float32 values to bfloat16 (nearest even), kept in float32 storage."""
    r = _round_mantissa(x, 16)
    return r if isinstance(x, np.ndarray) else np.float32(r)


def round_f8(x, name: str):
    """Round float32 values to the fp8 format ``name`` (``f8E4M3FN``/``f8E5M2``) with sm_90's
    ``cvt.rn.satfinite``: finite and infinite values clamped to the largest finite value, then
    round to nearest even (torch's cast); NaN stays NaN. Kept in float32 storage."""
    import torch
    tname, top = _F8[name]
    a = np.clip(np.asarray(x, dtype=np.float32), -top, top)
    r = torch.from_numpy(np.ascontiguousarray(a)).to(getattr(torch, tname)).float().numpy()
    r = np.where(np.isnan(a), a, r)
    return r if isinstance(x, np.ndarray) else np.float32(r)


def round_float(x, et: "EType"):
    """``x`` (float32 storage) rounded to ``et`` when ``et`` is narrower than its storage."""
    if et.is_bf16:
        return round_bf16(x)
    if et.name in _F8:
        return round_f8(x, et.name)
    return x


def round_tf32(x):
    """Round float32 values to tf32 (10-bit mantissa, nearest even): ``inputPrecision=tf32``."""
    return _round_mantissa(x, 13)


def to_etype(x, et: EType):
    """Convert a value (numpy array or scalar) to ``et``'s storage, rounding floats."""
    if et.kind == "float":
        if isinstance(x, np.ndarray):
            return round_float(x.astype(et.np, copy=False), et)
        return round_float(et.np.type(x), et)
    if et.kind == "int":
        if isinstance(x, np.ndarray):
            return x.astype(et.np)  # i1's storage is bool
        return wrap_int(int(x), et.bits)
    return x


def wrap_int(v: int, bits: int) -> int:
    """``v`` as a signed ``bits``-bit integer (two's complement wrap), i1 as 0/1."""
    if bits == 1:
        return v & 1
    m = 1 << bits
    v &= m - 1
    return v - m if v >= (m >> 1) else v


# ----------------------------------------------------------------------------- bit patterns

_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def _check_bits_type(et: EType, where: str | None = None) -> None:
    if et.kind not in ("int", "float") or et.bits not in _UINT:
        raise EmulationError(f"the emulator has no bit-level view of {et.name} values", where)
    if et.is_f8:
        raise EmulationError(f"a bit-level view of {et.name} is not modelled (fp8 values are kept "
                             f"as float32, which cannot keep every NaN encoding of the format)",
                             where)


def bits_of(x, et: EType) -> np.ndarray:
    """The bit patterns (unsigned ``et.bits``-bit integers) of values ``x`` of type ``et``
    (in ``et``'s storage).  bf16: the upper half of the float32 after rounding to bf16 (a NaN
    whose payload lies only in the lower half keeps its quiet bit, so it stays a NaN)."""
    _check_bits_type(et)
    a = np.asarray(x)
    if et.is_bf16:
        b = (round_bf16(a.astype(np.float32)).view(np.uint32) >> 16).astype(np.uint16)
        return np.where(np.isnan(a), b | np.uint16(0x40), b)
    return a.astype(et.np, copy=False).view(_UINT[et.bits])


def from_bits(b, et: EType) -> np.ndarray:
    """Values of type ``et`` (in ``et``'s storage) with the bit patterns ``b``."""
    _check_bits_type(et)
    u = np.asarray(b).astype(_UINT[et.bits], copy=False)
    if et.is_bf16:
        return (u.astype(np.uint32) << 16).view(np.float32)
    return u.view(et.np)


# ----------------------------------------------------------------------------- buffers

_NEXT_ADDR = [1 << 32]


@dataclass
class FaddLog:
    """One launch's float atomic adds into a buffer, per element: how many (``count``) and the
    largest finite magnitude the element held before or after one of them (``scale``); ``et``
    is the added type.  A plain store (or another atomic) restarts an element's sequence."""

    et: EType
    count: np.ndarray
    scale: np.ndarray

    def note(self, offs: np.ndarray, old, new) -> None:
        """Distinct elements ``offs`` went from ``old`` to ``new`` by one add each."""
        self.count[offs] += 1
        mag = np.fmax(np.abs(np.asarray(old, np.float64)), np.abs(np.asarray(new, np.float64)))
        mag = np.where(np.isfinite(mag), mag, 0.0)
        self.scale[offs] = np.fmax(self.scale[offs], mag)

    def restart(self, offs: np.ndarray) -> None:
        self.count[offs] = 0
        self.scale[offs] = 0.0


@dataclass(eq=False)
class Buffer:
    """One rank's copy of a kernel argument (or flag array), flattened -- or a typed view of
    one (:meth:`view`; ``viewed`` is then the buffer whose storage ``data`` is)."""

    name: str
    rank: int
    et: EType
    data: np.ndarray
    shape: tuple[int, ...] = ()
    #: the schedule tensor this buffer holds (communicated operand), or None
    tensor: str | None = None
    #: shadow: epoch whose data each element holds (tracked buffers only)
    epoch_of: np.ndarray | None = None
    #: shadow: last epoch a peer finished reading each element (tracked buffers only)
    remote_read: np.ndarray | None = None
    addr: int = 0
    is_flags: bool = False
    #: the buffer this one is a typed view of (its storage is ``data``), or None
    viewed: Buffer | None = None
    #: launch -> its float atomic adds into this buffer (:class:`FaddLog`; on the viewed buffer)
    fadd: dict = field(default_factory=dict, repr=False)
    _views: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        if not self.shape:
            self.shape = (int(self.data.size),)
        if self.viewed is not None:
            self.addr = self.viewed.addr
            return
        self.addr = _NEXT_ADDR[0]
        _NEXT_ADDR[0] += (self.data.size * self.esize + 4095) // 4096 * 4096 + 4096

    @property
    def esize(self) -> int:
        return max(1, self.et.bits // 8)

    @property
    def base(self) -> Buffer:
        """The buffer that owns the storage and the shadow state (itself unless a view)."""
        return self.viewed if self.viewed is not None else self

    def view(self, et: EType, where: str | None = None) -> Buffer:
        """The elements of this buffer as type ``et`` (same size): the same storage and shadow
        state, accessed by bit pattern (:meth:`read`, :meth:`write`). One view per type."""
        base = self.base
        if et.name == base.et.name:
            return base
        v = base._views.get(et.name)
        if v is None:
            _check_bits_type(base.et, where)
            _check_bits_type(et, where)
            if et.bits != base.et.bits:
                raise EmulationError(f"a {base.et.name} buffer ({base.name}) accessed as "
                                     f"{et.name}: the emulator models views between element "
                                     f"types of the same size only", where)
            v = Buffer(base.name, base.rank, et, base.data, base.shape, base.tensor,
                       base.epoch_of, base.remote_read, is_flags=base.is_flags, viewed=base)
            base._views[et.name] = v
        return v

    def read(self, offs) -> np.ndarray:
        """The values at element offsets ``offs`` (no bounds check), in ``et``'s storage."""
        if self.viewed is None:
            return self.data[offs]
        return from_bits(bits_of(self.data[offs], self.viewed.et), self.et)

    def write(self, offs, vals) -> None:
        """Store ``vals`` (``et``'s storage) at element offsets ``offs`` (no bounds check)."""
        if self.viewed is None:
            self.data[offs] = vals
        else:
            self.data[offs] = from_bits(bits_of(vals, self.et), self.viewed.et)

    def fadd_log(self, epoch: int, et: EType) -> FaddLog:
        """The float atomic adds of launch ``epoch`` into this buffer (created empty)."""
        base = self.base
        lg = base.fadd.get(epoch)
        if lg is None:
            n = base.data.size
            lg = base.fadd[epoch] = FaddLog(et, np.zeros(n, np.int64), np.zeros(n, np.float64))
        return lg

    def restart_fadd(self, epoch: int, offs) -> None:
        """Elements ``offs`` were written by something other than a float atomic add."""
        lg = self.base.fadd.get(epoch)
        if lg is not None:
            lg.restart(offs)

    def track(self, tensor: str | None) -> None:
        self.tensor = tensor
        self.epoch_of = np.zeros(self.data.size, dtype=np.int32)
        self.remote_read = np.zeros(self.data.size, dtype=np.int32)
        self._views.clear()  # views share the shadow arrays: make them afresh

    @property
    def tracked(self) -> bool:
        return self.epoch_of is not None

    def check_bounds(self, offs: np.ndarray, where: str) -> None:
        if offs.size and (offs.min() < 0 or offs.max() >= self.data.size):
            bad = offs[(offs < 0) | (offs >= self.data.size)][0]
            raise EmulationError(f"{where}: out-of-bounds access to {self.name} on rank "
                                 f"{self.rank}: element {int(bad)} of {self.data.size}")


@dataclass(frozen=True)
class Ptr:
    """A scalar pointer: ``buf`` plus an element offset."""

    buf: Buffer
    off: int


@dataclass(frozen=True)
class PtrTensor:
    """A tensor of pointers into one buffer."""

    buf: Buffer
    offs: np.ndarray  # int64

    @property
    def shape(self):
        return self.offs.shape


@dataclass(frozen=True)
class BlockPtr:
    """``tt.make_tensor_ptr``: a block of a strided tensor view of ``buf``."""

    buf: Buffer
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offsets: tuple[int, ...]
    block: tuple[int, ...]


@dataclass(frozen=True)
class TensorDesc:
    """``tt.make_tensor_descriptor``: a TMA descriptor (zero fill on loads, clipped stores)."""

    buf: Buffer
    base: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    block: tuple[int, ...]
    pad_nan: bool = False


def block_offsets(base: int, shape, strides, start, block, check_dims) -> tuple[np.ndarray, np.ndarray]:
    """Element offsets of a block and the in-bounds mask over ``check_dims`` (all dims when
    ``check_dims`` is None)."""
    nd = len(block)
    offs = np.full(tuple(block), base, dtype=np.int64)
    mask = np.ones(tuple(block), dtype=bool)
    for d in range(nd):
        idx = int(start[d]) + np.arange(block[d], dtype=np.int64)
        sh = [1] * nd
        sh[d] = block[d]
        idx = idx.reshape(sh)
        offs = offs + idx * int(strides[d])
        if check_dims is None or d in check_dims:
            mask = mask & (idx >= 0) & (idx < int(shape[d]))
    return offs, mask


@dataclass
class AddressMap:
    """Fake addresses of every buffer of the emulated world (``tt.int_to_ptr``)."""

    buffers: list[Buffer] = field(default_factory=list)

    def add(self, b: Buffer) -> None:
        self.buffers.append(b)

    def resolve(self, addr: int, where: str) -> tuple[Buffer, int]:
        for b in self.buffers:
            end = b.addr + b.data.size * b.esize
            if b.addr <= addr < end or addr == end:
                off, rem = divmod(addr - b.addr, b.esize)
                if rem:
                    raise EmulationError(f"{where}: address {addr:#x} is not aligned to an "
                                         f"element of {b.name}")
                return b, off
        raise EmulationError(f"{where}: address {addr:#x} points into no emulated buffer")
