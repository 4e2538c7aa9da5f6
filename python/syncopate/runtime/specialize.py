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


#: tags of tensor arguments in a launch key (:meth:`FusedKernel._launch_key`)
_OPERAND, _TENSOR = object(), object()


class _LazyTensor:
    """``isinstance(v, _Tensor)`` without importing torch at module import (the runtime imports
    torch lazily): resolves ``torch.Tensor`` on first use."""

    def __instancecheck__(self, v) -> bool:
        import torch
        global _Tensor
        _Tensor = torch.Tensor
        return isinstance(v, torch.Tensor)


_Tensor = _LazyTensor()


def launch_key(ops, generation, grid, args, kwargs):
    """A hashable key for a launch, or None (no fast path): positional arguments only;
    operand tensors by (address, shape, strides, dtype, device); other tensors by what
    Triton specialises on -- dtype, device and 16-byte alignment -- so a fresh output
    tensor each call still hits; other values by type and value; plus the grid (when not
    callable) and ``generation``, the communicator's registry generation; ``ops``: the
    positions of the operand parameters. Everything the slow path derives
    from a call -- binding, validation, specialisation, the compiled configuration,
    requirements, the peers table -- is a function of this key.

    The key is one flat tuple: each argument contributes a tag (its type for scalars,
    :data:`_OPERAND` or :data:`_TENSOR`) that fixes how many items follow, so two calls
    share a key only if every argument does. Flat and without per-argument tuples because
    it runs on every launch (scripts/host_overhead_cpu.py measures it)."""
    if kwargs:
        return None
    key = [len(args), generation]
    put = key.append
    for i, v in enumerate(args):
        t = type(v)
        if t is int or t is float or t is bool or t is str or v is None:
            put(t)
            put(v)
        elif isinstance(v, _Tensor):
            if i in ops:
                key += (_OPERAND, v.data_ptr(), v.shape, v.stride(), v.dtype, v.device)
            else:
                key += (_TENSOR, v.dtype, v.device, v.data_ptr() & 15 == 0)
        elif isinstance(v, (bool, int, float, str)):  # subclasses: the type tells them apart
            put(t)
            put(v)
        else:
            return None
    put(None if callable(grid) else tuple(grid))
    return tuple(key)

