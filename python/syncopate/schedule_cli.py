"""``syncopate schedule``: make, check and show chunk schedules.

::

    syncopate schedule all-gather --shape 8192,4096 --dtype bf16 --world-size 2 --split 2 -o ag.json
    syncopate schedule check ag.json        # prints "ok" (exit 0) or the problems (exit 1)
    syncopate schedule show ag.json --backend sm --comm-programs 16 [--compute-us 200]

``check`` prints ``ok`` on stdout and exits 0 when the schedule verifies; otherwise it prints
every problem on stderr, one per line prefixed with ``error:``, and exits 1 (also for a file
that cannot be read or is not a schedule).  Template commands write the JSON to ``-o FILE`` or
to stdout.
"""

from __future__ import annotations

import os
import sys

from . import backends
from .cli_args import nonnegative_float, positive_int, shape, tensor_name
from .errors import ScheduleError, UsageError
from .schedule.cost import H200_SMS, _fmt_bytes, estimate
from .schedule.json_io import dump, dumps, load, loads
from .schedule.templates import TEMPLATES

__all__ = ["register_commands"]

# (command, template function name, help)
_TEMPLATE_COMMANDS = (
    ("all-gather", "all_gather", "every rank ends with the whole tensor (sharded along --dim)"),
    ("reduce-scatter", "reduce_scatter",
     "partial sums on every rank; rank r ends with the complete block r along --dim"),
    ("all-reduce", "all_reduce", "reduce-scatter then all-gather on the same tensor"),
    ("all-to-all", "all_to_all",
     "move the sharding from --split-dim to --concat-dim"),
    ("ring-pass", "ring_pass", "ring attention: KV blocks travel once around the ring"),
)


def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "schedule", help="make, check and show chunk schedules",
        description="Make chunk schedules from templates, verify them, and show per-rank plans "
                    "with the cost model's estimate.")
    actions = p.add_subparsers(dest="schedule_action", metavar="ACTION")
    actions.required = True

    for command, template, help_text in _TEMPLATE_COMMANDS:
        tp = actions.add_parser(command, help=help_text, description=help_text + ".")
        tp.add_argument("--shape", type=shape, required=True,
                        help="global tensor shape: 8192,4096 or 8192x4096")
        tp.add_argument("--dtype", default="bf16", help="element type (default bf16)")
        tp.add_argument("--world-size", type=positive_int, required=True, help="number of ranks")
        if template == "all_to_all":
            tp.add_argument("--split-dim", type=int, required=True,
                            help="dim along which rank r initially holds block r")
            tp.add_argument("--concat-dim", type=int, required=True,
                            help="dim along which rank r finally holds block r")
        else:
            tp.add_argument("--dim", type=int, default=0,
                            help="dim the tensor is sharded along (default 0)")
        if template in ("all_gather", "reduce_scatter", "all_reduce"):
            tp.add_argument("--order", choices=("swizzle", "ring"), default="swizzle",
                            help="swizzle: straight from the owner; ring: one hop per step")
        tp.add_argument("--mode", choices=("pull", "push"), default=None,
                        help="who executes a chunk: pull = destination, push = source "
                             "(default: the template's)")
        tp.add_argument("--split", type=positive_int, default=1,
                        help="chunks per block (default 1)")
        tp.add_argument("--tensor", type=tensor_name, default=None,
                        help="tensor name (default: the template's)")
        tp.add_argument("-o", "--output", default=None,
                        help="write the JSON here (default: stdout)")
        tp.set_defaults(func=_make, template=template)

    cp = actions.add_parser(
        "check", help="verify a schedule file",
        description="Verify a schedule JSON file: print 'ok' and exit 0, or print every "
                    "problem on stderr (one per line, prefixed 'error:') and exit 1.")
    cp.add_argument("file", help="schedule JSON file ('-': read it from stdin)")
    cp.set_defaults(func=_check)

    sp = actions.add_parser(
        "show", help="per-rank plan and cost estimate",
        description="Print each rank's plan (step, chunk, direction, peer, region, bytes) and "
                    "the cost model's estimate; exit 1 with the problems if it does not verify.")
    sp.add_argument("file", help="schedule JSON file ('-': read it from stdin)")
    sp.add_argument("--backend", choices=backends.names(), default="sm",
                    help="communication backend for the estimate (default sm)")
    sp.add_argument("--comm-programs", type=positive_int, default=16,
                    help="comm programs (CTAs) of the sm/nvshmem backends (default 16)")
    sp.add_argument("--compute-us", type=nonnegative_float, default=None,
                    help="compute time of the fused kernel on one rank, in microseconds: adds "
                         "the fused-time estimate")
    sp.add_argument("--tensor", type=tensor_name, default=None,
                    help="the tensor the compute reads or writes (default: the only one)")
    sp.set_defaults(func=_show)


# --------------------------------------------------------------------------------------------

