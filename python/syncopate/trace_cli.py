"""``syncopate trace show|summary``: a recorded timeline as a PNG, or one line per rank.

    syncopate trace show run.trace.json -o run.png     # rows (rank, program), waits in red
    syncopate trace summary run.trace.json             # waits per rank, the longest

The trace file is what ``FusedKernel.gather_trace(path)`` writes (a Chrome trace that also opens
in chrome://tracing and https://ui.perfetto.dev); docs/tracing.md says how to read it.
"""

from __future__ import annotations

from .errors import TraceError
from .trace import load_events, summary, timeline_png


def register_commands(subparsers) -> None:
    p = subparsers.add_parser("trace", help="show a recorded fused-kernel timeline",
                              description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="trace_command", metavar="ACTION")
    sub.required = True
    show = sub.add_parser("show", help="draw the timeline as a PNG")
    show.add_argument("trace", help="trace JSON (FusedKernel.gather_trace)")
    show.add_argument("-o", "--output", default=None,
                      help="PNG to write (default: the trace's name with .png)")
    show.add_argument("--width", type=int, default=1200, help="pixels (default 1200)")
    show.set_defaults(func=_show)
    summ = sub.add_parser("summary", help="one line per rank: waits, longest wait, span")
    summ.add_argument("trace", help="trace JSON (FusedKernel.gather_trace)")
    summ.set_defaults(func=_summary)


def _show(args) -> int:
    if args.width < 16:
        raise TraceError(f"--width {args.width}: give at least 16 pixels")
    events, meta = load_events(args.trace)
    out = args.output or args.trace.removesuffix(".json") + ".png"
    png = timeline_png(events, comm_programs=int(meta.get("comm_programs") or 0),
                       width=args.width)
    try:
        with open(out, "wb") as f:
            f.write(png)
    except OSError as e:
        raise TraceError(f"cannot write {out!r}: {e.strerror}") from None
    print(f"wrote {out} ({len(events)} events)")
    return 0


def _summary(args) -> int:
    events, meta = load_events(args.trace)
    for line in summary(events, int(meta.get("comm_programs") or 0),
                        num_chunks=meta.get("num_chunks"), world_size=meta.get("world_size")):
        print(line)
    return 0
