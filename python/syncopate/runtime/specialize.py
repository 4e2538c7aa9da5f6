"""Argument binding and specialisation: what Triton's JIT does with a call before it compiles,
done for the fused kernel (``FusedKernel`` compiles once per :class:`Specialization`).

Kept apart from the launch path so it is testable on CPU: Triton is imported only inside
:func:`specialize` (its ``native_specialize_impl``).
"""

from __future__ import annotations

import inspect
import operator
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
        ty, key = (("constexpr", None) if p.is_constexpr or p.name in constants else
                   native_specialize_impl(BaseBackend, v, p.is_const, not p.do_not_specialize,
                                          not p.do_not_specialize_on_alignment))
        sig.append((p.name, ty))
        if ty == "constexpr":
            cx.append((p.name, v))
        elif isinstance(key, str) and "D" in key:
            attrs.append((i, (("tt.divisibility", 16),)))
    return Specialization(tuple(sig), tuple(cx), tuple(attrs))


def freeze(v):
    if isinstance(v, (list, tuple)):
        return tuple(freeze(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, freeze(x)) for k, x in v.items()))
    return v if isinstance(v, (int, float, str, bool, type(None))) else repr(v)


#: (argument types, operand positions) -> :class:`_KeyPlan`, or False when an argument's type
#: has no key (the slow path). Bounded: a caller cycling through many type layouts clears it.
_KEY_PLANS: dict = {}
_SCALAR_TYPES = (bool, int, float, str, type(None))


class _KeyPlan:
    """Where the scalars and the tensors of one argument-type layout are: the scalars are read
    with one C-level ``itemgetter``, the tensors one by one (they are few)."""

    __slots__ = ("scalars", "operands", "tensors")

    def __init__(self, types, ops):
        import torch
        scal, opnd, tens = [], [], []
        for i, t in enumerate(types):
            if issubclass(t, torch.Tensor):
                (opnd if i in ops else tens).append(i)
            elif issubclass(t, _SCALAR_TYPES):  # subclasses: the type in the key tells them apart
                scal.append(i)
            else:
                raise TypeError(t)
        if not scal:
            self.scalars = lambda args: ()
        elif len(scal) == 1:
            only = scal[0]
            self.scalars = lambda args: (args[only],)
        else:
            self.scalars = operator.itemgetter(*scal)
        self.operands = tuple(opnd)
        self.tensors = tuple(tens)


def launch_key(ops, generation, grid, args, kwargs):
    """A hashable key for a launch, or None (no fast path): positional arguments only;
    operand tensors by (address, shape, strides, dtype, device); other tensors by what
    Triton specialises on -- dtype, device and 16-byte alignment -- so a fresh output
    tensor each call still hits; other values by type and value; plus the grid (when not
    callable) and ``generation``, the communicator's registry generation; ``ops``: the
    positions of the operand parameters (a frozenset). Everything the slow path derives
    from a call -- binding, validation, specialisation, the compiled configuration,
    requirements, the peers table -- is a function of this key.

    Every argument's type is in the key (so a scalar ``1`` and ``True`` or ``1.0`` differ,
    and the positions of the values that follow are fixed by it); the scalars' values come
    next, then each operand's five items and each other tensor's three. Where each kind is
    depends only on the types: worked out once per type layout (:class:`_KeyPlan`), since this
    runs on every launch (scripts/host_overhead_cpu.py measures it)."""
    if kwargs:
        return None
    types = tuple(map(type, args))
    pk = (types, ops)
    plan = _KEY_PLANS.get(pk)
    if plan is None:
        try:
            plan = _KeyPlan(types, ops)
        except TypeError:
            plan = False
        if len(_KEY_PLANS) >= 256:
            _KEY_PLANS.clear()
        _KEY_PLANS[pk] = plan
    if plan is False:
        return None
    key = [generation, types, plan.scalars(args)]
    for i in plan.operands:
        v = args[i]
        key += (v.data_ptr(), v.shape, v.stride(), v.dtype, v.device)
    for i in plan.tensors:
        v = args[i]
        key += (v.dtype, v.device, v.data_ptr() & 15 == 0)
    key.append(None if callable(grid) else tuple(grid))
    return tuple(key)

