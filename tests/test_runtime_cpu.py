"""CPU tests of the runtime: everything that does not need a GPU.

Watchdog record decoding, env settings, flag layout math, grid, epochs, Triton-style argument
specialisation, the ce plan on real schedules, region copy geometry, symmetric-memory registry
and address translation (with a fake rendezvous handle), argument validation errors, the
fallback selection of the ops, and the sync kernels' PTX through ptxas.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from syncopate import abi  # noqa: E402
from syncopate.errors import CommTimeout, CompileError, LaunchError, TimeoutRecord  # noqa: E402
from syncopate.runtime import diag  # noqa: E402
from syncopate.runtime import plan as planmod  # noqa: E402
from syncopate.runtime.fused import (EpochCounter, FusedKernel, bind_args, check_requirements,  # noqa: E402
                                     fused_enabled, specialize, _rows_cols)

# ---------------------------------------------------------------------------- watchdog record


def _words(**kw):
    w = [0] * abi.DIAG_WORDS
    for k, v in kw.items():
        w[getattr(abi, "DIAG_" + k.upper())] = v
    return w


def test_decode_empty_record_is_none():
    assert diag.decode([0] * abi.DIAG_WORDS) is None


def test_decode_incomplete_record_is_none():
    # claimed (state 1) but the epoch word, written last, is not there yet
    assert diag.decode(_words(state=1, rank=1, flag=3, value=2, expected=5, kind=0)) is None


def test_decode_full_record():
    rec = diag.decode(_words(state=1, rank=1, flag=3, value=2, expected=5, kind=abi.KIND_CHUNK,
                             program=7, epoch=5))
    assert (rec.rank, rec.chunk, rec.flag_value, rec.expected, rec.kind, rec.program) == \
        (1, 3, 2, 5, "chunk", 7)
    assert rec.epoch == 5


@pytest.mark.parametrize("kind", sorted(abi.KIND_NAMES))
def test_decode_kind_names(kind):
    rec = diag.decode(_words(state=1, kind=kind, epoch=1))
    assert rec.kind == abi.KIND_NAMES[kind]


def test_decode_negative_and_unsigned_words():
    # torch int32 may come back as negative python ints; uint32 views as large positives
    rec = diag.decode(_words(state=1, value=0xFFFFFFFF, expected=-2, epoch=3))
    assert rec.flag_value == -1 and rec.expected == -2


def test_read_record_waits_for_the_epoch_word():
    seq = [_words(state=1, rank=0, flag=1, kind=0),
           _words(state=1, rank=0, flag=1, kind=0, epoch=4)]
    calls = []

    def words():
        calls.append(1)
        return seq[min(len(calls) - 1, 1)]

    rec = diag.read_record(words, settle_s=1.0)
    assert rec is not None and rec.epoch == 4 and len(calls) >= 2


def test_read_record_gives_up_on_a_claimed_but_unwritten_record():
    rec = diag.read_record(lambda: _words(state=1, rank=1, flag=2, kind=1), settle_s=0.01)
    assert rec is not None and rec.kind == "entry" and rec.rank == 1 and rec.epoch == 0


def test_read_record_none_when_clear():
    assert diag.read_record(lambda: [0] * abi.DIAG_WORDS) is None


def test_make_timeout_names_the_chunk():
    lay = abi.FlagLayout(num_chunks=4, world_size=2)
    rec = TimeoutRecord(rank=0, chunk=lay.chunk(3), flag_value=6, expected=7, kind="chunk", program=2)
    rec.epoch = 7
    err = diag.make_timeout(rec, 10.0, lay)
    assert isinstance(err, CommTimeout) and err.chunk == 3
    assert "chunk 3 never arrived" in str(err) and "CHUNK[3]" in str(err) and "epoch 7" in str(err)


def test_make_timeout_produced_flag_maps_to_chunk():
    lay = abi.FlagLayout(num_chunks=4, world_size=2)
    rec = TimeoutRecord(rank=1, chunk=lay.produced(2), flag_value=0, expected=3, kind="produced")
    err = diag.make_timeout(rec, 1.0, lay)
    assert err.chunk == 2 and "PRODUCED[2]" in str(err)


def test_describe_flag_regions():
    lay = abi.FlagLayout(num_chunks=3, world_size=2)
    assert diag.describe_flag(lay.entry(1), lay).startswith("ENTRY[1]")
    assert diag.describe_flag(lay.consumed, lay).startswith("CONSUMED")
    assert diag.describe_flag(lay.words + 3, lay).endswith("(outside the layout)")
    assert diag.chunk_of(TimeoutRecord(0, lay.entry(0), 0, 1, "entry"), lay) is None


def test_timeout_env():
    assert diag.timeout_s({}) == 10.0
    assert diag.timeout_ns({"SYNCOPATE_TIMEOUT_S": "2.5"}) == 2_500_000_000
    assert diag.timeout_ns({"SYNCOPATE_TIMEOUT_S": "0"}) == 0
    with pytest.raises(LaunchError, match="not a number"):
        diag.timeout_s({"SYNCOPATE_TIMEOUT_S": "ten"})
    with pytest.raises(LaunchError, match="negative"):
        diag.timeout_s({"SYNCOPATE_TIMEOUT_S": "-1"})


def test_timeout_action_env():
    assert diag.timeout_action({}) == "exit"
    assert diag.timeout_action({"SYNCOPATE_TIMEOUT_ACTION": "TRAP"}) == "trap"
    with pytest.raises(LaunchError, match="exit, trap"):
        diag.timeout_action({"SYNCOPATE_TIMEOUT_ACTION": "abort"})


def test_new_record_is_zeroed_and_addressable():
    rec, addr = diag.new_record()
    assert rec.dtype == torch.int32 and rec.numel() == abi.DIAG_WORDS and int(rec.sum()) == 0
    assert addr != 0

# ---------------------------------------------------------------------------- layout, grid, epochs


@pytest.mark.parametrize("C,W", [(1, 2), (2, 2), (8, 2), (6, 4), (7, 8), (0, 2)])
def test_flag_layout_regions_are_disjoint_and_fit(C, W):
    lay = abi.FlagLayout(C, W)
    idx = [lay.chunk(c) for c in range(C)] + [lay.entry(r) for r in range(W)] + [lay.consumed] + \
        [lay.produced(c) for c in range(C)]
    assert len(set(idx)) == len(idx) == 2 * C + W + 1
    assert max(idx) < lay.words and lay.words % 16 == 0 and lay.words - max(idx) <= 16


@pytest.mark.parametrize("backend,cp,grid,want", [
    ("sm", 16, (132,), (148, 1, 1)), ("nvshmem", 8, (10, 2), (18, 2, 1)),
    ("ce", 16, (132,), (132, 1, 1)), ("sm", 0, (5, 6, 7), (5, 6, 7))])
def test_grid(backend, cp, grid, want):
    assert abi.FusedABI(backend, 2, 4, cp, "push").grid(grid) == want


def test_flag_dtype_per_backend():
    assert abi.FusedABI("nvshmem", 2, 1, 1, "push").flag_dtype == "int64"
    assert abi.FusedABI("ce", 2, 1, 0, "pull").flag_dtype == "int32"


def test_abi_json_roundtrip_with_runtime_field():
    a = abi.FusedABI("sm", 2, 4, 16, "push", operands=["a_ptr"], chunk_count={0: 16},
                     signals_entry=True)
    assert abi.FusedABI.from_json(a.to_json()) == a
    d = a.to_json()
    del d["signals_entry"]
    assert abi.FusedABI.from_json(d).signals_entry is False


def test_epochs_start_at_one_and_grow():
    e = EpochCounter()
    assert [e.next() for _ in range(3)] == [1, 2, 3] and e.value == 3


def test_epoch_overflow_is_a_launch_error():
    e = EpochCounter(limit=3)
    assert [e.next(), e.next(), e.next()] == [1, 2, 3]
    with pytest.raises(LaunchError, match="syn_epoch"):
        e.next()
    assert e.value == 3  # unchanged by the refused launch


def test_wrap32_and_trap_timeout_convention():
    from syncopate.runtime.fused import kernel_timeout_ns, wrap32
    assert wrap32(5) == 5 and wrap32(2**32 + 7) == 7 and wrap32(2**31) == -2**31
    # serial-number compare: a wrapped flag still reaches a wrapped target
    flag, target = wrap32(70000 * 32800), wrap32(70000 * 32800)
    assert wrap32(flag - target) >= 0 and wrap32(flag - 1 - target) < 0
    assert kernel_timeout_ns({"SYNCOPATE_TIMEOUT_S": "2"}) == 2_000_000_000
    assert kernel_timeout_ns({"SYNCOPATE_TIMEOUT_S": "2", "SYNCOPATE_TIMEOUT_ACTION": "trap"}) == \
        -2_000_000_000
    assert kernel_timeout_ns({"SYNCOPATE_TIMEOUT_S": "0", "SYNCOPATE_TIMEOUT_ACTION": "trap"}) == 0


def test_fused_enabled_env():
    assert fused_enabled({})
    for off in ("0", "false", "OFF", "no"):
        assert not fused_enabled({"SYNCOPATE": off})
    assert fused_enabled({"SYNCOPATE": "1"})

# ---------------------------------------------------------------------------- specialisation


def _ptr_kernel():
    from syncopate.kernels import matmul_ptr_kernel
    return matmul_ptr_kernel


def _ptr_args(M=256, N=128, K=64, dtype=torch.bfloat16):
    a = torch.empty(M, K, dtype=dtype)
    b = torch.empty(K, N, dtype=dtype)
    c = torch.empty(M, N, dtype=dtype)
    return [a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1), 128, 128, 64, 8]


def test_specialize_like_triton_jit():
    k = _ptr_kernel()
    spec = specialize(k, _ptr_args())
    sig = spec.signature_dict()
    assert sig["a_ptr"] == "*bf16" and sig["M"] == "i32"
    assert sig["stride_ak"] == "constexpr" and spec.constexpr_dict()["stride_ak"] == 1
    assert sig["BLOCK_M"] == "constexpr" and spec.constexpr_dict()["BLOCK_M"] == 128
    attrs = spec.attrs_dict()
    assert (0,) in attrs and attrs[(0,)] == [["tt.divisibility", 16]]
    assert (3,) in attrs  # M = 256 divisible by 16


def test_specialize_ragged_sizes_drop_divisibility():
    k = _ptr_kernel()
    spec = specialize(k, _ptr_args(M=250, N=120, K=72))
    attrs = spec.attrs_dict()
    assert (3,) not in attrs and (4,) not in attrs  # M, N not multiples of 16
    assert specialize(k, _ptr_args(M=250)) != specialize(k, _ptr_args(M=256))


def test_bind_args_positional_keyword_and_options():
    k = _ptr_kernel()
    vals = _ptr_args()
    got, opts = bind_args(k, vals[:-4], dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8,
                                             num_warps=4))
    assert got[-4:] == [128, 128, 64, 8] and opts == {"num_warps": 4}
    with pytest.raises(LaunchError, match="do not match the kernel's parameters"):
        bind_args(k, vals[:3], {})


def test_check_requirements():
    a = abi.FusedABI("sm", 2, 2, 4, "push", requirements={"stride_am": 64})
    check_requirements(a, ["a_ptr", "stride_am"], [None, 64])
    with pytest.raises(LaunchError, match="stride_am=32"):
        check_requirements(a, ["a_ptr", "stride_am"], [None, 32])

# ---------------------------------------------------------------------------- ce plan


def _ag(W=2, split=1, mode="pull", order="swizzle", shape=(64, 32)):
    from syncopate.schedule.templates import all_gather
    return all_gather(shape, "bf16", W, dim=0, order=order, mode=mode, split=split)


def _rs(W=2, split=1, mode="push", order="swizzle", shape=(64, 32)):
    from syncopate.schedule.templates import reduce_scatter
    return reduce_scatter(shape, "bf16", W, dim=0, order=order, mode=mode, split=split)


@pytest.mark.parametrize("split", [1, 2, 4])
def test_ce_plan_all_gather_pull(split):
    s = _ag(split=split)
    for me in range(2):
        p = planmod.build_ce_plan(s, me)
        assert [st.dst for st in p.steps] == [me] * split
        assert all(st.mode == "pull" and st.src == 1 - me and not st.reduce for st in p.steps)
        assert p.consumed_adds == {1 - me: split} and p.reads_of_me == split
        # the pieces tile the peer's shard, in step order
        rows = [(st.slices[0].start, st.slices[0].stop) for st in p.steps]
        assert rows[0][0] == (1 - me) * 32 and rows[-1][1] == (2 - me) * 32
        assert all(a[1] == b[0] for a, b in zip(rows, rows[1:]))
    assert planmod.reads_per_src(s) == {0: split, 1: split}


def test_ce_plan_all_gather_push():
    p = planmod.build_ce_plan(_ag(mode="push", split=2), 0)
    assert [st.src for st in p.steps] == [0, 0] and p.consumed_adds == {} and p.reads_of_me == 0
    assert not any(st.wait_kernel for st in p.steps)  # staged input, not kernel output


def test_ce_plan_reduce_scatter_waits_for_produced():
    s = _rs(split=2)
    p = planmod.build_ce_plan(s, 1, produced_count={c.id: 3 for c in s.chunks})
    assert all(st.src == 1 and st.reduce for st in p.steps)
    assert all(st.wait_produced == 3 for st in p.steps)
    assert [st.src for st in p.reduce_in] == [0, 0] and p.reduce_tensors == ("C",)


def test_ce_plan_reduce_scatter_without_produced_waits_for_kernel():
    p = planmod.build_ce_plan(_rs(), 0)
    assert all(st.wait_kernel and not st.wait_produced for st in p.steps)


def test_ce_plan_refuses_forwarding():
    with pytest.raises(LaunchError, match="backend='sm'"):
        for me in range(4):
            planmod.build_ce_plan(_ag(W=4, order="ring"), me)


def test_ce_plan_refuses_pulling_peer_produced_data():
    s = _rs(mode="pull")
    with pytest.raises(LaunchError, match="mode='push'"):
        planmod.build_ce_plan(s, 0, produced_count={c.id: 1 for c in s.chunks})


def test_ce_plan_rank_out_of_range():
    with pytest.raises(LaunchError, match="outside"):
        planmod.build_ce_plan(_ag(), 2)


def test_schedule_key_is_stable_and_distinguishes():
    assert planmod.schedule_key(_ag()) == planmod.schedule_key(_ag())
    assert planmod.schedule_key(_ag(split=2)) != planmod.schedule_key(_ag())

# ---------------------------------------------------------------------------- copy geometry


def test_rows_cols_contiguous_and_column_block():
    m = torch.empty(8, 16, dtype=torch.bfloat16)
    n = torch.empty(8, 16, dtype=torch.bfloat16)
    assert _rows_cols(m[2:4], n[4:6]) == (1, 2 * 16 * 2, 2 * 16 * 2, 2 * 16 * 2)
    assert _rows_cols(m[:, 4:8], n[:, 0:4]) == (8, 8, 32, 32)
    assert _rows_cols(m[:, 4:8], n[:, 0:5]) is None
    t = torch.empty(2, 8, 16)
    assert _rows_cols(t[:, :, 0:4], torch.empty(2, 8, 4)) is None  # two strided levels

# ---------------------------------------------------------------------------- symmetric registry


class _FakeHandle:
    """Stands in for torch's _SymmetricMemory: every rank's allocation is a CPU byte buffer."""

    def __init__(self, bufs):
        self.bufs = bufs
        self.world_size = len(bufs)

    def get_buffer(self, rank, sizes, dtype, storage_offset=0):
        b = self.bufs[rank]
        n = 1
        for s in sizes:
            n *= s
        es = torch.empty((), dtype=dtype).element_size()
        return b.view(dtype)[storage_offset: storage_offset + n].view(tuple(sizes)) if es == 1 \
            else b.view(dtype)[storage_offset: storage_offset + n].view(tuple(sizes))


def _fake_comm(W=2, rank=0):
    from syncopate.runtime.communicator import Communicator
    c = Communicator.__new__(Communicator)
    c.rank, c.world_size, c.device = rank, W, torch.device("cpu")
    c.group_name, c.group, c.symm_backend = "fake", None, "cuda"
    c._allocs, c._closed, c.cache, c._streams = {}, False, {}, {}
    import weakref
    c._fused = weakref.WeakSet()
    c.diag, c.diag_addr = diag.new_record()

    def empty(shape, dtype):
        shape = tuple(shape)
        nbytes = torch.empty(shape, dtype=dtype).numel() * torch.empty((), dtype=dtype).element_size()
        bufs = [torch.zeros(nbytes, dtype=torch.uint8) for _ in range(W)]
        t = bufs[rank].view(dtype).view(shape)
        c._register(t, _FakeHandle(bufs))
        return t
    c.empty = empty
    return c


def test_registry_views_are_symmetric():
    c = _fake_comm()
    A = c.empty((8, 4), torch.float32)
    assert c.is_symmetric(A) and c.is_symmetric(A[2:4]) and c.is_symmetric(A[:, 1])
    assert not c.is_symmetric(torch.zeros(8, 4))


def test_peer_ptrs_and_views_translate_offsets():
    c = _fake_comm(rank=0)
    A = c.empty((8, 4), torch.float32)
    a = c.allocation(A)
    rows = A[2:4]
    assert c.peer_ptrs(rows)[1] == a.origins[1] + 2 * 4 * 4
    assert c.peer_bases(rows) == a.origins
    peer = c.peer_view(rows, 1)
    peer.fill_(7.0)
    other = a.handle.bufs[1].view(torch.float32).view(8, 4)
    assert torch.all(other[2:4] == 7.0) and torch.all(other[:2] == 0) and torch.all(A == 0)
    col = c.peer_view(A[:, 1:3], 1)
    assert col.shape == (8, 2) and col.stride() == (4, 1)
    col.fill_(1.0)
    assert torch.all(other[:, 1:3][4:] == 1.0)


def test_require_symmetric_errors_say_what_to_do():
    c = _fake_comm()
    with pytest.raises(LaunchError, match=r"comm.empty\(\(3, 3\)"):
        c.require_symmetric(torch.zeros(3, 3), "operand a_ptr")
    A = c.empty((4, 4), torch.float32)
    with pytest.raises(LaunchError, match="must be contiguous"):
        c.require_symmetric(A.t(), "operand a_ptr")
    with pytest.raises(LaunchError, match="out of range"):
        c.peer_view(A, 5)


def test_closed_communicator_refuses():
    c = _fake_comm()
    c._closed = True
    with pytest.raises(LaunchError, match="closed"):
        c._check_open()

# ---------------------------------------------------------------------------- FusedKernel validation


def test_fuse_rejects_wrong_world_size():
    c = _fake_comm(W=2)
    with pytest.raises(LaunchError, match="world_size=2"):
        FusedKernel(_ptr_kernel(), _ag(W=4), operand="a_ptr", backend="ce", comm=c)


def test_fuse_rejects_unknown_backend_and_operand():
    c = _fake_comm()
    with pytest.raises(LaunchError, match="choose one of"):
        FusedKernel(_ptr_kernel(), _ag(), operand="a_ptr", backend="tcp", comm=c)
    with pytest.raises(LaunchError, match="not a parameter"):
        FusedKernel(_ptr_kernel(), _ag(), operand="x_ptr", backend="ce", comm=c)
    with pytest.raises(LaunchError, match="symm_backend='nvshmem'"):
        FusedKernel(_ptr_kernel(), _ag(), operand="a_ptr", backend="nvshmem", comm=c)
    with pytest.raises(LaunchError, match="comm=Communicator"):
        FusedKernel(_ptr_kernel(), _ag(), operand="a_ptr", backend="ce", comm=None)


def _fk_values(c, A, N=32):
    b = torch.empty(A.shape[1], N, dtype=A.dtype)
    out = torch.empty(A.shape[0], N, dtype=A.dtype)
    return [A, b, out, A.shape[0], N, A.shape[1], A.stride(0), A.stride(1), b.stride(0),
            b.stride(1), out.stride(0), out.stride(1), 128, 128, 64, 8]


def test_validate_operand_shape_dtype_symmetry():
    c = _fake_comm()
    fk = FusedKernel(_ptr_kernel(), _ag(shape=(64, 32)), operand="a_ptr", backend="ce", comm=c)
    good = c.empty((64, 32), torch.bfloat16)
    assert fk.validate(_fk_values(c, good))["a_ptr"] is good
    with pytest.raises(LaunchError, match=r"shape \(32, 32\).*\(64, 32\)"):
        fk.validate(_fk_values(c, good[:32]))
    with pytest.raises(LaunchError, match="float16.*bf16"):
        fk.validate(_fk_values(c, c.empty((64, 32), torch.float16)))
    with pytest.raises(LaunchError, match="not in symmetric memory"):
        fk.validate(_fk_values(c, torch.empty(64, 32, dtype=torch.bfloat16)))


def test_validate_names_the_other_process_group():
    from syncopate.runtime import fused as fmod
    c1, c2 = _fake_comm(), _fake_comm()
    c2.group_name = "tp-group"
    fmod._register_comm(c1)
    fmod._register_comm(c2)
    fk = FusedKernel(_ptr_kernel(), _ag(shape=(64, 32)), operand="a_ptr", backend="ce", comm=c1)
    A2 = c2.empty((64, 32), torch.bfloat16)
    with pytest.raises(LaunchError, match="another Communicator.*tp-group"):
        fk.validate(_fk_values(c1, A2))


def test_poisoned_kernel_refuses_and_check_raises_once():
    c = _fake_comm()
    fk = FusedKernel(_ptr_kernel(), _ag(), operand="a_ptr", backend="ce", comm=c)
    c.register_fused(fk)
    words = _words(state=1, rank=0, flag=1, value=0, expected=3, kind=abi.KIND_CHUNK, epoch=3)
    fk.diag.copy_(torch.tensor(words, dtype=torch.int32))
    with pytest.raises(CommTimeout, match="chunk 1 never arrived"):
        c.check()
    assert int(fk.diag.abs().sum()) == 0  # cleared, error kept on the kernel
    with pytest.raises(LaunchError, match="cannot be reused"):
        fk.launch((1,), _fk_values(c, c.empty((64, 32), torch.bfloat16)))

# ---------------------------------------------------------------------------- op fallback selection


def test_ag_gemm_fallback_selection(monkeypatch):
    import importlib
    mod = importlib.import_module("syncopate.ops.ag_gemm")
    c = _fake_comm()
    calls = []
    monkeypatch.setattr(mod, "ag_gemm_reference", lambda *a, **k: calls.append("ref") or "ref")
    monkeypatch.setattr(mod, "ag_gemm_fused_kernel",
                        lambda *a, **k: calls.append(("fused", k["backend"], k["split"],
                                                      k["comm_programs"])) or (_ for _ in ()).throw(
                            RuntimeError("stop")))
    a = torch.empty(32, 64, dtype=torch.bfloat16)
    b = torch.empty(64, 48, dtype=torch.bfloat16)
    monkeypatch.setenv("SYNCOPATE", "0")
    assert mod.ag_gemm(a, b, c) == "ref"
    monkeypatch.setenv("SYNCOPATE", "1")
    assert mod.ag_gemm(a, b, c, fused=False) == "ref"
    with pytest.raises(RuntimeError, match="stop"):
        mod.ag_gemm(a, b, c, backend="sm", split=4)
    assert calls[-1][:3] == ("fused", "sm", 4) and calls[-1][3] > 0  # cost model picks programs
    with pytest.raises(RuntimeError, match="stop"):
        mod.ag_gemm(a, b, c, backend="ce", comm_programs=8)
    assert calls[-1][1] == "ce" and calls[-1][3] == 0  # ce has no comm programs


def test_gemm_rs_fallback_selection(monkeypatch):
    import importlib
    mod = importlib.import_module("syncopate.ops.gemm_rs")
    c = _fake_comm()
    monkeypatch.setattr(mod, "gemm_rs_reference", lambda *a, **k: "ref")
    monkeypatch.setenv("SYNCOPATE", "0")
    a = torch.empty(64, 32, dtype=torch.bfloat16)
    b = torch.empty(32, 48, dtype=torch.bfloat16)
    assert mod.gemm_rs(a, b, c) == "ref"


def test_op_argument_errors():
    from syncopate.ops import ag_gemm, gemm_rs
    c = _fake_comm()
    bf = torch.bfloat16
    with pytest.raises(LaunchError, match="b.shape\\[0\\] must be 64"):
        ag_gemm(torch.empty(8, 64, dtype=bf), torch.empty(32, 8, dtype=bf), c)
    with pytest.raises(LaunchError, match="cast one of them"):
        ag_gemm(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=torch.float16), c)
    with pytest.raises(LaunchError, match="multiple of the world size"):
        gemm_rs(torch.empty(7, 64, dtype=bf), torch.empty(64, 8, dtype=bf), c)
    d = _fake_comm()
    d.device = torch.device("cuda", 1)
    with pytest.raises(LaunchError, match="move it"):
        ag_gemm(torch.empty(8, 64, dtype=bf), torch.empty(64, 8, dtype=bf), d)


def test_choose_defaults_and_overrides():
    from syncopate.ops import _gemm
    assert _gemm.choose("ag_gemm", "sm", 8192, 4096, 4096, 2, "bf16", 4, 8) == (4, 8)
    s, cp = _gemm.choose("ag_gemm", "ce", 8192, 4096, 4096, 2, "bf16", None, None)
    assert cp == 0 and s >= 1
    s, cp = _gemm.choose("ag_gemm", "sm", 8192, 4096, 4096, 2, "bf16", None, None)
    assert cp > 0

# ---------------------------------------------------------------------------- sync kernels through ptxas


def _compile(fn, sig, cx):
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    return triton.compile(ASTSource(fn=fn, signature=sig, constexprs=cx),
                          target=GPUTarget("cuda", 90, 32), options=dict(num_warps=1, num_stages=1))


_WAIT_SIG = {"base_addr": "i64", "first_index": "i32", "target": "i64", "diag_addr": "i64",
             "rank": "i32", "kind": "i32", "epoch": "i32", "timeout_ns": "i64",
             "FLAG64": "constexpr", "TRAP": "constexpr"}


@pytest.mark.parametrize("flag64", [False, True])
@pytest.mark.parametrize("trap", [False, True])
def test_wait_kernel_compiles_with_watchdog(flag64, trap):
    from syncopate.runtime import sync_kernels as sk
    ck = _compile(sk._wait_kernel, _WAIT_SIG, {"FLAG64": flag64, "TRAP": trap})
    ptx = ck.asm["ptx"]
    width = "b64" if flag64 else "b32"
    assert f"ld.acquire.sys.global.{width}" in ptx and "%globaltimer" in ptx
    assert f"sub.s{width[1:]}" in ptx  # serial-number compare (flags may wrap)
    assert "atom.acq_rel.sys.global.cas.b32" in ptx and "fence.sc.sys" in ptx
    # the epoch word (offset 28) is written last, with release
    assert ptx.index("fence.sc.sys") < ptx.index("st.release.sys.global.b32")
    assert ("trap;" in ptx) == trap
    assert len(ck.asm["cubin"]) > 0


@pytest.mark.parametrize("flag64", [False, True])
def test_signal_and_add_kernels_compile(flag64):
    from syncopate.runtime import sync_kernels as sk
    w = "b64" if flag64 else "b32"
    ck = _compile(sk._signal_all_kernel, {"peers_addr": "i64", "index": "i32", "value": "i64",
                                          "world_size": "i32", "FLAG64": "constexpr"},
                  {"FLAG64": flag64})
    assert f"st.release.sys.global.{w}" in ck.asm["ptx"] and "%tid.x" in ck.asm["ptx"]
    ck = _compile(sk._add_kernel, {"addr": "i64", "value": "i64", "FLAG64": "constexpr"},
                  {"FLAG64": flag64})
    assert "red.release.sys.global.add" in ck.asm["ptx"]

# ---------------------------------------------------------------------------- compiler integration


@pytest.mark.parametrize("backend,kern", [("ce", "tma"), ("sm", "ptr")])
def test_fused_compile_matches_runtime_launch_contract(backend, kern):
    """The runtime's specialisation goes through syncopate.compile (CPU, sm_90 target) and the
    compiled launcher takes exactly: user params (constexprs in position) + the ABI extras."""
    pytest.importorskip("xdsl")
    from syncopate.kernels import kernel_fn
    from syncopate.ops._gemm import resolve_config
    c = _fake_comm()
    M, K, N = 400, 136, 328
    sched = _ag(shape=(M, K), split=2, mode="pull" if backend == "ce" else "push")
    cfg = resolve_config(kern, M, N, K, torch.bfloat16)
    fn = kernel_fn(kern)
    fk = FusedKernel(fn, sched, operand="a_ptr", backend=backend,
                     comm_programs=16 if backend == "sm" else None, comm=c, target=("cuda", 90),
                     **cfg.options())
    A = c.empty((M, K), torch.bfloat16)
    b = torch.empty(K, N, dtype=torch.bfloat16)
    out = torch.empty(M, N, dtype=torch.bfloat16)
    vals = dict(a_ptr=A, b_ptr=b, c_ptr=out, M=M, N=N, K=K, stride_am=A.stride(0), stride_ak=1,
                stride_bk=b.stride(0), stride_bn=1, stride_cm=out.stride(0), stride_cn=1,
                **cfg.constexprs(kern, 116))
    values, _ = bind_args(fn, [vals[n] for n in fn.arg_names], {})
    fk.validate(values)
    fc = fk._compile(specialize(fn, values), dict(fk.compile_options))
    a = fc.abi
    assert a.backend == backend and a.num_chunks == 4 and a.world_size == 2
    assert list(a.operands) == ["a_ptr"]
    sig = list(fc.kernel.src.signature)
    assert sig[:len(fn.arg_names)] == list(fn.arg_names)
    assert tuple(sig[len(fn.arg_names):]) == tuple(n for n, _ in abi.extra_params(backend))
    assert a.grid((10,)) == ((10 + 16, 1, 1) if backend == "sm" else (10, 1, 1))
    check_requirements(a, list(fn.arg_names), values)
    if backend == "ce":
        assert set(a.chunk_count.values()) == {1}  # ce writes the epoch itself


def test_release_and_clear_cache_drop_registrations():
    c = _fake_comm()
    A = c.empty((4, 4), torch.float32)
    c.cache["buf"] = A
    B = c.empty((2, 2), torch.float32)
    c.release(B[1:])
    assert not c.is_symmetric(B)
    c.clear_cache()
    assert not c.is_symmetric(A) and c.cache == {}

# ---------------------------------------------------------------------------- launch fast path


def _fast_path_fixture(monkeypatch, backend="sm"):
    """A FusedKernel on the fake communicator whose device side is recorded instead of run;
    counts how often the slow path (validate, specialize) runs."""
    import contextlib

    from syncopate.runtime import fused as fmod
    c = _fake_comm()
    fk = FusedKernel(_ptr_kernel(), _ag(shape=(64, 32)), operand="a_ptr", backend=backend, comm=c)
    a = abi.FusedABI(backend, 2, 2, 4 if backend == "sm" else 0, "push", operands=["a_ptr"],
                     signals_entry=True)
    calls = {"validate": 0, "specialize": 0, "config": 0, "launched": []}
    real_validate, real_specialize = fk.validate, fmod.specialize

    def validate(values):
        calls["validate"] += 1
        return real_validate(values)

    def spec(kernel, values):
        calls["specialize"] += 1
        return real_specialize(kernel, values)

    def config(spec_, options):
        calls["config"] += 1
        # like the real one: the first launch of a configuration allocates symmetric flags
        return fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32),
                            flag_addrs=[0, 0])
    monkeypatch.setattr(fk, "validate", validate)
    monkeypatch.setattr(fmod, "specialize", spec)
    monkeypatch.setattr(fk, "_config", config)
    monkeypatch.setattr(fk, "_peers_table", lambda cfg, ops: ("peers", ops["a_ptr"].data_ptr()))
    monkeypatch.setattr(fk.launcher, "launch", lambda cfg, g, args, S, e, peers, ops:
                        calls["launched"].append((g, args, e, peers)))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "S")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: c.device.index)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    return c, fk, calls


def test_launch_fast_path_skips_validation_for_a_repeated_call(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = _fk_values(c, A)
    assert fk.launch((3,), vals) == 1
    assert fk.launch((3,), vals) == 2
    vals2 = _fk_values(c, A)  # new b/out tensors, same dtype and alignment: still a hit
    assert fk.launch((3,), vals2) == 3
    assert calls["validate"] == 1 and calls["specialize"] == 1
    vals3 = list(vals2)
    vals3[2] = torch.empty(vals2[2].numel() + 8, dtype=vals2[2].dtype)[1:1 + vals2[2].numel()]
    fk.launch((3,), vals3)  # an output 2 bytes off 16-byte alignment: Triton specialises on it
    assert calls["validate"] == 2 and calls["specialize"] == 2
    (g1, args1, e1, p1), (g2, args2, e2, p2), (_, args3, _, _), _ = calls["launched"]
    assert g1 == g2 == (3 + 4, 1, 1) and (e1, e2) == (1, 2) and p1 == p2
    assert args2[:len(vals)] == vals and args2[len(vals):][-2:] == [2, args2[-1]]  # epoch 2
    assert args3[1] is vals2[1]  # the call's own tensors are launched, not cached ones


def test_launch_fast_path_misses_on_any_change(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = _fk_values(c, A)
    fk.launch((3,), vals)
    fk.launch((4,), vals)  # grid
    v = list(vals)
    v[-1] = 4  # GROUP_M constexpr
    fk.launch((3,), v)
    fk.launch((3,), vals[:-1], {"GROUP_M": 8})  # keywords: always the slow path
    fk.launch((3,), vals[:-1], {"GROUP_M": 8})
    assert calls["validate"] == 5
    c.empty((8,), torch.float32)  # the symmetric registry changed: revalidate
    fk.launch((3,), vals)
    assert calls["validate"] == 6
    fk.launch(lambda meta: (meta["M"] // 32,), vals)  # callable grid: evaluated per call
    fk.launch(lambda meta: (meta["M"] // 16,), vals)
    assert calls["validate"] == 7  # one miss for the first callable grid, then hits
    assert [g for g, *_ in calls["launched"]][-2:] == [(2 + 4, 1, 1), (4 + 4, 1, 1)]


def test_epochs_count_launches_per_configuration(monkeypatch):
    """Each configuration has its own flags, whose chunk counts grow by one launch's worth per
    launch *of that configuration*: alternating two specialisations must give each 1, 2, ...
    (a shared counter made the second configuration wait for a count its flags never reach --
    found on the GPU by the sm withheld-chunk test, which adds a configuration mid-run)."""
    from syncopate.runtime import fused as fmod
    c, fk, calls = _fast_path_fixture(monkeypatch)
    made = {}
    a = abi.FusedABI("sm", 2, 2, 4, "push", operands=["a_ptr"], signals_entry=True)

    def config(spec_, options):
        if spec_ not in made:
            made[spec_] = fmod._Config(compiled=None, abi=a, flag_addrs=[0, 0],
                                       flags=c.empty((a.layout.words,), torch.int32))
        return made[spec_]
    monkeypatch.setattr(fk, "_config", config)
    A = c.empty((64, 32), torch.bfloat16)
    v1 = _fk_values(c, A)
    v2 = list(v1)
    v2[-1] = 4  # another GROUP_M: another specialisation
    epochs = [fk.launch((3,), v) for v in (v1, v2, v1, v2, v1)]
    assert epochs == [1, 1, 2, 2, 3] and fk.epoch == 3 and len(made) == 2
    assert [args[-2] for _, args, _, _ in calls["launched"]] == epochs  # syn_epoch passed


def test_launch_fast_path_still_refuses_a_non_symmetric_operand(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    fk.launch((3,), _fk_values(c, A))
    c.release(A)
    with pytest.raises(LaunchError, match="not in symmetric memory"):
        fk.launch((3,), _fk_values(c, A))

def test_warmup_prepares_without_launching_and_the_launch_then_hits(monkeypatch):
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = _fk_values(c, A)
    fk.warmup((3,), *vals)
    assert calls["config"] == 1 and calls["launched"] == [] and fk.epoch == 0
    fk.launch((3,), vals)
    assert calls["validate"] == 1 and calls["config"] == 1 and fk.epoch == 1


def test_withheld_chunks_are_compiled_into_sm_kernels_and_skipped_at_run_time_on_ce(monkeypatch):
    """sm: test_skip_chunks is a compile option (withhold_chunks), part of the configuration
    key, and setting it drops the fast path; ce: nothing is compiled differently."""
    c, fk, calls = _fast_path_fixture(monkeypatch)
    A = c.empty((64, 32), torch.bfloat16)
    vals = _fk_values(c, A)
    fk.launch((3,), vals)
    fk.test_skip_chunks = {1}
    assert fk.test_skip_chunks == frozenset({1})
    fk.launch((3,), vals)
    assert calls["validate"] == 2  # the fast path of the unwithheld configuration was dropped
    seen = []
    fk._compile_fn = lambda kernel, **kw: seen.append(kw) or "compiled"
    fk.target = ("cuda", 90)
    from syncopate.runtime import fused as fmod
    spec = fmod.specialize(fk.kernel, vals)
    for backend, want in (("sm", (1,)), ("nvshmem", (1,)), ("ce", None)):
        fk.backend = backend
        assert fk._compile(spec, {}) == "compiled"
        assert seen[-1].get("withhold_chunks") == want


# ---------------------------------------------------------------------------- ce preparation


def _ce_config(c, sched, fk, produced):
    from syncopate.runtime import fused as fmod
    a = abi.FusedABI("ce", 2, planmod.num_chunks(sched), 0, "none", operands=list(fk.operands))
    cfg = fmod._Config(compiled=None, abi=a, flags=c.empty((a.layout.words,), torch.int32))
    cfg.ce_plan = planmod.build_ce_plan(sched, c.rank,
                                        {i: 1 for i in range(a.num_chunks)} if produced else {})
    for tname in cfg.ce_plan.reduce_tensors:
        spec = planmod.tensor_spec(sched, tname)
        cfg.slots[tname] = c.empty((2,) + tuple(spec.shape), torch.float32)
    return cfg


def test_ce_prepared_pull_copies_the_peer_rows():
    c = _fake_comm(rank=0)
    sched = _ag(shape=(8, 4), split=2, mode="pull")
    fk = FusedKernel(_ptr_kernel(), sched, operand="a_ptr", backend="ce", comm=c)
    cfg = _ce_config(c, sched, fk, produced=False)
    A = c.empty((8, 4), torch.float32)
    peer = c.allocation(A).handle.bufs[1].view(torch.float32).view(8, 4)
    peer.copy_(torch.arange(32, dtype=torch.float32).view(8, 4))
    prep = fk.launcher.prepare(cfg, {"a_ptr": A})
    assert fk.launcher.prepare(cfg, {"a_ptr": A}) is prep  # once per buffer set
    c.empty((4,), torch.float32)  # the registry changed (a reallocation could alias addresses)
    assert fk.launcher.prepare(cfg, {"a_ptr": A}) is not prep
    prep = fk.launcher.prepare(cfg, {"a_ptr": A})
    assert [st.src for st, _, _ in prep.steps] == [1, 1] and prep.reductions == []
    for st, copy, flag_view in prep.steps:
        assert flag_view.dtype == torch.uint32 and flag_view.numel() == cfg.abi.layout.words
        copy(None)
    assert torch.equal(A[4:], peer[4:]) and torch.all(A[:4] == 0)


def test_ce_prepared_reduce_scatter_pushes_into_the_owner_slot_and_sums():
    c = _fake_comm(rank=0)
    sched = _rs(shape=(8, 4), split=1, mode="push")
    fk = FusedKernel(_ptr_kernel(), sched, operand="c_ptr", backend="ce", comm=c)
    cfg = _ce_config(c, sched, fk, produced=True)
    C = c.empty((8, 4), torch.float32)
    C.copy_(torch.arange(32, dtype=torch.float32).view(8, 4))
    prep = fk.launcher.prepare(cfg, {"c_ptr": C})
    (st, copy, _), = prep.steps
    assert (st.src, st.dst) == (0, 1)
    copy(None)
    peer_slots = c.allocation(cfg.slots["C"]).handle.bufs[1].view(torch.float32).view(2, 8, 4)
    assert torch.equal(peer_slots[0][4:], C[4:])  # rank 1's slot for source 0 holds our rows
    (own, parts), = prep.reductions
    assert own.data_ptr() == C.data_ptr() and len(parts) == 1
    parts[0].fill_(1.0)  # what rank 1 pushed into our slot[1]
    acc = own.float()
    acc += parts[0].float()
    own.copy_(acc)
    assert torch.equal(C[:4], torch.arange(16, dtype=torch.float32).view(4, 4) + 1)

# ---------------------------------------------------------------------------- sync-kernel launches


def test_sync_kernels_launch_compiled_kernels_directly(monkeypatch):
    """Each sync kernel compiles once per device and constexpr set (through the JIT's warmup)
    and is then launched as a CompiledKernel with every parameter in position, on the given
    stream (no JIT binding per launch)."""
    from syncopate.runtime import sync_kernels as sk
    launches, warmups = [], []

    class FakeCompiled:
        def __init__(self, name):
            self.name = name

        def __getitem__(self, grid):
            def run(*args, stream=None):
                launches.append((self.name, grid, args, stream))
            return run

    class FakeJit:
        def __init__(self, name):
            self.name = name

        def warmup(self, *args, grid, **kw):
            warmups.append((self.name, grid, kw))
            return FakeCompiled(self.name)

    class Stream:
        cuda_stream = 1234

    monkeypatch.setattr(sk, "_COMPILED", {})
    for n in ("_wait_kernel", "_signal_all_kernel", "_add_kernel"):
        monkeypatch.setattr(sk, n, FakeJit(n))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    for e in (1, 2):
        sk.wait_flag(4096, 3, e, 8192, rank=1, kind=2, epoch=e, timeout_ns=10, count=2)
    sk.wait_flag(4096, 3, 1, 8192, rank=1, kind=2, epoch=1, timeout_ns=10, trap=True)
    sk.add_flag(1 << 40, 5, 7, flag64=True, stream=Stream())
    peers = torch.zeros(2, dtype=torch.int64)
    sk.signal_entry(peers, 4, 9, 2)
    assert [w[0] for w in warmups] == ["_wait_kernel", "_wait_kernel", "_add_kernel",
                                       "_signal_all_kernel"]  # once per constexpr set
    assert warmups[0][2] == {"num_warps": 1, "num_stages": 1, "FLAG64": False, "TRAP": False}
    name, grid, args, stream = launches[1]
    assert (name, grid, stream) == ("_wait_kernel", (2, 1, 1), 1234)
    assert args == (4096, 3, 2, 8192, 1, 2, 2, 10, False, False)  # constexprs last, in order
    assert launches[3][2] == ((1 << 40) + 5 * 8, 7, True)
    assert launches[4][2] == (peers.data_ptr(), 4, 9, 2, False) and launches[4][1] == (1, 1, 1)
    sk.wait_flag(0, 0, 1, 0, rank=0, kind=0, epoch=1, timeout_ns=1, count=0)  # nothing to wait
    assert len(launches) == 5

# ---------------------------------------------------------------------------- op prepared calls


def _op_fixture(monkeypatch, mod_name):
    """The op module with its GPU-only pieces replaced: gemm_call builds the argument list from
    the real kernel's parameter names, the FusedKernel records its launches."""
    import importlib

    from syncopate.kernels import kernel_fn
    from syncopate.ops import _gemm
    mod = importlib.import_module(mod_name)
    calls = {"gemm_call": 0, "launches": []}

    class FakeFK:
        _poisoned = None
        staged = 0

        def before_staging(self):
            FakeFK.staged += 1

        def __getitem__(self, grid):
            return lambda *args: calls["launches"].append((grid, list(args)))

    fk = FakeFK()

    def gemm_call(kernel, a, b, c, cfg, *, num_programs=None):
        calls["gemm_call"] += 1
        fn = kernel_fn("tma")
        vals = {n: None for n in fn.arg_names}
        vals.update(a_ptr=a, b_ptr=b, c_ptr=c, M=a.shape[0], N=b.shape[1], K=a.shape[1])
        return _gemm.GemmCall(fn=fn, args=[vals[n] for n in fn.arg_names], grid=(7,), options={},
                              config=cfg, kernel="tma")
    monkeypatch.setattr(_gemm, "gemm_call", gemm_call)
    monkeypatch.setattr(mod, mod.__name__.rsplit(".", 1)[1] + "_fused_kernel", lambda *a, **k: fk)
    import syncopate.kernels as kmod
    monkeypatch.setattr(kmod, "num_sms", lambda device=None: 132)
    monkeypatch.setenv("SYNCOPATE", "1")
    return mod, calls, fk


def test_ag_gemm_prepares_a_call_once_per_layout(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.ag_gemm")
    c = _fake_comm()
    bf = torch.bfloat16
    b = torch.randn(64, 48).to(bf)
    a1, a2 = torch.randn(32, 64).to(bf), torch.randn(32, 64).to(bf)
    out1 = mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8)
    out2 = mod.ag_gemm(a2, b, c, backend="sm", split=2, comm_programs=8)  # new A, same layout
    assert calls["gemm_call"] == 1 and len(calls["launches"]) == 2 and fk.staged == 2
    A = mod.ag_gemm_buffer(c, 32, 64, bf)
    assert torch.equal(A[:32], a2)  # rank 0's rows hold the latest shard
    (_, args1), (_, args2) = calls["launches"]
    c_idx = list(__import__("syncopate.kernels", fromlist=["kernel_fn"]).kernel_fn("tma").arg_names).index("c_ptr")
    assert args1[c_idx] is out1 and args2[c_idx] is out2 and out1 is not out2  # fresh outputs
    out = torch.empty(64, 48, dtype=bf)
    assert mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8, out=out) is out
    assert mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8, out=out) is out
    assert calls["gemm_call"] == 2  # a given out is part of the layout (checked once)
    mod.ag_gemm(a1, torch.randn(64, 48).to(bf), c, backend="sm", split=2, comm_programs=8)
    mod.ag_gemm(a1, b, c, backend="sm", split=4, comm_programs=8)
    assert calls["gemm_call"] == 4  # another weight, another split: prepared anew
    c.empty((4,), torch.float32)  # the symmetric registry changed
    mod.ag_gemm(a1, b, c, backend="sm", split=2, comm_programs=8)
    assert calls["gemm_call"] == 5
    with pytest.raises(LaunchError, match="2-D torch.Tensor"):
        mod.ag_gemm([1, 2], b, c)


