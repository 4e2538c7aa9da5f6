"""The :class:`Communicator`: a torch.distributed process group plus everything a fused kernel
needs from the runtime -- symmetric memory with a registry, flag buffers, the watchdog record,
side streams.

Symmetric memory is torch's (``torch.distributed._symmetric_memory``): ``empty`` allocates on
this rank, ``rendezvous`` (a collective) maps every rank's allocation into every rank's address
space. We keep a registry keyed by the allocation's storage address so that the runtime can tell
whether any tensor -- including a view or a slice -- lives in symmetric memory, and translate
its address to the same element on another rank.

Address translation. ``hdl.buffer_ptrs`` conventions differ across torch versions (a segment
base vs. the tensor's own address; newer versions track an ``offset``), so we never assume
one: at registration we ask ``hdl.get_buffer(r, (1,), uint8, 0)`` for every rank ``r`` and
call its address ``origin[r]``. Since every rank made the same allocation, an element at local
address ``p`` is at ``origin[r] + (p - origin[me])`` on rank ``r``, whatever the convention.

Flag buffers are zeroed once when created, followed by one barrier so that no rank can signal
into a peer's flags before that peer zeroed them; after that flags only grow (epochs), so no
launch ever needs a reset or a barrier (docs/fused-abi.md).

The watchdog record is a small host-pinned int32 tensor. Pinned (``cudaHostAlloc``) memory is
mapped into the device address space under unified addressing; Triton's launcher turns a
tensor argument into a device pointer with ``cuPointerGetAttribute(DEVICE_POINTER)``, which
succeeds for pinned host memory (and fails, with "cannot be accessed from Triton (cpu
tensor?)", only for pageable memory). The host reads it at any time without a device
synchronisation, which is what lets the runtime raise :class:`CommTimeout` at the next launch.

Loopback (docs/loopback.md): created in a virtual rank's thread (``run_loopback``), the
Communicator's group is that thread's :class:`.loopback.LoopbackGroup` and its symmetric memory
backend is :class:`.loopback.LoopbackSymmetricMemory`; only ``_init_symm_mem`` differs, the
rest of this class is shared by both modes.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field

import torch

from .. import backends, dtypes, settings
from ..errors import GraphCaptureError, LaunchError
from . import _cuda, collectives, diag, graphs, sync_kernels
from .loopback import LoopbackSymmetricMemory, warn_unless_eager


#: torch's symmetric-memory backends (``Communicator(symm_backend=...)``): name -> (torch's name
#: for ``set_backend``, one PE and heap per process (so no loopback), the ``symm_mem`` predicate
#: saying this torch build has it)
SYMM_HEAPS = {"cuda": ("CUDA", False, None), "nvshmem": ("NVSHMEM", True, "is_nvshmem_available")}


@dataclass
class SymmetricAllocation:
    """One rendezvoused allocation: the local tensor, its handle, and each rank's origin."""

    tensor: object  # torch.Tensor (kept alive by the registry)
    handle: object  # torch _SymmetricMemory
    origins: list[int]  # address of byte 0 of the allocation on each rank (see module doc)
    nbytes: int
    uint32_views: dict = field(default_factory=dict)  # rank -> flat uint32 view (flag buffers)
    peer_views: dict = field(default_factory=dict)  # (rank, ptr, shape, stride, dtype) -> view

    @property
    def local_origin(self) -> int:
        return self.tensor.data_ptr()


