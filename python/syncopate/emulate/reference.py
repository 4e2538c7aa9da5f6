"""What a correct emulation produces, and the comparison of the fused outputs with it.

The reference, per launch, uses the *collected* inputs: for a tensor the schedule gathers
(all-gather, ring pass, all-to-all), the global tensor assembled from what every rank staged,
placed where the schedule says each rank ends up holding it; for a tensor the kernel produces
and the schedule reduces (reduce-scatter, all-reduce), each rank's unfused partial, summed in
fp32 over ranks on the regions each rank ends up owning; for a tensor the kernel produces and
the schedule only copies (``produced``: Ulysses' output all-to-all), each rank's unfused output
on its initial placement, assembled, then compared on the regions each rank ends up holding.
A ``view="rank"`` operand is passed to the unfused kernel of rank ``r`` advanced to its part
(``r * step``), as the fused kernel advances it itself.  Outputs that no chunk moves must
match the reference bit for bit (same interpreter, same tiles); reduced regions within a
rounding bound (the fused sum rounds after each added partial when more than two ranks add).

One exception to the bits: a module compiled with ``reorder_reductions=True`` whose tile-remap
renumbered a loop that accumulates floats (``syncopate.state``'s ``reordered``; attention's KV
loop visiting local K/V blocks first) sums in another order than the unfused kernel, so its
outputs are compared within :data:`REORDER_ULPS` ulps of the coarsest float type among the
kernel's pointer parameters (the type the loop's operands are rounded to, bf16 for a bf16
attention), scaled by the magnitude of the element plus the largest magnitude of its output:
``|got - expected| <= REORDER_ULPS * eps * (|expected| + max|expected|)``.  The scale by the
output's largest element is the normwise bound of a reordered sum of products (a softmax
average of V rows rounds at the scale of the largest rows, not of the element).

Float atomic adds (``tt.atomic_rmw fadd``; ``tl.atomic_add`` of f16, bf16, f32, f64) land in
whatever order the programs reach them, so an element that several adds update may differ from
the unfused kernel's by rounding alone.  Such an element is compared within
:func:`float_atomic_bound` and, within it, reported as a note ("float atomic order"), not as a
mismatch.  The bound: each add rounds once, ``fl(s + v) = (s + v)(1 + d)`` with ``|d| <= u``
(``u = 2^-p``, ``p`` the significand bits: 8 bf16, 11 f16, 24 f32, 53 f64), and may also lose
less than the smallest normal ``tiny`` per operand and result (f32 atomics on global memory
flush subnormals to zero; the others round subnormals with an absolute error below ``tiny``).
The partial sums of one order telescope, so its result is ``s0 + sum(v) + sum(e_k)`` with
``|e_k| <= u |s_k| / (1 - u) + 4 tiny``, ``s_k`` the value after the k-th add.  Two orders of
the same ``n`` adds then differ by at most ``n (eps (1 + eps) M + 8 tiny)``, ``eps = 2u`` (one
ulp at 1.0) and ``M`` the largest finite magnitude the element held in either run
(``memory.FaddLog`` records both ``n`` and ``M`` per element and launch).  An element that took
a different number of float atomic adds in the two runs, or differs by more than the bound, is
a mismatch; an overflow to infinity in one order only is one too.  Elements no float atomic add
wrote stay bitwise.  Only tensors no chunk moves take the bound: the compiler refuses every
atomic on a communicated tensor (docs/soundness.md, "Atomics"), so a reduced or collected
tensor is never added into atomically and is compared without it.
"""

from __future__ import annotations

import collections
import itertools
from typing import Callable, Mapping

import numpy as np

from ..errors import EmulationError
from .arguments import ParamSpec, is_consumed_operand, is_produced_operand
from .comm import region_offsets
from .extents import undefined_boxes
from .interpreter import Machine, ProgramCtx
from .memory import Buffer, Ptr, to_etype
from .scheduler import SPIN_TURN

__all__ = ["REORDER_ULPS", "Reference", "final_regions", "float_atomic_bound",
           "initial_regions", "is_reduced", "part_offset", "program_ids", "run_grid"]

