"""What ``syncopate.compile`` (and the emulator's front end) checks before and around Triton.

Triton reports some mistakes late and badly: an unknown signature type is a bare
``KeyError: 'int'``, a target it can compile for but our fused code cannot run on (sm_80)
fails inside ptxas with thousands of lines of PTX and a request to report a Triton bug, and an
AMD target trips an ``assert``.  These functions refuse such input up front with a
:class:`~syncopate.errors.CompileError` that says what to change, and turn Triton's own
``CompilationError`` (an error in the user's kernel) into a one-line ``CompileError`` with the
kernel's ``file:line``.
"""

from __future__ import annotations

import inspect
import re
from .errors import CompileError

#: the oldest CUDA architecture the fused code runs on: it relies on sm_90's acquire/release
#: system-scope memory operations and the TMA/wgmma paths of the local GEMMs
MIN_CUDA_ARCH = 90


def triton_scalar_types() -> tuple[str, ...]:
    """Triton's scalar type names (``i32``, ``bf16``, ``fp8e4nv``...), from Triton itself."""
    from triton._utils import type_canonicalisation_dict
    return tuple(sorted(set(type_canonicalisation_dict.values()) - {"void"}))


def is_signature_type(ty: str) -> bool:
    """Whether Triton takes ``ty`` in a signature: ``constexpr``, a scalar, ``*SCALAR``
    (``*kSCALAR``: constant memory) or a tensor descriptor."""
    if ty == "constexpr" or ty.startswith("tensordesc"):
        return True
    elem = ty[1:].removeprefix("k") if ty.startswith("*") else ty
    return elem in triton_scalar_types()


def check_signature_types(kernel_name: str, signature) -> None:
    for n, t in signature.items():
        if not isinstance(t, str) or not is_signature_type(t):
            raise CompileError(f"signature of {kernel_name}: {n}={t!r} is not a Triton type; "
                               f"use *DTYPE for a pointer (e.g. *bf16), a scalar "
                               f"({', '.join(triton_scalar_types())}) or 'constexpr'")


def check_target(target) -> None:
    """Refuse a target the fused code cannot run on, before Triton compiles for it."""
    backend, arch = (target.backend, target.arch) if hasattr(target, "backend") else \
        (tuple(target) + (None, None))[:2]
    if backend != "cuda":
        raise CompileError(f"target {backend!r}: Syncopate's fused kernels are CUDA only (its "
                           f"lowerings emit PTX); use target=('cuda', {MIN_CUDA_ARCH})")
    if not isinstance(arch, int) or arch < MIN_CUDA_ARCH:
        raise CompileError(f"target ('cuda', {arch!r}): the fused code needs sm_"
                           f"{MIN_CUDA_ARCH} or newer (system-scope acquire/release, TMA); "
                           f"use target=('cuda', {MIN_CUDA_ARCH})")


def compilation_error(kernel, err) -> "CompileError":
    """Triton's ``CompilationError`` on ``kernel`` as one line: ``file:line: message``."""
    message = getattr(err, "error_message", None) or (
        str(err.__cause__) if err.__cause__ else str(err).splitlines()[-1])
    message = " ".join(str(message).split())
    location = None
    node = getattr(err, "node", None)
    if hasattr(node, "lineno"):
        try:
            lines, start = inspect.getsourcelines(kernel.fn)
            at_def = next(i for i, ln in enumerate(lines) if re.match(r"\s*def\s", ln))
            location = f"{inspect.getsourcefile(kernel.fn)}:{start + at_def + node.lineno - 1}"
        except (OSError, TypeError, StopIteration):
            location = None
    name = getattr(kernel, "__name__", "the kernel")
    return CompileError(f"Triton cannot compile {name}: {message}", location=location)
