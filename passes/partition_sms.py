"""``partition-sms``: comm programs inside the fused kernel (``sm`` and ``nvshmem`` backends).

The fused kernel is launched with ``comm_programs`` extra programs on axis 0.  Programs
``0 .. comm_programs-1`` run the comm plan in a ``syncopate.comm`` region; every other program
runs the original body, seeing ``program_id(0) - comm_programs`` and
``num_programs(0) - comm_programs``, i.e. exactly the grid the kernel was written for.  Comm
programs take the lowest ids because the hardware dispatches programs roughly in id order: they
are resident before any compute program can occupy an SM and spin, so a wait can never starve
the programs that would satisfy it.

The comm region lists, in schedule order (step, then id), one ``syncopate.transfer`` per chunk;
the lowering decides at run time whether this rank executes it (the destination for ``pull``
and ``sum`` chunks, the source for ``push`` chunks), so one binary serves every rank.  It
starts with ``syncopate.enter`` (publish ENTRY to peers) and, when some chunk is read from a
peer's buffer, ends with ``syncopate.drain`` (wait until peers have read ours), the handshake
of docs/fused-abi.md.

With ``lowering="table"`` the region holds one loop over this rank's EXEC list of the chunk
table instead (``syncopate.transfer_chunk`` of the chunk id read from the list), and comm
program 0 awaits the chunks pushed to it by a loop over its PUSHED list: the comm plan's code
does not grow with the chunk count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Region
from xdsl.passes import ModulePass

from syncopate import chunk_table as ct
from syncopate.errors import CompileError
from syncopate.schedule.execution import program_order, side
from syncopate.schedule.model import Schedule
from syncopate_mlir.dialects.syncopate import (
    CommOp,
    DrainOp,
    EnterOp,
    TransferChunkOp,
    TransferOp,
    WaitOp,
    record,
    request_of,
    schedule_of,
)
from syncopate_mlir.dialects.tt import GetNumProgramsOp, GetProgramIdOp, ReturnOp

from .abi_info import abi_args, chunk_writers, comm_programs_of, lowering_of, operands_of
from .builder import Builder
from .ir_utils import func_body, kernel_func, loc_str, param_names
from .structurize_returns import tree_refusal
from .table_reader import TableReader, longest


def executor(chunk) -> str:
    """Which side runs a chunk's transfer on the comm programs, ``"src"`` or ``"dst"``."""
    return side(chunk, "sm")