#: ulps (of the coarsest float pointer type) allowed when a loop's reductions were reordered
REORDER_ULPS = 8
_EPS = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -23, "f64": 2.0 ** -52}
#: significand bits and smallest normal of the types a float atomic add takes
_ATOMIC_FLOATS = {"bf16": (8, 2.0 ** -126), "f16": (11, 2.0 ** -14), "f32": (24, 2.0 ** -126),
                  "f64": (53, 2.0 ** -1022)}


def float_atomic_bound(count, scale, et_name: str):
    """The largest difference between two orders of ``count`` float atomic adds of type
    ``et_name`` into an element whose magnitude never exceeded ``scale`` (module docstring):
    ``count * (eps * (1 + eps) * scale + 8 * tiny)``."""
    p, tiny = _ATOMIC_FLOATS[et_name]
    eps = 2.0 ** (1 - p)
    return np.asarray(count, np.float64) * (eps * (1 + eps) * np.asarray(scale, np.float64)
                                            + 8 * tiny)


def _atomic_order(fused, ref, et):
    """``(bound, counts differ)`` per element from the two runs' float atomic adds
    (:class:`~.memory.FaddLog` or None each), or None when neither added into the buffer as
    its own type (an add through a view of another type is compared bitwise)."""
    logs = [lg for lg in (fused, ref) if lg is not None]
    if not logs or any(lg.et.name != et.name or lg.et.name not in _ATOMIC_FLOATS for lg in logs):
        return None
    zero = np.zeros_like(logs[0].count)
    nf = fused.count if fused is not None else zero
    nr = ref.count if ref is not None else zero
    scale = np.fmax(fused.scale if fused is not None else 0.0,
                    ref.scale if ref is not None else 0.0)
    return float_atomic_bound(np.maximum(nf, nr), scale, et.name), nf != nr


def program_ids(grid):
    """Every program id ``(x, y, z)`` of ``grid``, x fastest."""
    g = tuple(grid) + (1, 1, 1)
    for z, y, x in itertools.product(range(g[2]), range(g[1]), range(g[0])):
        yield (x, y, z)


def run_grid(code, args, grid, rank: int = 0, epoch: int = 1,
             max_steps: int = 2_000_000) -> None:
    """Run every program of ``grid`` to completion, one after another, on a machine with no
    peers and no flags: the unfused kernel ``code`` on one GPU's arguments.  A program that
    passes :data:`~.scheduler.SPIN_TURN` preemption points (atomics) without finishing waits
    for another (a grid barrier, a look-back flag): the next one runs and it resumes later,
    as a GPU runs its resident programs side by side; one that never finishes (a barrier for
    more programs than the grid has) is an error after ``max_steps`` points, not a hang."""
    m = Machine()
    live = collections.deque((pid, code.call(args, ProgramCtx(m, rank, pid, grid, epoch,
                                                                "compute")))
                             for pid in program_ids(grid))
    steps = 0
    while live:
        pid, prog = live[0]
        for _ in range(SPIN_TURN):
            try:
                next(prog)
            except StopIteration:
                live.popleft()
                break
        else:
            steps += SPIN_TURN
            if steps > max_steps:
                raise EmulationError(
                    f"the unfused kernel did not finish: program {pid} and "
                    f"{len(live) - 1} other(s) still wait after {steps} atomics (a flag or "
                    f"barrier that no program of the grid {tuple(grid)} sets?)")
            live.rotate(-1)


def initial_regions(sched, tensor):
    """``(rank, lo, hi, partial)`` of each initial placement of ``tensor``."""
    return [(p.rank, p.region.offsets, p.region.stops, p.partial)
            for p in sched.tensors[tensor].initial]


def is_reduced(sched, tensor) -> bool:
    """Whether the schedule sums partials of ``tensor`` (reduce-scatter, all-reduce), as
    opposed to copying what the kernel produced (a ``produced`` copy schedule)."""
    return any(c.tensor == tensor and c.reduce == "sum" for c in sched.chunks) or any(
        p.partial for p in sched.tensors[tensor].initial)


