"""Argument binding and specialisation: what Triton's JIT does with a call before it compiles,
done for the fused kernel (``FusedKernel`` compiles once per :class:`Specialization`).

Kept apart from the launch path so it is testable on CPU: Triton is imported only inside
:func:`specialize` (its ``native_specialize_impl``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from ..errors import LaunchError


@dataclass(frozen=True)
class Specialization:
    """The compile-relevant facts of one call: signature, constexprs, divisibility attrs."""

    signature: tuple  # ((name, type), ...) in parameter order; "constexpr" for constexprs
    constexprs: tuple  # ((name, value), ...)
    attrs: tuple  # ((index, (("tt.divisibility", 16),)), ...)

    def signature_dict(self) -> dict:
        return dict(self.signature)

    def constexpr_dict(self) -> dict:
        return dict(self.constexprs)

    def attrs_dict(self) -> dict:
        return {(i,): [list(a) for a in v] for i, v in self.attrs}


def param_names(kernel) -> list[str]:
    names = getattr(kernel, "arg_names", None)
    if names is None:
        names = list(inspect.signature(getattr(kernel, "fn", kernel)).parameters)
    return list(names)


def _params(kernel) -> list:
    """Triton ``KernelParam``s, or stand-ins for a plain function (tests)."""
    ps = getattr(kernel, "params", None)
    if ps is not None:
        return list(ps)

    @dataclass
    class _P:
        name: str
        is_constexpr: bool
        is_const: bool = False
        do_not_specialize: bool = False
        do_not_specialize_on_alignment: bool = False

    sig = inspect.signature(getattr(kernel, "fn", kernel))
    return [_P(n, "constexpr" in str(p.annotation)) for n, p in sig.parameters.items()]


LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion",
                  "launch_cooperative_grid", "launch_pdl")


def bind_args(kernel, args, kwargs) -> tuple[list, dict]:
    """Bind a call's positional and keyword arguments to the kernel's parameters (defaults
    applied). Returns ``(values in parameter order, launch options found in kwargs)``."""
    kwargs = dict(kwargs)
    options = {k: kwargs.pop(k) for k in list(kwargs) if k in LAUNCH_OPTIONS}
    names = param_names(kernel)
    try:
        sig = inspect.signature(getattr(kernel, "fn", kernel))
        ba = sig.bind(*args, **kwargs)
    except TypeError as e:
        raise LaunchError(f"arguments do not match the kernel's parameters ({', '.join(names)}): "
                          f"{e}. Pass exactly the arguments of the unfused kernel, constexprs "
                          f"included") from None
    ba.apply_defaults()
    return [ba.arguments[n] for n in names], options


def specialize(kernel, values, constants=frozenset()) -> Specialization:
    """Signature/constexprs/attrs for ``values`` the way Triton 3.6's JIT specialises them
    (``native_specialize_impl``: pointers typed by dtype, ints as i32/i64, ``== 1`` and None as
    constexprs, 16-divisibility as ``tt.divisibility``).  Parameters named in ``constants`` are
    compiled as constexprs of their values (``fuse(..., constant_args=...)``), as Triton's JIT
    does with an int equal to 1: the launcher still receives them in position and ignores them."""
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    sig, cx, attrs = [], [], []
    for i, (p, v) in enumerate(zip(_params(kernel), values)):
        if p.is_constexpr or p.name in constants:
            sig.append((p.name, "constexpr"))
            cx.append((p.name, v))
            continue
        ty, key = native_specialize_impl(BaseBackend, v, p.is_const, not p.do_not_specialize,
                                         not p.do_not_specialize_on_alignment)
        if ty == "constexpr":
            sig.append((p.name, "constexpr"))
            cx.append((p.name, v))
            continue
        sig.append((p.name, ty))
        if isinstance(key, str) and "D" in key:
            attrs.append((i, (("tt.divisibility", 16),)))
    return Specialization(tuple(sig), tuple(cx), tuple(attrs))


def freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, freeze(x)) for k, x in v.items()))
    return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)
