"""Random small ``@triton.jit`` kernels in the styles users write, each paired with a random
verified chunk schedule on one of its tensors.

Why generate *source*: the compiler's input is whatever Triton's frontend makes of real kernel
text, and the styles that break an access analysis (a mask here, a block pointer there, a
coordinate derived from another, a loop over tiles) only exist as source.  Triton's JIT reads
the source with ``inspect``, so each kernel is written to a real ``.py`` file and imported
(:func:`load_kernel`).

A :class:`Case` is fully determined by its seed: :func:`generate` draws independent style
choices from ``random.Random(seed)`` --

* ``body``: ``copy``, ``scale`` (elementwise), ``rowsum`` (``tl.sum`` along a row, looping over
  column tiles), ``gemm`` (``tl.dot`` over a K loop);
* ``addressing``: ``ptr_mask`` (pointer arithmetic, masks, runtime strides), ``ptr_nomask``,
  ``ptr_stride`` (a runtime inner stride as well), ``block_ptr`` (``boundary_check``),
  ``tensor_desc`` (device-side ``tl.make_tensor_descriptor``), ``hint`` (pointer arithmetic
  plus ``syncopate.language.hint_region*``), ``gather`` (rows read through loaded indices, one
  row per program), ``gather_hint`` (the same with a hint whose bounds are the loaded row),
  ``gather_vec`` (a whole block of loaded row indices: no box can be derived);
* ``tiling``: ``row1d`` (row-major linear pid), ``colmajor``, ``grouped`` (GROUP_M swizzle),
  ``grid2d``, ``derived`` (``j = pid - i * n``), ``persistent`` (a loop over tiles with a
  constexpr stride) and ``persistent_np`` (stride ``tl.num_programs(0)``);
* the communicated tensor (an input the kernel reads, or the output it writes) and a schedule
  template that fits it (``all_gather`` on rows or columns, split 1-2, pull/push, swizzle/ring;
  ``reduce_scatter`` for outputs; ``ring_pass``, ``all_to_all``, ``all_reduce`` occasionally; a
  small share of deliberate role mismatches that must be refused);
* world size (2, sometimes 3 or 4), backend (``sm``/``ce``/``nvshmem``), comm programs;
* atomics (``atomics.py``, from a generator of their own): none mostly, else on a tensor no
  schedule moves (counters, histograms, split-K) or on the communicated tensor (to be refused).

Shapes are small (rows 64-256, columns 32-128) so a case emulates in about a second.

This module draws the choices and writes each body; the case itself lives in ``case.py`` and
the source emitters every body shares (tile accesses, tilings) in ``source.py``.
"""

from __future__ import annotations

import random
from typing import Any

from syncopate.schedule import all_gather, all_reduce, all_to_all, reduce_scatter, ring_pass

from . import atomics
from .atomics import StorePoint
from .case import STYLE_KEYS, Case, Picker, Tensor, cdiv, load_kernel
from .source import KernelSource

__all__ = ["ADDRESSING", "BACKENDS", "BODIES", "STYLE_KEYS", "TEMPLATE_NAMES", "TILINGS", "Case",
           "Tensor", "generate", "load_kernel"]

BODIES = ("copy", "scale", "rowsum", "gemm")
ADDRESSING = ("ptr_mask", "ptr_nomask", "ptr_stride", "block_ptr", "tensor_desc", "hint",
              "gather", "gather_hint", "gather_vec")
TILINGS = ("row1d", "colmajor", "grouped", "grid2d", "derived", "persistent", "persistent_np")
BACKENDS = ("sm", "ce", "nvshmem")
TEMPLATE_NAMES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "ring_pass")
_TEMPLATES = dict(zip(TEMPLATE_NAMES, (all_gather, reduce_scatter, all_reduce, all_to_all,
                                       ring_pass)))


