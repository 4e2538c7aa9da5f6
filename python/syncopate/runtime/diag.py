"""The watchdog record (``syn_diag``): decoding and the host-side check.

Pure Python (no torch, no CUDA) so it is unit-tested on CPU.

Record protocol (docs/fused-abi.md, "The watchdog record"), with the one ordering rule the
host relies on to never read a half-written record:

1. the first spin to time out claims the record: ``atomicCAS(&diag[STATE], 0, 1)``;
2. it writes rank, flag index, observed value, expected value, kind and program id;
3. ``fence.sc.sys``; then it writes the **epoch word last** (``st.release.sys``).

Epochs start at 1, so ``diag[EPOCH] != 0`` means "record complete". The host seeing
``STATE == 1`` with ``EPOCH == 0`` waits (briefly) for the writer to finish.
"""

from __future__ import annotations

import time

from .. import abi
from ..errors import CommTimeout, TimeoutRecord
from . import _cuda


def wrap32(x: int) -> int:
    """``x`` as the int32 a 32-bit word holds after wrapping (the record's words; the targets
    of 32-bit spins: flags may wrap, :class:`.epochs.EpochCounter` says why that is safe)."""
    x &= 0xFFFFFFFF
    return x - (1 << 32) if x & 0x80000000 else x


def decode(words) -> TimeoutRecord | None:
    """A :class:`TimeoutRecord` from the record's int32 words, or None if no timeout is recorded
    (state 0) or the record is still being written (state 1, epoch word 0)."""
    w = [wrap32(int(x)) for x in list(words)[: abi.DIAG_WORDS]]
    if len(w) < 8 or w[abi.DIAG_STATE] == 0 or w[abi.DIAG_EPOCH] == 0:
        return None
    return _record(w, f"kind{w[abi.DIAG_KIND]}", w[abi.DIAG_EPOCH])


def _record(w: list[int], unknown_kind: str, epoch: int) -> TimeoutRecord:
    """The record of the (sign-corrected) words ``w``; ``unknown_kind`` names a kind code
    outside ``abi.KIND_NAMES``."""
    rec = TimeoutRecord(rank=w[abi.DIAG_RANK], chunk=w[abi.DIAG_FLAG], flag_value=w[abi.DIAG_VALUE],
                        expected=w[abi.DIAG_EXPECTED],
                        kind=abi.KIND_NAMES.get(w[abi.DIAG_KIND], unknown_kind),
                        program=w[abi.DIAG_PROGRAM])
    rec.epoch = epoch  # not a dataclass field (errors.py is shared); kept as attribute
    return rec


def describe_flag(index: int, layout: abi.FlagLayout | None) -> str:
    """Human name of flag word ``index`` (``CHUNK[3]``, ``ENTRY[1]``, ...) under ``layout``."""
    if layout is None:
        return f"flag word {index}"
    C, W = layout.num_chunks, layout.world_size
    if 0 <= index < C:
        return f"CHUNK[{index}] (chunk {index})"
    if C <= index < C + W:
        return f"ENTRY[{index - C}] (rank {index - C} entering the launch)"
    if index == C + W:
        return "CONSUMED (peers finished reading this rank's buffer)"
    if C + W + 1 <= index < 2 * C + W + 1:
        return f"PRODUCED[{index - C - W - 1}] (chunk {index - C - W - 1})"
    return f"flag word {index} (outside the layout)"


def chunk_of(record: TimeoutRecord, layout: abi.FlagLayout | None) -> int | None:
    """The chunk id a CHUNK/PRODUCED timeout is about (None for ENTRY/CONSUMED)."""
    if layout is None:
        return record.chunk if record.kind == "chunk" else None
    C, W = layout.num_chunks, layout.world_size
    i = record.chunk
    if 0 <= i < C:
        return i
    if C + W + 1 <= i < 2 * C + W + 1:
        return i - C - W - 1
    return None


def make_timeout(record: TimeoutRecord, seconds: float, layout: abi.FlagLayout | None = None,
                 context: str = "") -> CommTimeout:
    """A :class:`CommTimeout` whose message names the flag (and chunk) that never arrived."""
    err = CommTimeout(record, seconds)
    detail = f"the spin was on {describe_flag(record.chunk, layout)}"
    ch = chunk_of(record, layout)
    if ch is not None:
        detail += f"; chunk {ch} never arrived"
    epoch = getattr(record, "epoch", None)
    if epoch:
        detail += f" (epoch {epoch})"
    if context:
        detail += f"; {context}"
    err.args = (f"{err.args[0]} [{detail}]",)
    err.chunk = ch
    err.layout = layout
    return err


def read_record(words_fn, *, settle_s: float = 0.05) -> TimeoutRecord | None:
    """Read the record through ``words_fn()`` (returns the current int32 words). If the state is
    set but the epoch word is not yet written, re-read for up to ``settle_s`` seconds."""
    w = list(words_fn())
    if wrap32(int(w[abi.DIAG_STATE])) == 0:
        return None
    deadline = time.monotonic() + settle_s
    while True:
        rec = decode(w)
        if rec is not None or time.monotonic() > deadline:
            break
        time.sleep(0.001)
        w = list(words_fn())
    if rec is None:  # claimed but never completed (writer trapped between the words)
        rec = _record([wrap32(int(x)) for x in w], "unknown", 0)
    return rec


def state_word(record):
    """A zero-cost probe of a record's state word: ``probe()`` reads the int32 straight from the
    (pinned, host-addressable) record with ``ctypes`` -- ~0.1 us instead of a tensor read (the
    runtime checks every registered kernel's record on every launch). Falls back to a tensor read
    for a record that is not a contiguous CPU tensor."""
    import ctypes
    addr = state_addrs([record])
    if addr is not None:
        word = ctypes.c_int32.from_address(addr[0])
        return lambda: word.value
    return lambda: int(record[abi.DIAG_STATE])


def state_addrs(records) -> tuple[int, ...] | None:
    """The host addresses of the state words of ``records`` (contiguous CPU tensors: pinned,
    device-mapped records), or None when one is not such a tensor (its words cannot be read
    by address)."""
    out = []
    for r in records:
        try:
            if r.device.type != "cpu" or not r.is_contiguous():
                return None
            out.append(r.data_ptr() + 4 * abi.DIAG_STATE)
        except (AttributeError, TypeError, ValueError):
            return None
    return tuple(out)


def new_record():
    """A zeroed watchdog record (``DIAG_WORDS`` int32) and its device address: see
    :func:`new_pinned`."""
    return new_pinned(abi.DIAG_WORDS)


def new_pinned(words: int):
    """``words`` zeroed int32 in host-pinned, device-mapped memory and their device address
    (the watchdog records; the epoch mirrors of docs/cuda-graphs.md). Without CUDA (unit
    tests): ordinary host memory and its host address -- nothing can launch there anyway."""
    import torch

    if torch.cuda.is_available():
        rec = torch.zeros(words, dtype=torch.int32, pin_memory=True)
        dp = _cuda.device_pointer(rec.data_ptr())
        return rec, (dp if dp else rec.data_ptr())
    rec = torch.zeros(words, dtype=torch.int32)
    return rec, rec.data_ptr()