def test_gemm_rs_prepared_call_swaps_in_a_and_copies_the_result(monkeypatch):
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_rs")
    c = _fake_comm()
    bf = torch.bfloat16
    b = torch.randn(32, 48).to(bf)
    a1, a2 = torch.randn(64, 32).to(bf), torch.randn(64, 32).to(bf)
    C = mod.gemm_rs_buffer(c, 64, 48, bf)
    C.copy_(torch.randn(64, 48).to(bf))
    r1 = mod.gemm_rs(a1, b, c, backend="sm", split=4, comm_programs=16)
    r2 = mod.gemm_rs(a2, b, c, backend="sm", split=4, comm_programs=16)
    assert calls["gemm_call"] == 1
    a_idx = list(__import__("syncopate.kernels", fromlist=["kernel_fn"]).kernel_fn("tma").arg_names).index("a_ptr")
    assert calls["launches"][0][1][a_idx] is a1 and calls["launches"][1][1][a_idx] is a2
    assert torch.equal(r1, C[:32]) and torch.equal(r2, C[:32]) and r1 is not r2
    with pytest.raises(LaunchError, match=r"\[M/W, N\]"):
        mod.gemm_rs(a1, b, c, backend="sm", split=4, comm_programs=16,
                    out=torch.empty(64, 48, dtype=bf))


