"""Repairs of Triton 3.6's interpreter (``TRITON_INTERPRET=1``) that our kernels need to give
right answers on CPU tensors; :mod:`syncopate.kernels` installs them when the interpreter is on
and never touches the compiled path.

* A scalar tensor's ``__index__``: NumPy >= 2.4 refuses ``int()`` of a 1-element 1-D array,
  which is what the interpreter holds for a scalar, so ``range(0, SEQ_KV, BLOCK_N)`` raised
  "only 0-dimensional arrays can be converted to Python scalars". Element 0 is read instead.
* ``tl.dot`` of bf16 or e4m3 operands: the interpreter stores them as their uint16 / uint8 bit
  patterns and multiplies whatever arrays it holds, i.e. the bit patterns. The operands are
  decoded to fp32 first (exact: every bf16 and e4m3 value is an fp32 value). The interpreter
  then accumulates in fp32 (no model of Hopper's reduced-precision FP8 accumulation).

The kernels are not bent for the interpreter; these functions are the only place that knows
about its limits. ``install`` is idempotent.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
import triton.language as tl
import triton.runtime.interpreter as interp


def _widen(h):
    """A dot operand as fp32 values (bf16 / e4m3 bit patterns decoded); others unchanged."""
    if h.dtype.scalar == tl.bfloat16:
        return interp.TensorHandle((h.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
    if h.dtype.scalar == tl.float8e4nv:
        bits = torch.from_numpy(np.ascontiguousarray(h.data).astype(np.uint8))
        return interp.TensorHandle(bits.view(torch.float8_e4m3fn).float().numpy(), tl.float32)
    return h


@functools.cache
def install() -> None:
    """Patch the interpreter (module docstring); a second call does nothing."""
    patch_tensor, dot = interp._patch_lang_tensor, interp.InterpreterBuilder.create_dot

    def _patch_lang_tensor(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    def _create_dot(self, a, b, d, *args):
        return dot(self, _widen(a), _widen(b), d, *args)

    interp._patch_lang_tensor = _patch_lang_tensor
    interp.InterpreterBuilder.create_dot = _create_dot