def part_offset(sched, tensor, rank: int) -> int:
    """Elements from a ``view="rank"`` tensor's base to ``rank``'s part (0 for a global
    view): where the fused kernel's operand points after append-abi-params."""
    spec = sched.tensors[tensor]
    if spec.view != "rank":
        return 0
    _, step = sched.rank_part(tensor)
    stride, off = 1, 0
    for n, k in zip(reversed(spec.shape), reversed(step)):
        off += k * stride
        stride *= n
    return rank * off


def final_regions(sched, tensor):
    """``(rank, lo, hi)`` of each final placement of ``tensor``."""
    return [(p.rank, p.region.offsets, p.region.stops) for p in sched.tensors[tensor].final]


class Reference:
    """The expected outputs of one emulation (the unfused kernel ``code`` run by the same
    interpreter on the collected inputs), per launch, and their comparison with what the
    fused module left in each rank's buffers."""

    def __init__(self, *, schedule, operands: Mapping[str, str], spec: ParamSpec, args: dict,
                 inputs: Callable[[int, int, int], dict], code, grid: tuple[int, ...],
                 reordered: bool = False):
        self.schedule, self.operands, self.spec, self.args = schedule, operands, spec, args
        self.inputs = inputs      # (rank, epoch, seed) -> the pointer inputs of that launch
        self.code = code
        self.grid = grid
        self.W = schedule.world_size
        #: a loop's float reductions run in another order: compare within REORDER_ULPS
        self.reordered = reordered
        self._cache: dict = {}

    def expected(self, epoch: int, seed: int) -> dict:
        """rank -> param -> expected buffer (``"__gathered__"``: the collected inputs), and
        ``("sum", param)`` / ``("abs", param)`` for reduced tensors: the fp32 sum of the
        partials and the sum of their magnitudes (the scale of the rounding error)."""
        key = (epoch, seed)
        if key in self._cache:
            return self._cache[key]
        gathered = {}
        for p, t in self.operands.items():
            if self.schedule.is_produced(t):
                continue
            shape = self.schedule.tensors[t].shape
            size = int(np.prod(shape))
            et = self.spec.ptr[p]
            g = np.full(size, np.nan, dtype=et.np) if et.kind == "float" \
                else np.zeros(size, dtype=et.np)
            for r, lo, hi, partial in initial_regions(self.schedule, t):
                offs = region_offsets(shape, lo, hi)
                g[offs] = self.inputs(r, epoch, seed)[p][offs]
            gathered[p] = g
        out = {}
        for r in range(self.W):
            bufs = {}
            for p, et in self.spec.ptr.items():
                data = self.inputs(r, epoch, seed)[p].copy()
                t = self.operands.get(p)
                if t is not None:
                    data[:] = np.nan if et.kind == "float" else 0
                if p in gathered:  # what rank r ends up holding, and what it started with
                    shape = self.schedule.tensors[t].shape
                    held = final_regions(self.schedule, t) + [
                        (rr, lo, hi) for rr, lo, hi, _ in initial_regions(self.schedule, t)]
                    for rr, lo, hi in held:
                        if rr == r:
                            offs = region_offsets(shape, lo, hi)
                            data[offs] = gathered[p][offs]
                bufs[p] = Buffer(p, r, et, data)
            args = [Ptr(bufs[n], part_offset(self.schedule, self.operands[n], r)
                        if n in self.operands else 0) if n in bufs else self.args[n][r]
                    for n in self.spec.names]
            run_grid(self.code, args, self.grid, r, epoch)
            out[r] = {p: b.data for p, b in bufs.items()}
            out[r]["__gathered__"] = gathered
            out["fadd", r] = {p: b.fadd.get(epoch) for p, b in bufs.items()}
        for p, t in self.operands.items():
            if not self.schedule.is_produced(t):
                continue
            et = self.spec.ptr[p]
            if not is_reduced(self.schedule, t):
                # collected tensors: each rank's output on its initial placement, assembled
                shape = self.schedule.tensors[t].shape
                g = np.full(int(np.prod(shape)), np.nan, dtype=et.np)
                for r, lo, hi, _ in initial_regions(self.schedule, t):
                    offs = region_offsets(shape, lo, hi)
                    g[offs] = out[r][p][offs]
                out["collected", p] = g
                continue
            # reduced tensors: fp32 sum over ranks of the partials
            total = sum(out[r][p].astype(np.float32) for r in range(self.W))
            out["sum", p] = to_etype(total, et)
            # the rounding error of a sum of partials scales with the partials, not with the
            # sum: under cancellation (20 + 20 - 38) every intermediate rounds at 40's ulp
            out["abs", p] = sum(np.abs(out[r][p].astype(np.float32)) for r in range(self.W))
        self._cache[key] = out
        return out

    def compare(self, snapshots, seed, policy, result, complete: bool, fadd) -> None:
        """Every snapshot ``(rank, launch) -> param -> data`` against the reference: mismatches
        and notes into ``result``.  ``fadd(rank, param, launch)``: the fused run's float atomic
        adds into that buffer in that launch (:class:`~.memory.FaddLog` or None)."""
        for (r, e), got in sorted(snapshots.items()):
            ref = self.expected(e, seed)
            for p, data in got.items():
                if is_consumed_operand(self.schedule, self.operands, p):
                    continue  # checked below, once every rank finished
                if is_produced_operand(self.schedule, self.operands, p):
                    if ("collected", p) in ref:
                        self._compare_collected(r, e, p, data, ref, policy, result, got)
                    else:
                        self._compare_reduced(r, e, p, data, ref, policy, result)
                    continue
                exp = ref[r][p]
                order = _atomic_order(fadd(r, p, e), ref["fadd", r].get(p), self.spec.ptr[p])
                if self.reordered and data.dtype.kind == "f":
                    self._compare_reordered(r, e, p, data, exp, policy, result, order)
                    continue
                bad = self._excuse_atomic_order(_differ(data, exp), data, exp, order,
                                                f"rank {r}, launch {e}, {p}", policy, result)
                if bad.any():
                    first = int(np.argmax(bad))
                    result.mismatches.append(
                        f"rank {r}, launch {e}, {p}: {int(bad.sum())} element(s) differ from "
                        f"the unfused kernel (first: element {first}, {data[first]} vs "
                        f"{exp[first]}){_count_note(bad, order)} [{policy}]")
        if not complete:
            return
        last = max((e for (_, e) in snapshots), default=0)
        for r in range(self.W):
            got = snapshots.get((r, last))
            if got is None:
                continue
            ref = self.expected(last, seed)
            for p, t in self.operands.items():
                if self.schedule.is_produced(t):
                    continue
                for _, _, offs in self._final_offsets(t, r, got):
                    a = got[p][offs]
                    b = ref[r]["__gathered__"][p][offs]
                    if not np.array_equal(a, b, equal_nan=True):
                        result.mismatches.append(
                            f"rank {r}, launch {last}, {p} ({t}): "
                            f"{int((a != b).sum())} element(s) of its final region differ from "
                            f"the gathered inputs [{policy}]")

    def _final_offsets(self, t, r, got=None):
        """``(lo, hi, offsets)`` of each final region of tensor ``t`` on rank ``r``; with
        ``got`` (rank ``r``'s buffers after the launch), less the rows past a run-time extent's
        count, which are padding, not data (extents.py)."""
        shape = self.schedule.tensors[t].shape
        padding = []
        if got is not None:
            param_of = {tt: pp for pp, tt in self.operands.items()}
            padding = [region_offsets(shape, slo, shi) for slo, shi in
                       undefined_boxes(self.schedule, t, r, lambda name: got[param_of[name]])]
        for rr, lo, hi in final_regions(self.schedule, t):
            if rr == r:
                offs = region_offsets(shape, lo, hi)
                for pad in padding:
                    offs = np.setdiff1d(offs, pad)
                yield lo, hi, offs

    def _excuse_atomic_order(self, bad, a, b, order, what, policy, result):
        """``bad`` less the elements within the float atomic bound of ``order`` (a note in
        ``result`` when there are any)."""
        if order is None or not bad.any():
            return bad
        bound, differ = order
        with np.errstate(invalid="ignore"):
            err = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))
            within = bad & ~differ & (err <= bound)
        if within.any():
            result.notes.append(
                f"float atomic order: {what}: {int(within.sum())} element(s) differ from the "
                f"unfused kernel only within the rounding bound of their float atomic adds "
                f"(largest difference {float(err[within].max()):.3g}, largest bound "
                f"{float(bound[within].max()):.3g}) [{policy}]")
        return bad & ~within

    def _compare_reduced(self, r, e, p, data, ref, policy, result) -> None:
        """Rank ``r``'s final regions of a reduced tensor against the fp32 sum of the unfused
        partials, within the sum's rounding bound."""
        exp = ref["sum", p]
        t = self.operands[p]
        eps = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -23}.get(
            self.spec.ptr[p].name, 0.0)
        for lo, hi, offs in self._final_offsets(t, r):
            a, b = data[offs].astype(np.float64), exp[offs].astype(np.float64)
            scale = ref["abs", p][offs].astype(np.float64)
            tol = eps * max(1, self.W - 1) * 2 * (scale + 1.0)
            bad = ~(np.abs(a - b) <= tol)
            if bad.any():
                result.mismatches.append(
                    f"rank {r}, launch {e}, {p} ({t}) rows {lo[0]}..{hi[0]}: "
                    f"{int(bad.sum())} element(s) differ from the reduced reference "
                    f"(max error {np.nanmax(np.abs(a - b)):.3g}) [{policy}]")

    def _compare_collected(self, r, e, p, data, ref, policy, result, got) -> None:
        """The final regions of a produced, copied tensor on rank ``r`` against the unfused
        outputs of the ranks that computed them: the same bits (within REORDER_ULPS when a
        loop's reductions were reordered). Rows past a run-time extent's count are padding,
        not data (extents.py): skipped, by the counts in ``got`` (rank ``r``'s buffers)."""
        exp = ref["collected", p]
        t = self.operands[p]
        for lo, hi, offs in self._final_offsets(t, r, got):
            if self.reordered and data.dtype.kind == "f":
                self._compare_reordered(r, e, p, data[offs], exp[offs], policy, result)
                continue
            bad = _differ(data[offs], exp[offs])
            if bad.any():
                result.mismatches.append(
                    f"rank {r}, launch {e}, {p} ({t}): {int(bad.sum())} element(s) of its final "
                    f"region {list(lo)}..{list(hi)} differ from the unfused outputs of the "
                    f"ranks that computed them [{policy}]")

    def _compare_reordered(self, r, e, p, data, exp, policy, result, order=None) -> None:
        """``data`` within REORDER_ULPS of ``exp`` (module docstring); equal non-finite
        values match; elements of float atomic adds also within their bound (``order``)."""
        eps = max((_EPS.get(et.name, 0.0) for et in self.spec.ptr.values()), default=0.0)
        a, b = data.astype(np.float64), exp.astype(np.float64)
        finite = np.isfinite(b)
        scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0
        tol = REORDER_ULPS * eps * (np.abs(np.where(finite, b, 0.0)) + scale)
        bad = _differ(a, b) & ~(np.abs(a - b) <= tol)
        bad = self._excuse_atomic_order(bad.reshape(-1), a.reshape(-1), b.reshape(-1), order,
                                        f"rank {r}, launch {e}, {p}", policy, result)
        if bad.any():
            first = int(np.argmax(bad.reshape(-1)))
            result.mismatches.append(
                f"rank {r}, launch {e}, {p}: {int(bad.sum())} element(s) differ from the "
                f"unfused kernel by more than {REORDER_ULPS} ulps (reordered reductions; first: "
                f"element {first}, {a.reshape(-1)[first]} vs {b.reshape(-1)[first]}) [{policy}]")


def _differ(a, b) -> np.ndarray:
    """Where ``a`` and ``b`` are not the same values (NaN matches NaN)."""
    if a.dtype.kind == "f":
        return ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return a != b


def _count_note(bad, order) -> str:
    """Why elements that float atomic adds wrote were not excused by their bound, if so."""
    if order is None:
        return ""
    n = int((bad & order[1]).sum())
    return f"; {n} of them took another number of float atomic adds" if n else ""
