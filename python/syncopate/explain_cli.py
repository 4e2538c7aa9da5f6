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
same function with the same inputs), so it can be asked on any machine, GPU or not. A separate
module (registered in :data:`syncopate.cli.COMMAND_MODULES`) so that the command line's other
parts change independently.
"""

from __future__ import annotations

import argparse

__all__ = ["register_commands", "run_explain", "run_explain_ulysses", "per_rank_shape",
           "op_shape", "EXPLAIN_OPS"]

#: the ops ``explain`` answers for (``ulysses``: the layer-level model table)
EXPLAIN_OPS = ("ag_gemm", "gemm_rs", "gemm_ar", "ag_gemm_fp8", "gemm_rs_fp8", "ring_attention",
               "ulysses_attention", "moe_dispatch_gemm", "moe_gemm_combine", "ulysses")
_SHAPE_TEXT = {"ring_attention": "S,Hq,Hkv,D (e.g. 32768,32,8,128)",
               "ulysses_attention": "S,Hq,Hkv,D (e.g. 32768,32,8,128)",
               "moe_dispatch_gemm": "E,C,H,N (e.g. 8,640,4096,14336)",
               "moe_gemm_combine": "E,C,F,H (e.g. 8,640,14336,4096)"}


def per_rank_shape(op: str, M: int, N: int, K: int, W: int) -> tuple[int, int, int]:
    """The per-rank GEMM of the op's global ``M x N x K`` (what the op decides on)."""
    from .errors import LaunchError
    base = op[:-4] if op.endswith("_fp8") else op
    if base == "ag_gemm":
        if M % W or N % W:
            raise LaunchError(f"{op} shards M (rows of A) and N (columns of B) over the "
                              f"{W} ranks: M = {M} and N = {N} must be multiples of {W}")
        return M, N // W, K
    if base == "gemm_rs":
        if M % W or K % W:
            raise LaunchError(f"{op} shards K over the {W} ranks and scatters M: M = {M} and "
                              f"K = {K} must be multiples of {W}")
        return M, N, K // W
    if base == "gemm_ar":
        if K % W:
            raise LaunchError(f"gemm_ar shards K over the {W} ranks: K = {K} must be a "
                              f"multiple of {W}")
        return M, N, K // W
    raise LaunchError(f"unknown GEMM op {op!r}; choose ag_gemm, gemm_rs, gemm_ar, ag_gemm_fp8 "
                      f"or gemm_rs_fp8")


def op_shape(op: str, dims: tuple, W: int, batch: int = 1, causal: bool = False) -> tuple:
    """The shape :func:`syncopate.ops.choice.decide_shape` takes for the op's global ``dims``
    (LaunchError when they do not fit the op or do not divide over ``W`` ranks)."""
    from .errors import LaunchError
    from .ops.choice import GEMM_OPS
    want = 3 if op in GEMM_OPS else 4
    if len(dims) != want:
        raise LaunchError(f"explain {op} wants --shape "
                          f"{_SHAPE_TEXT.get(op, 'M,N,K (three integers)')}, got "
                          f"{','.join(map(str, dims))}")
    if op in GEMM_OPS:
        return per_rank_shape(op, *dims, W) if W > 1 else tuple(dims)
    if op in ("ring_attention", "ulysses_attention"):
        S, Hq, Hkv, D = dims
        if S % W or Hq % Hkv or (op == "ulysses_attention" and Hkv % W):
            raise LaunchError(f"{op} needs S ({S}) divisible by the world size ({W}), Hq ({Hq}) "
                              f"a multiple of Hkv ({Hkv})"
                              + (f" and Hkv divisible by {W}" if op == "ulysses_attention"
                                 else ""))
        return (batch, Hq, Hkv, S, D, int(bool(causal)))
    if dims[0] % W:
        raise LaunchError(f"{op} places E / W experts on each rank: E = {dims[0]} must be a "
                          f"multiple of {W}")
    return tuple(dims)


def _shape(text: str) -> tuple[int, ...]:
    parts = text.replace("x", ",").split(",")
    try:
        dims = tuple(int(p) for p in parts)
    except ValueError:
        dims = ()
    if len(dims) not in (3, 4) or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"--shape wants three positive integers M,N,K (e.g. "
                                         f"1024,4096,14336), or four: S,Hq,Hkv,D for attention "
                                         f"(e.g. 32768,32,8,128), E,C,H,N / E,C,F,H for MoE, got "
                                         f"{text!r}")
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
    from .errors import LaunchError
    from .ops.choice import decide_shape
    W = args.world_size
    if W < 1:
        raise LaunchError(f"--world-size must be >= 1, got {W}")
    if args.op == "ulysses":
        return run_explain_ulysses(args)
    shape = op_shape(args.op, tuple(args.shape), W, args.batch, args.causal)
    dtype = "fp8e4m3" if args.op.endswith("_fp8") else canonical(args.dtype)
    d = decide_shape(args.op, shape, W, dtype, args.gpu, cublas=not args.no_cublas)
    from .ops.choice_ops import SHAPES
    names = SHAPES.get(args.op, ("m", "n", "k"))
    per_rank = ("per-rank GEMM " + "x".join(map(str, shape)) if names == ("m", "n", "k") else
                "decides on " + ", ".join(f"{n} {v}" for n, v in zip(names, shape)))
    print(f"{args.op} {'x'.join(map(str, args.shape))} ({dtype}) at world size {W} on "
          f"{args.gpu}: {per_rank}")
    if d.calibration:
        from .calibration import calibration_path
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


def register_commands(subparsers) -> None:
    p = subparsers.add_parser(
        "explain", help="the paths an op weighs for a shape, their predicted times, its choice",
        description=__doc__.split("\n\n")[0])
    p.add_argument("op", choices=EXPLAIN_OPS)
    p.add_argument("--shape", type=_shape, required=True, metavar="D1,D2,...",
                   help="the op's global problem (as in the benchmark tables): GEMM ops M,N,K; "
                        "attention and ulysses S,Hq,Hkv,D; moe_dispatch_gemm E,C,H,N; "
                        "moe_gemm_combine E,C,F,H")
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


def positive_int(text: str) -> int:
    from .cli_args import positive_int as check
    return check(text)


def _gpu_name(text: str) -> str:
    """A calibration file stem: lower-case letters, digits, '-', '_' (no path: the name picks a
    file under the package's calibration folder)."""
    import argparse
    import re
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", text or ""):
        raise argparse.ArgumentTypeError(f"{text!r} is not a GPU type name: use lower-case "
                                         f"letters, digits, '-' or '_' (e.g. h200)")
    return text