def test_peers_table_appends_the_epilogue_slot_rows():
    """reduce='epilogue': syn_peers gets one row per slotted tensor after the operands, holding
    every rank's slot base (the kernel reads its own)."""
    c = _fake_comm(rank=1)
    sched = _rs(shape=(8, 4), split=1, mode="push")
    fk = FusedKernel(_ptr_kernel(), sched, operand="c_ptr", backend="ce", comm=c)
    cfg = _ce_config(c, sched, fk, produced=True)
    cfg.abi.epilogue_slots = ["C"]
    cfg.flag_addrs = c.peer_ptrs(cfg.flags)
    C = c.empty((8, 4), torch.float32)
    table = fk._peers_table(cfg, {"c_ptr": C})
    assert table.shape == (3, 2)
    assert table[2].tolist() == c.peer_ptrs(cfg.slots["C"])
    assert table[1].tolist() == c.peer_ptrs(C)
    cfg.abi.epilogue_slots = ["D"]
    cfg.peers_tables.clear()
    with pytest.raises(CompileError, match="slots of 'D'"):
        fk._peers_table(cfg, {"c_ptr": C})


def test_epilogue_plan_needs_stream_waits_on_produced_flags():
    from syncopate.runtime.fused import check_epilogue_plan
    ok = planmod.build_ce_plan(_rs(split=2), 0, {i: 64 for i in range(4)})
    check_epilogue_plan(ok, True)
    with pytest.raises(LaunchError, match="cuStreamWaitValue32"):
        check_epilogue_plan(ok, False)
    late = planmod.build_ce_plan(_rs(split=2), 0, {})  # no PRODUCED counts: wait for the kernel
    with pytest.raises(LaunchError, match="only after the kernel ends"):
        check_epilogue_plan(late, True)


