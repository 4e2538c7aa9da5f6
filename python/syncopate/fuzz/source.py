"""Writing a fuzz kernel's source: :class:`KernelSource` holds the lines of the kernel body at
an indentation level and emits the pieces every style combination shares -- one 2-D tile
access (pointer arithmetic with or without masks, a runtime inner stride, a block pointer, a
tensor descriptor, a region hint), a 1-D row-sum store, and the code that picks a program's
tile for each tiling.

Nothing here draws a random number: the choices are ``gen.py``'s, so a case stays a function
of its seed.
"""

from __future__ import annotations

from .case import Tensor

__all__ = ["KernelSource"]


class KernelSource:
    """Lines of kernel source at an indentation level, and the emitters that write them.
    ``descs``: tensor name -> the name of its device-side tensor descriptor, once made."""

    def __init__(self):
        self.lines: list[str] = []
        self.ind = 1
        self.descs: dict[str, str] = {}

    def __call__(self, *lines: str):
        for ln in lines:
            self.lines.append("    " * self.ind + ln)

    def push(self):
        self.ind += 1

    def text(self) -> str:
        return "\n".join(self.lines)

    # ------------------------------------------------------------- access emitters
    def access2(self, style: str, t: Tensor, r0: str, c0: str, BR: str, BC: str, R: str,
                C: str, kind: str, value: str | None = None, tag: str = "") -> str:
        """Emit one 2-D tile access of ``t`` at ``(r0, c0)``; return the loaded value's name."""
        e = self  # e(...) emits lines
        p = t.name[0] + tag
        if style == "block_ptr":
            e(f"{p}_bp = tl.make_block_ptr({t.name}, ({R}, {C}), ({t.stride}, 1), ({r0}, {c0}), "
              f"({BR}, {BC}), (1, 0))")
            if kind == "load":
                e(f"{p}_v = tl.load({p}_bp, boundary_check=(0, 1), padding_option=\"zero\")")
            else:
                e(f"tl.store({p}_bp, {value}.to({t.name}.dtype.element_ty), "
                  f"boundary_check=(0, 1))")
            return f"{p}_v"
        if style == "tensor_desc":
            d = self.descs[t.name]
            if kind == "load":
                e(f"{p}_v = {d}.load([{r0}, {c0}])")
            else:
                e(f"{d}.store([{r0}, {c0}], {value}.to({t.name}.dtype.element_ty))")
            return f"{p}_v"
        e(f"{p}_r = {r0} + tl.arange(0, {BR})", f"{p}_c = {c0} + tl.arange(0, {BC})")
        inner = f"{p}_c[None, :] * {t.name[0]}_sn" if style == "ptr_stride" else f"{p}_c[None, :]"
        e(f"{p}_ptrs = {t.name} + {p}_r[:, None] * {t.stride} + {inner}")
        mask = ""
        if style in ("ptr_mask", "ptr_stride"):
            e(f"{p}_m = ({p}_r[:, None] < {R}) & ({p}_c[None, :] < {C})")
            mask = f", mask={p}_m"
        if style == "hint":
            e(f"sl.hint_region2({t.name}, {r0}, {r0} + {BR}, {c0}, {c0} + {BC})")
        if kind == "load":
            e(f"{p}_v = tl.load({p}_ptrs{mask}{', other=0.0' if mask else ''})")
        else:
            e(f"tl.store({p}_ptrs, {value}.to({t.name}.dtype.element_ty){mask})")
        return f"{p}_v"

    def store1(self, style: str, t: Tensor, r0: str, BR: str, R: str, value: str):
        """Emit a 1-D tile store of ``t`` (a row-sum output) in the kernel's style."""
        e = self  # e(...) emits lines
        v = f"{value}.to({t.name}.dtype.element_ty)"
        if style == "block_ptr":
            e(f"y_bp = tl.make_block_ptr({t.name}, ({R},), (1,), ({r0},), ({BR},), (0,))",
              f"tl.store(y_bp, {v}, boundary_check=(0,))")
            return
        if style == "tensor_desc":
            e(f"{self.descs[t.name]}.store([{r0}], {v})")
            return
        e(f"y_r = {r0} + tl.arange(0, {BR})")
        if style == "hint":
            e(f"sl.hint_region1({t.name}, {r0}, {r0} + {BR})")
        if style in ("ptr_nomask", "hint"):
            e(f"tl.store({t.name} + y_r, {v})")
        else:
            e(f"tl.store({t.name} + y_r, {v}, mask=y_r < {R})")

    # ------------------------------------------------------------- tiling
    def tiling(self, t: str, n_m: str, n_n: str | None) -> tuple[str, str | None]:
        """Emit the code that picks this program's tile in tiling ``t``; return the row-tile and
        column-tile coordinate expressions (the column one is None for one-dimensional ones)."""
        e = self  # e(...) emits lines
        e(f"n_m = {n_m}")
        if n_n:
            e(f"n_n = {n_n}")
        if t == "grid2d":
            e("pm = tl.program_id(0)")
            if n_n:
                e("pn = tl.program_id(1)")
            return "pm", ("pn" if n_n else None)
        e("pid = tl.program_id(0)")
        if t in ("persistent", "persistent_np"):
            step = "NUM_PROGS" if t == "persistent" else "tl.num_programs(0)"
            total = "n_m * n_n" if n_n else "n_m"
            e(f"for tile in range(pid, {total}, {step}):")
            self.push()
            if not n_n:
                return "tile", None
            e("pm = tile // n_n", "pn = tile % n_n")
            return "pm", "pn"
        if not n_n:
            return "pid", None
        if t == "row1d":
            e("pm = pid // n_n", "pn = pid % n_n")
        elif t == "colmajor":
            e("pn = pid // n_m", "pm = pid % n_m")
        elif t == "derived":
            e("pm = pid // n_n", "pn = pid - pm * n_n")
        elif t == "grouped":
            e("group = pid // (GROUP_M * n_n)", "first_m = group * GROUP_M",
              "gsize = tl.minimum(n_m - first_m, GROUP_M)",
              "pm = first_m + (pid % (GROUP_M * n_n)) % gsize",
              "pn = (pid % (GROUP_M * n_n)) // gsize")
        return "pm", "pn"
