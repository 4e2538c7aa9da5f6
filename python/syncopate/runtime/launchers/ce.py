"""The ``ce`` backend's host side (its spec: ``backends/ce.py``): the copy engine moves the
data; the fused kernel only waits and signals (``lower-ce``), and the host side of the protocol
runs on a side stream (:mod:`syncopate.schedule.ce_plan` says why the ENTRY wait comes before the
kernel is released)::

    main:  [staged][signal+wait ENTRY*](entered)[ fused kernel ]──(wait side)[reduce][CONSUMED wait]
    side:                        (wait entered)[copy c0][flag c0][copy c1]...[CONSUMED += n]

The ENTRY handshake runs on the main stream: after the staging by stream order, and after the
previous launch's side-stream work (the main stream waited for it), so ``ENTRY[me] >= e``
tells a peer that this rank's epoch-``e`` data is staged and that its launch ``e - 1`` read
everything it will read; the side stream starts on one event instead of two. The
signal and the wait are one kernel launch (``sync_kernels.enter``). The side stream waits for the
``entered`` event even where its first step waits for the kernel (a PRODUCED count): a stream
memory wait enqueued before the handshake completed blocked its hardware queue in loopback,
and another rank's ENTER kernel behind it on that queue (docs/design-notes.md item 13).

Each chunk: peer -> local copy of the region (copy engine), then
``stream_write_value32(flags, chunk, e)`` (the driver fences before the write, so the data is
visible first); pull reads add to the source's CONSUMED after the copies. Reduce chunks
(``sum``) are pushed into per-source slots ``[W, *shape]`` of the owner and summed after the
kernel, unless the kernel's epilogue adds them (``reduce="epilogue"``, ``abi.epilogue_slots``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ... import settings
from ...errors import LaunchError
from ...schedule.ce_plan import CEPlan, build_ce_plan
from .. import _cuda, fastlaunch
from .. import stream_program as sp
from .. import sync_kernels as sk
from ..launch_plan import memcpy_bytes
from . import ce_programs
from .base import Launcher
from .ce_programs import index_runs


def check_epilogue_plan(plan: CEPlan, stream_waits: bool) -> None:
    """The epilogue reduction's kernel waits for chunks the side stream copies *while it runs*:
    every copy must start on its own PRODUCED flag (``cuStreamWaitValue32``), never on the end
    of the kernel, or the two would wait for each other until the watchdog fires."""
    if not stream_waits:
        raise LaunchError("reduce='epilogue' needs cuStreamWaitValue32 (CUDA stream memory "
                          "operations), which this driver does not expose; use reduce='comm'")
    late = [st.chunk for st in plan.steps if st.wait_kernel]
    if late:
        raise LaunchError(f"reduce='epilogue': chunks {late[:8]} would be copied only after the "
                          f"kernel ends (no PRODUCED count), while the kernel waits for them; use "
                          f"reduce='comm' for this schedule")


@dataclass
class _CEPrepared:
    """One rank's ``ce`` steps for one set of operand buffers: ``(step, copy(stream) or None,
    uint32 view of the destination's flags)``, and the reductions ``(own region, [slot
    regions in source order])``."""

    steps: list
    reductions: list
    #: the stream programs of these buffers (``ce_programs.CEPrograms`` or None: the Python
    #: path), by everything else they bake in (:meth:`CELauncher.programs`)
    programs: dict = field(default_factory=dict)


class CELauncher(Launcher):
    """The side-stream host protocol (module docstring)."""

    #: every step names its stream (events and copies by handle, sync kernels with
    #: ``stream=``; the host reduction enters S itself): entering torch's stream context cost
    #: ~5-10 us per launch on an H200 host
    needs_stream_context = False
    needs_operands = True

    def capture_refusal(self, cfg) -> str | None:
        """Always refused: the side stream's ``stream_write_value32(epoch)``, its
        ``cuStreamWaitValue32(epoch * count)`` and its sync kernels take epochs the host
        computed; captured, every replay would write and wait for the capture's values, which
        the previous replay already satisfied (docs/cuda-graphs.md)."""
        return ("its side stream writes and waits for host-computed epochs "
                "(stream_write_value32, cuStreamWaitValue32, the sync kernels' targets), which "
                "a graph would replay unchanged")

    def configure(self, cfg) -> None:
        """This rank's copy plan, and the owner-side slots of reduced tensors."""
        fk = self.fk
        cfg.ce_plan = build_ce_plan(fk.schedule, fk.comm.rank, cfg.abi.produced_count)
        if cfg.abi.epilogue_slots:
            check_epilogue_plan(cfg.ce_plan, _cuda.stream_wait_available())
        for tname in cfg.ce_plan.reduce_tensors:
            cfg.slots[tname] = fk.schedule_buffer(tname, leading=(fk.comm.world_size,))

    def reads_of_me(self, cfg) -> int:
        return cfg.ce_plan.reads_of_me

    def _event(self, cfg, name: str) -> "_Event":
        events = cfg.host.setdefault("events", {})
        ev = events.get(name)
        if ev is None:
            ev = events[name] = _Event()
        return ev

    def prepare(self, cfg, operand_tensors: dict) -> _CEPrepared:
        """Views, copy geometry and flag views of every step of this rank's plan, for these
        operand buffers (cached: the plan and the buffers fix all of it)."""
        fk = self.fk
        comm, p = fk.comm, cfg.ce_plan
        key = (comm.generation,) + tuple(operand_tensors[q].data_ptr()
                                         for q in sorted(operand_tensors))
        cache = cfg.host.setdefault("prepared", {})
        prep = cache.get(key)
        if prep is not None:
            return prep
        param_of = {t: prm for prm, t in fk.operands.items()}
        steps = []
        for st in p.steps:
            t = operand_tensors[param_of[st.tensor]]
            copy = None
            if st.src != st.dst:  # (peer_view of this rank is the tensor itself)
                dst_t = (comm.peer_view(cfg.slots[st.tensor], st.dst)[st.src] if st.reduce
                         else comm.peer_view(t, st.dst))
                copy = region_copier(dst_t[st.slices], comm.peer_view(t, st.src)[st.slices])
            view = comm.flag_view_u32(cfg.flags, st.dst)
            # CHUNK[c] on the destination as an address: the flag write is one driver call
            steps.append((st, copy, view, view.data_ptr() + 4 * cfg.abi.layout.chunk(st.chunk)))
        groups: dict = {}
        for st in p.reduce_in:
            region = (st.tensor, tuple((s.start, s.stop) for s in st.slices))
            groups.setdefault(region, (st.slices, []))[1].append(st.src)
        reductions = []
        for (tname, _), (sl, srcs) in groups.items():
            t = operand_tensors[param_of[tname]]
            slots = cfg.slots[tname]
            reductions.append((t[sl], [slots[s][sl] for s in sorted(srcs)]))
        prep = _CEPrepared(steps, reductions)
        if len(cache) > 16:  # callers cycling through buffers: bound the cache
            cache.clear()
        cache[key] = prep
        return prep

    def launch(self, cfg, grid, args, stream, epoch: int, peers, operand_tensors,
               direct=None) -> None:
        fk, S, e = self.fk, stream, epoch
        comm = fk.comm
        lay = cfg.abi.layout
        me, W = comm.rank, comm.world_size
        X = comm.stream("syncopate-ce")
        p = cfg.ce_plan

        prep = self.prepare(cfg, operand_tensors)
        progs = self.programs(cfg, prep, peers, X)
        if progs is not None:
            # the same operations as below, enqueued in C (stream_program.py says why)
            Sh = S.cuda_stream
            progs.pre.run(Sh, e)
            self.run_kernel(cfg, grid, args, S, direct)
            progs.post.run(Sh, e)
            if not progs.consumed_in_post:
                cfg.consumed_pending = e
            return

        # 1. Entry on the main stream: after the staged inputs and launch e-1 (its side-stream
        # work included: S waited for it), by stream order. Events are recorded and waited on
        # by handle (_Event), copies and flag writes enqueued on X by handle: nothing below
        # needs X as torch's current stream.
        Sh, Xh = S.cuda_stream, X.cuda_stream
        if fk.test_skip_entry:
            fk.wait_flag(cfg, lay.entry(0), e, "entry", e, S, count=W)
        else:  # signal and wait in one launch
            wargs, cx = fk.wait_spec(cfg, lay.entry(0), e, "entry", e)
            sk.enter(peers, lay.entry(me), e, W, wargs, flag64=cx["FLAG64"], trap=cx["TRAP"],
                     stream=S)
        entered = self._event(cfg, "entered")
        entered.record(S, Sh)
        entered.wait(X, Xh)

        # 2. The fused kernel.
        self.run_kernel(cfg, grid, args, S, direct)
        kernel_done = None

        # 3. Copies and flags on the side stream (no SM needed from here on). The views,
        #    copy geometry and flag views of every step are prepared once per set of operand
        #    buffers: per launch only the enqueueing is left (host time at M = 1024 matters).
        skip = fk.test_skip_chunks
        for st, copy, flag_view, flag_addr in prep.steps:
            if st.chunk in skip:
                continue
            need_kernel = st.wait_kernel
            if st.wait_produced:
                addr = cfg.flags.data_ptr() + lay.produced(st.chunk) * 4
                need_kernel = not _cuda.stream_wait_value32(Xh, addr,
                                                            (e * st.wait_produced) & 0xFFFFFFFF)
            if need_kernel and kernel_done is None:
                # no PRODUCED count (or no stream memory ops): wait for the whole kernel
                kernel_done = self._event(cfg, "kernel_done")
                kernel_done.record(S, Sh)
                kernel_done.wait(X, Xh)
            if copy is not None:
                copy(X)
            if not _cuda.stream_write_value32(Xh, flag_addr, e):
                with torch.cuda.stream(X):  # no stream memory ops in this driver: torch's op
                    torch.ops.symm_mem.stream_write_value32_(flag_view, lay.chunk(st.chunk), e)
        for src, n in sorted(p.consumed_adds.items()):
            sk.add_flag(cfg.flag_addrs[src], lay.consumed, n, stream=X)
        done = self._event(cfg, "comm_done")
        done.record(X, Xh)
        done.wait(S, Sh)

        # 4. Reductions of chunks pushed into this rank's slots (after the kernel, on S), unless
        #    the kernel's epilogue already added them (reduce="epilogue": it waited for them).
        if self._host_reduces(cfg):
            # one wait kernel per run of consecutive flags (each of its programs spins on one
            # flag and records its own timeout) instead of one launch per chunk
            for start, n in index_runs(lay.chunk(st.chunk) for st in p.reduce_in):
                fk.wait_flag(cfg, start, e, "chunk", e, S, count=n)
            with torch.cuda.stream(S):  # torch's ops: on the launch stream
                for own, parts in prep.reductions:
                    reduce_into(own, parts)
        # 5. CONSUMED: nobody may overwrite this rank's buffers before peers finished reading.
        if fk.defer_consumed_wait:
            cfg.consumed_pending = e
        else:
            fk.consumed_wait(cfg, e, S)

    def bind(self, cfg, grid, dl, peers, operand_tensors, copy_after: bool | None):
        """A bound call's launch (``runtime/launch_plan.py``): ``run(stream, e, values, copy) ->
        bool`` enqueueing this launch's programs around the kernel's direct launch ``dl``, the
        call's copy (``(dst, src, nbytes, after)`` or None; ``copy_after`` says which way all
        of the layout's calls copy, None: none) and the deferred CONSUMED wait in them. None
        where the bound path cannot take the layout (no programs: :meth:`programs`).
        ``run`` answers False with nothing enqueued when the general path must take the call
        (the test switches changed, no current context on this thread)."""
        fk = self.fk
        X = fk.comm.stream("syncopate-ce")
        prep = self.prepare(cfg, operand_tensors)
        mode = "none" if copy_after is None else "after" if copy_after else "before"
        progs = self.programs(cfg, prep, peers, X, bound=mode)
        if progs is None:
            return None
        pre, post, defer = progs.pre.run, progs.post.run, fk.defer_consumed_wait
        # a reduce-scatter's sums written to the call's output where its copy allows it
        into = progs.into
        post_into = progs.post_into.run if into is not None else None
        skip, skip_entry = fk.test_skip_chunks, fk.test_skip_entry

        def run(stream, e, values, copy) -> bool:
            if fk.test_skip_chunks is not skip or fk.test_skip_entry != skip_entry:
                return False
            c = None if copy is None else (copy[0], copy[1], copy[2])
            try:
                pre(stream, e, None if copy_after else c)
            except sp.ProgramError as err:
                if err.index == 0 and err.code == _cuda.INVALID_CONTEXT:
                    return False  # nothing enqueued: Triton's launcher sets a context up
                raise
            if not dl.enqueue(grid, values, stream, None):
                raise _cuda.DriverError("the fused kernel's launch found no current context "
                                        "after its stream program's operations were enqueued")
            if not copy_after:
                post(stream, e, None)
            elif into is not None and c is not None and into.takes(*c):
                post_into(stream, e, c)
            else:
                post(stream, e, c)
            if defer:
                cfg.consumed_pending = e
            return True
        # the programs' device tables (the sum kernels') live as long as the runner does, even
        # once the prepared-buffer cache dropped them
        run.programs = progs
        return run

    def consumed_program(self, cfg):
        """The CONSUMED wait of ``cfg`` (``FusedKernel.consumed_wait``) as a stream program of
        one kernel launch on the call's stream (:func:`.ce_programs.consumed`, cached per
        watchdog setting and device), or None (the Python path): the deferred wait before
        every ce all-gather's staging goes through it."""
        key = ("consumed", settings.watchdog(), fastlaunch.current_device())
        hit = cfg.host.get(key, False)
        if hit is False:
            hit = cfg.host[key] = ce_programs.consumed(self, cfg)
        return hit

    @staticmethod
    def _host_reduces(cfg) -> bool:
        """Whether chunks pushed into this rank's slots are added by the host after the kernel
        (else there are none, or the kernel's epilogue adds them: ``reduce="epilogue"``)."""
        return bool(cfg.ce_plan.reduce_in) and not cfg.abi.epilogue_slots

    def programs(self, cfg, prep: _CEPrepared, peers, X, bound: str | None = None):
        """The stream programs of one launch on ``prep``'s buffers (:func:`.ce_programs.build`,
        built at the first ask, then cached with what they bake in: the side stream, the
        watchdog, the peers table, the test switches), or None where the Python path must run
        (no compiled module, a missing driver entry point or event handle, a copy the copy
        engine cannot make, a sync kernel without a direct launch). ``bound``: the programs of
        a bound call
        (:meth:`bind`): ``"before"`` / ``"after"`` where the call's copy goes, ``"none"``
        without one."""
        fk = self.fk
        key = (X.cuda_stream, settings.watchdog(), peers.data_ptr(), fastlaunch.current_device(),
               fk.test_skip_chunks, fk.test_skip_entry, fk.defer_consumed_wait, bound)
        progs = prep.programs
        hit = progs.get(key, False)
        if hit is False:
            if len(progs) > 8:
                progs.clear()
            hit = progs[key] = ce_programs.build(self, cfg, prep, peers, X, bound)
        return hit


