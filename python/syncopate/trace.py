"""Timelines of fused kernels: decode a trace buffer, export Chrome/Perfetto JSON, draw a PNG.

A kernel compiled with ``trace=True`` (or ``SYNCOPATE_TRACE=1`` for :func:`syncopate.fuse`)
appends events to a device buffer (``passes/insert_trace.py`` gives the format): program
begin/end, wait begin/end on a flag, flag releases (signals), each with ``%globaltimer``
nanoseconds.  :meth:`FusedKernel.trace_events` reads this rank's buffer; this module turns the
events of all ranks into

* a Chrome trace (``chrome://tracing`` / https://ui.perfetto.dev): one process per rank, one
  thread per program (comm programs first), a slice per program run and per wait (named by
  the flag: ``wait CHUNK[3]``), an instant per signal;
* a PNG timeline (no plotting library needed): one row per (rank, program), compute in blue,
  waits in red, signals as black ticks; ``syncopate trace show TRACE.json -o timeline.png``.

docs/tracing.md says how to read them.  ``%globaltimer`` is one clock per GPU; across GPUs the
clocks are not synchronised, so ranks are aligned by their first event (in loopback, one GPU,
they share the clock and the alignment is exact).
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import asdict, dataclass

from .errors import TraceError

PROGRAM_BEGIN, PROGRAM_END, WAIT_BEGIN, WAIT_END, SIGNAL = 1, 2, 3, 4, 5
KIND_NAMES = {PROGRAM_BEGIN: "program begin", PROGRAM_END: "program end",
              WAIT_BEGIN: "wait begin", WAIT_END: "wait end", SIGNAL: "signal"}
#: words per event, and the header (counter, capacity) before them
WORDS, HEADER = 4, 2


@dataclass(frozen=True)
class Event:
    rank: int
    kind: int
    epoch: int
    program: int
    flag: int        # flag word index (-1: none)
    wait_kind: int   # watchdog kind code of a wait (abi.KIND_*), else 0
    t_ns: int


def decode(words, rank: int) -> tuple[list[Event], int]:
    """``(events, dropped)`` of a rank's trace buffer (a sequence of int64 words)."""
    words = [int(w) for w in words]
    if len(words) < HEADER:
        raise TraceError(f"a trace buffer has a {HEADER}-word header; got {len(words)} words")
    count, cap = words[0], words[1]
    if cap < 0 or HEADER + WORDS * cap > len(words):
        raise TraceError(f"trace buffer capacity {cap} does not fit its {len(words)} words")
    n = min(count, cap)
    out = []
    for i in range(n):
        w0, prog, ident, t = words[HEADER + WORDS * i: HEADER + WORDS * (i + 1)]
        kind = w0 & 0xFF
        if kind not in KIND_NAMES:
            raise TraceError(f"event {i} of rank {rank} has kind {kind}: not a trace buffer")
        flag = -1 if ident < 0 else ident & 0xFFFFFFFF
        out.append(Event(rank, kind, w0 >> 8, prog, flag, (ident >> 32) & 0xFF if ident > 0 else 0,
                         t))
    return out, max(0, count - n)


def flag_name(flag: int, num_chunks: int | None, world_size: int | None) -> str:
    """``CHUNK[c]``, ``ENTRY[r]``, ``CONSUMED``, ``PRODUCED[c]`` (``abi.FlagLayout``)."""
    if flag < 0:
        return "-"
    if num_chunks is None or world_size is None:
        return f"flag {flag}"
    C, W = num_chunks, world_size
    if flag < C:
        return f"CHUNK[{flag}]"
    if flag < C + W:
        return f"ENTRY[{flag - C}]"
    if flag == C + W:
        return "CONSUMED"
    if flag < 2 * C + W + 1:
        return f"PRODUCED[{flag - C - W - 1}]"
    return f"flag {flag}"


def _aligned(events: list[Event]) -> dict[int, int]:
    """Per rank, the time of its first event (ranks' clocks are aligned there)."""
    first: dict[int, int] = {}
    for e in events:
        first[e.rank] = min(first.get(e.rank, e.t_ns), e.t_ns)
    return first


def to_chrome(events: list[Event], *, num_chunks: int | None = None,
              world_size: int | None = None, comm_programs: int = 0) -> dict:
    """A Chrome trace (``{"traceEvents": [...]}``, microseconds) of ``events``."""
    first = _aligned(events)
    out = [{"ph": "M", "name": "process_name", "pid": r, "tid": 0, "args": {"name": f"rank {r}"}}
           for r in sorted(first)]
    named = set()
    for e in sorted(events, key=lambda e: (e.rank, e.t_ns)):
        ts = (e.t_ns - first[e.rank]) / 1e3
        if (e.rank, e.program) not in named:
            named.add((e.rank, e.program))
            role = "comm" if e.program < comm_programs else "compute"
            out.append({"ph": "M", "name": "thread_name", "pid": e.rank, "tid": e.program,
                        "args": {"name": f"{role} program {e.program}"}})
        base = {"pid": e.rank, "tid": e.program, "ts": ts, "args": {"epoch": e.epoch}}
        if e.kind in (PROGRAM_BEGIN, PROGRAM_END):
            out.append(dict(base, ph="B" if e.kind == PROGRAM_BEGIN else "E", name="program"))
        elif e.kind in (WAIT_BEGIN, WAIT_END):
            out.append(dict(base, ph="B" if e.kind == WAIT_BEGIN else "E",
                            name=f"wait {flag_name(e.flag, num_chunks, world_size)}"))
        else:
            out.append(dict(base, ph="i", s="t",
                            name=f"signal {flag_name(e.flag, num_chunks, world_size)}"))
    return {"traceEvents": out, "displayTimeUnit": "ns",
            "otherData": {"title": "syncopate", "num_chunks": num_chunks, "world_size": world_size,
                          "comm_programs": comm_programs,
                          "events": [asdict(e) for e in events]}}