def _make(args) -> int:
    # the options this template's parser has and the user (or a default) set; None: the
    # template's own default
    kwargs = {k: getattr(args, k) for k in ("dim", "split_dim", "concat_dim", "order", "mode",
                                            "tensor") if getattr(args, k, None) is not None}
    kwargs.update(dtype=args.dtype, world_size=args.world_size, split=args.split)
    schedule = TEMPLATES[args.template](args.shape, **kwargs)
    schedule.verify()  # templates always verify; this guards the file we hand out
    if args.output:
        _prepare_output(args.output)
        dump(schedule, args.output)
        print(f"wrote {args.output}: {schedule.num_chunks} chunks, world size "
              f"{schedule.world_size}")
    else:
        sys.stdout.write(dumps(schedule))
    return 0


def _prepare_output(path: str) -> None:
    """``-o FILE``: create missing folders (as ``syncopate compile -o`` does); refuse a folder."""
    if os.path.isdir(path):
        raise ScheduleError(f"-o {path} is a directory; give a file name, e.g. {path}/ag.json")
    parent = os.path.dirname(path)
    if parent:
        try:
            os.makedirs(parent, exist_ok=True)
        except OSError as e:
            raise ScheduleError(f"-o {path}: cannot create {parent}: {e.strerror}") from None


def _load(path: str):
    """The schedule in ``path``; ``-`` reads it from stdin (``... | syncopate schedule check -``)."""
    if path != "-":
        return load(path)
    try:
        return loads(sys.stdin.read())
    except ScheduleError as e:
        raise ScheduleError([f"<stdin>: {p}" for p in e.problems]) from None


def _check(args) -> int:
    _load(args.file).verify()
    print("ok")
    return 0


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]


def _show(args) -> int:
    schedule = _load(args.file)
    if args.tensor is not None and args.tensor not in schedule.tensors:
        raise ScheduleError(f"--tensor {args.tensor}: the schedule has no such tensor; it has "
                            f"{', '.join(schedule.tensors)}")
    out = [f"schedule {args.file}: world size {schedule.world_size}, "
           f"{schedule.num_chunks} chunks, {_fmt_bytes(schedule.total_bytes)}"]
    tmpl = schedule.meta.get("template")
    if isinstance(tmpl, dict):
        args_text = " ".join(f"{k}={v}" for k, v in tmpl.items() if k != "name")
        out.append(f"template {tmpl.get('name', '?')}: {args_text}")
    for key, value in schedule.meta.items():
        if key != "template":
            out.append(f"meta {key}: {value}")
    for name, t in schedule.tensors.items():
        out.append(f"tensor {name}: shape {list(t.shape)} {t.dtype}")
        for kind in ("initial", "final"):
            places = "; ".join(f"rank {p.rank} {p.region.brief()}"
                               + (" (partial)" if p.partial else "") for p in getattr(t, kind))
            out.append(f"  {kind + ':':8} {places or '-'}")
    try:
        schedule.verify()
        problems = []
    except ScheduleError as e:
        problems = e.problems
    for rank in schedule.ranks:
        mine = [c for c in schedule.ordered_chunks() if rank in (c.src, c.dst)]
        out += ["", f"rank {rank}: receives {sum(c.dst == rank for c in mine)}, sends "
                    f"{sum(c.src == rank for c in mine)}, runs "
                    f"{sum(c.executor == rank for c in mine)}"]
        if not mine:
            continue
        rows = [["step", "chunk", "dir", "peer", "mode", "reduce", "tensor", "region", "bytes",
                 "after"]]
        for c in mine:
            rows.append([str(c.step), str(c.id), "recv" if c.dst == rank else "send",
                         str(c.peer(rank)), c.mode + ("*" if c.executor == rank else ""),
                         c.reduce, c.tensor, c.region.brief(),
                         _fmt_bytes(schedule.chunk_bytes(c)),
                         ",".join(map(str, c.after)) or "-"])
        out.extend(_table(rows))
    out += ["", "(* = this rank executes the chunk)"]
    if problems:
        sys.stdout.write("\n".join(out) + "\n")
        sys.stdout.flush()
        raise ScheduleError(problems)
    if backends.get(args.backend).has_comm_programs and args.comm_programs >= H200_SMS:
        # estimate() refuses this only with --compute-us; without it the link model, whose
        # points end at one comm program per SM, printed a bandwidth for 100000 of them
        raise UsageError(f"--comm-programs {args.comm_programs}: the cost model runs each comm "
                         f"program on an SM of its own, and an H200 has {H200_SMS}: give at "
                         f"most {H200_SMS - 1}, leaving the compute an SM")
    compute = args.compute_us * 1e-6 if args.compute_us is not None else None
    est = estimate(schedule, backend=args.backend, comm_programs=args.comm_programs,
                   compute_time_s=compute, tensor=args.tensor)
    out.append(f"cost model: {est.summary()}")
    for what, times in (("comm", est.rank_comm_s), ("fused", est.rank_fused_s)):
        if times is not None:
            out.append(f"  {what} per rank (ms): "
                       + ", ".join(f"{r}: {t * 1e3:.3f}" for r, t in enumerate(times)))
    sys.stdout.write("\n".join(out) + "\n")
    return 0
