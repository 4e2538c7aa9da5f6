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
renumbered a loop that accumulates floats (``syncopate.abi`` state ``reordered``; attention's KV
loop visiting local K/V blocks first) sums in another order than the unfused kernel, so its
outputs are compared within :data:`REORDER_ULPS` ulps of the coarsest float type among the
kernel's pointer parameters (the type the loop's operands are rounded to, bf16 for a bf16
attention), scaled by the magnitude of the element plus the largest magnitude of its output:
``|got - expected| <= REORDER_ULPS * eps * (|expected| + max|expected|)``.  The scale by the
output's largest element is the normwise bound of a reordered sum of products (a softmax
average of V rows rounds at the scale of the largest rows, not of the element).
"""

from __future__ import annotations

from typing import Callable, Mapping

import numpy as np

from .arguments import ParamSpec, is_consumed_operand, is_produced_operand
from .comm import program_gen, region_offsets
from .extents import undefined_boxes
from .interpreter import Machine, ProgramCtx
from .memory import Buffer, Ptr, to_etype

__all__ = ["REORDER_ULPS", "Reference", "final_regions", "initial_regions", "is_reduced",
           "part_offset", "program_ids"]

#: ulps (of the coarsest float pointer type) allowed when a loop's reductions were reordered
REORDER_ULPS = 8
_EPS = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -23, "f64": 2.0 ** -52}


def program_ids(grid):
    """Every program id ``(x, y, z)`` of ``grid``, x fastest."""
    g = tuple(grid) + (1, 1, 1)
    for z in range(g[2]):
        for y in range(g[1]):
            for x in range(g[0]):
                yield (x, y, z)


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
                    shape = self.schedule.tensors[t].shape
                    if p in gathered:
                        data[:] = np.nan if et.kind == "float" else 0
                        for rr, lo, hi in final_regions(self.schedule, t):
                            if rr == r:
                                offs = region_offsets(shape, lo, hi)
                                data[offs] = gathered[p][offs]
                        for rr, lo, hi, partial in initial_regions(self.schedule, t):
                            if rr == r:
                                offs = region_offsets(shape, lo, hi)
                                data[offs] = gathered[p][offs]
                    else:
                        data[:] = np.nan if et.kind == "float" else 0
                bufs[p] = Buffer(p, r, et, data)
            args = [Ptr(bufs[n], part_offset(self.schedule, self.operands[n], r)
                        if n in self.operands else 0) if n in bufs else self.args[n][r]
                    for n in self.spec.names]
            m = Machine()
            for pid in program_ids(self.grid):
                pc = ProgramCtx(m, r, pid, self.grid, epoch, "compute")
                for _ in program_gen(self.code, args, pc):
                    pass
            out[r] = {p: b.data for p, b in bufs.items()}
            out[r]["__gathered__"] = gathered
        # collected tensors: each rank's output on its initial placement, assembled
        for p, t in self.operands.items():
            if not self.schedule.is_produced(t) or is_reduced(self.schedule, t):
                continue
            shape = self.schedule.tensors[t].shape
            g = np.full(int(np.prod(shape)), np.nan, dtype=self.spec.ptr[p].np)
            for r, lo, hi, _ in initial_regions(self.schedule, t):
                offs = region_offsets(shape, lo, hi)
                g[offs] = out[r][p][offs]
            out["collected", p] = g
        # reduced tensors: fp32 sum over ranks of the partials
        for p, t in self.operands.items():
            if not self.schedule.is_produced(t) or not is_reduced(self.schedule, t):
                continue
            et = self.spec.ptr[p]
            total = sum(out[r][p].astype(np.float32) for r in range(self.W))
            out["sum", p] = to_etype(total, et)
            # the rounding error of a sum of partials scales with the partials, not with the
            # sum: under cancellation (20 + 20 - 38) every intermediate rounds at 40's ulp
            out["abs", p] = sum(np.abs(out[r][p].astype(np.float32)) for r in range(self.W))
        self._cache[key] = out
        return out

    def compare(self, snapshots, seed, policy, result, complete: bool) -> None:
        for (r, e), got in sorted(snapshots.items()):
            ref = self.expected(e, seed)
            for p, data in got.items():
                if is_consumed_operand(self.schedule, self.operands, p):
                    continue  # checked below, once every rank finished
                if is_produced_operand(self.schedule, self.operands, p) and \
                        ("collected", p) in ref:
                    self._compare_collected(r, e, p, data, ref["collected", p], policy, result,
                                            got)
                    continue
                if is_produced_operand(self.schedule, self.operands, p):
                    exp = ref["sum", p]
                    t = self.operands[p]
                    shape = self.schedule.tensors[t].shape
                    for rr, lo, hi in final_regions(self.schedule, t):
                        if rr != r:
                            continue
                        offs = region_offsets(shape, lo, hi)
                        a, b = data[offs].astype(np.float64), exp[offs].astype(np.float64)
                        scale = ref["abs", p][offs].astype(np.float64)
                        tol = self.tolerance(p) * (scale + 1.0)
                        bad = ~(np.abs(a - b) <= tol)
                        if bad.any():
                            result.mismatches.append(
                                f"rank {r}, launch {e}, {p} ({t}) rows {lo[0]}..{hi[0]}: "
                                f"{int(bad.sum())} element(s) differ from the reduced reference "
                                f"(max error {np.nanmax(np.abs(a - b)):.3g}) [{policy}]")
                    continue
                exp = ref[r][p]
                if self.reordered and data.dtype.kind == "f":
                    self._compare_reordered(r, e, p, data, exp, policy, result)
                    continue
                if not np.array_equal(data, exp, equal_nan=True):
                    diff = ~((data == exp) | (np.isnan(data) & np.isnan(exp))) \
                        if data.dtype.kind == "f" else data != exp
                    first = int(np.argmax(diff))
                    result.mismatches.append(
                        f"rank {r}, launch {e}, {p}: {int(diff.sum())} element(s) differ from "
                        f"the unfused kernel (first: element {first}, {data[first]} vs "
                        f"{exp[first]}) [{policy}]")
        if not complete:
            return
        last = max((e for (_, e) in snapshots), default=0)
        for r in range(self.W):
            got = snapshots.get((r, last))
            if got is None:
                continue
            ref = self.expected(last, seed)
            for p in self.operands:
                if not is_consumed_operand(self.schedule, self.operands, p):
                    continue
                t = self.operands[p]
                shape = self.schedule.tensors[t].shape
                for rr, lo, hi in final_regions(self.schedule, t):
                    if rr != r:
                        continue
                    offs = region_offsets(shape, lo, hi)
                    # rows past a run-time extent's count are padding, not data (extents.py)
                    param_of = {tt: pp for pp, tt in self.operands.items()}
                    for slo, shi in undefined_boxes(self.schedule, t, r,
                                                    lambda name: got[param_of[name]]):
                        offs = np.setdiff1d(offs, region_offsets(shape, slo, shi))
                    a = got[p][offs]
                    b = ref[r]["__gathered__"][p][offs]
                    if not np.array_equal(a, b, equal_nan=True):
                        result.mismatches.append(
                            f"rank {r}, launch {last}, {p} ({t}): "
                            f"{int((a != b).sum())} element(s) of its final region differ from "
                            f"the gathered inputs [{policy}]")

    def _compare_collected(self, r, e, p, data, exp, policy, result, got) -> None:
        """The final regions of a produced, copied tensor on rank ``r`` against the unfused
        outputs of the ranks that computed them: the same bits (within REORDER_ULPS when a
        loop's reductions were reordered). Rows past a run-time extent's count are padding,
        not data (extents.py): skipped, by the counts in ``got`` (rank ``r``'s buffers)."""
        t = self.operands[p]
        shape = self.schedule.tensors[t].shape
        param_of = {tt: pp for pp, tt in self.operands.items()}
        padding = [region_offsets(shape, slo, shi) for slo, shi in
                   undefined_boxes(self.schedule, t, r, lambda name: got[param_of[name]])]
        for rr, lo, hi in final_regions(self.schedule, t):
            if rr != r:
                continue
            offs = region_offsets(shape, lo, hi)
            for pad in padding:
                offs = np.setdiff1d(offs, pad)
            if self.reordered and data.dtype.kind == "f":
                self._compare_reordered(r, e, p, data[offs], exp[offs], policy, result)
                continue
            a, b = data[offs], exp[offs]
            if not np.array_equal(a, b, equal_nan=True):
                bad = ~((a == b) | (np.isnan(a) & np.isnan(b))) if a.dtype.kind == "f" \
                    else a != b
                result.mismatches.append(
                    f"rank {r}, launch {e}, {p} ({t}): {int(bad.sum())} element(s) of its final "
                    f"region {list(lo)}..{list(hi)} differ from the unfused outputs of the "
                    f"ranks that computed them [{policy}]")

    def _compare_reordered(self, r, e, p, data, exp, policy, result) -> None:
        """``data`` within REORDER_ULPS of ``exp`` (module docstring); equal non-finite
        values match."""
        eps = max((_EPS.get(et.name, 0.0) for et in self.spec.ptr.values()), default=0.0)
        a, b = data.astype(np.float64), exp.astype(np.float64)
        finite = np.isfinite(b)
        scale = float(np.abs(b[finite]).max()) if finite.any() else 0.0
        tol = REORDER_ULPS * eps * (np.abs(np.where(finite, b, 0.0)) + scale)
        same = (a == b) | (np.isnan(a) & np.isnan(b))
        bad = ~(same | (np.abs(a - b) <= tol))
        if bad.any():
            first = int(np.argmax(bad.reshape(-1)))
            result.mismatches.append(
                f"rank {r}, launch {e}, {p}: {int(bad.sum())} element(s) differ from the "
                f"unfused kernel by more than {REORDER_ULPS} ulps (reordered reductions; first: "
                f"element {first}, {a.reshape(-1)[first]} vs {b.reshape(-1)[first]}) [{policy}]")

    def tolerance(self, p) -> float:
        et = self.spec.ptr[p]
        eps = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -23}.get(et.name, 0.0)
        return eps * max(1, self.W - 1) * 2