def save_chrome(path: str, events: list[Event], **kw) -> None:
    with open(path, "w") as f:
        json.dump(to_chrome(events, **kw), f)


def load_events(path: str) -> tuple[list[Event], dict]:
    """The events (and the trace's metadata) of a file written by :func:`save_chrome`."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise TraceError(f"cannot read the trace {path!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise TraceError(f"{path!r} is not JSON ({e.msg} at line {e.lineno}): give a trace "
                         f"written by syncopate (FusedKernel.save_trace)") from None
    other = doc.get("otherData") if isinstance(doc, dict) else None
    if not isinstance(other, dict) or "events" not in other:
        raise TraceError(f"{path!r} is not a syncopate trace (no otherData.events): give a trace "
                         f"written by FusedKernel.save_trace / syncopate.trace.save_chrome")
    try:
        events = [Event(**e) for e in other["events"]]
    except TypeError as e:
        raise TraceError(f"{path!r}: malformed event ({e})") from None
    return events, other


# ------------------------------------------------------------------------------------------
# PNG timeline (no plotting library: rows of pixels, zlib, the PNG chunk format)
# ------------------------------------------------------------------------------------------

_BG, _COMPUTE, _COMM, _WAIT, _SIGNAL, _SEP = ((255, 255, 255), (66, 133, 244), (52, 168, 83),
                                              (234, 67, 53), (0, 0, 0), (220, 220, 220))


def _png(width: int, height: int, rows: list[bytearray]) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + tag + data
                + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF))
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                              0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def timeline_png(events: list[Event], *, comm_programs: int = 0, width: int = 1200,
                 row_px: int = 6) -> bytes:
    """The PNG bytes of a timeline: a row per (rank, program), time left to right."""
    if not events:
        raise TraceError("the trace has no events: was the kernel compiled with trace=True and "
                         "launched?")
    first = _aligned(events)
    keys = sorted({(e.rank, e.program) for e in events})
    row_of = {k: i for i, k in enumerate(keys)}
    span = max(e.t_ns - first[e.rank] for e in events) or 1
    height = len(keys) * row_px
    img = [bytearray(_BG * width) for _ in range(height)]

    def x(e):
        return min(width - 1, int((e.t_ns - first[e.rank]) * (width - 1) / span))

    def fill(row, x0, x1, color):
        for y in range(row * row_px, row * row_px + row_px - 1):
            for xx in range(max(0, x0), min(width, x1 + 1)):
                img[y][3 * xx:3 * xx + 3] = bytes(color)
    open_prog: dict = {}
    open_wait: dict = {}
    for e in sorted(events, key=lambda e: e.t_ns):
        k = (e.rank, e.program)
        if e.kind == PROGRAM_BEGIN:
            open_prog[k] = x(e)
        elif e.kind == PROGRAM_END and k in open_prog:
            fill(row_of[k], open_prog.pop(k), x(e),
                 _COMM if e.program < comm_programs else _COMPUTE)
    for e in sorted(events, key=lambda e: e.t_ns):  # waits and signals over the program bars
        k = (e.rank, e.program)
        if e.kind == WAIT_BEGIN:
            open_wait[k] = x(e)
        elif e.kind == WAIT_END and k in open_wait:
            fill(row_of[k], open_wait.pop(k), x(e), _WAIT)
        elif e.kind == SIGNAL:
            fill(row_of[k], x(e), x(e), _SIGNAL)
    for i, (rank, _) in enumerate(keys):  # a grey line between ranks
        if i and keys[i - 1][0] != rank:
            img[i * row_px - 1][:] = bytes(_SEP * width)
    return _png(width, height, img)


def summary(events: list[Event], comm_programs: int = 0, *, num_chunks: int | None = None,
            world_size: int | None = None) -> list[str]:
    """Per rank: programs, waits, total and longest wait, span (one line each). With
    ``num_chunks`` and ``world_size`` (a saved trace's metadata) the longest wait's flag is
    named (``CHUNK[3]``, ``ENTRY[1]``: what it waited for), else given by index."""
    lines = []
    for r in sorted({e.rank for e in events}):
        ev = sorted((e for e in events if e.rank == r), key=lambda e: e.t_ns)
        waits, opened = [], {}
        for e in ev:
            if e.kind == WAIT_BEGIN:
                opened[e.program] = e
            elif e.kind == WAIT_END and e.program in opened:
                waits.append((e.t_ns - opened.pop(e.program).t_ns, e.flag))
        progs = {e.program for e in ev}
        span = (ev[-1].t_ns - ev[0].t_ns) / 1e3 if ev else 0.0
        longest = max(waits, default=(0, -1))
        lines.append(f"rank {r}: {len(progs)} programs ({sum(p < comm_programs for p in progs)} "
                     f"comm), {len(waits)} waits, {sum(w for w, _ in waits) / 1e3:.1f} us "
                     f"waiting in all, longest {longest[0] / 1e3:.1f} us "
                     f"({flag_name(longest[1], num_chunks, world_size)}), "
                     f"span {span:.1f} us")
    return lines


__all__ = ["Event", "TraceError", "decode", "flag_name", "load_events", "save_chrome", "summary",
           "timeline_png", "to_chrome"]
