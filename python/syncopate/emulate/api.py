"""``syncopate.emulate``: run a fused module for W emulated ranks on numpy, under several
interleaving policies and several launches, check it for races and compare every rank's
outputs with the unfused kernel emulated by the same interpreter.

Where the module comes from: the pass pipeline (``syncopate_mlir/pipeline.py``) run through
``resolve-chunks``, the last backend-independent stage -- tt ops plus chunk-level syncopate
waits/signals, remaps, peer pointers and the comm region.  The ``lower-*`` passes only turn
those into inline PTX and atomics whose semantics the emulator implements directly
(``comm.py``), so what is checked is exactly what the backends lower.

The reference, per launch, uses the *collected* inputs: for a tensor the schedule gathers
(all-gather, ring pass, all-to-all), the global tensor assembled from what every rank staged,
placed where the schedule says each rank ends up holding it; for a tensor the kernel produces
and the schedule reduces (reduce-scatter, all-reduce), each rank's unfused partial, summed in
fp32 over ranks on the regions each rank ends up owning.  Outputs that no chunk moves must
match the reference bit for bit (same interpreter, same tiles); reduced regions within a
rounding bound (the fused sum rounds after each added partial when more than two ranks add).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import CompileError, EmulationError
from .checker import Checker, Race
from .comm import Faults, Launch, World, program_gen, region_offsets
from .interpreter import ModuleCode, ProgramCtx, WaitCond, WaitFlag
from .memory import AddressMap, Buffer, Ptr, etype_named, etype_of, to_etype
from .scheduler import Co, Scheduler, parse_policy

DEFAULT_POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:-1", "random:1",
                    "random:2", "random:3")


class PerRank(list):
    """An argument with one value per rank (``PerRank([a0, a1])``); a plain value is the same
    on every rank (tensors are copied per rank)."""


@dataclass
class EmulationResult:
    """What an emulation found.  ``ok`` is False when the checker reported a race, or an
    output differed from the reference."""

    world_size: int
    backend: str
    policies: list[str]
    launches: int
    races: list[Race] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)
    #: policy -> rank -> parameter -> the buffer after that rank's last launch
    outputs: dict = field(default_factory=dict)
    #: policy -> {"seconds", "steps", "coroutines", "transfers", ...}
    stats: dict = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.races and not self.mismatches

    def races_of(self, kind: str) -> list[Race]:
        return [r for r in self.races if r.kind == kind]

    def summary(self, limit: int = 20) -> str:
        lines = [f"emulated {self.world_size} ranks ({self.backend}), {self.launches} launches "
                 f"x {len(self.policies)} policies in {self.seconds:.2f} s: "
                 + ("clean" if self.ok else f"{len(self.races)} race(s), "
                    f"{len(self.mismatches)} mismatch(es)")]
        for r in self.races[:limit]:
            lines.append(f"  {r}")
        for m in self.mismatches[:limit]:
            lines.append(f"  mismatch: {m}")
        more = len(self.races) + len(self.mismatches) - 2 * limit
        if more > 0:
            lines.append(f"  ... and more ({len(self.races)} races, {len(self.mismatches)} "
                         f"mismatches in all)")
        return "\n".join(lines)

    def raise_for_problems(self) -> "EmulationResult":
        if not self.ok:
            raise EmulationError(self.summary(), result=self)
        return self


# ------------------------------------------------------------------------------ modules

class _StopAfterTtir(Exception):
    pass


def kernel_ttir(kernel, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None,
                attrs=None, options: Mapping | None = None, target=("cuda", 90)) -> str:
    """The TTIR of a ``@triton.jit`` kernel on this CPU: Triton's frontend and ``make_ttir``
    only (a stage hook stops the compile there, nothing is cached)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    box: dict = {}

    def hook(backend, stages, options_, language, capability):
        make_ttir = stages["ttir"]

        def stage(src, metadata):
            box["ttir"] = make_ttir(src, metadata).str()
            raise _StopAfterTtir()
        stages["ttir"] = stage

    sig = dict(signature)
    for n in constexprs or {}:
        sig.setdefault(n, "constexpr")
    if isinstance(target, tuple):
        target = GPUTarget(target[0], target[1], 32)
    with triton.knobs.compilation.scope(), triton.knobs.runtime.scope():
        triton.knobs.compilation.always_compile = True
        triton.knobs.runtime.add_stages_inspection_hook = hook
        try:
            triton.compile(ASTSource(kernel, sig, dict(constexprs or {}), attrs),
                           target=target, options=dict(options or {}))
        except _StopAfterTtir:
            pass
    if "ttir" not in box:
        raise CompileError(f"could not get the TTIR of {kernel.__name__}")
    return box["ttir"]


