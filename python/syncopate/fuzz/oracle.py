"""The fuzzing oracle: what a generated case must do, and the verdict.

A case is

* ``invalid`` when the *generator* is at fault: Triton's frontend rejects the kernel, or the
  unfused kernel, run by the emulator's interpreter on one GPU's worth of data, fails or does
  not compute what the generator meant (numpy says what that is).  The fuzzer must produce few
  of these; each one is a generator bug to fix.
* ``refused`` when fusing raises a :class:`~syncopate.errors.SyncopateError` (``CompileError``,
  ``ScheduleError``, ``LaunchError``) whose message says what to change.
* ``clean`` when the fused module (the pass pipeline through ``resolve-chunks``) emulates for W
  ranks, two launches, under every policy of the case, with no race and every output equal to
  the unfused reference.
* ``failure`` otherwise: a race, a mismatch, a deadlock, or any exception that is not a
  syncopate error (the compiler crashed).  ``known`` is a failure that matches a compiler bug
  already recorded in :mod:`syncopate.fuzz.known` (docs/fuzzing.md, an ``xfail(strict=True)``
  test each): counted and shown, never dropped, but it does not fail the run.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..emulate import Emulation, PerRank, fuse_module, kernel_ttir
from ..emulate.comm import program_gen
from ..emulate.interpreter import Machine, ModuleCode, ProgramCtx
from ..emulate.memory import Buffer, Ptr, etype_of, to_etype
from ..emulate.modules import local_module
from ..emulate.reference import program_ids
from ..errors import EmulationError, LaunchError, SyncopateError
from .case import Case, load_kernel
from .known import match_known

OUTCOMES = ("clean", "refused", "known", "invalid", "failure")
#: a refusal message shorter than this cannot name the op and say what to change
MIN_MESSAGE = 30


@dataclass
class Verdict:
    """The outcome of one case and what the fuzzer saw."""

    seed: int
    outcome: str
    detail: str = ""
    kind: str = ""            # failure/known: race kinds, "mismatch", "crash", ...
    known: str = ""           # the id of the known bug it matches
    seconds: float = 0.0
    phases: dict = field(default_factory=dict)
    report: str = ""          # the emulator's summary or the traceback
    #: mismatches: the largest |fused - unfused| / (|unfused| + 1) over the outputs no chunk
    #: moves (last launch, every policy and rank); rounding-sized differences say "reordered"
    max_rel: float | None = None

    def line(self, case: Case) -> str:
        extra = f" [{self.known}]" if self.known else (f" [{self.kind}]" if self.kind else "")
        msg = self.detail.splitlines()[0][:160] if self.detail else ""
        return f"seed {self.seed}: {self.outcome}{extra} ({self.seconds:.1f} s) " \
               f"{case.style_line} -- {msg}"


def _np_args(case: Case, rank_inputs: list[dict]):
    """The emulator's ``args``: per-rank inputs, zeroed outputs, the scalars."""
    args: dict = {}
    for t in case.tensors:
        if t.role == "in":
            args[t.name] = PerRank([inp[t.name] for inp in rank_inputs])
        else:
            args[t.name] = np.zeros(t.shape, np.float32)
    args.update(case.scalars)
    return args


def run_unfused(ttir: str, case: Case, inputs: dict) -> dict[str, np.ndarray]:
    """Run the unfused kernel's TTIR on one GPU's data with the emulator's interpreter (the
    same one that runs the reference) and return the outputs.  Outputs start as NaN so a
    tile the kernel never writes shows."""
    code = ModuleCode(local_module(ttir)).kernel
    types = dict(zip(code.arg_names, code.arg_types))
    bufs = {}
    for t in case.tensors:
        et = etype_of(types[t.name].pointee_type)
        data = inputs[t.name] if t.role == "in" else np.full(t.shape, np.nan, np.float32)
        bufs[t.name] = Buffer(t.name, 0, et, to_etype(np.asarray(data).reshape(-1), et))
    args = [Ptr(bufs[n], 0) if n in bufs else case.scalars[n] for n in code.arg_names]
    grid = tuple(case.grid) + (1,) * (3 - len(case.grid))
    m = Machine()
    for pid in program_ids(grid):
        pc = ProgramCtx(m, 0, pid, grid, 1, "compute")
        for _ in program_gen(code, args, pc):
            pass
    return {t.name: bufs[t.name].data.reshape(t.shape) for t in case.tensors if t.role == "out"}


def check_unfused(ttir: str, case: Case) -> str | None:
    """None when the unfused kernel computes what the generator meant, else why not."""
    inputs = case.inputs(np.random.default_rng(case.seed))
    got = run_unfused(ttir, case, inputs)
    want = case.expected(inputs)
    for name, exp in want.items():
        g = got[name].astype(np.float64)
        tol = 0.05 * (np.abs(exp) + 1.0) * (np.sqrt(case.scalars.get("K", case.scalars["N"]))
                                            if case.styles["body"] in ("gemm", "rowsum") else 1)
        bad = ~(np.abs(g - exp) <= tol)
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            return (f"the unfused kernel's {name} differs from numpy at {int(bad.sum())} "
                    f"element(s) (first {tuple(int(x) for x in i)}: {g[i]} vs {exp[i]})")
    return None