def reduce_into(own, parts) -> None:
    """``own = round(own + sum(parts))`` with the sum in fp32, in as few kernels as the same bits
    allow: one part (W = 2) is one ``add_`` (torch adds half-precision tensors in fp32 and
    rounds once, exactly the fp32 sum rounded by the copy back); more parts accumulate into an
    fp32 copy of ``own``, each part converted inside its ``add_`` (exact) instead of by a
    ``float()`` kernel of its own. 1 kernel instead of 4 at W = 2, ``W + 1`` instead of
    ``2 W`` above: each is a launch of host time per reduced region and call."""
    if len(parts) == 1:
        own.add_(parts[0])
        return
    acc = own.float()
    for part in parts:
        acc.add_(part)
    own.copy_(acc)


# ------------------------------------------------------------------------------------------
# Region copies with the copy engine
# ------------------------------------------------------------------------------------------

_COPY_WARNED = False


def copy_region(dst, src, stream) -> None:
    """Copy a region between two views (one may be a peer's) with ``Tensor.copy_`` on
    ``stream``: :func:`region_copier`'s fallback where the copy engine cannot take the region
    by address (:func:`region_geometry` None, or the driver call unavailable). Contiguous views
    are still a ``cudaMemcpyAsync``; anything else is an SM kernel (warned once, since it
    competes with the fused kernel)."""
    global _COPY_WARNED
    if not (dst.is_contiguous() and src.is_contiguous()) and not _COPY_WARNED:
        warnings.warn("syncopate ce backend: a chunk region is not a 2-D block; copying it with "
                      "an SM kernel (slower, and it competes with the fused kernel for SMs)")
        _COPY_WARNED = True
    _copy_on(stream, dst, src)