def fuse_module(kernel, *, signature, constexprs=None, attrs=None, schedule, operand,
                backend: str = "sm", comm_programs: int | None = None, reduce: str = "comm",
                options=None, withhold_chunks=(), lowering: str = "auto"):
    """``(fused module after resolve-chunks, local TTIR text)`` with the validation of
    :func:`syncopate.compile` (the same typed refusals)."""
    from syncopate.compiler import fuse_request
    from syncopate_mlir.pipeline import run_pipeline_until

    constexprs = dict(constexprs or {})
    # the compiler's checks; withheld chunks are emulated on every backend
    request = fuse_request(kernel, signature=dict(signature), constexprs=constexprs,
                           schedule=schedule, operand=operand, backend=backend,
                           comm_programs=comm_programs, reduce=reduce,
                           withhold_chunks=withhold_chunks, keep_ir=False, check_withhold=False,
                           lowering=lowering)
    ttir = kernel_ttir(kernel, signature, constexprs, attrs, options)
    module, _ = run_pipeline_until(ttir, request, "resolve-chunks")
    return module, ttir


def _local_module(local):
    if isinstance(local, str):
        from syncopate_mlir.bridge import ttir_to_xdsl
        from syncopate_mlir.context import make_context
        return ttir_to_xdsl(local, make_context())
    return local


# ------------------------------------------------------------------------------ arguments

def _to_numpy(v):
    try:
        import torch
        if isinstance(v, torch.Tensor):
            return v.detach().cpu().float().numpy() if v.is_floating_point() else v.detach().cpu().numpy()
    except ImportError:  # pragma: no cover - torch is a prerequisite
        pass
    return np.asarray(v)


class _Spec:
    """The kernel's user parameters: names, which are pointers (with element types)."""

    def __init__(self, code, names: Sequence[str]):
        self.names = list(names)
        self.types = dict(zip(code.arg_names, code.arg_types))
        self.ptr = {}
        for n in self.names:
            t = self.types.get(n)
            if t is None:
                raise EmulationError(f"the kernel has no parameter {n!r} "
                                     f"(it has {', '.join(code.arg_names)})")
            if "tt.ptr" in str(t):
                self.ptr[n] = etype_of(t.pointee_type)


# ------------------------------------------------------------------------------ emulation

