"""The emulator's atomics against Triton's interpreter, over the whole matrix: every atomic of
``triton.language`` (add, max, min, and, or, xor, xchg, cas -- the ``tt.atomic_rmw`` kinds
add, fadd, max, min, umax, umin, and, or, xor, exch and ``tt.atomic_cas``) x every dtype
Triton's frontend takes for it x every mask pattern (none, partial, all false; tensor and
scalar forms) x unique and duplicate addresses within one op.

Both sides run the same ``@triton.jit`` kernels (tests/atomics_interp_worker.py) on the same
seeded random inputs, given and compared as bit patterns: the emulator the kernel's TTIR, the
interpreter in a subprocess (``TRITON_INTERPRET=1``).  What is compared:

* one lane per address (unique addresses, scalar ops): memory after and every active lane's
  old value, bit for bit (float adds: a NaN matches any NaN -- payloads are not modelled);
* duplicate addresses: the lanes' order is the hardware's, so the memory after is compared bit
  for bit where it does not depend on the order (integer add, and, or, xor, max, min of every
  dtype -- float max/min are integer max/min on the bits), within ``float_atomic_bound`` for
  float adds, and every order-dependent result (old values, xchg, cas) is checked to be what
  *some* order of the lanes gives (an independent bit-level model of each op);
* a masked-off lane returns 0 in the emulator, as the lowering's zeroed result register does
  (the interpreter leaves it undefined, so it is not compared there);
* the frontend's verdict on every (atomic, dtype) pair, including the refused ones, against
  the table the kernels are built from.

The semantics Triton's interpreter does not model -- f32 atomic adds on global memory flush
subnormals to zero (PTX ``atom.add.f32``) -- are tested against the PTX rule below.  Also here:
pointer bitcasts as typed views (issue 28, item 4: fp32 ``tl.atomic_max`` row maxima; a view
of a communicated tensor still seen by the race checker).  Float atomic order in a fused
emulation (issue 28, item 5): tests/test_emulate_atomics_order.py.
"""

from __future__ import annotations

import pathlib

import numpy as np
import pytest
import triton
import triton.language as tl
from atomics_interp_worker import (
    BITS,
    DTYPES,
    KINDS,
    LEGAL,
    SEGMENTS,
    N,
    atomics_kernel,
    segments_of,
)
from interp_runner import run_interpreter_worker

import syncopate.language as sl
from syncopate.emulate import PerRank, emulate_module, fuse_module, kernel_ttir, mutations
from syncopate.emulate.interpreter import Machine, ModuleCode, ProgramCtx
from syncopate.emulate.memory import Buffer, Ptr, etype_named
from syncopate.emulate.reference import float_atomic_bound
from syncopate.errors import EmulationError
from syncopate.schedule import all_gather
from syncopate_mlir.bridge import ttir_to_xdsl
from syncopate_mlir.context import make_context

WORKER = pathlib.Path(__file__).with_name("atomics_interp_worker.py")
SEED = 2845
NSEG = len(SEGMENTS)
#: the emulator's element type (MLIR has no unsigned types) of each dtype
EMU_TYPE = {"i16": "i16", "u16": "i16", "i32": "i32", "u32": "i32", "i64": "i64", "u64": "i64",
            "fp16": "f16", "bf16": "bf16", "fp32": "f32", "fp64": "f64"}
FLOATS = ("fp16", "bf16", "fp32", "fp64")
#: quiet NaNs with payloads, positive and negative, per float dtype
NANS = {"fp16": (0x7E01, 0xFE03), "bf16": (0x7FC1, 0xFFC3), "fp32": (0x7FC12345, 0xFFC54321),
        "fp64": (0x7FF8000000012345, 0xFFF8000000054321)}
ORDER_FREE = ("add", "and", "or", "xor", "max", "min")  # memory after: order-independent
#: (kind, dtype) whose old values Triton 3.6's interpreter gets wrong, so they are checked
#: against the model only: ``semantic.atomic_min`` types the unsigned half's result as
#: ``ui_ptr.type`` (a pointer; ``atomic_max`` has ``ui_val.type``), and the interpreter then
#: converts f64 old values by value (1.0 comes back as 4.6e18).  The TTIR -- a select of the
#: two i64 results and a bitcast -- and so the GPU and the emulator are unaffected.
INTERPRETER_OLDS_WRONG = {("min", "fp64")}