def region_geometry(dst, src):
    """How the copy engine copies ``src`` into ``dst``: ``("1d", dst, src, nbytes)`` (one
    ``cuMemcpyDtoDAsync``: contiguous views of one dtype and shape), ``("2d", dst, dst_pitch,
    src, src_pitch, width_bytes, rows)`` (``cuMemcpy2DAsync``: one strided level), or None
    (``Tensor.copy_`` must: a conversion, a broadcast, more strided levels)."""
    if dst.is_contiguous() and src.is_contiguous():
        nbytes = memcpy_bytes(dst, src)
        return ("1d", dst.data_ptr(), src.data_ptr(), nbytes) if nbytes else None
    if dst.dtype != src.dtype:
        return None
    shp = _rows_cols(dst, src)
    if shp is None:
        return None
    rows, width, dpitch, spitch = shp
    return ("2d", dst.data_ptr(), dpitch, src.data_ptr(), spitch, width, rows)


def region_copier(dst, src):
    """``copy(stream)`` doing :func:`copy_region` (dst <- src) with its geometry worked out once
    (:func:`region_geometry`), on ``stream`` by handle (falling back to :func:`copy_region` if
    the driver call is unavailable); the geometry is the copier's ``geometry``."""
    geo = region_geometry(dst, src)

    def copy(stream):
        # by handle: Tensor.copy_ would need the stream current (a context, ~4 us)
        if geo is None or stream is None or not (
                _cuda.memcpy_async if geo[0] == "1d" else _cuda.memcpy2d_async)(
                    *geo[1:], stream.cuda_stream):
            copy_region(dst, src, stream)
    copy.geometry = geo
    return copy