class Emulation:
    """A fused module prepared for emulation with one set of arguments."""

    def __init__(self, fused_module, local, *, grid, args, fine: bool = False):
        from syncopate_mlir.passes.abi_info import (
            backend_of,
            comm_programs_of,
            get_state,
            operands_of,
            withheld_of,
        )
        from syncopate_mlir.passes.schedule_attr import schedule_of

        self.module = fused_module
        self.schedule = schedule_of(fused_module)
        self.backend = backend_of(fused_module)
        self.comm = comm_programs_of(fused_module) if self.backend != "ce" else 0
        from syncopate_mlir.passes.abi_info import table_words
        #: the chunk table the kernel reads through ``syn_table`` (built from the schedule;
        #: the table lowering's loops read their lists and records from it)
        self.table = table_words(fused_module)
        self.state = get_state(fused_module)
        self.operands = operands_of(fused_module)           # param -> tensor
        self.withheld = withheld_of(fused_module)
        from syncopate_mlir.passes.abi_info import reduce_of
        self.reduce = reduce_of(fused_module)
        self.W = self.schedule.world_size
        self.fine = fine
        self.code = ModuleCode(fused_module, fine=fine).kernel
        self.ref_code = ModuleCode(_local_module(local)).kernel
        self.grid = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
        params_attr = fused_module.attributes.get("syncopate.params")
        names = [p.data for p in params_attr.data] if params_attr is not None else \
            [n for n in self.ref_code.arg_names]
        self.spec = _Spec(self.ref_code, names)
        self.args = self._normalise_args(args)
        self._inputs: dict = {}
        self._ref: dict = {}

    # ---------------------------------------------------------------- arguments / inputs
    def _normalise_args(self, args) -> dict:
        names = self.spec.names
        if isinstance(args, Mapping):
            unknown = set(args) - set(names)
            if unknown:
                raise EmulationError(f"unknown argument(s) {sorted(unknown)}; the kernel takes "
                                     f"{', '.join(names)}")
            missing = [n for n in names if n not in args]
            if missing:
                raise EmulationError(f"missing argument(s) {', '.join(missing)}")
            vals = dict(args)
        else:
            args = list(args)
            if len(args) != len(names):
                raise EmulationError(f"{len(args)} arguments for the {len(names)} non-constexpr "
                                     f"parameters {', '.join(names)}")
            vals = dict(zip(names, args))
        out = {}
        for n, v in vals.items():
            per = list(v) if isinstance(v, PerRank) else [v] * self.W
            if len(per) != self.W:
                raise EmulationError(f"argument {n}: {len(per)} per-rank values for "
                                     f"{self.W} ranks")
            if n in self.spec.ptr:
                et = self.spec.ptr[n]
                out[n] = [to_etype(_to_numpy(x).reshape(-1), et) for x in per]
                t = self.operands.get(n)
                if t is not None:
                    need = int(np.prod(self.schedule.tensors[t].shape))
                    for r, a in enumerate(out[n]):
                        if a.size < need:
                            raise EmulationError(
                                f"argument {n} on rank {r} has {a.size} elements; the schedule's "
                                f"tensor {t} needs {need} (shape {self.schedule.tensors[t].shape})")
            else:
                out[n] = [int(x) if not isinstance(x, float) else x for x in per]
        return out

    def inputs(self, rank: int, epoch: int, seed: int) -> dict:
        """Pointer arguments of ``rank`` for launch ``epoch``: the given ones for launch 1,
        fresh random data (rounded to the element type) afterwards."""
        key = (rank, epoch, seed)
        got = self._inputs.get(key)
        if got is None:
            got = {}
            for i, n in enumerate(self.spec.ptr):
                base = self.args[n][rank]
                et = self.spec.ptr[n]
                if epoch == 1 or et.kind != "float":
                    got[n] = base.copy()
                else:
                    rng = np.random.default_rng([seed, epoch, rank, i])
                    got[n] = to_etype(rng.standard_normal(base.size).astype(np.float32), et)
            self._inputs[key] = got
        return got

    def _consumer(self, param) -> bool:
        t = self.operands.get(param)
        return t is not None and not self.schedule.is_produced(t)

    def _produced(self, param) -> bool:
        t = self.operands.get(param)
        return t is not None and self.schedule.is_produced(t)

    # ---------------------------------------------------------------- reference
    def reference(self, epoch: int, seed: int) -> dict:
        """rank -> param -> expected buffer (and ``(param, 'final')`` for reduced tensors)."""
        key = (epoch, seed)
        if key in self._ref:
            return self._ref[key]
        gathered = {}
        for p, t in self.operands.items():
            if self.schedule.is_produced(t):
                continue
            shape = self.schedule.tensors[t].shape
            size = int(np.prod(shape))
            g = np.full(size, np.nan, dtype=self.spec.ptr[p].np) if self.spec.ptr[p].kind == "float" \
                else np.zeros(size, dtype=self.spec.ptr[p].np)
            for r, lo, hi, partial in _initial(self.schedule, t):
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
                        for rr, lo, hi in _final(self.schedule, t):
                            if rr == r:
                                offs = region_offsets(shape, lo, hi)
                                data[offs] = gathered[p][offs]
                        for rr, lo, hi, partial in _initial(self.schedule, t):
                            if rr == r:
                                offs = region_offsets(shape, lo, hi)
                                data[offs] = gathered[p][offs]
                    else:
                        data[:] = np.nan if et.kind == "float" else 0
                bufs[p] = Buffer(p, r, et, data)
            args = [Ptr(bufs[n], 0) if n in bufs else self.args[n][r] for n in self.spec.names]
            from .interpreter import Machine
            m = Machine()
            for pid in _pids(self.grid):
                pc = ProgramCtx(m, r, pid, self.grid, epoch, "compute")
                for _ in program_gen(self.ref_code, args, pc):
                    pass
            out[r] = {p: b.data for p, b in bufs.items()}
            out[r]["__gathered__"] = gathered
        # reduced tensors: fp32 sum over ranks of the partials
        for p, t in self.operands.items():
            if not self.schedule.is_produced(t):
                continue
            et = self.spec.ptr[p]
            total = sum(out[r][p].astype(np.float32) for r in range(self.W))
            out["sum", p] = to_etype(total, et)
            # the rounding error of a sum of partials scales with the partials, not with the
            # sum: under cancellation (20 + 20 - 38) every intermediate rounds at 40's ulp
            out["abs", p] = sum(np.abs(out[r][p].astype(np.float32)) for r in range(self.W))
        self._ref[key] = out
        return out

    # ---------------------------------------------------------------- one policy
    def run_policy(self, policy: str, launches: int, seed: int, faults: Faults | None,
                   result: EmulationResult) -> None:
        name, arg = parse_policy(policy)
        if name == "behind" and arg is not None and arg < 0:
            policy = f"behind:{self.W + arg}"
        t0 = time.perf_counter()
        remote = self._remote_readers()
        checker = Checker(self.schedule, self.W, remote)
        checker.policy = policy
        world = World(self.schedule, self.backend, self.comm, self.state, checker, faults,
                      self.fine, self.schedule)
        world.withheld = self.withheld
        world.param_of_tensor = {t: p for p, t in self.operands.items()}
        amap = AddressMap()
        world.addr_map = amap
        flag_et = etype_named("i64" if self.backend == "nvshmem" else "i32")
        from syncopate.abi import FlagLayout
        lay = FlagLayout(self.schedule.num_chunks, self.W)
        for r in range(self.W):
            f = Buffer("syn_flags", r, flag_et, np.zeros(lay.words, dtype=flag_et.np), is_flags=True)
            world.flags.append(f)
            amap.add(f)
            for p, et in self.spec.ptr.items():
                data = self.args[p][r].copy()
                b = Buffer(p, r, et, data)
                t = self.operands.get(p)
                if t is not None:
                    b.shape = self.schedule.tensors[t].shape
                    b.track(t)
                    if et.kind == "float":  # poison what the schedule has not delivered yet
                        b.data[:] = np.nan
                world.bufs[r][p] = b
                amap.add(b)
            for t in {c.tensor for c in self.schedule.chunks if c.reduce == "sum"} if \
                    self.backend == "ce" else ():
                p = world.param_of_tensor[t]
                shape = self.schedule.tensors[t].shape
                s = Buffer(f"{p}#slots", r, self.spec.ptr[p], np.full(
                    self.W * int(np.prod(shape)), np.nan, dtype=self.spec.ptr[p].np),
                    shape=(self.W,) + tuple(shape))
                s.track(f"{t}#slots")
                world.slots[r][t] = s
                amap.add(s)
        peers = self._peer_tables(world, amap)
        sched = Scheduler(policy)
        world.sched = sched
        ce_plans = [world.ce_plan(r) for r in range(self.W)] if self.backend == "ce" else None
        snapshots: dict = {}
        for r in range(self.W):
            sched.spawn(Co(self._host(r, world, checker, sched, launches, seed, peers[r],
                                      ce_plans[r] if ce_plans else None, snapshots, policy),
                           r, "host", -1, f"rank {r} host"))
        blocked = sched.run()
        if blocked:
            # the flag waits are the cause; hosts waiting for their launch only follow from them
            roots = [c for c in blocked if isinstance(c.waiting, WaitFlag)] or blocked
            checker.deadlock([(c.rank, c.name, c.epoch, c.waiting) for c in roots])
        result.races.extend(checker.races)
        self._compare(snapshots, seed, policy, result, complete=not blocked)
        result.outputs[policy] = {r: {p: b.data.copy() for p, b in world.bufs[r].items()}
                                  for r in range(self.W)}
        result.stats[policy] = dict(seconds=round(time.perf_counter() - t0, 3),
                                    steps=sched.stats.steps, coroutines=sched.stats.coroutines,
                                    deadlocked=bool(blocked), **world.stats)

    def _remote_readers(self) -> dict:
        """(rank, tensor) -> mask of the elements a peer reads from that rank each launch."""
        out: dict = {}
        for c in self.schedule.chunks:
            if c.src == c.dst:
                continue
            if self.backend == "ce":
                remote = c.mode == "pull" and c.reduce == "none"
            else:
                remote = not (c.mode == "push" and c.reduce == "none")
            if not remote:
                continue
            shape = self.schedule.tensors[c.tensor].shape
            m = out.setdefault((c.src, c.tensor), np.zeros(int(np.prod(shape)), dtype=bool))
            m[region_offsets(shape, c.lo, c.hi)] = True
        return out

    def _peer_tables(self, world, amap) -> list:
        """``syn_peers`` ``[NBUF, W]`` of fake addresses per rank (rows: flags, operands,
        epilogue slots), for kernels that resolve peers through the table."""
        rows = [[world.flags[q].addr for q in range(self.W)]]
        for p in self.operands:
            rows.append([world.bufs[q][p].addr for q in range(self.W)])
        for t in self.state.get("epilogue_slots", []):
            rows.append([world.slots[q][t].addr if t in world.slots[q] else 0
                         for q in range(self.W)])
        table = np.array(rows, dtype=np.int64).reshape(-1)
        out = []
        for r in range(self.W):
            b = Buffer("syn_peers", r, etype_named("i64"), table.copy())
            amap.add(b)
            out.append(b)
        return out

    def _kernel_args(self, world, r, e, peers) -> list:
        vals = {}
        for n in self.spec.names:
            vals[n] = Ptr(world.bufs[r][n], 0) if n in self.spec.ptr else self.args[n][r]
        diag = Buffer("syn_diag", r, etype_named("i32"), np.zeros(16, dtype=np.int32))
        table = Buffer("syn_table", r, etype_named("i32"), np.array(self.table, dtype=np.int32))
        vals.update(syn_flags=Ptr(world.flags[r], 0), syn_peers=Ptr(peers, 0),
                    syn_table=Ptr(table, 0), syn_diag=Ptr(diag, 0), syn_rank=r, syn_epoch=e,
                    syn_timeout_ns=0)
        out = []
        for n in self.code.arg_names:
            if n not in vals:
                raise EmulationError(f"the fused kernel has a parameter {n!r} the emulator "
                                     f"cannot supply")
            out.append(vals[n])
        return out

    def _host(self, r, world, checker, sched, launches, seed, peers, ce_plan, snapshots, policy):
        """Rank ``r``'s host: per launch, stage fresh inputs (stream order: after the previous
        launch), launch, wait; the ``ce`` protocol's host side included."""
        lay = world.layout
        prev = None
        for e in range(1, launches + 1):
            if prev is not None:
                yield WaitCond(prev.done, f"rank {r} launch {e - 1} to complete")
                if ce_plan is not None:
                    yield from world.ce_reduce(r, e - 1, ce_plan) if ce_plan.reduce_in and \
                        self.reduce != "epilogue" else iter(())
                checker.launch_done(r, e - 1)
                snapshots[r, e - 1] = {p: b.data.copy() for p, b in world.bufs[r].items()}
                if ce_plan is not None and ce_plan.reads_of_me and \
                        not world.faults.skip_consumed_wait:
                    w = WaitFlag(world.flags[r], lay.consumed, (e - 1) * ce_plan.reads_of_me,
                                 "consumed", None, "<ce host: before staging>")
                    if not w.ready():
                        yield w
            # stage launch e's inputs
            data = self.inputs(r, e, seed)
            for p, b in world.bufs[r].items():
                if self._produced(p):
                    continue
                if self._consumer(p):
                    t = self.operands[p]
                    for rr, lo, hi, partial in _initial(self.schedule, t):
                        if rr == r and not partial:
                            offs = region_offsets(b.shape, lo, hi)
                            checker.write(f"rank {r} host (staging)", r, b, offs, e,
                                          "<host staging>")
                            b.data[offs] = data[p][offs]
                else:
                    b.data[:] = data[p]
            yield  # staging done: others may run
            launch = Launch(r, e)
            args = self._kernel_args(world, r, e, peers)
            if ce_plan is not None:
                launch.stream = sched.spawn(Co(world.ce_stream(r, e, ce_plan, launch), r,
                                               "stream", -1, f"rank {r} copy-engine stream", e))
                yield WaitCond(lambda launch=launch: launch.entered,
                               f"rank {r} ENTRY of every rank for launch {e}")
            g0 = self.grid[0] + (self.comm if self.backend != "ce" else 0)
            for pid in _pids((g0,) + self.grid[1:]):
                role = "comm" if self.backend != "ce" and pid[0] < self.comm else "compute"
                pc = ProgramCtx(world, r, pid, (g0,) + self.grid[1:], e, role)
                launch.programs.append(sched.spawn(
                    Co(program_gen(self.code, args, pc), r, role, pid[0] + 1000 * pid[1],
                       pc.name + (f" ({pid[1]},{pid[2]})" if pid[1] or pid[2] else ""), e)))
            prev = launch
        yield WaitCond(prev.done, f"rank {r} launch {launches} to complete")
        if ce_plan is not None and ce_plan.reduce_in and self.reduce != "epilogue":
            yield from world.ce_reduce(r, launches, ce_plan)
        checker.launch_done(r, launches)
        snapshots[r, launches] = {p: b.data.copy() for p, b in world.bufs[r].items()}

    # ---------------------------------------------------------------- comparison
    def _compare(self, snapshots, seed, policy, result, complete: bool) -> None:
        for (r, e), got in sorted(snapshots.items()):
            ref = self.reference(e, seed)
            for p, data in got.items():
                if self._consumer(p):
                    continue  # checked below, once every rank finished
                if self._produced(p):
                    exp = ref["sum", p]
                    t = self.operands[p]
                    shape = self.schedule.tensors[t].shape
                    for rr, lo, hi in _final(self.schedule, t):
                        if rr != r:
                            continue
                        offs = region_offsets(shape, lo, hi)
                        a, b = data[offs].astype(np.float64), exp[offs].astype(np.float64)
                        scale = ref["abs", p][offs].astype(np.float64)
                        tol = self._tolerance(p) * (scale + 1.0)
                        bad = ~(np.abs(a - b) <= tol)
                        if bad.any():
                            result.mismatches.append(
                                f"rank {r}, launch {e}, {p} ({t}) rows {lo[0]}..{hi[0]}: "
                                f"{int(bad.sum())} element(s) differ from the reduced reference "
                                f"(max error {np.nanmax(np.abs(a - b)):.3g}) [{policy}]")
                    continue
                exp = ref[r][p]
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
            ref = self.reference(last, seed)
            for p in self.operands:
                if not self._consumer(p):
                    continue
                t = self.operands[p]
                shape = self.schedule.tensors[t].shape
                for rr, lo, hi in _final(self.schedule, t):
                    if rr != r:
                        continue
                    offs = region_offsets(shape, lo, hi)
                    a = got[p][offs]
                    b = ref[r]["__gathered__"][p][offs]
                    if not np.array_equal(a, b, equal_nan=True):
                        result.mismatches.append(
                            f"rank {r}, launch {last}, {p} ({t}): "
                            f"{int((a != b).sum())} element(s) of its final region differ from "
                            f"the gathered inputs [{policy}]")

    def _tolerance(self, p) -> float:
        et = self.spec.ptr[p]
        eps = {"bf16": 2.0 ** -8, "f16": 2.0 ** -11, "f32": 2.0 ** -23}.get(et.name, 0.0)
        return eps * max(1, self.W - 1) * 2

    # ---------------------------------------------------------------- all policies
    def run(self, policies: Sequence[str] = DEFAULT_POLICIES, launches: int = 2, seed: int = 0,
            faults: Faults | None = None) -> EmulationResult:
        if launches < 1:
            raise EmulationError("launches must be >= 1")
        policies = list(policies)
        if not policies:
            raise EmulationError("give at least one policy")
        for p in policies:
            parse_policy(p)
        res = EmulationResult(self.W, self.backend, policies, launches)
        t0 = time.perf_counter()
        for p in policies:
            self.run_policy(p, launches, seed, faults, res)
        res.seconds = time.perf_counter() - t0
        return res


