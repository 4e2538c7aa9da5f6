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
  the unfused reference -- except elements that float atomic adds wrote, which the emulator
  compares within its rounding bound and reports as "float atomic order" notes: those notes,
  on a parameter the case adds floats into atomically, and no other, are clean.
* ``failure`` otherwise: a race, a mismatch, a deadlock, any other note, or any exception that
  is not a syncopate error (the compiler crashed).  Atomics (``atomics.py``) add two: an atomic
  on the communicated tensor must be refused with the compiler's atomic message, pointing at
  the atomic's line (``atomic-not-refused``, ``atomic-wrong-refusal``) -- another refusal is
  accepted only when the same kernel without its atomics is refused the same way (the
  compiler stopped before it reached the atomic); and atomics on a tensor no schedule moves
  must not make a kernel the compiler fuses without them refused (``atomic-refused``).  ``known`` is a failure that matches a compiler bug
  already recorded in :mod:`syncopate.fuzz.known` (docs/fuzzing.md, an ``xfail(strict=True)``
  test each): counted and shown, never dropped, but it does not fail the run.
"""

from __future__ import annotations

import re
import time
import traceback
from dataclasses import dataclass

import numpy as np

from ..emulate import Emulation, PerRank, fuse_module, kernel_ttir
from ..emulate.interpreter import ModuleCode
from ..emulate.memory import Buffer, Ptr, etype_of, to_etype
from ..emulate.modules import local_module
from ..emulate.reference import run_grid
from ..errors import LaunchError, SyncopateError
from . import atomics
from .case import Case, load_kernel
from .gen import generate
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
    report: str = ""          # the emulator's summary or the traceback
    #: clean: the emulator's float atomic order notes (differences within the bound)
    notes: int = 0

    def line(self, case: Case) -> str:
        extra = f" [{self.known}]" if self.known else (f" [{self.kind}]" if self.kind else "")
        msg = self.detail.splitlines()[0][:160] if self.detail else ""
        return f"seed {self.seed}: {self.outcome}{extra} ({self.seconds:.1f} s) " \
               f"{case.style_line} -- {msg}"


def _np_args(case: Case, rank_inputs: list[dict]):
    """The emulator's ``args``: per-rank inputs (and atomics' tensors), zeroed outputs, the
    scalars."""
    args: dict = {}
    for t in case.tensors:
        if t.name in rank_inputs[0]:
            args[t.name] = PerRank([inp[t.name] for inp in rank_inputs])
        else:
            args[t.name] = np.zeros(t.shape, np.float32)
    args.update(case.scalars)
    return args


def run_unfused(ttir: str, case: Case, inputs: dict) -> dict[str, np.ndarray]:
    """Run the unfused kernel's TTIR on one GPU's data with the emulator's interpreter (the
    same one that runs the reference) and return the outputs.  Outputs start as NaN so a
    tile the kernel never writes shows (those atomics add into start as ``inputs`` says)."""
    code = ModuleCode(local_module(ttir)).kernel
    types = dict(zip(code.arg_names, code.arg_types))
    bufs = {}
    for t in case.tensors:
        et = etype_of(types[t.name].pointee_type)
        data = inputs[t.name] if t.name in inputs else np.full(t.shape, np.nan, np.float32)
        # a copy: the kernel's atomics update the buffer, ``inputs`` stays what it started as
        bufs[t.name] = Buffer(t.name, 0, et, to_etype(np.array(data).reshape(-1), et))
    args = [Ptr(bufs[n], 0) if n in bufs else case.scalars[n] for n in code.arg_names]
    run_grid(code, args, tuple(case.grid) + (1,) * (3 - len(case.grid)))
    return {t.name: bufs[t.name].data.reshape(t.shape) for t in case.tensors if t.role != "in"}


def check_unfused(ttir: str, case: Case) -> str | None:
    """None when the unfused kernel computes what the generator meant, else why not."""
    plan = case.atomic
    if plan is not None and plan.pattern == "desc":
        return None     # a TMA reduction: the emulator does not run it (docs/emulator.md)
    inputs = case.inputs(np.random.default_rng(case.seed))
    got = run_unfused(ttir, case, inputs)
    want = case.expected(inputs)
    if plan is not None and plan.where == "comm" and plan.pattern != "replace":
        want = {}   # its atomics change what later programs read or what it stored: it runs
    for name, exp in want.items():
        g = got[name].astype(np.float64)
        tol = 0.05 * (np.abs(exp) + 1.0) * (np.sqrt(case.scalars.get("K", case.scalars["N"]))
                                            if case.styles["body"] in ("gemm", "rowsum") else 1)
        bad = ~(np.abs(g - exp) <= tol)
        if bad.any():
            i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            return (f"the unfused kernel's {name} differs from numpy at {int(bad.sum())} "
                    f"element(s) (first {tuple(int(x) for x in i)}: {g[i]} vs {exp[i]})")
    if plan is not None:
        return atomics.check_unfused(plan, got, inputs,
                                     "c_ptr" if case.styles["body"] == "gemm" else "y_ptr")
    return None


def run_case(case: Case) -> Verdict:
    """Compile, emulate and judge one case (see the module docstring)."""
    t0 = time.perf_counter()
    v = Verdict(case.seed, "clean")

    def done(outcome, detail="", kind="", report=""):
        """The verdict; a failure that matches a known bug is ``known``."""
        v.outcome, v.detail, v.kind, v.report = outcome, detail, kind, report
        v.seconds = time.perf_counter() - t0
        k = match_known(case, v) if outcome == "failure" else None
        if k is not None:
            v.outcome, v.known = "known", k
        return v

    try:
        kernel = load_kernel(case)
    except Exception as e:  # noqa: BLE001 - the generator wrote bad Python
        return done("invalid", f"source does not import: {e!r}", "source",
                    traceback.format_exc())
    module = refusal = crash = None
    try:
        module, ttir = _fuse(kernel, case)
    except SyncopateError as e:
        refusal = e
    except Exception as e:  # noqa: BLE001 - classified below
        crash = (f"the compiler crashed: {type(e).__name__}: {e}", traceback.format_exc())
    if module is None:
        try:
            ttir = kernel_ttir(kernel, case.signature, case.constexprs, case.attrs)
        except Exception as e2:  # noqa: BLE001 - Triton rejected the kernel: generator bug
            return done("invalid", f"Triton's frontend rejects the kernel: {e2!r}"[:2000],
                        "frontend", traceback.format_exc())
    if crash is not None:
        return done("failure", crash[0], "crash", crash[1])
    try:
        why = check_unfused(ttir, case)
    except Exception as e:  # noqa: BLE001 - the unfused kernel does not run
        return done("invalid", f"the unfused kernel fails: {type(e).__name__}: {e}"[:2000],
                    "unfused", traceback.format_exc())
    if why:
        return done("invalid", why, "unfused")
    plan = case.atomic
    if module is not None and plan is not None and plan.where == "comm":
        return done("failure", f"an atomic on the communicated tensor {plan.target!r} (line "
                               f"{plan.lines}) was fused, not refused", "atomic-not-refused")
    if module is None:
        msg = str(refusal)
        if plan is not None:
            why = _judge_atomic_refusal(case, msg)
            if why is not None:
                return done("failure", f"{why}: {type(refusal).__name__}: {msg}"[:2000],
                            "atomic-wrong-refusal" if plan.where == "comm" else
                            "atomic-refused")
        if len(msg) < MIN_MESSAGE:
            return done("failure", f"refusal without a useful message: "
                                   f"{type(refusal).__name__}: {msg!r}", "terse-refusal")
        hinted = {"hint": {t.name for t in case.tensors},
                  "gather_hint": {"x_ptr"}}.get(case.styles["addressing"], set())
        if case.operand in hinted and "hint_region" in msg and "hint_region:" not in msg:
            # the refusal tells the user to add the hint the kernel already has
            return done("failure", f"refused with advice the kernel already follows: "
                                   f"{type(refusal).__name__}: {msg}", "advice-already-followed")
        return done("refused", f"{type(refusal).__name__}: {msg}")
    rng = np.random.default_rng(case.seed + 1)
    rank_inputs = [case.inputs(rng) for _ in range(case.schedule.world_size)]
    try:
        res = Emulation(module, ttir, grid=case.grid, args=_np_args(case, rank_inputs)).run(
            tuple(case.policies), case.launches, seed=case.seed)
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
    odd = unexpected_notes(case, res.notes)
    v.notes = len(res.notes)
    if res.ok and not odd:
        return done("clean", f"{len(res.policies)} policies x {res.launches} launches"
                    + (f", {len(res.notes)} float atomic order note(s)" if res.notes else ""),
                    report=res.summary(5) if res.notes else "")
    kinds = sorted({r.kind for r in res.races} | ({"mismatch"} if res.mismatches else set())
                   | ({"unexpected-note"} if odd else set()))
    return done("failure", (res.summary(limit=3).splitlines()[0] if not res.ok else
                            f"a note the case cannot explain: {odd[0]}"), ",".join(kinds),
                res.summary(20))


def _fuse(kernel, case: Case):
    return fuse_module(kernel, signature=case.signature, constexprs=case.constexprs,
                       attrs=case.attrs, schedule=case.schedule, operand=case.operand,
                       backend=case.backend, comm_programs=case.comm_programs)


#: the compiler's refusal of an atomic on a communicated tensor (passes/check_accesses.py
#: ``_refuse_rmw``): ``FILE:LINE:COL: this tt.<op> (...) updates 'PARAM' in place``
_ATOMIC_REFUSAL = re.compile(r"\.py:(\d+):\d+: this tt\.(atomic_rmw|atomic_cas|descriptor_reduce) "
                             r"\(.*?\) updates '(\w+)' in place")


def names_atomic(case: Case, msg: str) -> bool:
    """Whether ``msg`` is the compiler's atomic refusal for one of the case's atomics on the
    communicated tensor: the op at one of their source lines, updating that parameter."""
    m = _ATOMIC_REFUSAL.search(msg)
    plan = case.atomic
    return bool(m) and int(m.group(1)) in plan.lines and m.group(3) == plan.target


def _normalised(msg: str) -> str:
    """A refusal without its source locations (the kernels' files and lines differ)."""
    return re.sub(r"\S+\.py:\d+(:\d+)?:?", "<loc>", msg)


def _judge_atomic_refusal(case: Case, msg: str) -> str | None:
    """Why a refusal of an atomics case is wrong (None: it is right).  On the communicated
    tensor: the atomic message, or the refusal the kernel without atomics gets (the compiler
    stopped before the atomic).  On another tensor: only a refusal the kernel without atomics
    gets too."""
    plan = case.atomic
    if plan.where == "comm" and names_atomic(case, msg):
        return None
    base = generate(case.seed, atomic="none")
    try:
        _fuse(load_kernel(base), base)
    except SyncopateError as e:
        if plan.where == "local" or _normalised(str(e)) == _normalised(msg):
            return None
        return ("refused for another reason than the atomic on the communicated tensor "
                f"(lines {plan.lines}), and not the way the kernel without it is")
    if plan.where == "local":
        return (f"a kernel the compiler fuses is refused once it updates {plan.target!r} (no "
                f"schedule moves it) with atomics")
    return (f"the atomic on the communicated tensor {plan.target!r} (lines {plan.lines}) is "
            f"refused without the compiler's atomic message")


def unexpected_notes(case: Case, notes: list[str]) -> list[str]:
    """The emulator's notes the case does not explain: every note must be a float atomic
    order note on the parameter the case adds floats into atomically (``AtomicPlan.
    fadd_param``); a case without float atomic adds has none."""
    param = case.atomic.fadd_param if case.atomic is not None else None
    ok = re.compile(rf"float atomic order: rank \d+, launch \d+, {re.escape(param)}: ") \
        if param else None
    return [n for n in notes if ok is None or not ok.match(n)]