def _copy_on(stream, dst, src) -> None:
    """``dst.copy_(src)`` enqueued on ``stream`` (None: the current stream)."""
    with torch.cuda.stream(stream):
        dst.copy_(src, non_blocking=True)


class _Event:
    """An event of the side-stream handshake, recorded and waited on by handle
    (``cuEventRecord`` / ``cuStreamWaitEvent``, :func:`_cuda.event_create`); a
    ``torch.cuda.Event`` where the driver gives no handle (no entry point, no context)."""

    __slots__ = ("raw", "event")

    def __init__(self):
        self.raw = _cuda.event_create()
        self.event = None
        if self.raw is None:
            self.event = torch.cuda.Event()

    def record(self, stream, handle: int) -> None:
        """Record on ``stream`` (a torch stream; ``handle`` its ``cuda_stream``)."""
        if self.raw is not None:
            _cuda.event_record(self.raw, handle)
        else:
            self.event.record(stream)

    def wait(self, stream, handle: int) -> None:
        """``stream``'s later work waits for what was recorded."""
        if self.raw is not None:
            _cuda.stream_wait_event(handle, self.raw)
        else:
            stream.wait_event(self.event)

    def __del__(self):
        if getattr(self, "raw", None) is not None:
            try:
                _cuda.event_destroy(self.raw)
            except Exception:  # interpreter shutdown: the driver may be gone already
                pass


def _rows_cols(dst, src):
    """``(rows, width_bytes, dst_pitch, src_pitch)`` if both views are ``rows`` blocks of
    contiguous bytes at a constant pitch; else None."""
    def collapse(t):
        es = t.element_size()
        dims = [(s, st) for s, st in zip(t.shape, t.stride()) if s != 1]
        if not dims:
            return 1, es, es
        # merge contiguous trailing dims
        inner = 1
        while dims and dims[-1][1] == inner:
            inner *= dims[-1][0]
            dims.pop()
        if len(dims) > 1:
            return None
        if not dims:
            return 1, inner * es, inner * es
        return dims[0][0], inner * es, dims[0][1] * es
    a, b = collapse(dst), collapse(src)
    if a is None or b is None or a[0] != b[0] or a[1] != b[1]:
        return None
    return a[0], a[1], a[2], b[2]
