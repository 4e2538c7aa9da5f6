"""``syncopate explain OP --shape M,N,K --world-size W [--dtype bf16] [--gpu h200]``: the paths
an op weighs for a problem, their predicted times and the one it takes.

``syncopate explain ulysses --shape S,Hq,Hkv,D --world-size W [--causal]``: Ulysses attention's
paths (serial NCCL, the fused kernel, and the QKV-projection variant that is not built) by the
cost model of :mod:`syncopate.schedule.ulysses_cost`, for a layer of ``S`` tokens in all.

The shape is the op's *global* GEMM, as the benchmark table writes it: ``ag_gemm`` gathers
``A [M, K]`` and multiplies by ``B [K, N]`` split by columns (each rank ``N/W``); ``gemm_rs``
multiplies ``A [M, K]`` split along K by ``B [K, N]`` and reduce-scatters the rows. The answer
is what the op computes at run time (:func:`syncopate.ops.choice.decide`, the same function
with the same inputs), so it can be asked on any machine, GPU or not. A separate module
(registered in :data:`syncopate.cli.COMMAND_MODULES`) so that the command line's other parts
change independently.
"""

from __future__ import annotations

import argparse

__all__ = ["register_commands", "run_explain", "run_explain_ulysses", "per_rank_shape"]


def per_rank_shape(op: str, M: int, N: int, K: int, W: int) -> tuple[int, int, int]:
    """The per-rank GEMM of the op's global ``M x N x K`` (what the op decides on)."""
    from .errors import LaunchError
    if op == "ag_gemm":
        if M % W or N % W:
            raise LaunchError(f"ag_gemm shards M (rows of A) and N (columns of B) over the "
                              f"{W} ranks: M = {M} and N = {N} must be multiples of {W}")
        return M, N // W, K
    if op == "gemm_rs":
        if M % W or K % W:
            raise LaunchError(f"gemm_rs shards K over the {W} ranks and scatters M: M = {M} and "
                              f"K = {K} must be multiples of {W}")
        return M, N, K // W
    raise LaunchError(f"unknown op {op!r}; choose ag_gemm or gemm_rs")


def _shape(text: str) -> tuple[int, ...]:
    parts = text.replace("x", ",").split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) not in (3, 4) or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--shape wants three positive integers M,N,K (e.g. "
                                         f"1024,4096,14336), or four S,Hq,Hkv,D for ulysses (e.g. "
                                         f"32768,32,8,128), got {text!r}")
    return dims


def run_explain_ulysses(args) -> int:
    """The Ulysses paths' predicted layer times and whether the QKV-projection variant pays."""
    from .errors import LaunchError, ScheduleError
    from .schedule.ulysses_cost import PAYS_SHARE, ulysses_costs
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
    from .dtypes import canonical
    from .ops.choice import decide
    W = args.world_size
    if W < 1:
        from .errors import LaunchError
        raise LaunchError(f"--world-size must be >= 1, got {W}")
    if args.op == "ulysses":
        return run_explain_ulysses(args)
    if len(args.shape) != 3:
        from .errors import LaunchError
        raise LaunchError(f"explain {args.op} wants --shape M,N,K (three integers), got "
                          f"{','.join(map(str, args.shape))}")
    M, N, K = args.shape
    m, n, k = per_rank_shape(args.op, M, N, K, W) if W > 1 else (M, N, K)
    dtype = canonical(args.dtype)
    d = decide(args.op, m, n, k, W, dtype, args.gpu, cublas=not args.no_cublas)
    print(f"{args.op} {M}x{N}x{K} ({dtype}) at world size {W} on {args.gpu}: per-rank GEMM "
          f"{m}x{n}x{k}")
    if d.calibration:
        from .calibration import calibration_path
        print(f"calibration: {calibration_path(args.gpu)} (sha256 {d.calibration[:12]})")
    if d.note:
        print(d.note)
    print(d.table())
    c = d.choice
    what = (f"fused, backend {c.backend}" + (f", reduce {c.reduce}" if c.reduce == "epilogue"
                                             else "") if c.path == "fused" else
            f"{c.path}, local GEMM {c.local}")
    print(f"choice: {c.name} ({what})")
    return 0


def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "explain", help="the paths an op weighs for a shape, their predicted times, its choice",
        description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=("ag_gemm", "gemm_rs", "ulysses"))
    p.add_argument("--shape", type=_shape, required=True, metavar="M,N,K",
                   help="the op's global GEMM (as in the benchmark table); ulysses: S,Hq,Hkv,D")
    p.add_argument("--causal", action="store_true", help="ulysses: causal attention")
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
    import argparse
    import re
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", text or ""):
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU type name: use lower-case "
                                         f"letters, digits, '-' or '_' (e.g. h200)")
    return text
