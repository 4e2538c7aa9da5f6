"""``syncopate.emulate``: run a fused module for W emulated ranks on numpy, under several
interleaving policies and several launches, check it for races and compare every rank's
outputs with the unfused kernel emulated by the same interpreter.

This module is the emulator's interface: :func:`emulate`, :func:`emulate_module` and
:class:`Emulation`, which builds one emulated world per policy (flags, symmetric buffers, peer
tables, the ``ce`` protocol's slots) and runs every rank's host (staging, launches, waits) and
programs under the policy's scheduler.  The parts it puts together live beside it: where the
fused and the reference modules come from (``modules.py``: the pipeline through
``resolve-chunks``), the arguments per rank and launch (``arguments.py``), the expected
outputs and the comparison with them (``reference.py``), what a run reports (``result.py``).
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np

from syncopate_mlir.dialects.syncopate import request_of, schedule_of, state_of
from syncopate_mlir.dialects.tt import PointerType
from syncopate_mlir.passes.abi_info import (abi_args, comm_programs_of, lowering_of, operands_of,
                                            table_words)
from syncopate_mlir.passes.ir_utils import kernel_func
from syncopate_mlir.pipeline import fuse_pipeline
from .. import abi, backends, chunk_table, tiling
from ..errors import EmulationError
from ..schedule.ce_plan import build_ce_plan
from .arguments import (
    LaunchInputs,
    ParamSpec,
    is_consumed_operand,
    is_produced_operand,
    normalise_args,
)
from .checker import Checker
from .comm import Faults, Launch, World, region_offsets
from .interpreter import ModuleCode, ProgramCtx, WaitCond, WaitFlag
from .memory import AddressMap, Buffer, Ptr, etype_named
from .modules import fuse_module, local_module
from .reference import Reference, initial_regions, program_ids
from .result import EmulationResult
from .scheduler import Co, Scheduler, parse_policy

__all__ = ["DEFAULT_POLICIES", "Emulation", "EmulationResult", "emulate", "emulate_module"]

DEFAULT_POLICIES = ("in-order", "reverse", "late", "behind:0", "behind:-1", "random:1",
                    "random:2", "random:3")


class Emulation:
    """A fused module prepared for emulation with one set of arguments."""

    def __init__(self, fused_module, local, *, grid, args, fine: bool = False):
        fused_module = _with_epoch_load(fused_module)
        request = request_of(fused_module)
        self.schedule = schedule_of(fused_module)
        self.backend = request.backend
        #: the backend's spec: comm programs or the host's side stream, flag type
        self.be = backends.get(self.backend, EmulationError)
        self.comm = comm_programs_of(fused_module) if self.be.has_comm_programs else 0
        #: ``"table"`` or ``"unrolled"``: the form the lowering gives the chunk-level code
        self.lowering = lowering_of(fused_module)
        #: the chunk table the kernel reads through ``syn_table`` (built from the schedule;
        #: the table lowering's loops read their lists and records from it)
        self.table = table_words(fused_module)
        #: what the passes recorded (``KernelState``)
        self.state = state_of(fused_module)
        #: the kernel advances its own epoch word (``self_advance=True``): no host advance
        self.self_advance = self.state.self_advanced
        self.operands = operands_of(fused_module)           # param -> tensor
        self.withheld = frozenset(request.withhold)
        self.reduce = request.reduce
        self.W = self.schedule.world_size
        self.code = ModuleCode(fused_module, fine=fine).kernel
        self.ref_code = ModuleCode(local_module(local)).kernel
        self.grid = tuple(int(g) for g in (tuple(grid) + (1, 1, 1))[:3])
        names = list(request.params) or list(self.ref_code.arg_names)
        self.spec = ParamSpec(self.ref_code, names)
        self.args = normalise_args(self.spec, args, self.schedule, self.operands)
        self._check_launch()
        #: ``inputs(rank, epoch, seed)``: the pointer arguments of one rank's launch
        self.inputs = LaunchInputs(self.spec, self.args)
        self._reference = Reference(schedule=self.schedule, operands=self.operands,
                                    spec=self.spec, args=self.args, inputs=self.inputs,
                                    code=self.ref_code, grid=self.grid,
                                    reordered=self.state.reordered)

    def _check_launch(self) -> None:
        """Refuse, as the runtime does, a launch that breaks what the compiler baked into the
        kernel (:func:`syncopate.abi.check_launch`: required argument values, upper bounds,
        grid axes; :func:`syncopate.tiling.check_stores`: no element of a produced tensor
        stored twice; :func:`syncopate.tiling.check_remaps`: the tile remap renumbers the
        launch's tiles): emulating it would only report the races it causes."""
        scalars = [n for n in self.spec.names if n not in self.spec.ptr]
        for r in range(self.W):
            values = {n: self.args[n][r] for n in scalars}
            where = f"rank {r}: " if self.W > 1 else ""
            abi.check_launch(values, dict(self.state.requirements),
                             dict(self.state.upper_bounds), self.grid, self.state.grid_axes,
                             where=where)
            tiling.check_stores(self.state.stores, self.grid, values, where)
            tiling.check_remaps(self.state.remap_checks, self.grid, values, where)

    # ---------------------------------------------------------------- one policy
    def run_policy(self, policy: str, launches: int, seed: int, faults: Faults | None,
                   result: EmulationResult) -> None:
        name, arg = parse_policy(policy)
        if name == "behind" and arg < 0:
            policy = f"behind:{self.W + arg}"
        t0 = time.perf_counter()
        checker = Checker(self.schedule, self.W, self._remote_readers())
        checker.policy = policy
        world = World(self.schedule, self.backend, self.comm, self.state, checker, faults)
        world.withheld = self.withheld
        if self.lowering == "table":  # lower-sm's table drain reads its target from the table
            reads = chunk_table.layout_of(self.schedule).reads
            world.reads = {r: int(self.table[reads + r]) for r in range(self.W)}
        world.param_of_tensor = {t: p for p, t in self.operands.items()}
        amap = world.addr_map = AddressMap()
        flag_et = etype_named(self.be.flag_type)
        for r in range(self.W):
            f = Buffer("syn_flags", r, flag_et, np.zeros(world.layout.words, dtype=flag_et.np),
                       is_flags=True)
            world.flags.append(f)
            amap.add(f)
            for p, et in self.spec.ptr.items():
                b = Buffer(p, r, et, self.args[p][r].copy())
                t = self.operands.get(p)
                if t is not None:
                    b.shape = self.schedule.tensors[t].shape
                    b.track(t)
                    if et.kind == "float":  # poison what the schedule has not delivered yet
                        b.data[:] = np.nan
                world.bufs[r][p] = b
                amap.add(b)
            for t in {c.tensor for c in self.schedule.chunks if c.reduce == "sum"} if \
                    self.be.side_stream else ():
                p = world.param_of_tensor[t]
                shape = self.schedule.tensors[t].shape
                s = Buffer(f"{p}#slots", r, self.spec.ptr[p], np.full(
                    self.W * int(np.prod(shape)), np.nan, dtype=self.spec.ptr[p].np),
                    shape=(self.W,) + tuple(shape))
                s.track(f"{t}#slots")
                world.slots[r][t] = s
                amap.add(s)
        peers = self._peer_tables(world, amap)
        #: each rank's device epoch word (ABI 3), advanced by the host before each launch --
        #: in stream order, as the runtime's advance kernel is
        world.epoch_words = [Buffer("syn_epoch", r, etype_named("i32"),
                                    np.zeros(4, dtype=np.int32)) for r in range(self.W)]
        world.epoch_mirrors = []
        if self.self_advance:  # the kernel stores each epoch into a mirror it finds in word[2:4]
            for r in range(self.W):
                m = Buffer("syn_epoch_mirror", r, etype_named("i32"), np.zeros(1, np.int32))
                amap.add(m)
                world.epoch_words[r].data[2] = np.int64(m.addr & 0xFFFFFFFF).astype(np.int32)
                world.epoch_words[r].data[3] = np.int32(m.addr >> 32)
                world.epoch_mirrors.append(m)
        sched = Scheduler(policy)
        ce_plans = [build_ce_plan(self.schedule, r, self.state.produced)
                    for r in range(self.W)] if self.be.side_stream else None
        snapshots: dict = {}
        for r in range(self.W):
            sched.spawn(Co(self._host(r, world, sched, launches, seed, peers[r],
                                      ce_plans[r] if ce_plans else None, snapshots),
                           r, "host", -1, f"rank {r} host"))
        blocked = sched.run()
        if blocked:
            # the flag waits are the cause; hosts waiting for their launch only follow from them
            roots = [c for c in blocked if isinstance(c.waiting, WaitFlag)] or blocked
            checker.deadlock([(c.rank, c.name, c.epoch, c.waiting) for c in roots])
        result.races.extend(checker.races)
        if self.self_advance and not blocked:
            self._check_self_advance(world, launches, policy, result)
        self._reference.compare(snapshots, seed, policy, result, complete=not blocked,
                                fadd=lambda r, p, e: world.bufs[r][p].fadd.get(e))
        result.outputs[policy] = {r: {p: b.data.copy() for p, b in world.bufs[r].items()}
                                  for r in range(self.W)}
        result.stats[policy] = dict(seconds=round(time.perf_counter() - t0, 3),
                                    steps=sched.steps, coroutines=sched.coroutines,
                                    deadlocked=bool(blocked), **world.stats)

    def _check_self_advance(self, world, launches, policy, result) -> None:
        """A self-advancing kernel leaves, after ``launches`` launches, the epoch word at
        ``launches``, its done-counter at 0 and the mirror at ``launches`` on every rank."""
        for r in range(self.W):
            w, m = world.epoch_words[r].data, world.epoch_mirrors[r].data
            if (int(w[0]), int(w[1]), int(m[0])) != (launches, 0, launches):
                result.mismatches.append(
                    f"[{policy}] rank {r}: after {launches} launches the self-advancing epoch "
                    f"word is {int(w[0])} (counter {int(w[1])}), its mirror {int(m[0])}; "
                    f"expected {launches} (0), {launches}")

    def _remote_readers(self) -> dict:
        """(rank, tensor) -> mask of the elements a peer reads from that rank each launch."""
        out: dict = {}
        for c in self.schedule.chunks:
            if c.src == c.dst:
                continue
            if self.be.side_stream:
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
        for t in self.state.epilogue_slots:
            rows.append([world.slots[q][t].addr if t in world.slots[q] else 0
                         for q in range(self.W)])
        table = np.array(rows, dtype=np.int64).reshape(-1)
        out = [Buffer("syn_peers", r, etype_named("i64"), table.copy()) for r in range(self.W)]
        for b in out:
            amap.add(b)
        return out

    def _kernel_args(self, world, r, peers) -> list:
        vals = {n: Ptr(world.bufs[r][n], 0) if n in self.spec.ptr else self.args[n][r]
                for n in self.spec.names}
        diag = Buffer("syn_diag", r, etype_named("i32"), np.zeros(16, dtype=np.int32))
        table = Buffer("syn_table", r, etype_named("i32"), np.array(self.table, dtype=np.int32))
        vals.update(syn_flags=Ptr(world.flags[r], 0), syn_peers=Ptr(peers, 0),
                    syn_table=Ptr(table, 0), syn_diag=Ptr(diag, 0), syn_rank=r,
                    syn_epoch=Ptr(world.epoch_words[r], 0),
                    syn_timeout_ns=0)
        out = []
        for n in self.code.arg_names:
            if n not in vals:
                raise EmulationError(f"the fused kernel has a parameter {n!r} the emulator "
                                     f"cannot supply")
            out.append(vals[n])
        return out

    def _host(self, r, world, sched, launches, seed, peers, ce_plan, snapshots):
        """Rank ``r``'s host: per launch, stage fresh inputs (stream order: after the previous
        launch), launch, wait; the ``ce`` protocol's host side included."""
        def finish(launch):
            """Wait for ``launch`` (the ce host's reduction included) and snapshot it."""
            yield WaitCond(launch.done, f"rank {r} launch {launch.epoch} to complete")
            if ce_plan is not None and ce_plan.reduce_in and self.reduce != "epilogue":
                yield from world.ce_reduce(r, launch.epoch, ce_plan)
            world.checker.launch_done(r, launch.epoch)
            snapshots[r, launch.epoch] = {p: b.data.copy() for p, b in world.bufs[r].items()}

        prev = None
        for e in range(1, launches + 1):
            if prev is not None:
                yield from finish(prev)
                if ce_plan is not None and ce_plan.reads_of_me and \
                        not world.faults.skip_consumed_wait:
                    yield from world.wait_flag(r, world.layout.consumed,
                                               (e - 1) * ce_plan.reads_of_me, "consumed",
                                               None, "<ce host: before staging>")
            # stage launch e's inputs
            data = self.inputs(r, e, seed)
            for p, b in world.bufs[r].items():
                if is_produced_operand(self.schedule, self.operands, p):
                    continue
                if is_consumed_operand(self.schedule, self.operands, p):
                    t = self.operands[p]
                    for rr, lo, hi, partial in initial_regions(self.schedule, t):
                        if rr == r and not partial:
                            offs = region_offsets(b.shape, lo, hi)
                            world.checker.write(f"rank {r} host (staging)", r, b, offs, e,
                                                "<host staging>")
                            b.data[offs] = data[p][offs]
                else:
                    b.data[:] = data[p]
            yield  # staging done: others may run
            # the device advance, before the kernel -- unless the kernel's last program
            # advances the word itself (self-advance-epoch)
            if not self.self_advance and (e == 1 or not world.faults.stale_epoch):
                world.epoch_words[r].data[0] += 1
            launch = Launch(r, e)
            args = self._kernel_args(world, r, peers)
            if ce_plan is not None:
                launch.stream = sched.spawn(Co(world.ce_stream(r, e, ce_plan, launch), r,
                                               "stream", -1, f"rank {r} copy-engine stream", e))
                yield WaitCond(lambda launch=launch: launch.entered,
                               f"rank {r} ENTRY of every rank for launch {e}")
            g0 = self.be.launch_grid(self.grid, self.comm)[0]
            for pid in program_ids((g0,) + self.grid[1:]):
                role = "comm" if self.be.has_comm_programs and pid[0] < self.comm else "compute"
                pc = ProgramCtx(world, r, pid, (g0,) + self.grid[1:], e, role)
                launch.programs.append(sched.spawn(
                    Co(self.code.call(args, pc), r, role, pid[0] + 1000 * pid[1],
                       pc.name + (f" ({pid[1]},{pid[2]})" if pid[1] or pid[2] else ""), e)))
            prev = launch
        yield from finish(prev)


    # ---------------------------------------------------------------- all policies
    def run(self, policies: Sequence[str] = DEFAULT_POLICIES, launches: int = 2, seed: int = 0,
            faults: Faults | None = None) -> EmulationResult:
        if launches < 1:
            raise EmulationError("launches must be >= 1")
        policies = list(policies)
        if not policies:
            raise EmulationError("give at least one policy")
        for p in policies:
            parse_policy(p, self.W)
        if self.self_advance and faults is not None and faults.stale_epoch:
            raise EmulationError("the stale_epoch fault skips the host's epoch advance; a "
                                 "self-advancing kernel (self_advance=True) has none: emulate "
                                 "it without self_advance")
        res = EmulationResult(self.W, self.backend, policies, launches)
        t0 = time.perf_counter()
        for p in policies:
            self.run_policy(p, launches, seed, faults, res)
        res.seconds = time.perf_counter() - t0
        return res


def _with_epoch_load(module):
    """``module`` as the GPU runs it with ABI 3: the epoch loaded from the device epoch word at
    kernel entry (the pipeline's passes after ``insert-trace``: ``load-epoch``, then
    ``self-advance-epoch``, a no-op unless self_advance=True or "auto"; the emulator's
    pipeline through ``resolve-chunks`` stops before them). A copy: the caller's module is
    left as it was."""
    if isinstance(abi_args(kernel_func(module))["syn_epoch"].type, PointerType):
        return module
    module = module.clone()
    request = request_of(module)
    fuse_pipeline(request.backend, request.reduce, after="insert-trace").apply(None, module)
    return module


# ------------------------------------------------------------------------------ public API

def emulate(kernel, *, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None,
            schedule, operand, grid, args, backend: str = "sm", comm_programs: int | None = 2,
            reduce: str = "comm", attrs=None, options=None,
            policies: Sequence[str] = DEFAULT_POLICIES, launches: int = 2, seed: int = 0,
            fine: bool = False, check: bool = True, faults: Faults | None = None,
            withhold_chunks=(), lowering: str = "auto", remap: bool = True,
            reorder_reductions: bool = False, trace: bool = False,
            self_advance: bool | str = False) -> EmulationResult:
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
    ``lowering`` is the compiler's (``"table"`` emulates the chunk-table loops); so are
    ``remap`` and ``reorder_reductions`` (with the latter, a module whose loops were renumbered
    is compared with the unfused kernel within :data:`~.reference.REORDER_ULPS`, not bitwise).
    ``trace=True`` emulates the kernel ``fuse(..., trace=True)`` launches: the lowering and
    ``insert-trace`` also run, and a trace that would change the kernel beyond its event writes
    is a :class:`~syncopate.errors.CompileError` (``passes/insert_trace.py``).
    ``self_advance=True`` emulates the kernel that advances its own epoch word
    (``passes/self_advance_epoch.py``): no host advance between launches, and each rank's word,
    done-counter and mirror are checked after the last launch (``"auto"``: where the kernel
    allows it, as the runtime compiles by default)."""
    module, ttir = fuse_module(kernel, signature=signature, constexprs=constexprs, attrs=attrs,
                               schedule=schedule, operand=operand, backend=backend,
                               comm_programs=comm_programs, reduce=reduce, options=options,
                               withhold_chunks=withhold_chunks, lowering=lowering, remap=remap,
                               reorder_reductions=reorder_reductions, trace=trace,
                               self_advance=self_advance)
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