def test_gemm_rs_epilogue_refuses_orders_that_could_deadlock(monkeypatch):
    """reduce='epilogue' only where every program computes what it sends before what it owns:
    M/W whole BLOCK_M tiles filling whole GROUP_M groups; ce only. Refused before any launch."""
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_rs")
    from syncopate.ops._gemm import resolve_config
    c = _fake_comm()
    bf = torch.bfloat16
    b = torch.randn(32, 48).to(bf)
    with pytest.raises(LaunchError, match="needs backend='ce'"):
        mod.gemm_rs(torch.randn(2048, 32).to(bf), b, c, backend="sm", reduce="epilogue")
    with pytest.raises(LaunchError, match="M/W = 200"):
        mod.gemm_rs(torch.randn(400, 32).to(bf), b, c, backend="ce", reduce="epilogue")
    cfg = resolve_config("tma", 2048, 48, 32, bf)
    M = 2 * cfg.BLOCK_M * cfg.GROUP_M
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, backend="ce", reduce="epilogue", split=2)
    assert calls["gemm_call"] == 1 and len(calls["launches"]) == 1
    # two tiles per rank: the default config's GROUP_M is lowered to fill whole groups ...
    small = 2 * 2 * cfg.BLOCK_M
    mod.gemm_rs(torch.randn(small, 32).to(bf), b, c, backend="ce", reduce="epilogue", split=2)
    assert calls["gemm_call"] == 2
    # ... but an explicit config is the caller's: refused with what to change
    with pytest.raises(LaunchError, match="GROUP_M = 8"):
        mod.gemm_rs(torch.randn(small, 32).to(bf), b, c, backend="ce", reduce="epilogue",
                    config=dict(BLOCK_M=cfg.BLOCK_M, GROUP_M=8))
    with pytest.raises(LaunchError, match="choose 'comm' or 'epilogue'"):
        mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, backend="ce", reduce="sum")


