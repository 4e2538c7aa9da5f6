"""Timelines (issue 14, section 3): the trace buffer's decoding, the Chrome/Perfetto export, the
PNG, the ``syncopate trace`` CLI, and the compile option: ``trace=True`` adds event code (a
kernel that compiles for sm_90 with ``%globaltimer`` reads and the ABI saying so), ``trace``
off leaves the kernel exactly as it was.  The device side records into a buffer these tests
build by hand; a real recorded trace is in docs/ (from a GPU run in loopback)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from syncopate import trace as tr
from syncopate.cli import main as cli_main
from syncopate.errors import TraceError


def _buffer(events, cap=None):
    """A trace buffer as the kernel writes it: counter, capacity, 4 words per event."""
    cap = len(events) if cap is None else cap
    words = [len(events), cap]
    for kind, epoch, prog, ident, t in events[:cap]:
        words += [kind | epoch << 8, prog, ident, t]
    words += [0] * (4 * cap - (len(words) - 2))
    return words


# C = 4 chunks, W = 2: CHUNK[0..3], ENTRY[4..5], CONSUMED 6, PRODUCED[7..10]
RANK0 = [(tr.PROGRAM_BEGIN, 1, 0, -1, 1000), (tr.PROGRAM_BEGIN, 1, 5, -1, 1100),
         (tr.WAIT_BEGIN, 1, 5, 2 | (0 << 32), 1200), (tr.SIGNAL, 1, 0, 2, 1900),
         (tr.WAIT_END, 1, 5, 2, 2000), (tr.PROGRAM_END, 1, 0, -1, 2100),
         (tr.PROGRAM_END, 1, 5, -1, 5000)]


def test_decode_reads_every_field():
    events, dropped = tr.decode(_buffer(RANK0), rank=0)
    assert dropped == 0 and len(events) == len(RANK0)
    w = events[2]
    assert (w.rank, w.kind, w.epoch, w.program, w.flag, w.t_ns) == (0, tr.WAIT_BEGIN, 1, 5, 2, 1200)
    assert events[0].flag == -1


def test_decode_counts_events_past_the_capacity():
    words = _buffer(RANK0, cap=3)
    words[0] = len(RANK0)  # the kernel counted them all, wrote 3
    events, dropped = tr.decode(words, 0)
    assert len(events) == 3 and dropped == len(RANK0) - 3


@pytest.mark.parametrize("words,match", [([5], "header"), ([1, 99, 0], "does not fit"),
                                         ([1, 1, 77, 0, 0, 0], "not a trace buffer")])
def test_decode_refuses_what_is_not_a_trace(words, match):
    with pytest.raises(TraceError, match=match):
        tr.decode(words, 0)


def test_chrome_export_pairs_slices_and_names_flags():
    ev0, _ = tr.decode(_buffer(RANK0), 0)
    ev1, _ = tr.decode(_buffer([(tr.PROGRAM_BEGIN, 1, 0, -1, 9000),
                                (tr.PROGRAM_END, 1, 0, -1, 9500)]), 1)
    doc = tr.to_chrome(ev0 + ev1, num_chunks=4, world_size=2, comm_programs=4)
    te = doc["traceEvents"]
    names = {(e["ph"], e["name"]) for e in te}
    assert ("B", "wait CHUNK[2]") in names and ("E", "wait CHUNK[2]") in names
    assert ("i", "signal CHUNK[2]") in names
    threads = {e["args"]["name"] for e in te if e["name"] == "thread_name"}
    assert {"comm program 0", "compute program 5"} <= threads
    # each rank aligned at its first event: rank 1 starts at 0 although its clock reads 9000
    assert min(e["ts"] for e in te if e.get("pid") == 1 and "ts" in e) == 0
    for pid, tid in {(e["pid"], e["tid"]) for e in te if e["ph"] in "BE"}:
        seq = [e["ph"] for e in te if e.get("pid") == pid and e.get("tid") == tid
               and e["ph"] in "BE"]
        depth = 0
        for ph in seq:
            depth += 1 if ph == "B" else -1
            assert depth >= 0
        assert depth == 0, f"unbalanced slices on rank {pid} program {tid}"


def test_flag_names_follow_the_layout():
    assert [tr.flag_name(i, 4, 2) for i in (0, 4, 5, 6, 7, 10, 11)] == [
        "CHUNK[0]", "ENTRY[0]", "ENTRY[1]", "CONSUMED", "PRODUCED[0]", "PRODUCED[3]", "flag 11"]


def _png_size(data: bytes):
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", data[16:24])
    idat = data.index(b"IDAT")
    n = struct.unpack(">I", data[idat - 4:idat])[0]
    raw = zlib.decompress(data[idat + 4:idat + 4 + n])
    assert len(raw) == h * (1 + 3 * w)
    return w, h, raw


def test_png_has_a_row_per_rank_and_program_and_red_waits():
    ev, _ = tr.decode(_buffer(RANK0), 0)
    w, h, raw = _png_size(tr.timeline_png(ev, comm_programs=4, width=200, row_px=6))
    assert (w, h) == (200, 2 * 6)
    assert bytes((234, 67, 53)) in raw  # a wait drawn in red
    assert bytes((66, 133, 244)) in raw  # compute in blue


def test_cli_show_and_summary(tmp_path, capsys):
    ev, _ = tr.decode(_buffer(RANK0), 0)
    path = tmp_path / "run.trace.json"
    tr.save_chrome(str(path), ev, num_chunks=4, world_size=2, comm_programs=4)
    assert json.loads(path.read_text())["otherData"]["world_size"] == 2
    assert cli_main(["trace", "show", str(path), "--width", "300"]) == 0
    _png_size((tmp_path / "run.trace.png").read_bytes())
    assert cli_main(["trace", "summary", str(path)]) == 0
    out = capsys.readouterr().out
    assert "rank 0: 2 programs (1 comm), 1 waits, 0.8 us waiting in all" in out
    # the longest wait is named by the trace's flag layout (4 chunks: flag 2 is CHUNK[2])
    assert "longest 0.8 us (CHUNK[2])" in out
    assert "(flag 2)" in tr.summary(ev, 1)[0]  # no layout given: the index


def test_cli_bad_trace_is_one_line(tmp_path, capsys):
    bad = tmp_path / "x.json"
    bad.write_text("{}")
    assert cli_main(["trace", "show", str(bad)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a syncopate trace" in err[0]
    assert cli_main(["trace", "summary", str(tmp_path / "missing.json")]) == 1
    assert "cannot read the trace" in capsys.readouterr().err


def test_trace_option_compiles_and_off_changes_nothing():
    """trace=True: event code in the kernel (compiles to PTX for sm_90, ABI says trace); trace
    off: the fused TTIR is the one lower-sm produced (insert-trace changed nothing)."""
    pytest.importorskip("triton")
    import triton
    import triton.language as tl

    from syncopate import compiler
    from syncopate.schedule import all_gather

    @triton.jit
    def rows_kernel(x_ptr, out_ptr, M, K: tl.constexpr, BLOCK_M: tl.constexpr):
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        x = tl.load(x_ptr + rows[:, None] * K + tl.arange(0, K)[None, :],
                    mask=(rows < M)[:, None], other=0.0)
        tl.store(out_ptr + rows, tl.sum(x.to(tl.float32), 1), mask=rows < M)

    sig = {"x_ptr": "*bf16", "out_ptr": "*fp32", "M": "i32", "K": "constexpr",
           "BLOCK_M": "constexpr"}
    kw = dict(signature=sig, constexprs={"K": 64, "BLOCK_M": 32},
              schedule=all_gather([256, 64], "bf16", 2), operand="x_ptr", comm_programs=2,
              target=("cuda", 90))
    off = compiler.compile(rows_kernel, **kw)
    on = compiler.compile(rows_kernel, trace=True, **kw)
    assert not off.abi.trace and on.abi.trace
    assert off.ir_after["insert-trace"] == off.ir_after["lower-sm"]
    n_on = on.kernel.asm["ptx"].count("%globaltimer")
    n_off = off.kernel.asm["ptx"].count("%globaltimer")
    assert n_on > n_off, "trace=True reads the clock at every event"
    assert "atom.global.gpu.relaxed.add.u64" in on.kernel.asm["ptx"]  # the slot claims
    assert "atom.global.gpu.relaxed.add.u64" not in off.kernel.asm["ptx"]


def test_the_recorded_loopback_trace_in_docs_reads_back():
    """docs/traces/ag_gemm.trace.json (a real GPU recording, docs/tracing.md): both ranks'
    programs, every wait closed, rank 0's comm programs waiting on ENTRY[1]."""
    from pathlib import Path
    path = Path(__file__).parent.parent / "docs" / "traces" / "ag_gemm.trace.json"
    events, meta = tr.load_events(str(path))
    assert {e.rank for e in events} == {0, 1}
    begins = sum(e.kind == tr.WAIT_BEGIN for e in events)
    assert begins == sum(e.kind == tr.WAIT_END for e in events) > 0
    entry1 = meta["num_chunks"] + 1
    assert any(e.kind == tr.WAIT_BEGIN and e.rank == 0 and e.flag == entry1
               and e.program < meta["comm_programs"] for e in events)
    assert len(tr.summary(events, meta["comm_programs"])) == 2


def test_reading_a_trace_of_an_untraced_kernel_is_a_typed_error():
    """trace_events / gather_trace name what to do when the kernel records nothing (before
    any device or collective work)."""
    from syncopate.errors import LaunchError
    from syncopate.runtime.fused import FusedKernel
    fk = FusedKernel.__new__(FusedKernel)
    fk.trace, fk.last_config = False, None
    for read in (fk.trace_events, fk.gather_trace):
        with pytest.raises(LaunchError, match="trace=True"):
            read()