def _pids(grid):
    g = tuple(grid) + (1, 1, 1)
    for z in range(g[2]):
        for y in range(g[1]):
            for x in range(g[0]):
                yield (x, y, z)


# ------------------------------------------------------------------------------ public API

def emulate(kernel, *, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
            schedule, operand, grid, args, backend: str = "sm", comm_programs: int | None = 2,
            reduce: str = "comm", attrs=None, options=None,
            policies: Sequence[str] = DEFAULT_POLICIES, launches: int = 2, seed: int = 0,
            fine: bool = False, check: bool = True, faults: Faults | None = None,
            withhold_chunks=(), lowering: str = "auto") -> EmulationResult:
    """Fuse ``kernel`` with ``schedule`` (the pipeline through ``resolve-chunks``), emulate it
    for the schedule's world size on numpy under every policy for ``launches`` launches, and
    compare each rank's outputs with the unfused kernel emulated on the collected inputs.

    ``args`` maps the kernel's non-constexpr parameters to values (or lists them in order):
    numpy arrays or torch CPU tensors for pointers (a communicated operand must hold the whole
    schedule tensor), ints for scalars; wrap a value in :class:`PerRank` to give each rank its
    own.  ``grid`` is the grid the kernel was written for.  Launch 1 uses ``args``; later
    launches stage fresh random inputs (seeded by ``seed``).  ``check=True`` raises
    :class:`~syncopate.errors.EmulationError` (carrying the result) on any race or mismatch.
    A combination the compiler refuses raises its :class:`~syncopate.errors.CompileError`.
    ``lowering`` is the compiler's (``"table"`` emulates the chunk-table loops)."""
    module, ttir = fuse_module(kernel, signature=signature, constexprs=constexprs, attrs=attrs,
                               schedule=schedule, operand=operand, backend=backend,
                               comm_programs=comm_programs, reduce=reduce, options=options,
                               withhold_chunks=withhold_chunks, lowering=lowering)
    res = Emulation(module, ttir, grid=grid, args=args, fine=fine).run(policies, launches, seed,
                                                                        faults)
    return res.raise_for_problems() if check else res


def emulate_module(fused_module, local, *, grid, args, policies=DEFAULT_POLICIES,
                   launches: int = 2, seed: int = 0, fine: bool = False, check: bool = False,
                   faults: Faults | None = None) -> EmulationResult:
    """Emulate an already fused module (after ``resolve-chunks``; e.g. a mutated one) against
    ``local`` (the unfused kernel's TTIR text or xDSL module)."""
    res = Emulation(fused_module, local, grid=grid, args=args, fine=fine).run(
        policies, launches, seed, faults)
    return res.raise_for_problems() if check else res


def _initial(sched, tensor):
    """``(rank, lo, hi, partial)`` of each initial placement of ``tensor``."""
    return [(p.rank, p.region.offsets, p.region.stops, p.partial)
            for p in sched.tensors[tensor].initial]


def _final(sched, tensor):
    """``(rank, lo, hi)`` of each final placement of ``tensor``."""
    return [(p.rank, p.region.offsets, p.region.stops) for p in sched.tensors[tensor].final]