def test_gemm_rs_default_is_the_epilogue_variant_where_it_applies(monkeypatch):
    """No backend/reduce: ce + epilogue (split EPILOGUE_SPLIT, no comm programs) when the driver
    has stream waits, the tiles fit and the GEMM hides the host time; sm with the cost model's
    plan otherwise, never a refusal. An explicit backend keeps reduce='comm'."""
    mod, calls, fk = _op_fixture(monkeypatch, "syncopate.ops.gemm_rs")
    assert mod.default_variant(2048, 2, None, gemm_s=0.1e-3) == ("sm", "comm")  # host-bound
    monkeypatch.setattr(mod, "EPILOGUE_MIN_GEMM_S", 0.0)  # the shapes below are tiny
    from syncopate.ops._gemm import resolve_config
    from syncopate.runtime import _cuda
    built = []
    monkeypatch.setattr(mod, "gemm_rs_fused_kernel", lambda *a, **k: built.append(k) or fk)
    c = _fake_comm()
    bf = torch.bfloat16
    b = torch.randn(32, 48).to(bf)
    cfg = resolve_config("tma", 2048, 48, 32, bf)
    M = 2 * cfg.BLOCK_M * cfg.GROUP_M

    monkeypatch.setattr(_cuda, "stream_wait_available", lambda: True)
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c)
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("ce", "epilogue")
    assert (built[-1]["split"], built[-1]["comm_programs"]) == (mod.EPILOGUE_SPLIT, 0)
    mod.gemm_rs(torch.randn(400, 32).to(bf), b, c)  # M/W = 200: not whole tiles -> sm
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("sm", "comm")
    assert built[-1]["comm_programs"] > 0
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, backend="ce")
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("ce", "comm")
    mod.gemm_rs(torch.randn(M, 32).to(bf), b, c, reduce="epilogue")
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("ce", "epilogue")
    assert mod.default_variant(M, 2, cfg) == ("ce", "epilogue")

    monkeypatch.setattr(_cuda, "stream_wait_available", lambda: False)
    M2 = M + 2 * cfg.BLOCK_M  # a new layout: chosen anew; the epilogue would lower GROUP_M
    mod.gemm_rs(torch.randn(M2, 32).to(bf), b, c)
    assert (built[-1]["backend"], built[-1]["reduce"]) == ("sm", "comm")
    # sm keeps the default config's grouping
    assert built[-1]["config"].GROUP_M == resolve_config("tma", M2, 48, 32, bf).GROUP_M > 1


