"""``syncopate explain OP --shape ... --world-size W [--dtype bf16] [--gpu h200]``: the paths an
op weighs for a problem, their predicted times, the one it takes and whether the prediction is
calibrated (measured on the GPU type) or the cost model's alone.

Shapes, per op (the op's *global* problem, as the benchmark tables write it):

* ``ag_gemm``, ``ag_gemm_fp8``: ``M,N,K`` -- gathers ``A [M, K]``, ``B [K, N]`` split by
  columns (each rank ``N/W``);
* ``gemm_rs``, ``gemm_rs_fp8``: ``M,N,K`` -- ``A [M, K]`` split along K, rows scattered;
* ``gemm_ar``: ``M,N,K`` -- ``A [M, K]`` split along K, the whole ``[M, N]`` on every rank;
* ``ring_attention``, ``ulysses_attention``: ``S,Hq,Hkv,D`` (``--batch B``, ``--causal``),
  ``S`` the whole sequence;
* ``moe_dispatch_gemm``: ``E,C,H,N`` (experts in all, capacity per source rank and expert,
  hidden, the first GEMM's output width); ``moe_gemm_combine``: ``E,C,F,H``.

``syncopate explain ulysses --shape S,Hq,Hkv,D --world-size W [--causal]``: Ulysses attention's
*layer* paths (serial NCCL, the fused kernel, and the QKV-projection variant that is not built)
by the cost model of :mod:`syncopate.schedule.ulysses_cost`.

The answer is what the op computes at run time (:func:`syncopate.ops.choice.decide_shape`, the
same function with the same inputs), so it can be asked on any machine, GPU or not; the ops and
how each reads its global shape come from the registry (``OpSpec.explain``). A separate module
(registered in :data:`syncopate.cli.COMMAND_MODULES`) so that the command line's other parts
change independently.
"""

from __future__ import annotations

import argparse
import re

from .calibration import calibration_path
from .cli_args import positive_int
from .dtypes import canonical
from .errors import LaunchError, ScheduleError
from .schedule.ulysses_cost import PAYS_SHARE, ulysses_costs

__all__ = ["register_commands", "run_explain", "run_explain_ulysses", "op_shape", "SUBJECTS"]


def op_shape(op: str, dims: tuple, W: int, batch: int = 1, causal: bool = False) -> tuple:
    """The shape :func:`syncopate.ops.choice.decide_shape` takes for the op's global ``dims``
    (LaunchError when they do not fit the op or do not divide over ``W`` ranks)."""
    # lazy: the ops import torch and Triton, which the CLI's start does without
    from .ops import spec
    s = spec.get(op)
    want = 3 if s.shape == ("m", "n", "k") else 4
    if len(dims) != want:
        raise LaunchError(f"explain {op} wants --shape {s.explain_shape}, got "
                          f"{','.join(map(str, dims))}")
    return s.explain(op, tuple(dims), W, batch, causal)


def _shape(text: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(p) for p in text.replace("x", ",").split(","))
    except ValueError:
        dims = ()
    if len(dims) not in (3, 4) or min(dims) < 0:  # a zero: the op's checks say what it needs
        raise argparse.ArgumentTypeError(f"--shape wants three integers M,N,K (e.g. "
                                         f"1024,4096,14336), or four: S,Hq,Hkv,D for attention "
                                         f"(e.g. 32768,32,8,128), E,C,H,N / E,C,F,H for MoE, got "
                                         f"{text!r}")
    return dims