# ------------------------------------------------------------------ bit patterns and values

def _u(w):
    return {16: np.uint16, 32: np.uint32, 64: np.uint64}[w]


def _float_of_bits(bits, dtype):
    b = np.asarray(bits, dtype=np.uint64).astype(_u(BITS[dtype]))
    if dtype == "bf16":
        return (b.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return b.view({"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[dtype]) \
        .astype(np.float64)


def _bits_of_float(x, dtype):
    if dtype == "bf16":  # truncation of a float32 is a bf16 value; any will do as an input
        return (np.asarray(x, np.float32).view(np.uint32) >> 16).astype(np.uint64)
    t = {"fp16": np.float16, "fp32": np.float32, "fp64": np.float64}[dtype]
    return np.asarray(x).astype(t).view(_u(BITS[dtype])).astype(np.uint64)


def _specials(dtype):
    """+0, -0, +inf, -inf and two NaNs, as bits."""
    w = BITS[dtype]
    one = _bits_of_float(np.array([0.0, -0.0, np.inf, -np.inf]), dtype)
    return np.concatenate([one, np.array(NANS[dtype], np.uint64)]) & np.uint64((1 << w) - 1)


def _random_bits(dtype, n, rng):
    w = BITS[dtype]
    if dtype not in FLOATS:  # the full range: wrap-around and both signs for unsigned compares
        return rng.integers(0, 2 ** w, size=n, dtype=np.uint64)
    bits = _bits_of_float(rng.standard_normal(n) * 4.0, dtype)
    sp = rng.random(n) < 0.2
    bits[sp] = rng.choice(_specials(dtype), size=int(sp.sum()))
    return bits


def _inputs(dtype, rng) -> dict:
    """Memory, values, compare values, addresses, masks and the old-value array of every
    kind's segments, as bit patterns (uint64 containers); never all zeros."""
    size = len(KINDS) * NSEG * N
    x, v, c = (_random_bits(dtype, size, rng) for _ in range(3))
    i = np.zeros(size, np.int32)
    m = np.zeros(size, np.int32)
    for k, kind in enumerate(KINDS):
        for s, (scalar, mask, dup) in enumerate(SEGMENTS):
            b = (k * NSEG + s) * N
            i[b:b + N] = rng.integers(0, N // 2, N) if dup else rng.permutation(N)
            if mask == "partial":
                m[b:b + N] = rng.permutation(np.arange(N) % 2)
            elif mask in ("none", "true"):
                m[b:b + N] = 1
            if kind == "cas":  # half the lanes compare equal to their element's initial value
                eq = rng.random(N) < 0.5
                c[b:b + N][eq] = x[b + i[b:b + N]][eq]
        if dtype in FLOATS:  # the signed zeros and NaNs each op must treat by its rule
            b = k * NSEG * N
            z, nz = _bits_of_float(np.array([0.0, -0.0]), dtype)
            nan, nnan = NANS[dtype]
            one, none_ = _bits_of_float(np.array([1.0, -1.0]), dtype)
            for lane, (mem, val, cmp) in enumerate([(z, nz, nz), (nz, z, z), (one, nan, one),
                                                    (none_, nnan, none_), (nan, one, nan)]):
                x[b + i[b + lane]], v[b + lane], c[b + lane] = mem, val, cmp
    o = _random_bits(dtype, size, rng)
    return {"x": x, "v": v, "c": c, "i": i, "m": m, "o": o}


def _kinds_of(dtype) -> list[str]:
    return [k for k in KINDS if dtype in LEGAL[k]]


def _mask_of(dtype) -> int:
    return sum(1 << KINDS.index(k) for k in _kinds_of(dtype))


# ------------------------------------------------------------------ the emulator's side

def _module(text):
    return ttir_to_xdsl(text, make_context())


def _storage(bits, dtype):
    et = etype_named(EMU_TYPE[dtype])
    b = np.asarray(bits, np.uint64).astype(_u(BITS[dtype]))
    if dtype == "bf16":
        return et, (b.astype(np.uint32) << 16).view(np.float32).copy()
    return et, b.view(et.np).copy()


def _storage_bits(data, dtype):
    if dtype == "bf16":
        return (data.view(np.uint32) >> 16).astype(np.uint64)
    return data.view(_u(BITS[dtype])).astype(np.uint64)


def _run(code, args):
    pc = ProgramCtx(Machine(), 0, (0, 0, 0), (1, 1, 1), 1, "compute")
    env = code.new_env()
    for s, v in zip(code.arg_slots, args):
        env[s] = v
    if code.body_yields:
        for _ in code.body(env, pc):
            pass
    else:
        code.body(env, pc)


def _emulate(dtype, inp) -> dict:
    sig = {n: "*" + dtype for n in ("x_ptr", "v_ptr", "c_ptr", "o_ptr")}
    sig.update(i_ptr="*i32", m_ptr="*i32")
    ttir = kernel_ttir(atomics_kernel, sig, {"N": N, "KINDS": _mask_of(dtype), "NSEG": NSEG})
    code = ModuleCode(_module(ttir)).kernel
    bufs = {}
    for n in "xvco":
        et, data = _storage(inp[n], dtype)
        bufs[n] = Buffer(n, 0, et, data)
    for n in "im":
        bufs[n] = Buffer(n, 0, etype_named("i32"), inp[n].copy())
    _run(code, [Ptr(bufs[n], 0) for n in "xvcimo"])
    return {"x": _storage_bits(bufs["x"].data, dtype), "o": _storage_bits(bufs["o"].data, dtype)}


# ------------------------------------------------------------------ an independent model

def _signed(b, w):
    return b - (1 << w) if b >> (w - 1) else b


def _step(kind, dtype, old, v, c):
    """One lane of ``kind`` on bit patterns, as Triton's lowering defines it (not for float
    adds): integer ops wrap, unsigned dtypes compare unsigned, float max/min are signed max/min
    of the bits for a non-negative value and unsigned min/max for a negative one."""
    w = BITS[dtype]
    if kind == "add":
        return (old + v) & ((1 << w) - 1)
    if kind in ("and", "or", "xor"):
        return {"and": old & v, "or": old | v, "xor": old ^ v}[kind]
    if kind == "xchg":
        return v
    if kind == "cas":
        return v if old == c else old
    big = kind == "max"
    if dtype in FLOATS and v >> (w - 1):
        key, big = (lambda b: b), not big
    else:
        key = (lambda b: b) if dtype.startswith("u") else (lambda b: _signed(b, w))
    return max(old, v, key=key) if big else min(old, v, key=key)


def _linearizable(kind, dtype, init, lanes, final) -> bool:
    """Is there an order of ``lanes`` ((value, compare, returned old)) that, applied to
    ``init``, returns those olds and leaves ``final``?"""
    def go(cur, rest):
        if not rest:
            return cur == final
        return any(old == cur and go(_step(kind, dtype, cur, v, c), rest[:j] + rest[j + 1:])
                   for j, (v, c, old) in enumerate(rest))
    return go(init, list(lanes))


# ------------------------------------------------------------------ the comparison

def _same(a, b, dtype, fadd) -> bool:
    if a == b:
        return True
    return fadd and bool(np.isnan(_float_of_bits([a, b], dtype)).all())


def _check_segment(dtype, kind, seg, inp, emu, ref) -> list[str]:
    """Every rule of the module docstring on one segment; what broke."""
    scalar, mask, _ = SEGMENTS[seg]
    b = (KINDS.index(kind) * NSEG + seg) * N
    lanes = [0] if scalar else list(range(N))
    fadd = kind == "add" and dtype in FLOATS
    olds_wrong = (kind, dtype) in INTERPRETER_OLDS_WRONG
    act = [ln for ln in lanes if kind == "cas" or mask in ("none", "true") or
           (mask == "partial" and inp["m"][b + ln])]
    where = f"{kind} {dtype} segment {seg} {SEGMENTS[seg]}"
    bad = []
    X0 = [int(t) for t in inp["x"][b:b + N]]
    EX, RX = [int(t) for t in emu["x"][b:b + N]], [int(t) for t in ref["x"][b:b + N]]
    EO, RO = [int(t) for t in emu["o"][b:b + N]], [int(t) for t in ref["o"][b:b + N]]
    addr = {ln: int(inp["i"][b + ln]) for ln in lanes}
    for ln in set(lanes) - set(act):
        if EO[ln] != 0:
            bad.append(f"{where}: masked-off lane {ln} returned {EO[ln]:#x}, not 0")
    by_addr: dict[int, list[int]] = {}
    for ln in act:
        by_addr.setdefault(addr[ln], []).append(ln)
    for a in range(N):
        got = by_addr.get(a, [])
        if not got:
            if not EX[a] == RX[a] == X0[a]:
                bad.append(f"{where}: element {a}, which no active lane updates, changed")
            continue
        if len(got) == 1:  # one lane: everything bit for bit, and the old value is known
            ln = got[0]
            if not (_same(EX[a], RX[a], dtype, fadd) and EO[ln] == X0[a] and
                    (olds_wrong or _same(EO[ln], RO[ln], dtype, fadd))):
                bad.append(f"{where}: element {a} (initially {X0[a]:#x}): emulator memory "
                           f"{EX[a]:#x} old {EO[ln]:#x}, interpreter {RX[a]:#x} {RO[ln]:#x}")
            continue
        if fadd:  # within the bound of two orders of the same adds
            vals = _float_of_bits([X0[a], EX[a], RX[a]] + [EO[ln] for ln in got] +
                                  [RO[ln] for ln in got], dtype)
            e, r = vals[1], vals[2]
            finite = vals[np.isfinite(vals)]
            bound = float_atomic_bound(len(got), np.abs(finite).max() if finite.size else 0.0,
                                       EMU_TYPE[dtype])
            if not (_same(EX[a], RX[a], dtype, True) or abs(e - r) <= bound):
                bad.append(f"{where}: element {a}: emulator {e!r}, interpreter {r!r}, beyond "
                           f"the float atomic bound {bound:.3g}")
            if X0[a] not in [EO[ln] for ln in got] and not np.isnan(vals[0]):
                bad.append(f"{where}: element {a}: no lane returned its initial value")
            continue
        if kind in ORDER_FREE and EX[a] != RX[a]:
            bad.append(f"{where}: element {a}: emulator {EX[a]:#x}, interpreter {RX[a]:#x}")
        sides = [("emulator", EX, EO)] + ([] if olds_wrong else [("interpreter", RX, RO)])
        for side, X, O in sides:
            seq = [(int(inp["v"][b + ln]), int(inp["c"][b + ln]), O[ln]) for ln in got]
            if not _linearizable(kind, dtype, X0[a], seq, X[a]):
                bad.append(f"{where}: element {a}: the {side}'s old values and result are no "
                           f"order of its lanes")
    return bad


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    rng = np.random.default_rng(SEED)
    dtypes = sorted({d for k in KINDS for d in LEGAL[k]})
    inputs = {d: _inputs(d, rng) for d in dtypes}
    cases = [{"name": "probe", "probe": True}] + [
        {"name": d, "dtype": d, "kinds": _mask_of(d),
         **{n: [int(t) for t in inputs[d][n]] for n in "xvcimo"}} for d in dtypes]
    ref = run_interpreter_worker(WORKER, cases, tmp_path_factory.mktemp("atomics"))
    return inputs, ref


def test_frontend_takes_exactly_the_table(matrix):
    """The table the kernels are built from is Triton's: every (atomic, dtype) pair."""
    _, ref = matrix
    probe = ref["probe"]
    assert "error" not in probe, probe
    took = {kd for kd, verdict in probe.items() if verdict == "ok"}
    assert took == {f"{k}/{d}" for k in KINDS for d in LEGAL[k]}, \
        {kd: probe[kd] for kd in took ^ {f"{k}/{d}" for k in KINDS for d in LEGAL[k]}}
    assert len(probe) == len(KINDS) * len(DTYPES)


@pytest.mark.parametrize("dtype", sorted({d for k in KINDS for d in LEGAL[k]}))
def test_atomics_match_the_interpreter(matrix, dtype):
    inputs, ref = matrix
    assert "error" not in ref[dtype], ref[dtype]
    emu = _emulate(dtype, inputs[dtype])
    rbits = {n: np.array(ref[dtype][n], np.uint64) for n in "xo"}
    bad, cells = [], 0
    for kind in _kinds_of(dtype):
        for seg in segments_of(kind):
            bad += _check_segment(dtype, kind, seg, inputs[dtype], emu, rbits)
            cells += 1
    assert cells == sum(len(segments_of(k)) for k in _kinds_of(dtype)) > 0
    assert not bad, f"{len(bad)} difference(s):\n" + "\n".join(bad[:30])


# ------------------------------------------------------------------ PTX rules the interpreter
# does not model

@triton.jit
def _add_kernel(x_ptr, v_ptr, o_ptr, N: tl.constexpr):
    offs = tl.arange(0, N)
    tl.store(o_ptr + offs, tl.atomic_add(x_ptr + offs, tl.load(v_ptr + offs)))


def _run_kernel(fn, dtype, arrays, constexprs):
    sig = {f"{n}_ptr": "*" + dtype for n in arrays}
    ttir = kernel_ttir(fn, sig, constexprs)
    et = etype_named(EMU_TYPE[dtype])
    bufs = [Buffer(n, 0, et, np.asarray(a, et.np).copy()) for n, a in arrays.items()]
    _run(ModuleCode(_module(ttir)).kernel, [Ptr(b, 0) for b in bufs])
    return [b.data for b in bufs]


def test_float_atomic_add_subnormals_like_ptx():
    """``atom.add.f32`` on global memory flushes subnormal inputs and results to zero of the
    same sign (PTX ISA, ``atom``); the old value it returns is the element as stored.  f64 and
    the ``.noftz`` f16/bf16 adds keep subnormals."""
    tiny = np.float32(np.finfo(np.float32).tiny)
    r = np.float32(np.random.default_rng(SEED).standard_normal())
    x = np.array([tiny / 4, -tiny / 2, 1.5, tiny * 1.5, 3.0, -tiny * 1.5, 2.0, 5.0], np.float32)
    v = np.array([tiny / 8, -0.0, tiny / 3, -tiny, r, tiny, -2.0, 1.0], np.float32)
    want = np.array([0.0, -0.0, 1.5, 0.0, np.float32(3.0) + r, -0.0, 0.0, 6.0], np.float32)
    got, _, old = _run_kernel(_add_kernel, "fp32", dict(x=x, v=v, o=np.ones(8)), {"N": 8})
    assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
    assert old.view(np.uint32).tolist() == x.view(np.uint32).tolist()
    for dtype, a, b in (("fp64", 2.0 ** -1070, 2.0 ** -1073), ("fp16", 2.0 ** -20, 2.0 ** -22),
                        ("bf16", 2.0 ** -130, 2.0 ** -131)):
        got, _, _ = _run_kernel(_add_kernel, dtype, dict(x=np.full(4, a), v=np.full(4, b),
                                                         o=np.ones(4)), {"N": 4})
        assert (got.astype(np.float64) == a + b).all(), (dtype, got)


# ------------------------------------------------------------------ pointer bitcasts as views

@triton.jit
def _row_extrema(x_ptr, out_ptr, N: tl.constexpr):
    r = tl.program_id(0)
    offs = tl.arange(0, N)
    v = tl.load(x_ptr + r * N + offs)
    tl.atomic_max(out_ptr + 2 * r + offs * 0, v)
    tl.atomic_min(out_ptr + 2 * r + 1 + offs * 0, v)


def test_fp32_atomic_max_min_row_extrema():
    """Issue 28, item 4: Triton lowers fp32 ``tl.atomic_max``/``min`` to integer atomics on
    a bitcast pointer; the emulator once compared the bit patterns as float values (row maxima
    ~1.07e9).  Rows of mixed signs, all negative and all positive."""
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((6, 16)).astype(np.float32)
    x[1] = -np.abs(x[1]) - 0.5
    x[2] = np.abs(x[2]) + 0.5
    x[3, :3] = [-0.0, 0.0, -0.0]
    out = np.tile(np.array([-np.inf, np.inf], np.float32), 6)
    ttir = kernel_ttir(_row_extrema, {"x_ptr": "*fp32", "out_ptr": "*fp32"}, {"N": 16})
    code = ModuleCode(_module(ttir)).kernel
    xb = Buffer("x", 0, etype_named("f32"), x.reshape(-1).copy())
    ob = Buffer("out", 0, etype_named("f32"), out)
    for pid in range(6):
        pc = ProgramCtx(Machine(), 0, (pid, 0, 0), (6, 1, 1), 1, "compute")
        env = code.new_env()
        for s, v in zip(code.arg_slots, [Ptr(xb, 0), Ptr(ob, 0)]):
            env[s] = v
        for _ in code.body(env, pc):
            pass
    np.testing.assert_array_equal(ob.data.reshape(6, 2), np.stack([x.max(1), x.min(1)], 1))


def test_views_share_bytes_and_shadow_state():
    """A view reads and writes the bits of the viewed buffer's elements, shares its shadow
    state and address, is one object per type, and refuses what it cannot model."""
    rng = np.random.default_rng(SEED)
    for src, dst in (("f32", "i32"), ("f64", "i64"), ("f16", "i16"), ("bf16", "i16"),
                     ("bf16", "f16"), ("f16", "bf16"), ("i32", "f32")):
        et = etype_named(src)
        bits = rng.integers(1, 2 ** (et.bits - 1), 8, dtype=np.uint64)
        if src == "bf16":
            data = (bits.astype(np.uint32) << 16).view(np.float32)
        else:
            data = bits.astype({16: np.uint16, 32: np.uint32, 64: np.uint64}[et.bits]) \
                .view(et.np)
        buf = Buffer("b", 0, et, data.copy())
        buf.track("t")
        view = buf.view(etype_named(dst))
        assert view is buf.view(etype_named(dst)) and view.base is buf
        assert view.view(et) is buf and view.addr == buf.addr
        assert view.epoch_of is buf.epoch_of and view.remote_read is buf.remote_read
        dbits = view.read(np.arange(8))
        w = {16: np.uint16, 32: np.uint32, 64: np.uint64}[et.bits]
        as_bits = (dbits.view(np.uint32) >> 16).astype(w) if dst == "bf16" else dbits.view(w)
        assert as_bits.tolist() == bits.astype(w).tolist(), (src, dst)
        view.write(np.array([3]), dbits[5:6])  # bits in, the same bits out
        assert buf.data[3].tobytes() == buf.data[5].tobytes(), (src, dst)
    with pytest.raises(EmulationError, match="same size"):
        Buffer("b", 0, etype_named("f32"), np.ones(4, np.float32)).view(etype_named("i16"))
    with pytest.raises(EmulationError, match="f8E4M3FN"):
        Buffer("b", 0, etype_named("f8E4M3FN"), np.ones(4, np.float32)).view(etype_named("i8"))



@triton.jit
def _rows_bits(inp_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Each row of the gathered ``inp`` read through an i32 view: its bits, xor 0x55."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    bits_ptr = inp_ptr.to(tl.pointer_type(tl.int32), bitcast=True)
    sl.hint_region2(inp_ptr, row, row + 1, 0, BLOCK)
    x = tl.load(bits_ptr + row * stride + cols, mask=cols < n_cols)
    tl.store(out_ptr + row * stride + cols, x ^ 0x55, mask=cols < n_cols)


def test_views_of_a_communicated_tensor_are_checked():
    """Loads through a bitcast pointer into an all-gathered tensor read its bits and reach the
    race checker's shadow state: clean as compiled, a read-before-arrival once a wait is
    dropped."""
    R, C = 64, 32
    rng = np.random.default_rng(SEED)
    inp = [rng.standard_normal((R, C)).astype(np.float32) for _ in range(2)]
    module, local = fuse_module(
        _rows_bits, signature={"inp_ptr": "*fp32", "out_ptr": "*i32", "n_cols": "i32",
                               "stride": "i32", "BLOCK": "constexpr"},
        constexprs={"BLOCK": 32}, schedule=all_gather([R, C], "fp32", 2, split=2),
        operand="inp_ptr", backend="sm", comm_programs=2)
    kw = dict(grid=(R,), args=dict(inp_ptr=PerRank(inp), out_ptr=np.zeros((R, C), np.int32),
                                   n_cols=C, stride=C),
              policies=("in-order", "late", "random:1"), launches=1)
    res = emulate_module(module, local, **kw)
    assert res.ok, res.summary()
    gathered = np.concatenate([inp[0][:R // 2], inp[1][R // 2:]])
    for ranks in res.outputs.values():
        for r in (0, 1):
            assert (ranks[r]["out_ptr"] == (gathered.view(np.int32) ^ 0x55).reshape(-1)).all()
    res = emulate_module(mutations.drop_wait(module), local, **kw)
    assert res.races_of("read-before-arrival"), res.summary()