def test_gemm_rs_default_by_gemm_length(monkeypatch):
    """The standard shapes (run 6): the epilogue variant at M = 8192 and 4096 and for the long
    M = 1024 GEMM; sm for M = 1024 x 4096 x 14336 (~0.08 ms of GEMM, shorter than the epilogue
    variant's host time)."""
    import importlib

    from syncopate.ops._gemm import resolve_config
    from syncopate.runtime import _cuda
    mod = importlib.import_module("syncopate.ops.gemm_rs")
    monkeypatch.setattr(_cuda, "stream_wait_available", lambda: True)
    bf = torch.bfloat16
    for (M, N, K), want in (((8192, 4096, 14336), "ce"), ((8192, 8192, 28672), "ce"),
                            ((4096, 4096, 14336), "ce"), ((1024, 8192, 28672), "ce"),
                            ((1024, 4096, 14336), "sm")):
        Kl = K // 2
        cfg = resolve_config("tma", M, N, Kl, bf)
        be, red, cfg2 = mod.resolve_variant(M, N, Kl, 2, bf, cfg, False)
        assert be == want and red == ("epilogue" if want == "ce" else "comm"), (M, N, K)


def test_state_word_probe_sees_writes_to_the_record():
    rec, _ = diag.new_record()
    probe = diag.state_word(rec)
    assert probe() == 0
    rec[abi.DIAG_STATE] = 1  # what the device's claim writes
    assert probe() == 1
    rec.zero_()
    assert probe() == 0
    view = torch.zeros(16, dtype=torch.int32)[::2]  # not contiguous: the tensor read is used
    view[abi.DIAG_STATE] = 3
    assert diag.state_word(view)() == 3