def _ttir(kernel, case: Case) -> str:
    return kernel_ttir(kernel, case.signature, case.constexprs, case.attrs)


def run_case(case: Case, *, policies=None, launches: int | None = None,
             check_reference: bool = True) -> Verdict:
    """Compile, emulate and judge one case (see the module docstring)."""
    t0 = time.perf_counter()
    v = Verdict(case.seed, "clean")

    def done(outcome, detail="", kind="", report=""):
        v.outcome, v.detail, v.kind, v.report = outcome, detail, kind, report
        v.seconds = time.perf_counter() - t0
        return v

    try:
        kernel = load_kernel(case)
    except Exception as e:  # noqa: BLE001 - the generator wrote bad Python
        return done("invalid", f"source does not import: {e!r}", "source",
                    traceback.format_exc())
    ttir = None
    try:
        module, ttir = fuse_module(kernel, signature=case.signature, constexprs=case.constexprs,
                                   attrs=case.attrs, schedule=case.schedule,
                                   operand=case.operand, backend=case.backend,
                                   comm_programs=case.comm_programs)
    except SyncopateError as e:
        refusal = e
        module = None
    except Exception as e:  # noqa: BLE001 - classified below
        try:
            ttir = _ttir(kernel, case)
        except Exception as e2:  # noqa: BLE001 - Triton rejected the kernel: generator bug
            return done("invalid", f"Triton's frontend rejects the kernel: {e2!r}"[:2000],
                        "frontend", traceback.format_exc())
        return done("failure", f"the compiler crashed: {type(e).__name__}: {e}", "crash",
                    traceback.format_exc())
    v.phases["fuse"] = round(time.perf_counter() - t0, 3)
    if module is None:
        try:
            ttir = _ttir(kernel, case)
        except Exception as e2:  # noqa: BLE001
            return done("invalid", f"Triton's frontend rejects the kernel: {e2!r}"[:2000],
                        "frontend", traceback.format_exc())
    if check_reference:
        try:
            why = check_unfused(ttir, case)
        except Exception as e:  # noqa: BLE001 - the unfused kernel does not run
            return done("invalid", f"the unfused kernel fails: {type(e).__name__}: {e}"[:2000],
                        "unfused", traceback.format_exc())
        if why:
            return done("invalid", why, "unfused")
    if module is None:
        msg = str(refusal)
        if len(msg) < MIN_MESSAGE:
            return done("failure", f"refusal without a useful message: "
                                   f"{type(refusal).__name__}: {msg!r}", "terse-refusal")
        hinted = {"hint": {t.name for t in case.tensors},
                  "gather_hint": {"x_ptr"}}.get(case.styles["addressing"], set())
        if case.operand in hinted and "hint_region" in msg and "hint_region:" not in msg:
            # the refusal tells the user to add the hint the kernel already has
            done("failure", f"refused with advice the kernel already follows: "
                            f"{type(refusal).__name__}: {msg}", "advice-already-followed")
            k = match_known(case, v)
            if k is not None:
                v.outcome, v.known = "known", k
            return v
        return done("refused", f"{type(refusal).__name__}: {msg}")
    t1 = time.perf_counter()
    rng = np.random.default_rng(case.seed + 1)
    W = case.schedule.world_size
    rank_inputs = [case.inputs(rng) for _ in range(W)]
    try:
        emu = Emulation(module, ttir, grid=case.grid, args=_np_args(case, rank_inputs))
        res = emu.run(tuple(policies or case.policies), launches or case.launches,
                      seed=case.seed)
    except SyncopateError as e:
        # a refusal at launch (LaunchError) is a refusal; anything else the emulator raises
        # is a fused module it cannot run: a failure to look at
        if isinstance(e, LaunchError) and len(str(e)) >= MIN_MESSAGE:
            return done("refused", f"{type(e).__name__}: {e}")
        return done("failure", f"{type(e).__name__}: {e}"[:2000], "emulator-error",
                    traceback.format_exc())
    except Exception as e:  # noqa: BLE001
        return done("failure", f"the emulator crashed on the fused module: "
                               f"{type(e).__name__}: {e}"[:2000], "crash",
                    traceback.format_exc())
    v.phases["emulate"] = round(time.perf_counter() - t1, 3)
    if res.ok:
        return done("clean", f"{len(res.policies)} policies x {res.launches} launches")
    kinds = sorted({r.kind for r in res.races} | ({"mismatch"} if res.mismatches else set()))
    if res.mismatches:
        v.max_rel = _max_rel(emu, res, case)
    done("failure", res.summary(limit=3).splitlines()[0], ",".join(kinds), res.summary(20))
    k = match_known(case, v)
    if k is not None:
        v.outcome, v.known = "known", k
    return v


def _max_rel(emu, res, case: Case) -> float | None:
    worst = None
    for pol, ranks in res.outputs.items():
        ref = emu.reference(res.launches, case.seed)
        for r, bufs in ranks.items():
            for t in case.tensors:
                if t.role != "out" or t.name in emu.operands:
                    continue
                a = bufs[t.name].astype(np.float64)
                b = ref[r][t.name].astype(np.float64)
                rel = float(np.nanmax(np.abs(a - b) / (np.abs(b) + 1.0)))
                worst = rel if worst is None else max(worst, rel)
    return worst


_ = EmulationError  # re-exported for callers that catch it
