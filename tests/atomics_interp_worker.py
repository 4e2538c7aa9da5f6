"""The kernels of tests/test_emulate_atomics.py, and their run under Triton's interpreter.

Imported by the test (no ``TRITON_INTERPRET``): the ``@triton.jit`` kernels whose TTIR the
emulator runs, the table of which atomic takes which dtype, and the segment layout.  Run as
``TRITON_INTERPRET=1 python atomics_interp_worker.py CASES.json RESULTS.json``
(``interp_runner.run_interpreter_worker``): the same kernels on the same inputs in Triton's
interpreter, and a probe of every (atomic, dtype) pair through Triton's frontend.

Why one kernel per dtype: the emulator needs the TTIR of each kernel, and a Triton compile per
(atomic, dtype, mask pattern) would take minutes; one kernel runs every atomic its dtype takes,
each on its own segments of the arrays (``SEGMENTS``: mask patterns, unique or duplicate
addresses, scalar forms).

Shims (Triton 3.6's interpreter lacks a few (op, dtype) pairs its frontend accepts and its GPU
lowering compiles; the kernels are not bent for them):

* ``and``/``or``/``xor``/``xchg`` of f32/f64 raise "Unsupported data type"; the lowering emits
  ``atom.and.b32`` etc. on the bits, so the shim runs the interpreter's own integer op on the
  same memory with the values viewed as unsigned integers of the same width;
* ``atomic_add`` of bf16 (``FADD`` on the interpreter's uint16 bf16 storage) is unsupported;
  the shim adds in lane order, each add the float32 sum of the two bf16 values rounded once to
  bf16 by torch (round to nearest even; exact as one rounding, 24 >= 2 * 8 + 2 bits), as
  ``atom.add.noftz.bf16`` does.
"""

from __future__ import annotations

import sys

import numpy as np
import triton
import triton.language as tl

#: the atomics of ``triton.language``, in the order of the kernels' ``KINDS`` bit mask
KINDS = ("add", "max", "min", "and", "or", "xor", "xchg", "cas")
#: every dtype a pointer can have, as Triton's signature names it (probed against every kind)
DTYPES = ("i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "fp8e4nv", "fp8e5", "fp16",
          "bf16", "fp32", "fp64")
_INTS = ("i32", "u32", "i64", "u64")
#: what Triton 3.6's frontend accepts (``semantic.py``: ``atom_red_typechecking_impl``,
#: ``atomic_max``/``atomic_min`` (floats through integer atomics on a bitcast pointer),
#: ``atomic_cas`` (16, 32, 64 bits)); the worker's probe checks it against the frontend
LEGAL = {
    "add": _INTS + ("fp16", "bf16", "fp32", "fp64"),
    "max": _INTS + ("fp32", "fp64"),
    "min": _INTS + ("fp32", "fp64"),
    "and": _INTS + ("fp32", "fp64"),
    "or": _INTS + ("fp32", "fp64"),
    "xor": _INTS + ("fp32", "fp64"),
    "xchg": _INTS + ("fp32", "fp64"),
    "cas": ("i16", "u16") + _INTS + ("fp16", "bf16", "fp32", "fp64"),
}
#: lanes per tensor op (and elements per segment)
N = 16
#: what each segment of a kind exercises: (scalar op, mask pattern, duplicate addresses)
SEGMENTS = (
    (False, "none", False),
    (False, "none", True),
    (False, "partial", False),
    (False, "partial", True),
    (False, "false", True),
    (True, "none", False),
    (True, "true", False),
    (True, "false", False),
)
#: the width in bits of each dtype an atomic takes
BITS = {"i16": 16, "u16": 16, "i32": 32, "u32": 32, "i64": 64, "u64": 64, "fp16": 16,
        "bf16": 16, "fp32": 32, "fp64": 64}


def segments_of(kind: str) -> list[int]:
    """The segments a kind runs: ``atomic_cas`` has no mask, so only the unmasked ones."""
    return [s for s, (_, mask, _) in enumerate(SEGMENTS) if kind != "cas" or mask == "none"]


@triton.jit
def _atomic(KIND: tl.constexpr, p, v, c, m):
    if KIND == 0:
        old = tl.atomic_add(p, v, mask=m)
    elif KIND == 1:
        old = tl.atomic_max(p, v, mask=m)
    elif KIND == 2:
        old = tl.atomic_min(p, v, mask=m)
    elif KIND == 3:
        old = tl.atomic_and(p, v, mask=m)
    elif KIND == 4:
        old = tl.atomic_or(p, v, mask=m)
    elif KIND == 5:
        old = tl.atomic_xor(p, v, mask=m)
    elif KIND == 6:
        old = tl.atomic_xchg(p, v, mask=m)
    else:
        old = tl.atomic_cas(p, c, v)
    return old


@triton.jit
def atomics_kernel(x_ptr, v_ptr, c_ptr, i_ptr, m_ptr, o_ptr, N: tl.constexpr,
                   KINDS: tl.constexpr, NSEG: tl.constexpr):
    """Every kind in the bit mask ``KINDS`` on its segments (``SEGMENTS``): memory ``x``,
    values ``v``, compare values ``c`` (cas), addresses ``i`` (within the segment), masks
    ``m``; the returned old values into ``o``."""
    lanes = tl.arange(0, N)
    for k in tl.static_range(8):
        if (KINDS >> k) & 1:
            for s in tl.static_range(NSEG):
                base = (k * NSEG + s) * N
                if k != 7 or s == 0 or s == 1 or s == 5:
                    if s < 5:
                        p = x_ptr + base + tl.load(i_ptr + base + lanes)
                        v = tl.load(v_ptr + base + lanes)
                        c = tl.load(c_ptr + base + lanes)
                        if s < 2:
                            old = _atomic(k, p, v, c, None)
                        else:
                            old = _atomic(k, p, v, c, tl.load(m_ptr + base + lanes) != 0)
                        tl.store(o_ptr + base + lanes, old)
                    else:
                        p = x_ptr + base + tl.load(i_ptr + base)
                        v = tl.load(v_ptr + base)
                        c = tl.load(c_ptr + base)
                        if s == 5:
                            old = _atomic(k, p, v, c, None)
                        else:
                            old = _atomic(k, p, v, c, tl.load(m_ptr + base) != 0)
                        tl.store(o_ptr + base, old)


