"""Integer polynomials over SSA values: the algebra of the access analysis.

A pointer or index tensor in TTIR is built from scalars (program ids, loop counters, kernel
arguments) and ``tt.make_range`` vectors by ``splat``/``broadcast``/``expand_dims`` and integer
``+ - *``.  Every such value is a polynomial with integer coefficients whose variables are

* scalar SSA values (*leaves*): anything we do not look through, such as ``pid // n``,
* :class:`Axis` ``i``: the element index along axis ``i`` of the tensor (``0 <= Axis(i) < n_i``),
* :class:`IterCount`: the iteration number of an ``scf.for`` (for loop-carried pointers).

Keeping the scalar part symbolic is what lets the passes re-materialise the region a tile
touches at any program point where its leaves are defined (before a K loop, for instance).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Union

from xdsl.ir import Operation, SSAValue


@dataclass(frozen=True)
class Axis:
    """The element index along axis ``index`` of the tensor being described."""

    index: int

    def __repr__(self) -> str:
        return f"ax{self.index}"


class IterCount:
    """The iteration number ``(iv - lb) / step`` of an ``scf.for`` loop, as a variable."""

    __slots__ = ("loop",)

    def __init__(self, loop: Operation):
        self.loop = loop

    def __eq__(self, other) -> bool:
        return isinstance(other, IterCount) and other.loop is self.loop

    def __hash__(self) -> int:
        return hash(("iter", id(self.loop)))

    def __repr__(self) -> str:
        return f"iter({self.loop.name})"


Var = Union[SSAValue, Axis, IterCount]


def _var_key(v: Var) -> tuple:
    if isinstance(v, Axis):
        return (0, v.index)
    if isinstance(v, IterCount):
        return (1, id(v.loop))
    return (2, id(v))


Mono = tuple  # sorted tuple of Vars (with repetition), () is the constant monomial


def _mono(vars_: Iterable[Var]) -> Mono:
    return tuple(sorted(vars_, key=_var_key))


class Poly:
    """Sparse polynomial ``sum(coef * prod(vars))``; immutable by convention."""

    __slots__ = ("terms",)

    def __init__(self, terms: dict[Mono, int] | None = None):
        self.terms = {m: c for m, c in (terms or {}).items() if c != 0}

    # constructors --------------------------------------------------------------------------
    @staticmethod
    def const(c: int) -> "Poly":
        return Poly({(): c})

    @staticmethod
    def var(v: Var) -> "Poly":
        return Poly({(v,): 1})

    # algebra --------------------------------------------------------------------------------
    def __add__(self, other: "Poly") -> "Poly":
        out = dict(self.terms)
        for m, c in other.terms.items():
            out[m] = out.get(m, 0) + c
        return Poly(out)

    def __neg__(self) -> "Poly":
        return Poly({m: -c for m, c in self.terms.items()})

    def __sub__(self, other: "Poly") -> "Poly":
        return self + (-other)

    def __mul__(self, other: "Poly") -> "Poly":
        out: dict[Mono, int] = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in other.terms.items():
                m = _mono(m1 + m2)
                out[m] = out.get(m, 0) + c1 * c2
        return Poly(out)

    # queries --------------------------------------------------------------------------------
    def __eq__(self, other) -> bool:
        return isinstance(other, Poly) and self.terms == other.terms

    def __hash__(self) -> int:
        return hash(frozenset(self.terms.items()))

    @property
    def is_const(self) -> bool:
        return all(m == () for m in self.terms)

    @property
    def const_value(self) -> int:
        return self.terms.get((), 0)

    def vars(self) -> set:
        return {v for m in self.terms for v in m}

    def axes(self) -> set[int]:
        return {v.index for v in self.vars() if isinstance(v, Axis)}

    def map_axes(self, fn) -> "Poly":
        """Rename axis variables (``fn(i) -> j``), e.g. for ``expand_dims`` and ``trans``."""
        out: dict[Mono, int] = {}
        for m, c in self.terms.items():
            nm = _mono(Axis(fn(v.index)) if isinstance(v, Axis) else v for v in m)
            out[nm] = out.get(nm, 0) + c
        return Poly(out)

    def split_axes(self) -> tuple["Poly", dict[int, "Poly"]]:
        """``self == scalar + sum(coef_i * Axis(i))``: the scalar part and each axis's
        coefficient; raises ValueError if an axis appears non-linearly."""
        scalar: dict[Mono, int] = {}
        coefs: dict[int, dict[Mono, int]] = {}
        for m, c in self.terms.items():
            ax = [v for v in m if isinstance(v, Axis)]
            if not ax:
                scalar[m] = c
                continue
            if len(ax) > 1:
                raise ValueError("an axis index appears in a product with another axis index")
            rest = tuple(v for v in m if not isinstance(v, Axis))
            coefs.setdefault(ax[0].index, {})
            coefs[ax[0].index][rest] = coefs[ax[0].index].get(rest, 0) + c
        return Poly(scalar), {a: Poly(t) for a, t in coefs.items()}

    def __repr__(self) -> str:
        if not self.terms:
            return "0"
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda kv: [_var_key(v) for v in kv[0]]):
            names = "*".join(_var_name(v) for v in m)
            if not names:
                parts.append(str(c))
            elif c == 1:
                parts.append(names)
            else:
                parts.append(f"{c}*{names}")
        return " + ".join(parts)


def _var_name(v: Var) -> str:
    if isinstance(v, (Axis, IterCount)):
        return repr(v)
    name = getattr(v, "name_hint", None)
    return f"%{name}" if name else f"%v{id(v) % 10000}"
