"""Tiny Triton kernels for the host-driven parts of the protocol (the ``ce`` backend, the
runtime's ENTRY signal, the CONSUMED wait before staging). Runtime utilities, not fused ops.

* :func:`signal_entry` -- ``ENTRY[me] = epoch`` on every rank's flag array (``st.release.sys``).
* :func:`wait_flag` -- spin until ``flag[index + i] >= target`` for ``i < count``
  (``ld.acquire.sys``), with the watchdog. The comparison is serial-number arithmetic,
  ``(signed)(flag - target) >= 0``, like the compiler's spins: flags grow without bound and may
  wrap around 2^32, which this compare tolerates (targets are at most 2^31 ahead).
* :func:`add_flag` -- ``flag[index] += value`` on a (possibly remote) flag
  (``red.release.sys.global.add``).
* :func:`advance_epoch` -- ``word += 1`` on a configuration's device epoch word, and the new
  value into its host-pinned mirror: what makes a CUDA-graph replay run with a fresh epoch
  (docs/cuda-graphs.md).

Every spin has the watchdog of docs/fused-abi.md ("The watchdog record"): once
``syn_timeout_ns`` has elapsed the first spin to time out claims the record (``atom.cas``),
fills it, and leaves (``exit``) or traps (``SYNCOPATE_TIMEOUT_ACTION=trap``); the others see it
claimed within 256 polls and leave at once instead of burning their own full timeout (the
first timeout is the cause, the others are consequences).

Why the whole spin is one inline-asm block (labels are local to a ``{ }`` block in PTX, so the
block may be inlined many times): Triton evaluates a scalar expression in *every* thread, and a
Triton-level loop would let threads of one warp leave it at different iterations; a scalar
``tl.atomic_cas`` then synchronises the CTA through shared memory and divergent threads would
deadlock. Inside one asm block each thread spins independently, any thread may time out, the
CAS decides which one writes the record, and no CTA barrier is involved. The kernels run with
one warp, so the 32 identical loads of a poll coalesce into one memory transaction.

Side-effecting stores/reductions are predicated on ``%tid.x == 0`` inside the asm: a scalar
in Triton is computed by every thread, and a ``red.add`` executed by 32 threads would add 32
times.

Addresses are passed as ``int64`` (annotated ``tl.int64`` and never specialised), so one
compiled kernel serves every flag buffer, peer address and index.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl

from .. import settings
from ..ptx import spin_asm
from . import direct_launch, fastlaunch


# The watchdog spins (every thread of the one-warp kernel polls). Kernels may only read
# globals that are constexprs (Triton 3.6 rejects other globals).
SPIN32 = tl.constexpr(spin_asm(32, False))
SPIN32_TRAP = tl.constexpr(spin_asm(32, True))
SPIN64 = tl.constexpr(spin_asm(64, False))
SPIN64_TRAP = tl.constexpr(spin_asm(64, True))

#: ``st.release.sys`` by thread 0 after a system fence (operands: $1 address, $2 value).
STORE32 = tl.constexpr("{ .reg .pred sy_p; .reg .b32 sy_t; mov.u32 sy_t, %tid.x; setp.eq.u32 sy_p, sy_t, 0; "
           "fence.sc.sys; @sy_p st.release.sys.global.b32 [$1], $2; mov.u32 $0, 0; }")
STORE64 = tl.constexpr("{ .reg .pred sy_p; .reg .b32 sy_t; mov.u32 sy_t, %tid.x; setp.eq.u32 sy_p, sy_t, 0; "
           "fence.sc.sys; @sy_p st.release.sys.global.b64 [$1], $2; mov.u32 $0, 0; }")
#: ``red.release.sys.global.add`` by thread 0 (operands: $1 address, $2 value).
ADD32 = tl.constexpr("{ .reg .pred sy_p; .reg .b32 sy_t; mov.u32 sy_t, %tid.x; setp.eq.u32 sy_p, sy_t, 0; "
         "@sy_p red.release.sys.global.add.s32 [$1], $2; mov.u32 $0, 0; }")
ADD64 = tl.constexpr("{ .reg .pred sy_p; .reg .b32 sy_t; mov.u32 sy_t, %tid.x; setp.eq.u32 sy_p, sy_t, 0; "
         "@sy_p red.release.sys.global.add.u64 [$1], $2; mov.u32 $0, 0; }")


@triton.jit
def _spin(base_addr, first_index, target, diag_addr, rank, kind, epoch, timeout_ns,
          FLAG64: tl.constexpr, TRAP: tl.constexpr):
    """Program ``i`` spins until ``flag[first_index + i] >= target`` (one warp per program)."""
    index = first_index + tl.program_id(0)
    if FLAG64:
        tl.inline_asm_elementwise(SPIN64_TRAP if TRAP else SPIN64, "=r,l,l,l,l,r,r,r,r",
                                  [base_addr + index.to(tl.int64) * 8, target, diag_addr,
                                   timeout_ns, rank, index, kind, epoch],
                                  dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise(SPIN32_TRAP if TRAP else SPIN32, "=r,l,r,l,l,r,r,r,r",
                                  [base_addr + index.to(tl.int64) * 4, target.to(tl.int32),
                                   diag_addr, timeout_ns, rank, index, kind, epoch],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _signal_all(peers_addr, index, value, world_size, FLAG64: tl.constexpr):
    """``flag_r[index] = value`` on every rank ``r`` (flag base addresses in ``peers[0, :]``)."""
    peers = peers_addr.to(tl.pointer_type(tl.int64))
    for r in range(world_size):
        base = tl.load(peers + r)
        if FLAG64:
            tl.inline_asm_elementwise(STORE64, "=r,l,l", [base + index.to(tl.int64) * 8, value],
                                      dtype=tl.int32, is_pure=False, pack=1)
        else:
            tl.inline_asm_elementwise(STORE32, "=r,l,r", [base + index.to(tl.int64) * 4,
                                                          value.to(tl.int32)],
                                      dtype=tl.int32, is_pure=False, pack=1)


@triton.jit(do_not_specialize=["base_addr", "first_index", "target", "diag_addr", "rank", "kind",
                               "epoch", "timeout_ns"])
def _wait_kernel(base_addr: tl.int64, first_index: tl.int32, target: tl.int64, diag_addr: tl.int64,
                 rank: tl.int32, kind: tl.int32, epoch: tl.int32, timeout_ns: tl.int64,
                 FLAG64: tl.constexpr, TRAP: tl.constexpr):
    """Program ``i`` spins until ``flag[first_index + i] >= target`` (one warp per program)."""
    _spin(base_addr, first_index, target, diag_addr, rank, kind, epoch, timeout_ns, FLAG64, TRAP)


@triton.jit(do_not_specialize=["peers_addr", "index", "value", "world_size"])
def _signal_all_kernel(peers_addr: tl.int64, index: tl.int32, value: tl.int64, world_size: tl.int32,
                       FLAG64: tl.constexpr):
    """``flag_r[index] = value`` on every rank ``r`` (flag base addresses in ``peers[0, :]``)."""
    _signal_all(peers_addr, index, value, world_size, FLAG64)


@triton.jit(do_not_specialize=["peers_addr", "entry_index", "value", "world_size", "base_addr",
                               "first_index", "target", "diag_addr", "rank", "kind", "epoch",
                               "timeout_ns", "pre_count", "pre_index", "pre_target", "pre_kind",
                               "pre_epoch"])
def _enter_kernel(peers_addr: tl.int64, entry_index: tl.int32, value: tl.int64,
                  world_size: tl.int32, base_addr: tl.int64, first_index: tl.int32,
                  target: tl.int64, diag_addr: tl.int64, rank: tl.int32, kind: tl.int32,
                  epoch: tl.int32, timeout_ns: tl.int64, pre_count: tl.int32,
                  pre_index: tl.int32, pre_target: tl.int64, pre_kind: tl.int32,
                  pre_epoch: tl.int32, FLAG64: tl.constexpr, TRAP: tl.constexpr):
    """The ENTRY handshake in one launch (:func:`enter`): program 0 signals
    ``ENTRY[me] = value`` on every rank (:func:`_signal_all_kernel`), then program ``i`` spins
    until ``flag[first_index + i] >= target`` (:func:`_wait_kernel`). A program's spin does
    not depend on another program's signal being visible first, so no order between programs
    is needed. With ``pre_count`` 1, program 0 first waits for ``flag[pre_index] >=
    pre_target`` (the previous launch's CONSUMED wait, deferred to this call): the signal --
    and, stream-ordered after this kernel, everything the call writes -- comes after it, as
    when the wait was a launch of its own; the other programs' spins wait for peers only."""
    if tl.program_id(0) == 0:
        if pre_count > 0:
            _spin(base_addr, pre_index, pre_target, diag_addr, rank, pre_kind, pre_epoch,
                  timeout_ns, FLAG64, TRAP)
        _signal_all(peers_addr, entry_index, value, world_size, FLAG64)
    _spin(base_addr, first_index, target, diag_addr, rank, kind, epoch, timeout_ns, FLAG64, TRAP)


@triton.jit(do_not_specialize=["addr", "value"])
def _add_kernel(addr: tl.int64, value: tl.int64, FLAG64: tl.constexpr):
    """``*addr += value`` with release semantics at system scope (thread 0 only)."""
    if FLAG64:
        tl.inline_asm_elementwise(ADD64, "=r,l,l", [addr, value], dtype=tl.int32, is_pure=False, pack=1)
    else:
        tl.inline_asm_elementwise(ADD32, "=r,l,r", [addr, value.to(tl.int32)], dtype=tl.int32,
                                  is_pure=False, pack=1)


#: thread 0: ``e = *word + 1; *word = e; *mirror = e`` (operands: $1 word, $2 mirror). One
#: thread, so no two threads can read-modify-write the word; ``ld.relaxed.gpu`` reads the store
#: of the previous advance (an earlier kernel on the stream); the mirror store is system scope
#: so the host sees it without a synchronisation.
ADVANCE = tl.constexpr("{ .reg .pred sy_p; .reg .b32 sy_t, sy_e; mov.u32 sy_t, %tid.x; "
                       "setp.eq.u32 sy_p, sy_t, 0; @sy_p ld.relaxed.gpu.global.b32 sy_e, [$1]; "
                       "@sy_p add.s32 sy_e, sy_e, 1; @sy_p st.relaxed.gpu.global.b32 [$1], sy_e; "
                       "@sy_p st.relaxed.sys.global.b32 [$2], sy_e; mov.u32 $0, 0; }")


@triton.jit(do_not_specialize=["word_addr", "mirror_addr"])
def _advance_kernel(word_addr: tl.int64, mirror_addr: tl.int64):
    """The next epoch of a configuration, on the device (docs/cuda-graphs.md)."""
    tl.inline_asm_elementwise(ADVANCE, "=r,l,l", [word_addr, mirror_addr], dtype=tl.int32,
                              is_pure=False, pack=1)


#: int64 words per program and step of :func:`_stage_kernel` (16 KB of loads in flight each)
STAGE_BLOCK = 2048


@triton.jit
def _stage_kernel(dst, src, n, BLOCK: tl.constexpr):
    """``dst[:n] = src[:n]`` in int64 words, grid-stride: an all-gather's staging copy (or a
    reduce-scatter's result copy) launched with the fused kernel by the bound path
    (:func:`stager`)."""
    step = tl.num_programs(0) * BLOCK
    for start in range(tl.program_id(0) * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(dst + offs, tl.load(src + offs, mask=m), mask=m)


#: elements per program and step of :func:`_sum_kernel`
SUM_BLOCK = 1024


@triton.jit(do_not_specialize=["table_addr", "n_regions", "row", "per_region", "shift"])
def _sum_kernel(table_addr: tl.int64, n_regions: tl.int32, row: tl.int32, per_region: tl.int32,
                shift: tl.int64, DT: tl.constexpr, BLOCK: tl.constexpr):
    """For each region ``r`` of the table: ``out[:n] = round(own + parts[0] + ... +
    parts[n_parts - 1])`` in fp32, rounded once (round to nearest even, as torch's conversion),
    ``out`` at ``own + shift`` bytes (0: ``own`` itself): the ce backend's reduction of the
    chunks pushed into this rank's slots, with the bits of ``backends/ce.reduce_into``. The
    table (int64) holds one row of ``row`` words per region: ``own, n, n_parts, part
    addresses...`` (parts in source order); ``per_region`` programs work on each region,
    grid-stride. Every region of a launch in one launch: one launch per element type and call,
    not one per region.

    ``shift``: a reduce-scatter's result copy folded in -- the sums go to the caller's output
    (``stream_program.CopyShift``), and neither the copy nor its pass over the bytes remains.
    The parts' chunk flags are waited for by a wait kernel before it (``ce_programs``)."""
    pid = tl.program_id(0)
    region = pid // per_region
    base = table_addr.to(tl.pointer_type(tl.int64)) + region.to(tl.int64) * row
    own_addr = tl.load(base)
    own = own_addr.to(tl.pointer_type(DT))
    out = (own_addr + shift).to(tl.pointer_type(DT))
    n = tl.load(base + 1)
    n_parts = tl.load(base + 2).to(tl.int32)
    step = per_region.to(tl.int64) * BLOCK
    for start in range((pid % per_region).to(tl.int64) * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        acc = tl.load(own + offs, mask=m).to(tl.float32)
        for k in range(n_parts):
            part = tl.load(base + 3 + k).to(tl.pointer_type(DT))
            acc += tl.load(part + offs, mask=m).to(tl.float32)
        tl.store(out + offs, acc.to(DT), mask=m)


#: device index -> (C Launch of the staging kernel, programs, words per program step), or
#: False where there is none
_STAGERS: dict = {}


def stager(device: int):
    """The staging kernel of ``device`` for the compiled launch path's copies
    (``Launch.set_stager`` in ``runtime/_fastlaunch.c``), or None without one (direct
    launches or the compiled path off, no driver).

    Why a kernel instead of ``cuMemcpyDtoDAsync``: measured on an H200 host
    (``scripts/gpu_launch_paths.py``), a 512 x 8192 bf16 shard took 16.3 us on the device as a
    memcpy (the copy engine, ~0.5 TB/s) and 8.4 us as this kernel, for the same host time
    (14.4 vs 14.9 us with the GEMM's launch). The staging copy sits in front of the fused
    kernel on the stream: its device time is the op's. The kernel is specialised for 16-byte
    aligned pointers and word counts divisible by 16 (vector loads); other copies stay
    memcpys (the C side checks per call)."""
    hit = _STAGERS.get(device)
    if hit is None:
        try:
            hit = _build_stager(device) or False
        except Exception as e:  # the copies stay memcpys: slower on the device, as correct
            import warnings
            warnings.warn(f"syncopate: the staging kernel could not be built ({type(e).__name__}: "
                          f"{e}); staging copies stay cuMemcpyDtoDAsync")
            hit = False
        _STAGERS[device] = hit
    return hit or None


def _build_stager(device: int):
    if (device is None or not (settings.DIRECT_LAUNCH.get() and settings.FAST_LAUNCH.get())
            or not torch.cuda.is_available()):
        return None
    dev = torch.device("cuda", device)
    with torch.cuda.device(dev):
        d = torch.empty(16, dtype=torch.int64, device=dev)
        s = torch.empty(16, dtype=torch.int64, device=dev)
        ck = _stage_kernel.warmup(d, s, 16, BLOCK=STAGE_BLOCK, grid=(1,), num_warps=4,
                                  num_stages=1)
        if hasattr(ck, "result"):  # Triton's async compile mode hands back a future
            ck = ck.result()
        if ck is None:
            return None
        dl = direct_launch.build(ck, [d, s, 16, STAGE_BLOCK], fixed_scalars=False, device=dev)
    if not dl or dl._c is None or dl.scratch_size:
        return None
    # the compiled kernel owns the module the C launch's function handle lives in
    _COMPILED[("stage", device)] = ck
    programs = 2 * torch.cuda.get_device_properties(dev).multi_processor_count
    return dl._c, programs, STAGE_BLOCK


#: (id of the kernel, device, constexprs) -> CompiledKernel: launches skip the JIT's per-call
#: binding and cache lookup (~50 us of Python per launch on the GPU host, 4-6 launches per ce
#: launch). By ``id``: a JITFunction hashes by its source's cache key, a property recomputed
#: at every hash (~1 us, twice per launch); the kernels are this module's, never collected
_COMPILED: dict = {}
#: the same keys -> DirectLaunch (one cuLaunchKernel per launch, ``direct_launch``), or False
#: where Triton's launcher stays (direct launches off, or the kernel needs it)
_DIRECT: dict = {}


def _launch(fn, n_programs: int, args: tuple, constexprs: dict, stream) -> None:
    """Enqueue ``fn`` (one of the kernels above) on ``stream`` (default: the current one)
    through its compiled kernel: compiled once per device and constexpr set by the JIT itself
    (``warmup``, same cache), then launched directly with every parameter in position."""
    dev = fastlaunch.current_device()
    ck, dl = _compiled(fn, dev, args, constexprs, n_programs)
    if ck is None:  # a jit_cache_hook took over compilation: launch through the JIT
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            fn[(n_programs,)](*args, num_warps=1, num_stages=1, **constexprs)
        return
    handle = stream.cuda_stream if stream is not None else fastlaunch.current_raw_stream(dev)
    full = (*args, *constexprs.values())
    if dl and dl((n_programs, 1, 1), full, handle):
        return
    ck[(n_programs, 1, 1)](*full, stream=handle)


def _compiled(fn, dev: int, args: tuple, constexprs: dict, n_programs: int = 1):
    """``(CompiledKernel or None, DirectLaunch or False)`` of ``fn`` with ``constexprs`` on
    device ``dev``, compiled (and its direct launch built) at the first ask. None: a
    jit_cache_hook took over compilation."""
    key = (id(fn), dev, tuple(constexprs.items()))
    ck = _COMPILED.get(key)
    if ck is None:
        ck = fn.warmup(*args, grid=(n_programs,), num_warps=1, num_stages=1, **constexprs)
        if hasattr(ck, "result"):  # Triton's async compile mode hands back a future
            ck = ck.result()
        if ck is None:
            return None, False
        _COMPILED[key] = ck
    dl = _DIRECT.get(key)
    if dl is None:
        full = (*args, *constexprs.values())
        dl = _DIRECT[key] = direct_launch.build(ck, full, fixed_scalars=False) or False
    return ck, dl


def direct(fn, constexprs: dict):
    """The :class:`~.direct_launch.DirectLaunch` of one of this module's kernels with
    ``constexprs`` on the current device (what a stream program launches,
    ``runtime/stream_program.py``), or None where its launches need Triton's launcher.
    Compiled, as :func:`preload` does, with zeros for its arguments: none is specialised."""
    ck, dl = _compiled(fn, fastlaunch.current_device(), _placeholders(fn), constexprs)
    return dl or None


def _placeholders(fn) -> tuple:
    """Zeros for every non-constexpr parameter of ``fn``: what a compile of one of this
    module's kernels is handed (their parameters are never specialised)."""
    return (0,) * sum(not p.is_constexpr for p in fn.params)



def preload(device=None) -> None:
    """Compile and load every sync kernel (each constexpr variant) on ``device`` now, with
    its direct launch (what its first launch would otherwise build).

    Why: loading a module can require a context synchronisation (CUDA's lazy-loading notes):
    when W virtual ranks share one GPU (loopback), a rank that loads a kernel while another
    rank's kernel spins waiting for it would wait for that spin, which waits for it -- a
    deadlock until the watchdog fires. Loading everything before any rank can spin removes
    the case. Harmless (and cheap) with one process per GPU."""
    dev = torch.device(device) if device is not None else torch.device(
        "cuda", torch.cuda.current_device())
    # the epoch word is an int32 for every backend; the ce reduction's kernel per element type
    variants = [(_advance_kernel, {})] + [(_sum_kernel, {"DT": dt, "BLOCK": SUM_BLOCK})
                                          for dt in (tl.bfloat16, tl.float16, tl.float32)]
    for flag64 in (False, True):
        variants += [(fn, {"FLAG64": flag64}) for fn in (_add_kernel, _signal_all_kernel)]
        variants += [(fn, {"FLAG64": flag64, "TRAP": trap})
                     for fn in (_wait_kernel, _enter_kernel) for trap in (False, True)]
    with torch.cuda.device(dev):
        for fn, constexprs in variants:
            ck, _ = _compiled(fn, dev.index, _placeholders(fn), constexprs)
            if ck is not None:
                ck._init_handles()
    stager(dev.index)  # loaded here too (the bound path's staging kernel)


def wait_flag(flag_addr: int, index: int, target: int, diag_addr: int, *, rank: int, kind: int,
              epoch: int, timeout_ns: int, count: int = 1, flag64: bool = False, trap: bool = False,
              stream=None) -> None:
    """Enqueue a spin until ``flag[index + i] >= target`` for ``i in range(count)``.

    ``flag_addr``: address of word 0 of the flag array (local or a peer's, as an int);
    ``diag_addr``: device address of the watchdog record; ``kind``: ``abi.KIND_*`` recorded on
    timeout. Enqueued on ``stream`` (default: the current stream); returns immediately.
    """
    if count <= 0:
        return
    _launch(_wait_kernel, count,
            (int(flag_addr), int(index), int(target), int(diag_addr), int(rank), int(kind),
             int(epoch), int(timeout_ns)),
            {"FLAG64": bool(flag64), "TRAP": bool(trap)}, stream)


def signal_entry(peers_table, entry_index: int, epoch: int, world_size: int, *, flag64: bool = False,
                 stream=None) -> None:
    """Enqueue ``ENTRY[me] = epoch`` on every rank's flags: ``peers_table`` is the device
    ``[NBUF, W]`` int64 table whose row 0 holds each rank's flag base address;
    ``entry_index`` is ``layout.entry(me)``.

    Why ``st.release.sys`` after ``fence.sc.sys``: the release orders this rank's staging
    (earlier work on the stream: copies into the symmetric buffer, and the previous launch) before
    the flag, so a peer that acquires ``ENTRY[me] >= e`` reads epoch-``e`` data and knows this
    rank's launch ``e - 1`` (its last read of any buffer a peer may now overwrite) is complete.
    """
    _launch(_signal_all_kernel, 1,
            (int(peers_table.data_ptr()), int(entry_index), int(epoch), int(world_size)),
            {"FLAG64": bool(flag64)}, stream)


def enter(peers_table, entry_index: int, epoch: int, world_size: int, wait_args: tuple, *,
          flag64: bool = False, trap: bool = False, stream=None) -> None:
    """:func:`signal_entry` then a :func:`wait_flag` of ``world_size`` flags, as one kernel
    launch: ``wait_args`` are :func:`wait_flag`'s ``(flag_addr, index, target, diag_addr, rank,
    kind, epoch, timeout_ns)``. One launch instead of two on every ce call's host path."""
    _launch(_enter_kernel, world_size,
            (int(peers_table.data_ptr()), int(entry_index), int(epoch), int(world_size),
             *(int(a) for a in wait_args), *NO_PRE_WAIT),
            {"FLAG64": bool(flag64), "TRAP": bool(trap)}, stream)


#: :func:`_enter_kernel`'s ``pre_*`` arguments without a wait before the signal
NO_PRE_WAIT = (0, 0, 0, 0, 0)


def add_flag(remote_flag_addr: int, index: int, value: int, *, flag64: bool = False,
             stream=None) -> None:
    """Enqueue ``flag[index] += value`` (``red.release.sys.global.add``) on a flag array at
    ``remote_flag_addr`` (any rank's, through its P2P address)."""
    es = 8 if flag64 else 4
    _launch(_add_kernel, 1, (int(remote_flag_addr) + int(index) * es, int(value)),
            {"FLAG64": bool(flag64)}, stream)


def advance_epoch(word_addr: int, mirror_addr: int, *, stream=None) -> None:
    """Enqueue ``word += 1`` on a configuration's device epoch word (``word_addr``), copying the
    new value to ``mirror_addr`` (host-pinned, device-mapped: what the host reads to learn the
    epoch of replays it never saw). Enqueued before every fused launch on its stream, so under
    CUDA-graph capture it becomes a node in front of the kernel and each replay runs with the
    next epoch."""
    _launch(_advance_kernel, 1, (int(word_addr), int(mirror_addr)), {}, stream)