@triton.jit
def probe_kernel(x_ptr, KIND: tl.constexpr):
    """One atomic of kind ``KIND`` on two elements: does Triton's frontend take the dtype?"""
    offs = tl.arange(0, 2)
    v = tl.load(x_ptr + offs)
    _atomic(KIND, x_ptr + offs, v, v, None)


# ------------------------------------------------------------------ the interpreter's side

def _torch_of(bits: np.ndarray, dtype: str):
    import torch
    if dtype == "bf16":
        return torch.from_numpy(bits.astype(np.uint16).view(np.int16)).view(torch.bfloat16)
    npt = {"i16": np.int16, "u16": np.uint16, "i32": np.int32, "u32": np.uint32,
           "i64": np.int64, "u64": np.uint64, "fp16": np.float16, "fp32": np.float32,
           "fp64": np.float64}[dtype]
    return torch.from_numpy(np.ascontiguousarray(bits.astype(f"u{BITS[dtype] // 8}").view(npt)))


def _bits_of(t, dtype: str) -> list[int]:
    import torch
    w = BITS[dtype]
    signed = {16: torch.int16, 32: torch.int32, 64: torch.int64}[w]
    return [int(b) for b in t.view(signed).numpy().view(f"u{w // 8}")]


def _install_shims() -> None:
    """The shims of the module docstring."""
    import ctypes

    import torch
    import triton.runtime.interpreter as interp
    from triton._C.libtriton import ir

    orig = interp.InterpreterBuilder.create_atomic_rmw
    bitwise = {ir.ATOMIC_OP.AND, ir.ATOMIC_OP.OR, ir.ATOMIC_OP.XOR, ir.ATOMIC_OP.XCHG}

    def create_atomic_rmw(self, rmw_op, ptr, val, mask, sem, scope):
        scalar = val.dtype.scalar
        if rmw_op in bitwise and scalar in (tl.float32, tl.float64):
            u = np.uint32 if scalar == tl.float32 else np.uint64
            ival = interp.TensorHandle(val.data.view(u), tl.uint32 if u is np.uint32 else
                                       tl.uint64)
            ret = orig(self, rmw_op, ptr, ival, mask, sem, scope)
            return interp.TensorHandle(ret.data.view(val.data.dtype), scalar)
        if rmw_op == ir.ATOMIC_OP.FADD and scalar == tl.bfloat16:
            addrs = ptr.data.reshape(-1)
            vals = val.data.reshape(-1).astype(np.uint16)
            act = np.broadcast_to(mask.data, ptr.data.shape).reshape(-1)
            ret = np.zeros(addrs.shape, np.uint16)
            for i in range(addrs.size):
                if not act[i]:
                    continue
                cell = ctypes.c_uint16.from_address(int(addrs[i]))
                old = np.array([cell.value], np.uint16)
                s = (old.astype(np.uint32) << 16).view(np.float32) + \
                    (vals[i:i + 1].astype(np.uint32) << 16).view(np.float32)
                cell.value = int(torch.from_numpy(s).to(torch.bfloat16).view(torch.int16)
                                 .numpy().view(np.uint16)[0])
                ret[i] = old[0]
            return interp.TensorHandle(ret.reshape(ptr.data.shape), scalar)
        return orig(self, rmw_op, ptr, val, mask, sem, scope)

    interp.InterpreterBuilder.create_atomic_rmw = create_atomic_rmw


def _probe(kind: str, dtype: str) -> str:
    """``"ok"``, or why Triton's frontend refuses ``kind`` on ``dtype``."""
    import torch
    tdt = {"i8": torch.int8, "u8": torch.uint8, "i16": torch.int16, "u16": torch.uint16,
           "i32": torch.int32, "u32": torch.uint32, "i64": torch.int64, "u64": torch.uint64,
           "fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2, "fp16": torch.float16,
           "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}[dtype]
    x = torch.ones(2, dtype=torch.float32).to(tdt)
    try:
        probe_kernel[(1,)](x, KIND=KINDS.index(kind))
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        return f"{type(e).__name__}: {e}".splitlines()[0][:300]
    return "ok"


def run_case(case: dict) -> dict:
    """``{"probe": True}``: every (kind, dtype) through the frontend; otherwise one dtype's
    kernel on the case's inputs (bit patterns), returning memory and old values as bits."""
    if case.get("probe"):
        return {f"{k}/{d}": _probe(k, d) for k in KINDS for d in DTYPES}
    import torch
    d = case["dtype"]
    x, v, c, o = (_torch_of(np.array(case[n], dtype=np.uint64), d) for n in "xvco")
    i = torch.tensor(case["i"], dtype=torch.int32)
    m = torch.tensor(case["m"], dtype=torch.int32)
    atomics_kernel[(1,)](x, v, c, i, m, o, N=N, KINDS=case["kinds"], NSEG=len(SEGMENTS))
    return {"x": _bits_of(x, d), "o": _bits_of(o, d)}


if __name__ == "__main__":
    import os

    assert os.environ.get("TRITON_INTERPRET") == "1", "set TRITON_INTERPRET=1 before starting"
    from interp_runner import serve_cases

    _install_shims()
    serve_cases(run_case, sys.argv[1], sys.argv[2])