class _Gen:
    """Draws the style choices of one case (every draw from ``random.Random(seed)``, in a fixed
    order: the case is a function of its seed); ``src`` is the kernel being written."""

    def __init__(self, seed: int, force: dict | None = None):
        self.seed = seed
        self.pick = Picker(random.Random(seed), dict(force or {}))
        self.rng, self.force = self.pick.rng, self.pick.force
        self.src = KernelSource()

    # ------------------------------------------------------------- choices
    def choose(self) -> dict:
        s: dict[str, Any] = {}
        body = s["body"] = self.pick("body", BODIES, [2, 2, 2, 3])
        addr = list(ADDRESSING)
        if body == "gemm":
            addr = ["ptr_mask", "ptr_nomask", "ptr_stride", "block_ptr", "tensor_desc", "hint"]
        if body == "rowsum":
            addr = [a for a in addr if a not in ("gather_hint", "gather")]
        s["addressing"] = self.pick("addressing", addr)
        if s["addressing"] in ("gather", "gather_hint"):
            tilings = ["row1d", "grid2d", "persistent", "persistent_np"]
        elif body == "rowsum":
            tilings = ["row1d", "persistent", "persistent_np"]
        else:
            tilings = list(TILINGS)
        s["tiling"] = self.pick("tiling", tilings)
        s["dtype"] = "bf16" if body == "gemm" else self.pick("dtype", ("bf16", "fp32"), [3, 1])
        s["world_size"] = self.pick("world_size", (2, 3, 4), [7, 2, 1])
        s["backend"] = self.pick("backend", BACKENDS, [2, 1, 1])
        return s

    def shapes(self, s) -> tuple[dict, dict]:
        """Tensor sizes and tile sizes.  Styles without bounds checks get whole tiles."""
        r = self.rng
        exact = s["addressing"] in ("ptr_nomask", "hint", "gather_hint")
        if s["body"] == "gemm":
            BM, BN, BK = r.choice((16, 32, 64)), r.choice((16, 32, 64)), r.choice((16, 32))
            M = BM * r.randint(max(1, 64 // BM), 128 // BM)
            N = BN * r.randint(max(1, 32 // BN), 64 // BN)
            K = BK * r.randint(max(1, 32 // BK), 64 // BK)
            if not exact and s["addressing"] != "tensor_desc" and r.random() < 0.4:
                M -= r.choice((8, 16)) if M > 32 else 0
            return dict(M=M, N=N, K=K), dict(BM=BM, BN=BN, BK=BK)
        gather = s["addressing"] in ("gather", "gather_hint")
        M = r.choice((64, 96, 128) if gather else (64, 96, 128, 160, 192, 256))
        N = r.choice((32, 48, 64, 96, 128))
        BN = r.choice((16, 32, 64, 128))
        BM = 1 if gather else r.choice((16, 32, 64))
        if exact:
            BN = max(d for d in (16, 32, 64, 128) if d <= BN and N % d == 0)
            if not gather:
                BM = max(d for d in (16, 32, 64) if d <= BM and M % d == 0)
        if s["tiling"] == "row1d" and s["addressing"] == "gather" and r.random() < 0.5:
            BN = 1 << (N - 1).bit_length()          # one program per row, the whole row
        if s["body"] == "rowsum" and s["addressing"] in ("ptr_mask", "block_ptr",
                                                         "tensor_desc", "ptr_stride") \
                and r.random() < 0.3:
            M -= 8                                   # a ragged last row tile
        if s["addressing"] in ("ptr_mask", "block_ptr", "ptr_stride", "gather", "tensor_desc") \
                and r.random() < 0.3 and N > 32:
            N -= 16                                  # a ragged last column tile
        return dict(M=M, N=N), dict(BM=BM, BN=BN)

    # ------------------------------------------------------------- tensors and roles
    def tensors(self, s, dims) -> list[Tensor]:
        dt = s["dtype"]
        M, N = dims["M"], dims["N"]
        if s["body"] == "gemm":
            K = dims["K"]
            return [Tensor("a_ptr", (M, K), dt, "in", "stride_am"),
                    Tensor("b_ptr", (K, N), dt, "in", "stride_bk"),
                    Tensor("c_ptr", (M, N), dt, "out", "stride_cm")]
        ts = [Tensor("x_ptr", (M, N), dt, "in", "stride_xm")]
        if s["addressing"].startswith("gather"):
            ts.append(Tensor("idx_ptr", (M,), "int32", "in"))
        if s["body"] == "rowsum":
            ts.append(Tensor("y_ptr", (M,), dt, "out"))
        else:
            ts.append(Tensor("y_ptr", (M, N), dt, "out", "stride_ym"))
        return ts

    def schedule(self, s, tensors):
        r = self.rng
        W = s["world_size"]
        ins = [t for t in tensors if t.role == "in" and (t.dtype != "int32" or r.random() < 0.3)]
        outs = [t for t in tensors if t.role == "out"]
        role = self.pick("role", ("in", "out"), [3, 2])
        t = r.choice(ins if role == "in" else outs)
        dim = r.choice((0,) if len(t.shape) == 1 else (0, 1))
        split = r.choice((1, 1, 2))
        mode = r.choice(("pull", "push"))
        order = r.choice(("swizzle", "swizzle", "ring"))
        if role == "in":
            tmpl = self.pick("template", ("all_gather", "ring_pass", "all_to_all",
                                          "reduce_scatter"), [16, 2, 1, 1])
        else:
            tmpl = self.pick("template", ("reduce_scatter", "all_reduce", "all_gather"),
                             [16, 2, 1])
        if tmpl == "all_to_all" and len(t.shape) == 1:
            tmpl = "all_gather"
        kw = dict(mode=mode, split=split, tensor=t.name.split("_")[0].upper())
        if tmpl == "all_to_all":
            kw.update(split_dim=dim, concat_dim=1 - dim)
        else:       # a ring pass has no order to choose
            kw.update(dim=dim, **({} if tmpl == "ring_pass" else {"order": order}))
        sched = _TEMPLATES[tmpl](list(t.shape), t.dtype, W, **kw)
        s.update(role=role, template=tmpl, operand=t.name, dim=dim, split=split, mode=mode,
                 order=order)
        return sched, t.name

    # ------------------------------------------------------------- grid
    def grid(self, s, n_m: int, n_n: int | None, cx: dict) -> tuple[int, ...]:
        """The launch grid for ``n_m`` x ``n_n`` tiles; draws the program count of persistent
        tilings and GROUP_M of grouped ones (into ``cx``)."""
        t = s["tiling"]
        if t in ("persistent", "persistent_np"):
            total = n_m * (n_n or 1)
            np_ = self.rng.randint(2, max(2, min(6, total)))
            if t == "persistent":
                cx["NUM_PROGS"] = np_
            return (np_,)
        if t == "grid2d":
            return (n_m, n_n) if n_n else (n_m,)
        if t == "grouped":
            cx["GROUP_M"] = self.rng.choice((2, 4))
        return (n_m * (n_n or 1),)


def generate(seed: int, **force) -> Case:
    """The case of ``seed``.  ``force`` pins style choices (``body="gemm"``,
    ``addressing="block_ptr"``, ``tiling=...``, ``role=...``, ``template=...``,
    ``backend=...``, ``world_size=...``, ``dtype=...``, and the atomics axis: ``atomic=``
    ``"none"``/``"local"``/``"comm"``, ``atomic_op=``, ``atomic_dtype=``, ``atomic_pattern=``,
    ``atomic_mask=``, see ``atomics.py``); the rest is drawn from the seed."""
    g = _Gen(seed, force)
    s = g.choose()
    dims, tiles = g.shapes(s)
    tensors = g.tensors(s, dims)
    sched, operand = g.schedule(s, tensors)
    cx: dict[str, int] = dict(tiles)
    # the atomics come from their own generator: a case without them is the one written
    # before the axis existed
    plan = atomics.draw(seed, s, dims, cx, tensors, operand, g.force)
    tensors = atomics.tensors_of(plan, tensors)
    if plan is not None:
        s.update(plan.styles)
    split = plan.split if plan is not None else 1
    if split > 1:
        cx["SPLIT_K"] = split
    e = g.src
    body, addr = s["body"], s["addressing"]
    by = {t.name: t for t in tensors}
    scalars: dict[str, int] = dict(dims)    # M, N (and K)
    for t in tensors:
        if t.stride:
            scalars[t.stride] = t.shape[1]
    # access style of the plain tile accesses (gathers write their output by pointers)
    style = addr if not addr.startswith("gather") else "ptr_mask"
    if addr == "ptr_stride":
        for t in tensors:
            if len(t.shape) == 2:
                scalars[f"{t.name[0]}_sn"] = 1
    if body == "scale":
        cx["SCALE_NUM"] = g.rng.choice((2, 3, 6))
    M, N = dims["M"], dims["N"]
    if style == "tensor_desc":
        for t in tensors:
            if (t.role == "in" and t.dtype == "int32") or t.role == "acc":
                continue
            if len(t.shape) == 2:
                R, C = ("M", "K") if t.name == "a_ptr" else ("K", "N") if t.name == "b_ptr" \
                    else ("M", "N")
                blk = {"a_ptr": "[BM, BK]", "b_ptr": "[BK, BN]"}.get(t.name, "[BM, BN]")
                e(f"{t.name[0]}_desc = tl.make_tensor_descriptor({t.name}, shape=[{R}, {C}], "
                  f"strides=[{t.stride}, 1], block_shape={blk})")
            else:
                e(f"{t.name[0]}_desc = tl.make_tensor_descriptor({t.name}, shape=[M], "
                  f"strides=[1], block_shape=[BM])")
            e.descs[t.name] = f"{t.name[0]}_desc"

    n_m_val = cdiv(M, cx["BM"])
    if body == "gemm":
        n_n_val = cdiv(N, cx["BN"])
        pm, pn = e.tiling(s["tiling"], "tl.cdiv(M, BM)", "tl.cdiv(N, BN)")
        a, b, c = by["a_ptr"], by["b_ptr"], by["c_ptr"]
        e("acc = tl.zeros((BM, BN), dtype=tl.float32)")
        k0, kstep, kadv = "0", "", "BK"
        if split > 1:       # split-K: grid axis ks takes every SPLIT_K-th K step
            e(f"ks = tl.program_id({2 if s['tiling'] == 'grid2d' else 1})")
            k0, kstep, kadv = "ks", ", SPLIT_K", "BK * SPLIT_K"
        if style == "block_ptr":
            kb = "0" if split == 1 else "ks * BK"
            e(f"a_bp = tl.make_block_ptr(a_ptr, (M, K), (stride_am, 1), ({pm} * BM, {kb}), "
              f"(BM, BK), (1, 0))",
              f"b_bp = tl.make_block_ptr(b_ptr, (K, N), (stride_bk, 1), ({kb}, {pn} * BN), "
              f"(BK, BN), (1, 0))",
              f"for k in range({k0}, tl.cdiv(K, BK){kstep}):")
            e.push()
            e("a_v = tl.load(a_bp, boundary_check=(0, 1), padding_option=\"zero\")",
              "b_v = tl.load(b_bp, boundary_check=(0, 1), padding_option=\"zero\")",
              "acc = tl.dot(a_v, b_v, acc)",
              f"a_bp = tl.advance(a_bp, (0, {kadv}))", f"b_bp = tl.advance(b_bp, ({kadv}, 0))")
        else:
            e(f"for k in range({k0}, tl.cdiv(K, BK){kstep}):")
            e.push()
            av = e.access2(style, a, f"{pm} * BM", "k * BK", "BM", "BK", "M", "K", "load")
            bv = e.access2(style, b, "k * BK", f"{pn} * BN", "BK", "BN", "K", "N", "load")
            e(f"acc = tl.dot({av}, {bv}, acc)")
        e.ind -= 1
        if plan is None or not plan.replaces_store:
            e.access2(style, c, f"{pm} * BM", f"{pn} * BN", "BM", "BN", "M", "N", "store",
                      "acc")
        atomics.emit(e, plan, StorePoint("2d", "acc", c, pm, f"{pm} * BM", f"{pn} * BN"), by)
    elif body == "rowsum":
        n_n_val = None
        pm, _ = e.tiling(s["tiling"], "tl.cdiv(M, BM)", None)
        x, y = by["x_ptr"], by["y_ptr"]
        e("acc = tl.zeros((BM,), dtype=tl.float32)")
        c0, cstep = "0", ""
        if split > 1:       # split-N: grid axis 1 takes every SPLIT_K-th column tile
            e("ks = tl.program_id(1)")
            c0, cstep = "ks", ", SPLIT_K"
        if addr == "gather_vec":
            e("g_r = %s * BM + tl.arange(0, BM)" % pm,
              "src = tl.load(idx_ptr + g_r, mask=g_r < M, other=0)",
              f"for c in range({c0}, tl.cdiv(N, BN){cstep}):")
            e.push()
            e("g_c = c * BN + tl.arange(0, BN)",
              "x_v = tl.load(x_ptr + src[:, None] * stride_xm + g_c[None, :], "
              "mask=(g_r[:, None] < M) & (g_c[None, :] < N), other=0.0)")
            xv = "x_v"
        else:
            e(f"for c in range({c0}, tl.cdiv(N, BN){cstep}):")
            e.push()
            xv = e.access2(style, x, f"{pm} * BM", "c * BN", "BM", "BN", "M", "N", "load")
        e(f"acc += tl.sum({xv}.to(tl.float32), axis=1)")
        e.ind -= 1
        if plan is None or not plan.replaces_store:
            e.store1(style, y, f"{pm} * BM", "BM", "M", "acc")
        atomics.emit(e, plan, StorePoint("1d", "acc", y, pm, f"{pm} * BM"), by)
    else:
        x, y = by["x_ptr"], by["y_ptr"]
        gather = addr in ("gather", "gather_hint")
        if gather:
            # one row per program; column tiles on axis 1 of a 2-D grid (or the whole row)
            n_n_val = cdiv(N, cx["BN"]) if s["tiling"] == "grid2d" else None
            if s["tiling"] != "grid2d":
                cx["BN"] = max(cx["BN"], 1 << (N - 1).bit_length()) if addr == "gather" \
                    else cx["BN"]
            pm, pn = e.tiling(s["tiling"], "M", "tl.cdiv(N, BN)" if n_n_val else None)
            if pn is None and addr == "gather_hint" and cx["BN"] < N:
                # the hint names one column tile: loop over them
                e("for pn in range(0, tl.cdiv(N, BN)):")
                e.push()
                pn = "pn"
            c0 = f"{pn} * BN" if pn else "0"
            e(f"src = tl.load(idx_ptr + {pm})", f"cols = {c0} + tl.arange(0, BN)")
            if addr == "gather_hint":
                e(f"sl.hint_region2(x_ptr, src, src + 1, {c0}, {c0} + BN)")
                e("x_v = tl.load(x_ptr + src * stride_xm + cols)")
            else:
                e("x_v = tl.load(x_ptr + src * stride_xm + cols, mask=cols < N, other=0.0)")
            val = _scaled(body, "x_v")
            if plan is None or not plan.replaces_store:
                e(f"tl.store(y_ptr + {pm} * stride_ym + cols, ({val}).to(y_ptr.dtype."
                  "element_ty)" + (")" if addr == "gather_hint" else ", mask=cols < N)"))
            atomics.emit(e, plan, StorePoint("gather", val, y, pm), by)
            n_m_val = M
            cx.pop("BM")
        else:
            n_n_val = cdiv(N, cx["BN"])
            pm, pn = e.tiling(s["tiling"], "tl.cdiv(M, BM)", "tl.cdiv(N, BN)")
            if addr == "gather_vec":
                e(f"g_r = {pm} * BM + tl.arange(0, BM)", f"g_c = {pn} * BN + tl.arange(0, BN)",
                  "src = tl.load(idx_ptr + g_r, mask=g_r < M, other=0)",
                  "g_m = (g_r[:, None] < M) & (g_c[None, :] < N)",
                  "x_v = tl.load(x_ptr + src[:, None] * stride_xm + g_c[None, :], mask=g_m, "
                  "other=0.0)")
                xv = "x_v"
            else:
                xv = e.access2(style, x, f"{pm} * BM", f"{pn} * BN", "BM", "BN", "M", "N",
                               "load")
            e(f"o_v = {_scaled(body, xv)}")
            if plan is None or not plan.replaces_store:
                e.access2(style, y, f"{pm} * BM", f"{pn} * BN", "BM", "BN", "M", "N",
                          "store", "o_v", tag="o")
            atomics.emit(e, plan, StorePoint("2d", "o_v", y, pm, f"{pm} * BM", f"{pn} * BN"),
                         by)
    grid = g.grid(s, n_m_val, n_n_val, cx)
    if s["tiling"] == "persistent" and "NUM_PROGS" not in cx:
        cx["NUM_PROGS"] = grid[0]
    if split > 1:
        grid = tuple(grid) + (split,)
    names = [t.name for t in tensors] + list(scalars)
    params = ", ".join(names + [f"{k}: tl.constexpr" for k in cx])
    kname = f"fuzz_{seed}"
    header = ["import triton", "import triton.language as tl", "import syncopate.language as sl",
              "", "", "@triton.jit", f"def {kname}({params}):",
              f'    """seed {seed}: {" ".join(f"{k}={v}" for k, v in s.items())}"""']
    source = "\n".join(header) + "\n" + e.text() + "\n"
    if plan is not None:
        plan.lines = [len(header) + i + 1 for i in plan.body_lines]
    # Triton's JIT adds tt.divisibility=16 to pointers and to ints that are multiples of 16
    idx = {n: i for i, n in enumerate(names)}
    attrs = {(idx[t.name],): [["tt.divisibility", 16]] for t in tensors}
    for n, v in scalars.items():
        if v % 16 == 0:
            attrs[(idx[n],)] = [["tt.divisibility", 16]]
    W = s["world_size"]
    rng = g.rng
    policies = ("in-order", "late", f"behind:{rng.randrange(W)}", f"random:{seed % 9973}")
    s["tiles"] = "x".join(f"{k}{v}" for k, v in cx.items() if k in ("BM", "BN", "BK"))
    s["shape"] = "x".join(str(v) for v in dims.values())
    return Case(seed=seed, styles=s, source=source, kernel_name=kname, tensors=tensors,
                scalars=scalars, constexprs=cx, grid=grid, operand=operand, schedule=sched,
                backend=s["backend"], comm_programs=rng.randint(1, 4), policies=policies,
                attrs=attrs, atomic=plan)


def _scaled(body: str, v: str) -> str:
    if body == "scale":
        return f"{v} * (SCALE_NUM / 4.0) + 1.0"
    return v

