"""The ``ce`` backend's host protocol as stream programs (``runtime/stream_program.py``): what
``CELauncher.launch`` enqueues per call, recorded once per set of operand buffers and replayed
in one C call before the kernel and one after (docs/design-notes.md item 12 says why).

:func:`build` records the Python path's operations in its order -- the ENTRY kernel and the
``entered`` event, then per chunk the PRODUCED stream wait, the copy and the flag write, the CONSUMED adds, the ``comm_done``
event, the chunk-flag waits and one sum kernel for the reduced regions, the CONSUMED wait --
and a bound call's extras (the deferred CONSUMED wait, the call's copy). Whatever has no
program form makes it answer None, and the launcher keeps its Python path.
``tests/runtime/test_stream_program.py`` drives both against one faked driver and compares
what they enqueue.

Where a program does less than the Python path, on purpose (session 14):

* a bound call's deferred CONSUMED wait is the ENTER kernel's ``pre_*`` wait when no staging
  copy sits between them;
* a bound reduce-scatter whose result copy reads exactly the reduced rows has its sum kernels
  write the caller's output (``CopyShift``): no copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import stream_program as sp
from .. import sync_kernels as sk


@dataclass
class CEPrograms:
    """One launch's side-stream protocol as stream programs: ``pre`` up to the kernel's release
    (ENTRY), ``post`` after the kernel (copies, flags, CONSUMED adds, the handshake back, the
    reductions -- their flag waits and sum kernel -- and the CONSUMED wait unless
    ``consumed_in_post`` is False: it is then deferred)."""

    pre: object
    post: object
    consumed_in_post: bool
    #: device tables of the reductions' part addresses (the sum kernels read them)
    keep: tuple = ()
    #: a bound reduce-scatter's ``post`` whose sum kernels write the call's output themselves
    #: (:class:`~..runtime.stream_program.CopyShift`) instead of the result copy, and what a
    #: call's copy must be for it: :class:`SumInto`; None: ``post`` serves every call
    post_into: object = None
    into: "SumInto | None" = None


@dataclass(frozen=True)
class SumInto:
    """When :attr:`CEPrograms.post_into` may serve a call: its copy's source is exactly the
    reduced regions, ``[src, src + nbytes)``, which they tile, and its destination overlaps no
    part the sums read (``[parts_lo, parts_hi)`` spans them; the bound path already refuses a
    destination that overlaps the source)."""

    src: int
    nbytes: int
    parts_lo: int
    parts_hi: int

    def takes(self, dst: int, src: int, nbytes: int) -> bool:
        return (src == self.src and nbytes == self.nbytes
                and not (dst < self.parts_hi and self.parts_lo < dst + nbytes))


class NoProgram(Exception):
    """A step of the launch has no stream-program form (the Python path runs)."""


def build(launcher, cfg, prep, peers, X, bound: str | None) -> CEPrograms | None:
    """``CELauncher.launch``'s Python path, recorded (the same operations in the same order),
    for ``prep``'s buffers (a ``ce._CEPrepared``), the peers table ``peers`` and the side
    stream ``X``; None where a step has no program form (``CELauncher.programs`` says which).
    A bound call's (``bound``, ``CELauncher.bind``) adds what the op's general path does around
    the launch: the deferred CONSUMED wait of the previous launch
    (``FusedKernel.before_staging``), then the call's copy before the ENTRY handshake
    (``"before"``: an all-gather's staging), or the copy after everything
    (``"after"``: a reduce-scatter's result)."""
    fk = launcher.fk
    comm, lay, p = fk.comm, cfg.abi.layout, cfg.ce_plan
    me, W = comm.rank, comm.world_size
    if cfg.abi.flag_dtype != "int32" or sp.entry_points() is None:
        return None
    ev = {n: launcher._event(cfg, n).raw for n in ("entered", "kernel_done", "comm_done")}
    if None in ev.values():
        return None
    E = sp.Epoch

    def wait(b, stream, index, target, kind, count, epoch=E()):
        _wait(b, fk, cfg, stream, index, target, kind, count, epoch)

    reads = launcher.reads_of_me(cfg)
    try:
        pre = sp.Builder()
        # the previous launch's (e - 1) CONSUMED wait, deferred to this call: what
        # before_staging would have enqueued. Before the staging copy it is a launch of its
        # own; otherwise the ENTER kernel's program 0 waits for it before its signal
        pre_wait = sk.NO_PRE_WAIT
        if bound is not None and fk.defer_consumed_wait and reads:
            if bound == "before" or fk.test_skip_entry:
                wait(pre, sp.MAIN, lay.consumed, E(reads, -reads), "consumed", 1, E(1, -1))
            else:
                cargs, _ = fk.wait_spec(cfg, lay.consumed, E(reads, -reads), "consumed",
                                        E(1, -1))
                pre_wait = (1, cargs[1], cargs[2], cargs[5], cargs[6])
        if bound == "before":
            pre.call_copy(sp.MAIN)
        if fk.test_skip_entry:
            wait(pre, sp.MAIN, lay.entry(0), E(), "entry", W)
        else:
            wargs, cx = fk.wait_spec(cfg, lay.entry(0), E(), "entry", E())
            pre.kernel(sp.MAIN, _direct(sk._enter_kernel, cx), W,
                       (peers.data_ptr(), lay.entry(me), E(), W) + wargs + pre_wait)
        pre.record(sp.MAIN, ev["entered"])
        pre.wait_event(sp.SIDE, ev["entered"])

        post = sp.Builder()
        flags = cfg.flags.data_ptr()
        kernel_done = False
        for (st, copy, _, flag_addr) in prep.steps:
            if st.chunk in fk.test_skip_chunks:
                continue
            if st.wait_produced:
                post.wait_value(sp.SIDE, flags + lay.produced(st.chunk) * 4,
                                E(st.wait_produced))
            elif st.wait_kernel and not kernel_done:
                post.record(sp.MAIN, ev["kernel_done"])
                post.wait_event(sp.SIDE, ev["kernel_done"])
                kernel_done = True
            if copy is not None:
                geo = copy.geometry
                if geo is None:
                    return None
                (post.memcpy if geo[0] == "1d" else post.memcpy2d)(sp.SIDE, *geo[1:])
            post.write_value(sp.SIDE, flag_addr, E())
        for src, n in sorted(p.consumed_adds.items()):
            post.kernel(sp.SIDE, _direct(sk._add_kernel, {"FLAG64": False}), 1,
                        (cfg.flag_addrs[src] + lay.consumed * 4, n))
        post.record(sp.SIDE, ev["comm_done"])
        post.wait_event(sp.MAIN, ev["comm_done"])
        in_post = not fk.defer_consumed_wait
        tail = sp.Builder()  # after the reductions: the CONSUMED wait unless deferred
        if in_post and reads:
            wait(tail, sp.MAIN, lay.consumed, E(reads), "consumed", 1)
        into = into_p = None
        keep = ()
        if launcher._host_reduces(cfg):
            # the parts' chunk flags: wait kernels of a few programs, not a wait inside the sum
            # kernel -- its thousands of spinning programs would hold SMs the peer's kernel
            # (loopback) or another stream may need while they wait (design-notes item 13)
            for start, n in index_runs(lay.chunk(st.chunk) for st in p.reduce_in):
                wait(post, sp.MAIN, start, E(), "chunk", n)
            tables = _sum_tables(prep)
            keep = tuple(t.table for t in tables)
            into = _span(prep) if bound == "after" else None
            if into is not None:
                # the same program with the sums written to the call's output, no result copy
                alt = sp.Builder()
                alt.ops = list(post.ops)
                _sums(alt, tables, sp.CopyShift())
                alt.ops += tail.ops
                into_p = sp.build(alt, X.cuda_stream)
            _sums(post, tables, 0)
        post.ops += tail.ops
        if bound == "after":
            post.call_copy(sp.MAIN)
        X_h = X.cuda_stream
        pre_p, post_p = sp.build(pre, X_h), sp.build(post, X_h)
    except NoProgram:
        return None
    if pre_p is None or post_p is None:
        return None
    return CEPrograms(pre_p, post_p, in_post, keep, into_p, into if into_p is not None else None)


def _span(prep) -> SumInto | None:
    """What a call's result copy must be for the sum kernels to write it themselves: the
    reduced regions tile one contiguous byte range (a reduce-scatter's result rows), or None
    (they do not: the copy stays)."""
    regions = sorted((own.data_ptr(), own.numel() * own.element_size())
                     for own, _ in prep.reductions)
    end = regions[0][0]
    for ptr, n in regions:
        if ptr != end:
            return None
        end = ptr + n
    parts = [(q.data_ptr(), q.data_ptr() + q.numel() * q.element_size())
             for _, qs in prep.reductions for q in qs]
    return SumInto(regions[0][0], end - regions[0][0], min(lo for lo, _ in parts),
                   max(hi for _, hi in parts))


@dataclass(frozen=True)
class _SumTable:
    """One element type's regions as :func:`sync_kernels._sum_kernel` reads them: ``table``
    (device int64, a row per region: own, count, part count, part addresses), its ``rows`` and
    ``width``, and ``per_region`` programs per region."""

    dtype: object
    table: object
    rows: int
    width: int
    per_region: int


def _sum_tables(prep) -> list[_SumTable]:
    """The host reduction's regions (``ce.reduce_into`` of each) as sum-kernel tables, one per
    element type. Contiguous regions only (:class:`NoProgram` otherwise)."""
    import torch
    import triton.language as tl

    types = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16,
             torch.float32: tl.float32}
    by_type: dict = {}
    for own, parts in prep.reductions:
        if (own.dtype not in types or not own.is_contiguous()
                or any(q.dtype != own.dtype or q.shape != own.shape or not q.is_contiguous()
                       for q in parts)):
            raise NoProgram
        by_type.setdefault(own.dtype, []).append(
            [own.data_ptr(), own.numel(), len(parts)] + [q.data_ptr() for q in parts])
    out = []
    for dtype, rows in by_type.items():
        width = max(len(r) for r in rows)
        table = torch.tensor([r + [0] * (width - len(r)) for r in rows], dtype=torch.int64,
                             device=prep.reductions[0][0].device)
        longest = max(r[1] for r in rows)
        per_region = max(1, min(-(-longest // sk.SUM_BLOCK), 4096 // len(rows)))
        out.append(_SumTable(types[dtype], table, len(rows), width, per_region))
    return out


def _sums(b, tables: list[_SumTable], shift) -> None:
    """The host reduction as sum kernels on the launch stream (``sync_kernels._sum_kernel``:
    the same fp32 sum as ``ce.reduce_into``, rounded once), one launch per table (element
    type) for all its regions. ``shift``: where the sums go, 0 (``own``) or a ``CopyShift``
    (the call's output)."""
    for t in tables:
        dl = _direct(sk._sum_kernel, {"DT": t.dtype, "BLOCK": sk.SUM_BLOCK})
        b.kernel(sp.MAIN, dl, t.per_region * t.rows,
                 (t.table.data_ptr(), t.rows, t.width, t.per_region, shift))


def consumed(launcher, cfg):
    """The CONSUMED wait of ``cfg`` (``FusedKernel.consumed_wait``) as a program of one kernel
    launch on the call's stream, or None (no reads of this rank, 64-bit flags, no direct
    launch, no compiled module)."""
    reads = launcher.reads_of_me(cfg)
    if not reads or cfg.abi.flag_dtype != "int32":
        return None
    b = sp.Builder()
    try:
        _wait(b, launcher.fk, cfg, sp.MAIN, cfg.abi.layout.consumed, sp.Epoch(reads), "consumed",
              1, sp.Epoch())
    except NoProgram:
        return None
    return sp.build(b, 0)


def _direct(fn, constexprs):
    """``sync_kernels.direct`` of ``fn``, or :class:`NoProgram` where it has none."""
    dl = sk.direct(fn, constexprs)
    if dl is None:
        raise NoProgram
    return dl


def _wait(b, fk, cfg, stream, index, target, kind, count, epoch) -> None:
    """Add ``fk.wait_flag``'s spin (``count`` flags from ``index`` up to ``target``) to ``b``."""
    args, cx = fk.wait_spec(cfg, index, target, kind, epoch)
    b.kernel(stream, _direct(sk._wait_kernel, cx), count, args)


def index_runs(indexes) -> list[tuple[int, int]]:
    """``[(start, count)]``: the distinct ``indexes`` as runs of consecutive integers, in order
    (``[5, 3, 4, 9]`` -> ``[(3, 3), (9, 1)]``)."""
    runs: list[list[int]] = []
    for i in sorted(set(indexes)):
        if runs and i == runs[-1][0] + runs[-1][1]:
            runs[-1][1] += 1
        else:
            runs.append([i, 1])
    return [(s, n) for s, n in runs]