class Communicator:
    """A process group with symmetric memory, flags, a watchdog record and side streams.

    ``Communicator(group=None, *, device=None, symm_backend='cuda'|'nvshmem')``: ``group``
    defaults to the default (WORLD) group, ``device`` to the current CUDA device. The NVSHMEM
    backend is a process-wide choice of torch (``set_backend('NVSHMEM')`` must precede the
    first symmetric allocation), hence a constructor argument and not a per-buffer one.
    """

    #: bumped whenever a symmetric allocation leaves the registry (release, close): launch-time
    #: caches (FusedKernel's fast path and peers tables) that validated a buffer as symmetric
    #: key on it. A new allocation leaves it alone: its address cannot be in any cache yet
    generation = 0

    def __init__(self, group=None, *, device=None, symm_backend: str = "cuda"):
        if symm_backend not in SYMM_HEAPS:
            raise LaunchError(f"symm_backend={symm_backend!r}; choose one of {', '.join(SYMM_HEAPS)}")
        if not collectives.is_initialized():
            raise LaunchError("torch.distributed is not initialized: call "
                              "torch.distributed.init_process_group('nccl', ...) on every rank "
                              "before creating a Communicator (or run the ranks in loopback on "
                              "one GPU: syncopate.runtime.loopback.run_loopback)")
        if not torch.cuda.is_available():
            raise LaunchError("no CUDA device: a Communicator needs one GPU per rank (or one GPU "
                              "for all ranks in loopback)")
        self.group = group if group is not None else collectives.default_group()
        #: W virtual ranks share this process and this GPU (docs/loopback.md)
        self.loopback = collectives.is_loopback(self.group)
        self.rank = collectives.get_rank(self.group)
        self.world_size = collectives.get_world_size(self.group)
        if self.rank < 0:
            raise LaunchError("this process is not a member of the given process group")
        self.group_name = self.group.group_name
        if device is None:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = torch.device(device)
        if self.device.type != "cuda" or self.device.index is None:
            raise LaunchError(f"device must be a CUDA device with an index, got {device!r}")
        torch.cuda.set_device(self.device)
        if self.loopback:
            # torch's kernels too: loaded lazily, one could wait for a peer's spin
            warn_unless_eager(torch.cuda.is_initialized())
            # every module this communicator launches is loaded before any rank can spin
            # (sync_kernels.preload says why)
            sync_kernels.preload(self.device)
        self.symm_backend = symm_backend
        self._closed = False
        self._allocs: dict[int, SymmetricAllocation] = {}  # storage address -> allocation
        self._symm = self._init_symm_mem(symm_backend)
        # The watchdog record: pinned, device-mapped, zero = no timeout recorded.
        #: ``diag_addr``: device address of the record (what the kernels get); equals the host
        #: address under UVA
        self.diag, self.diag_addr = diag.new_record()
        self._diag_state = diag.state_word(self.diag)
        self._streams: dict[str, object] = {}
        self.cache: dict = {}  # per-communicator caches of the ops (symmetric buffers, fused kernels)
        #: FusedKernels launched through this communicator: id -> (weak reference, record)
        self._fused: dict = {}
        self._rebuild_probes()

    # -- symmetric memory -------------------------------------------------------------------

    def _init_symm_mem(self, backend):
        """The symmetric-memory backend: an object with ``empty(shape, dtype=, device=)`` and
        ``rendezvous(tensor, group_name) -> handle`` (``handle.world_size``,
        ``handle.get_buffer(rank, sizes, dtype, storage_offset)``). Everything above it -- the
        registry, address translation, peer views, flags, the watchdog -- is the same code for
        torch's symmetric memory and for loopback, whose backend is
        :class:`.loopback.LoopbackSymmetricMemory` (the other virtual ranks' tensors)."""
        want, per_process, available = SYMM_HEAPS[backend]
        if self.loopback:
            if per_process:
                anywhere = " and ".join(b.name for b in backends.specs() if b.symm_backend is None)
                raise LaunchError(f"symm_backend={backend!r} cannot run in loopback: {want} has "
                                  f"one PE per process and its heap is per process, while loopback "
                                  f"runs every rank in one process; use symm_backend='cuda' "
                                  f"(backends {anywhere}) on one GPU, or one process per GPU for "
                                  f"{backend}")
            return LoopbackSymmetricMemory(self.group)
        import torch.distributed._symmetric_memory as symm_mem

        if available is not None and not getattr(symm_mem, available)():
            raise LaunchError(f"symm_backend={backend!r} but torch reports {want} unavailable: "
                              f"install nvidia-nvshmem-cu13 matching torch, or use "
                              f"symm_backend='cuda'")
        try:
            cur = symm_mem.get_backend(self.device)
        except Exception:  # older torch: no get_backend
            cur = None
        # torch reports its default ("CUDA") before anything is allocated, so a mismatch only
        # means something when setting the backend fails (it is fixed by the first allocation)
        if cur is None or cur.upper() != want:
            try:
                symm_mem.set_backend(want)
            except Exception as e:  # noqa: BLE001 - torch raises RuntimeError/ValueError
                raise LaunchError(
                    f"torch symmetric memory already uses backend {cur} in this process; a "
                    f"Communicator with symm_backend={backend!r} needs {want}. The backend is "
                    f"process-wide and fixed by the first allocation: create every Communicator "
                    f"of a process with the same symm_backend ({e})") from e
        # Deprecated (a no-op) in recent torch, required in older ones: call it quietly.
        enable = getattr(symm_mem, "enable_symm_mem_for_group", None)
        if enable is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                enable(self.group_name)
        return symm_mem

    def _check_open(self):
        if self._closed:
            raise LaunchError("this Communicator was closed; create a new one")

    def empty(self, shape, dtype) -> "torch.Tensor":  # noqa: F821
        """A tensor in symmetric memory on every rank (a collective: every rank must call it
        with the same shape and dtype, in the same order). Refused under CUDA-graph capture
        (:class:`GraphCaptureError`): the rendezvous is a host collective whose result a graph
        cannot hold; allocate before capturing (an eager warm-up call does)."""
        self._check_open()
        if graphs.capturing():
            raise GraphCaptureError(
                "a symmetric allocation (Communicator.empty: a collective rendezvous) was asked "
                "for during CUDA-graph capture; call the op once eagerly with the same shapes "
                "before capturing, so its buffers and flags exist")
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list, torch.Size)) else (shape,)))
        dt = dtypes.torch_dtype(dtype)
        t = self._symm.empty(shape, dtype=dt, device=self.device)
        hdl = self._symm.rendezvous(t, self.group_name)
        self._register(t, hdl)
        return t

    def _register(self, t, hdl) -> SymmetricAllocation:
        if hdl.world_size != self.world_size:
            raise LaunchError(f"rendezvous returned world size {hdl.world_size}, the group has "
                              f"{self.world_size}")
        origins = [hdl.get_buffer(r, (1,), torch.uint8, 0).data_ptr() for r in range(self.world_size)]
        # Shift so that origin[me] is the local tensor's address (the tensor may sit at an
        # offset inside the rendezvoused segment on some torch versions).
        delta = t.data_ptr() - origins[self.rank]
        origins = [o + delta for o in origins]
        nbytes = t.numel() * t.element_size()
        a = SymmetricAllocation(tensor=t, handle=hdl, origins=origins, nbytes=nbytes)
        # no generation bump: the registry holds every registered tensor, so no cached peers
        # table can name this new address; only a release (the address may then come back for
        # another buffer) invalidates them. Bumping here made a fused kernel's peers table
        # miss after any later allocation -- e.g. a CUDA-graph capture of an MoE layer, whose
        # combine allocates after the dispatch's warm-up launch, was refused.
        self._allocs[t.untyped_storage().data_ptr()] = a
        return a

    def release(self, t) -> None:
        """Forget the symmetric allocation holding ``t`` (the registry keeps it alive until
        then). Every rank should release the same buffers; a released buffer must not be used
        by a fused kernel any more."""
        a = self.allocation(t)
        if a is not None:
            self._allocs.pop(a.tensor.untyped_storage().data_ptr(), None)
            self.generation += 1

    def clear_cache(self) -> None:
        """Drop the ops' cached symmetric buffers and fused kernels (and release their flags,
        slots and buffers), e.g. between shapes of a sweep. Collective in spirit: every rank
        should do it at the same point."""
        for v in list(self.cache.values()):
            if isinstance(v, torch.Tensor):
                self.release(v)
            for cfg in getattr(v, "_configs", {}).values():
                for t in [cfg.flags, *cfg.slots.values()]:
                    if t is not None:
                        self.release(t)
        self.cache.clear()

    def allocation(self, t) -> SymmetricAllocation | None:
        """The registered allocation that holds ``t`` (a tensor or a view of one), or None."""
        a = self._allocs.get(t.untyped_storage().data_ptr())
        if a is not None:
            return a
        p = t.data_ptr()
        for a in self._allocs.values():  # a tensor re-wrapping the same memory
            if a.local_origin <= p < a.local_origin + max(a.nbytes, 1):
                return a
        return None

    def is_symmetric(self, t) -> bool:
        """Whether ``t`` (or the tensor it is a view of) was allocated by :meth:`empty`."""
        a = self.allocation(t)
        if a is None:
            return False
        lo, hi = _extent(t)
        return a.local_origin <= lo and hi <= a.local_origin + a.nbytes

    def require_symmetric(self, t, what: str = "tensor", *, contiguous: bool = True):
        """Raise :class:`LaunchError` unless ``t`` is in this communicator's symmetric memory
        (and contiguous when asked); returns the allocation."""
        a = self.allocation(t)
        if a is None or not self.is_symmetric(t):
            raise LaunchError(
                f"{what} is not in symmetric memory of this Communicator: allocate it with "
                f"comm.empty({tuple(t.shape)}, {t.dtype}) (on every rank) and copy your data into "
                f"it, or let the op manage its own symmetric buffer")
        if contiguous and not t.is_contiguous():
            raise LaunchError(f"{what} must be contiguous (got strides {tuple(t.stride())} for shape "
                              f"{tuple(t.shape)}): pass a contiguous view of the symmetric buffer")
        return a

    def peer_bases(self, t) -> list[int]:
        """Address of byte 0 of the allocation that holds ``t``, on each rank."""
        return list(self.require_symmetric(t, contiguous=False).origins)

    def peer_ptrs(self, t) -> list[int]:
        """Address of ``t``'s first element on each rank (= :meth:`peer_bases` when ``t`` is the
        whole allocation). This is what goes into the ``syn_peers`` table."""
        a = self.require_symmetric(t, contiguous=False)
        off = t.data_ptr() - a.local_origin
        return [o + off for o in a.origins]

    def peer_view(self, t, rank: int):
        """A tensor aliasing ``t``'s elements on ``rank`` (same shape, strides, dtype), usable by
        copies and kernels on this rank's device (P2P mapping)."""
        a = self.require_symmetric(t, contiguous=False)
        if not 0 <= rank < self.world_size:
            raise LaunchError(f"rank {rank} out of range for world size {self.world_size}")
        if rank == self.rank:
            return t
        key = (rank, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        v = a.peer_views.get(key)
        if v is not None:
            return v
        if len(a.peer_views) > 4096:  # bounded: views of many different regions
            a.peer_views.clear()
        lo, hi = _extent(t)
        off = lo - a.local_origin
        # get_buffer's storage_offset is relative to get_buffer(r, ..., 0): our origin minus the
        # registration shift.
        base0 = a.handle.get_buffer(rank, (1,), torch.uint8, 0).data_ptr()
        shift = a.origins[rank] - base0
        raw = a.handle.get_buffer(rank, (hi - lo,), torch.uint8, shift + off)
        flat = raw.view(t.dtype)
        # as_strided's offset is absolute in the storage: older torch returns get_buffer views
        # with a storage offset into the whole segment, newer ones a storage starting there.
        v = a.peer_views[key] = flat.as_strided(tuple(t.shape), tuple(t.stride()),
                                                flat.storage_offset())
        return v

    def flag_view_u32(self, flags, rank: int):
        """Flat uint32 view of ``flags`` on ``rank`` (what ``stream_write_value32_`` takes)."""
        a = self.require_symmetric(flags, contiguous=True)
        key = (rank, flags.data_ptr(), flags.numel())
        v = a.uint32_views.get(key)
        if v is None:
            if flags.dtype.itemsize != 4:
                raise LaunchError("stream_write_value32_ needs 32-bit flags (backend 'ce')")
            v = a.uint32_views[key] = self.peer_view(flags, rank).view(-1).view(torch.uint32)
        return v

    # -- flags --------------------------------------------------------------------------------

    def new_flags(self, words: int, dtype="int32"):
        """A zeroed flag array of ``words`` words in symmetric memory (collective). Zeroed once,
        then one barrier: after it, every rank may signal into every other rank's flags."""
        t = self.empty((int(words),), dtypes.torch_dtype(dtype))
        t.zero_()
        # this stream only: in loopback a device-wide sync would also wait for other virtual
        # ranks' kernels, which may spin until this rank launches its own
        torch.cuda.current_stream(self.device).synchronize()
        collectives.barrier(group=self.group, device_ids=[self.device.index])
        return t

    @property
    def colocated(self) -> int:
        """How many ranks share this communicator's GPU: 1, or W in loopback. Persistent
        kernels size their grids by it (:func:`.residency.sm_share`)."""
        return self.world_size if self.loopback else 1

    # -- streams ------------------------------------------------------------------------------

    def stream(self, name: str = "comm"):
        """A named side stream on this device (created once). A
        dedicated stream, not one of torch's pool: a pool stream may be the caller's own
        launch stream, and the ce side stream's copies queued behind the fused kernel that
        waits for them would never run (:func:`._cuda.dedicated_stream`)."""
        s = self._streams.get(name)
        if s is None:
            s = self._streams[name] = _cuda.dedicated_stream(self.device)
        return s

    # -- watchdog -----------------------------------------------------------------------------

    def diag_words(self) -> list[int]:
        """The watchdog record's words as the device left them (no synchronisation needed)."""
        return [int(x) for x in self.diag.tolist()]

    def timeout_record(self):
        """The decoded record, or None if no spin timed out."""
        return diag.read_record(self.diag_words) if self._diag_state() else None

    def register_fused(self, fk) -> None:
        """Let :meth:`check` also read ``fk``'s watchdog record (each FusedKernel has its own,
        so a timeout names the right kernel's flag layout). The kernel is held weakly; its
        record stays probed, and alive, as long as the kernel is; a kernel without one (None)
        leaves no address list: the Gate declines and check() runs."""
        self._fused[id(fk)] = (weakref.ref(fk), getattr(fk, "diag", None))
        weakref.finalize(fk, self._drop_fused, id(fk))
        self._rebuild_probes()

    def probe_addrs(self) -> tuple[int, ...] | None:
        """The host addresses of the state words of every record :meth:`check` reads (this
        communicator's and each live FusedKernel's), or None where one has none (not a
        contiguous CPU tensor). ``_fastlaunch.c``'s Gate reads them as ``_probe_addrs`` on
        every bound launch instead of calling :meth:`check`: a word that is not zero makes it
        decline, and the general path's :meth:`check` raises."""
        return self._probe_addrs

    def _rebuild_probes(self) -> None:
        # check() iterates a tuple rebuilt here: a kernel collected meanwhile (its finalizer
        # edits the dict) cannot disturb the loop, and iterating a WeakSet cost ~2 us per
        # launch (its iteration guard), a tenth of the eager target
        self._fused_refs = tuple(ref for ref, _ in self._fused.values())
        records = [self.diag] + [rec for _, rec in self._fused.values()]
        self._probe_addrs = (None if any(r is None for r in records)
                             else diag.state_addrs(records))

    def _drop_fused(self, key: int) -> None:
        self._fused.pop(key, None)
        self._rebuild_probes()

    def check(self) -> None:
        """Raise :class:`CommTimeout` if a spin of a previous launch timed out: the runtime's own
        record (sync kernels outside fused kernels) and every registered FusedKernel's. The
        record is cleared when raised (so the next timeout can be recorded); the error keeps
        it, and the FusedKernel that timed out refuses further launches."""
        for ref in self._fused_refs:
            fk = ref()
            if fk is not None:
                fk.check()
        rec = self.timeout_record()
        if rec is None:
            return
        self.diag.zero_()
        raise diag.make_timeout(rec, settings.TIMEOUT_S.get())

    # -- teardown -----------------------------------------------------------------------------

    def close(self) -> None:
        """Wait for this device's work, then drop every symmetric allocation and stream this
        communicator holds (their memory returns to torch's symmetric pools). Idempotent. The
        process group itself belongs to the caller and is left alone."""
        if self._closed:
            return
        try:
            torch.cuda.synchronize(self.device)
        finally:
            self.cache.clear()
            self._allocs.clear()
            self.generation += 1
            self._streams.clear()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __repr__(self) -> str:
        return (f"Communicator(rank={self.rank}, world_size={self.world_size}, device={self.device}, "
                f"symm_backend={self.symm_backend!r}, allocations={len(self._allocs)}"
                f"{', loopback' if self.loopback else ''})")


def _extent(t) -> tuple[int, int]:
    """``[lo, hi)`` byte range spanned by tensor ``t``'s elements."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    es = t.element_size()
    lo = t.data_ptr() + sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st < 0) * es
    hi = t.data_ptr() + (sum((s - 1) * st for s, st in zip(t.shape, t.stride()) if st > 0) + 1) * es
    return lo, hi