@dataclass(frozen=True)
class PartitionSms(ModulePass):
    name: ClassVar[str] = "partition-sms"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        sched = schedule_of(op)
        backend = request_of(op).backend
        comm = comm_programs_of(op)
        if comm <= 0:
            raise CompileError(f"backend {backend!r} needs comm_programs >= 1 (programs that move "
                               f"the data inside the fused kernel); got {comm}")
        func = kernel_func(op)
        args = abi_args(func)
        body = func_body(func)
        operands = operands_of(op)
        param_of_tensor = {t: p for p, t in operands.items()}
        names = param_names(op, func)
        arg_of = {names[i]: a for i, a in enumerate(body.args) if i < len(names)}

        ret = body.last_op
        blocks = len(func.regions[0].blocks)
        if not isinstance(ret, ReturnOp) or ret.operands or blocks > 1:
            # structurize-returns has made one block of every early-return tree it could
            if blocks == 1:
                why = "it does not end in an operand-less tt.return"
            else:  # None: a tree, left for structurize-returns, which did not run before
                why = tree_refusal(func.regions[0]) or "run structurize-returns before"
            raise CompileError(
                f"the comm programs need the kernel as one block that ends in its return, and "
                f"this kernel's control flow cannot be made one ({why}). Write the early exits "
                f"as guards (`if pid < n:` around the work, or a mask) instead of branches "
                f"that join or loop", loc_str(ret))

        moved = [o for o in body.ops if o is not ret]  # the original body: the compute branch
        b = Builder(body.first_op)
        pid_raw = b.insert(GetProgramIdOp(0)).result
        count = b.const(comm)
        is_comm = b.cmp("slt", pid_raw, count)
        # the comm plan runs once per launch: on a grid of more than one dimension, only the
        # programs (p, 0, 0) with p < comm_programs run it; (p, y, z) for other y, z are idle
        # (without this guard every row of axis 1 ran the whole plan and over-signalled)
        zero = b.const(0)
        leader = b.all_of([b.cmp("eq", b.insert(GetProgramIdOp(axis)).result, zero)
                           for axis in (1, 2)])

        for o in moved:
            o.detach()
        else_block = Block([*moved, scf.YieldOp()])
        comm_op = CommOp(pid_raw, count)
        then_block = Block([scf.IfOp(leader, [], Region(Block([comm_op, scf.YieldOp()]))),
                            scf.YieldOp()])
        if_op = scf.IfOp(is_comm, [], Region(then_block), Region(else_block))
        body.insert_op_before(if_op, ret)

        # compute programs see the grid they were written for
        for o in list(else_block.walk()):
            if isinstance(o, (GetProgramIdOp, GetNumProgramsOp)) and o.axis_int == 0:
                res = o.results[0]
                nb = Builder(o.next_op)
                shifted = nb.sub(res, nb.cast(count, res.type))
                res.replace_uses_with_if(shifted, lambda use: use.operation is not shifted.op)

        # the comm plan
        cb = Builder(None, comm_op.body.blocks[0])
        flags, epoch, rank = args["syn_flags"], args["syn_epoch"], args["syn_rank"]
        cb.insert(EnterOp(pid_raw, count, epoch, rank, flags))
        order = sorted(sched.chunks, key=lambda c: (c.step, c.id))
        tensors = list(operands.values())
        writers = chunk_writers(op)
        reads_per_src = ct.reads_per_src(sched, "sm", writers)
        for c in order:
            if c.tensor not in param_of_tensor:
                raise CompileError(f"chunk {c.id} moves tensor {c.tensor!r}, which no kernel "
                                   f"operand holds; pass operand={{param: {c.tensor!r}}}")
        if lowering_of(op) == "table":
            reader = TableReader(args["syn_table"], ct.layout_of(sched))
            bases = [arg_of[p] for p in operands]
            self._table_plan(cb, sched, reader, bases, pid_raw, count, epoch, rank, flags,
                             writers)
        else:
            for c in order:
                base = arg_of[param_of_tensor[c.tensor]]
                cb.insert(TransferOp(base, pid_raw, count, epoch, rank, flags, c.id,
                                     1 + tensors.index(c.tensor)))
            self._await_pushes(cb, order, pid_raw, epoch, rank, flags, writers)
        if any(reads_per_src.values()):
            # reads is per source rank; the lowering selects this rank's
            cb.insert(DrainOp(pid_raw, count, epoch, rank, flags, 0))
        modes = {("push" if executor(c) == "src" else "pull") for c in sched.chunks}
        record(op, reads_per_src=reads_per_src, mode=modes.pop() if len(modes) == 1 else "mixed")

    @staticmethod
    def _table_plan(cb: Builder, sched: Schedule, rd: TableReader, bases, pid, count, epoch,
                    rank, flags, writers) -> None:
        """The table form of the comm plan: every comm program runs this rank's EXEC list in
        order; comm program 0 then awaits this rank's PUSHED list (see :meth:`_await_pushes`)."""
        W = sched.world_size
        n_exec = longest(program_order(sched, "sm").values())
        start, n = rd.rank_list(cb, rank, rd.layout.exec, n_exec)
        _, lb, cid, _ = rd.each(cb, start, n)
        lb.insert(TransferChunkOp(pid, count, epoch, rank, flags, rd.table, cid, bases))
        lb.insert(scf.YieldOp())
        n_pushed = longest(ct.pushed_list(sched, r, "sm") for r in range(W))
        if not n_pushed:
            return
        fb = cb.then(cb.cmp("eq", pid, cb.const(0)))
        target = fb.mul(epoch, fb.const(writers))
        start, n = rd.rank_list(fb, rank, rd.layout.pushed, n_pushed)
        _, pb, cid, _ = rd.each(fb, start, n)
        pb.insert(WaitOp(flags, cid, target, "chunk"))
        pb.insert(scf.YieldOp())

    @staticmethod
    def _await_pushes(cb: Builder, order, pid, epoch, rank, flags, writers) -> None:
        """Comm program 0 of each destination waits until every chunk pushed to it has
        arrived, so that a launch completes only with all of its data in place.

        Tiles wait for the chunks they read; but a chunk that no tile reads (the all-gather
        phase of an all-reduce lands in the output after the tiles are done) would otherwise
        arrive after the launch returned: the host would read an incomplete result, and the
        late copy would land on the next launch's data (found by the CPU emulator)."""
        pushed = [c for c in order if executor(c) == "src"]
        if not pushed:
            return
        fb = cb.then(cb.cmp("eq", pid, cb.const(0)))
        target = fb.mul(epoch, fb.const(writers))
        for d in sorted({c.dst for c in pushed}):
            db = fb.then(fb.cmp("eq", rank, fb.const(d)))
            for c in pushed:
                if c.dst == d:
                    db.insert(WaitOp(flags, db.const(c.id), target, "chunk", c.id))