def run_explain_ulysses(args) -> int:
    """The Ulysses paths' predicted layer times and whether the QKV-projection variant pays."""
    if len(args.shape) != 4:
        raise LaunchError(f"explain ulysses wants --shape S,Hq,Hkv,D (total tokens, query heads, "
                          f"KV heads, head dim; e.g. 32768,32,8,128), got "
                          f"{','.join(map(str, args.shape))}")
    S, Hq, Hkv, D = args.shape
    W = args.world_size
    try:
        c = ulysses_costs(1, Hq, Hkv, S, D, W, args.causal, gpu=args.gpu)
    except ScheduleError as e:
        raise LaunchError(str(e)) from None
    print(f"ulysses S={S} Hq={Hq} Hkv={Hkv} D={D} {'causal' if args.causal else 'non-causal'} at "
          f"world size {W} on {args.gpu}: per rank {S // W} tokens, {Hq // W} query heads; "
          f"layer = QKV projection (hidden {c.hidden}) + attention + output projection")
    print(c.table())
    verdict = "pays" if c.pays else "does not pay"
    print(f"QKV-projection variant: {verdict} (saves {c.gain_share * 100:.1f}% of the best "
          f"existing path; the bar is {PAYS_SHARE * 100:.0f}%); docs/ulysses.md has the table")
    return 0


def run_explain(args) -> int:
    # lazy: the ops import torch and Triton, which the CLI's start does without
    from .ops import choice, spec
    W = args.world_size
    if W < 1:
        raise LaunchError(f"--world-size must be >= 1, got {W}")
    if args.op in SUBJECTS:
        return SUBJECTS[args.op](args)
    shape = op_shape(args.op, tuple(args.shape), W, args.batch, args.causal)
    s = spec.get(args.op)
    dtype = s.dtype or canonical(args.dtype)
    d = choice.decide_shape(args.op, shape, W, dtype, args.gpu, cublas=not args.no_cublas)
    per_rank = ("per-rank GEMM " + "x".join(map(str, shape)) if s.shape == ("m", "n", "k") else
                "decides on " + ", ".join(f"{n} {v}" for n, v in zip(s.shape, shape)))
    print(f"{args.op} {'x'.join(map(str, args.shape))} ({dtype}) at world size {W} on "
          f"{args.gpu}: {per_rank}")
    if d.calibration:
        print(f"calibration: {calibration_path(args.gpu)} (sha256 {d.calibration[:12]})")
    print(f"basis: {d.basis}")
    if d.note:
        print(d.note)
    print(d.table())
    c = d.choice
    what = (f"fused, backend {c.backend}" + (f", reduce {c.reduce}" if c.reduce == "epilogue"
                                             else "") if c.path == "fused" else
            f"{c.path}, local kernel {c.local}")
    print(f"choice: {c.name} ({what})")
    return 0


#: what ``explain`` answers beyond the registered ops: ``ulysses``, the layer-level model table
SUBJECTS = {"ulysses": run_explain_ulysses}


def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "explain", help="the paths an op weighs for a shape, their predicted times, its choice",
        description=__doc__.split("\n\n")[0])
    # the op is checked by the registry when the command runs (importing the ops to list them
    # here would slow every other command's start)
    p.add_argument("op", metavar="OP",
                   help="a registered op (syncopate.ops.REGISTRY: ag_gemm, gemm_rs, ...) or "
                        "ulysses (the layer model)")
    p.add_argument("--shape", type=_shape, required=True, metavar="D1,D2,...",
                   help="the op's global problem (as in the benchmark tables): GEMM ops M,N,K; "
                        "attention and ulysses S,Hq,Hkv,D; MoE E,C,H,N / E,C,F,H (the error "
                        "for another shape says which the op takes)")
    p.add_argument("--causal", action="store_true", help="attention: causal")
    p.add_argument("--batch", type=positive_int, default=1, metavar="B",
                   help="attention: sequences per batch (default 1)")
    p.add_argument("--world-size", type=int, required=True, metavar="W")
    p.add_argument("--dtype", default="bf16", help="input dtype (default bf16)")
    p.add_argument("--gpu", default="h200", type=_gpu_name,
                   help="GPU type: a calibration file stem (default h200)")
    p.add_argument("--no-cublas", action="store_true",
                   help="as when the caller pins our kernel (kernel= or config=): no cuBLAS")
    p.set_defaults(func=run_explain)


def _gpu_name(text: str) -> str:
    """A calibration file stem: lower-case letters, digits, '-', '_' (no path: the name picks a
    file under the package's calibration folder)."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", text or ""):
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU type name: use lower-case "
                                         f"letters, digits, '-' or '_' (e.g. h200)")
    return text
