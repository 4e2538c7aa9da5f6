"""The fuzzer's atomics axis: a kernel may also update memory with ``tl.atomic_*``.

Why: atomics are read-modify-writes the compiler must refuse on a communicated tensor (a
consumed tensor's copies or a produced tensor's chunk signals would race with them; issue 28,
docs/soundness.md "Atomics") and must leave alone everywhere else, where the fused kernel runs
them as the unfused one does -- in another program order, which float adds round differently
(the emulator's "float atomic order" notes, docs/emulator.md).  Hand-written tests cover a few
such kernels; this axis writes them in every combination:

* ``atomic`` -- ``none`` (most cases), ``local`` (a tensor no schedule moves: a counter, a
  histogram, per-row or per-element results in an extra parameter ``w_ptr``, or a split-K /
  split-N reduction of the kernel's own output when the schedule moves one of its inputs) or
  ``comm`` (the communicated tensor itself: an atomic on the tile the kernel reads, a counter
  in its first element, an atomic in place of the output's store, a TMA reduction);
* ``atomic_op`` -- ``add``, ``max``, ``min``, ``xchg``, ``cas``, ``and``, ``or``, ``xor``;
* ``atomic_dtype`` -- int32 and fp32 mostly, and every other dtype Triton's frontend takes for
  the op that the emulator models: uint32, int64, fp64, fp16/bf16 (add, cas), int16 (cas);
* ``atomic_pattern`` -- local: ``elem`` (one update per element), ``rows`` (every lane of a row
  into one element, or the row reduced first), ``hist`` (addresses computed from the data),
  ``count`` (one element per row tile modulo ``NJ``: scalar or tensor forms; ``xchg``/``cas``
  elect one winner per element and count the winners), ``split`` (the K or column loop split
  over a grid axis, partials added atomically); comm: ``tile``, ``scalar``, ``replace``,
  ``desc``;
* ``atomic_mask`` -- ``bounds`` (the tile's bounds), ``pred`` (bounds and a data predicate),
  ``none`` (only where every lane is in bounds).

Every local pattern has an order-independent result (integer ops, max/min, bitwise ops,
elections whose winners are counted, one xchg/cas per element), except float adds, whose order
the emulator bounds.  :func:`check_unfused` is the generator's own check: numpy computes what
the unfused kernel must leave in the updated tensor.

The draws come from their own ``random.Random`` (seeded with the case's seed), so a case
whose ``atomic`` is ``none`` is the case the generator wrote before this axis existed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

import numpy as np

from ..dtypes import tl_name
from ..emulate.memory import etype_named, to_etype
from .case import Picker, Tensor, cdiv

__all__ = ["LEGAL", "OPS", "WHERE", "AtomicPlan", "StorePoint", "check_unfused", "draw", "emit",
           "model", "tensors_of"]

WHERE = ("none", "local", "comm")
OPS = ("add", "max", "min", "xchg", "cas", "and", "or", "xor")
_INTS = ("int32", "uint32", "int64")
#: what Triton 3.6's frontend takes for each op, among the dtypes the emulator stores
#: (tests/atomics_interp_worker.py probes the same table against the frontend)
LEGAL = {
    "add": _INTS + ("fp16", "bf16", "fp32", "fp64"),
    "max": _INTS + ("fp32", "fp64"), "min": _INTS + ("fp32", "fp64"),
    "and": _INTS + ("fp32", "fp64"), "or": _INTS + ("fp32", "fp64"),
    "xor": _INTS + ("fp32", "fp64"), "xchg": _INTS + ("fp32", "fp64"),
    "cas": ("int16",) + _INTS + ("fp16", "bf16", "fp32", "fp64"),
}
_OP_WEIGHTS = {"add": 4, "max": 2, "min": 2, "xchg": 2, "cas": 2, "and": 1, "or": 1, "xor": 1}
_DT_WEIGHTS = {"int32": 4, "fp32": 4, "uint32": 1, "int64": 1, "fp64": 1, "fp16": 1, "bf16": 1,
               "int16": 1}
#: reductions whose result does not depend on the order of the updates
_ORDER_FREE = ("add", "max", "min", "and", "or", "xor")
#: a reduced form's reduction and the value masked-off lanes contribute to it
_RED = {"add": "tl.sum", "max": "tl.max", "min": "tl.min"}
_FILL = {"add": "0", "max": "float(\"-inf\")", "min": "float(\"inf\")"}
_FLOAT_BITS = {"fp16": 11, "bf16": 8, "fp32": 24, "fp64": 53}   # significand bits
#: the value an election writes (exact in every dtype)
ELECT = 7
#: the histogram's buckets: (s > -0.5) + (s > 0) + (s > 0.5)
BUCKETS = 4


def is_float(dtype: str) -> bool:
    return dtype.startswith(("fp", "bf"))


@dataclass
class StorePoint:
    """Where a body stores its output tile, as the atomics see it: ``kind`` ``2d`` (a
    ``BM x BN`` tile at ``(r0, c0)``), ``1d`` (a ``BM`` tile of a row-sum output at ``r0``) or
    ``gather`` (row ``pm``, the column vector ``cols``); ``val`` the value stored (before its
    conversion to the output's type); ``pm`` the row-tile coordinate."""

    kind: str
    val: str
    out: Tensor
    pm: str
    r0: str = ""
    c0: str = ""


@dataclass
class AtomicPlan:
    """One case's atomics: what is updated, how, and (once emitted) on which source lines."""

    where: str
    op: str
    dtype: str
    pattern: str
    form: str = "tensor"         # "tensor" | "scalar" | "reduced"
    mask: str = "bounds"         # "bounds" | "pred" | "none"
    target: str = "w_ptr"        # the parameter the atomics update
    nj: int = 1                  # count: elements updated (row tile modulo NJ)
    split: int = 1               # split: programs per output tile along the reduced loop
    size: int = 0                # w_ptr's elements
    tile_rows: int = 1           # the output's tiling (the numpy model's tiles)
    tile_cols: int | None = None
    #: 1-based source lines of the atomics (set by ``generate``); a refusal must point at one
    lines: list = field(default_factory=list)
    body_lines: list = field(default_factory=list)

    @property
    def styles(self) -> dict:
        return {"atomic": self.where, "atomic_op": self.op, "atomic_dtype": self.dtype,
                "atomic_pattern": f"{self.pattern}-{self.form}", "atomic_mask": self.mask}

    @property
    def replaces_store(self) -> bool:
        """The atomic writes the kernel's output instead of its store."""
        return self.pattern in ("split", "replace")

    @property
    def fadd_param(self) -> str | None:
        """The parameter float atomic adds go into, if any: the only one whose elements may
        differ from the unfused kernel's within the emulator's float atomic bound."""
        if self.where != "local" or not is_float(self.dtype):
            return None
        if self.op == "add" or (self.pattern == "count" and self.op in ("xchg", "cas")):
            return self.target
        return None


def draw(seed: int, s: dict, dims: dict, cx: dict, tensors: list[Tensor],
         operand: str, force: dict) -> AtomicPlan | None:
    """The atomics of case ``seed`` (None: the case has none).  ``s``: the case's styles (body,
    addressing, role...), ``cx`` its tiles; ``force`` may pin ``atomic``, ``atomic_op``,
    ``atomic_dtype``, ``atomic_pattern``, ``atomic_mask``."""
    pick = Picker(random.Random(f"atomic:{seed}"), force)
    where = pick("atomic", WHERE, [74, 16, 10])
    if where == "none":
        return None
    kind = ("1d" if s["body"] == "rowsum" else
            "gather" if s["addressing"] in ("gather", "gather_hint") else "2d")
    M, N = dims["M"], dims["N"]
    BM, BN = cx.get("BM", 1), cx["BN"]
    if kind == "gather":
        if s["addressing"] == "gather" and s["tiling"] != "grid2d":
            BN = max(BN, 1 << (N - 1).bit_length())     # gen.py: the whole row
        exact, tr, tc = N % BN == 0, 1, BN
    elif kind == "1d":
        exact, tr, tc = M % BM == 0, BM, None
    else:
        exact, tr, tc = M % BM == 0 and N % BN == 0, BM, BN
    by = {t.name: t for t in tensors}
    out = by["c_ptr"] if s["body"] == "gemm" else by["y_ptr"]
    if where == "local":
        return _draw_local(pick, s, kind, exact, out, M, N, tr, tc)
    return _draw_comm(pick, s, kind, exact, by[operand], out, tr, tc)


def _draw_local(pick, s, kind, exact, out, M, N, tr, tc) -> AtomicPlan:
    pats = {"elem": 3, "hist": 2, "count": 3}
    if kind == "2d":
        pats["rows"] = 2
    if s["body"] in ("gemm", "rowsum") and s["role"] == "in":
        pats["split"] = 6           # the output is not communicated: split its reduction
    pattern = pick("atomic_pattern", list(pats), list(pats.values()))
    if pattern == "split":
        op = pick("atomic_op", ("add",))
        dtype = pick("atomic_dtype", (out.dtype,))
        mask = pick("atomic_mask", ("bounds", "none") if exact else ("bounds",))
        return AtomicPlan("local", op, dtype, "split", mask=mask, target=out.name,
                          split=pick("atomic_split", (2, 3)),
                          tile_rows=tr, tile_cols=tc)
    ops = [o for o in OPS if pattern in ("elem", "count") or o in _ORDER_FREE]
    op = pick("atomic_op", ops, [_OP_WEIGHTS[o] for o in ops])
    dts = list(LEGAL[op])
    dtype = pick("atomic_dtype", dts, [_DT_WEIGHTS[d] for d in dts])
    form = "tensor"
    if pattern == "rows" and (op == "add" or (op in ("max", "min") and is_float(dtype))):
        form = pick("atomic_form", ("tensor", "reduced"))
    if pattern == "count":
        scalar_ok = not (op in ("and", "or", "xor") and is_float(dtype))
        form = pick("atomic_form", ("scalar", "tensor") if scalar_ok else ("tensor",))
    if form == "scalar":
        masks = ("none",) if op in ("xchg", "cas") else ("none", "pred")
    elif pattern == "count" and op == "cas":
        masks = ("none",)       # atomic_cas has no mask: every lane's address is in bounds
    else:
        masks = ("bounds", "pred", "none") if exact else ("bounds", "pred")
    mask = pick("atomic_mask", masks)
    nj = pick("atomic_nj", (1, 2, 3)) if pattern == "count" else 1
    size = {"elem": M * (N if kind != "1d" else 1) + 1, "rows": M, "hist": BUCKETS,
            "count": 2 * nj}[pattern]
    return AtomicPlan("local", op, dtype, pattern, form=form, mask=mask, nj=nj, size=size,
                      tile_rows=tr, tile_cols=tc)


def _draw_comm(pick, s, kind, exact, t: Tensor, out: Tensor, tr, tc) -> AtomicPlan:
    dtype = t.dtype
    # a mask can be left out where the tile is the output's (whole tiles only)
    exact = exact and (t.name == out.name or (t.name == "x_ptr" and kind == "2d"))
    ops = [o for o in OPS if dtype in LEGAL[o]]
    op = pick("atomic_op", ops, [_OP_WEIGHTS[o] for o in ops])
    pats = {"tile": 3, "scalar": 2}
    if t.name == out.name and op in ("add", "xchg"):
        pats["replace"] = 3
    if s["addressing"] == "tensor_desc" and t.dtype != "int32" and op == "add" \
            and len(t.shape) == 2:
        pats["desc"] = 4
    if op == "cas" and not exact:
        pats.pop("tile")        # no mask: only whole tiles stay in bounds
    if t.name == "idx_ptr" and s["addressing"] != "gather_vec":
        pats.pop("tile", None)  # one index per program: a scalar
    pattern = pick("atomic_pattern", list(pats), list(pats.values()))
    masks = ("bounds", "none") if exact else ("bounds",)
    if pattern in ("scalar", "desc") or op == "cas":
        masks = ("none",)
    mask = pick("atomic_mask", masks)
    split = 1
    if pattern == "replace" and s["body"] in ("gemm", "rowsum") and op == "add":
        split = pick("atomic_split", (1, 2, 3))
    form = "scalar" if pattern == "scalar" else "tensor"
    return AtomicPlan("comm", op, dtype, pattern, form=form, mask=mask, target=t.name,
                      split=split, tile_rows=tr, tile_cols=tc)


def tensors_of(plan: AtomicPlan | None, tensors: list[Tensor]) -> list[Tensor]:
    """The case's tensors with the atomics' own: ``w_ptr`` for a local update of an extra
    tensor; an output the atomics add into starts from zeros instead of NaN."""
    if plan is None:
        return tensors
    out = [replace(t, init="zeros") if t.name == plan.target and plan.replaces_store else t
           for t in tensors]
    if plan.where == "local" and plan.target == "w_ptr":
        init = "zeros" if plan.pattern == "count" and plan.op in ("xchg", "cas") else "random"
        out.append(Tensor("w_ptr", (plan.size,), plan.dtype, "acc", init=init))
    return out


# ------------------------------------------------------------------------------ emitting

def _value(dtype: str) -> str:
    """``w_s`` (the stored value as fp32) as the atomic's dtype: floats converted, integers
    quantized to eighths (unsigned: of the magnitude)."""
    if is_float(dtype):
        return "w_s" if dtype == "fp32" else f"w_s.to({tl_name(dtype)})"
    if dtype == "uint32":
        return "(tl.abs(w_s) * 8.0).to(tl.uint32)"
    return f"(w_s * 8.0).to({tl_name(dtype)})"


def emit(e, plan: AtomicPlan | None, sp: StorePoint, names: dict) -> None:
    """Emit the atomics of ``plan`` at the store point ``sp`` (after the store, or in its
    place when the plan replaces it).  ``names``: tensor name -> Tensor (strides, descriptors
    in ``e.descs``)."""
    if plan is None:
        return
    start = len(e.lines)
    _prelude(e, sp, plan)
    if plan.where == "local":
        _emit_local(e, plan, sp)
    else:
        _emit_comm(e, plan, sp, names)
    plan.body_lines += [i for i in range(start, len(e.lines))
                        if "atomic_" in e.lines[i]]


def _prelude(e, sp: StorePoint, plan: AtomicPlan) -> None:
    """The tile's indices, bounds, zero offsets and element positions, the stored value as
    fp32 (``w_s``), the predicate and the atomic's value (``w_a``)."""
    if sp.kind == "2d":
        e(f"w_r = {sp.r0} + tl.arange(0, BM)", f"w_c = {sp.c0} + tl.arange(0, BN)",
          "w_v = (w_r[:, None] < M) & (w_c[None, :] < N)",
          "w_z = w_r[:, None] * 0 + w_c[None, :] * 0",
          "w_pos = w_r[:, None] * N + w_c[None, :]")
    elif sp.kind == "1d":
        e(f"w_r = {sp.r0} + tl.arange(0, BM)", "w_v = w_r < M", "w_z = w_r * 0", "w_pos = w_r")
    else:
        e("w_v = cols < N", "w_z = cols * 0", f"w_pos = {sp.pm} * N + cols")
    if plan.where == "comm":
        return
    e(f"w_s = ({sp.val}).to({sp.out.name}.dtype.element_ty).to(tl.float32)",
      "w_p = w_v & (w_s > 0.0)", f"w_a = {_value(plan.dtype)}")


def _emit_local(e, plan: AtomicPlan, sp: StorePoint) -> None:
    op, dt = plan.op, plan.dtype
    m = {"bounds": ", mask=w_v", "pred": ", mask=w_p", "none": ""}[plan.mask]
    fn = f"tl.atomic_{op}"
    sel = {"bounds": "w_v", "pred": "w_p", "none": "w_v"}[plan.mask]
    if plan.pattern == "split":
        at = "w_r" if sp.kind == "1d" else f"w_r[:, None] * {sp.out.stride} + w_c[None, :]"
        e(f"tl.atomic_add({plan.target} + {at}, ({sp.val}).to({plan.target}.dtype."
          f"element_ty){m})")
        return
    if plan.pattern == "elem":
        if op == "cas":
            # no mask: lanes out of bounds swap the last element for its own value
            ptr = "w_ptr + w_pos" if plan.mask == "none" else \
                f"tl.where(w_v, w_ptr + w_pos, w_ptr + {plan.size - 1})"
            e(f"w_q = {ptr}", "w_cur = tl.load(w_q)",
              f"tl.atomic_cas(w_q, w_cur, tl.where({sel}, w_a, w_cur))")
        else:
            e(f"{fn}(w_ptr + w_pos, w_a{m})")
    elif plan.pattern == "rows":
        if plan.form == "reduced":
            red, fill = _RED[op], _FILL[op]
            e(f"{fn}(w_ptr + w_r, {red}(tl.where({sel}, w_a, {fill}), axis=1)"
              + ("" if plan.mask == "none" else ", mask=w_r < M") + ")")
        else:
            e(f"{fn}(w_ptr + w_r[:, None] + w_z, w_a{m})")
    elif plan.pattern == "hist":
        e("w_b = (w_s > -0.5).to(tl.int32) + (w_s > 0.0).to(tl.int32) + "
          "(w_s > 0.5).to(tl.int32)")
        val = "1" if op == "add" and not is_float(dt) else "w_a"
        e(f"{fn}(w_ptr + w_b, {val}{m})")
    else:
        _emit_count(e, plan, sp, fn, m, sel)


def _emit_count(e, plan: AtomicPlan, sp: StorePoint, fn: str, m: str, sel: str) -> None:
    op, dt, nj = plan.op, plan.dtype, plan.nj
    e(f"w_j = ({sp.pm}) % {nj}")
    tdt = tl_name(dt)
    if op in ("xchg", "cas"):
        # an election: one lane of the launch finds the element unset; the winners are counted
        if plan.form == "scalar":
            call = f"tl.atomic_xchg(w_ptr + w_j, tl.full([], {ELECT}, {tdt}))" if op == "xchg" \
                else (f"tl.atomic_cas(w_ptr + w_j, tl.full([], 0, {tdt}), "
                      f"tl.full([], {ELECT}, {tdt}))")
            won = f"w_o != {ELECT}" if op == "xchg" else "w_o == 0"
            e(f"w_o = {call}")
            if dt != "int16":       # no atomic_add on int16
                e(f"tl.atomic_add(w_ptr + {nj} + w_j, ({won}).to({tdt}))")
            return
        if op == "xchg":
            e(f"w_o = tl.atomic_xchg(w_ptr + w_j + w_z, (w_z + {ELECT}).to({tdt}){m})")
            won = f"(w_o != {ELECT}) & {sel}"
        else:
            e(f"w_o = tl.atomic_cas(w_ptr + w_j + w_z, w_z.to({tdt}), "
              f"(w_z + {ELECT}).to({tdt}))")
            won = "w_o == 0"
        if dt != "int16":
            e(f"tl.atomic_add(w_ptr + {nj} + w_j, tl.sum(({won}).to(tl.int32)).to({tdt}))")
        return
    if plan.form == "tensor":
        e(f"{fn}(w_ptr + w_j + w_z, w_a{m})")
        return
    if is_float(dt) or op == "add":
        red, fill = _RED[op], _FILL[op]
        val = f"{red}(tl.where(w_v, w_a, {fill}))"
    else:           # integer keys of the row tile
        val = {"max": f"({sp.pm} + 1)", "min": f"(100 - {sp.pm})",
               "and": f"(~(1 << ({sp.pm} % 16)))", "or": f"(1 << ({sp.pm} % 16))",
               "xor": f"({sp.pm} * 37 + 11)"}[op] + f".to({tdt})"
    if plan.mask == "pred":
        e("w_k = tl.sum(w_p.to(tl.int32))")
        e(f"{fn}(w_ptr + w_j, {val}, mask=w_k > 0)")
    else:
        e(f"{fn}(w_ptr + w_j, {val})")


def comm_geometry(name: str, sp: StorePoint) -> tuple:
    """``(rows expr, cols expr or None, row bound, col bound, row stride)`` of the tile of
    the communicated tensor ``name`` the atomic updates."""
    if name in ("y_ptr", "c_ptr"):
        if sp.kind == "1d":
            return "w_r", None, "M", None, None
        if sp.kind == "gather":
            return sp.pm, "cols", None, "N", "stride_ym"
        return "w_r", "w_c", "M", "N", "stride_ym" if name == "y_ptr" else "stride_cm"
    if name == "a_ptr":
        return "w_r", "tl.arange(0, BK)", "M", "K", "stride_am"
    if name == "b_ptr":
        return "tl.arange(0, BK)", "w_c", "K", "N", "stride_bk"
    if name == "idx_ptr":
        return ("g_r", None, "M", None, None) if sp.kind != "gather" else \
            (sp.pm, None, None, None, None)
    # x_ptr
    if sp.kind == "gather":
        return sp.pm, "cols", None, "N", "stride_xm"
    if sp.kind == "1d":
        return "w_r", "tl.arange(0, BN)", "M", "N", "stride_xm"
    return "w_r", "w_c", "M", "N", "stride_xm"


def _emit_comm(e, plan: AtomicPlan, sp: StorePoint, names: dict) -> None:
    t = names[plan.target]
    tdt = tl_name(plan.dtype)
    op = plan.op
    fn = f"tl.atomic_{op}"
    rows, cols, rb, cb, stride = comm_geometry(t.name, sp)
    if plan.pattern == "desc":
        d = e.descs[t.name]
        shape = {"a_ptr": "[BM, BK]", "b_ptr": "[BK, BN]"}.get(t.name, "[BM, BN]")
        r0 = {"a_ptr": f"{sp.pm} * BM", "b_ptr": "0"}.get(t.name, sp.r0)
        c0 = {"a_ptr": "0"}.get(t.name, sp.c0 or "0")
        e(f"{d}.atomic_add([{r0}, {c0}], tl.full({shape}, 1, {tdt}))")
        return
    if plan.pattern == "scalar":
        first = t.name if rows in ("w_r", "g_r", "tl.arange(0, BK)") else \
            (f"{t.name} + {rows}" + (f" * {stride}" if stride else ""))
        e(f"w_t = {first}")
        e(_comm_call(op, tdt, None, False, t.name == "idx_ptr"))
        return
    # the tile (or the output in place of its store)
    if cols is None:
        ptrs = f"{t.name} + {rows}"
        bound = f"{rows} < {rb}" if rb else None
    elif rows in ("w_r", "tl.arange(0, BK)", "g_r"):
        ptrs = f"{t.name} + ({rows})[:, None] * {stride} + ({cols})[None, :]"
        bound = f"(({rows})[:, None] < {rb}) & (({cols})[None, :] < {cb})"
    else:
        ptrs = f"{t.name} + {rows} * {stride} + {cols}"
        bound = f"{cols} < {cb}"
    e(f"w_t = {ptrs}")
    mask = bound if plan.mask == "bounds" and bound else None
    if plan.pattern == "replace":
        val = f"({sp.val}).to({t.name}.dtype.element_ty)"
        e(f"{fn}(w_t, {val}" + (f", mask={mask})" if mask else ")"))
        return
    e(_comm_call(op, tdt, mask, True, t.name == "idx_ptr"))


def _comm_call(op: str, tdt: str, mask: str | None, tile: bool, index: bool) -> str:
    """An atomic on the communicated tensor at ``w_t`` (a tile of pointers when ``tile``) with
    a constant of its type.  On an index tensor (``index``) the constant is 0 (a ``cas`` sets 0
    to 1): every index stays a row of the gathered tensor, so the unfused kernel's later
    gathers stay in bounds (adding 1 to a row index, seed 30252, made a later program read past
    the last row)."""
    if op == "cas":
        if tile:
            return f"tl.atomic_cas(w_t, tl.zeros(w_t.shape, {tdt}), tl.full(w_t.shape, 1, {tdt}))"
        return f"tl.atomic_cas(w_t, tl.full([], 0, {tdt}), tl.full([], 1, {tdt}))"
    val = "0" if index or op in ("max", "min") else "1"
    return f"tl.atomic_{op}(w_t, tl.full([], {val}, {tdt}){f', mask={mask}' if mask else ''})"


# ------------------------------------------------------------------------------ numpy model

def _dom(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values of ``dtype`` (an emulator buffer) in the model's domain: integers as int64 (an
    unsigned one by its bits), floats as float64."""
    return a.astype(np.float64) if is_float(dtype) else _wrap(a.astype(np.int64), dtype)


def _bits(f: np.ndarray, dtype: str) -> np.ndarray:
    """The bit patterns of float values (fp32/fp64) as uint64."""
    return f.astype(np.float32 if dtype == "fp32" else np.float64).view(
        np.uint32 if dtype == "fp32" else np.uint64).astype(np.uint64)


def _wrap(v: np.ndarray, dtype: str) -> np.ndarray:
    """Integers ``v`` (int64) wrapped to the integer ``dtype`` (two's complement; uint32 by its
    bits), as int64."""
    return v.astype(_INT_NP[dtype]).astype(np.int64)


def _convert(s: np.ndarray, dtype: str) -> np.ndarray:
    """What the kernel's ``w_a`` is for stored values ``s`` (float32), in the model's domain:
    floats rounded to ``dtype`` as the emulator rounds them, integers quantized (``_value``)."""
    if is_float(dtype):
        return to_etype(s.astype(np.float32), etype_named(dtype)).astype(np.float64)
    return np.trunc((np.abs(s) if dtype == "uint32" else s).astype(np.float32)
                    * np.float32(8)).astype(np.int64)


_INT_NP = {"int16": np.int16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64}
_UFUNC = {"add": np.add, "max": np.maximum, "min": np.minimum, "and": np.bitwise_and,
          "or": np.bitwise_or, "xor": np.bitwise_xor}


def _tiles(Y: np.ndarray, tr: int, tc: int | None):
    """``(pm, pn, flat positions)`` of each output tile."""
    M = Y.shape[0]
    N = Y.shape[1] if Y.ndim == 2 else 1
    idx = np.arange(Y.size).reshape(Y.shape)
    for pm in range(cdiv(M, tr)):
        if Y.ndim == 1:
            yield pm, 0, idx[pm * tr:(pm + 1) * tr]
            continue
        for pn in range(cdiv(N, tc)):
            yield pm, pn, idx[pm * tr:(pm + 1) * tr, pn * tc:(pn + 1) * tc].reshape(-1)


def model(plan: AtomicPlan, Y: np.ndarray, init: np.ndarray):
    """``(expected, tol)``: what the unfused kernel leaves in ``w_ptr`` given its stored output
    ``Y`` and the initial ``init`` (both in the emulator's storage), in the model's domain
    (see :func:`_dom`); ``tol`` per element for float adds, None where exact.  Bitwise ops on
    floats are modelled on the bit patterns (``expected`` then holds them)."""
    op, dt = plan.op, plan.dtype
    s = Y.astype(np.float32).reshape(-1)
    a = _convert(s, dt)
    pred = s > 0
    keep = pred if plan.mask == "pred" else np.ones_like(pred)
    rows = np.arange(Y.shape[0]).repeat(1 if Y.ndim == 1 else Y.shape[1])
    pm = rows // plan.tile_rows
    w = _dom(init, dt).copy()
    bitwise = is_float(dt) and op in ("and", "or", "xor")
    if bitwise:
        w, a = _bits(w, dt), _bits(a, dt)
    terms = np.zeros(w.shape)       # float adds: the magnitudes added (the tolerance's scale)
    counts = np.zeros(w.shape)
    if plan.pattern == "elem":
        pos = np.arange(s.size)
        if op in ("xchg", "cas"):
            w[pos[keep]] = a[keep]
        else:
            _UFUNC[op].at(w, pos[keep], a[keep])
            np.add.at(terms, pos[keep], np.abs(a[keep]) if not bitwise else 0)
            np.add.at(counts, pos[keep], 1)
    elif plan.pattern in ("rows", "hist") or (plan.pattern == "count" and plan.form == "tensor"
                                                and op not in ("xchg", "cas")):
        idx = {"rows": rows,
               "hist": (s > -0.5).astype(int) + (s > 0).astype(int) + (s > 0.5).astype(int),
               "count": pm % plan.nj}[plan.pattern]
        val = np.ones_like(a) if plan.pattern == "hist" and op == "add" and not is_float(dt) \
            else a
        _UFUNC[op].at(w, idx[keep], val[keep])
        if not bitwise:
            np.add.at(terms, idx[keep], np.abs(val[keep]))
        np.add.at(counts, idx[keep], 1)
    elif op in ("xchg", "cas"):
        nj = plan.nj
        hit = np.zeros(nj, bool)
        for tpm, _pn, pos in _tiles(Y, plan.tile_rows, plan.tile_cols):
            if plan.form == "scalar" or keep[pos].any():
                hit[tpm % nj] = True
        for j in np.nonzero(hit)[0]:
            won = (w[j] != ELECT) if op == "xchg" else (w[j] == 0)
            w[j] = ELECT
            if dt != "int16":
                w[nj + j] += int(won)
    else:       # scalar forms, one update per tile
        for tpm, _pn, pos in _tiles(Y, plan.tile_rows, plan.tile_cols):
            if plan.mask == "pred" and not pred[pos].any():
                continue
            j = tpm % plan.nj
            if is_float(dt) or op == "add":
                v = {"add": np.sum, "max": np.max, "min": np.min}[op](a[pos])
                terms[j] += np.abs(a[pos]).sum()
                counts[j] += pos.size
            else:
                v = {"max": tpm + 1, "min": 100 - tpm, "and": ~(1 << (tpm % 16)),
                     "or": 1 << (tpm % 16), "xor": tpm * 37 + 11}[op]
                v = int(_wrap(np.array([v], np.int64), dt)[0])
            w[j] = _UFUNC[op].reduce(np.array([w[j], v], dtype=w.dtype))
    if is_float(dt) and not bitwise:
        if op == "add":
            u = 2.0 ** (1 - _FLOAT_BITS[dt])
            return w, (counts + 1) * u * (terms + np.abs(_dom(init, dt))) + 1e-30
        return w, None
    if not is_float(dt):
        w = _wrap(w, dt)
    return w, None


def check_unfused(plan: AtomicPlan, got: dict, inputs: dict, out: str) -> str | None:
    """None when the unfused kernel left in ``w_ptr`` what :func:`model` says, else why not
    (the generator wrote another kernel than it meant)."""
    if plan.where != "local" or plan.target != "w_ptr":
        return None
    exp, tol = model(plan, got[out], inputs["w_ptr"])
    g = got["w_ptr"]
    if is_float(plan.dtype) and plan.op in ("and", "or", "xor"):
        g = _bits(g, plan.dtype)
    else:
        g = _dom(g, plan.dtype)
    bad = ~(np.abs(g - exp) <= tol) if tol is not None else g != exp
    if bad.any():
        i = int(np.argmax(bad))
        return (f"the unfused kernel's w_ptr ({plan.op} {plan.dtype} {plan.pattern}) differs "
                f"from numpy at {int(bad.sum())} element(s) (first {i}: {g[i]} vs {exp[i]})")
    return None
